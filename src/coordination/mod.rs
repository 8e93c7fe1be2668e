//! Coordination primitives, independent of HTTP.
//!
//! Everything starts from a [`Coordination`] handle, which owns a [`Backend`] and is what an
//! application passes around: `Coordination::memory()` for one process (development, tests),
//! `Coordination::connect(url, "myapp:")` for state every replica shares through Redis. Each
//! step of a primitive is one atomic script on one server, decided with that server's clock,
//! except a [`redlock`] round, which spans several independent servers, and a fixed window's
//! step outside a Cluster, which may be one pipeline of native commands (see [`rate_limit`]).
//!
//! # Choosing a primitive
//!
//! | you want | primitive | a step on Redis | keys on Redis |
//! |---|---|---|---|
//! | at most N requests per period, per client | [`rate_limit`] | one round trip | one per client key |
//! | one holder at a time, with a fencing token | [`lock`] | one script | two per name |
//! | at most N holders at once, in all or per key | [`semaphore`] | one script | one sorted set; a keyed one, a set per client key and a global set, a step touching two |
//! | many readers, or one writer | [`rw_lease`] | one script | one sorted set and a counter |
//! | many named leases in one group | [`hash_lease`] | one script | one hash per group |
//! | wait until N pieces of work are done | [`latch`] | one script | a hash and a sorted set |
//! | keys that live as long as a lease: worker ownership, presence | [`session`] | one script | four kinds under one hash tag |
//! | a leader, with a term per leadership | [`election`] | one script per campaign step | four beside a session space |
//! | a value only the latest holder may write | [`fenced_value`] | one script | one hash |
//! | a lease that outlives a minority of independent servers | [`redlock`] | a round to every node | two per name on each node |
//!
//! Every held thing (a lock's lease, a Redlock lease, a permit, a read or write lease, a field
//! lease, a session) is one handle, [`Held<P>`], with one lifecycle: `renew`,
//! `verify_still_held`, `release`, `detach` (its owner token then renews or releases it from
//! any process, through [`ByOwner`]), and a conservative `remaining_estimate`. Dropped, it is
//! released in the background. Its self-renewing form is [`Managed<P>`], kept as
//! [`ManagedOptions`] say: renewed at half its lease, it fires its ownership signal
//! ([`ownership::OwnershipLost`]) when a renewal finds it gone or its estimate runs out, before
//! anyone else can take it over. A `try_acquire` that never waits answers an [`Attempt`]: the
//! holding, or busy with when it may be free. [`ownership`] gives the contract of every handle,
//! state by state. The manual's pages ([`crate::manual`]) show each primitive at work.
//!
//! ## Rate limits: [`rate_limit`]
//!
//! When: a budget of permits per client key and period. [`rate_limit::FixedWindow`] is the
//! cheapest (on Redis 8.8+ and Valkey 9.2+ one `INCREX`), [`rate_limit::SlidingWindow`] never
//! admits more than the limit in any window, [`rate_limit::Gcra`] and
//! [`rate_limit::TokenBucket`] allow bursts over a sustained rate, [`rate_limit::Stacked`]
//! checks several windows all or nothing, and [`rate_limit::RateLimitPlans`] picks a quota per
//! request (plans, overrides for single customers). [`rate_limit::RateLimiter`] adds a waiting
//! queue, a deny cache and statistics. Cost: one round trip and one key per client key;
//! rejections consume nothing.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::rate_limit::FixedWindow;
//!
//! let login = FixedWindow::new(&Coordination::memory(), "login", 3, Duration::from_secs(60))?;
//! for _ in 0..3 {
//!     assert!(login.try_acquire(b"alice", 1).await?.is_granted());
//! }
//! assert!(!login.try_acquire(b"alice", 1).await?.is_granted());
//! # Ok(()) }
//! ```
//!
//! ## Locks: [`lock`]
//!
//! When: one holder at a time (a job on one replica, one import per tenant), with a fencing
//! token that lets the resource refuse a holder whose lease ran out. [`lock::FencedLock`] is a
//! lease key and a fencing counter in one slot; [`lock::ManagedLease`] keeps a lease renewed.
//! Cost: one script per step, two keys per name; `acquire` waits without polling on Redis
//! (client tracking), and a managed lease renews every half lease.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::lock::FencedLock;
//!
//! let lock = FencedLock::named(&Coordination::memory(), "nightly-report");
//! let mut lease = lock.try_acquire(Duration::from_secs(30)).await?.acquired().expect("free");
//! assert!(!lock.try_acquire(Duration::from_secs(30)).await?.is_acquired());
//! let token = lease.fencing_token(); // send it with every write the job makes
//! lease.release().await?;
//! assert!(lock.acquire(Duration::from_secs(30)).await?.fencing_token() > token);
//! # Ok(()) }
//! ```
//!
//! ## Semaphores: [`semaphore`]
//!
//! When: at most N holders at once, across every process: exports, streams, workers.
//! [`semaphore::Semaphore`] has one capacity, [`semaphore::KeyedSemaphore`] one per client key
//! and/or one in all, taken in one step. Permits expire on the server's clock and are pruned by
//! the next step, so a crashed holder's capacity comes back without a cleanup worker. Cost: one
//! script per step, one sorted set per semaphore (a keyed one: up to two per client key, in one
//! slot).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::semaphore::Semaphore;
//!
//! let exports = Semaphore::new(&Coordination::memory(), "exports", 2)?;
//! let first = exports.try_acquire(Duration::from_secs(30)).await?;
//! let second = exports.try_acquire(Duration::from_secs(30)).await?;
//! assert!(first.is_acquired() && second.is_acquired());
//! assert!(!exports.try_acquire(Duration::from_secs(30)).await?.is_acquired());
//! assert_eq!(exports.held().await?, 2);
//! # Ok(()) }
//! ```
//!
//! ## Read-write leases: [`rw_lease`]
//!
//! When: any number of readers at once, or one writer alone, with neither side starving (the
//! phase-fair order). [`rw_lease::ReadWriteLock`] hands out [`rw_lease::RwLease`]s; a write
//! lease downgrades to a read lease in one step and carries a fencing token. Cost: one script
//! per step, one sorted set per lock (every question an acquisition asks is a range lookup,
//! whatever the number of readers) and a fencing counter beside it.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::rw_lease::ReadWriteLock;
//!
//! let prices = ReadWriteLock::named(&Coordination::memory(), "price-list");
//! let mut reader = prices.read(Duration::from_secs(10)).await?;
//! assert!(prices.try_read(Duration::from_secs(10)).await?.is_acquired(), "readers share it");
//! assert!(!prices.try_write(Duration::from_secs(10)).await?.is_acquired());
//! reader.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Hash-field leases: [`hash_lease`]
//!
//! When: many named leases in one group (a session per device of a user, an import per shard),
//! each with its own expiry. [`hash_lease::LeaseHash`] keeps them in the fields of one hash.
//! Needs hash field expiry: Redis 7.4+ or Valkey 9.0+. Cost: one script per step, one hash per
//! group, gone with its last field.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::hash_lease::LeaseHash;
//!
//! let shards = LeaseHash::named(&Coordination::memory(), "import:2026-12-01");
//! let mut first = shards.acquire("shard-1", Duration::from_secs(30)).await?;
//! assert!(shards.try_acquire("shard-2", Duration::from_secs(30)).await?.is_acquired());
//! assert!(!shards.try_acquire("shard-1", Duration::from_secs(30)).await?.is_acquired());
//! first.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Countdown latches: [`latch`]
//!
//! When: participants in any process count down, and waiters on any connection learn when the
//! count reaches zero, one generation (a round) at a time. A count-down counts exactly once,
//! even sent again after a lost answer. Cost: one script per step; a hash and a sorted set of
//! completed generations per latch; waiters follow the key's invalidations and read again every
//! 2 s.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::latch::{CountDown, CountdownLatch};
//!
//! let latch = CountdownLatch::named(&Coordination::memory(), "nightly-import");
//! let round = latch.reset(2, Some(Duration::from_secs(3600))).await?;
//! assert_eq!(round.count_down().await?, CountDown::Remaining(1));
//! assert_eq!(round.count_down().await?, CountDown::Remaining(0));
//! assert!(round.wait().await?, "complete");
//! # Ok(()) }
//! ```
//!
//! ## Sessions: [`session`]
//!
//! When: keys that must live exactly as long as a lease, in the shape of etcd's leases: a
//! worker owns a job while its session lives (`claim`), the live instances of a service are the
//! keys of their sessions (presence). One keep-alive extends the lease and every key attached
//! to it; revoking it, or letting it expire, removes them all. Needs a Redis that evicts
//! nothing. Cost: one script per step; a space is a few keys under one hash tag.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::session::{Claim, Sessions};
//!
//! let jobs = Sessions::named(&Coordination::memory(), "jobs");
//! let mut worker = jobs.grant(Duration::from_secs(10)).await?;
//! assert_eq!(worker.claim("job:42", "worker-a").await?, Claim::Claimed);
//! assert_eq!(jobs.get("job:42").await?.as_deref(), Some(&b"worker-a"[..]));
//! worker.release().await?; // the key goes with its lease
//! assert_eq!(jobs.get("job:42").await?, None);
//! # Ok(()) }
//! ```
//!
//! ## Leader election: [`election`]
//!
//! When: one replica leads (a scheduler) and the others take over when it dies, in the shape of
//! etcd's `Election`. Candidates lead in the order they began to campaign, a leader leads while
//! its [`session::ManagedSession`] lives, and each term is a fencing token greater than every
//! earlier one. Cost: the steps of a session, and four keys beside its space.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! use leasehold::Coordination;
//! use leasehold::coordination::ManagedOptions;
//! use leasehold::coordination::election::Election;
//! use leasehold::coordination::session::{ManagedSession, Sessions};
//!
//! let instances = Sessions::named(&Coordination::memory(), "api-instances");
//! let me = ManagedSession::grant(&instances, &ManagedOptions::new()).await?;
//! let election = Election::named(&instances, "scheduler");
//! let leadership = election.campaign(&me, "10.0.0.1:8080").await?; // waits until it leads
//! assert_eq!(election.leader().await?.map(|leader| leader.term()), Some(leadership.term()));
//! leadership.resign().await?;
//! # Ok(()) }
//! ```
//!
//! ## Fenced values: [`fenced_value`]
//!
//! When: a resource kept in Redis that only the latest holder of a lock (or write lease, or
//! Redlock lease, or leader) may write. [`fenced_value::FencedValue`] stores a write only when
//! its fencing token is at least the highest the value has seen, in one step. Cost: one script
//! per step, one hash per value, with no expiry.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! use leasehold::Coordination;
//! use leasehold::coordination::fenced_value::{FencedValue, FencedWrite};
//!
//! let invoice = FencedValue::named(&Coordination::memory(), "invoice:42");
//! assert_eq!(invoice.write(7, b"paid").await?, FencedWrite::Written);
//! assert_eq!(invoice.write(6, b"draft").await?, FencedWrite::Stale { highest: 7 });
//! # Ok(()) }
//! ```
//!
//! ## Redlock: [`redlock`]
//!
//! When: a lease that must survive the loss of a minority of independent Redis deployments
//! (not a cluster's nodes), with a fencing token of its own. It is not consensus: see the
//! module's docs for what it does not give. Cost: an acquisition is two rounds, each sent to
//! every node at once (the grant, then the token's write-back); a renewal or a release is one;
//! two keys per name on each node.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::redlock::RedlockGroup;
//!
//! let group = RedlockGroup::new([Coordination::memory(), Coordination::memory(), Coordination::memory()])?;
//! let mut lease = group.acquire("invoice:42", Duration::from_secs(10)).await?;
//! assert!(lease.fencing_token() > 0);
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Modules
//!
//! - [`rate_limit`]: fixed and sliding windows, token bucket, GCRA, stacked policies, plans;
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
pub mod fenced_value;
pub mod hash_lease;
pub mod latch;
pub mod lock;
mod managed_options;
pub(crate) mod name;
mod owner;
pub mod ownership;
pub mod rate_limit;
mod release;
pub mod rw_lease;
pub mod semaphore;
pub mod session;

/// Redlock stands on the lock's keys, one lease per node: its module lives in the lock's.
#[doc(inline)]
pub use lock::redlock;
/// Leader election stands on sessions: its module lives in theirs.
#[doc(inline)]
pub use session::election;

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
