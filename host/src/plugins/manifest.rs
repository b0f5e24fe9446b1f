//! The `<stem>.toml` manifest beside a plugin (DESIGN §5): the only source of its grants.
//!
//! Each section but `[limits]` belongs to a capability, which reads it
//! ([`crate::plugins::capabilities`]); this module reads the limits, hands every other section to
//! its capability and refuses a section none owns. Parsed by hand from a TOML table rather than with
//! serde so that every message names the key (and the index of a list entry,
//! `http.allowed_hosts[0]`) and never quotes a value: `[config]` values are often secrets, and an
//! allow-list entry may carry credentials.

use std::fmt;
use std::time::Duration;

use toml::{Table, Value};

use crate::plugins::capabilities::Grants;

/// What one plugin may take of the host: memory and time per call, calls at once, log volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// All linear memories of one instance together, in MiB.
    pub memory_mb: u32,
    /// One call, from taking an instance to its result, in milliseconds.
    pub timeout_ms: u64,
    /// Calls running at once, and so instances alive at once (each call has one of its own).
    pub max_concurrency: u32,
    /// Log lines a second, across the plugin's log interface, stdout and stderr.
    pub log_lines_per_second: u32,
    /// Log bytes a second, likewise.
    pub log_bytes_per_second: u32,
}

impl Limits {
    /// Enough for a componentize-py or ComponentizeJS plugin, whose runtimes alone take tens of MiB.
    pub const DEFAULT_MEMORY_MB: u32 = 128;
    /// The engine's pooling allocator reserves room for memories of up to this size.
    pub const MAX_MEMORY_MB: u32 = 1024;
    pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
    /// Kept below the relay's default lease (30 s) with room to spare, so a slow call does not
    /// outlive its row's claim.
    pub const MAX_TIMEOUT_MS: u64 = 20_000;
    /// Half of one relay loop's default `max_in_flight` (64): a slow plugin can hold at most half of
    /// the loop's publishes, and at most this many of the engine's instances.
    pub const DEFAULT_MAX_CONCURRENCY: u32 = 32;
    /// The engine's instance pool holds 1,000 by default; no plugin may ask for more than a quarter.
    pub const MAX_CONCURRENCY: u32 = 250;
    pub const DEFAULT_LOG_LINES_PER_SECOND: u32 = 100;
    pub const DEFAULT_LOG_BYTES_PER_SECOND: u32 = 64 * 1024;
    pub const MAX_LOG_LINES_PER_SECOND: u32 = 10_000;
    pub const MAX_LOG_BYTES_PER_SECOND: u32 = 16 * 1024 * 1024;

    pub fn memory_bytes(self) -> usize {
        self.memory_mb as usize * 1024 * 1024
    }

    pub fn timeout(self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mb: Self::DEFAULT_MEMORY_MB,
            timeout_ms: Self::DEFAULT_TIMEOUT_MS,
            max_concurrency: Self::DEFAULT_MAX_CONCURRENCY,
            log_lines_per_second: Self::DEFAULT_LOG_LINES_PER_SECOND,
            log_bytes_per_second: Self::DEFAULT_LOG_BYTES_PER_SECOND,
        }
    }
}

/// What a plugin is granted. The default (no manifest) grants nothing and applies default limits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Manifest {
    pub(crate) grants: Grants,
    pub limits: Limits,
}

/// Why a manifest was rejected; the plugin beside it is then not loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("not valid TOML{}: {message}", line.map(|n| format!(" (line {n})")).unwrap_or_default())]
    Syntax {
        line: Option<usize>,
        message: String,
    },
    #[error("unknown key `{0}`")]
    UnknownKey(String),
    #[error("`{key}` must be {expected}")]
    WrongType { key: String, expected: &'static str },
    #[error("`{key}` must be between {min} and {max}")]
    OutOfRange {
        key: &'static str,
        min: u64,
        max: u64,
    },
    /// A value its capability refused: `reason` says why without quoting the value.
    #[error("`{key}` {reason}")]
    Invalid { key: String, reason: String },
}

impl Manifest {
    pub fn parse(text: &str) -> Result<Self, ManifestError> {
        let table: Table =
            text.parse()
                .map_err(|error: toml::de::Error| ManifestError::Syntax {
                    line: error.span().map(|span| line_number(text, span.start)),
                    message: crate::config::value_free(error.message()),
                })?;
        let mut manifest = Manifest::default();
        for (section, value) in &table {
            match section.as_str() {
                "limits" => manifest.read_limits(section_table(section, value)?)?,
                _ => manifest.grants.read_section(section, value)?,
            }
        }
        Ok(manifest)
    }

