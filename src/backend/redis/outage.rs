//! Since when a backend has been failing without effect, shared by every step of a handle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::server_clock::millis;

/// The current outage: from the first failure, since the server last answered, that left
/// the server untouched and may pass by itself (a refused connection, a failover reply).
/// Steps send again only while the outage is younger than the transient-retry bound, so a
/// long one costs each step nothing more than its first failure.
///
/// An outage ends when the server answers anything (a reply, an error reply), and one whose
/// latest failure is older than [`OUTAGE_MEMORY`] is over too: nothing was sent since (a
/// quiet service), and the next failure starts a new one, with a whole bound to pass.
///
/// One per handle: on a Cluster, a node that fails while the others answer keeps starting
/// new outages, and steps to it each wait up to the bound.
#[derive(Debug)]
pub(super) struct Outage {
    /// The instant the times below count from.
    origin: Instant,
    /// Milliseconds from `origin` to the outage's start, plus one; zero when there is none.
    since: AtomicU64,
    /// Milliseconds from `origin` to the outage's latest failure, plus one.
    latest: AtomicU64,
    /// How many times the server answered (see [`answers`](Self::answers)).
    answers: AtomicU64,
}

impl Outage {
    pub(super) fn new() -> Self {
        Outage {
            origin: Instant::now(),
            since: AtomicU64::new(0),
            latest: AtomicU64::new(0),
            answers: AtomicU64::new(0),
        }
    }

    /// A failure at `now`: the start of the outage under way, which starts `now` if none is
    /// (or if the latest failure of the one there was is older than [`OUTAGE_MEMORY`]).
    pub(super) fn failure(&self, now: Instant) -> Instant {
        let at = self.stamp(now);
        let latest = self.latest.swap(at, Ordering::AcqRel);
        let stale = latest != 0 && at.saturating_sub(latest) > millis(OUTAGE_MEMORY);
        let started = self.since.load(Ordering::Acquire);
        let since = if started == 0 || stale {
            match self
                .since
                .compare_exchange(started, at, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => at,
                Err(other) => other,
            }
        } else {
            started
        };
        self.origin + Duration::from_millis(since.max(1) - 1)
    }

    /// The server answered: the outage, if any, is over. An increment and a load when there
    /// is none, since every step calls it.
    pub(super) fn end(&self) {
        self.answers.fetch_add(1, Ordering::Relaxed);
        if self.since.load(Ordering::Relaxed) != 0 {
            self.since.store(0, Ordering::Release);
        }
    }

    /// A count of the server's answers (replies and error replies) to the steps awaited on
    /// this handle, for telling whether it answered anything between two moments: the count
    /// moved, or it did not.
    pub(super) fn answers(&self) -> u64 {
        self.answers.load(Ordering::Relaxed)
    }

    /// Milliseconds from `origin` to `now`, plus one (zero marks no stamp); a stamp too far to
    /// count stays the largest.
    fn stamp(&self, now: Instant) -> u64 {
        millis(now.saturating_duration_since(self.origin))
            .saturating_add(1)
            .min(u64::MAX - 1)
    }
}

/// How long after its latest failure an outage is remembered: long enough that sparse
/// requests (one every few seconds) during one outage all find it, and are answered at once
/// once it has outlasted the bound; short enough that a quiet service meets a new failure as
/// a new outage.
pub(super) const OUTAGE_MEMORY: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_outage_starts_at_its_first_failure_and_ends_at_an_answer() {
        let outage = Outage::new();
        tokio::time::advance(Duration::from_millis(30)).await;
        let first = Instant::now();
        assert_eq!(outage.failure(Instant::now()), first);
        // Sparse failures, seconds apart: one outage, however long.
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(5)).await;
            assert_eq!(
                outage.failure(Instant::now()),
                first,
                "still the same outage"
            );
        }
        outage.end();
        assert_eq!(outage.failure(Instant::now()), Instant::now(), "a new one");
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_whose_latest_failure_is_old_is_over() {
        let outage = Outage::new();
        let first = Instant::now();
        assert_eq!(outage.failure(first), first);
        // A quiet hour, then a failure: a new outage, with its whole bound.
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(outage.failure(Instant::now()), Instant::now());
        tokio::time::advance(OUTAGE_MEMORY + Duration::from_millis(1)).await;
        assert_eq!(outage.failure(Instant::now()), Instant::now());
    }
}
