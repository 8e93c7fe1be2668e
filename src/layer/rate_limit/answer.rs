//! What the rate-limit layer answers itself, and the fields it adds to allowed responses.

use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{HeaderMap, Request, Response, StatusCode};

use super::check::Check;
use super::config::Config;
use super::info::{FailedOpen, RateLimitInfo};
use super::partition::PartitionTag;
use crate::coordination::circuit_breaker::Failure;
use crate::coordination::rate_limit::{RateLimitDecision, RateLimitPolicy, RateLimiter};
use crate::error::Error;
use crate::layer::admission::{Deciding, Decision, Grant, Refusal, ResponseBody};
use crate::layer::failure::Verdict;
use crate::layer::{Rejection, RejectionKind};
use crate::response::Answer;
use crate::response::headers;
use crate::telemetry::Decided;

/// What a request the layer let through carries.
pub(crate) enum Admitted {
    /// A granted decision: the handler reads it, the response shows it.
    Decided(Granted),
    /// No decision (the layer failed open): a marker, for the extractor's rejection.
    FailedOpen,
}

/// Behind several rate-limit layers, a request's extensions describe the innermost: each
/// layer replaces what an outer one put there, so a handler never reads an outer layer's
/// decision for an inner one that failed open.
impl Grant for Admitted {
    type Refusal = Refused;

    fn prepare<B>(&self, request: &mut Request<B>) {
        match self {
            Admitted::Decided(granted) => {
                request.extensions_mut().remove::<FailedOpen>();
                granted.prepare(request);
            }
            Admitted::FailedOpen => {
                let extensions = request.extensions_mut();
                extensions.remove::<RateLimitInfo>();
                extensions.insert(FailedOpen);
            }
        }
    }

    fn finish<B>(self, response: Response<B>) -> Response<ResponseBody<B>> {
        match self {
            Admitted::Decided(granted) => granted.finish(response),
            Admitted::FailedOpen => response.map(|body| ResponseBody::inner(body, None)),
        }
    }
}

/// A granted decision.
pub(crate) struct Granted {
    info: RateLimitInfo,
    config: Arc<Config>,
    partition: Option<PartitionTag>,
}

impl Granted {
    pub(crate) fn new(
        config: Arc<Config>,
        decision: RateLimitDecision,
        partition: Option<PartitionTag>,
    ) -> Self {
        Granted {
            info: RateLimitInfo::new(config.limiter.shared_policies(), decision, false),
            config,
            partition,
        }
    }

    /// A rejection let through in shadow mode.
    fn shadow(
        config: Arc<Config>,
        decision: RateLimitDecision,
        partition: Option<PartitionTag>,
    ) -> Self {
        Granted {
            info: RateLimitInfo::new(config.limiter.shared_policies(), decision, true),
            config,
            partition,
        }
    }
}

/// A rejection by the backend (or the deny cache, the hot-key tier, the queue): `429`, or
/// let through as a shadow rejection when the layer does not enforce this one; counted.
#[inline]
pub(crate) fn limited(
    config: Arc<Config>,
    decision: RateLimitDecision,
    check: Check,
) -> Decision<Admitted> {
    if super::shadow::enforces(config.enforced_share, config.shadow_switch.as_ref()) {
        config.metrics.record(Decided::Limited, check.clock);
        return Refused::limited(config, decision, check.partition);
    }
    config.metrics.record(Decided::ShadowLimited, check.clock);
    tracing::debug!(
        limit = config.limiter.name(),
        retry_after = ?decision.retry_after(),
        "shadow rejection: let through"
    );
    Decision::Admit(Admitted::Decided(Granted::shadow(
        config,
        decision,
        check.partition,
    )))
}

impl Granted {
    fn prepare<B>(&self, request: &mut Request<B>) {
        request.extensions_mut().insert(self.info.clone());
    }

