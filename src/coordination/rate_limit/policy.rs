//! A rate limit's public description, as advertised in `RateLimit-Policy`.

use std::sync::Arc;
use std::time::Duration;

/// What a quota counts (the `qu` parameter of `RateLimit-Policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum QuotaUnit {
    /// Requests (the default; not advertised since it is the field's default).
    #[default]
    Requests,
    /// Bytes of content.
    ContentBytes,
    /// Requests in flight at once.
    ConcurrentRequests,
}

impl QuotaUnit {
    /// The token used in the `qu` parameter.
    pub fn as_str(&self) -> &'static str {
        match self {
            QuotaUnit::Requests => "requests",
            QuotaUnit::ContentBytes => "content-bytes",
            QuotaUnit::ConcurrentRequests => "concurrent-requests",
        }
    }
}

/// A named quota: `quota` permits per `window`, counted in `unit`.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::coordination::rate_limit::{QuotaUnit, RateLimitPolicy};
///
/// let policy = RateLimitPolicy::new("default", 100, Duration::from_secs(60));
/// assert_eq!(policy.name(), "default");
/// assert_eq!(policy.quota(), 100);
/// assert_eq!(policy.unit(), QuotaUnit::Requests);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RateLimitPolicy {
    name: Arc<str>,
    quota: u64,
    window: Duration,
    unit: QuotaUnit,
    shadow: bool,
}

impl RateLimitPolicy {
    /// A policy counting requests.
    pub fn new(name: impl Into<Arc<str>>, quota: u64, window: Duration) -> Self {
        RateLimitPolicy {
            name: name.into(),
            quota,
            window,
            unit: QuotaUnit::Requests,
            shadow: false,
        }
    }

    /// The same policy in shadow mode, for a [`Stacked`](super::Stacked) limiter: counted and
    /// shown as any other, but a request it alone would reject is granted (the enforced
    /// policies count it; this one counts only what it would admit), and the decision says
    /// so ([`RateLimitDecision::is_shadow_rejection`](super::RateLimitDecision::is_shadow_rejection)).
    /// A way to try a new policy on live traffic beside the enforced ones. A single-policy
    /// limiter takes its layer's [shadow mode](crate::layer::rate_limit::RedisRateLimitLayer::shadow)
    /// instead.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::coordination::rate_limit::RateLimitPolicy;
    ///
    /// let trial = RateLimitPolicy::new("burst", 5, Duration::from_secs(1)).shadow();
    /// assert!(trial.is_shadow());
    /// ```
    pub fn shadow(mut self) -> Self {
        self.shadow = true;
        self
    }

    /// The same policy under another name (a plan's, over its limiter's keys).
    pub(crate) fn renamed(mut self, name: Arc<str>) -> Self {
        self.name = name;
        self
    }

    /// Whether it is in [shadow mode](Self::shadow).
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The same policy counting another unit.
    pub fn with_unit(mut self, unit: QuotaUnit) -> Self {
        self.unit = unit;
        self
    }

    /// The policy's name, shown to clients in the `RateLimit` fields.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Permits per window.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The window the quota applies to.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// What the quota counts.
    pub fn unit(&self) -> QuotaUnit {
        self.unit
    }
}

/// A limiter's policies, cheap to clone into every request's
/// [`RateLimitInfo`](crate::layer::rate_limit::RateLimitInfo): one policy is held as is, several
/// are shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Policies {
    One(RateLimitPolicy),
    Many(Arc<[RateLimitPolicy]>),
}

impl Policies {
    /// The policies, in order; never empty.
    pub(crate) fn as_slice(&self) -> &[RateLimitPolicy] {
        match self {
            Policies::One(policy) => std::slice::from_ref(policy),
            Policies::Many(policies) => policies,
        }
    }
}
