//! What a five-field cron pattern matches, read as the client reads it
//! (cronsim's field grammar behind `zae_limiter.schedule.parse_cron`): each
//! field becomes the set of values it allows, and a local time matches when
//! every field allows it, the two day fields being ORed when both are
//! restricted.

use chrono::{Datelike, NaiveDateTime, Timelike};

/// The names a month or weekday field may use for its numbers.
pub(super) const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
pub(super) const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const FIELD_NAMES: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
/// Each field's value range; weekday 7 is Sunday as well as 0.
const RANGES: [(u32, u32); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];
const DAYS_IN_MONTH: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// The values each field allows, as bit sets (bit `v` for value `v`;
/// weekdays by ISO number, Monday 1 to Sunday 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pattern {
    pub minutes: u64,
    pub hours: u64,
    pub days: u64,
    pub months: u64,
    pub weekdays: u64,
    /// Day of month AND day of week, when either field starts with `*`;
    /// otherwise they are ORed (Debian cron's rule, which cronsim keeps).
    pub day_and: bool,
}

/// Which local calendar block around an instant cannot match at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    Day,
    Hour,
}

impl Pattern {
    pub fn parse(cron: &str) -> Result<Pattern, String> {
        let upper = cron.to_uppercase();
        let fields: Vec<&str> = upper.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "invalid cron expression '{cron}': exactly 5 fields are required \
                 (minute hour day-of-month month day-of-week)"
            ));
        }
        let mut sets = [0u64; 5];
        for (i, field) in fields.iter().enumerate() {
            sets[i] = field_set(field, i).map_err(|why| {
                format!(
                    "invalid cron expression '{cron}': {} field: {why}",
                    FIELD_NAMES[i]
                )
            })?;
        }
        let day_and = fields[2].starts_with('*') || fields[4].starts_with('*');
        let first_day = sets[2].trailing_zeros();
        let longest_month = (1..=12)
            .filter(|m| sets[3] & (1 << m) != 0)
            .map(|m| DAYS_IN_MONTH[m - 1])
            .max()
            .unwrap_or(31);
        if day_and && first_day > 29 && first_day > longest_month {
            return Err(format!(
                "invalid cron expression '{cron}': that day of the month never occurs in those months"
            ));
        }
        // Sunday is 0 or 7; ISO numbering keeps 7.
        let mut weekdays = sets[4];
        if weekdays & 1 != 0 {
            weekdays = (weekdays & !1) | (1 << 7);
        }
        Ok(Pattern {
            minutes: sets[0],
            hours: sets[1],
            days: sets[2],
            months: sets[3],
            weekdays,
            day_and,
        })
    }

    fn date_matches(&self, local: &NaiveDateTime) -> bool {
        if self.months & (1 << local.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << local.day()) != 0;
        let dow = self.weekdays & (1 << local.weekday().number_from_monday()) != 0;
        if self.day_and { dom && dow } else { dom || dow }
    }

    /// Whether a local wall-clock time falls in the pattern.
    pub fn matches_local(&self, local: &NaiveDateTime) -> bool {
        self.minutes & (1 << local.minute()) != 0
            && self.hours & (1 << local.hour()) != 0
            && self.date_matches(local)
    }

    /// The largest local block around `local` in which nothing matches:
    /// the whole day when the date fails, the hour when only the hour does.
    pub fn blocked(&self, local: &NaiveDateTime) -> Option<Block> {
        if !self.date_matches(local) {
            Some(Block::Day)
        } else if self.hours & (1 << local.hour()) == 0 {
            Some(Block::Hour)
        } else {
            None
        }
    }

    pub fn count(set: u64) -> u32 {
        set.count_ones()
    }

    /// The longest wait between two firings, from the coarsest field the
    /// pattern restricts, rounded up (a month is 31 days, a year 366).
    pub fn cycle_seconds(&self) -> i64 {
        const DAY: i64 = 86_400;
        if self.months.count_ones() < 12 {
            366 * DAY
        } else if self.days.count_ones() < 31 {
            31 * DAY
        } else if self.weekdays.count_ones() < 7 {
            7 * DAY
        } else if self.hours.count_ones() < 24 {
            DAY
        } else if self.minutes.count_ones() < 60 {
            3600
        } else {
            60
        }
    }
}

