//! Limit schedules as the client stores them: the compact encoding (`"1"` +
//! entries joined by `;`, each the cron fields tagged `m h D M w` with
//! wildcards left out, then `s c a p` modifiers), its encoder and its decoder.

mod cron;
mod pattern;
mod walk;

pub use chrono_tz::Tz;
pub use cron::check_cron;
use cron::{FIELD_TAGS, encode_cron};
pub use pattern::{Block, Pattern};
pub use walk::{effective_params, next_boundary, next_reset_edge, prev_reset_edge, retry_after_ms};

pub const ENCODING_VERSION: &str = "1";
/// The client's ceiling on a schedule entry's `scale`.
pub const MAX_SCALE: f64 = 1_000_000.0;

/// One schedule entry as declared: a cron window in a timezone, and either a
/// scale of the base parameters or absolute ones (reset entries carry the
/// cron and timezone only).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleEntry {
    pub cron: String,
    pub tz: String,
    pub scale: Option<f64>,
    pub capacity: Option<i64>,
    pub refill_amount: Option<i64>,
    pub refill_period_seconds: Option<i64>,
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

/// A cron pattern with every field a wildcard: it fires every minute.
pub fn fires_every_minute(cron: &str) -> bool {
    encode_cron(cron).is_empty()
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

/// One stored entry: the window it matches and the modifiers it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactEntry {
    pub pattern: Pattern,
    pub scale_per_mille: Option<i64>,
    pub capacity: Option<i64>,
    pub refill_amount: Option<i64>,
    pub refill_period_seconds: Option<i64>,
}

impl CompactEntry {
    /// The longest wait between two firings (see [`Pattern::cycle_seconds`]).
    pub fn cycle_seconds(&self) -> i64 {
        self.pattern.cycle_seconds()
    }

    fn has_modifier(&self) -> bool {
        self.scale_per_mille.is_some()
            || self.capacity.is_some()
            || self.refill_amount.is_some()
            || self.refill_period_seconds.is_some()
    }

    /// The (capacity, refill amount, refill period) in force inside this
    /// window, in millitokens and milliseconds, from the base ones: a scale
    /// truncates and keeps at least 1 (and a quota's zero rate at zero), as
    /// the client's float arithmetic does.
    pub fn params(&self, cp: i64, ra: i64, rp: i64) -> (i64, i64, i64) {
        if let Some(per_mille) = self.scale_per_mille {
            let scale = per_mille as f64 / 1000.0;
            let scaled = |v: i64| ((v as f64 * scale) as i64).max(1);
            return (scaled(cp), if ra == 0 { 0 } else { scaled(ra) }, rp);
        }
        // Decoded values are bounded; saturate rather than wrap all the same.
        (
            self.capacity.map_or(cp, |c| c.saturating_mul(1000)),
            self.refill_amount.map_or(ra, |a| a.saturating_mul(1000)),
            self.refill_period_seconds
                .map_or(rp, |p| p.saturating_mul(1000)),
        )
    }
}

/// Why a stored schedule cannot be read, as the client would refuse it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("schedule '{0}' has no version marker")]
    NoVersion(String),
    #[error("schedule '{0}' is encoding version {1}; this build reads version 1")]
    Version(String, String),
    #[error("schedule '{0}' has a version marker and no entries")]
    Empty(String),
    #[error("schedule entry '{0}' cannot be parsed: {1}")]
    Entry(String, String),
    #[error("unknown timezone '{0}'")]
    Timezone(String),
}

/// Splits one entry into its tags and values: every character that is not
/// a tag belongs to the value before it, and each tag appears once.
fn tokens(part: &str) -> Result<Vec<(char, &str)>, String> {
    const TAGS: &str = "mhDMwscap";
    let mut out: Vec<(char, &str)> = Vec::new();
    let mut rest = part;
    while let Some(tag) = rest.chars().next() {
        if !TAGS.contains(tag) {
            return Err(format!("'{rest}' does not start with a tag"));
        }
        let after = &rest[1..];
        let len = after.find(|c| TAGS.contains(c)).unwrap_or(after.len());
        if len == 0 {
            return Err(format!("tag '{tag}' has no value"));
        }
        if out.iter().any(|(t, _)| *t == tag) {
            return Err(format!("tag '{tag}' appears twice"));
        }
        out.push((tag, &after[..len]));
        rest = &after[len..];
    }
    Ok(out)
}

