//! Time as the engine sees it. Every entry is stamped with the clock's reading; TTLs and grace
//! periods are measured against it, so tests can drive time with a [`ManualClock`].

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A duration in whole milliseconds, saturating at `u64::MAX`.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A source of milliseconds.
pub trait Clock: Send + Sync + Debug {
    /// The current time in milliseconds.
    fn now_ms(&self) -> u64;
}

/// Wall-clock time: milliseconds since the Unix epoch.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to.
///
/// ```
/// use std::time::Duration;
/// use cairn::ManualClock;
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(10));
/// assert_eq!(clock.now_ms(), 11_000);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        Self {
            now: AtomicU64::new(start_ms),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `ms`.
    pub fn set(&self, ms: u64) {
        self.now.store(ms, Ordering::SeqCst);
    }

    /// The clock's reading in milliseconds (the [`Clock`] reading, without the trait in scope).
    pub fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        ManualClock::now_ms(self)
    }
}
