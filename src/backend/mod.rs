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
pub(crate) mod delivery;
pub(crate) mod key_bytes;
mod key_prefix;
pub mod memory;
pub mod redis;
mod slot;
pub(crate) mod steps;

pub(crate) use key_prefix::KeyPrefix;
pub(crate) use slot::ensure_same_slot;
pub use slot::{SLOT_COUNT, key_slot};

use std::time::Duration;

use crate::error::Result;

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