/// A modifier's whole number, spelled as Python's `int()` takes it from
/// ASCII (surrounding spaces, a sign, `_` between digits), within `1..=max`.
fn modifier(tag: char, text: &str, max: i64) -> Result<i64, String> {
    let trimmed = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let (negative, body) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let well_formed = !body.is_empty()
        && !body.starts_with('_')
        && !body.ends_with('_')
        && !body.contains("__")
        && body.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    if !well_formed {
        return Err(format!("{tag} value '{text}' is not a whole number"));
    }
    let digits: String = body.chars().filter(|c| *c != '_').collect();
    let value = digits.parse::<i64>().unwrap_or(i64::MAX);
    if negative || value < 1 || value > max {
        return Err(format!("{tag} value '{text}' is outside 1 to {max}"));
    }
    Ok(value)
}

fn decode_entry(part: &str) -> Result<CompactEntry, String> {
    let mut fields = ["*"; 5];
    let mut entry = CompactEntry {
        pattern: Pattern::parse("* * * * *")?,
        scale_per_mille: None,
        capacity: None,
        refill_amount: None,
        refill_period_seconds: None,
    };
    for (tag, text) in tokens(part)? {
        if let Some(i) = FIELD_TAGS.iter().position(|t| *t == tag) {
            fields[i] = text;
            continue;
        }
        // The client's bounds: scale up to MAX_SCALE, tokens up to 10^15,
        // periods up to 10^9 seconds.
        let (slot, max) = match tag {
            's' => (&mut entry.scale_per_mille, (MAX_SCALE * 1000.0) as i64),
            'c' => (&mut entry.capacity, 1_000_000_000_000_000),
            'a' => (&mut entry.refill_amount, 1_000_000_000_000_000),
            _ => (&mut entry.refill_period_seconds, 1_000_000_000),
        };
        *slot = Some(modifier(tag, text, max)?);
    }
    entry.pattern = Pattern::parse(&fields.join(" "))?;
    Ok(entry)
}

/// Reads a compact schedule into its entries, parameter and reset alike;
/// empty for no schedule.
pub fn decode_entries(compact: &str) -> Result<Vec<CompactEntry>, ScheduleError> {
    if compact.is_empty() {
        return Ok(Vec::new());
    }
    let marker_len = compact
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(compact.len());
    if marker_len == 0 {
        return Err(ScheduleError::NoVersion(compact.to_owned()));
    }
    let (marker, body) = compact.split_at(marker_len);
    if marker.trim_start_matches('0') != ENCODING_VERSION {
        return Err(ScheduleError::Version(
            compact.to_owned(),
            marker.to_owned(),
        ));
    }
    if body.is_empty() {
        return Err(ScheduleError::Empty(compact.to_owned()));
    }
    body.split(';')
        .map(|part| decode_entry(part).map_err(|why| ScheduleError::Entry(part.to_owned(), why)))
        .collect()
}

/// A stored parameter schedule: every entry carries either a scale or
/// absolute values, never both, never neither.
pub fn decode_params(compact: &str) -> Result<Vec<CompactEntry>, ScheduleError> {
    let entries = decode_entries(compact)?;
    for entry in &entries {
        let absolute = entry.capacity.is_some()
            || entry.refill_amount.is_some()
            || entry.refill_period_seconds.is_some();
        if entry.scale_per_mille.is_some() == absolute {
            return Err(ScheduleError::Entry(
                compact.to_owned(),
                "an entry must set exactly one of a scale or absolute values".into(),
            ));
        }
    }
    Ok(entries)
}

/// A stored reset schedule: cron fields only.
pub fn decode_resets(compact: &str) -> Result<Vec<Pattern>, ScheduleError> {
    let entries = decode_entries(compact)?;
    if entries.iter().any(CompactEntry::has_modifier) {
        return Err(ScheduleError::Entry(
            compact.to_owned(),
            "a reset entry carries no modifiers".into(),
        ));
    }
    Ok(entries.into_iter().map(|e| e.pattern).collect())
}

/// The lenient reading the provisioner needs for a bucket's TTL; `None`
/// for anything [`decode_entries`] refuses.
pub fn decode_compact(compact: &str) -> Option<Vec<CompactEntry>> {
    decode_entries(compact).ok()
}

/// A stored timezone (`sched_tz`); empty or absent is UTC, as the client reads it.
pub fn timezone(name: Option<&str>) -> Result<chrono_tz::Tz, ScheduleError> {
    match name {
        None | Some("") => Ok(chrono_tz::UTC),
        Some(name) => name
            .parse()
            .map_err(|_| ScheduleError::Timezone(name.to_owned())),
    }
}

/// One limit's schedules as a reader applies them: its parameter windows,
/// its reset edges, and the zone both are read in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSchedule {
    pub params: Vec<CompactEntry>,
    pub resets: Vec<Pattern>,
    pub tz: Tz,
}

