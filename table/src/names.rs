//! The client's naming rules. A name the 0.17.0 client would refuse to read
//! back (it raises on a bad limit name inside a stored config item) must be
//! refused before it is written; a bucket attribute whose name breaks the
//! limit grammar is no limit.

/// What a name names; each kind has its own rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Limit,
    Resource,
    Entity,
}

impl NameKind {
    pub fn label(self) -> &'static str {
        match self {
            NameKind::Limit => "limit",
            NameKind::Resource => "resource",
            NameKind::Entity => "entity id",
        }
    }
}

/// The longest entity id the 0.17.0 client takes (`MAX_IDENTIFIER_LENGTH`,
/// in characters of an ASCII alphabet, so also in bytes).
pub const MAX_ENTITY_BYTES: usize = 256;
/// The longest resource name it takes (`MAX_NAME_LENGTH`).
pub const MAX_RESOURCE_BYTES: usize = 64;

/// The infrastructure write-capacity limit; never declared, never reported as usage.
pub const WCU_LIMIT: &str = "wcu";

/// The longest namespace id the server side takes. The client's ids are 11
/// characters; this bounds every key, physical id and archive object key
/// built from one far below their services' limits.
pub const MAX_NAMESPACE_BYTES: usize = 128;

/// A namespace id of the client's shape: 1 to [`MAX_NAMESPACE_BYTES`] bytes
/// of `[A-Za-z0-9_-]`, so no `/` or `#` that would build keys of another
/// shape.
pub fn is_namespace_id(id: &str) -> bool {
    let id_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    !id.is_empty() && id.len() <= MAX_NAMESPACE_BYTES && id.chars().all(id_char)
}

/// The longest limit name the client takes (`MAX_NAME_LENGTH`).
pub const MAX_LIMIT_BYTES: usize = 64;

/// Limit names as the client validates them: `^[a-zA-Z][a-zA-Z0-9_.\-]*$`,
/// at most [`MAX_LIMIT_BYTES`] (a longer bucket attribute is a hand-written
/// one, and its name would reach logs, metrics and snapshot items).
pub fn is_limit_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_LIMIT_BYTES
        && matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Checks a name a manifest declares; the error says why it is refused.
pub fn check(kind: NameKind, name: &str) -> Result<(), String> {
    let label = kind.label();
    let (max, first_ok, rest_extra, rule): (usize, fn(char) -> bool, &str, &str) = match kind {
        NameKind::Limit => (
            64,
            |c: char| c.is_ascii_alphabetic(),
            "_.-",
            "must start with a letter and contain only letters, digits, '_', '-' or '.'",
        ),
        NameKind::Resource => (
            64,
            |c: char| c.is_ascii_alphabetic(),
            "_.-/:",
            "must start with a letter and contain only letters, digits, '_', '-', '.', '/' or ':'",
        ),
        NameKind::Entity => (
            256,
            |c: char| c.is_ascii_alphanumeric(),
            "_.-:@",
            "must start with a letter or digit and contain only letters, digits, '_', '-', '.', ':' or '@'",
        ),
    };
    if name.is_empty() {
        return Err(format!("{label} name must not be empty"));
    }
    if name.chars().count() > max {
        return Err(format!(
            "{label} name '{name}' is longer than {max} characters"
        ));
    }
    if name.contains('#') {
        return Err(format!(
            "{label} name '{name}' contains '#', which the table uses as a key delimiter"
        ));
    }
    if kind == NameKind::Limit && name == WCU_LIMIT {
        return Err("'wcu' is reserved for the client's own write-capacity limit".into());
    }
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(first_ok)
        && chars.all(|c| c.is_ascii_alphanumeric() || rest_extra.contains(c));
    if !ok {
        return Err(format!("{label} name '{name}' {rule}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_clients_rules() {
        for (kind, good) in [
            (NameKind::Limit, "tpm"),
            (NameKind::Limit, "req.per-min_2"),
            (NameKind::Resource, "openai/gpt-4:turbo"),
            (NameKind::Entity, "0user@example.com"),
        ] {
            assert_eq!(check(kind, good), Ok(()), "{kind:?} {good}");
        }
        for (kind, bad) in [
            (NameKind::Limit, "wcu"),
            (NameKind::Limit, "1x"),
            (NameKind::Limit, "a/b"),
            (NameKind::Limit, "rpm\n"),
            (NameKind::Limit, ""),
            (NameKind::Resource, "_default_"),
            (NameKind::Resource, "a#b"),
            (NameKind::Entity, "-lead"),
            (NameKind::Entity, "has space"),
        ] {
            assert!(check(kind, bad).is_err(), "{kind:?} {bad:?}");
        }
        assert!(check(NameKind::Limit, &"a".repeat(65)).is_err());
        assert!(check(NameKind::Entity, &"a".repeat(256)).is_ok());
    }

    #[test]
    fn the_limit_grammar_is_the_clients() {
        assert!(is_limit_name("gpt-4.turbo_x"));
        for bad in ["", "4x", "a#od", "a b", "_a"] {
            assert!(!is_limit_name(bad), "{bad}");
        }
        // The client's cap (64), so a hand-written attribute name of 60 KB
        // never becomes a limit named in logs, metrics and snapshot items.
        assert!(is_limit_name(&"a".repeat(64)));
        assert!(!is_limit_name(&"a".repeat(65)));
    }
}
