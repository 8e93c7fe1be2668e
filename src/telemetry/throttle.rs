//! A log line told at `ERROR` at most once per interval: a misconfiguration (an ACL, a
//! rotated password, a server not set up to record peer addresses) fails every request, and
//! one line every few seconds says it where one per request would bury everything else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// When its line was last told, for one kind of line.
pub(crate) struct Throttle {
    every_ms: u64,
    told_at_ms: AtomicU64,
}

impl Throttle {
    /// A line told at most once every `seconds`.
    pub(crate) const fn every_secs(seconds: u64) -> Self {
        Throttle {
            every_ms: seconds.saturating_mul(1000),
            told_at_ms: AtomicU64::new(0),
        }
    }

    /// Whether the line is to be told now (it was not within the interval), claiming the
    /// turn if so: of callers racing for a turn, one gets it.
    pub(crate) fn due(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        self.due_at(now)
    }

    /// [`due`](Self::due) at `now`, in ms since the epoch on the wall clock.
    fn due_at(&self, now: u64) -> bool {
        let last = self.told_at_ms.load(Ordering::Relaxed);
        // Either way: a wall clock stepped back does not silence the line for as long.
        now.abs_diff(last) >= self.every_ms
            && self
                .told_at_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_due_once_per_interval() {
        let throttle = Throttle::every_secs(60);
        assert!(throttle.due(), "the first is told");
        assert!(!throttle.due(), "the next, within the interval, is not");
        let never = Throttle::every_secs(0);
        assert!(never.due() && never.due(), "no interval: each is told");
    }

    /// A wall clock stepped back (an NTP correction, a VM restored) silences the line for
    /// no longer than the interval, either way it moved.
    #[test]
    fn a_clock_stepped_back_does_not_silence_the_line() {
        let throttle = Throttle::every_secs(60);
        assert!(throttle.due_at(1_000_000));
        assert!(!throttle.due_at(1_000_500), "within the interval");
        assert!(
            !throttle.due_at(999_000),
            "a small step back is within it too"
        );
        assert!(throttle.due_at(900_000), "stepped back by more: told");
        assert!(!throttle.due_at(900_001));
        assert!(
            throttle.due_at(960_000),
            "an interval after, on the new clock"
        );
    }
}