    fn read_limits(&mut self, entries: &Table) -> Result<(), ManifestError> {
        for (key, value) in entries {
            match key.as_str() {
                "memory_mb" => {
                    self.limits.memory_mb =
                        small_integer("limits.memory_mb", value, Limits::MAX_MEMORY_MB)?;
                }
                "timeout_ms" => {
                    self.limits.timeout_ms =
                        integer_in_range("limits.timeout_ms", value, Limits::MAX_TIMEOUT_MS)?;
                }
                "max_concurrency" => {
                    self.limits.max_concurrency =
                        small_integer("limits.max_concurrency", value, Limits::MAX_CONCURRENCY)?;
                }
                "log_lines_per_second" => {
                    self.limits.log_lines_per_second = small_integer(
                        "limits.log_lines_per_second",
                        value,
                        Limits::MAX_LOG_LINES_PER_SECOND,
                    )?;
                }
                "log_bytes_per_second" => {
                    self.limits.log_bytes_per_second = small_integer(
                        "limits.log_bytes_per_second",
                        value,
                        Limits::MAX_LOG_BYTES_PER_SECOND,
                    )?;
                }
                _ => return Err(ManifestError::UnknownKey(format!("limits.{key}"))),
            }
        }
        Ok(())
    }
}

/// The entries of a section, which must be a table.
pub(crate) fn section_table<'a>(
    section: &str,
    value: &'a Value,
) -> Result<&'a Table, ManifestError> {
    match value {
        Value::Table(entries) => Ok(entries),
        _ => Err(ManifestError::WrongType {
            key: section.to_owned(),
            expected: "a table",
        }),
    }
}

/// A list of strings, each read by `parse`; an entry it refuses is named by key and index
/// (`http.allowed_hosts[1]`), followed by the refusal, which must not quote the entry.
pub(crate) fn pattern_list<T, E: fmt::Display>(
    key: &str,
    value: &Value,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<Vec<T>, ManifestError> {
    string_list(key, value)?
        .into_iter()
        .enumerate()
        .map(|(index, entry)| {
            parse(entry).map_err(|reason| ManifestError::Invalid {
                key: format!("{key}[{index}]"),
                reason: reason.to_string(),
            })
        })
        .collect()
}

fn string_list<'a>(key: &str, value: &'a Value) -> Result<Vec<&'a str>, ManifestError> {
    let Value::Array(items) = value else {
        return Err(ManifestError::WrongType {
            key: key.to_owned(),
            expected: "a list of strings",
        });
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            item.as_str().ok_or_else(|| ManifestError::WrongType {
                key: format!("{key}[{index}]"),
                expected: "a string",
            })
        })
        .collect()
}

/// [`integer_in_range`] for limits kept as `u32`.
fn small_integer(key: &'static str, value: &Value, max: u32) -> Result<u32, ManifestError> {
    let number = integer_in_range(key, value, u64::from(max))?;
    Ok(u32::try_from(number).unwrap_or(max))
}

fn integer_in_range(key: &'static str, value: &Value, max: u64) -> Result<u64, ManifestError> {
    let Value::Integer(number) = value else {
        return Err(ManifestError::WrongType {
            key: key.to_owned(),
            expected: "an integer",
        });
    };
    u64::try_from(*number)
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or(ManifestError::OutOfRange { key, min: 1, max })
}

