//! How a step travels, the kit's second seam beside [`Backend::run`](super::Backend::run):
//! the deadline an acquisition carries on the server's clock and the wait until it has
//! passed, the resending of a step whose answer was lost, the watch that wakes a waiter, the
//! server's clock, and what the circuit breaker reads of the server's answers.
//!
//! One trait, [`Delivery`], implemented once per backend (Redis sends over a network that can
//! lose and delay; in process nothing is lost on the way), and by [`Backend`], which chooses.
//! The primitives and their kit name these notions from here, never from a backend.

use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;

use super::memory::MemoryBackend;
use super::redis::RedisBackend;
use super::{Backend, Kind};
use crate::error::{Error, Result};

/// A deadline for a command on the server's clock, and the local instant by which the server
/// has certainly passed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    /// Milliseconds since the epoch on the server's clock; the command is a no-op after it.
    pub(crate) server_ms: u64,
    /// From this local instant on, the server's clock is past `server_ms`: a command carrying
    /// it can no longer take effect, wherever it is.
    pub(crate) passed_at: Instant,
}

/// The pace of sending again a step whose delivery is uncertain (see
/// [`Delivery::resend_after`]).
pub(crate) struct Resends(pub(super) super::redis::Retry);

impl Resends {
    pub(crate) fn new() -> Self {
        Resends(super::redis::Retry::new())
    }
}

/// A watch on a key, which fires at its next change: given where the backend tells of
/// changes (Redis, through client tracking).
pub(crate) type Watch = super::redis::KeyWatch;

/// How a step travels to its backend and back (see the [module](self)).
pub(crate) trait Delivery {
    /// A watch that fires at the user key's next change; `None` where changes are not
    /// announced, so the caller polls.
    fn watch_key(&self, key: &[u8]) -> impl Future<Output = Result<Option<Watch>>> + Send;

    /// Whether the backend tells of key changes, so that a waiter need not poll it.
    fn tells_changes(&self) -> bool;

    /// Whether every step completes where it is asked, in its first poll: nothing to wait
    /// for, so nothing to bound with a timer.
    fn decides_in_process(&self) -> bool;

    /// The deployment it reaches, without its password; `memory` in process.
    fn endpoint(&self) -> &str;

    /// A count of the server's answers on this handle, which moves whenever the server
    /// answers anything (see the circuit breaker's judgement of a timeout); `None` where it
    /// cannot fall silent.
    fn answers(&self) -> Option<u64>;

    /// A step's caller gave up on it at its own timeout, with nothing answered since it
    /// began: counted against the connection in use, which is replaced once silent.
    fn unanswered(&self);

    /// A step's caller gave up on it at its own timeout while the server answered others:
    /// a slow step, or on a Cluster one node silent among answering ones.
    fn unanswered_among_answers(&self);

    /// The deadline an acquisition sent now carries on the server's clock; `None` where no
    /// command can be delayed.
    fn acquire_deadline(&self) -> impl Future<Output = Result<Option<Deadline>>> + Send;

    /// The backend's clock now, in ms since the epoch.
    fn server_now_ms(&self) -> impl Future<Output = Result<u64>> + Send;

    /// Completes once `deadline` has certainly passed on the server's clock: what the
    /// release of an acquisition whose outcome is uncertain waits for.
    fn until_passed(&self, deadline: Deadline) -> Pin<Box<dyn Future<Output = ()> + Send>>;

    /// After `failure` of a step that counts once however often it is delivered: whether to
    /// send it again; never where nothing is lost on the way.
    fn resend_after(
        &self,
        resends: &mut Resends,
        failure: &Error,
    ) -> impl Future<Output = bool> + Send;

    /// Warns once per handle when the server keeps nothing across a restart.
    fn check_persistence_once(&self);

    /// The server's eviction policy when it may evict keys; never where a bound refuses
    /// rather than evicts what is held.
    fn eviction_policy(&self) -> impl Future<Output = Option<String>> + Send;

    /// An acquisition arrived after its deadline: read the server's clock again, in case it
    /// is not the one the deadline was taken from (another node after a failover).
    fn deadline_missed(&self);
}

/// Over a network that can lose and delay: see each method of [`RedisBackend`] it calls.
impl Delivery for RedisBackend {
    async fn watch_key(&self, key: &[u8]) -> Result<Option<Watch>> {
        // Boxed for the reason `Backend::run` gives.
        Box::pin(RedisBackend::watch_key(self, key)).await.map(Some)
    }

    fn tells_changes(&self) -> bool {
        true
    }

    fn decides_in_process(&self) -> bool {
        false
    }

    fn endpoint(&self) -> &str {
        RedisBackend::endpoint(self)
    }

    fn answers(&self) -> Option<u64> {
        Some(RedisBackend::answers(self))
    }

    fn unanswered(&self) {
        RedisBackend::unanswered(self);
    }

    fn unanswered_among_answers(&self) {
        RedisBackend::unanswered_among_answers(self);
    }

    async fn acquire_deadline(&self) -> Result<Option<Deadline>> {
        // Not boxed: a small future, that only connects when the handle has not yet.
        RedisBackend::acquire_deadline(self).await.map(Some)
    }

    async fn server_now_ms(&self) -> Result<u64> {
        RedisBackend::server_now_ms(self).await
    }

