//! The error types the host gives failures itself. A row's `error_type` column and the `error_type`
//! metric labels hold one of these, or the short word a plugin named for a failure of its own.

/// A failure the host, not a plugin, names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostErrorType {
    /// A plugin call ran past its time limit.
    Timeout,
    /// A plugin trapped.
    Trap,
    /// A plugin went past its memory limit.
    Memory,
    /// No instance of a plugin could be made.
    Instantiate,
    /// A publish failed inside the host (its task panicked or was cancelled), not in the plugin.
    HostFailure,
    /// The database refused to store an attempt's outcome; the row was dead-lettered instead.
    Unrecordable,
    /// The row cannot be relayed as it was written.
    InvalidRow,
}

impl HostErrorType {
    /// The value stored in `error_type` and used as the `error_type` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Trap => "trap",
            Self::Memory => "memory",
            Self::Instantiate => "instantiate",
            Self::HostFailure => "host_failure",
            Self::Unrecordable => "unrecordable",
            Self::InvalidRow => "invalid_row",
        }
    }
}
