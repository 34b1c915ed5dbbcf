//! The aggregator's settings, read from the environment and checked once at
//! start-up: a bad value stops it with an error naming the variable.

use crate::metrics::DEFAULT_NAMESPACE;
use crate::write::{RetryPolicy, Settings};
use std::ops::RangeInclusive;
use zae_table::Window;

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{variable}={value:?}: {reason}")]
    Invalid {
        variable: &'static str,
        value: String,
        reason: String,
    },
    #[error("{0} is not set")]
    Missing(&'static str),
}

/// What the environment configures: the table, the metric namespace, and
/// how batches are written.
#[derive(Debug, Clone)]
pub struct Environment {
    pub table_name: String,
    pub metric_namespace: String,
    pub settings: Settings,
    /// Values adjusted rather than refused, to be logged at start-up.
    pub warnings: Vec<String>,
    /// Where removed audit items are archived (`ARCHIVE_BUCKET`); none when
    /// unset or empty.
    pub archive_bucket: Option<String>,
    /// `ZAE_CLOCK_SKEW_MS`: added to the aggregator's clock, for clock-skew
    /// measurements only (0 unless set).
    pub clock_skew_ms: i64,
}

/// Reads a variable through `lookup`, so tests need not touch the process environment.
pub fn from_lookup(
    lookup: impl Fn(&str) -> Option<String>,
    table_name: Option<String>,
) -> Result<Environment, SettingsError> {
    let table_name = match table_name.or_else(|| lookup("TABLE_NAME")) {
        Some(name) if !name.trim().is_empty() => name.trim().to_owned(),
        _ => return Err(SettingsError::Missing("TABLE_NAME")),
    };
    let windows_text = lookup("SNAPSHOT_WINDOWS").unwrap_or_else(|| "hourly,daily".into());
    let windows = Window::parse_list(&windows_text).map_err(|e| SettingsError::Invalid {
        variable: "SNAPSHOT_WINDOWS",
        value: windows_text.clone(),
        reason: e.to_string(),
    })?;
    let int = |variable, default, range| whole_number(&lookup, variable, default, range);
    let mut warnings = Vec::new();
    let snapshot_ttl_days = ttl_days(
        int("SNAPSHOT_TTL_DAYS", 90, 1..=36_500)?,
        &windows,
        &windows_text,
        &mut warnings,
    );
    let concurrency = int("WRITE_CONCURRENCY", 16, 1..=256)? as usize;
    let max_attempts = int("WRITE_MAX_ATTEMPTS", 8, 1..=20)? as u32;
    let refill = refill(&lookup)?;
    let metric_namespace = metric_namespace(&lookup)?;
    let day_ms = 86_400_000;
    let clock_skew_ms = int("ZAE_CLOCK_SKEW_MS", 0, -day_ms..=day_ms)?;
    let archive_bucket = lookup("ARCHIVE_BUCKET")
        .map(|b| b.trim().to_owned())
        .filter(|b| !b.is_empty());
    Ok(Environment {
        archive_bucket,
        clock_skew_ms,
        warnings,
        table_name,
        metric_namespace,
        settings: Settings {
            windows,
            snapshot_ttl_days,
            concurrency,
            retry: RetryPolicy {
                max_attempts,
                ..RetryPolicy::default()
            },
            refill,
        },
    })
}

/// `variable` as a whole number within `range`; `default` when unset.
fn whole_number(
    lookup: impl Fn(&str) -> Option<String>,
    variable: &'static str,
    default: i64,
    range: RangeInclusive<i64>,
) -> Result<i64, SettingsError> {
    let Some(value) = lookup(variable) else {
        return Ok(default);
    };
    match value.trim().parse::<i64>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(SettingsError::Invalid {
            variable,
            value,
            reason: format!(
                "expected a whole number from {} to {}",
                range.start(),
                range.end()
            ),
        }),
    }
}

