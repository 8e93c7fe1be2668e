//! What a concurrency-limit layer and its services share: the layer's configuration.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;

use crate::coordination::circuit_breaker::Breaker;
use crate::coordination::semaphore::KeyedSemaphore;
use crate::layer::FailurePolicy;
use crate::layer::key::KeyExtractor;
use crate::response::Responses;

/// The configuration a layer shares with every service it makes.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) name: String,
    pub(crate) semaphore: KeyedSemaphore,
    /// `None` without a per-key capacity: every request then shares the global semaphore.
    pub(crate) key: Option<KeyExtractor>,
    pub(crate) lease: Duration,
    /// The longest a response holds its slot.
    pub(crate) max_hold: Duration,
    pub(crate) timeout: Duration,
    pub(crate) failure: FailurePolicy,
    pub(crate) breaker: Option<Arc<Breaker>>,
    /// The outages this layer met, told once each.
    pub(crate) outages: Arc<crate::outage_log::OutageLog>,
    /// Its decisions, counted.
    pub(crate) metrics: crate::telemetry::DecisionMetrics,
    /// The worker-local permits handed out while failing open.
    pub(crate) local: Arc<super::fallback::Fallback>,
    /// The `RateLimit-Policy` value, made once.
    pub(crate) policy_field: Option<HeaderValue>,
    pub(crate) responses: Responses,
}
