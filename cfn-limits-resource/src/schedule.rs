//! Limit schedules: manifest entries, cron validation, and the client's
//! compact storage encoding (`"1"` + entries joined by `;`, each the cron
//! fields tagged `m h D M w` with wildcards left out, then `s c a p`
//! modifiers), which the 0.17.0 client decodes.

use crate::manifest::{MAX_PERIOD_SECONDS, MAX_TOKENS};
use crate::path::{Path, Problem};
use serde_norway::Value as Tree;

pub const ENCODING_VERSION: &str = "1";
pub const MAX_SCALE: f64 = 1_000_000.0;
const FIELD_TAGS: [char; 5] = ['m', 'h', 'D', 'M', 'w'];
const ENTRY_FIELDS: [&str; 6] = [
    "cron",
    "tz",
    "scale",
    "capacity",
    "refill_amount",
    "refill_period_seconds",
];
const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleEntry {
    pub cron: String,
    pub tz: String,
    pub scale: Option<f64>,
    pub capacity: Option<i64>,
    pub refill_amount: Option<i64>,
    pub refill_period_seconds: Option<i64>,
}

impl ScheduleEntry {
    pub fn canonical(&self) -> serde_json::Value {
        let mut out = serde_json::json!({ "cron": self.cron, "tz": self.tz });
        let map = out.as_object_mut().expect("built as an object");
        if let Some(scale) = self.scale {
            map.insert("scale".into(), serde_json::json!(scale));
        }
        for (name, value) in [
            ("capacity", self.capacity),
            ("refill_amount", self.refill_amount),
            ("refill_period_seconds", self.refill_period_seconds),
        ] {
            if let Some(value) = value {
                map.insert(name.into(), serde_json::json!(value));
            }
        }
        out
    }
}

