//! Coordination primitives, independent of HTTP.
//!
//! Everything starts from a [`Coordination`] handle, which owns a [`Backend`] and is what
//! an application passes around. Each primitive takes its decisions in one atomic step on
//! the backend, with the backend's clock.
//!
//! - [`rate_limit`]: fixed and sliding windows, token bucket, GCRA, stacked policies;
//! - [`lock`]: the fenced lock, its leases and managed leases;
//! - [`semaphore`]: counting semaphores, plain and keyed, with expirable permits;
//! - [`latch`]: countdown latches, one generation at a time;
//! - [`rw_lease`]: read-write leases, shared for reading and exclusive for writing;
//! - [`hash_lease`]: named leases in the fields of one hash, each with its own expiry;
//! - [`redlock`]: a quorum lease over independent deployments, with a fencing token;
//! - [`fenced_value`]: fencing at the resource, for a value kept in Redis;
//! - [`election`]: leader election among sessions, with a fencing token per term;
//! - [`session`]: leases with attached keys (etcd-style sessions), for worker ownership
//!   and presence;
//! - [`ownership`]: what every held thing tells its users (the loss signal, the releases
//!   given up), and [`ManagedOptions`] for everything kept renewed.

mod attempt;
pub(crate) mod circuit_breaker;
pub mod election;
pub mod fenced_value;
pub mod hash_lease;
pub mod latch;
pub mod lock;
mod managed_options;
pub(crate) mod name;
mod owner;
pub mod ownership;
pub mod rate_limit;
pub mod redlock;
mod release;
pub mod rw_lease;
pub mod semaphore;
pub mod session;

pub use attempt::Attempt;
pub(crate) use managed_options::DEFAULT_POLL_INTERVAL;
pub use managed_options::{MAX_MANAGED_LEASE, MIN_MANAGED_LEASE, ManagedOptions};
pub use name::{HASHED_NAME_PREFIX, MAX_NAME_LEN};
pub use owner::{Acquirable, ByOwner, Detached, Held, HeldKind, Managed, OwnerToken};
pub use release::Release;

use std::time::Duration;

use crate::backend::Backend;
use crate::backend::delivery::Delivery;
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::RedisBackend;
use crate::error::Result;
use circuit_breaker::{Breaker, CircuitBreaker, CircuitState};

/// The entry point: a backend shared by every primitive built from it. Cheap to clone.
///
/// # Example
///
/// Compiled as a crate of its own, as an application is: the public futures must fit the
/// default recursion limit there too.
///
/// ```standalone_crate
/// use leasehold::Coordination;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// // In-process: one instance only, no server needed.
/// let coordination = Coordination::memory();
/// let now = coordination.server_time().await?;
/// assert!(now.as_secs() > 0);
///
/// // Shared by every replica through Redis:
/// // let coordination = Coordination::connect("redis://127.0.0.1:6379", "myapp:").await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Coordination {
    backend: Backend,
    /// The outages the extractors that use this handle meet, told once each (shared by its
    /// clones).
    outages: std::sync::Arc<crate::outage_log::OutageLog>,
    /// The circuit breaker of the acquisitions made through this handle by the extractors
    /// and the layers built from it (shared by its clones); none in process.
    breaker: Option<std::sync::Arc<Breaker>>,
}

impl Coordination {
    /// A handle over any backend.
    pub fn new(backend: impl Into<Backend>) -> Self {
        let backend = backend.into();
        Coordination {
            breaker: Breaker::by_default(&backend),
            backend,
            outages: std::sync::Arc::default(),
        }
    }

    /// The circuit breaker of the acquisitions made through this handle (see
    /// [`CircuitBreaker`]): by the [extractors](crate::extract) that take it, and by the
    /// [layers](crate::layer) built from it afterwards, unless a layer has its own. On Redis
    /// each handle has one with [`CircuitBreaker::default`]'s settings; `None` removes it
    /// (every acquisition then waits out its timeout while the server is silent). Clones
    /// made before keep the breaker they had.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::Coordination;
    /// use leasehold::layer::CircuitBreaker;
    ///
    /// let coordination = Coordination::memory()
    ///     .circuit_breaker(Some(CircuitBreaker::new().open_for(Duration::from_secs(2))));
    /// # let _ = coordination;
    /// ```
    pub fn circuit_breaker(mut self, breaker: Option<CircuitBreaker>) -> Self {
        self.breaker =
            breaker.map(|settings| Breaker::new(settings, &self.backend, self.backend.endpoint()));
        self
    }

