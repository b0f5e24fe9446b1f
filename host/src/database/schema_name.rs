//! The configured schema that holds the outbox and inbox objects.

use std::fmt;

/// A schema name that is safe to splice into SQL unquoted: one PostgreSQL identifier, not a reserved
/// key word, not a system prefix. Validated once, so every statement built from it is sound.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SchemaName(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidSchemaName {
    #[error("is empty")]
    Empty,
    #[error("is longer than 63 bytes")]
    TooLong,
    #[error(
        "must start with a letter or underscore and contain only letters, digits and underscores"
    )]
    NotAnIdentifier,
    #[error("is a reserved PostgreSQL key word")]
    Reserved,
    #[error("starts with pg_, which PostgreSQL reserves for system schemas")]
    SystemPrefix,
}

/// Key words PostgreSQL reserves outright or allows only as function or type names: neither can name a
/// schema unquoted (PostgreSQL 15 documentation, appendix C).
const RESERVED: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "binary",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "group",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "intersect",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "natural",
    "not",
    "notnull",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "outer",
    "overlaps",
    "placing",
    "primary",
    "references",
    "returning",
    "right",
    "select",
    "session_user",
    "similar",
    "some",
    "symmetric",
    "system_user",
    "table",
    "tablesample",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
];

impl SchemaName {
    /// Accepts an unquoted identifier and keeps it lower-cased, as PostgreSQL folds it.
    pub fn parse(name: &str) -> Result<Self, InvalidSchemaName> {
        if name.is_empty() {
            return Err(InvalidSchemaName::Empty);
        }
        if name.len() > 63 {
            return Err(InvalidSchemaName::TooLong);
        }
        let mut chars = name.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(InvalidSchemaName::NotAnIdentifier);
        }
        let folded = name.to_ascii_lowercase();
        if RESERVED.contains(&folded.as_str()) {
            return Err(InvalidSchemaName::Reserved);
        }
        if folded.starts_with("pg_") {
            return Err(InvalidSchemaName::SystemPrefix);
        }
        Ok(SchemaName(folded))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SchemaName {
    type Error = InvalidSchemaName;

    fn try_from(name: String) -> Result<Self, InvalidSchemaName> {
        SchemaName::parse(&name)
    }
}

impl From<SchemaName> for String {
    fn from(name: SchemaName) -> String {
        name.0
    }
}

impl fmt::Display for SchemaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_plain_identifier_and_folds_it_to_lower_case() {
        assert_eq!(
            SchemaName::parse("Messaging_2").unwrap().as_str(),
            "messaging_2"
        );
    }

    #[test]
    fn rejects_what_is_not_one_identifier() {
        for bad in ["2fast", "a-b", "a.b", "a b", "x;drop", "é", "\"quoted\""] {
            assert_eq!(
                SchemaName::parse(bad),
                Err(InvalidSchemaName::NotAnIdentifier),
                "{bad}"
            );
        }
    }

    #[test]
    fn rejects_reserved_key_words_in_any_case() {
        assert_eq!(
            SchemaName::parse("Select"),
            Err(InvalidSchemaName::Reserved)
        );
        assert_eq!(SchemaName::parse("user"), Err(InvalidSchemaName::Reserved));
    }

    #[test]
    fn rejects_empty_too_long_and_system_names() {
        assert_eq!(SchemaName::parse(""), Err(InvalidSchemaName::Empty));
        assert_eq!(
            SchemaName::parse(&"a".repeat(64)),
            Err(InvalidSchemaName::TooLong)
        );
        assert_eq!(
            SchemaName::parse("pg_mine"),
            Err(InvalidSchemaName::SystemPrefix)
        );
    }
}
