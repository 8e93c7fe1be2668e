//! Responses the concurrency-limit layer writes itself.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::body::GuardedBody;
use super::layer::Config;
use crate::layer::headers::{self, RATELIMIT_POLICY};
use crate::layer::key::KeyError;

/// A response written by the layer, before it takes the inner body's type.
pub(crate) struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    /// 429: every slot is taken. `retry_after` is when the earliest permit would expire.
    pub(crate) fn full(config: &Config, retry_after: Option<Duration>) -> Self {
        let mut answer = Answer::text(
            StatusCode::TOO_MANY_REQUESTS,
            "too many requests in flight\n",
        );
        if let Some(policy) = &config.policy_field {
            answer.headers.insert(RATELIMIT_POLICY, policy.clone());
        }
        // A slot may free sooner (a release), never later than this unless renewed; at
        // least a second, since `Retry-After: 0` invites an immediate retry.
        let wait = retry_after.unwrap_or(Duration::from_secs(1));
        answer.headers.insert(
            RETRY_AFTER,
            headers::retry_after(wait.max(Duration::from_secs(1))),
        );
        answer
    }

    /// 503: the backend could not grant a permit and the layer fails closed.
    pub(crate) fn unavailable(retry_after: Duration) -> Self {
        let mut answer = Answer::text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the concurrency limit cannot be checked right now\n",
        );
        answer
            .headers
            .insert(RETRY_AFTER, headers::retry_after(retry_after));
        answer
    }

    /// The answer to a request whose client key cannot be extracted.
    pub(crate) fn key_error(err: &KeyError) -> Self {
        let status = err.status();
        if status.is_server_error() {
            // The client cannot fix a server's configuration: log it, say little.
            tracing::error!(error = %err, "cannot derive the concurrency-limit key");
            Answer::text(status, "concurrency limit key unavailable\n")
        } else {
            Answer::text(status, err.to_string())
        }
    }

    /// Returned if the future is polled after completing: a server error, never a panic.
    pub(crate) fn empty() -> Self {
        Answer::text(StatusCode::INTERNAL_SERVER_ERROR, "")
    }

    fn text(status: StatusCode, body: impl Into<Bytes>) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        Answer {
            status,
            headers,
            body: body.into(),
        }
    }

    pub(crate) fn into_response<B>(self) -> Response<GuardedBody<B>> {
        let mut response = Response::new(GuardedBody::full(self.body));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}