    fn finish<B>(self, response: Response<B>) -> Response<ResponseBody<B>> {
        let (mut parts, body) = response.into_parts();
        let decision = self.info.decision();
        let low = self.config.fields_at_most.is_none_or(|at_most| {
            let index = enforced_binding(self.info.policies(), decision);
            decision
                .policy_states()
                .get(index)
                .is_none_or(|state| state.remaining() <= at_most)
        });
        // A layer in shadow mode lets its rejection through without the fields: its limit
        // is on trial, and clients that follow them would hold back for it (as the fields
        // of a stack leave out its shadow policies, whose decision is granted).
        if low && decision.is_granted() {
            insert_fields(
                &self.config,
                self.info.policies(),
                decision,
                self.partition,
                &mut parts.headers,
            );
        }
        Response::from_parts(parts, ResponseBody::inner(body, None))
    }
}

/// Why the layer refused a request: written into its answer once the request is at hand.
pub(crate) struct Refused {
    config: Arc<Config>,
    why: Why,
}

enum Why {
    /// The limit: 429 with the decision's fields.
    Limited(RateLimitDecision, Option<PartitionTag>),
    /// No decision to go by and the failure policy fails closed (or the fail-open fallback
    /// could not count the request): 503.
    Unavailable {
        retry_after: Duration,
        error: Option<Error>,
    },
}

impl Refused {
    /// 429 for `decision`, a rejection.
    #[inline]
    pub(crate) fn limited(
        config: Arc<Config>,
        decision: RateLimitDecision,
        partition: Option<PartitionTag>,
    ) -> Decision<Admitted> {
        Decision::Refuse(Refused {
            config,
            why: Why::Limited(decision, partition),
        })
    }

    fn unavailable(
        config: Arc<Config>,
        retry_after: Duration,
        error: Option<Error>,
    ) -> Decision<Admitted> {
        Decision::Refuse(Refused {
            config,
            why: Why::Unavailable { retry_after, error },
        })
    }
}

impl Refusal for Refused {
    fn answer(self, request: &Parts) -> Answer {
        let config = &self.config;
        match self.why {
            Why::Limited(decision, partition) => rejected(config, &decision, partition, request),
            Why::Unavailable { retry_after, error } => {
                config
                    .responses
                    .outage("rate limit", retry_after, error.as_ref(), Some(request))
            }
        }
    }
}

/// 429 for a rejected request, the application's hook's if it has one.
fn rejected(
    config: &Config,
    decision: &RateLimitDecision,
    partition: Option<PartitionTag>,
    request: &Parts,
) -> Answer {
    let policies = config.limiter.policies();
    let detail = || match decision.retry_after() {
        // The binding policy is one that rejected a request of 1 permit or more: it has fewer
        // permits left than asked for, every policy that admitted it at least as many.
        Some(_) => format!(
            "The \"{}\" rate limit is exhausted.",
            binding(policies, decision).name()
        ),
        // The request costs more than the smallest quota.
        None => format!(
            "The request costs more than the \"{}\" rate limit allows.",
            policies
                .iter()
                .filter(|policy| !policy.is_shadow())
                .min_by_key(|policy| policy.quota())
                .map_or("", |policy| policy.name())
        ),
    };
    // The enforced policies with nothing left, the binding one at least.
    let violated = || {
        let binding = binding(policies, decision).name();
        policies
            .iter()
            .zip(decision.policy_states())
            .filter(|(policy, state)| {
                !policy.is_shadow() && (state.remaining() == 0 || policy.name() == binding)
            })
            .map(|(policy, _)| policy.name().to_owned())
            .collect()
    };
    let rejection = Rejection::new(
        RejectionKind::RateLimited,
        StatusCode::TOO_MANY_REQUESTS,
        decision.retry_after(),
        &detail,
    )
    .with_decision(decision)
    .with_violated(&violated);
    let mut answer = config.responses.refusal(&rejection, Some(request));
    insert_fields(config, policies, decision, partition, answer.headers_mut());
    answer
}

/// What a request's decision settles on: an answer (or a call) now, or a decision to wait
/// for (the backend's, or the fail-open fallback's: boxed apart, so that a layer failing
/// closed carries no room for the fallback in every decision's future).
pub(crate) enum Settled {
    Now(Decision<Admitted>),
    Later(Deciding<Admitted>),
}

