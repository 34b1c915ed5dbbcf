//! Usage-snapshot windows and their keys.

use chrono::{DateTime, Datelike, Timelike, Utc};
use std::fmt;
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Window {
    Hourly,
    Daily,
    Monthly,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WindowError {
    #[error("unknown snapshot window `{0}` (expected hourly, daily or monthly)")]
    Unknown(String),
    #[error("no snapshot window configured")]
    Empty,
    #[error("instant {0} ms is outside the calendar")]
    OutOfCalendar(i64),
}

impl Window {
    pub const ALL: [Window; 3] = [Window::Hourly, Window::Daily, Window::Monthly];

    /// The name the reader expects in the snapshot's `window` attribute.
    pub fn name(self) -> &'static str {
        match self {
            Window::Hourly => "hourly",
            Window::Daily => "daily",
            Window::Monthly => "monthly",
        }
    }

    /// The longest a window lasts, in whole days: a snapshot TTL shorter
    /// than this lets an item expire while its window is still counting.
    pub fn longest_days(self) -> i64 {
        match self {
            Window::Hourly | Window::Daily => 1,
            Window::Monthly => 31,
        }
    }

    /// The start, in epoch milliseconds, of the window holding `at_ms` (UTC).
    /// Cheap and allocation-free, so records can be grouped by it.
    pub fn start(self, at_ms: i64) -> Result<i64, WindowError> {
        const HOUR: i64 = 3_600_000;
        let at: DateTime<Utc> =
            DateTime::from_timestamp_millis(at_ms).ok_or(WindowError::OutOfCalendar(at_ms))?;
        Ok(match self {
            Window::Hourly => at_ms.div_euclid(HOUR) * HOUR,
            Window::Daily => at_ms.div_euclid(24 * HOUR) * 24 * HOUR,
            Window::Monthly => at
                .date_naive()
                .with_day(1)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|d| d.and_utc().timestamp_millis())
                .ok_or(WindowError::OutOfCalendar(at_ms))?,
        })
    }

    /// The window's start in the reference's key format, e.g. `2026-03-07T14:00:00Z`.
    pub fn key(self, at_ms: i64) -> Result<String, WindowError> {
        let start = self.start(at_ms)?;
        let at: DateTime<Utc> =
            DateTime::from_timestamp_millis(start).ok_or(WindowError::OutOfCalendar(at_ms))?;
        let (y, m, d, h) = (at.year(), at.month(), at.day(), at.hour());
        Ok(format!("{y:04}-{m:02}-{d:02}T{h:02}:00:00Z"))
    }

    /// Parses a comma-separated list such as `SNAPSHOT_WINDOWS`. Names are
    /// trimmed (the reference does not trim, so `"hourly, daily"` broke every
    /// daily write there); duplicates collapse; order is kept.
    pub fn parse_list(list: &str) -> Result<Vec<Window>, WindowError> {
        let mut windows = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let window: Window = name.parse()?;
            if !windows.contains(&window) {
                windows.push(window);
            }
        }
        if windows.is_empty() {
            return Err(WindowError::Empty);
        }
        Ok(windows)
    }
}

impl std::str::FromStr for Window {
    type Err = WindowError;
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Window::ALL
            .into_iter()
            .find(|w| w.name() == name)
            .ok_or_else(|| WindowError::Unknown(name.to_owned()))
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-03-07T14:05:09.123Z
    const AT: i64 = 1_772_892_309_123;

    #[test]
    fn keys_match_the_reference_format() {
        assert_eq!(Window::Hourly.key(AT).unwrap(), "2026-03-07T14:00:00Z");
        assert_eq!(Window::Daily.key(AT).unwrap(), "2026-03-07T00:00:00Z");
        assert_eq!(Window::Monthly.key(AT).unwrap(), "2026-03-01T00:00:00Z");
    }

    #[test]
    fn starts_and_keys_agree_across_boundaries() {
        for at in [0, AT, 1_772_323_199_999, 1_772_323_200_000, -1] {
            for w in Window::ALL {
                let start = w.start(at).unwrap();
                assert!(start <= at && w.start(start).unwrap() == start, "{w} {at}");
                assert_eq!(w.key(at).unwrap(), w.key(start).unwrap());
            }
        }
        assert_eq!(Window::Monthly.key(-1).unwrap(), "1969-12-01T00:00:00Z");
    }

    #[test]
    fn list_is_trimmed_and_deduplicated() {
        assert_eq!(
            Window::parse_list(" hourly, daily ,hourly,monthly").unwrap(),
            vec![Window::Hourly, Window::Daily, Window::Monthly]
        );
    }

    #[test]
    fn unknown_and_empty_lists_are_errors_that_name_the_problem() {
        let err = Window::parse_list("hourly,weekly").unwrap_err();
        assert_eq!(err, WindowError::Unknown("weekly".into()));
        assert!(err.to_string().contains("`weekly`"));
        assert_eq!(Window::parse_list(" , ").unwrap_err(), WindowError::Empty);
    }

    #[test]
    fn out_of_calendar_instants_are_errors() {
        assert!(Window::Hourly.key(i64::MAX).is_err());
    }
}
