//! The responses the layers and the extractors write themselves, built in one place beside
//! both: status, `Retry-After`, a text or problem+json body, the rate-limit fields
//! ([`headers`]), the application's own answers ([`Rejection`], public as
//! [`layer::Rejection`](crate::layer::Rejection)), and the answer to a request whose key cannot
//! be derived.

pub(crate) mod headers;
mod rejection;

pub(crate) use rejection::RejectionFn;
pub use rejection::{Rejection, RejectionKind};

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use crate::error::Error;

use crate::layer::key::KeyError;

use crate::telemetry::Throttle;

/// How a layer words the answers it writes, the same options on every layer.
#[derive(Clone, Default)]
pub(crate) struct Responses {
    /// Bodies of 429 and 503 as RFC 9457 problem details (`application/problem+json`).
    pub(crate) problem_json: bool,
    /// The application's own answers.
    pub(crate) custom: Option<Arc<RejectionFn>>,
}

impl Responses {
    /// A refusal (429) or an outage (503): the application's answer if it has one, else the
    /// crate's. Its status, `Retry-After` and the limit's fields say everything, so it has no
    /// body, unless problem+json is on (then an RFC 9457 problem saying the rejection's
    /// detail). Only answers the client must act on (a key error) carry text. The detail is
    /// formatted only when sent: a flood of rejections costs no formatting.
    ///
    /// The hook sees the request, so it is asked only where the request is at hand: a layer
    /// keeps a refusal as data (its admission's `Refusal`) until it is.
    pub(crate) fn refusal(&self, rejection: &Rejection<'_>, request: Option<&Parts>) -> Answer {
        debug_assert!(
            request.is_some() || !self.hooked(),
            "a refusal written without its request skips the application's hook"
        );
        let retry_after = rejection.retry_after();
        if let Some(answer) = request.and_then(|request| self.custom(rejection, request)) {
            return answer;
        }
        let mut answer = if self.problem_json {
            let problem = match rejection.kind() {
                RejectionKind::RateLimited | RejectionKind::ConcurrencyLimited => {
                    Some(headers::QUOTA_EXCEEDED)
                }
                RejectionKind::Unavailable => Some(headers::TEMPORARY_REDUCED_CAPACITY),
                _ => None,
            };
            Answer::new(rejection.status()).problem(
                problem,
                &rejection.detail(),
                &rejection.violated_policies(),
                retry_after,
            )
        } else {
            Answer::new(rejection.status())
        };
        if let Some(wait) = retry_after {
            answer = answer.header(RETRY_AFTER, headers::retry_after(wait));
        }
        answer
    }

    /// The answer to a request whose client key cannot be derived: the application's own, or
    /// the key error's status with its message, as one line of text. A server error (no peer
    /// address) starts with `server_text`, is logged, and says what to change as well: it is
    /// met on the first request, by whoever is setting the service up, and names no secret.
    pub(crate) fn key_error(
        &self,
        err: &KeyError,
        server_text: &str,
        request: Option<&Parts>,
    ) -> Answer {
        let status = err.status();
        let detail = || key_error_detail(err, server_text);
        if status.is_server_error() {
            log_key_error(err, server_text);
        }
        let rejection = Rejection::invalid_key(err, &detail);
        request
            .and_then(|request| self.custom(&rejection, request))
            .unwrap_or_else(|| Answer::line(status, detail()))
    }

    /// 503 when the backend gave no decision for `limit` ("rate limit") and no request may
    /// pass without one.
    pub(crate) fn outage(
        &self,
        limit: &'static str,
        retry_after: Duration,
        error: Option<&Error>,
        request: Option<&Parts>,
    ) -> Answer {
        let detail = || format!("The {limit} cannot be checked right now.");
        let rejection = Rejection::new(
            RejectionKind::Unavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            Some(retry_after),
            &detail,
        )
        .with_error(error);
        self.refusal(&rejection, request)
    }

    /// The application's answer, with the rejection's `Retry-After` when it sets none.
    fn custom(&self, rejection: &Rejection<'_>, request: &Parts) -> Option<Answer> {
        let response = (self.custom.as_ref()?)(rejection, request)?;
        Some(Answer::from_response(response, rejection.retry_after()))
    }

    /// Whether the application answers for itself.
    pub(crate) fn hooked(&self) -> bool {
        self.custom.is_some()
    }
}

/// The sentence of a key error's answer: its message, after `server_text` ("rate limit key
/// unavailable") when it is the server's fault.
pub(crate) fn key_error_detail(err: &KeyError, server_text: &str) -> String {
    if err.status().is_server_error() {
        format!("{server_text}: {err}")
    } else {
        err.to_string()
    }
}

/// Logs a key error that is the server's fault, which whoever runs the service must fix:
/// at `ERROR` at most every ten seconds for the whole process, layers and extractors alike
/// (every request meets it), the rest at `DEBUG`.
pub(crate) fn log_key_error(err: &KeyError, server_text: &str) {
    static TOLD: Throttle = Throttle::every_secs(10);
    if TOLD.due() {
        tracing::error!(
            error = %err,
            "cannot derive the request's key ({server_text}; told at most every 10 s, each one at DEBUG)"
        );
    } else {
        tracing::debug!(error = %err, "cannot derive the request's key ({server_text})");
    }
}

/// A response written by a layer, before it takes the inner body's type.
#[derive(Debug)]
pub(crate) struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    /// An empty answer.
    pub(crate) fn new(status: StatusCode) -> Self {
        Answer {
            status,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    /// A `text/plain` answer of one line: `line` and a newline, as every text answer of the
    /// crate's layers is written.
    pub(crate) fn line(status: StatusCode, line: impl Into<String>) -> Self {
        let mut answer = Answer::new(status);
        answer.headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        let mut line = line.into();
        line.push('\n');
        answer.body = Bytes::from(line);
        answer
    }

    /// An application's response, given `Retry-After` from `retry_after` unless it has one.
    pub(crate) fn from_response(response: Response<Bytes>, retry_after: Option<Duration>) -> Self {
        let (parts, body) = response.into_parts();
        let mut answer = Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        };
        if let Some(wait) = retry_after {
            answer
                .headers
                .entry(RETRY_AFTER)
                .or_insert_with(|| headers::retry_after(wait));
        }
        answer
    }

    /// Returned if a future is polled after completing: a server error, never a panic.
    pub(crate) fn polled_after_completion() -> Self {
        Answer::new(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// Sets a header.
    pub(crate) fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// The headers, for fields computed elsewhere (the rate-limit fields).
    pub(crate) fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.headers
    }

    /// An RFC 9457 problem details body: of `problem`'s type, else titled by the status.
    fn problem(
        mut self,
        problem: Option<headers::ProblemType>,
        detail: &str,
        violated: &[String],
        retry_after: Option<Duration>,
    ) -> Self {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let (content_type, body) =
            headers::problem_json(self.status, title, problem, detail, violated, retry_after);
        self.headers.insert(CONTENT_TYPE, content_type);
        self.body = Bytes::from(body);
        self
    }

    /// The answer's status, headers and body.
    pub(crate) fn into_parts(self) -> (StatusCode, HeaderMap, Bytes) {
        (self.status, self.headers, self.body)
    }
}
