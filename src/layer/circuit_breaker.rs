//! A worker-local circuit breaker for a layer's decisions, so a dead backend is not hammered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// Settings of a circuit breaker that stops a layer's new decisions (rate-limit decisions,
/// concurrency permits: "acquisitions" below) from reaching a backend that keeps failing.
/// Either layer takes one with `.circuit_breaker(...)`.
///
/// - **Closed**: acquisitions go to the backend; `failure_threshold` consecutive
///   availability failures ([`Error::is_unavailable`](crate::Error::is_unavailable): no
///   connection, no reply within the backend's response timeout, a failover reply) open the
///   circuit. Refusals do not count, and neither does the layer's own timeout: an acquisition
///   that outlives it goes on in the background, and what the backend then says counts.
/// - **Open**: acquisitions fail at once, with no network I/O, for `open_for` (plus or minus
///   up to a fifth, at random, so that replicas do not probe in step).
/// - **Half-open**: at most `half_open_probes` acquisitions at a time test the backend; one
///   probe's success closes the circuit, one failed probe opens it again with fresh jitter.
///   Only a probe closes it: a late answer to an acquisition sent before the circuit opened
///   does not.
///
/// The breaker is local to one process and guards acquisitions only: renewals of permits
/// already held always go to the backend, so streams in flight survive a short outage.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::layer::CircuitBreaker;
///
/// let breaker = CircuitBreaker::new()
///     .failure_threshold(3)
///     .open_for(Duration::from_secs(2))
///     .half_open_probes(1);
/// # let _ = breaker;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitBreaker {
    failure_threshold: u32,
    open_for: Duration,
    half_open_probes: u32,
}

impl CircuitBreaker {
    /// Five consecutive failures open the circuit for five seconds; one probe at a time.
    pub fn new() -> Self {
        CircuitBreaker {
            failure_threshold: 5,
            open_for: Duration::from_secs(5),
            half_open_probes: 1,
        }
    }

    /// Consecutive availability failures that open the circuit (at least 1).
    pub fn failure_threshold(mut self, failures: u32) -> Self {
        self.failure_threshold = failures.max(1);
        self
    }

    /// How long the circuit stays open before probing, before jitter.
    pub fn open_for(mut self, duration: Duration) -> Self {
        self.open_for = duration;
        self
    }

    /// Acquisitions allowed at once while half-open (at least 1).
    pub fn half_open_probes(mut self, probes: u32) -> Self {
        self.half_open_probes = probes.max(1);
        self
    }
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        CircuitBreaker::new()
    }
}

/// The state of a circuit breaker.
///
/// # Example
///
/// ```
/// use leasehold::Coordination;
/// use leasehold::layer::{CircuitBreaker, CircuitState};
/// use leasehold::layer::concurrency_limit::{Capacity, RedisConcurrencyLimitLayer};
///
/// # fn main() -> leasehold::Result<()> {
/// let layer = RedisConcurrencyLimitLayer::new(&Coordination::memory(), "jobs", Capacity::global(8))?
///     .circuit_breaker(CircuitBreaker::new());
/// // Export it as a gauge, for example.
/// assert_eq!(layer.circuit_state(), Some(CircuitState::Closed));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CircuitState {
    /// Acquisitions go to the backend.
    Closed,
    /// Acquisitions fail at once, without network I/O.
    Open,
    /// A bounded number of acquisitions test whether the backend is back.
    HalfOpen,
}

/// A breaker's live state, shared by every clone of one layer.
#[derive(Debug)]
pub(crate) struct Breaker {
    settings: CircuitBreaker,
    state: Mutex<State>,
    /// Attempts that outlived the layer's timeout and are heard out in the background.
    late: AtomicUsize,
}

/// The most attempts a breaker hears out in the background after the layer's timeout: a
/// flood that pushes every decision past the timeout would otherwise spawn one task per
/// request. Beyond it, a late attempt is dropped at the timeout, and gives no verdict.
pub(crate) const MAX_LATE_ATTEMPTS: usize = 64;

#[derive(Debug)]
enum State {
    Closed {
        failures: u32,
        round: u64,
    },
    Open {
        until: Instant,
        round: u64,
    },
    /// `round` counts half-open rounds, so that a probe from an earlier round, answered
    /// late, cannot close or reopen this one, nor free one of its probe slots.
    HalfOpen {
        probes: u32,
        round: u64,
    },
}

/// Permission to send one acquisition; report how it went with [`Admission::succeeded`] or
/// [`Admission::failed`]. Dropped without a verdict (the request was cancelled, or the
/// failure said nothing about availability), it frees its probe slot and changes nothing
/// else.
#[derive(Debug)]
pub(crate) struct Admission {
    breaker: Arc<Breaker>,
    /// The half-open round this admission probes in; `None` when admitted while closed.
    probe: Option<u64>,
    settled: bool,
}

impl Breaker {
    pub(crate) fn new(settings: CircuitBreaker) -> Arc<Self> {
        Arc::new(Breaker {
            settings,
            state: Mutex::new(State::Closed {
                failures: 0,
                round: 0,
            }),
            late: AtomicUsize::new(0),
        })
    }

