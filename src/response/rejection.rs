//! What a layer or the `Lease` extractor refuses a request with, before it becomes a
//! response: what an application's own answers are made from, the same for all of them.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Response, StatusCode};

use crate::coordination::rate_limit::RateLimitDecision;
use crate::error::Error;
use crate::layer::key::KeyError;

/// An application's own answer to a [`Rejection`] of a request: `Some` response, or `None`
/// for the crate's. Both layers and the `Lease` extractor take the same function.
pub(crate) type RejectionFn =
    dyn Fn(&Rejection<'_>, &Parts) -> Option<Response<Bytes>> + Send + Sync;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionKind {
    /// A rate limit is exhausted, or the request costs more than it allows: `429`.
    RateLimited,
    /// A concurrency limit is full: `429`.
    ConcurrencyLimited,
    /// The lease is held by another request: `409`.
    LeaseHeld,
    /// The backend gave no decision (it is unavailable, refused, or took too long) and no
    /// request may pass without one: `503`.
    Unavailable,
    /// No client key, or no lease name, can be derived from the request: the
    /// [`KeyError`]'s status (`400`, or `500` for a server set up without peer addresses).
    InvalidKey,
    /// The application asked for something that cannot be done (a lease or permit request
    /// with a zero lease, timeout or capacity, or options that cannot be kept): `500`,
    /// without `Retry-After`, since trying again changes nothing.
    Misconfigured,
}

/// A request refused by a rate-limit or concurrency-limit layer or by the
/// [`Lease`](crate::extract::Lease) extractor, as an application's own answer sees it: its
/// kind, the status and `Retry-After` the crate would answer with, a sentence saying why,
/// and what it came from.
///
/// The crate answers with the status and `Retry-After` alone (problem+json when a layer has
/// it on), and with one line of text for a key error. An application that wants its own
/// bodies gives one function, `Fn(&Rejection, &Parts) -> Option<Response<Bytes>>` (it sees
/// the refused request's parts; `None` keeps the crate's answer), to every place that
/// refuses: [`RedisRateLimitLayer::rejection_response`],
/// [`RedisConcurrencyLimitLayer::rejection_response`] and
/// [`LeaseSpec::rejection_response`].
/// A layer then adds `Retry-After` when the response has none, and the rate-limit layer its
/// `RateLimit` fields.
///
/// [`RedisRateLimitLayer::rejection_response`]: crate::layer::rate_limit::RedisRateLimitLayer::rejection_response
/// [`RedisConcurrencyLimitLayer::rejection_response`]: crate::layer::concurrency_limit::RedisConcurrencyLimitLayer::rejection_response
/// [`LeaseSpec::rejection_response`]: crate::extract::LeaseSpec::rejection_response
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use axum::body::Bytes;
/// use axum::http::Response;
/// use axum::http::request::Parts;
/// use leasehold::Coordination;
/// use leasehold::layer::{RedisRateLimitLayer, Rejection, RejectionKind};
///
/// /// JSON bodies for the refusals clients meet, for clients that take JSON; the crate's
/// /// answers for the rest.
/// fn json(rejection: &Rejection<'_>, request: &Parts) -> Option<Response<Bytes>> {
///     let accept = request.headers.get("accept")?.to_str().ok()?;
///     if !accept.contains("json") {
///         return None;
///     }
///     let code = match rejection.kind() {
///         RejectionKind::RateLimited => "slow_down",
///         RejectionKind::LeaseHeld => "busy",
///         _ => return None,
///     };
///     // serde_json escapes the message: a detail may hold quotes.
///     let body = serde_json::json!({ "error": code, "message": rejection.detail() }).to_string();
///     Response::builder()
///         .status(rejection.status())
///         .header("content-type", "application/json")
///         .body(Bytes::from(body))
///         .ok()
/// }
///
/// # fn main() -> leasehold::Result<()> {
/// let layer = RedisRateLimitLayer::fixed_window(
///     &Coordination::memory(),
///     "api",
///     100,
///     Duration::from_secs(60),
/// )?
/// .rejection_response(json);
/// # let _ = layer;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct Rejection<'a> {
    kind: RejectionKind,
    status: StatusCode,
    retry_after: Option<Duration>,
    /// Formatted only when asked: a flood of rejections formats nothing.
    detail: &'a (dyn Fn() -> String + 'a),
    key_error: Option<&'a KeyError>,
    error: Option<&'a Error>,
    decision: Option<&'a RateLimitDecision>,
    /// The names of the policies exceeded, listed only when asked.
    violated: &'a (dyn Fn() -> Vec<String> + 'a),
}

/// No policy named.
fn none_violated() -> Vec<String> {
    Vec::new()
}

impl<'a> Rejection<'a> {
    pub(crate) fn new(
        kind: RejectionKind,
        status: StatusCode,
        retry_after: Option<Duration>,
        detail: &'a (dyn Fn() -> String + 'a),
    ) -> Self {
        Rejection {
            kind,
            status,
            retry_after,
            detail,
            key_error: None,
            error: None,
            decision: None,
            violated: &none_violated,
        }
    }

    /// The rejection of a request whose key (or lease name) cannot be derived.
    pub(crate) fn invalid_key(err: &'a KeyError, detail: &'a (dyn Fn() -> String + 'a)) -> Self {
        Rejection {
            key_error: Some(err),
            ..Rejection::new(RejectionKind::InvalidKey, err.status(), None, detail)
        }
    }

    pub(crate) fn with_error(mut self, error: Option<&'a Error>) -> Self {
        self.error = error;
        self
    }

    pub(crate) fn with_decision(mut self, decision: &'a RateLimitDecision) -> Self {
        self.decision = Some(decision);
        self
    }

    pub(crate) fn with_violated(mut self, violated: &'a (dyn Fn() -> Vec<String> + 'a)) -> Self {
        self.violated = violated;
        self
    }

    /// Why the request was refused.
    pub fn kind(&self) -> RejectionKind {
        self.kind
    }

    /// The status the crate answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// When the request may succeed if sent again (the crate's `Retry-After`, before
    /// rounding up to whole seconds); `None` when waiting does not help (a request that
    /// costs more than the limit, a key error).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// One sentence saying why, for a client: the crate's problem+json `detail`, or a key
    /// error's message (for a missing peer address, what to change in the server's set-up).
    pub fn detail(&self) -> String {
        (self.detail)()
    }

    /// The key error, for [`RejectionKind::InvalidKey`].
    pub fn key_error(&self) -> Option<&KeyError> {
        self.key_error
    }

    /// The backend's error, for [`RejectionKind::Unavailable`] when the backend answered
    /// (`None` for a timeout or an open circuit breaker).
    pub fn error(&self) -> Option<&Error> {
        self.error
    }

    /// The names of the policies the request exceeded (the draft's `violated-policies`): a
    /// full rate limit's enforced policies with nothing left (the binding one at least), a
    /// full concurrency limit's name; empty otherwise.
    pub fn violated_policies(&self) -> Vec<String> {
        (self.violated)()
    }

    /// The rate-limit decision, for [`RejectionKind::RateLimited`].
    pub fn rate_limit(&self) -> Option<&RateLimitDecision> {
        self.decision
    }
}

impl fmt::Debug for Rejection<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejection")
            .field("kind", &self.kind)
            .field("status", &self.status)
            .field("retry_after", &self.retry_after)
            .field("detail", &self.detail())
            .finish_non_exhaustive()
    }
}
