//! The memory backend's clock: monotonic, and pausable in tests.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// A monotonic clock reported as time since the Unix epoch.
///
/// It reads tokio's [`Instant`], so `tokio::time::pause` and `advance` control it in tests,
/// and anchors it to the wall clock once, at creation: it never goes back when the wall
/// clock is adjusted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
    origin_since_epoch: Duration,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            origin: Instant::now(),
            // A wall clock set before 1970 only shifts the reported origin, never the
            // decisions, which use `Instant`s.
            origin_since_epoch: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        }
    }

    /// The instant decisions are taken at.
    pub(crate) fn instant(&self) -> Instant {
        Instant::now()
    }

    /// An instant as time since the Unix epoch.
    pub(crate) fn since_epoch(&self, instant: Instant) -> Duration {
        self.origin_since_epoch + instant.saturating_duration_since(self.origin)
    }
}

/// Whole milliseconds in `duration`, rounded up: waiting the reported time always reaches
/// the moment it stands for, as with the millisecond clock of the Lua scripts.
pub(crate) fn millis_up(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// Whole milliseconds from `now` until `deadline` (0 once it passed), rounded up.
pub(crate) fn millis_until(deadline: Instant, now: Instant) -> u64 {
    millis_up(deadline.saturating_duration_since(now))
}

/// Whole microseconds in `duration`, rounded up.
pub(crate) fn micros_up(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX)
}

/// `now` plus `ms` milliseconds: when something set now for `ms` expires. Beyond the clock's
/// range, an invalid argument naming `what` ("a lease").
pub(crate) fn after(now: Instant, ms: u64, what: &str) -> crate::error::Result<Instant> {
    now.checked_add(Duration::from_millis(ms)).ok_or_else(|| {
        crate::error::Error::invalid_argument(format!("{what} of {ms} ms is too long"))
    })
}
