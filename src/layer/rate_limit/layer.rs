//! The rate-limit layer and its configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use tower_layer::Layer;

use super::config::Config;
use super::{PlanChooser, RateLimit};
use crate::Coordination;
use crate::backend::memory::MemoryBackend;
use crate::coordination::circuit_breaker::{Breaker, CircuitBreaker, CircuitState};
use crate::coordination::rate_limit::{
    FixedWindow, Gcra, QueueOrder, RateLimitPlans, RateLimitPolicy, RateLimiter, Refill,
    SlidingWindow, Stacked, TokenBucket,
};
use crate::error::Result;
use crate::layer::FailurePolicy;
use crate::layer::Rejection;
use crate::layer::key::KeyExtractor;
use crate::response::Responses;

/// Default bound on the wait for a decision.
pub const DEFAULT_DECISION_TIMEOUT: Duration = Duration::from_millis(500);

/// How many client keys a failing-open layer counts in this process by default (see
/// [`RedisRateLimitLayer::fallback_keys`]).
pub const DEFAULT_FALLBACK_KEYS: usize = 100_000;

/// The shortest secret [`RedisRateLimitLayer::partition_keys_in_fields`] takes.
const MIN_PARTITION_SECRET_LEN: usize = 16;

/// Applies a rate limit to every request of the wrapped service, deciding in the backend
/// (Redis, shared by every replica) with one atomic step per request.
///
/// - Allowed requests reach the inner service, with the decision in their extensions
///   ([`RateLimitInfo`](super::RateLimitInfo)); responses carry `RateLimit-Policy` and
///   `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11).
/// - Rejected requests get `429 Too Many Requests` with `Retry-After` in whole seconds
///   rounded up, the same fields and, optionally, an RFC 9457 `application/problem+json`
///   body. A request for more permits than the limit gets no `Retry-After`: it can never
///   succeed.
/// - The layer never holds back `poll_ready` for the limit: each request gets its decision
///   in `call`.
/// - When the backend is unavailable or exceeds the [timeout](Self::timeout), the
///   [`FailurePolicy`] decides (503 with `Retry-After` by default). A refusal (an ACL, a
///   rotated password, a Lua error, a full memory backend) answers 503 under either policy.
///   The backend reconnects by itself; when Redis is back the layer serves normally again.
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
/// use leasehold::layer::key::KeyExtractor;
/// use leasehold::layer::rate_limit::RedisRateLimitLayer;
///
/// let coordination = Coordination::memory(); // or Coordination::connect(redis_url, "myapp:").await?
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(
///         RedisRateLimitLayer::fixed_window(&coordination, "api", 100, Duration::from_secs(60))?
///             .key(KeyExtractor::peer_ip()),
///     );
/// # Ok(()) }
/// # #[cfg(not(feature = "axum"))]
/// # fn main() {}
/// ```
#[derive(Clone)]
pub struct RedisRateLimitLayer {
    pub(super) config: Arc<Config>,
}

impl RedisRateLimitLayer {
    /// A layer around any limiter. Keys default to the peer IP
    /// ([`KeyExtractor::peer_ip`]), cost to 1 per request.
    pub fn new(limiter: impl Into<RateLimiter>) -> Self {
        let limiter = limiter.into();
        let breaker = limiter.coordination().breaker().cloned();
        let metrics = crate::telemetry::DecisionMetrics::new(limiter.name());
        RedisRateLimitLayer {
            config: Arc::new(Config {
                fields: crate::response::headers::RateLimitFields::new(limiter.policies()),
                limiter,
                key: KeyExtractor::peer_ip(),
                cost: None,
                failure: FailurePolicy::default(),
                timeout: DEFAULT_DECISION_TIMEOUT,
                responses: Responses::default(),
                breaker,
                outages: Arc::default(),
                legacy_headers: false,
                fields_at_most: None,
                partition: None,
                max_wait: None,
                fail_open_share: 1.0,
                fallback_keys: DEFAULT_FALLBACK_KEYS,
                fallback: None,
                enforced_share: 1.0,
                shadow_switch: None,
                metrics,
                plans: None,
            }),
        }
    }

    /// A layer with a [`FixedWindow`] limiter: at most `limit` requests per `window` for
    /// each client key. Fails on invalid configuration (see [`FixedWindow::new`]).
    pub fn fixed_window(
        coordination: &Coordination,
        name: impl Into<String>,
        limit: u64,
        window: Duration,
    ) -> Result<Self> {
        Ok(Self::new(FixedWindow::new(
            coordination,
            name,
            limit,
            window,
        )?))
    }

    /// A layer with a [`SlidingWindow`] limiter: at most `limit` requests in any `window`,
    /// counted in `segments` segments. Fails on invalid configuration (see
    /// [`SlidingWindow::new`]).
    pub fn sliding_window(
        coordination: &Coordination,
        name: impl Into<String>,
        limit: u64,
        window: Duration,
        segments: u32,
    ) -> Result<Self> {
        Ok(Self::new(SlidingWindow::new(
            coordination,
            name,
            limit,
            window,
            segments,
        )?))
    }

    /// A layer with a [`TokenBucket`] limiter: bursts of up to `capacity` requests, and
    /// `refill`'s tokens back at the end of each of its intervals. Fails on invalid
    /// configuration (see [`TokenBucket::new`]).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::Coordination;
    /// use leasehold::coordination::rate_limit::Refill;
    /// use leasehold::layer::rate_limit::RedisRateLimitLayer;
    ///
    /// # fn main() -> leasehold::Result<()> {
    /// // Bursts of 20, then 5 more every second.
    /// let layer = RedisRateLimitLayer::token_bucket(
    ///     &Coordination::memory(),
    ///     "uploads",
    ///     20,
    ///     Refill::new(5, Duration::from_secs(1)),
    /// )?;
    /// assert_eq!(layer.limiter().policy().quota(), 20);
    /// # Ok(()) }
    /// ```
    pub fn token_bucket(
        coordination: &Coordination,
        name: impl Into<String>,
        capacity: u64,
        refill: Refill,
    ) -> Result<Self> {
        Ok(Self::new(TokenBucket::new(
            coordination,
            name,
            capacity,
            refill,
        )?))
    }

    /// A layer with a [`Gcra`] limiter: `limit` requests per `window`, evenly spaced, with
    /// bursts of up to `burst`. Fails on invalid configuration (see [`Gcra::new`]).
    pub fn gcra(
        coordination: &Coordination,
        name: impl Into<String>,
        limit: u64,
        window: Duration,
        burst: u64,
    ) -> Result<Self> {
        Ok(Self::new(Gcra::new(
            coordination,
            name,
            limit,
            window,
            burst,
        )?))
    }

    /// A layer whose quota is chosen per request among `plans` (see [`RateLimitPlans`]), by
    /// what the [chooser](Self::choose_plan) reads from the request: its customer's override
    /// if there is one, else the plan it names, else the default plan. The
    /// chosen plan's name and quota (a stacked plan's, one per window as `<plan>/<window>`)
    /// are the `RateLimit-Policy` and `RateLimit` fields',
    /// [`RateLimitInfo`](super::RateLimitInfo)'s, the problem body's and the metrics'
    /// `policy` label (an override's name is
    /// [`OVERRIDE_POLICY_NAME`](crate::coordination::rate_limit::OVERRIDE_POLICY_NAME)).
    /// Everything else the layer is given (key, cost, failure policy, queue, deny cache, ...)
    /// applies under every plan; each plan has a queue, a deny cache and a fail-open
    /// fallback of its own, so that a client whose plan changes is judged by the new one at
    /// once.
    ///
    /// # Example
    ///
    /// ```
    /// # #[cfg(feature = "axum")]
    /// # fn main() -> leasehold::Result<()> {
    /// use axum::{Router, routing::get};
    /// use leasehold::Coordination;
    /// use leasehold::coordination::rate_limit::{PlanAlgorithm, PlanChoice, Quota, RateLimitPlans};
    /// use leasehold::layer::key::KeyExtractor;
    /// use leasehold::layer::rate_limit::{ChoosesPlan, PlanChooser, RedisRateLimitLayer};
    ///
    /// /// What your authentication layer stores in the request's extensions.
    /// #[derive(Clone)]
    /// struct Account {
    ///     id: String,
    ///     plan: String,
    /// }
    ///
    /// impl ChoosesPlan for Account {
    ///     fn plan_choice(&self) -> PlanChoice<'_> {
    ///         PlanChoice::plan(&self.plan).customer(&self.id)
    ///     }
    /// }
    ///
    /// let coordination = Coordination::memory(); // or Coordination::connect(redis_url, "myapp:").await?
    /// let plans = RateLimitPlans::builder(&coordination, "api", PlanAlgorithm::FixedWindow)
    ///     .plan("free", Quota::per_minute(10))
    ///     .plan("pro", Quota::per_minute(100))
    ///     .customer_override("acme", Quota::per_minute(1000))
    ///     .build()?;
    /// let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(
    ///     RedisRateLimitLayer::plans(plans)
    ///         .key(KeyExtractor::header("x-api-key")?)
    ///         .choose_plan(PlanChooser::extension::<Account>()),
    /// );
    /// # Ok(()) }
    /// # #[cfg(not(feature = "axum"))]
    /// # fn main() {}
    /// ```
    pub fn plans(plans: RateLimitPlans) -> Self {
        let mut layer = Self::new(plans.default_limiter());
        layer.config_mut().plans = Some(Arc::new(super::plan::Plans::new(plans)));
        layer
    }

    /// Reads the plan (and the customer) of each request with `chooser`, for a layer built
    /// with [`plans`](Self::plans); without it, every request gets the default plan. Ignored
    /// by a layer of one quota.
    pub fn choose_plan(mut self, chooser: PlanChooser) -> Self {
        let config = self.config_mut();
        if let Some(plans) = &config.plans {
            config.plans = Some(Arc::new(plans.choosing(chooser)));
        }
        self
    }

    /// The plans of a layer built with [`plans`](Self::plans).
    pub fn plan_set(&self) -> Option<&RateLimitPlans> {
        self.config.plans.as_deref().map(super::plan::Plans::plans)
    }

    /// A layer with a [`Stacked`] limiter: several fixed-window policies on each client key
    /// (for example 10 per second and 1000 per day), checked and counted together. Responses
    /// list every policy in `RateLimit-Policy` and each one's state in `RateLimit`; a 429's
    /// `Retry-After` is the longest wait among the policies that rejected the request, and
    /// the legacy `X-RateLimit-*` fields describe the binding policy (the fewest permits
    /// left). Fails on invalid configuration (see [`Stacked::new`]).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::Coordination;
    /// use leasehold::coordination::rate_limit::RateLimitPolicy;
    /// use leasehold::layer::rate_limit::RedisRateLimitLayer;
    ///
    /// # fn main() -> leasehold::Result<()> {
    /// let layer = RedisRateLimitLayer::stacked(
    ///     &Coordination::memory(),
    ///     "api",
    ///     [
    ///         RateLimitPolicy::new("second", 10, Duration::from_secs(1)),
    ///         RateLimitPolicy::new("day", 1000, Duration::from_secs(86_400)),
    ///     ],
    /// )?;
    /// assert_eq!(layer.limiter().policies().len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn stacked(
        coordination: &Coordination,
        name: impl Into<String>,
        policies: impl IntoIterator<Item = RateLimitPolicy>,
    ) -> Result<Self> {
        Ok(Self::new(Stacked::new(coordination, name, policies)?))
    }

    /// How the client key is derived from each request.
    pub fn key(mut self, key: KeyExtractor) -> Self {
        self.config_mut().key = key;
        self
    }

    /// The permits a request costs, computed from its parts (1 when not set). A cost above
    /// the limit (with several policies, the smallest one) is always rejected, without
    /// `Retry-After`. A cost of 0 is a probe: it is always served, even on an exhausted key,
    /// and only reads the state for the response's fields; return at least 1 for requests
    /// that must count.
    pub fn cost<F>(mut self, cost: F) -> Self
    where
        F: Fn(&Parts) -> u64 + Send + Sync + 'static,
    {
        self.config_mut().cost = Some(Arc::new(cost));
        self
    }

    /// What to do when the backend is unavailable or times out. Default: fail closed (503
    /// with `Retry-After: 1`). Refusals answer 503 whatever the policy.
    ///
    /// [`FailOpen`](FailurePolicy::FailOpen) admits requests through a fallback limit kept
    /// in this process, never without limit: each policy's quota (or this instance's
    /// [share](Self::fail_open_share) of it) per window, for each client key, counted in
    /// fixed windows. A request over it is answered `429` with `Retry-After`. So a flood that
    /// pushes decisions past the timeout (expensive over-limit requests, a co-tenant's long
    /// script making Redis answer `BUSY`) cannot switch the limit off: while the backend
    /// cannot decide, at most the fallback's budget is admitted per instance, for each of
    /// up to [`fallback_keys`](Self::fallback_keys) clients counted at once.
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        let config = self.config_mut();
        config.failure = policy;
        config.fallback = fallback(config);
        self
    }

    /// This instance's share of each quota while failing open (see
    /// [`failure_policy`](Self::failure_policy)), from 0 to 1: `1.0` (the default) admits
    /// a whole quota in each instance, so `n` replicas admit up to `n` quotas in all while
    /// Redis is away; `1.0 / n` keeps them to about one quota. A share is rounded down to
    /// whole permits, at least one per window; one outside 0 to 1 is taken as the nearer end.
    pub fn fail_open_share(mut self, share: f64) -> Self {
        let config = self.config_mut();
        config.fail_open_share = if share.is_nan() {
            1.0
        } else {
            share.clamp(0.0, 1.0)
        };
        config.fallback = fallback(config);
        self
    }

    /// How many client keys the fallback of a layer failing open counts at once (default
    /// [`DEFAULT_FALLBACK_KEYS`]; at least 1). Each costs its bytes and a window's count in
    /// this process. A new client beyond them takes the place of the one whose window ends
    /// first: that client's count is forgotten, and it may be admitted again within its
    /// window. So a flood of more distinct clients than this admits more than their quotas
    /// in all, never more than one quota per client per window at a time: size it to the
    /// clients an outage should keep apart.
    pub fn fallback_keys(mut self, keys: usize) -> Self {
        let config = self.config_mut();
        config.fallback_keys = keys.max(1);
        config.fallback = fallback(config);
        self
    }

    /// The longest wait for a decision before the [failure policy](Self::failure_policy)
    /// applies. Default [`DEFAULT_DECISION_TIMEOUT`]. A decision that times out may still
    /// have consumed permits on the server.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config_mut().timeout = timeout;
        self
    }

    /// Shadow mode (`true`): decides and records every request as enforced, but lets the
    /// ones it would reject through, each marked as a shadow rejection
    /// ([`RateLimitInfo::is_shadow_rejection`](super::RateLimitInfo::is_shadow_rejection),
    /// the `shadow_limited` decision of the [metrics](crate::telemetry)), without
    /// rate-limit fields: clients that follow them would hold back for a limit on trial. A
    /// shadow rejection consumes what an enforced one
    /// does (nothing), so the limit's state is the one enforcement would leave; a layer that
    /// [waits](Self::wait) still waits. Default: enforced. See also
    /// [`set_shadow_mode`](super::set_shadow_mode), the switch for every layer.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::Coordination;
    /// use leasehold::layer::rate_limit::RedisRateLimitLayer;
    ///
    /// # fn main() -> leasehold::Result<()> {
    /// // Try a stricter limit on live traffic before enforcing it.
    /// let trial = RedisRateLimitLayer::fixed_window(&Coordination::memory(), "trial", 10, Duration::from_secs(1))?
    ///     .shadow(true);
    /// # let _ = trial;
    /// # Ok(()) }
    /// ```
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.config_mut().enforced_share = if shadow { 0.0 } else { 1.0 };
        self
    }

    /// Follows `switch` for shadow mode in place of the process-wide
    /// [`set_shadow_mode`](super::set_shadow_mode): while it is on, the layer is in
    /// [shadow mode](Self::shadow) whatever its own setting. Give one switch to the layers
    /// that should change together (a tenant's, a router's, a test's).
    pub fn shadow_switch(mut self, switch: &super::ShadowSwitch) -> Self {
        self.config_mut().shadow_switch = Some(switch.clone());
        self
    }

    /// Enforces only `share` of the rejections (from 0 to 1, at random), the others let
    /// through as in [shadow mode](Self::shadow): a limit brought in gradually. `1.0` (the
    /// default) enforces every one, `0.0` is shadow mode; a share outside 0 to 1 is taken as
    /// the nearer end.
    pub fn enforced_share(mut self, share: f64) -> Self {
        self.config_mut().enforced_share = if share.is_nan() {
            1.0
        } else {
            share.clamp(0.0, 1.0)
        };
        self
    }

    /// Whether 429 and 503 answers carry an RFC 9457 `application/problem+json` body.
    /// Default: no body.
    pub fn problem_json(mut self, enabled: bool) -> Self {
        self.config_mut().responses.problem_json = enabled;
        self
    }

    /// Adds the rate-limit fields to an allowed response only when its decision's binding
    /// policy has at most `remaining` permits left: clients hear of the limit as they near
    /// it, and most responses go without the bytes. `429` answers always carry them (shadow
    /// rejections never: see [`shadow`](Self::shadow)). Default: every response.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::Coordination;
    /// use leasehold::layer::rate_limit::RedisRateLimitLayer;
    ///
    /// # fn main() -> leasehold::Result<()> {
    /// // Fields on the last ten requests of each minute's hundred.
    /// let layer = RedisRateLimitLayer::fixed_window(&Coordination::memory(), "api", 100, Duration::from_secs(60))?
    ///     .fields_when_remaining_at_most(10);
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn fields_when_remaining_at_most(mut self, remaining: u64) -> Self {
        self.config_mut().fields_at_most = Some(remaining);
        self
    }

    /// Shows each client its partition key: every member of the `RateLimit` field gets a
    /// `pk` parameter, a tag of the client key (HMAC-SHA-256 under `secret`, cut to 96 bits,
    /// as a Byte Sequence), so that a client can tell which quota its requests spend (its
    /// address's, its API key's) and compare it across responses. Opaque: without the
    /// secret nobody can tell the key from it (a bare hash of an address could be reversed by
    /// trying every address). Give every replica the same secret, so that a client sees one
    /// tag; changing it changes every tag. Default: no `pk`.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// secret under 16 bytes: with none, or a short one, the tag of an IPv4 address could be
    /// reversed by trying every address.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::Coordination;
    /// use leasehold::layer::rate_limit::RedisRateLimitLayer;
    ///
    /// # fn main() -> leasehold::Result<()> {
    /// let secret = std::env::var("PARTITION_KEY_SECRET")
    ///     .unwrap_or_else(|_| "at least sixteen bytes, the same in every replica".to_owned());
    /// let layer = RedisRateLimitLayer::fixed_window(&Coordination::memory(), "api", 100, Duration::from_secs(60))?
    ///     .partition_keys_in_fields(secret.as_bytes())?;
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn partition_keys_in_fields(mut self, secret: impl AsRef<[u8]>) -> crate::Result<Self> {
        let secret = secret.as_ref();
        if secret.len() < MIN_PARTITION_SECRET_LEN {
            return Err(crate::Error::invalid_argument(format!(
                "a partition-key secret is at least {MIN_PARTITION_SECRET_LEN} bytes, not {}",
                secret.len()
            )));
        }
        self.config_mut().partition = Some(super::partition::PartitionKeys::new(secret));
        Ok(self)
    }

    /// Whether responses also carry the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining`
    /// and `X-RateLimit-Reset` (seconds until reset) headers. Default: no.
    pub fn legacy_headers(mut self, enabled: bool) -> Self {
        self.config_mut().legacy_headers = enabled;
        self
    }

    /// The application's own answers to the requests this layer refuses: `respond` sees
    /// each [`Rejection`] (a full limit, an outage, a key that cannot be derived) with the
    /// request's parts (for its `Accept`, say) and returns a response, or `None` to keep the
    /// layer's. The layer adds `Retry-After` when the
    /// response has none, and the `RateLimit` fields of a rate limit's decision.
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

    /// Lets a request that would be rejected wait up to `max_wait` for permits, in a local
    /// queue of at most `queue_limit` permits (oldest first), before answering 429.
    ///
    /// The wait follows the availability time the server computes (no polling). Queue order
    /// is local to this instance. The [decision timeout](Self::timeout) comes on top of
    /// `max_wait`. The circuit breaker hears the backend's first answer, as for any
    /// decision; the wait is outside it (a half-open circuit's probe closes it with that
    /// answer, rather than holding the only probe for the wait).
    pub fn wait(mut self, max_wait: Duration, queue_limit: u64) -> Self {
        let config = self.config_mut();
        config.limiter = config
            .limiter
            .clone()
            .with_queue(queue_limit, QueueOrder::OldestFirst);
        config.max_wait = Some(max_wait);
        self
    }

    /// Remembers up to `max_keys` recently rejected keys and rejects their requests locally,
    /// without a round trip, until the retry time Redis gave (see
    /// [`RateLimiter::with_deny_cache`]). Worth it when a few hot keys flood the service.
    pub fn deny_cache(mut self, max_keys: usize) -> Self {
        let config = self.config_mut();
        config.limiter = config.limiter.clone().with_deny_cache(max_keys);
        self
    }

    /// Puts decisions behind a circuit breaker of this layer's own: after repeated
    /// availability failures (a silent server among them) they fail at once (by the
    /// [failure policy](Self::failure_policy)) without contacting the backend, until a probe
    /// finds it back (see [`CircuitBreaker`]). By default a layer shares its
    /// [`Coordination`]'s ([`Coordination::circuit_breaker`]).
    pub fn circuit_breaker(mut self, breaker: CircuitBreaker) -> Self {
        let limiter = &self.config.limiter;
        let own = Breaker::new(breaker, limiter.coordination().backend(), limiter.name());
        self.config_mut().breaker = Some(own);
        self
    }

    /// Sends every decision to the backend, however often it failed: without a circuit
    /// breaker, each request waits out the [timeout](Self::timeout) while the server is
    /// silent.
    pub fn no_circuit_breaker(mut self) -> Self {
        self.config_mut().breaker = None;
        self
    }

    /// The circuit breaker's state; `None` without one (in process, or removed).
    pub fn circuit_state(&self) -> Option<CircuitState> {
        self.config.breaker.as_ref().map(|breaker| breaker.state())
    }

    /// The limiter this layer applies; with [plans](Self::plans), the default plan's as
    /// this layer configured it (each plan decides through a limiter of its own).
    pub fn limiter(&self) -> &RateLimiter {
        &self.config.limiter
    }

    fn config_mut(&mut self) -> &mut Config {
        let config = Arc::make_mut(&mut self.config);
        // The plans' configurations are made from this one: made again once it changed.
        if let Some(plans) = &config.plans {
            config.plans = Some(Arc::new(plans.for_changed_layer()));
        }
        config
    }
}