/// Parses a `schedule` (or, with `reset`, a `reset_schedule`) list.
pub fn parse_entries(
    tree: Option<&Tree>,
    path: &Path,
    reset: bool,
    problems: &mut Vec<Problem>,
) -> Vec<ScheduleEntry> {
    let items = match tree {
        None | Some(Tree::Null) => return Vec::new(),
        Some(Tree::Sequence(items)) => items,
        Some(other) => {
            problems.push(Problem::new(
                path,
                format!(
                    "must be a list of entries, got {}",
                    crate::manifest::type_name(other)
                ),
            ));
            return Vec::new();
        }
    };
    let allowed: &[&str] = if reset {
        &ENTRY_FIELDS[..2]
    } else {
        &ENTRY_FIELDS
    };
    let mut entries = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = path.index(i);
        let Tree::Mapping(map) = item else {
            problems.push(Problem::new(
                &path,
                format!("must be a mapping, got {}", crate::manifest::type_name(item)),
            ));
            continue;
        };
        let field = |name: &str| map.get(name);
        let mut unknown: Vec<String> = map
            .keys()
            .map(|k| k.as_str().map(str::to_owned).unwrap_or_else(|| format!("{k:?}")))
            .filter(|k| !allowed.contains(&k.as_str()))
            .collect();
        unknown.sort();
        if !unknown.is_empty() {
            let hint = if reset {
                "; a reset entry carries `cron` and `tz` only: it names the instant the \
                 balance goes back to capacity and overrides no parameters"
            } else {
                ""
            };
            problems.push(Problem::new(
                &path,
                format!(
                    "unknown field(s) {}; allowed: {}{hint}",
                    unknown.join(", "),
                    allowed.join(", ")
                ),
            ));
            continue;
        }
        let before = problems.len();
        let tz = match field("tz") {
            None | Some(Tree::Null) => "UTC".to_owned(),
            Some(Tree::String(tz)) => {
                if tz.parse::<chrono_tz::Tz>().is_err() {
                    problems.push(Problem::new(
                        &path.field("tz"),
                        format!("unknown timezone '{tz}'; use an IANA name such as Europe/Berlin"),
                    ));
                }
                tz.clone()
            }
            Some(other) => {
                problems.push(Problem::new(
                    &path.field("tz"),
                    format!("must be a string, got {}", crate::manifest::type_name(other)),
                ));
                String::new()
            }
        };
        let cron = match field("cron") {
            Some(Tree::String(cron)) => {
                if let Err(reason) = check_cron(cron) {
                    problems.push(Problem::new(&path.field("cron"), reason));
                }
                cron.clone()
            }
            None | Some(Tree::Null) => {
                problems.push(Problem::new(&path.field("cron"), "is required"));
                String::new()
            }
            Some(other) => {
                problems.push(Problem::new(
                    &path.field("cron"),
                    format!("must be a string, got {}", crate::manifest::type_name(other)),
                ));
                String::new()
            }
        };
        let scale = match field("scale") {
            None | Some(Tree::Null) => None,
            Some(Tree::Number(n)) => match n.as_f64() {
                Some(s) if s.is_finite() && s > 0.0 && s <= MAX_SCALE => Some(s),
                Some(s) if !s.is_finite() => {
                    problems.push(Problem::new(
                        &path.field("scale"),
                        format!("must be a finite number, got {s}"),
                    ));
                    None
                }
                Some(s) => {
                    problems.push(Problem::new(
                        &path.field("scale"),
                        format!("must be above 0 and at most {MAX_SCALE}, got {s}"),
                    ));
                    None
                }
                None => None,
            },
            Some(other) => {
                problems.push(Problem::new(
                    &path.field("scale"),
                    format!("must be a number, got {}", crate::manifest::type_name(other)),
                ));
                None
            }
        };
        let mut absolute = |name: &'static str, max: i64| -> Option<i64> {
            let tree = field(name)?;
            if matches!(tree, Tree::Null) {
                return None;
            }
            let integer = match tree {
                Tree::Number(n) => n.as_i64(),
                _ => None,
            };
            match integer {
                Some(v) if v > 0 && v <= max => Some(v),
                Some(v) => {
                    problems.push(Problem::new(
                        &path.field(name),
                        format!("must be above 0 and at most {max}, got {v}"),
                    ));
                    None
                }
                None => {
                    let got = match tree {
                        Tree::Number(n) => n.to_string(),
                        other => crate::manifest::type_name(other).to_owned(),
                    };
                    problems.push(Problem::new(
                        &path.field(name),
                        format!("must be a whole number, got {got}"),
                    ));
                    None
                }
            }
        };
        let capacity = absolute("capacity", MAX_TOKENS);
        let refill_amount = absolute("refill_amount", MAX_TOKENS);
        let refill_period_seconds = absolute("refill_period_seconds", MAX_PERIOD_SECONDS);
        let has_absolute = ["capacity", "refill_amount", "refill_period_seconds"]
            .iter()
            .any(|name| field(name).is_some_and(|v| !matches!(v, Tree::Null)));
        let has_scale = field("scale").is_some_and(|v| !matches!(v, Tree::Null));
        if reset && problems.len() == before && encode_cron(&cron).is_empty() {
            problems.push(Problem::new(
                &path.field("cron"),
                "a reset entry matching every minute would reset the balance continuously \
                 (and the client cannot read it back)",
            ));
        }
        if !reset && has_scale == has_absolute {
            problems.push(Problem::new(
                &path,
                "must set exactly one of `scale` or the absolute fields \
                 (`capacity`/`refill_amount`/`refill_period_seconds`)",
            ));
        }
        if problems.len() == before {
            entries.push(ScheduleEntry {
                cron,
                tz,
                scale,
                capacity,
                refill_amount,
                refill_period_seconds,
            });
        }
    }
    entries
}

