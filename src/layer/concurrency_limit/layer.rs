//! The concurrency-limit layer and its configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use http::request::Parts;
use tower_layer::Layer;

use super::config::Config;
use super::fallback::{DEFAULT_FALLBACK_KEYS, Fallback};
use super::service::ConcurrencyLimit;
use crate::Coordination;
use crate::coordination::MAX_MANAGED_LEASE;
use crate::coordination::circuit_breaker::{Breaker, CircuitBreaker, CircuitState};
use crate::coordination::semaphore::{Capacity, KeyedSemaphore};
use crate::error::Result;
use crate::layer::FailurePolicy;
use crate::layer::Rejection;
use crate::layer::key::KeyExtractor;
use crate::response::Responses;
use crate::response::headers;

/// The lease of a response's permit unless [`lease`](RedisConcurrencyLimitLayer::lease)
/// says otherwise: renewed every half of it while the body streams, and the time a crashed
/// worker's slots take to come back.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The longest a response holds its slot unless
/// [`max_hold`](RedisConcurrencyLimitLayer::max_hold) says otherwise: an hour, so that a
/// response that stalls while its client stays connected frees its slot in the end, while
/// a download or an event stream of less than an hour is never cut.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(60 * 60);

/// The shortest lease; shorter ones are raised to it (renewals would outnumber requests).
pub const MIN_LEASE: Duration = Duration::from_millis(100);

/// The longest wait for a permit unless [`timeout`](RedisConcurrencyLimitLayer::timeout)
/// says otherwise.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_millis(500);

/// Limits how many requests are in flight at once, per client key and/or in all, across
/// every replica sharing the backend; a request holds its slot until its response **body**
/// ends, for at most [`max_hold`](Self::max_hold) ([`DEFAULT_MAX_HOLD`], an hour, unless set).
///
/// Each request takes a permit of a [`KeyedSemaphore`] before the inner service is called.
/// The permit lives as long as the response body: it is released when the body ends, fails
/// or is dropped (a client that disconnects mid-stream frees its slot at once). While the
/// body streams, the permit is renewed every half [lease](Self::lease); a worker that dies
/// mid-stream stops renewing, and its slots come back within one lease. If a renewal finds
/// the permit lost, the body ends with a [`PermitLost`](super::PermitLost) error rather
/// than streaming on unaccounted for.
///
/// - Over capacity: `429 Too Many Requests` with `Retry-After` and `RateLimit-Policy` with
///   `qu="concurrent-requests"`. `Retry-After` is when the earliest permit would expire if
///   its holder stopped renewing it now (rounded up to whole seconds): the soonest a slot
///   can free up unasked, not a promise. A stream that goes on renews its permit, so a
///   client that comes back then may meet `429` again; a slot freed by a finished response
///   is free at once.
/// - Backend failure or [timeout](Self::timeout): the [`FailurePolicy`]. Failing closed
///   (the default) answers 503 with `Retry-After`. Failing open grants a **worker-local**
///   permit, counted against the same capacities within this process only: the global
///   capacity, and the per-key capacity for each client key (at most
///   [`fallback_keys`](Self::fallback_keys) keys at once, [`DEFAULT_FALLBACK_KEYS`] by
///   default). A client over its own capacity is answered 429, as with the backend up; one
///   that finds every tracked key taken is answered 503, never 429. Limits are not
///   coordinated across replicas while the backend is down, and local permits are not
///   registered with it when it comes back. Only
///   unavailability ([`Error::is_unavailable`](crate::Error::is_unavailable): no connection,
///   no reply in time, a failover reply) fails open; a refusal (an ACL, credentials, a Lua
///   error, a full memory backend) answers 503 with `Retry-After` under either policy.
/// - An optional [`CircuitBreaker`] stops acquisitions from reaching a backend that keeps
///   failing, while renewals of streams in flight go on.
///
/// Cheap to clone: the configuration is shared behind an `Arc`.
///
/// # Example
///
/// ```
/// # #[cfg(feature = "axum")]
/// # fn main() -> leasehold::Result<()> {
/// use std::time::Duration;
/// use axum::{Router, routing::get};
/// use leasehold::Coordination;
/// use leasehold::layer::CircuitBreaker;
/// use leasehold::layer::concurrency_limit::{Capacity, RedisConcurrencyLimitLayer};
/// use leasehold::layer::key::KeyExtractor;
///
/// let coordination = Coordination::memory(); // or Coordination::connect(redis_url, "myapp:").await?
/// // At most 2 downloads per client IP and 100 in all, across every replica.
/// let app: Router = Router::new()
///     .route("/download", get(|| async { "a large body" }))
///     .layer(
///         RedisConcurrencyLimitLayer::new(&coordination, "downloads", Capacity::per_key(2).and_global(100))?
///             .key(KeyExtractor::peer_ip())
///             .lease(Duration::from_secs(20))
///             .circuit_breaker(CircuitBreaker::new()),
///     );
/// # Ok(()) }
/// # #[cfg(not(feature = "axum"))]
/// # fn main() {}
/// ```
#[derive(Clone)]
pub struct RedisConcurrencyLimitLayer {
    config: Arc<Config>,
}

