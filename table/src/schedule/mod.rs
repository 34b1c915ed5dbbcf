//! Limit schedules as the client stores them: the compact encoding (`"1"` +
//! entries joined by `;`, each the cron fields tagged `m h D M w` with
//! wildcards left out, then `s c a p` modifiers), its encoder and its decoder.

mod cron;

pub use cron::check_cron;
use cron::{BOUNDS, FIELD_TAGS, encode_cron, expand};

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
        // Stored values are the client's to bound; saturate rather than wrap.
        (
            self.capacity.map_or(cp, |c| c.saturating_mul(1000)),
            self.refill_amount.map_or(ra, |a| a.saturating_mul(1000)),
            self.refill_period_seconds
                .map_or(rp, |p| p.saturating_mul(1000)),
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
                // By characters, not bytes: a stored value may hold any UTF-8.
                let after = &rest[tag.len_utf8()..];
                let text_len = after
                    .find(|c: char| c.is_ascii_alphabetic())
                    .unwrap_or(after.len());
                let text = &after[..text_len];
                rest = &after[text_len..];
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
        let huge = decode_compact("1c9223372036854775807").unwrap();
        assert_eq!(
            huge[0].params(1, 1, 1).0,
            i64::MAX,
            "saturates, never wraps"
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