/// The snapshots' time to live, raised to the longest window's days when
/// shorter, with a warning. Never refused: an in-place upgrade must not
/// stop the stream.
fn ttl_days(days: i64, windows: &[Window], windows_text: &str, warnings: &mut Vec<String>) -> i64 {
    let needed = windows.iter().map(|w| w.longest_days()).max().unwrap_or(1);
    if days >= needed {
        return days;
    }
    warnings.push(format!(
        "SNAPSHOT_TTL_DAYS={days} is shorter than the longest window in \
         SNAPSHOT_WINDOWS={windows_text:?}; raised to {needed} days so no snapshot expires \
         while its window still counts"
    ));
    needed
}

/// `REFILL`: on (the default) or off.
fn refill(lookup: impl Fn(&str) -> Option<String>) -> Result<bool, SettingsError> {
    match lookup("REFILL").as_deref().map(str::trim) {
        None | Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(SettingsError::Invalid {
            variable: "REFILL",
            value: other.to_owned(),
            reason: "expected on or off".into(),
        }),
    }
}

/// `METRICS_NAMESPACE`, trimmed; the default when unset or empty.
fn metric_namespace(lookup: impl Fn(&str) -> Option<String>) -> Result<String, SettingsError> {
    let namespace = lookup("METRICS_NAMESPACE")
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    if namespace.len() > 255 {
        return Err(SettingsError::Invalid {
            variable: "METRICS_NAMESPACE",
            value: namespace,
            reason: "longer than 255 characters".into(),
        });
    }
    Ok(namespace)
}

pub fn from_env(table_name: Option<String>) -> Result<Environment, SettingsError> {
    from_lookup(|v| std::env::var(v).ok(), table_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Environment, SettingsError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        from_lookup(|v| vars.get(v).cloned(), None)
    }

    #[test]
    fn defaults_match_the_reference() {
        let c = config(&[("TABLE_NAME", "t")]).unwrap();
        assert_eq!(c.settings.windows, vec![Window::Hourly, Window::Daily]);
        assert_eq!(c.settings.snapshot_ttl_days, 90);
        assert_eq!(c.metric_namespace, "ZaeLimiter");
    }

    #[test]
    fn windows_are_trimmed() {
        let c = config(&[
            ("TABLE_NAME", "t"),
            ("SNAPSHOT_WINDOWS", "hourly, daily, monthly"),
        ])
        .unwrap();
        assert_eq!(c.settings.windows, Window::ALL.to_vec());
    }

    #[test]
    fn bad_values_name_the_variable_and_value() {
        let err = config(&[("TABLE_NAME", "t"), ("SNAPSHOT_WINDOWS", "hourly,weekly")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SNAPSHOT_WINDOWS") && err.contains("weekly"),
            "{err}"
        );
        let err = config(&[("TABLE_NAME", "t"), ("SNAPSHOT_TTL_DAYS", "ninety")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SNAPSHOT_TTL_DAYS") && err.contains("ninety"),
            "{err}"
        );
        assert!(matches!(
            config(&[]),
            Err(SettingsError::Missing("TABLE_NAME"))
        ));
    }

    #[test]
    fn a_ttl_shorter_than_the_longest_window_is_raised_with_a_warning() {
        let c = config(&[
            ("TABLE_NAME", "t"),
            ("SNAPSHOT_WINDOWS", "hourly,monthly"),
            ("SNAPSHOT_TTL_DAYS", "7"),
        ])
        .unwrap();
        assert_eq!(c.settings.snapshot_ttl_days, 31);
        assert_eq!(c.warnings.len(), 1);
        assert!(
            c.warnings[0].contains("SNAPSHOT_TTL_DAYS=7"),
            "{:?}",
            c.warnings
        );
        let daily = config(&[("TABLE_NAME", "t"), ("SNAPSHOT_TTL_DAYS", "1")]).unwrap();
        assert_eq!(
            (daily.settings.snapshot_ttl_days, daily.warnings.len()),
            (1, 0)
        );
    }
}
