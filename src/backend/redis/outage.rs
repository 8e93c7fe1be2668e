//! Since when a backend has been failing without effect, shared by every step of a handle.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

/// The start of the current outage: the first failure, since the last success, that left
/// the server untouched and may pass by itself (a refused connection, a failover reply).
/// Steps send again only while the outage is younger than the transient-retry bound, so a
/// long one costs each step nothing more than its first failure.
#[derive(Debug)]
pub(super) struct Outage {
    /// The instant the times below count from.
    origin: Instant,
    /// Milliseconds from `origin` to the outage's start, plus one; zero when there is none.
    since: AtomicU64,
}

impl Outage {
    pub(super) fn new() -> Self {
        Outage {
            origin: Instant::now(),
            since: AtomicU64::new(0),
        }
    }

    /// The start of the outage under way, which starts `now` if none is.
    pub(super) fn since(&self, now: Instant) -> Instant {
        let at = u64::try_from(now.saturating_duration_since(self.origin).as_millis())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1);
        let since = match self
            .since
            .compare_exchange(0, at, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => at,
            Err(started) => started,
        };
        self.origin + std::time::Duration::from_millis(since - 1)
    }

    /// A step succeeded: the outage, if any, is over. One load when there is none, since
    /// every step calls it.
    pub(super) fn end(&self) {
        if self.since.load(Ordering::Relaxed) != 0 {
            self.since.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_outage_starts_at_its_first_failure_and_ends_at_a_success() {
        let outage = Outage::new();
        let first = Instant::now() + Duration::from_millis(30);
        tokio::time::advance(Duration::from_millis(30)).await;
        assert_eq!(outage.since(Instant::now()), first);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(outage.since(Instant::now()), first, "still the same outage");
        outage.end();
        assert_eq!(outage.since(Instant::now()), Instant::now(), "a new one");
    }
}
