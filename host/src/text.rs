//! Making untrusted text safe to put into an error message or a log line.

/// Replaces control characters with `?` and cuts to `max_chars` characters, so a hostile key or id
/// cannot forge log lines or flood them.
pub fn sanitize(text: &str, max_chars: usize) -> String {
    text.chars()
        .take(max_chars)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn replaces_control_characters_and_cuts() {
        assert_eq!(sanitize("a\nb\u{7}c", 10), "a?b?c");
        assert_eq!(sanitize("abcdef", 3), "abc");
    }
}
