//! The benchmarks repeat each figure over rounds, since the machine drifts between them, and
//! report the median round.

/// The middle value (the upper one of an even count); `values` must not be empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}
