//! The time left in a Lambda invocation, from the runtime's deadline.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Below this, a "deadline" is no epoch time (it would be before 1973):
/// `cargo lambda watch` 1.9.2 sends the function's timeout itself (600000),
/// which is then read as a duration from now.
const EPOCH_MS_FLOOR: u64 = 100_000_000_000;

/// What is left until `deadline_ms` (epoch milliseconds), zero when past.
pub fn remaining(deadline_ms: u64) -> Duration {
    if deadline_ms < EPOCH_MS_FLOOR {
        return Duration::from_millis(deadline_ms);
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    Duration::from_millis(deadline_ms.saturating_sub(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_an_epoch_time_or_else_a_duration() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let left = remaining(now + 60_000);
        assert!(left > Duration::from_secs(59) && left <= Duration::from_secs(60));
        assert_eq!(remaining(now - 1), Duration::ZERO);
        assert_eq!(remaining(600_000), Duration::from_secs(600));
    }
}