    /// The state of this handle's [circuit breaker](Self::circuit_breaker), for a readiness
    /// probe or a gauge; `None` without one (in process, or removed).
    ///
    /// ```
    /// use leasehold::Coordination;
    /// use leasehold::layer::{CircuitBreaker, CircuitState};
    ///
    /// let coordination = Coordination::memory().circuit_breaker(Some(CircuitBreaker::new()));
    /// assert_eq!(coordination.circuit_state(), Some(CircuitState::Closed));
    /// assert_eq!(Coordination::memory().circuit_state(), None);
    /// ```
    pub fn circuit_state(&self) -> Option<CircuitState> {
        self.breaker.as_ref().map(|breaker| breaker.state())
    }

    /// The handle's circuit breaker, shared.
    pub(crate) fn breaker(&self) -> Option<&std::sync::Arc<Breaker>> {
        self.breaker.as_ref()
    }

    /// A handle over a new in-process [`MemoryBackend`] with default settings.
    pub fn memory() -> Self {
        Self::new(MemoryBackend::new())
    }

    /// Connects to a standalone Redis server with default settings, every key prefixed with
    /// `key_prefix`: this service's namespace, such as `"billing:"`, so that another service
    /// on the same Redis cannot share its limits and locks by naming them alike (see
    /// [`RedisBackendBuilder::key_prefix`](crate::backend::redis::RedisBackendBuilder::key_prefix)). Use
    /// [`RedisBackend::standalone`], [`RedisBackend::cluster`] or
    /// [`RedisBackend::sentinel`] and [`Coordination::new`] for anything else.
    ///
    /// A server that cannot be reached now is no failure (see
    /// [`RedisBackendBuilder::connect`](crate::backend::redis::RedisBackendBuilder::connect)):
    /// a service boots during an outage, and its failure policy covers the requests until
    /// Redis is back.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn connect(url: impl Into<String>, key_prefix: impl AsRef<[u8]>) -> Result<Self> {
        Ok(Self::new(RedisBackend::connect(url, key_prefix).await?))
    }

    /// The backend this handle uses.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The log of the outages the extractors meet through this handle.
    pub(crate) fn outages(&self) -> &crate::outage_log::OutageLog {
        &self.outages
    }

    /// Whether the backend answers now: for a readiness probe, without matching on the
    /// backend. On Redis it connects if the handle has not yet (see
    /// [`RedisBackend::ready`]) and then asks the server's clock, so that a server that
    /// accepts connections but does not answer (stopped, overloaded) fails as unavailable;
    /// in memory it is always ready. On a connected handle that takes at most the response
    /// timeout; one still connecting may first wait for its connection attempt (up to two
    /// connection timeouts and three response timeouts: 5 s by default). A readiness probe
    /// with a shorter timeout (Kubernetes' default is 1 s) should bound the call with
    /// `tokio::time::timeout` and count running out as not ready.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// let coordination = leasehold::Coordination::memory();
    /// coordination.ready().await?;
    /// assert_eq!(coordination.endpoint(), "memory");
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn ready(&self) -> Result<()> {
        if let Some(redis) = self.backend.as_redis() {
            redis.ready().await?;
        }
        self.backend.server_time().await.map(drop)
    }

    /// What this handle talks to, for logs and probes: the Redis deployment's URL (a
    /// cluster's node URLs, a Sentinel's service name and sentinels) with any password
    /// replaced by `***`, or `"memory"`.
    pub fn endpoint(&self) -> &str {
        self.backend.endpoint()
    }

    /// The backend's clock as a duration since the Unix epoch (see
    /// [`Backend::server_time`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn server_time(&self) -> Result<Duration> {
        self.backend.server_time().await
    }
}

impl From<RedisBackend> for Coordination {
    fn from(backend: RedisBackend) -> Self {
        Self::new(backend)
    }
}

impl From<MemoryBackend> for Coordination {
    fn from(backend: MemoryBackend) -> Self {
        Self::new(backend)
    }
}