    pub(crate) fn state(&self) -> CircuitState {
        match &*self.lock() {
            State::Closed { .. } => CircuitState::Closed,
            State::Open { until, .. } if Instant::now() < *until => CircuitState::Open,
            // Past its end, an open circuit admits probes on the next acquisition.
            State::Open { .. } | State::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    /// Admits one acquisition, or `None` while the circuit is open (or half-open with every
    /// probe slot taken).
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Admission> {
        let mut state = self.lock();
        let probe = match &mut *state {
            State::Closed { .. } => None,
            State::Open { until, round } => {
                if Instant::now() < *until {
                    return None;
                }
                let round = *round + 1;
                *state = State::HalfOpen { probes: 1, round };
                Some(round)
            }
            State::HalfOpen { probes, round } => {
                if *probes >= self.settings.half_open_probes {
                    return None;
                }
                *probes += 1;
                Some(*round)
            }
        };
        Some(Admission {
            breaker: self.clone(),
            probe,
            settled: false,
        })
    }

    fn open(&self, state: &mut State) {
        let until = crate::time::after(Instant::now(), jittered(self.settings.open_for));
        let (State::Closed { round, .. }
        | State::HalfOpen { round, .. }
        | State::Open { round, .. }) = state;
        let round = *round;
        *state = State::Open { until, round };
        tracing::warn!(
            open_for = ?self.settings.open_for,
            "the backend keeps failing: circuit open, acquisitions fail fast"
        );
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a plain value: a panic cannot leave it half-written.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Admission {
    /// Claims one of the breaker's [`MAX_LATE_ATTEMPTS`] slots for an attempt heard out in
    /// the background, released when the returned guard drops; `None` when all are taken.
    pub(crate) fn hear_out_late(&self) -> Option<LateAttempt> {
        let breaker = &self.breaker;
        let mut taken = breaker.late.load(Ordering::Relaxed);
        loop {
            if taken >= MAX_LATE_ATTEMPTS {
                tracing::debug!("too many late attempts heard out; dropping this one");
                return None;
            }
            match breaker.late.compare_exchange_weak(
                taken,
                taken + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(LateAttempt(breaker.clone())),
                Err(now) => taken = now,
            }
        }
    }

    /// The backend answered. A probe's answer closes the circuit; any other resets the count
    /// of a closed circuit, but does not close an open one: an acquisition admitted before
    /// the circuit opened says nothing about the backend now.
    pub(crate) fn succeeded(mut self) {
        self.settled = true;
        let mut state = self.breaker.lock();
        match &mut *state {
            State::Closed { failures, .. } => *failures = 0,
            State::HalfOpen { round, .. } if self.probe == Some(*round) => {
                tracing::info!("the backend answered a probe: circuit closed");
                let round = *round;
                *state = State::Closed { failures: 0, round };
            }
            State::HalfOpen { .. } | State::Open { .. } => {}
        }
    }

    /// The backend was unavailable ([`Error::is_unavailable`](crate::Error::is_unavailable)).
    pub(crate) fn failed(mut self) {
        self.settled = true;
        let breaker = self.breaker.clone();
        let mut state = breaker.lock();
        match &mut *state {
            State::Closed { failures, .. } => {
                *failures += 1;
                if *failures >= breaker.settings.failure_threshold {
                    breaker.open(&mut state);
                }
            }
            State::HalfOpen { round, .. } if self.probe == Some(*round) => breaker.open(&mut state),
            // A late failure from before the circuit opened, or while another probe runs.
            State::HalfOpen { .. } | State::Open { .. } => {}
        }
    }
}

/// A slot for a late attempt (see [`Admission::hear_out_late`]), given back on drop.
pub(crate) struct LateAttempt(Arc<Breaker>);

impl Drop for LateAttempt {
    fn drop(&mut self) {
        self.0.late.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let Some(probe_round) = self.probe else {
            return;
        };
        if self.settled {
            return;
        }
        if let State::HalfOpen { probes, round } = &mut *self.breaker.lock()
            && *round == probe_round
        {
            *probes = probes.saturating_sub(1);
        }
    }
}

/// `base` plus or minus up to a fifth, at random.
fn jittered(base: Duration) -> Duration {
    let fifth = base / 5;
    crate::jitter::between(base - fifth, base.saturating_add(fifth))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(threshold: u32, probes: u32) -> Arc<Breaker> {
        Breaker::new(
            CircuitBreaker::new()
                .failure_threshold(threshold)
                .open_for(Duration::from_secs(10))
                .half_open_probes(probes),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_circuit_open_for_ever_opens_without_overflowing() {
        let breaker = Breaker::new(
            CircuitBreaker::new()
                .failure_threshold(1)
                .open_for(Duration::MAX),
        );
        breaker.admit().expect("closed").failed();
        assert_eq!(breaker.state(), CircuitState::Open);
        assert!(breaker.admit().is_none());
    }

    #[test]
    fn at_most_a_bounded_number_of_late_attempts_are_heard_out() {
        let breaker = breaker(3, 1);
        let admission = breaker.admit().expect("closed");
        let slots: Vec<_> = (0..MAX_LATE_ATTEMPTS)
            .map(|_| admission.hear_out_late().expect("a free slot"))
            .collect();
        assert!(admission.hear_out_late().is_none(), "the cap");
        drop(slots);
        assert!(admission.hear_out_late().is_some(), "given back");
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_and_fails_fast() {
        let breaker = breaker(3, 1);
        for _ in 0..2 {
            breaker.admit().expect("closed").failed();
        }
        // A success resets the count.
        breaker.admit().expect("closed").succeeded();
        for _ in 0..2 {
            breaker.admit().expect("closed").failed();
        }
        assert_eq!(breaker.state(), CircuitState::Closed);
        breaker.admit().expect("closed").failed();
        assert_eq!(breaker.state(), CircuitState::Open);
        assert!(breaker.admit().is_none());
        // Jitter keeps the open time within a fifth of ten seconds.
        tokio::time::advance(Duration::from_secs(7)).await;
        assert!(breaker.admit().is_none());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(breaker.state(), CircuitState::HalfOpen);
    }

    #[tokio::test(start_paused = true)]
    async fn half_open_admits_bounded_probes() {
        let breaker = breaker(1, 2);
        breaker.admit().expect("closed").failed();
        tokio::time::advance(Duration::from_secs(13)).await;
        let first = breaker.admit().expect("probe");
        let second = breaker.admit().expect("probe");
        assert!(breaker.admit().is_none(), "two probes at most");
        // A probe dropped without a verdict frees its slot.
        drop(second);
        let third = breaker.admit().expect("probe");
        // One failed probe opens the circuit again.
        first.failed();
        assert_eq!(breaker.state(), CircuitState::Open);
        assert!(breaker.admit().is_none());
        drop(third);
        tokio::time::advance(Duration::from_secs(13)).await;
        breaker.admit().expect("probe").succeeded();
        assert_eq!(breaker.state(), CircuitState::Closed);
        assert!(breaker.admit().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_probe_closes_an_open_circuit() {
        let breaker = breaker(2, 1);
        // Admitted while closed, answered after the circuit opened.
        let late = breaker.admit().expect("closed");
        breaker.admit().expect("closed").failed();
        breaker.admit().expect("closed").failed();
        assert_eq!(breaker.state(), CircuitState::Open);
        late.succeeded();
        assert_eq!(
            breaker.state(),
            CircuitState::Open,
            "a late success is no probe"
        );
        assert!(breaker.admit().is_none());
        tokio::time::advance(Duration::from_secs(13)).await;
        let probe = breaker.admit().expect("the probe");
        assert_eq!(breaker.state(), CircuitState::HalfOpen);
        probe.succeeded();
        assert_eq!(breaker.state(), CircuitState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_from_an_earlier_round_changes_nothing() {
        let breaker = breaker(1, 1);
        breaker.admit().expect("closed").failed();
        tokio::time::advance(Duration::from_secs(13)).await;
        let old = breaker.admit().expect("round 1's probe");
        // A second probe of round 1 fails: round 2 starts once the circuit is open again.
        drop(old);
        let failing = breaker.admit().expect("round 1's probe again");
        let stale = breaker.admit();
        assert!(stale.is_none(), "one probe at a time");
        failing.failed();
        tokio::time::advance(Duration::from_secs(13)).await;
        let current = breaker.admit().expect("round 2's probe");
        assert!(breaker.admit().is_none(), "round 2's slot is taken");
        // A round-1 probe answering now (kept alive past its round) changes nothing.
        let late = Admission {
            breaker: breaker.clone(),
            probe: Some(1),
            settled: false,
        };
        late.succeeded();
        assert_eq!(breaker.state(), CircuitState::HalfOpen);
        let late = Admission {
            breaker: breaker.clone(),
            probe: Some(1),
            settled: false,
        };
        drop(late);
        assert!(
            breaker.admit().is_none(),
            "a stale drop frees no slot of round 2"
        );
        current.succeeded();
        assert_eq!(breaker.state(), CircuitState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn an_admission_dropped_without_a_verdict_changes_nothing() {
        let breaker = breaker(1, 1);
        // A request cancelled, or a refusal: no verdict on availability.
        drop(breaker.admit().expect("closed"));
        assert_eq!(breaker.state(), CircuitState::Closed);
        let stale = breaker.admit().expect("closed");
        breaker.admit().expect("closed").failed();
        assert_eq!(breaker.state(), CircuitState::Open);
        drop(stale);
        assert_eq!(breaker.state(), CircuitState::Open);
    }

    #[test]
    fn jitter_stays_within_a_fifth() {
        for _ in 0..100 {
            let d = jittered(Duration::from_secs(5));
            assert!(
                d >= Duration::from_secs(4) && d < Duration::from_secs(6),
                "{d:?}"
            );
        }
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }
}
