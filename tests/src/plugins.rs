//! Absolute paths of the plugin components this crate's build script builds from source, one
//! `&str` constant per crate in `plugins/<name>/` and `tests/plugins/<name>/`: `NOOP`, `WEBHOOK`,
//! `STATS`, `HOSTILE`, `SCRIPTED`, `RECORDER`.

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));

/// The kafka example's shipped manifest (`plugins/kafka/kafka.toml`) with `topics` granted, so tests
/// and benchmarks run the limits a user gets.
pub fn kafka_manifest(topics: &[&str]) -> String {
    let shipped = include_str!("../../plugins/kafka/kafka.toml");
    let granted = shipped.replacen("topics = []", &format!("topics = {topics:?}"), 1);
    assert_ne!(granted, shipped, "kafka.toml no longer has `topics = []`");
    granted
}
