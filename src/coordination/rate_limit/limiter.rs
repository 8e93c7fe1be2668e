//! Any rate limiter, with what stays local to one instance: a waiting queue, a deny cache
//! and statistics.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use super::algorithm::Algorithm;
use super::deny_cache::DenyCache;
use super::policy::Policies;
use super::queue::{QueueOrder, Role, WaitQueue};
use super::statistics::{Counters, RateLimitStatistics};
use super::{RateLimitDecision, RateLimitPolicy};
use crate::error::{Error, ErrorKind, Result};

/// A rate limiter of any algorithm, with optional local features:
///
/// - a **waiting queue** ([`with_queue`](Self::with_queue)), so that
///   [`acquire`](Self::acquire) waits for permits instead of being rejected;
/// - a **deny cache** ([`with_deny_cache`](Self::with_deny_cache)) that answers requests for
///   a key rejected moments ago locally, until its retry time, without a round trip;
/// - [`statistics`](Self::statistics) of this instance.
///
/// Build it from any algorithm ([`FixedWindow`](super::FixedWindow),
/// [`SlidingWindow`](super::SlidingWindow), [`TokenBucket`](super::TokenBucket),
/// [`Gcra`](super::Gcra), [`Stacked`](super::Stacked)) with `From`. Cheap to clone: clones share the queue, cache and
/// statistics.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{FixedWindow, QueueOrder, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let window = FixedWindow::new(&Coordination::memory(), "jobs", 1, Duration::from_millis(100))?;
/// let limiter = RateLimiter::from(window).with_queue(10, QueueOrder::OldestFirst);
///
/// assert!(limiter.try_acquire(b"worker", 1).await?.is_granted());
/// // The window is spent: wait (up to a second) for the next one instead of failing.
/// let decision = limiter.acquire(b"worker", 1, Duration::from_secs(1)).await?;
/// assert!(decision.is_granted());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

struct Inner {
    algorithm: Algorithm,
    settings: Settings,
    queue: Option<WaitQueue>,
    deny_cache: Option<DenyCache>,
    counters: Counters,
    closed: AtomicBool,
}

#[derive(Clone, Copy, Default)]
struct Settings {
    queue: Option<(u64, QueueOrder)>,
    deny_cache: Option<usize>,
}

impl RateLimiter {
    pub(super) fn new(algorithm: Algorithm) -> Self {
        Self::build(algorithm, Settings::default())
    }