/// The failure policy's answer when the backend gave no decision: the fail-open fallback's
/// decision for `key` (admitted, or 429), or 503.
pub(crate) fn failed(
    config: Arc<Config>,
    failure: Failure,
    key: Option<Vec<u8>>,
    cost: u64,
    check: Check,
) -> Settled {
    match config
        .failure
        .judge(&failure, "rate limit", &config.outages)
    {
        Verdict::Pass => match (config.fallback.clone(), key) {
            (Some(fallback), Some(key)) => {
                Settled::Later(Box::pin(fall_back(config, fallback, key, cost, check)))
            }
            _ => {
                config.metrics.record(Decided::FailedOpen, check.clock);
                Settled::Now(Decision::Admit(Admitted::FailedOpen))
            }
        },
        Verdict::Unavailable(retry_after) => {
            config.metrics.record(Decided::FailedClosed, check.clock);
            Settled::Now(Refused::unavailable(
                config,
                retry_after,
                failure.into_error(),
            ))
        }
    }
}

/// The fail-open fallback's decision for `key`, counted as failing open (or closed, when
/// the fallback has no room).
async fn fall_back(
    config: Arc<Config>,
    fallback: RateLimiter,
    key: Vec<u8>,
    cost: u64,
    check: Check,
) -> Decision<Admitted> {
    // A share of a quota may be smaller than a cost the real one takes: such a request is
    // counted as the whole share rather than refused for the whole outage.
    let smallest = fallback
        .policies()
        .iter()
        .filter(|policy| !policy.is_shadow())
        .map(|policy| policy.quota())
        .min();
    let cost = smallest.map_or(cost, |smallest| cost.min(smallest));
    let decided = fallback.try_acquire(&key, cost).await;
    let counted = if decided.is_ok() {
        Decided::FailedOpen
    } else {
        Decided::FailedClosed
    };
    config.metrics.record(counted, check.clock);
    match decided {
        Ok(local) if local.is_granted() => Decision::Admit(Admitted::FailedOpen),
        // Shadow mode lets the fallback's rejections through too: no decision of the
        // backend's to show, so none in the request.
        Ok(_) if !super::shadow::enforces(config.enforced_share, config.shadow_switch.as_ref()) => {
            Decision::Admit(Admitted::FailedOpen)
        }
        Ok(local) => Refused::limited(config, local, check.partition),
        // The fallback could not count the request (its store full of a policy whose
        // state it cannot evict, an invalid cost): no budget to admit from. A flood of
        // distinct keys is not this: their counts evict one another (`fallback_keys`).
        Err(err) => {
            let retry_after = crate::retry_after::at_least_a_second(err.retry_after());
            Refused::unavailable(config, retry_after, Some(err))
        }
    }
}

/// `RateLimit-Policy` and `RateLimit` with one member per policy, and the legacy fields of the
/// binding policy when enabled.
fn insert_fields(
    config: &Config,
    policies: &[RateLimitPolicy],
    decision: &RateLimitDecision,
    partition: Option<PartitionTag>,
    fields: &mut HeaderMap,
) {
    config.fields.insert(
        fields,
        decision.policy_states(),
        partition.as_ref().map(PartitionTag::as_bytes),
    );
    if config.legacy_headers {
        let index = enforced_binding(policies, decision);
        if let (Some(policy), Some(state)) =
            (policies.get(index), decision.policy_states().get(index))
        {
            headers::insert_legacy_headers(fields, policy, state);
        }
    }
}

/// The binding policy among the enforced ones (shadow policies are not shown to clients):
/// the fewest permits left, and on a tie the longest reset; the decision's own binding
/// policy when every one is a shadow.
pub(super) fn enforced_binding(
    policies: &[RateLimitPolicy],
    decision: &RateLimitDecision,
) -> usize {
    decision
        .binding_among(|index| {
            policies
                .get(index)
                .is_some_and(|policy| !policy.is_shadow())
        })
        .unwrap_or_else(|| decision.binding())
}

/// The enforced policy whose numbers the answer reports (see [`enforced_binding`]).
fn binding<'a>(
    policies: &'a [RateLimitPolicy],
    decision: &RateLimitDecision,
) -> &'a RateLimitPolicy {
    policies
        .get(enforced_binding(policies, decision))
        .unwrap_or(&policies[0])
}
