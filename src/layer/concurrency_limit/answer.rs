//! What the concurrency-limit layer answers itself, and what an admitted request holds.

use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{Request, Response, StatusCode};

use super::config::Config;
use super::fallback::Shortage;
use super::guard::StreamGuard;
use crate::coordination::circuit_breaker::Failure;
use crate::error::Error;
use crate::layer::admission::{Decision, Grant, Refusal, ResponseBody};
use crate::layer::failure::Verdict;
use crate::layer::{Rejection, RejectionKind};
use crate::response::Answer;
use crate::response::headers::RATELIMIT_POLICY;
use crate::telemetry::{Clock, Decided};

/// The permit is held by the response body, until it ends.
impl Grant for StreamGuard {
    type Refusal = Refused;

    fn prepare<B>(&self, _request: &mut Request<B>) {}

    fn finish<B>(self, response: Response<B>) -> Response<ResponseBody<B>> {
        response.map(|body| ResponseBody::inner(body, Some(Box::new(self))))
    }
}

/// Why the layer refused a request: written into its answer once the request is at hand.
pub(crate) struct Refused {
    config: Arc<Config>,
    why: Why,
}

enum Why {
    /// 429: every slot is taken; `retry_after` is when the earliest permit would expire.
    Full { retry_after: Option<Duration> },
    /// 503: no permit to go by and the failure policy fails closed.
    Unavailable {
        retry_after: Duration,
        error: Option<Error>,
    },
}

impl Refused {
    /// 429: every slot is taken.
    pub(crate) fn full(
        config: Arc<Config>,
        retry_after: Option<Duration>,
    ) -> Decision<StreamGuard> {
        Decision::Refuse(Refused {
            config,
            why: Why::Full { retry_after },
        })
    }
}

impl Refusal for Refused {
    fn answer(self, request: &Parts) -> Answer {
        let config = &self.config;
        match self.why {
            Why::Full { retry_after } => full(config, retry_after, request),
            Why::Unavailable { retry_after, error } => config.responses.outage(
                "concurrency limit",
                retry_after,
                error.as_ref(),
                Some(request),
            ),
        }
    }
}

/// 429: every slot is taken. `retry_after` is when the earliest permit would expire.
fn full(config: &Config, retry_after: Option<Duration>, request: &Parts) -> Answer {
    // A slot may free sooner (a release), never later than this unless renewed.
    let wait = crate::retry_after::at_least_a_second(retry_after);
    let detail = || {
        format!(
            "Every slot of the \"{}\" concurrency limit is taken.",
            config.name
        )
    };
    // Which of its semaphores is full is not known here: the limit's name stands for them.
    let violated = || vec![config.name.clone()];
    let answer = config.responses.refusal(
        &Rejection::new(
            RejectionKind::ConcurrencyLimited,
            StatusCode::TOO_MANY_REQUESTS,
            Some(wait),
            &detail,
        )
        .with_violated(&violated),
        Some(request),
    );
    match &config.policy_field {
        Some(policy) => answer.header(RATELIMIT_POLICY, policy.clone()),
        None => answer,
    }
}

/// What the failure policy makes of a request for `key` that got no permit from the
/// backend: a worker-local permit (failing open), or 503; 429 only when the key (or the
/// process) holds its capacity locally.
pub(crate) fn failed(
    config: Arc<Config>,
    key: &[u8],
    failure: Failure,
    clock: Clock,
) -> Decision<StreamGuard> {
    let retry_after = match config
        .failure
        .judge(&failure, "concurrency limit", &config.outages)
    {
        Verdict::Pass => match config.local.take(key) {
            Ok(local) => {
                config.metrics.record(Decided::FailedOpen, clock);
                return Decision::Admit(StreamGuard::local(local, config.max_hold));
            }
            Err(Shortage::Full) => {
                config.metrics.record(Decided::FailedOpen, clock);
                tracing::debug!(reason = %failure, "every local permit of the concurrency limit is taken");
                return Refused::full(config, None);
            }
            // The outage's answer, never the client's fault.
            Err(Shortage::TooManyKeys) => {
                tracing::debug!(reason = %failure, "the concurrency limit's fallback tracks as many client keys as it may");
                crate::retry_after::at_least_a_second(None)
            }
        },
        Verdict::Unavailable(retry_after) => retry_after,
    };
    config.metrics.record(Decided::FailedClosed, clock);
    Decision::Refuse(Refused {
        config,
        why: Why::Unavailable {
            retry_after,
            error: failure.into_error(),
        },
    })
}