/// Validates a five-field cron pattern: numbers, `*`, ranges, steps and
/// lists, with month and weekday names; nothing the compact encoding cannot
/// hold (seconds fields, `L`, `W`, `#`, `?`, `@daily`).
pub fn check_cron(cron: &str) -> Result<(), String> {
    let fields: Vec<&str> = cron.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "invalid cron expression '{cron}': exactly 5 fields are required \
             (minute hour day-of-month month day-of-week)"
        ));
    }
    let bounds = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];
    let names = ["minute", "hour", "day-of-month", "month", "day-of-week"];
    for (i, field) in fields.iter().enumerate() {
        check_field(field, bounds[i], i)
            .map_err(|why| format!("invalid cron expression '{cron}': {} field: {why}", names[i]))?;
    }
    // With the weekday unrestricted, the day of the month alone decides, and
    // it must exist in at least one of the months.
    if fields[4] == "*" {
        let days = expand(fields[2], bounds[2], 2);
        let months = expand(fields[3], bounds[3], 3);
        const LENGTHS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        let possible = days
            .iter()
            .any(|d| months.iter().any(|m| *d <= LENGTHS[*m as usize - 1]));
        if !possible {
            return Err(format!(
                "invalid cron expression '{cron}': that day of the month never occurs in those months"
            ));
        }
    }
    Ok(())
}

/// The values a validated field matches.
fn expand(field: &str, (lo, hi): (u32, u32), index: usize) -> Vec<u32> {
    let mut out = Vec::new();
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, step.parse().unwrap_or(1)),
            None => (item, 1),
        };
        let (start, end) = match range.split_once('-') {
            _ if range == "*" => (lo, hi),
            Some((a, b)) => (
                value(a, (lo, hi), index).unwrap_or(lo),
                value(b, (lo, hi), index).unwrap_or(hi),
            ),
            None => {
                let v = value(range, (lo, hi), index).unwrap_or(lo);
                (v, if step > 1 { hi } else { v })
            }
        };
        out.extend((start..=end).step_by(step.max(1) as usize));
    }
    out
}

fn value(text: &str, (lo, hi): (u32, u32), field: usize) -> Result<u32, String> {
    let upper = text.to_ascii_uppercase();
    let named = match field {
        3 => MONTHS.iter().position(|m| *m == upper).map(|i| i as u32 + 1),
        4 => DAYS.iter().position(|d| *d == upper).map(|i| i as u32),
        _ => None,
    };
    let number = match named {
        Some(n) => n,
        None => text
            .parse::<u32>()
            .ok()
            .filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("'{text}' is not a number"))?,
    };
    if number < lo || number > hi {
        return Err(format!("{number} is outside {lo}-{hi}"));
    }
    Ok(number)
}

fn check_field(field: &str, bounds: (u32, u32), index: usize) -> Result<(), String> {
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, Some(step)),
            None => (item, None),
        };
        if let Some(step) = step {
            let step: u32 = step
                .parse()
                .map_err(|_| format!("step '{step}' is not a number"))?;
            if step == 0 {
                return Err("a step must be positive".into());
            }
        }
        if range == "*" {
            continue;
        }
        match range.split_once('-') {
            Some((start, end)) => {
                let (start, end) = (
                    value(start, bounds, index)?,
                    value(end, bounds, index)?,
                );
                if start > end {
                    return Err(format!("range '{range}' runs backwards"));
                }
            }
            None => {
                value(range, bounds, index)?;
            }
        }
    }
    Ok(())
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

