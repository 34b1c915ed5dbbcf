//! Where the client reads the time: the wall clock in production, a clock
//! a test sets (the differential tests give both clients the same instants).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Epoch milliseconds, as `rf`, stamps and `vu` hold them.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or_default()
    }
}

/// A clock that says what it was last set to.
#[derive(Debug, Default, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(now_ms: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(now_ms)))
    }
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