fn line_number(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::capabilities::http::HostPatternError;
    use crate::plugins::capabilities::kafka::TopicPattern;

    #[test]
    fn an_empty_manifest_grants_nothing_and_applies_default_limits() {
        let manifest = Manifest::parse("").unwrap();
        assert_eq!(manifest, Manifest::default());
        assert_eq!(
            manifest.limits,
            Limits {
                memory_mb: 128,
                timeout_ms: 10_000,
                max_concurrency: 32,
                log_lines_per_second: 100,
                log_bytes_per_second: 65_536,
            }
        );
    }

    #[test]
    fn the_design_example_is_read_in_full() {
        let manifest = Manifest::parse(
            r##"
            [http]
            allowed_hosts = ["https://hooks.example.com", "http://127.0.0.1:8080"]
            [kafka]
            topics = ["orders", "audit-*"]
            [config]
            channel = "#ops"
            [limits]
            memory_mb = 64
            timeout_ms = 5000
            "##,
        )
        .unwrap();
        assert_eq!(manifest.grants.http.len(), 2);
        assert_eq!(
            manifest.grants.kafka,
            [
                TopicPattern::Exact("orders".into()),
                TopicPattern::Prefix("audit-".into())
            ]
        );
        assert_eq!(
            manifest.grants.config.get("channel").map(String::as_str),
            Some("#ops")
        );
        assert_eq!(
            manifest.limits,
            Limits {
                memory_mb: 64,
                timeout_ms: 5000,
                ..Limits::default()
            }
        );
    }

    #[test]
    fn concurrency_and_log_budget_are_read_within_their_ranges() {
        let manifest = Manifest::parse(
            "[limits]\nmax_concurrency = 4\nlog_lines_per_second = 10\nlog_bytes_per_second = 2048",
        )
        .unwrap();
        assert_eq!(
            (
                manifest.limits.max_concurrency,
                manifest.limits.log_lines_per_second,
                manifest.limits.log_bytes_per_second
            ),
            (4, 10, 2048)
        );
        assert_eq!(
            Manifest::parse("[limits]\nmax_concurrency = 0").unwrap_err(),
            ManifestError::OutOfRange {
                key: "limits.max_concurrency",
                min: 1,
                max: 250
            }
        );
    }

    #[test]
    fn an_unknown_section_is_rejected_by_name() {
        assert_eq!(
            Manifest::parse("[network]\nopen = true").unwrap_err(),
            ManifestError::UnknownKey("network".into())
        );
    }

    #[test]
    fn an_unknown_key_in_a_section_is_rejected_with_its_full_name() {
        let error = Manifest::parse("[http]\nallowed_host = []").unwrap_err();
        assert_eq!(error.to_string(), "unknown key `http.allowed_host`");
        let error = Manifest::parse("[limits]\ncpu = 1").unwrap_err();
        assert_eq!(error.to_string(), "unknown key `limits.cpu`");
    }

    #[test]
    fn an_unknown_top_level_key_is_rejected() {
        assert_eq!(
            Manifest::parse("debug = true").unwrap_err(),
            ManifestError::UnknownKey("debug".into())
        );
    }

    #[test]
    fn a_config_value_that_is_not_a_string_is_rejected_without_quoting_it() {
        let error = Manifest::parse("[config]\ntoken = 123456789").unwrap_err();
        assert_eq!(error.to_string(), "`config.token` must be a string");
    }

    #[test]
    fn limits_outside_their_range_are_rejected() {
        for text in [
            "[limits]\nmemory_mb = 0",
            "[limits]\nmemory_mb = 4096",
            "[limits]\ntimeout_ms = -1",
            "[limits]\ntimeout_ms = 3600000",
        ] {
            assert!(
                matches!(Manifest::parse(text), Err(ManifestError::OutOfRange { .. })),
                "{text}"
            );
        }
    }

    #[test]
    fn a_bad_host_pattern_is_rejected_by_key_and_index() {
        let error = Manifest::parse(
            "[http]\nallowed_hosts = [\"https://ok.example.com\", \"hooks.example.com\"]",
        )
        .unwrap_err();
        assert_eq!(
            error,
            ManifestError::Invalid {
                key: "http.allowed_hosts[1]".into(),
                reason: HostPatternError::NotAnOrigin.to_string()
            }
        );
        assert!(
            error.to_string().starts_with("`http.allowed_hosts[1]` "),
            "{error}"
        );
    }

    #[test]
    fn a_host_pattern_with_credentials_is_rejected_without_quoting_them() {
        let error =
            Manifest::parse("[http]\nallowed_hosts = [\"https://svc:pa55@hooks.example.com\"]")
                .unwrap_err();
        let message = error.to_string();
        assert!(message.starts_with("`http.allowed_hosts[0]` "), "{message}");
        assert!(!message.contains("pa55"), "{message}");
        assert!(!message.contains("svc"), "{message}");
    }

    #[test]
    fn a_too_wide_wildcard_fails_the_manifest() {
        for pattern in ["https://*.com", "http://*.0.0.1:8080", "*"] {
            let text = format!("[http]\nallowed_hosts = [{pattern:?}]");
            assert!(
                matches!(
                    Manifest::parse(&text),
                    Err(ManifestError::Invalid { key, .. }) if key == "http.allowed_hosts[0]"
                ),
                "{pattern}"
            );
        }
    }

    #[test]
    fn a_bad_topic_pattern_is_rejected_by_key_and_index_without_quoting_it() {
        let error =
            Manifest::parse("[kafka]\ntopics = [\"orders\", \"s3cr3t topic\"]").unwrap_err();
        assert!(matches!(
            &error,
            ManifestError::Invalid { key, .. } if key == "kafka.topics[1]"
        ));
        assert!(
            error.to_string().starts_with("`kafka.topics[1]` "),
            "{error}"
        );
        assert!(!error.to_string().contains("s3cr3t"), "{error}");
    }

    #[test]
    fn a_list_entry_that_is_not_a_string_is_named_by_index() {
        let error = Manifest::parse("[http]\nallowed_hosts = [\"https://a.example.com\", 12345]")
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "`http.allowed_hosts[1]` must be a string"
        );
    }

    #[test]
    fn an_oversized_integer_is_rejected_without_quoting_it() {
        for text in [
            "[config]\ntoken = 98765432109876543210",
            "[limits]\nmemory_mb = 98765432109876543210",
        ] {
            let error = Manifest::parse(text).unwrap_err();
            assert!(
                !error.to_string().contains("98765432109876543210"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_syntax_error_names_its_line_but_not_the_text() {
        let error = Manifest::parse("[config]\nsecret = \"s3cr3t\nnext = 1").unwrap_err();
        let ManifestError::Syntax { line, .. } = &error else {
            panic!("{error}")
        };
        assert_eq!(*line, Some(2));
        assert!(!error.to_string().contains("s3cr3t"), "{error}");
    }
}
