//! What one limiter instance has seen.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::HotKeyStatistics;

/// A snapshot of one [`RateLimiter`](super::RateLimiter) instance's activity.
///
/// The counts are local to this instance (this process); the limit itself lives in the
/// backend and other instances consume it too. `available_permits` is what the latest
/// reply said, so others may have taken permits since.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{FixedWindow, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let limiter = RateLimiter::from(FixedWindow::new(&Coordination::memory(), "api", 1, Duration::from_secs(60))?);
/// limiter.try_acquire(b"k", 1).await?;
/// limiter.try_acquire(b"k", 1).await?;
/// let stats = limiter.statistics();
/// assert_eq!((stats.granted(), stats.rejected()), (1, 1));
/// assert_eq!(stats.available_permits(), Some(0));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitStatistics {
    granted: u64,
    rejected: u64,
    queued_permits: u64,
    available_permits: Option<u64>,
    idle_duration: Duration,
    hot_keys: Option<HotKeyStatistics>,
}

impl RateLimitStatistics {
    /// Acquisitions this instance granted.
    pub fn granted(&self) -> u64 {
        self.granted
    }

    /// Acquisitions this instance rejected (including those rejected locally by the deny
    /// cache, by a full queue, or after waiting in vain).
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Permits currently waiting in this instance's queue.
    pub fn queued_permits(&self) -> u64 {
        self.queued_permits
    }

    /// Permits the latest backend reply reported as available, for whichever key it was
    /// about; `None` before the first reply.
    pub fn available_permits(&self) -> Option<u64> {
        self.available_permits
    }

    /// Time without local acquisitions or queued waiters: a keyed collection of limiters can
    /// drop instances idle for long (their state stays in the backend).
    pub fn idle_duration(&self) -> Duration {
        self.idle_duration
    }

    /// What the hot-key tier of a [`FixedWindow`](super::FixedWindow) has done (see
    /// [`HotKeys`](super::HotKeys)); `None` without one.
    pub fn hot_keys(&self) -> Option<HotKeyStatistics> {
        self.hot_keys
    }
}

/// The live counters behind [`RateLimitStatistics`].
#[derive(Debug)]
pub(crate) struct Counters {
    granted: AtomicU64,
    rejected: AtomicU64,
    /// `u64::MAX` until the first reply.
    available: AtomicU64,
    /// When the counters were made: `last_activity` counts from it.
    origin: Instant,
    /// Nanoseconds from `origin` to the latest activity: an atomic, since every decision
    /// sets it.
    last_activity: AtomicU64,
}

impl Counters {
    pub(crate) fn new() -> Self {
        Counters {
            granted: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            available: AtomicU64::new(u64::MAX),
            origin: Instant::now(),
            last_activity: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn record(&self, granted: bool) {
        let counter = if granted {
            &self.granted
        } else {
            &self.rejected
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.touch();
    }

    pub(crate) fn record_available(&self, remaining: u64) {
        self.available
            .store(remaining.min(u64::MAX - 1), Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn touch(&self) {
        let since = self.origin.elapsed().as_nanos();
        // A plain store: two decisions racing may leave the earlier one's time, nanoseconds
        // apart, which an idle time cannot tell.
        self.last_activity
            .store(u64::try_from(since).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(crate) fn snapshot(
        &self,
        queued_permits: u64,
        hot_keys: Option<HotKeyStatistics>,
    ) -> RateLimitStatistics {
        let available = self.available.load(Ordering::Relaxed);
        RateLimitStatistics {
            granted: self.granted.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            queued_permits,
            available_permits: (available != u64::MAX).then_some(available),
            idle_duration: if queued_permits > 0 {
                Duration::ZERO
            } else {
                let last = self.last_activity.load(Ordering::Relaxed);
                self.origin
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(last))
            },
            hot_keys,
        }
    }
}
