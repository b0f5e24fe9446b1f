//! Absolute paths of the plugin components this crate's build script builds from source, one
//! `&str` constant per crate in `plugins/<name>/` and `tests/plugins/<name>/`: `NOOP`, `WEBHOOK`,
//! `STATS`, `HOSTILE`, `SCRIPTED`, `RECORDER`.

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
