//! The client's naming rules. A name the 0.17.0 client would refuse to read
//! back (it raises on a bad limit name inside a stored config item) must be
//! refused before it is written.

/// Checks a `limit`, `resource` or `entity id` name; the error says why.
pub fn check(kind: &str, name: &str) -> Result<(), String> {
    let (max, first_ok, rest_extra, rule): (usize, fn(char) -> bool, &str, &str) = match kind {
        "limit" => (
            64,
            |c: char| c.is_ascii_alphabetic(),
            "_.-",
            "must start with a letter and contain only letters, digits, '_', '-' or '.'",
        ),
        "resource" => (
            64,
            |c: char| c.is_ascii_alphabetic(),
            "_.-/:",
            "must start with a letter and contain only letters, digits, '_', '-', '.', '/' or ':'",
        ),
        _ => (
            256,
            |c: char| c.is_ascii_alphanumeric(),
            "_.-:@",
            "must start with a letter or digit and contain only letters, digits, '_', '-', '.', ':' or '@'",
        ),
    };
    if name.is_empty() {
        return Err(format!("{kind} name must not be empty"));
    }
    if name.chars().count() > max {
        return Err(format!("{kind} name '{name}' is longer than {max} characters"));
    }
    if name.contains('#') {
        return Err(format!(
            "{kind} name '{name}' contains '#', which the table uses as a key delimiter"
        ));
    }
    if kind == "limit" && name == "wcu" {
        return Err("'wcu' is reserved for the client's own write-capacity limit".into());
    }
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(first_ok)
        && chars.all(|c| c.is_ascii_alphanumeric() || rest_extra.contains(c));
    if !ok {
        return Err(format!("{kind} name '{name}' {rule}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn names_follow_the_clients_rules() {
        for (kind, good) in [
            ("limit", "tpm"),
            ("limit", "req.per-min_2"),
            ("resource", "openai/gpt-4:turbo"),
            ("entity id", "0user@example.com"),
        ] {
            assert_eq!(check(kind, good), Ok(()), "{kind} {good}");
        }
        for (kind, bad) in [
            ("limit", "wcu"),
            ("limit", "1x"),
            ("limit", "a/b"),
            ("limit", "rpm\n"),
            ("limit", ""),
            ("resource", "_default_"),
            ("resource", "a#b"),
            ("entity id", "-lead"),
            ("entity id", "has space"),
        ] {
            assert!(check(kind, bad).is_err(), "{kind} {bad:?}");
        }
        assert!(check("limit", &"a".repeat(65)).is_err());
        assert!(check("entity id", &"a".repeat(256)).is_ok());
    }
}
