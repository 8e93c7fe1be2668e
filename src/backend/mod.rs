//! Backends: where coordination state lives and where each atomic step runs.
//!
//! A backend executes one atomic step and returns its reply; it knows nothing of leases'
//! lifecycles (renewal loops, cancellation). Two backends exist:
//!
//! - [`redis`]: Redis or Valkey, standalone, Cluster or through Sentinel. Each step is one
//!   Lua script (sent as `EVALSHA`, falling back to `EVAL` on `NOSCRIPT`) or native commands
//!   in one round trip (the fixed window's), counted on the server with the server's clock.
//! - [`memory`]: the same steps in-process, on a monotonic clock that tests can pause. It is
//!   what an application uses without Redis (one process only), and what users' own unit
//!   tests can run against.
//!
//! Both apply a configurable key prefix and reject a multi-key step whose keys would fall in
//! different cluster slots before anything is sent ([`key_slot`]).

pub(crate) mod caller_bound;
pub(crate) mod key_bytes;
mod key_prefix;
pub mod memory;
pub mod redis;
mod slot;
pub(crate) mod steps;

pub(crate) use key_prefix::KeyPrefix;
pub(crate) use slot::ensure_same_slot;
pub use slot::{SLOT_COUNT, key_slot};

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::error::{Error, Result};

/// A backend: Redis (any topology) or the in-process memory backend.
///
/// Build one from a [`redis::RedisBackend`] or a [`memory::MemoryBackend`] with `From`, or let
/// [`Coordination`](crate::Coordination) do it. Applications hold a `Coordination`, which every
/// primitive, layer and extractor takes; the backend's steps are crate-private, run through
/// one dispatch point. Which backend it is, [`as_redis`](Self::as_redis) and
/// [`as_memory`](Self::as_memory) tell.
///
/// # Example
///
/// ```
/// use leasehold::backend::{Backend, memory::MemoryBackend};
///
/// let backend = Backend::from(MemoryBackend::new());
/// assert!(backend.as_memory().is_some());
/// assert!(backend.as_redis().is_none());
/// ```
#[derive(Clone, Debug)]
pub struct Backend(Kind);

/// Which backend a [`Backend`] is: what the crate's one dispatch point matches.
#[derive(Clone, Debug)]
pub(crate) enum Kind {
    /// A Redis or Valkey deployment.
    Redis(redis::RedisBackend),
    /// The in-process backend.
    Memory(memory::MemoryBackend),
}

impl Backend {
    /// The Redis backend, if this is one.
    pub fn as_redis(&self) -> Option<&redis::RedisBackend> {
        match &self.0 {
            Kind::Redis(redis) => Some(redis),
            Kind::Memory(_) => None,
        }
    }

    /// The memory backend, if this is one.
    pub fn as_memory(&self) -> Option<&memory::MemoryBackend> {
        match &self.0 {
            Kind::Memory(memory) => Some(memory),
            Kind::Redis(_) => None,
        }
    }

    /// Which backend this is, for the crate's dispatch.
    pub(crate) fn kind(&self) -> &Kind {
        &self.0
    }

