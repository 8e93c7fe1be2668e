//! An outage told once, not once per request: the first failure of an outage at `WARN`
//! (`ERROR` for a refusal), a summary while it lasts, and its end; each request's own
//! failure at `DEBUG` only.
//!
//! One per layer, and one per [`Coordination`](crate::Coordination) handle for the
//! extractors that use it, so that an outage under load costs a bounded number of events:
//! per log, one when it starts (and one when the first refusal comes, if any does), one per
//! [`SUMMARY_INTERVAL`] while it lasts, and one when the backend decides again, whatever
//! the request rate. A leaf of the crate: it knows nothing of HTTP nor of a backend.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How often an outage under way is summed up.
pub(crate) const SUMMARY_INTERVAL: Duration = Duration::from_secs(10);

/// What became of a request the backend gave no decision for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Let through by the fail-open policy (the fallback's decision, or a local permit).
    FailedOpen,
    /// Answered `503`: the backend is unavailable.
    Unavailable,
    /// Answered `503`: the backend refused (an ACL, a script error, out of memory).
    Refused,
}

impl Outcome {
    /// A request answered `503`: for an unavailable backend, or one that refused.
    pub(crate) fn answered_503(unavailable: bool) -> Outcome {
        if unavailable {
            Outcome::Unavailable
        } else {
            Outcome::Refused
        }
    }
}

/// The outage one layer, or the extractors, met: see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct OutageLog {
    /// Whether an outage is under way: the one load a decided request pays.
    failing: AtomicBool,
    tally: Mutex<Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    /// When the outage started; `None` when none is under way.
    since: Option<Instant>,
    /// When it was last told (its start, or a summary).
    told_at: Option<Instant>,
    /// Whether a refusal was told in this outage.
    refusal_told: bool,
    /// The requests of each outcome since it was last told.
    failed_open: u64,
    unavailable: u64,
    refused: u64,
}

impl Tally {
    fn count(&mut self, outcome: Outcome) {
        let count = match outcome {
            Outcome::FailedOpen => &mut self.failed_open,
            Outcome::Unavailable => &mut self.unavailable,
            Outcome::Refused => &mut self.refused,
        };
        *count = count.saturating_add(1);
    }

    /// The counts since the outage was last told, taken.
    fn take_counts(&mut self) -> Counts {
        Counts {
            failed_open: std::mem::take(&mut self.failed_open),
            unavailable: std::mem::take(&mut self.unavailable),
            refused: std::mem::take(&mut self.refused),
        }
    }
}

/// Requests by outcome, as a summary says them.
struct Counts {
    failed_open: u64,
    unavailable: u64,
    refused: u64,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed open, {} answered 503 (unavailable), {} answered 503 (refused)",
            self.failed_open, self.unavailable, self.refused
        )
    }
}

impl OutageLog {
    /// A request `what` ("rate limit") got no decision from its backend, for `reason`, and
    /// was answered as `outcome`.
    pub(crate) fn failed(&self, what: &'static str, reason: &dyn fmt::Display, outcome: Outcome) {
        tracing::debug!(%reason, ?outcome, "{what} backend gave no decision");
        let now = Instant::now();
        // A poisoned tally only holds counts: still sound.
        let mut tally = self
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(since) = tally.since else {
            tally.since = Some(now);
            tally.told_at = Some(now);
            tally.refusal_told = outcome == Outcome::Refused;
            self.failing.store(true, Ordering::Release);
            drop(tally);
            match outcome {
                Outcome::Refused => tracing::error!(
                    %reason,
                    "the {what} backend refused a request; answering 503 (told once: a summary \
                     every {SUMMARY_INTERVAL:?} while this lasts, and when it ends)"
                ),
                Outcome::Unavailable => tracing::warn!(
                    %reason,
                    "{what} backend unavailable; failing closed (told once: a summary every \
                     {SUMMARY_INTERVAL:?} while this lasts, and when it ends)"
                ),
                Outcome::FailedOpen => tracing::warn!(
                    %reason,
                    "{what} backend unavailable; failing open (told once: a summary every \
                     {SUMMARY_INTERVAL:?} while this lasts, and when it ends)"
                ),
            }
            return;
        };
        tally.count(outcome);
        if outcome == Outcome::Refused && !tally.refusal_told {
            tally.refusal_told = true;
            drop(tally);
            tracing::error!(%reason, "the {what} backend refused a request; answering 503");
            return;
        }
        let due = tally
            .told_at
            .is_none_or(|told| now.saturating_duration_since(told) >= SUMMARY_INTERVAL);
        if due {
            tally.told_at = Some(now);
            let counts = tally.take_counts();
            let refusals = counts.refused > 0;
            drop(tally);
            let lasting = now.saturating_duration_since(since);
            if refusals {
                tracing::error!(%reason, "{what} backend failing for {lasting:?}; since the last report: {counts}");
            } else {
                tracing::warn!(%reason, "{what} backend failing for {lasting:?}; since the last report: {counts}");
            }
        }
    }

    /// A request `what` got its backend's decision: the end of the outage, if one was under
    /// way. One load when none is.
    pub(crate) fn decided(&self, what: &'static str) {
        if !self.failing.load(Ordering::Acquire) {
            return;
        }
        let mut tally = self
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(since) = tally.since.take() else {
            return;
        };
        self.failing.store(false, Ordering::Release);
        tally.told_at = None;
        tally.refusal_told = false;
        let counts = tally.take_counts();
        drop(tally);
        let lasted = Instant::now().saturating_duration_since(since);
        tracing::info!(
            "{what} backend decides again after {lasted:?}; since the last report: {counts}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_told_at_its_start_every_interval_and_at_its_end() {
        let log = OutageLog::default();
        log.decided("limit");
        assert!(!log.failing.load(Ordering::Relaxed));
        for _ in 0..1000 {
            log.failed("limit", &"down", Outcome::Unavailable);
        }
        assert!(log.failing.load(Ordering::Relaxed));
        tokio::time::advance(SUMMARY_INTERVAL).await;
        log.failed("limit", &"down", Outcome::FailedOpen);
        {
            let tally = log.tally.lock().expect("not poisoned");
            assert_eq!(
                tally.unavailable + tally.failed_open,
                0,
                "summed up and reset"
            );
        }
        log.failed("limit", &"denied", Outcome::Refused);
        assert!(log.tally.lock().expect("not poisoned").refusal_told);
        log.decided("limit");
        assert!(!log.failing.load(Ordering::Relaxed));
        assert!(log.tally.lock().expect("not poisoned").since.is_none());
    }
}
