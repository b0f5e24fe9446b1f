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

/// A row's destination as a listing shows it: a URL keeps its scheme, host and path, with its user
/// info and its query and fragment masked (where URLs carry credentials and tokens); any other
/// destination (a topic, a name) as it is. Sanitized and cut like any text the host did not write.
pub fn masked_destination(destination: &str, max_chars: usize) -> String {
    let Some((scheme, rest)) = destination.split_once("://") else {
        return sanitize(destination, max_chars);
    };
    let (address, masked_tail) = match rest.find(['?', '#']) {
        Some(end) => (&rest[..end], "?****"),
        None => (rest, ""),
    };
    let authority_end = address.find('/').unwrap_or(address.len());
    let (authority, path) = address.split_at(authority_end);
    let host = match authority.rfind('@') {
        Some(at) => format!("****@{}", &authority[at + 1..]),
        None => authority.to_owned(),
    };
    sanitize(&format!("{scheme}://{host}{path}{masked_tail}"), max_chars)
}

#[cfg(test)]
mod tests {
    use super::{masked_destination, sanitize, token};

    #[test]
    fn a_url_destination_is_shown_without_its_user_info_query_or_fragment() {
        assert_eq!(
            masked_destination("https://svc:pw@hooks.example.com/in?token=t#f", 255),
            "https://****@hooks.example.com/in?****"
        );
        assert_eq!(
            masked_destination("http://127.0.0.1:8080/hook", 255),
            "http://127.0.0.1:8080/hook"
        );
        assert_eq!(masked_destination("orders.v1", 255), "orders.v1");
        assert_eq!(masked_destination("a\nb", 255), "a?b");
    }

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