impl RedisConcurrencyLimitLayer {
    /// At most `capacity` requests in flight per client key, in all, or both, in the
    /// semaphores named `name` (see [`KeyedSemaphore`] for the storage). Client keys default
    /// to the peer IP ([`KeyExtractor::peer_ip`]); without a per-key capacity no key is
    /// extracted.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when
    /// either capacity is 0: see [why layers are made with `?`](crate::layer#errors).
    pub fn new(
        coordination: &Coordination,
        name: impl Into<String>,
        capacity: Capacity,
    ) -> Result<Self> {
        let name = name.into();
        let semaphore = KeyedSemaphore::new(coordination, &name, capacity)
            .map_err(|err| err.context(format_args!("the concurrency limit {name:?}")))?;
        let (per_key, global) = (capacity.of_each_key(), capacity.in_all());
        let policy_field = headers::concurrency_policy(
            per_key
                .map(|capacity| (name.clone(), capacity))
                .into_iter()
                .chain(global.map(|capacity| (format!("{name}-global"), capacity))),
        );
        let metrics = crate::telemetry::DecisionMetrics::concurrency(&name);
        Ok(RedisConcurrencyLimitLayer {
            config: Arc::new(Config {
                metrics,
                name,
                key: per_key.map(|_| KeyExtractor::peer_ip()),
                semaphore,
                lease: DEFAULT_LEASE,
                max_hold: DEFAULT_MAX_HOLD,
                timeout: DEFAULT_ACQUIRE_TIMEOUT,
                failure: FailurePolicy::default(),
                breaker: coordination.breaker().cloned(),
                outages: Arc::default(),
                local: Arc::new(Fallback::new(per_key, global, DEFAULT_FALLBACK_KEYS)),
                policy_field,
                responses: Responses::default(),
            }),
        })
    }

    /// How the client key is derived from each request (used only with a per-key capacity).
    pub fn key(mut self, key: KeyExtractor) -> Self {
        let config = self.config_mut();
        if config.key.is_some() {
            config.key = Some(key);
        }
        self
    }