fn encode_cron(cron: &str) -> String {
    let mut out = String::new();
    for (tag, spec) in FIELD_TAGS.iter().zip(cron.split_whitespace()) {
        let encoded = match tag {
            'w' => spec.split(',').map(weekday_item).collect::<Vec<_>>().join(","),
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

fn encode_entry(entry: &ScheduleEntry) -> String {
    let mut out = encode_cron(&entry.cron);
    if let Some(scale) = entry.scale {
        // Python's round() is half-to-even; the client stores what it gives.
        let per_mille = (scale * 1000.0).round_ties_even().max(1.0) as i64;
        out.push_str(&format!("s{per_mille}"));
    }
    for (tag, value) in [
        ('c', entry.capacity),
        ('a', entry.refill_amount),
        ('p', entry.refill_period_seconds),
    ] {
        if let Some(value) = value {
            out.push(tag);
            out.push_str(&value.to_string());
        }
    }
    out
}

/// The compact form of a parameter schedule; empty for no entries.
pub fn encode(entries: &[ScheduleEntry]) -> String {
    if entries.is_empty() {
        return String::new();
    }
    let body: Vec<String> = entries.iter().map(encode_entry).collect();
    format!("{ENCODING_VERSION}{}", body.join(";"))
}

/// The compact form of a reset schedule: cron fields only.
pub fn encode_reset(entries: &[ScheduleEntry]) -> String {
    if entries.is_empty() {
        return String::new();
    }
    let body: Vec<String> = entries.iter().map(|e| encode_cron(&e.cron)).collect();
    format!("{ENCODING_VERSION}{}", body.join(";"))
}

/// One stored entry, read back only as far as the bucket TTL needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactEntry {
    /// The cron text of `m h D M w`; `None` is `*`.
    pub fields: [Option<String>; 5],
    pub scale_per_mille: Option<i64>,
    pub capacity: Option<i64>,
    pub refill_amount: Option<i64>,
    pub refill_period_seconds: Option<i64>,
}

const BOUNDS: [(u32, u32); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];

impl CompactEntry {
    fn matches(&self, field: usize) -> usize {
        let spec = self.fields[field].as_deref().unwrap_or("*");
        let mut values = expand(spec, BOUNDS[field], field);
        if field == 4 {
            for v in &mut values {
                if *v == 0 {
                    *v = 7;
                }
            }
        }
        values.sort_unstable();
        values.dedup();
        values.len()
    }

    /// The longest wait between two firings, from the coarsest field the
    /// entry constrains, rounded up (a month is 31 days, a year 366).
    pub fn cycle_seconds(&self) -> i64 {
        const DAY: i64 = 86_400;
        if self.matches(3) < 12 {
            366 * DAY
        } else if self.matches(2) < 31 {
            31 * DAY
        } else if self.matches(4) < 7 {
            7 * DAY
        } else if self.matches(1) < 24 {
            DAY
        } else if self.matches(0) < 60 {
            3600
        } else {
            60
        }
    }

    /// The (capacity, refill amount, refill period) in force inside this
    /// window, in millitokens and milliseconds, from the base ones.
    pub fn params(&self, cp: i64, ra: i64, rp: i64) -> (i64, i64, i64) {
        if let Some(per_mille) = self.scale_per_mille {
            let scale = per_mille as f64 / 1000.0;
            let scaled = |v: i64| ((v as f64 * scale) as i64).max(1);
            return (scaled(cp), if ra == 0 { 0 } else { scaled(ra) }, rp);
        }
        (
            self.capacity.map_or(cp, |c| c * 1000),
            self.refill_amount.map_or(ra, |a| a * 1000),
            self.refill_period_seconds.map_or(rp, |p| p * 1000),
        )
    }
}

/// Reads a compact schedule; `None` for a version or grammar this build
/// does not know.
pub fn decode_compact(compact: &str) -> Option<Vec<CompactEntry>> {
    if compact.is_empty() {
        return Some(Vec::new());
    }
    let body = compact.strip_prefix(ENCODING_VERSION)?;
    body.split(';')
        .map(|part| {
            let mut entry = CompactEntry::default();
            let mut rest = part;
            while let Some(tag) = rest.chars().next() {
                let text_len = rest[1..]
                    .find(|c: char| c.is_ascii_alphabetic())
                    .unwrap_or(rest.len() - 1);
                let text = &rest[1..1 + text_len];
                rest = &rest[1 + text_len..];
                if text.is_empty() {
                    return None;
                }
                let number = || text.parse::<i64>().ok();
                match FIELD_TAGS.iter().position(|t| *t == tag) {
                    Some(i) => entry.fields[i] = Some(text.to_owned()),
                    None => match tag {
                        's' => entry.scale_per_mille = Some(number()?),
                        'c' => entry.capacity = Some(number()?),
                        'a' => entry.refill_amount = Some(number()?),
                        'p' => entry.refill_period_seconds = Some(number()?),
                        _ => return None,
                    },
                }
            }
            Some(entry)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(cron: &str) -> ScheduleEntry {
        ScheduleEntry {
            cron: cron.into(),
            tz: "UTC".into(),
            scale: None,
            capacity: None,
            refill_amount: None,
            refill_period_seconds: None,
        }
    }

    #[test]
    fn crons_encode_in_the_clients_canonical_spelling() {
        for (cron, compact) in [
            ("0 0 * * *", "1m0h0"),
            ("* 9-17 * * MON-FRI", "1h9-17w1-5"),
            ("* * * * SUN", "1w7"),
            ("* * * * 0", "1w7"),
            ("* * * * sun-thu", "1w0-4"),
            ("* * * * SUN/2", "1w0/2"),
            ("* * * * SAT,SUN", "1w6,7"),
            ("*/15 * 1 JAN-mar *", "1m*/15D1M1-3"),
            ("0 0 1 * *", "1m0h0D1"),
            ("* * * * *", "1"),
        ] {
            assert_eq!(encode_reset(&[entry(cron)]), compact, "{cron}");
        }
    }

    #[test]
    fn modifiers_follow_the_cron_fields() {
        let mut scaled = entry("* 9-17 * * 1-5");
        scaled.scale = Some(2.3);
        let mut absolute = entry("* 0-6 * * *");
        absolute.capacity = Some(100);
        absolute.refill_amount = Some(10);
        absolute.refill_period_seconds = Some(60);
        let mut tiny = entry("* * * * *");
        tiny.scale = Some(0.0025);
        assert_eq!(
            encode(&[scaled, absolute, tiny]),
            "1h9-17w1-5s2300;h0-6c100a10p60;s2"
        );
        let decoded = decode_compact("1h9-17w1-5s2300;h0-6c100a10p60").unwrap();
        assert_eq!(decoded[0].scale_per_mille, Some(2300));
        assert_eq!(decoded[1].fields[1].as_deref(), Some("0-6"));
        assert_eq!(decoded[1].params(60_000, 60_000, 60_000), (100_000, 10_000, 60_000));
        assert_eq!(decoded[0].params(60_000, 0, 60_000), (138_000, 0, 60_000));
        let cycle = |compact: &str| decode_compact(compact).unwrap()[0].cycle_seconds();
        assert_eq!(cycle("1m0h0"), 86_400);
        assert_eq!(cycle("1m0h0D1"), 31 * 86_400);
        assert_eq!(cycle("1m0h0w1"), 7 * 86_400);
        assert_eq!(cycle("1m0h0D1M1"), 366 * 86_400);
        assert_eq!(cycle("1m0"), 3600);
        assert_eq!(cycle("1m*/1h0-23w0-7"), 60);
        assert_eq!(decoded[1].capacity, Some(100));
        assert_eq!(decode_compact("2m0"), None);
    }

    #[test]
    fn crons_the_encoding_cannot_hold_are_rejected() {
        for cron in [
            "0 0 * *",
            "0 0 0 * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * L * *",
            "* * * * 1#2",
            "* * * * 5-1",
            "*/0 * * * *",
            "@daily",
            "* * * FOO *",
            "* * 31 2 *",
            "* * * * SAT-SUN",
        ] {
            assert!(check_cron(cron).is_err(), "{cron} must be rejected");
        }
        for cron in ["0 0 * * *", "*/5 1,2,3 1-31/2 jan-DEC mon-sat", "* * * * 7"] {
            assert!(check_cron(cron).is_ok(), "{cron} must be accepted");
        }
    }
}
