//! The decision a handler can read.

use crate::coordination::rate_limit::{Policies, RateLimitDecision, RateLimitPolicy};

/// The rate-limit decision for the current request, put in the request's extensions by
/// [`RateLimit`](super::RateLimit) before it calls the inner service.
///
/// A limiter with several policies ([`Stacked`](crate::coordination::rate_limit::Stacked))
/// shows them all: [`policies`](Self::policies) pairs, in order, with the decision's
/// [`policy_states`](RateLimitDecision::policy_states). [`policy`](Self::policy) is the
/// binding one, whose numbers the decision's [`remaining`](RateLimitDecision::remaining),
/// [`limit`](RateLimitDecision::limit) and [`reset_after`](RateLimitDecision::reset_after)
/// report.
///
/// With the `axum` feature it is also an extractor; without it, read it from
/// `request.extensions()`. When the backend failed and the layer is set to fail open, no
/// decision exists and the extension is absent. Behind several rate-limit layers it is the
/// innermost layer's decision (the one nearest the handler), and absent when that one failed
/// open, whatever the outer ones decided.
///
/// # Example
///
/// ```
/// # #[cfg(feature = "axum")]
/// # mod example {
/// use leasehold::layer::rate_limit::RateLimitInfo;
///
/// async fn handler(info: RateLimitInfo) -> String {
///     format!("{} of {} left", info.decision().remaining(), info.policy().quota())
/// }
///
/// async fn every_policy(info: RateLimitInfo) -> String {
///     info.policies()
///         .iter()
///         .zip(info.decision().policy_states())
///         .map(|(policy, state)| format!("{}: {} left\n", policy.name(), state.remaining()))
///         .collect()
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RateLimitInfo {
    policies: Policies,
    decision: RateLimitDecision,
    shadow: bool,
}

impl RateLimitInfo {
    pub(crate) fn new(policies: Policies, decision: RateLimitDecision, shadow: bool) -> Self {
        RateLimitInfo {
            policies,
            decision,
            shadow,
        }
    }

    /// Whether the limit rejected this request and it went through all the same: the layer
    /// is in [shadow mode](super::RedisRateLimitLayer::shadow) (the
    /// [decision](Self::decision) is the rejection: not granted, with its retry time), or a
    /// stacked limiter's [shadow policy](crate::coordination::rate_limit::RateLimitPolicy::shadow)
    /// alone would have rejected it (the decision is granted; that policy did not count it).
    pub fn is_shadow_rejection(&self) -> bool {
        self.shadow || self.decision.is_shadow_rejection()
    }

    /// The binding policy: for a single-policy limiter its policy, for a stacked one the
    /// enforced policy with the fewest permits left (see [`RateLimitDecision`]): the one the
    /// answer's fields and problem body name, never a shadow policy unless every one is.
    pub fn policy(&self) -> &RateLimitPolicy {
        let policies = self.policies.as_slice();
        policies
            .get(super::answer::enforced_binding(policies, &self.decision))
            .unwrap_or(&policies[0])
    }

    /// Every policy of the limiter, in the order of the decision's
    /// [`policy_states`](RateLimitDecision::policy_states).
    pub fn policies(&self) -> &[RateLimitPolicy] {
        self.policies.as_slice()
    }

    /// The decision for this request.
    pub fn decision(&self) -> &RateLimitDecision {
        &self.decision
    }
}

/// Put in a request's extensions when the layer let it through without a decision (it
/// failed open), so that the extractor's rejection can say so.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FailedOpen;

#[cfg(feature = "axum")]
mod extract {
    use axum::extract::FromRequestParts;
    use axum::response::{IntoResponse, Response};
    use http::StatusCode;
    use http::request::Parts;

    use super::RateLimitInfo;

    /// Rejection of the [`RateLimitInfo`] extractor: the route is not behind a rate-limit
    /// layer, or the layer failed open (the backend was unavailable and the request passed
    /// without a decision). Answers `500 Internal Server Error`, since it is a server
    /// configuration problem, not the client's; the message says which of the two. A handler
    /// behind a layer that may fail open takes `Option<RateLimitInfo>` instead.
    #[derive(Debug, Clone, Copy, Default)]
    #[non_exhaustive]
    pub struct MissingRateLimitInfo {
        failed_open: bool,
    }

    impl MissingRateLimitInfo {
        /// Whether a rate-limit layer let the request through without a decision (it failed
        /// open), rather than no layer being in front of the route.
        pub fn failed_open(&self) -> bool {
            self.failed_open
        }
    }

    impl std::fmt::Display for MissingRateLimitInfo {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            if self.failed_open {
                f.write_str(
                    "no rate-limit decision for this request: the backend was unavailable and \
                     the layer failed open; take `Option<RateLimitInfo>` in handlers behind a \
                     layer that may fail open",
                )
            } else {
                f.write_str(
                    "no rate-limit decision for this request: is the route behind a RateLimit \
                     layer?",
                )
            }
        }
    }

    impl std::error::Error for MissingRateLimitInfo {}

    /// A `500` whose body says only that: the explanation (which would tell a client that the
    /// limits are off while the backend is away) goes to the log, at `ERROR` at most once
    /// every ten seconds in the process (the rest at `DEBUG`): an outage failing open meets
    /// it on every request.
    impl IntoResponse for MissingRateLimitInfo {
        fn into_response(self) -> Response {
            static TOLD: crate::telemetry::Throttle = crate::telemetry::Throttle::every_secs(10);
            if TOLD.due() {
                tracing::error!("{self}");
            } else {
                tracing::debug!("{self}");
            }
            (StatusCode::INTERNAL_SERVER_ERROR, "internal server error\n").into_response()
        }
    }

    impl<S: Send + Sync> FromRequestParts<S> for RateLimitInfo {
        type Rejection = MissingRateLimitInfo;

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &S,
        ) -> Result<Self, Self::Rejection> {
            parts
                .extensions
                .get::<RateLimitInfo>()
                .cloned()
                .ok_or(MissingRateLimitInfo {
                    failed_open: parts.extensions.get::<super::FailedOpen>().is_some(),
                })
        }
    }

    /// `Option<RateLimitInfo>`: `None` where no decision was made (for example when the layer
    /// failed open).
    impl<S: Send + Sync> axum::extract::OptionalFromRequestParts<S> for RateLimitInfo {
        type Rejection = std::convert::Infallible;

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &S,
        ) -> Result<Option<Self>, Self::Rejection> {
            Ok(parts.extensions.get::<RateLimitInfo>().cloned())
        }
    }
}

#[cfg(feature = "axum")]
pub use extract::MissingRateLimitInfo;