    /// The lease of each response's permit (default [`DEFAULT_LEASE`], at least
    /// [`MIN_LEASE`] and at most [`MAX_MANAGED_LEASE`]): renewed every half of it while the
    /// body streams, and the longest a crashed worker's slot stays taken. A renewal that gets
    /// no answer is tried again while the permit's estimate lasts, so a backend stall shorter
    /// than that costs the stream nothing.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config_mut().lease = lease.clamp(MIN_LEASE, MAX_MANAGED_LEASE);
        self
    }

    /// The longest a response may hold its slot, from the moment its permit was taken
    /// (default [`DEFAULT_MAX_HOLD`], an hour): past it, the permit is released and the body
    /// ends with a [`HoldLimitReached`](super::HoldLimitReached) error. Within it, a response
    /// holds its slot for as long as its body streams, renewed. The bound is what frees the
    /// slot of a response that stalls while its client stays connected (a stuck handler or
    /// upstream, a client that stops reading without closing), as a proxy's upstream
    /// cleanup timeout does: lower it where responses are short, raise it for event streams
    /// that run longer (`Duration::MAX` for none, which leaves a stalled response its slot
    /// for as long as its connection lasts). The permit's keeper releases it at the bound
    /// whatever the response is doing (its handler still running, its body not polled
    /// because the client's buffers are full); a worker-local permit (failing open) is
    /// released when its body is next polled past the bound, or dropped. A bound under a
    /// millisecond counts as one.
    pub fn max_hold(mut self, limit: Duration) -> Self {
        self.config_mut().max_hold = limit.max(Duration::from_millis(1));
        self
    }

    /// How many client keys a per-key capacity keeps permits for in this process while the
    /// layer fails open (default [`DEFAULT_FALLBACK_KEYS`]): a new client beyond them is
    /// answered 503, the outage's answer. Each tracked key costs its bytes and a count, and
    /// leaves once its last local permit is given back. At least 1 (0 counts as 1).
    pub fn fallback_keys(mut self, keys: usize) -> Self {
        let local = self.config.local.with_max_keys(keys.max(1));
        self.config_mut().local = Arc::new(local);
        self
    }

    /// The longest wait for a permit before the [failure policy](Self::failure_policy)
    /// applies (default [`DEFAULT_ACQUIRE_TIMEOUT`]). A permit granted after the wait was
    /// given up is released in the background.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config_mut().timeout = timeout;
        self
    }

    /// What to do when the backend fails or times out. Default: fail closed (503 with
    /// `Retry-After: 1`).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.config_mut().failure = policy;
        self
    }

    /// Puts acquisitions behind a circuit breaker of this layer's own: after repeated
    /// availability failures (a silent server among them) they fail at once (by the
    /// [failure policy](Self::failure_policy)) without contacting the backend, until a probe
    /// finds it back (see [`CircuitBreaker`]). Renewals are never blocked. By default a layer
    /// shares its [`Coordination`]'s ([`Coordination::circuit_breaker`]).
    pub fn circuit_breaker(mut self, breaker: CircuitBreaker) -> Self {
        let config = &self.config;
        let own = Breaker::new(breaker, config.semaphore.backend(), &config.name);
        self.config_mut().breaker = Some(own);
        self
    }

    /// Sends every acquisition to the backend, however often it failed: without a circuit
    /// breaker, each request waits out the [timeout](Self::timeout) while the server is
    /// silent.
    pub fn no_circuit_breaker(mut self) -> Self {
        self.config_mut().breaker = None;
        self
    }

    /// Whether 429 and 503 answers carry an RFC 9457 `application/problem+json` body.
    /// Default: no body.
    pub fn problem_json(mut self, enabled: bool) -> Self {
        self.config_mut().responses.problem_json = enabled;
        self
    }

    /// The application's own answers to the requests this layer refuses: `respond` sees
    /// each [`Rejection`] (a full limit, an outage, a key that cannot be derived) with the
    /// request's parts (for its `Accept`, say) and returns a response, or `None` to keep the
    /// layer's. The layer adds `Retry-After` when the
    /// response has none, and `RateLimit-Policy` to a full limit's.
    /// The same function serves every layer and the `Lease` extractor (see [`Rejection`]).
    ///
    /// Default: the status and `Retry-After` alone (problem+json with
    /// [`problem_json`](Self::problem_json)); for a key error, its
    /// [status](crate::layer::key::KeyError::status) (400 for a missing or invalid header, 500
    /// for a missing peer address, which is a server configuration problem) with a one-line
    /// reason.
    pub fn rejection_response<F>(mut self, respond: F) -> Self
    where
        F: Fn(&Rejection<'_>, &Parts) -> Option<http::Response<Bytes>> + Send + Sync + 'static,
    {
        self.config_mut().responses.custom = Some(Arc::new(respond));
        self
    }

    /// The circuit breaker's state; `None` without one (in process, or removed).
    pub fn circuit_state(&self) -> Option<CircuitState> {
        self.config.breaker.as_ref().map(|breaker| breaker.state())
    }

    /// The semaphores this layer takes permits from.
    pub fn semaphore(&self) -> &KeyedSemaphore {
        &self.config.semaphore
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }
}

impl<S> Layer<S> for RedisConcurrencyLimitLayer {
    type Service = ConcurrencyLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit::new(inner, self.config.clone())
    }
}

impl fmt::Debug for RedisConcurrencyLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConcurrencyLimitLayer")
            .field("name", &self.config.name)
            .field("per_key", &self.config.semaphore.per_key())
            .field("global", &self.config.semaphore.global())
            .field("lease", &self.config.lease)
            .field("max_hold", &self.config.max_hold)
            .field("timeout", &self.config.timeout)
            .field("failure", &self.config.failure)
            .field("circuit_state", &self.circuit_state())
            .finish_non_exhaustive()
    }
}
