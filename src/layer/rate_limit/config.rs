//! What a rate-limit layer and its services share: the layer's configuration.

use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;

use crate::coordination::circuit_breaker::Breaker;
use crate::coordination::rate_limit::{RateLimiter, Shortcuts};
use crate::layer::CircuitState;
use crate::layer::FailurePolicy;
use crate::layer::key::KeyExtractor;
use crate::response::Responses;

/// What a request costs, in permits.
pub(crate) type CostFn = dyn Fn(&Parts) -> u64 + Send + Sync;

/// The configuration a layer shares with every service it makes.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) limiter: RateLimiter,
    pub(crate) key: KeyExtractor,
    pub(crate) cost: Option<Arc<CostFn>>,
    pub(crate) failure: FailurePolicy,
    pub(crate) timeout: Duration,
    pub(crate) responses: Responses,
    pub(crate) breaker: Option<Arc<Breaker>>,
    /// The outages this layer met, told once each.
    pub(crate) outages: Arc<crate::outage_log::OutageLog>,
    pub(crate) legacy_headers: bool,
    /// Allowed responses carry the fields only when the binding policy has at most this
    /// many permits left; `None`: always.
    pub(crate) fields_at_most: Option<u64>,
    /// Where the `RateLimit` field shows each client's partition key: its tag under the
    /// application's secret.
    pub(crate) partition: Option<super::partition::PartitionKeys>,
    pub(crate) max_wait: Option<Duration>,
    /// The rate-limit fields' fixed parts, serialized once: the policies never change.
    pub(crate) fields: crate::response::headers::RateLimitFields,
    /// This instance's share of each policy, for the fallback.
    pub(crate) fail_open_share: f64,
    /// How many client keys the fallback counts at once.
    pub(crate) fallback_keys: usize,
    /// What admits requests while failing open: each policy's share, counted in this process
    /// (see [`RedisRateLimitLayer::fail_open_share`]). `Some` under [`FailurePolicy::FailOpen`].
    pub(crate) fallback: Option<RateLimiter>,
    /// The share of its rejections the layer enforces: 1 (all) by default, 0 in shadow
    /// mode.
    pub(crate) enforced_share: f64,
    /// The layer's own shadow-mode switch; `None`: the process's.
    pub(crate) shadow_switch: Option<super::ShadowSwitch>,
    /// One count per check, labelled with the limiter's name.
    pub(crate) metrics: crate::telemetry::DecisionMetrics,
    /// The plans a request's quota is chosen from; `None`: one quota for every request.
    pub(crate) plans: Option<Arc<super::plan::Plans>>,
}

impl Config {
    /// The shortcuts the limiter may take for a request of this layer: none of its own when
    /// the layer waits (the queue takes them); the hot-key tier's next batch not while the
    /// breaker is open; an in-process step not under a breaker, which admits and hears every
    /// step.
    #[inline]
    pub(crate) fn shortcuts(&self) -> Shortcuts {
        Shortcuts {
            waits: self.max_wait.is_some(),
            refill: self
                .breaker
                .as_ref()
                .is_none_or(|breaker| breaker.state() == CircuitState::Closed),
            in_process: self.breaker.is_none(),
        }
    }
}