impl LimitSchedule {
    /// From the compact strings (empty for none) and the stored zone.
    pub fn decode(sched: &str, rsched: &str, tz: Option<&str>) -> Result<Self, ScheduleError> {
        Ok(LimitSchedule {
            params: decode_params(sched)?,
            resets: decode_resets(rsched)?,
            tz: timezone(tz)?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.params.is_empty() && self.resets.is_empty()
    }

    /// The undivided (cp, ra, rp) in force at `now`.
    pub fn params_at(&self, base: (i64, i64, i64), now: i64) -> (i64, i64, i64) {
        effective_params(base, &self.params, self.tz, now)
    }

    /// The next instant the bucket must be re-materialised (its `vu`).
    pub fn boundary(&self, now: i64) -> Option<i64> {
        next_boundary(&self.params, &self.resets, self.tz, now)
    }

    /// [`retry_after_ms`] for this limit.
    pub fn retry_after_ms(
        &self,
        deficit: i64,
        base: (i64, i64, i64),
        shards: i64,
        now: i64,
    ) -> i64 {
        retry_after_ms(
            deficit,
            base,
            (&self.params, &self.resets),
            self.tz,
            now,
            shards,
        )
    }
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
        assert_eq!(decoded[1].pattern, Pattern::parse("* 0-6 * * *").unwrap());
        assert_eq!(
            decoded[1].params(60_000, 60_000, 60_000),
            (100_000, 10_000, 60_000)
        );
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

    #[test]
    fn stored_values_of_any_text_decode_or_fail_without_panicking() {
        for text in [
            "1é",
            "1mé",
            "1m5é;h",
            "1s99999999999999999999",
            "1c9223372036854775807",
        ] {
            let _ = decode_compact(text);
        }
        assert_eq!(decode_compact("1é"), None);
        assert_eq!(
            decode_compact("1c9223372036854775807"),
            None,
            "over the client's 10^15"
        );
        assert!(decode_compact("1c1000000000000000").is_some());
    }

    fn schedule(sched: &str, rsched: &str, tz: &str) -> LimitSchedule {
        LimitSchedule::decode(sched, rsched, Some(tz)).unwrap()
    }

    // Expected waits are the 0.17.0 client's `retry_after_with_schedule`
    // on the same inputs, in ms.
    #[test]
    fn a_wait_walks_across_a_boundary_that_halves_the_rate() {
        // 08:59:50 in New York, a 0.5x window from 09:00: 10 s at 1000/min
        // yields 166_666, the 333_334 left take 40 s at 500/min.
        let s = schedule("1h9-17w1-5s500", "", "America/New_York");
        let now = 1_796_219_990_000;
        let base = (1_000_000, 1_000_000, 60_000);
        assert_eq!(s.retry_after_ms(500_000, base, 1, now), 50_001);
        assert_eq!(
            s.retry_after_ms(500_000, base, 3, now),
            170_001,
            "shared after scaling"
        );
        assert_eq!(s.retry_after_ms(0, base, 1, now), 0);
        let flat = schedule("", "", "UTC");
        assert_eq!(flat.retry_after_ms(500_000, base, 1, now), 30_001);
    }

    #[test]
    fn a_reset_edge_answers_a_wait_outright() {
        let s = schedule("", "1m0h0", "UTC");
        let now = 1_796_219_990_000;
        assert_eq!(s.retry_after_ms(5_000, (0, 0, 60_000), 1, now), 36_010_001);
        assert_eq!(
            next_reset_edge(&s.resets, s.tz, now),
            Some(1_796_256_000_000)
        );
    }

    #[test]
    fn a_boundary_in_the_hour_clocks_skip_is_the_hour_after() {
        // 01:59:30 EST on the day New York skips 02:00-03:00: the 2-3 window
        // opens at 03:00 EDT (07:00 UTC).
        let s = schedule("1h2-3s500", "", "America/New_York");
        let now = 1_805_007_570_000;
        assert_eq!(s.boundary(now), Some(1_805_007_600_000));
        assert_eq!(
            s.retry_after_ms(20_000, (10_000, 10_000, 60_000), 1, now),
            210_001
        );
        assert_eq!(
            s.params_at((10_000, 10_000, 60_000), now + 60_000),
            (5_000, 5_000, 60_000)
        );
    }

    proptest::proptest! {
        // 256 cases in the test command; `scripts/fuzz.sh` sets more.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
            std::env::var("ZAE_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
        ))]
        #[test]
        fn any_stored_string_decodes_without_panicking(text in "\\PC{0,40}", ascii in "[0-9a-zA-Z;*/,-]{0,40}") {
            let _ = decode_compact(&text);
            if let Some(entries) = decode_compact(&format!("1{ascii}")) {
                for entry in entries {
                    let _ = entry.cycle_seconds();
                    let _ = entry.params(i64::MAX, i64::MAX, i64::MAX);
                }
            }
        }
    }
}
