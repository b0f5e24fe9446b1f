//! Making untrusted text safe to store, to put into an error message or a log line.

/// Replaces control characters (NUL among them, which PostgreSQL refuses in text) with `?` and cuts to
/// `max_chars` characters, so a hostile key, id or message cannot forge log lines, flood them, or fail
/// the statement that stores it.
pub fn sanitize(text: &str, max_chars: usize) -> String {
    text.chars()
        .take(max_chars)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// A short machine word such as an error type: ASCII letters, digits and `. _ : -` kept, anything else
/// replaced with `_`, cut to `max_chars`; `None` when nothing is left. Safe in a column, a log field
/// and a metric label alike.
pub fn token(text: &str, max_chars: usize) -> Option<String> {
    let token: String = text
        .chars()
        .take(max_chars)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::{sanitize, token};

    #[test]
    fn replaces_control_characters_and_cuts() {
        assert_eq!(sanitize("a\nb\u{7}c", 10), "a?b?c");
        assert_eq!(sanitize("a\0b\u{1b}[31m\u{85}", 10), "a?b?[31m?");
        assert_eq!(sanitize("abcdef", 3), "abc");
    }

    #[test]
    fn a_token_keeps_only_word_characters_and_is_cut() {
        assert_eq!(token("http_5xx", 64).as_deref(), Some("http_5xx"));
        assert_eq!(
            token("java.io.IOException", 64).as_deref(),
            Some("java.io.IOException")
        );
        assert_eq!(token("a\0b c\nd€", 64).as_deref(), Some("a_b_c_d_"));
        assert_eq!(token("abcdef", 3).as_deref(), Some("abc"));
        assert_eq!(token("", 64), None);
    }
}