fn full(field: usize) -> u64 {
    let (lo, hi) = RANGES[field];
    (lo..=hi).fold(0, |set, v| set | (1 << v))
}

/// The set one (upper-cased) field allows.
fn field_set(spec: &str, field: usize) -> Result<u64, String> {
    if spec == "*" {
        return Ok(full(field));
    }
    if spec.contains(',') {
        return spec
            .split(',')
            .try_fold(0, |set, term| Ok(set | field_set(term, field)?));
    }
    if field == 4 && (spec.contains('L') || spec.contains('#')) || spec == "L" || spec == "LW" {
        return Err(format!(
            "'{spec}' uses an extended token (L, W or #), which is not supported"
        ));
    }
    if let Some((term, step)) = spec.split_once('/') {
        let step = digits(step)?;
        if step == 0 {
            return Err("a step must be positive".into());
        }
        let items = field_set(term, field)?;
        // A single start runs to the top of the range; a range (one of a
        // single value, `2-2`, included) or a list is stepped through in order.
        let single = !term.contains('-') && !term.contains('*');
        let values: Vec<u32> = if single {
            (items.trailing_zeros()..=RANGES[field].1).collect()
        } else {
            (0..64).filter(|v| items & (1 << v) != 0).collect()
        };
        return Ok(values
            .iter()
            .step_by(step as usize)
            .fold(0, |set, v| set | (1 << v)));
    }
    if let Some((start, end)) = spec.split_once('-') {
        let (start, end) = (value(start, field)?, value(end, field)?);
        if end < start {
            return Err(format!("range '{spec}' runs backwards"));
        }
        return Ok((start..=end).fold(0, |set, v| set | (1 << v)));
    }
    Ok(1 << value(spec, field)?)
}

fn digits(text: &str) -> Result<u32, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{text}' is not a number"));
    }
    // Any run of digits past u32 is out of every range anyway.
    text.parse()
        .map_err(|_| format!("'{text}' is out of range"))
}

fn value(text: &str, field: usize) -> Result<u32, String> {
    let named = match field {
        3 => MONTHS.iter().position(|m| *m == text).map(|i| i as u32 + 1),
        4 => DAYS.iter().position(|d| *d == text).map(|i| i as u32),
        _ => None,
    };
    if let Some(v) = named {
        return Ok(v);
    }
    let v = digits(text)?;
    let (lo, hi) = RANGES[field];
    if v < lo || v > hi {
        return Err(format!("{v} is outside {lo}-{hi}"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(values: &[u32]) -> u64 {
        values.iter().fold(0, |s, v| s | (1 << v))
    }

    #[test]
    fn steps_run_from_a_single_start_to_the_top_and_through_ranges_in_order() {
        let p = Pattern::parse("5/20 1-10/3 */10 * */2").unwrap();
        assert_eq!(p.minutes, set(&[5, 25, 45]));
        assert_eq!(p.hours, set(&[1, 4, 7, 10]));
        assert_eq!(p.days, set(&[1, 11, 21, 31]));
        // 0..=7 stepped by 2 is 0 2 4 6; Sunday 0 is ISO 7.
        assert_eq!(p.weekdays, set(&[2, 4, 6, 7]));
        assert!(p.day_and);
        let p = Pattern::parse("0 0 1 * mon-fri").unwrap();
        assert!(!p.day_and, "both day fields restricted: ORed");
        assert_eq!(p.weekdays, set(&[1, 2, 3, 4, 5]));
    }

    #[test]
    fn a_day_no_month_has_is_refused_only_when_the_days_are_anded() {
        assert!(Pattern::parse("* * 30 2 *").is_err());
        assert!(Pattern::parse("* * 31 2,4 *").is_err());
        // A range of one value stepped is that value, not a start.
        assert_eq!(Pattern::parse("* * * 2-2/2 *").unwrap().months, set(&[2]));
        assert!(Pattern::parse("*,* 1 31-31/2 2-2/2 *").is_err());
        assert_eq!(
            Pattern::parse("* * * 10/2 *").unwrap().months,
            set(&[10, 12])
        );
        assert!(Pattern::parse("* * 30 2 1").is_ok(), "ORed with Mondays");
        assert!(
            Pattern::parse("* * 31 2 */2").is_err(),
            "a starred weekday ANDs"
        );
    }
}
