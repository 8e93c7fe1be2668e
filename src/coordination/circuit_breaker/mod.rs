//! A circuit breaker for the acquisitions made through one handle or layer, so that a dead or
//! silent backend is not hammered and does not cost every request its timeout.

mod within;

pub(crate) use within::{Failure, admit, within};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::backend::delivery::Delivery;

/// Settings of a circuit breaker that stops new decisions (rate-limit decisions, concurrency
/// permits, the extractors' leases and permits: "acquisitions" below) from reaching a
/// backend that keeps failing, so that a silent Redis costs each request nothing rather than
/// its whole timeout.
///
/// On by default on Redis: every [`Coordination`](crate::Coordination) handle has one
/// ([`Coordination::circuit_state`](crate::Coordination::circuit_state)), shared by its
/// clones, by the extractors that take it and by the layers built from it. A layer may have
/// its own (`.circuit_breaker(...)`) or none (`.no_circuit_breaker()`); the handle's is set
/// with [`Coordination::circuit_breaker`](crate::Coordination::circuit_breaker). The
/// in-process backend has none: it cannot fall silent.
///
/// - **Closed**: acquisitions go to the backend; `failure_threshold` consecutive
///   availability failures open the circuit. A failure is an error that says the backend is
///   unavailable ([`Error::is_unavailable`](crate::Error::is_unavailable): no connection, no
///   reply within the backend's response timeout, a failover reply), or a layer's timeout
///   during which no step on the handle got its answer (none arrived for any step still
///   awaited since the acquisition was sent): silence. Refusals do not count, and neither
///   does a timeout while other answers arrive (one slow step, a busy moment, renewals and
///   releases answered meanwhile): a server that answers something is not silent, however
///   slow. On a quiet handle a server slower than the timeout is as good as silent, since
///   its answers come to requests already dropped.
/// - **Open**: acquisitions fail at once, with no network I/O, for `open_for` (plus or minus
///   up to a fifth, at random, so that replicas do not probe in step), or until the server
///   answers anything on the handle (a held lease's renewal, an error reply), whichever
///   comes first.
/// - **Half-open**: at most `half_open_probes` acquisitions at a time test the backend; one
///   probe's success closes the circuit, one failed probe opens it again with fresh jitter.
///   Only a probe closes it: a late answer to an acquisition sent before the circuit opened
///   does not.
///
/// The handle's breaker judges every acquisition made through it together: a layer whose
/// timeout is much shorter than the others' can open it for all of them. Give such a layer
/// its own breaker (`.circuit_breaker(...)`) or none.
///
/// The breaker guards acquisitions only: renewals and releases of what is already held
/// always go to the backend, so leases and streams in flight survive a short outage.
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
    /// Five consecutive failures open the circuit for two seconds; one probe at a time. So
    /// a silent server costs the first few requests their timeouts, every request after them
    /// nothing, and one probe's timeout every two seconds; and a server back from an outage
    /// is probed at once, whatever is left of the two seconds, when it answers anything (a
    /// held lease's renewal) or the handle's connection, made again in the background, is
    /// made.
    pub fn new() -> Self {
        CircuitBreaker {
            failure_threshold: 5,
            open_for: Duration::from_secs(2),
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

/// A breaker's live state, shared by every clone of one handle or layer.
#[derive(Debug)]
pub(crate) struct Breaker {
    settings: CircuitBreaker,
    state: Mutex<State>,
    /// Whether the state is closed with no failure counted: what nearly every request
    /// finds, read without the lock. Written under it, after every change of the state.
    clean: AtomicBool,
    /// The backend it guards, asked whether the server answered anything between two
    /// moments (see [`Backend::answers`]).
    backend: Backend,
    /// Its name in the state's gauge: the handle's endpoint (`memory` in process), or the
    /// layer's name.
    name: Arc<str>,
}

#[derive(Debug)]
enum State {
    Closed {
        failures: u32,
        round: u64,
    },
    Open {
        until: Instant,
        round: u64,
        /// The count of the server's answers when it opened: once it moves, the server
        /// answers again and a probe may go at once.
        answers: Option<u64>,
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
    /// The count of the server's answers when it was admitted (see
    /// [`timed_out`](Self::timed_out)).
    answers: Option<u64>,
    settled: bool,
}

impl Breaker {
    /// A breaker for the acquisitions on `backend`, called `name` in its gauge.
    pub(crate) fn new(settings: CircuitBreaker, backend: &Backend, name: &str) -> Arc<Self> {
        let breaker = Breaker {
            settings,
            state: Mutex::new(State::Closed {
                failures: 0,
                round: 0,
            }),
            clean: AtomicBool::new(true),
            backend: backend.clone(),
            name: name.into(),
        };
        Arc::new(breaker)
    }

    /// The breaker a handle on `backend` has by default: none in process, which cannot fall
    /// silent.
    pub(crate) fn by_default(backend: &Backend) -> Option<Arc<Self>> {
        (!backend.decides_in_process())
            .then(|| Breaker::new(CircuitBreaker::default(), backend, backend.endpoint()))
    }

    pub(crate) fn state(&self) -> CircuitState {
        if self.clean.load(Ordering::Acquire) {
            return CircuitState::Closed;
        }
        match &*self.lock() {
            State::Closed { .. } => CircuitState::Closed,
            State::Open { until, answers, .. }
                if Instant::now() < *until && self.backend.answers() == *answers =>
            {
                CircuitState::Open
            }
            // Past its end, an open circuit admits probes on the next acquisition: its gauge
            // says so from the first look, not from that acquisition.
            State::Open { .. } => {
                crate::telemetry::circuit(&self.name, 1);
                CircuitState::HalfOpen
            }
            State::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    /// Admits one acquisition, or `None` while the circuit is open (or half-open with every
    /// probe slot taken).
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Admission> {
        // Closed with nothing counted: admitted without the lock. One that opens meanwhile
        // admitted this acquisition just before, which it may.
        let probe = if self.clean.load(Ordering::Acquire) {
            None
        } else {
            self.probe_slot()?
        };
        Some(Admission {
            breaker: self.clone(),
            probe,
            answers: self.backend.answers(),
            settled: false,
        })
    }

    /// Under the lock, the half-open round an admission probes in (`Some(None)`: admitted
    /// while closed), or `None` while the circuit is open or every probe slot is taken.
    fn probe_slot(&self) -> Option<Option<u64>> {
        let mut state = self.lock();
        let probe = match &mut *state {
            State::Closed { .. } => None,
            State::Open {
                until,
                round,
                answers,
            } => {
                if Instant::now() < *until && self.backend.answers() == *answers {
                    return None;
                }
                let round = *round + 1;
                *state = State::HalfOpen { probes: 1, round };
                self.changed(&state);
                crate::telemetry::circuit(&self.name, 1);
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
        Some(probe)
    }

    fn open(&self, state: &mut State) {
        // Open for its time plus or minus a fifth: replicas that opened together do not
        // probe together.
        let until = crate::time::after(
            Instant::now(),
            crate::jitter::around(self.settings.open_for, 5),
        );
        let (State::Closed { round, .. }
        | State::HalfOpen { round, .. }
        | State::Open { round, .. }) = state;
        let round = *round;
        let reopened = matches!(state, State::HalfOpen { .. });
        *state = State::Open {
            until,
            round,
            answers: self.backend.answers(),
        };
        self.changed(state);
        crate::telemetry::circuit(&self.name, 2);
        // The outage itself is told at WARN by each layer's outage log, once; the breaker's
        // opening is a detail of it, and a failed probe every few seconds is no news.
        if reopened {
            tracing::debug!(open_for = ?self.settings.open_for, "a probe failed: circuit open again");
        } else {
            tracing::info!(
                open_for = ?self.settings.open_for,
                "the backend keeps failing: circuit open, acquisitions fail fast"
            );
        }
    }

    /// Keeps [`clean`](Self::clean) true to `state`, just changed under the lock.
    fn changed(&self, state: &State) {
        let clean = matches!(state, State::Closed { failures: 0, .. });
        self.clean.store(clean, Ordering::Release);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a plain value: a panic cannot leave it half-written.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Admission {
    /// The backend answered. A probe's answer closes the circuit; any other resets the count
    /// of a closed circuit, but does not close an open one: an acquisition admitted before
    /// the circuit opened says nothing about the backend now.
    pub(crate) fn succeeded(mut self) {
        self.settled = true;
        // Closed with nothing counted, as nearly always: nothing to reset, no lock. A
        // failure counted meanwhile was counted after this answer, which it may be.
        if self.probe.is_none() && self.breaker.clean.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.breaker.lock();
        match &mut *state {
            State::Closed { failures, .. } => {
                *failures = 0;
                self.breaker.changed(&state);
            }
            State::HalfOpen { round, .. } if self.probe == Some(*round) => {
                tracing::info!("the backend answered a probe: circuit closed");
                let round = *round;
                *state = State::Closed { failures: 0, round };
                self.breaker.changed(&state);
                crate::telemetry::circuit(&self.breaker.name, 0);
            }
            State::HalfOpen { .. } | State::Open { .. } => {}
        }
    }

    /// The acquisition outlived its caller's timeout: a failure when the server answered
    /// nothing on the handle since it was admitted (it is silent, not slow: a busy runtime or
    /// one slow step leaves other answers arriving), no verdict otherwise.
    pub(crate) fn timed_out(self) {
        if self.answers.is_some() && self.breaker.backend.answers() == self.answers {
            // The connection's silence too: given up on at the caller's timeout, the step
            // met no response timer of its own.
            self.breaker.backend.unanswered();
            self.failed();
        } else {
            self.breaker.backend.unanswered_among_answers();
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
                } else {
                    breaker.changed(&state);
                }
            }
            State::HalfOpen { round, .. } if self.probe == Some(*round) => breaker.open(&mut state),
            // A late failure from before the circuit opened, or while another probe runs.
            State::HalfOpen { .. } | State::Open { .. } => {}
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// On an in-process backend, whose answers are never counted: only verdicts move it.
    fn breaker(threshold: u32, probes: u32) -> Arc<Breaker> {
        Breaker::new(
            CircuitBreaker::new()
                .failure_threshold(threshold)
                .open_for(Duration::from_secs(10))
                .half_open_probes(probes),
            &Backend::from(crate::backend::memory::MemoryBackend::new()),
            "test",
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_circuit_open_for_ever_opens_without_overflowing() {
        let breaker = Breaker::new(
            CircuitBreaker::new()
                .failure_threshold(1)
                .open_for(Duration::MAX),
            &Backend::from(crate::backend::memory::MemoryBackend::new()),
            "test",
        );
        breaker.admit().expect("closed").failed();
        assert_eq!(breaker.state(), CircuitState::Open);
        assert!(breaker.admit().is_none());
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
            answers: None,
            settled: false,
        };
        late.succeeded();
        assert_eq!(breaker.state(), CircuitState::HalfOpen);
        let late = Admission {
            breaker: breaker.clone(),
            probe: Some(1),
            answers: None,
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
}
