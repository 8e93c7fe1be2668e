//! The one backoff every retry loop of the crate uses: pauses that double from a first step
//! up to a cap, each drawn between half of its step and all of it, so that many clients
//! failing together do not try again together.

use std::time::Duration;

/// Capped, doubling, jittered pauses between attempts.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    step: Duration,
}

impl Backoff {
    /// Pauses from about `first` (at least half of it) doubling up to `max`.
    pub(crate) const fn new(first: Duration, max: Duration) -> Self {
        Backoff {
            first,
            max,
            step: first,
        }
    }

    /// The pause before the next attempt: between half of the current step and all of it.
    /// The step then doubles, up to the cap.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let step = self.step;
        self.step = step.saturating_mul(2).min(self.max);
        crate::jitter::between(step / 2, step)
    }

    /// Starts again from the first step: after a success.
    pub(crate) fn reset(&mut self) {
        self.step = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_with_jitter() {
        let (first, max) = (Duration::from_millis(50), Duration::from_secs(2));
        for _ in 0..50 {
            let mut backoff = Backoff::new(first, max);
            let pauses: Vec<Duration> = (0..12).map(|_| backoff.next_pause()).collect();
            assert!(pauses[0] >= first / 2 && pauses[0] <= first, "{pauses:?}");
            assert!(pauses[1] >= first && pauses[1] <= 2 * first, "{pauses:?}");
            assert!(pauses.iter().all(|&p| p <= max), "{pauses:?}");
            assert!(pauses[11] >= max / 2, "{pauses:?}");
            backoff.reset();
            assert!(backoff.next_pause() <= first);
        }
    }
}