/// The fallback of a failing-open layer: its policies scaled by its share, as fixed windows
/// on a backend of this process.
pub(super) fn fallback(config: &Config) -> Option<RateLimiter> {
    if config.failure != FailurePolicy::FailOpen {
        return None;
    }
    use crate::coordination::rate_limit::stacked::{MAX_LIMIT, MAX_WINDOW_MS};
    let policies = config.limiter.policies().iter().map(|policy| {
        // Rounded down, at least one: a share is what an instance may admit alone. Kept
        // within what stacked windows count (a larger quota, a window under a millisecond or
        // over 2^40 ms, which other algorithms take): a fallback approximates, never lifts.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let quota = ((policy.quota() as f64) * config.fail_open_share).floor() as u64;
        let window = policy.window().clamp(
            Duration::from_millis(1),
            Duration::from_millis(MAX_WINDOW_MS),
        );
        let kept = RateLimitPolicy::new(policy.name(), quota.clamp(1, MAX_LIMIT), window);
        if policy.is_shadow() {
            kept.shadow()
        } else {
            kept
        }
    });
    let store = Coordination::new(MemoryBackend::for_rate_limits(config.fallback_keys));
    match Stacked::new(&store, "fail-open", policies) {
        Ok(stacked) => Some(RateLimiter::from(stacked)),
        // Every policy was brought within the stacked windows' bounds; names are distinct.
        Err(err) => {
            tracing::error!(error = %err, "no fail-open fallback for this rate limit; failing open passes");
            None
        }
    }
}

impl<S> Layer<S> for RedisRateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, self.config.clone())
    }
}

impl fmt::Debug for RedisRateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisRateLimitLayer")
            .field("limiter", &self.config.limiter)
            .field("failure", &self.config.failure)
            .field("timeout", &self.config.timeout)
            .finish_non_exhaustive()
    }
}
