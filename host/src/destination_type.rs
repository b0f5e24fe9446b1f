//! Destination type ids: the key that routes a row to its plugin.

/// Checks an id on the write path: `^[A-Za-z0-9_-]{1,32}$`. The read path takes whatever the column
/// holds, so a row written for a plugin that is not deployed yet simply waits.
pub fn validate(id: &str) -> Result<(), InvalidDestinationType> {
    let well_formed = (1..=32).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if well_formed {
        Ok(())
    } else {
        Err(InvalidDestinationType {
            shown: crate::text::sanitize(id, 32),
        })
    }
}

/// The input is untrusted, so the message shows at most 32 characters of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid destination type {shown:?}: must match ^[A-Za-z0-9_-]{{1,32}}$")]
pub struct InvalidDestinationType {
    shown: String,
}

#[cfg(test)]
mod tests {
    use super::validate;

    #[test]
    fn accepts_letters_digits_dash_and_underscore_up_to_32() {
        for ok in ["WEBHOOK", "delayed_job", "a-1", &"X".repeat(32)] {
            assert!(validate(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_empty_too_long_and_other_characters() {
        for bad in ["", &"X".repeat(33), "a b", "a.b", "ü", "a\n"] {
            assert!(validate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn message_shows_at_most_32_characters_of_the_input() {
        let message = validate(&"y".repeat(100)).unwrap_err().to_string();
        assert!(message.contains(&"y".repeat(32)) && !message.contains(&"y".repeat(33)));
    }
}
