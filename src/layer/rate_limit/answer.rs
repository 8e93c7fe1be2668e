//! Responses the layer writes itself, and the fields it adds to allowed responses.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::body::ResponseBody;
use super::info::RateLimitInfo;
use super::layer::Config;
use crate::coordination::rate_limit::RateLimitDecision;
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
        let policy = config.limiter.policy();
        headers::insert_rate_limit_headers(&mut answer.headers, &[(policy, decision)]);
        if config.legacy_headers {
            headers::insert_legacy_headers(&mut answer.headers, policy, decision);
        }
        if let Some(wait) = decision.retry_after() {
            answer
                .headers
                .insert(RETRY_AFTER, headers::retry_after(wait));
        }
        if config.problem_json {
            let detail = match decision.retry_after() {
                Some(_) => format!("The \"{}\" rate limit is exhausted.", policy.name()),
                None => format!(
                    "The request costs more than the \"{}\" rate limit allows.",
                    policy.name()
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
        headers::insert_rate_limit_headers(headers, &[(info.policy(), info.decision())]);
        if config.legacy_headers {
            headers::insert_legacy_headers(headers, info.policy(), info.decision());
        }
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
