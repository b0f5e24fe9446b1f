//! The benchmarks repeat each figure over rounds, since the machine drifts between them, and
//! report the median round.

/// The middle value (the upper one of an even count); `values` must not be empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// The rounds the environment variable `variable` asks for, when it is set: benchmarks take it to
/// run fewer rounds for a quick look, or to run one part alone.
pub fn from_env(variable: &str) -> Option<usize> {
    let value = std::env::var(variable).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{variable} is a number of rounds")),
    )
}