    fn build(algorithm: Algorithm, settings: Settings) -> Self {
        RateLimiter {
            inner: Arc::new(Inner {
                queue: settings
                    .queue
                    .map(|(limit, order)| WaitQueue::new(limit, order, algorithm.name())),
                deny_cache: settings.deny_cache.map(DenyCache::new),
                algorithm,
                settings,
                counters: Counters::new(),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// A new limiter of the same algorithm whose [`acquire`](Self::acquire) queues
    /// up to `queue_limit` permits in total, served in `order`. (Queues are per client key;
    /// the limit bounds them all together, and a key that floods the queue keeps at most half
    /// of it against the others: see [`QueueOrder`].) The new limiter has its own statistics.
    pub fn with_queue(self, queue_limit: u64, order: QueueOrder) -> Self {
        let mut settings = self.inner.settings;
        settings.queue = Some((queue_limit, order));
        Self::build(self.inner.algorithm.clone(), settings)
    }

    /// A new limiter of the same algorithm that remembers up to `max_keys` recent rejections
    /// and rejects further requests for those keys locally until their retry time.
    ///
    /// It saves a round trip per request under a flood of one hot key, at the price of not
    /// noticing permits that come back early (a window that another process resets, a
    /// smaller request that would fit is still sent). The new limiter has its own
    /// statistics.
    ///
    /// The keys are spread over up to 16 locks by a hash, each with an equal share of
    /// `max_keys` (rounded down), so that decisions on several cores rarely wait for one
    /// another. A rejection whose share is full of live entries is not remembered (the
    /// backend keeps deciding for that key); expired entries make room without a scan.
    pub fn with_deny_cache(self, max_keys: usize) -> Self {
        let mut settings = self.inner.settings;
        settings.deny_cache = Some(max_keys.max(1));
        Self::build(self.inner.algorithm.clone(), settings)
    }

    /// A new limiter of this one's algorithm with `other`'s queue and deny cache settings
    /// (a plan's limiter, as its layer configured the default plan's).
    pub(crate) fn with_settings_of(&self, other: &RateLimiter) -> Self {
        Self::build(self.inner.algorithm.clone(), other.inner.settings)
    }

    /// The limiter's policy; for a [`Stacked`](super::Stacked) limiter, its first policy
    /// (see [`policies`](Self::policies)).
    pub fn policy(&self) -> &RateLimitPolicy {
        self.inner.algorithm.policy()
    }

    /// Every policy of the limiter, in the order of each decision's
    /// [`policy_states`](RateLimitDecision::policy_states): one, except for a
    /// [`Stacked`](super::Stacked) limiter.
    pub fn policies(&self) -> &[RateLimitPolicy] {
        self.inner.algorithm.policies()
    }

    /// Its name, as given to its algorithm's constructor (a [`Stacked`](super::Stacked)
    /// limiter's own, not its policies'): the `policy` label of its
    /// [metrics](crate::telemetry).
    pub fn name(&self) -> &str {
        self.inner.algorithm.name()
    }

    /// The handle it decides on.
    pub(crate) fn coordination(&self) -> &crate::Coordination {
        self.inner.algorithm.coordination()
    }

    /// The policies, cheap to clone into each request's information.
    pub(crate) fn shared_policies(&self) -> Policies {
        self.inner.algorithm.shared_policies()
    }

    /// Asks for `permits` permits for `key` now, without waiting (see each algorithm's
    /// `try_acquire` for the decision's meaning).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: once sent, the permits may be consumed even if the future is dropped.
    pub async fn try_acquire(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        let decided = self.decide(key, permits).await;
        self.counted(decided)
    }

    /// Asks for `permits` permits for `key`, waiting up to `max_wait` in this instance's
    /// queue when they are not available now.
    ///
    /// A rejected request joins its key's line (unless the queue is full, or the server says
    /// the wait exceeds `max_wait`, or it can never succeed: then the rejection is returned
    /// at once). The first in line sleeps until the availability time the server computed,
    /// then retries once; each retry that fails sets the next wake-up from its own answer.
    /// There is no polling loop. Without a queue ([`with_queue`](Self::with_queue)) this is
    /// [`try_acquire`](Self::try_acquire). As in `tokio::sync`, `try_acquire` never waits and
    /// `acquire` may.
    ///
    /// Fails with [`ErrorKind::Closed`] once the limiter is [shut down](Self::shutdown).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe while waiting: dropping the future leaves the line and wakes the next
    /// request, and nothing was consumed. If it is dropped during a retry that was already
    /// sent, the permits may have been consumed.
    pub async fn acquire(
        &self,
        key: &[u8],
        permits: u64,
        max_wait: Duration,
    ) -> Result<RateLimitDecision> {
        let deadline = crate::time::after(Instant::now(), max_wait);
        let first = self.decide(key, permits).await?;
        self.wait_after(key, permits, first, deadline).await
    }

    /// The first decision of a request that may wait ([`acquire`](Self::acquire)'s), when a
    /// shortcut gives it without the backend (`None`: the backend must be asked, through
    /// [`first_from_the_backend`](Self::first_from_the_backend)); not counted yet:
    /// [`wait_after`](Self::wait_after) counts the request.
    pub(crate) fn first_of_a_wait_locally(
        &self,
        key: &[u8],
        permits: u64,
    ) -> Option<Result<RateLimitDecision>> {
        match self.shortcut(key, permits, Shortcuts::AWAITED) {
            Now::Decided(decided) | Now::Stepped(decided) => Some(decided),
            Now::Backend => None,
        }
    }

    /// The first decision of a request that may wait, from the backend, no shortcut asked;
    /// not counted yet.
    pub(crate) async fn first_from_the_backend(
        &self,
        key: &[u8],
        permits: u64,
    ) -> Result<RateLimitDecision> {
        self.step(key, permits).await
    }

    /// [`acquire`](Self::acquire) after its first decision, `first`: a rejection waits in
    /// the queue until `deadline`; the request is counted once, whatever it waited.
    ///
    /// # Cancel safety
    ///
    /// As `acquire`'s.
    pub(crate) async fn wait_after(
        &self,
        key: &[u8],
        permits: u64,
        first: RateLimitDecision,
        deadline: Instant,
    ) -> Result<RateLimitDecision> {
        let (Some(queue), Some(wait)) = (&self.inner.queue, first.retry_after()) else {
            self.inner.counters.record(first.is_granted());
            return Ok(first);
        };
        let Some(ticket) = (crate::time::after(Instant::now(), wait) <= deadline)
            .then(|| queue.enqueue(key, permits))
            .flatten()
        else {
            self.inner.counters.record(false);
            return Ok(first);
        };
        self.inner.counters.touch();

        let mut last = first;
        let mut retry_at = crate::time::after(Instant::now(), wait);
        loop {
            match ticket.role() {
                Role::Closed => return Err(closed()),
                Role::Evicted => break,
                Role::Behind => {
                    tokio::select! {
                        () = ticket.changed() => continue,
                        () = tokio::time::sleep_until(deadline) => break,
                    }
                }
                Role::Head => {
                    if retry_at > deadline {
                        break;
                    }
                    if Instant::now() < retry_at {
                        // Woken either way, check the role again: a newer request may have
                        // taken the head, or the limiter shut down.
                        tokio::select! {
                            () = tokio::time::sleep_until(retry_at) => {}
                            () = ticket.changed() => {}
                        }
                        continue;
                    }
                    let decision = self.decide(key, permits).await?;
                    match decision.retry_after() {
                        Some(wait) if !decision.is_granted() => {
                            retry_at = crate::time::after(Instant::now(), wait);
                            last = decision;
                        }
                        _ => {
                            self.inner.counters.record(decision.is_granted());
                            return Ok(decision);
                        }
                    }
                }
            }
        }
        self.inner.counters.record(false);
        Ok(last)
    }

    /// Activity of this instance so far.
    pub fn statistics(&self) -> RateLimitStatistics {
        let queued = self
            .inner
            .queue
            .as_ref()
            .map_or(0, WaitQueue::queued_permits);
        let hot_keys = self.inner.algorithm.hot_key_statistics();
        self.inner.counters.snapshot(queued, hot_keys)
    }

    /// Gives the permits a [`FixedWindow`](super::FixedWindow)'s hot-key tier reserved and
    /// did not spend back to their window (see
    /// [`FixedWindow::return_reserved`](super::FixedWindow::return_reserved)), and answers
    /// how many; 0 without a tier. Call it after the instance stopped granting, on shutdown.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the permits not yet given back lapse.
    pub async fn return_reserved(&self) -> Result<u64> {
        self.inner.algorithm.return_reserved().await
    }

    /// Shuts the limiter down: queued requests fail with [`ErrorKind::Closed`] at once, and so
    /// do later calls of every clone. The backend's state is untouched.
    pub fn shutdown(&self) {
        self.inner.closed.store(true, Ordering::Release);
        if let Some(queue) = &self.inner.queue {
            queue.close();
        }
    }

    /// The one entry of a decision, before anything is awaited: a decision of its
    /// shortcuts (see [`Shortcuts`] for their order), counted as [`try_acquire`](Self::try_acquire)
    /// counts; or [`Now::Backend`] when only the backend can decide, which
    /// [`decide_remotely`](Self::decide_remotely) then asks. A caller that waits in the queue
    /// gets [`Now::Backend`] at once: the queue's [`acquire`](Self::acquire) takes the
    /// shortcuts itself.
    #[inline]
    pub(crate) fn decide_now(&self, key: &[u8], permits: u64, shortcuts: Shortcuts) -> Now {
        if shortcuts.waits {
            return Now::Backend;
        }
        match self.shortcut(key, permits, shortcuts) {
            Now::Decided(decided) => Now::Decided(self.counted(decided)),
            Now::Stepped(decided) => Now::Stepped(self.counted(decided)),
            Now::Backend => Now::Backend,
        }
    }

    /// The backend's decision for a request [`decide_now`](Self::decide_now) sent on, with no
    /// shortcut asked again; counted.
    ///
    /// # Cancel safety
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub(crate) async fn decide_remotely(
        &self,
        key: &[u8],
        permits: u64,
    ) -> Result<RateLimitDecision> {
        let decided = self.step(key, permits).await;
        self.counted(decided)
    }

    /// One decision, not counted (the queue counts a request once, however often it asks).
    async fn decide(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        match self.shortcut(key, permits, Shortcuts::AWAITED) {
            Now::Decided(decided) | Now::Stepped(decided) => decided,
            Now::Backend => self.step(key, permits).await,
        }
    }

    /// Every way to decide without a round trip, each asked once, in this order: a shut-down
    /// limiter; a grant from the hot-key tier's reservation (before the deny cache: a window
    /// full for everyone else still has what this instance holds); a rejection the deny
    /// cache remembers; an in-process backend's step, which completes in its first poll.
    /// A new shortcut goes here, and only here.
    fn shortcut(&self, key: &[u8], permits: u64, shortcuts: Shortcuts) -> Now {
        let inner = &*self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Now::Decided(Err(closed()));
        }
        if let Some(granted) = inner
            .algorithm
            .granted_locally(key, permits, shortcuts.refill)
        {
            inner.counters.record_available(granted.remaining());
            return Now::Decided(Ok(granted));
        }
        if let Some(cached) = inner
            .deny_cache
            .as_ref()
            .and_then(|c| c.check(key, permits))
        {
            return Now::Decided(Ok(cached));
        }
        if shortcuts.in_process && inner.algorithm.decides_in_process() {
            let step = std::pin::pin!(self.step(key, permits));
            // Never pending in process: nothing in the step waits. Were it to, the dropped
            // future would have decided nothing (the step runs whole, under the store's lock,
            // or not at all), and the backend would be asked the usual way.
            if let Poll::Ready(decided) = step.poll(&mut Context::from_waker(Waker::noop())) {
                return Now::Stepped(decided);
            }
        }
        Now::Backend
    }

    /// The algorithm's step, and what this instance keeps of its answer.
    async fn step(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        let decision = self.inner.algorithm.try_acquire(key, permits).await?;
        self.inner.counters.record_available(decision.remaining());
        if let Some(cache) = &self.inner.deny_cache
            && !decision.is_granted()
        {
            cache.remember(key, permits, &decision);
        }
        Ok(decision)
    }

    /// `decided`, counted as a grant or a rejection.
    #[inline]
    fn counted(&self, decided: Result<RateLimitDecision>) -> Result<RateLimitDecision> {
        if let Ok(decision) = &decided {
            self.inner.counters.record(decision.is_granted());
        }
        decided
    }
}

/// Which shortcuts [`RateLimiter::decide_now`] may take for a caller.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shortcuts {
    /// The caller waits in the queue, whose requests take the shortcuts themselves.
    pub(crate) waits: bool,
    /// The hot-key tier may reserve its next batch in the background (not while a circuit
    /// breaker is open).
    pub(crate) refill: bool,
    /// An in-process backend's step may run in the call (not under a circuit breaker, which
    /// admits and hears every step).
    pub(crate) in_process: bool,
}

impl Shortcuts {
    /// For a decision that is awaited anyway: an in-process step is awaited with the rest.
    const AWAITED: Shortcuts = Shortcuts {
        waits: false,
        refill: true,
        in_process: false,
    };
}

/// What [`RateLimiter::decide_now`] found.
pub(crate) enum Now {
    /// Decided here, without the backend: a local grant, the deny cache, a shut-down limiter.
    Decided(Result<RateLimitDecision>),
    /// Decided by an in-process backend's step, run in the call.
    Stepped(Result<RateLimitDecision>),
    /// Only the backend can decide: [`RateLimiter::decide_remotely`].
    Backend,
}

fn closed() -> Error {
    Error::new(ErrorKind::Closed, "the rate limiter was shut down")
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("algorithm", &self.inner.algorithm)
            .field("queue", &self.inner.settings.queue)
            .field("deny_cache", &self.inner.settings.deny_cache)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Coordination;
    use crate::coordination::rate_limit::FixedWindow;

    /// In process, a decision is answered in the call itself, and counted as any other.
    #[test]
    fn an_in_process_decision_is_answered_at_once() {
        let window = FixedWindow::new(&Coordination::memory(), "now", 1, Duration::from_secs(60))
            .expect("valid");
        let limiter = RateLimiter::from(window);
        let in_process = Shortcuts {
            waits: false,
            refill: true,
            in_process: true,
        };
        let Now::Stepped(first) = limiter.decide_now(b"k", 1, in_process) else {
            panic!("in process, decided in the call");
        };
        assert!(first.expect("decided").is_granted());
        let Now::Stepped(second) = limiter.decide_now(b"k", 1, in_process) else {
            panic!("in process, decided in the call");
        };
        assert!(!second.expect("decided").is_granted());
        let stats = limiter.statistics();
        assert_eq!((stats.granted(), stats.rejected()), (1, 1));
    }

    /// A wait configured as forever waits, without overflowing the instant it ends at.
    #[tokio::test(start_paused = true)]
    async fn a_wait_of_forever_waits_for_the_next_window() {
        let window = FixedWindow::new(&Coordination::memory(), "jobs", 1, Duration::from_secs(1))
            .expect("valid");
        let limiter = RateLimiter::from(window).with_queue(10, QueueOrder::OldestFirst);
        assert!(
            limiter
                .acquire(b"k", 1, Duration::MAX)
                .await
                .expect("granted")
                .is_granted()
        );
        let started = Instant::now();
        let decision = limiter
            .acquire(b"k", 1, Duration::MAX)
            .await
            .expect("answered");
        assert!(decision.is_granted());
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "{:?}",
            started.elapsed()
        );
    }
}
