//! Responses the layer writes itself, and the fields it adds to allowed responses.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::body::ResponseBody;
use super::info::RateLimitInfo;
use super::layer::Config;
use crate::coordination::rate_limit::{RateLimitDecision, RateLimitPolicy};
use crate::layer::headers;
use crate::layer::key::KeyError;

/// A response written by the layer, before it takes the inner body's type.
pub(crate) struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn new(status: StatusCode) -> Self {
        Answer {
            status,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    /// Returned if the future is polled after completing: a server error, never a panic.
    pub(crate) fn empty() -> Self {
        Answer::new(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// 429 for a rejected request.
    pub(crate) fn rejected(config: &Config, decision: &RateLimitDecision) -> Self {
        let mut answer = Answer::new(StatusCode::TOO_MANY_REQUESTS);
        let policies = config.limiter.policies();
        insert_fields(config, policies, decision, &mut answer.headers);
        if let Some(wait) = decision.retry_after() {
            answer
                .headers
                .insert(RETRY_AFTER, headers::retry_after(wait));
        }
        if config.problem_json {
            let detail = match decision.retry_after() {
                // The binding policy is one that rejected a request of 1 permit or more: it has
                // fewer permits left than asked for, every policy that admitted it at least as
                // many.
                Some(_) => format!(
                    "The \"{}\" rate limit is exhausted.",
                    binding(policies, decision).name()
                ),
                // The request costs more than the smallest quota.
                None => format!(
                    "The request costs more than the \"{}\" rate limit allows.",
                    policies
                        .iter()
                        .min_by_key(|policy| policy.quota())
                        .map_or("", |policy| policy.name())
                ),
            };
            answer.problem(&detail, decision.retry_after());
        }
        answer
    }

    /// 503 when the backend cannot decide and the layer fails closed.
    pub(crate) fn unavailable(config: &Config, retry_after: Duration) -> Self {
        let mut answer = Answer::new(StatusCode::SERVICE_UNAVAILABLE);
        answer
            .headers
            .insert(RETRY_AFTER, headers::retry_after(retry_after));
        if config.problem_json {
            answer.problem(
                "The rate limit cannot be checked right now.",
                Some(retry_after),
            );
        }
        answer
    }

    /// The answer to a request whose client key cannot be extracted.
    pub(crate) fn key_error(config: &Config, err: &KeyError) -> Self {
        if let Some(respond) = &config.key_error {
            let (parts, body) = respond(err).into_parts();
            return Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            };
        }
        let status = err.status();
        let mut answer = Answer::new(status);
        if status.is_server_error() {
            // The client cannot fix a server's configuration: log it, say little.
            tracing::error!(error = %err, "cannot derive the rate-limit key");
            answer.body = Bytes::from_static(b"rate limit key unavailable");
        } else {
            answer.body = Bytes::from(err.to_string());
        }
        answer.headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        answer
    }

    /// Adds the rate-limit fields to an allowed response.
    pub(crate) fn decorate(config: &Config, info: &RateLimitInfo, headers: &mut HeaderMap) {
        insert_fields(config, info.policies(), info.decision(), headers);
    }

    fn problem(&mut self, detail: &str, retry_after: Option<Duration>) {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let (content_type, body) = headers::problem_json(self.status, title, detail, retry_after);
        self.headers.insert(CONTENT_TYPE, content_type);
        self.body = Bytes::from(body);
    }

    pub(crate) fn into_response<B>(self) -> Response<ResponseBody<B>> {
        let mut response = Response::new(ResponseBody::full(self.body));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

/// `RateLimit-Policy` and `RateLimit` with one member per policy, and the legacy fields of the
/// binding policy when enabled.
fn insert_fields(
    config: &Config,
    policies: &[RateLimitPolicy],
    decision: &RateLimitDecision,
    fields: &mut HeaderMap,
) {
    config.fields.insert(fields, decision.policy_states());
    if config.legacy_headers {
        let index = decision.binding();
        if let (Some(policy), Some(state)) =
            (policies.get(index), decision.policy_states().get(index))
        {
            headers::insert_legacy_headers(fields, policy, state);
        }
    }
}

/// The policy whose numbers the decision's top-level accessors report.
fn binding<'a>(
    policies: &'a [RateLimitPolicy],
    decision: &RateLimitDecision,
) -> &'a RateLimitPolicy {
    policies.get(decision.binding()).unwrap_or(&policies[0])
}