    fn until_passed(&self, deadline: Deadline) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(RedisBackend::until_passed(self, deadline))
    }

    async fn resend_after(&self, resends: &mut Resends, failure: &Error) -> bool {
        RedisBackend::resend_after(self, resends, failure).await
    }

    fn check_persistence_once(&self) {
        RedisBackend::check_persistence_once(self);
    }

    async fn eviction_policy(&self) -> Option<String> {
        RedisBackend::eviction_policy(self).await
    }

    fn deadline_missed(&self) {
        self.refresh_clock();
    }
}

/// In process: nothing is lost or delayed on the way, nothing is announced, nothing falls
/// silent, nothing is evicted (the store's bound refuses), and the state is the process's.
impl Delivery for MemoryBackend {
    async fn watch_key(&self, _key: &[u8]) -> Result<Option<Watch>> {
        Ok(None)
    }

    fn tells_changes(&self) -> bool {
        false
    }

    fn decides_in_process(&self) -> bool {
        true
    }

    fn endpoint(&self) -> &str {
        "memory"
    }

    fn answers(&self) -> Option<u64> {
        None
    }

    fn unanswered(&self) {}

    fn unanswered_among_answers(&self) {}

    async fn acquire_deadline(&self) -> Result<Option<Deadline>> {
        Ok(None)
    }

    async fn server_now_ms(&self) -> Result<u64> {
        Ok(u64::try_from(self.now().as_millis()).unwrap_or(u64::MAX))
    }

    fn until_passed(&self, deadline: Deadline) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep_until(deadline.passed_at))
    }

    async fn resend_after(&self, _resends: &mut Resends, _failure: &Error) -> bool {
        false
    }

    fn check_persistence_once(&self) {}

    async fn eviction_policy(&self) -> Option<String> {
        None
    }

    fn deadline_missed(&self) {}
}

/// The one place that chooses a backend's delivery, as [`Backend::run`] chooses its steps.
impl Delivery for Backend {
    async fn watch_key(&self, key: &[u8]) -> Result<Option<Watch>> {
        match &self.0 {
            Kind::Redis(redis) => Delivery::watch_key(redis, key).await,
            Kind::Memory(memory) => Delivery::watch_key(memory, key).await,
        }
    }

    fn tells_changes(&self) -> bool {
        match &self.0 {
            Kind::Redis(redis) => Delivery::tells_changes(redis),
            Kind::Memory(memory) => Delivery::tells_changes(memory),
        }
    }

    fn decides_in_process(&self) -> bool {
        match &self.0 {
            Kind::Redis(redis) => Delivery::decides_in_process(redis),
            Kind::Memory(memory) => Delivery::decides_in_process(memory),
        }
    }

    fn endpoint(&self) -> &str {
        match &self.0 {
            Kind::Redis(redis) => Delivery::endpoint(redis),
            Kind::Memory(memory) => Delivery::endpoint(memory),
        }
    }

    fn answers(&self) -> Option<u64> {
        match &self.0 {
            Kind::Redis(redis) => Delivery::answers(redis),
            Kind::Memory(memory) => Delivery::answers(memory),
        }
    }

    fn unanswered(&self) {
        match &self.0 {
            Kind::Redis(redis) => Delivery::unanswered(redis),
            Kind::Memory(memory) => Delivery::unanswered(memory),
        }
    }

    fn unanswered_among_answers(&self) {
        match &self.0 {
            Kind::Redis(redis) => Delivery::unanswered_among_answers(redis),
            Kind::Memory(memory) => Delivery::unanswered_among_answers(memory),
        }
    }

    async fn acquire_deadline(&self) -> Result<Option<Deadline>> {
        match &self.0 {
            Kind::Redis(redis) => Delivery::acquire_deadline(redis).await,
            Kind::Memory(memory) => Delivery::acquire_deadline(memory).await,
        }
    }

    async fn server_now_ms(&self) -> Result<u64> {
        match &self.0 {
            Kind::Redis(redis) => Delivery::server_now_ms(redis).await,
            Kind::Memory(memory) => Delivery::server_now_ms(memory).await,
        }
    }

    fn until_passed(&self, deadline: Deadline) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        match &self.0 {
            Kind::Redis(redis) => Delivery::until_passed(redis, deadline),
            Kind::Memory(memory) => Delivery::until_passed(memory, deadline),
        }
    }

    async fn resend_after(&self, resends: &mut Resends, failure: &Error) -> bool {
        match &self.0 {
            Kind::Redis(redis) => Delivery::resend_after(redis, resends, failure).await,
            Kind::Memory(memory) => Delivery::resend_after(memory, resends, failure).await,
        }
    }

    fn check_persistence_once(&self) {
        match &self.0 {
            Kind::Redis(redis) => Delivery::check_persistence_once(redis),
            Kind::Memory(memory) => Delivery::check_persistence_once(memory),
        }
    }

    async fn eviction_policy(&self) -> Option<String> {
        match &self.0 {
            Kind::Redis(redis) => Delivery::eviction_policy(redis).await,
            Kind::Memory(memory) => Delivery::eviction_policy(memory).await,
        }
    }

    fn deadline_missed(&self) {
        match &self.0 {
            Kind::Redis(redis) => Delivery::deadline_missed(redis),
            Kind::Memory(memory) => Delivery::deadline_missed(memory),
        }
    }
}