    /// The backend's current time as a duration since the Unix epoch: Redis `TIME`, or the
    /// memory backend's pausable monotonic clock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn server_time(&self) -> Result<Duration> {
        self.run(steps::ServerTime).await
    }

    /// The key the backend stores for a user key: its prefix followed by the key (what an
    /// ACL's key patterns and a `redis-cli` session see).
    ///
    /// ```
    /// use leasehold::backend::{Backend, memory::MemoryBackend};
    ///
    /// let backend = Backend::from(MemoryBackend::new());
    /// assert!(backend.physical_key(b"k").ends_with(b"k"));
    /// ```
    pub fn physical_key(&self, key: &[u8]) -> Vec<u8> {
        match &self.0 {
            Kind::Redis(redis) => redis.stored_key(key),
            Kind::Memory(memory) => memory.physical_key(key).to_vec(),
        }
    }

    /// A watch that fires at the user key's next change (see
    /// [`RedisBackend::watch_key`](redis::RedisBackend::watch_key)); `None` where changes
    /// are not announced (the memory backend), so the caller polls.
    pub(crate) async fn watch_key(&self, key: &[u8]) -> Result<Option<redis::KeyWatch>> {
        match &self.0 {
            // Boxed for the reason `run` gives.
            Kind::Redis(redis) => Box::pin(redis.watch_key(key)).await.map(Some),
            Kind::Memory(_) => Ok(None),
        }
    }

    /// Whether the backend tells of key changes (Redis, through client tracking), so that a
    /// waiter need not poll it.
    pub(crate) fn tells_changes(&self) -> bool {
        matches!(self.0, Kind::Redis(_))
    }

    /// Whether every step completes where it is asked, in its first poll (the memory
    /// backend, under its store's lock): nothing to wait for, so nothing to bound with a
    /// timer.
    pub(crate) fn decides_in_process(&self) -> bool {
        matches!(self.0, Kind::Memory(_))
    }

    /// The deployment it reaches, without its password; `memory` in process.
    pub(crate) fn endpoint(&self) -> &str {
        match &self.0 {
            Kind::Redis(redis) => redis.endpoint(),
            Kind::Memory(_) => "memory",
        }
    }

    /// A count of the server's answers on this handle, which moves whenever the server
    /// answers anything (see the circuit breaker's judgement of a timeout); `None` in memory,
    /// which cannot fall silent.
    pub(crate) fn answers(&self) -> Option<u64> {
        match &self.0 {
            Kind::Redis(redis) => Some(redis.answers()),
            Kind::Memory(_) => None,
        }
    }

    /// A step's caller gave up on it at its own timeout, with nothing answered since it
    /// began: counted against the connection in use, which is replaced once silent (see
    /// `redis::silence`); nothing in memory.
    pub(crate) fn unanswered(&self) {
        if let Kind::Redis(redis) = &self.0 {
            redis.unanswered();
        }
    }

    /// A step's caller gave up on it at its own timeout while the server answered others:
    /// a slow step, or on a Cluster one node silent among answering ones, which the backend
    /// tells apart (see `redis::silence`); nothing in memory.
    pub(crate) fn unanswered_among_answers(&self) {
        if let Kind::Redis(redis) = &self.0 {
            redis.unanswered_among_answers();
        }
    }

    /// The deadline an acquisition sent now carries on the server's clock (see
    /// [`RedisBackend::acquire_deadline`](redis::RedisBackend)); `None` in memory, where no
    /// command can be delayed.
    pub(crate) async fn acquire_deadline(&self) -> Result<Option<redis::Deadline>> {
        match &self.0 {
            // Not boxed: a small future, that only connects when the handle has not yet.
            Kind::Redis(redis) => redis.acquire_deadline().await.map(Some),
            Kind::Memory(_) => Ok(None),
        }
    }

    /// The backend's clock now, in ms since the epoch (see
    /// [`RedisBackend::server_now_ms`](redis::RedisBackend)).
    pub(crate) async fn server_now_ms(&self) -> Result<u64> {
        match &self.0 {
            Kind::Redis(redis) => redis.server_now_ms().await,
            Kind::Memory(memory) => Ok(u64::try_from(memory.now().as_millis()).unwrap_or(u64::MAX)),
        }
    }

    /// Completes once `deadline` has certainly passed on the server's clock (see
    /// [`RedisBackend::until_passed`](redis::RedisBackend)): what the release of an
    /// acquisition whose outcome is uncertain waits for.
    pub(crate) fn until_passed(
        &self,
        deadline: redis::Deadline,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        match &self.0 {
            Kind::Redis(redis) => Box::pin(redis.until_passed(deadline)),
            Kind::Memory(_) => Box::pin(tokio::time::sleep_until(deadline.passed_at)),
        }
    }

    /// After `failure` of a step that counts once however often it is delivered: whether to
    /// send it again (see [`RedisBackend::resend_after`](redis::RedisBackend)); never in
    /// memory, where nothing is lost on the way.
    pub(crate) async fn resend_after(&self, resends: &mut redis::Resends, failure: &Error) -> bool {
        match &self.0 {
            Kind::Redis(redis) => redis.resend_after(resends, failure).await,
            Kind::Memory(_) => false,
        }
    }

    /// Warns once per handle when the server keeps nothing across a restart (see
    /// [`RedisBackend::check_persistence_once`](redis::RedisBackend)); nothing in memory,
    /// whose state is the process's.
    pub(crate) fn check_persistence_once(&self) {
        if let Kind::Redis(redis) = &self.0 {
            redis.check_persistence_once();
        }
    }

    /// The server's eviction policy when it may evict keys (see
    /// [`RedisBackend::eviction_policy`](redis::RedisBackend)); never in memory, whose bound
    /// refuses rather than evicts what is held.
    pub(crate) async fn eviction_policy(&self) -> Option<String> {
        match &self.0 {
            Kind::Redis(redis) => redis.eviction_policy().await,
            Kind::Memory(_) => None,
        }
    }

    /// An acquisition arrived after its deadline: read the server's clock again, in case it
    /// is not the one the deadline was taken from (another node after a failover).
    pub(crate) fn deadline_missed(&self) {
        if let Kind::Redis(redis) = &self.0 {
            redis.refresh_clock();
        }
    }
}

impl From<redis::RedisBackend> for Backend {
    fn from(backend: redis::RedisBackend) -> Self {
        Backend(Kind::Redis(backend))
    }
}

impl From<memory::MemoryBackend> for Backend {
    fn from(backend: memory::MemoryBackend) -> Self {
        Backend(Kind::Memory(backend))
    }
}
