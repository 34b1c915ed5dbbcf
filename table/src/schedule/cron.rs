//! The encoding of five-field cron patterns into the client's compact form.
//! What a pattern matches is [`super::pattern`].

use super::pattern::{DAYS, MONTHS, Pattern};

pub(super) const FIELD_TAGS: [char; 5] = ['m', 'h', 'D', 'M', 'w'];

/// Validates a five-field cron pattern as the client's parser (cronsim,
/// behind `parse_cron`) reads it: numbers, `*`, ranges, steps and lists,
/// with month and weekday names in any case; nothing the compact encoding
/// cannot hold (seconds fields, `L`, `W`, `#`, `?`, `@daily`).
pub fn check_cron(cron: &str) -> Result<(), String> {
    Pattern::parse(cron).map(|_| ())
}

fn names_to_numbers(spec: &str, table: &[&str], first: usize) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if !word.is_empty() {
            let upper = word.to_ascii_uppercase();
            match table.iter().position(|n| *n == upper) {
                Some(i) => out.push_str(&(i + first).to_string()),
                None => out.push_str(word),
            }
            word.clear();
        }
    };
    for c in spec.chars() {
        if c.is_ascii_alphabetic() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Sunday is `7` standing alone (as `0` or `SUN`) and `0` inside a range or
/// step, the client's canonical spelling.
fn weekday_item(item: &str) -> String {
    let upper = item.to_ascii_uppercase();
    if let Some(i) = DAYS.iter().position(|d| *d == upper) {
        return if i == 0 { "7".into() } else { i.to_string() };
    }
    if item == "0" {
        return "7".into();
    }
    names_to_numbers(item, &DAYS, 0)
}

pub(super) fn encode_cron(cron: &str) -> String {
    let mut out = String::new();
    for (tag, spec) in FIELD_TAGS.iter().zip(cron.split_whitespace()) {
        let encoded = match tag {
            'w' => spec
                .split(',')
                .map(weekday_item)
                .collect::<Vec<_>>()
                .join(","),
            'M' => names_to_numbers(spec, &MONTHS, 1),
            _ => spec.to_owned(),
        };
        if encoded != "*" {
            out.push(*tag);
            out.push_str(&encoded);
        }
    }
    out
}
