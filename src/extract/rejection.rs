//! Why an extractor could not take what a request needs, as an HTTP answer.

use std::fmt;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use http::request::Parts;

use crate::error::{Error, ErrorKind};
use crate::layer::key::KeyError;
use crate::layer::{Rejection, RejectionKind};
use crate::response::{Answer, Responses, key_error_detail, log_key_error};

/// The application's own answer to a rejection: a spec's `rejection_response`.
pub(super) type OwnAnswer = fn(&Rejection<'_>, &Parts) -> Option<Response<Bytes>>;

/// What the answer to a lease name that is the server's fault starts with.
const LEASE_NAME_UNAVAILABLE: &str = "lease name unavailable";

/// Why a [`Lease`](super::Lease), [`ReadLease`](super::ReadLease),
/// [`WriteLease`](super::WriteLease) or [`Permit`](super::Permit) could not be taken for a
/// request; answers as an HTTP response.
///
/// The answer is the spec's `rejection_response`, or else the extractor's: `409 Conflict`
/// with `Retry-After` when the lease is held elsewhere, `429 Too Many Requests` with
/// `Retry-After` when no permit is free, the key error's status and message when no name can
/// be derived, `503` with `Retry-After` when the backend fails (the backend's hint when it
/// has one, else a second), and `500` without `Retry-After` when the request cannot be kept
/// as the application configured it (logged once, with what to change).
///
/// # Example
///
/// A handler that answers for itself, taking `Result<Lease<R>, LeaseRejection>`:
///
/// ```
/// use axum::response::{IntoResponse, Response};
/// use axum::http::request::Parts;
/// use leasehold::extract::{Lease, LeaseRejection, LeaseRequest, LeaseSpec};
/// use leasehold::layer::RejectionKind;
/// use leasehold::layer::key::KeyError;
///
/// struct Nightly;
///
/// impl<S: Sync> LeaseSpec<S> for Nightly {
///     async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
///         Ok(LeaseRequest::named("nightly"))
///     }
/// }
///
/// async fn nightly(lease: Result<Lease<Nightly>, LeaseRejection>) -> Response {
///     match lease {
///         Ok(lease) => format!("running with token {}", lease.fencing_token()).into_response(),
///         Err(rejection) if rejection.kind() == RejectionKind::LeaseHeld => {
///             "already running elsewhere".into_response()
///         }
///         Err(rejection) => rejection.into_response(),
///     }
/// }
/// # let _ = nightly;
/// ```
pub struct LeaseRejection {
    reason: Reason,
    /// The application's answer, written from the request when it was refused.
    custom: Option<Answer>,
}

/// Why it was refused.
pub(super) enum Reason {
    /// The lease is held elsewhere, for this long at most (before rounding).
    Held {
        retry_after: Duration,
    },
    /// No permit is free, for this long at most.
    Full {
        retry_after: Duration,
    },
    InvalidName(KeyError),
    Unavailable(Error),
    /// The request's own settings cannot be kept: a mistake in the application.
    Misconfigured(Error),
}

impl Reason {
    /// The reason for an error of the primitives: the application's mistake for an invalid
    /// argument (refused before anything is sent), the backend's failure otherwise.
    pub(super) fn failed(err: Error) -> Reason {
        if err.kind() == ErrorKind::InvalidArgument {
            Reason::Misconfigured(err)
        } else {
            Reason::Unavailable(err)
        }
    }

    pub(super) fn held(retry_after: Duration) -> Reason {
        Reason::Held { retry_after }
    }

    pub(super) fn full(retry_after: Duration) -> Reason {
        Reason::Full { retry_after }
    }
}

impl LeaseRejection {
    /// The rejection for `reason`, with the application's answer written now, where the
    /// request is at hand.
    pub(super) fn new(reason: Reason, request: &Parts, own_answer: OwnAnswer) -> Self {
        let mut rejection = LeaseRejection {
            reason,
            custom: None,
        };
        let detail = || rejection.detail();
        let described = rejection.describe(&detail);
        let custom = own_answer(&described, request)
            .map(|response| Answer::from_response(response, described.retry_after()));
        rejection.custom = custom;
        rejection
    }

    /// The rejection as the layers describe theirs.
    fn describe<'a>(&'a self, detail: &'a (dyn Fn() -> String + 'a)) -> Rejection<'a> {
        match &self.reason {
            Reason::InvalidName(err) => Rejection::invalid_key(err, detail),
            _ => Rejection::new(self.kind(), self.status(), self.retry_after(), detail)
                .with_error(self.error()),
        }
    }

    /// The sentence of the extractor's answer.
    fn detail(&self) -> String {
        match &self.reason {
            Reason::Held { .. } => "The lease is held by another request.".to_owned(),
            Reason::Full { .. } => "No permit is free.".to_owned(),
            Reason::InvalidName(err) => key_error_detail(err, LEASE_NAME_UNAVAILABLE),
            Reason::Unavailable(_) => "The lease cannot be taken right now.".to_owned(),
            Reason::Misconfigured(_) => {
                "The server cannot take this lease as configured.".to_owned()
            }
        }
    }

    /// Why it was not taken: [`RejectionKind::LeaseHeld`],
    /// [`ConcurrencyLimited`](RejectionKind::ConcurrencyLimited) (no permit),
    /// [`InvalidKey`](RejectionKind::InvalidKey) (no name),
    /// [`Unavailable`](RejectionKind::Unavailable) or
    /// [`Misconfigured`](RejectionKind::Misconfigured) (the request's settings cannot be
    /// kept).
    pub fn kind(&self) -> RejectionKind {
        match self.reason {
            Reason::Held { .. } => RejectionKind::LeaseHeld,
            Reason::Full { .. } => RejectionKind::ConcurrencyLimited,
            Reason::InvalidName(_) => RejectionKind::InvalidKey,
            Reason::Unavailable(_) => RejectionKind::Unavailable,
            Reason::Misconfigured(_) => RejectionKind::Misconfigured,
        }
    }

    /// The status of the extractor's answer.
    pub fn status(&self) -> StatusCode {
        match &self.reason {
            Reason::Held { .. } => StatusCode::CONFLICT,
            Reason::Full { .. } => StatusCode::TOO_MANY_REQUESTS,
            Reason::InvalidName(err) => err.status(),
            Reason::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Reason::Misconfigured(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The extractor's `Retry-After`, before rounding up to whole seconds: the holders' time
    /// left, at most the request's
    /// [`retry_after_at_most`](super::LeaseRequest::retry_after_at_most) and at least a
    /// second (`Retry-After: 0` invites an immediate retry), or the backend's hint (else a
    /// second); `None` for a name that cannot be derived or settings that cannot be kept.
    pub fn retry_after(&self) -> Option<Duration> {
        match &self.reason {
            Reason::Held { retry_after } | Reason::Full { retry_after } => Some(*retry_after),
            Reason::InvalidName(_) | Reason::Misconfigured(_) => None,
            Reason::Unavailable(err) => {
                Some(crate::retry_after::at_least_a_second(err.retry_after()))
            }
        }
    }

    /// The backend's error, when it failed, or the error that says which setting cannot be
    /// kept.
    pub fn error(&self) -> Option<&Error> {
        match &self.reason {
            Reason::Unavailable(err) | Reason::Misconfigured(err) => Some(err),
            _ => None,
        }
    }

    /// The error of a name that cannot be derived.
    pub fn key_error(&self) -> Option<&KeyError> {
        match &self.reason {
            Reason::InvalidName(err) => Some(err),
            _ => None,
        }
    }

    fn log(&self) {
        match &self.reason {
            Reason::Misconfigured(err) => {
                if first_time(err) {
                    tracing::error!(
                        error = %err,
                        "a lease or permit request cannot be kept as configured; every request \
                         for it is answered 500 until the application is changed (told once)"
                    );
                } else {
                    tracing::debug!(error = %err, "a lease or permit request cannot be kept as configured");
                }
            }
            // The crate's own answer logs it; the application's does not.
            Reason::InvalidName(err) if err.status().is_server_error() && self.custom.is_some() => {
                log_key_error(err, LEASE_NAME_UNAVAILABLE);
            }
            _ => {}
        }
    }
}

/// Whether this process has not told `err` yet: each mistake in an application's lease
/// requests is logged once, not once per request. Bounded: past a few dozen distinct
/// mistakes, the rest are told at `DEBUG` only.
fn first_time(err: &Error) -> bool {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    const MOST: usize = 32;
    static TOLD: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let told = TOLD.get_or_init(Mutex::default);
    // A poisoned set only ever held strings: still sound.
    let mut told = told
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if told.len() >= MOST {
        return false;
    }
    told.insert(err.to_string())
}

impl fmt::Debug for LeaseRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseRejection")
            .field("kind", &self.kind())
            .field("retry_after", &self.retry_after())
            .field("reason", &self.to_string())
            .finish()
    }
}

impl fmt::Display for LeaseRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            Reason::Held { .. } => f.write_str("the lease is held by another request"),
            Reason::Full { .. } => f.write_str("no permit is free"),
            Reason::InvalidName(reason) => write!(f, "no lease name: {reason}"),
            Reason::Unavailable(err) => write!(f, "the lease backend failed: {err}"),
            Reason::Misconfigured(err) => write!(f, "the lease request cannot be kept: {err}"),
        }
    }
}

impl std::error::Error for LeaseRejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.reason {
            Reason::Unavailable(err) | Reason::Misconfigured(err) => Some(err),
            Reason::InvalidName(err) => Some(err),
            Reason::Held { .. } | Reason::Full { .. } => None,
        }
    }
}

impl IntoResponse for LeaseRejection {
    fn into_response(mut self) -> Response {
        self.log();
        let answer = match self.custom.take() {
            Some(answer) => answer,
            // The layers' answers, without problem+json.
            None => {
                let responses = Responses::default();
                match &self.reason {
                    Reason::InvalidName(err) => {
                        responses.key_error(err, LEASE_NAME_UNAVAILABLE, None)
                    }
                    _ => {
                        let detail = || self.detail();
                        responses.refusal(&self.describe(&detail), None)
                    }
                }
            }
        };
        // Built from the parts, as the layers build theirs: an empty body has no
        // `Content-Type`, and an application's answer keeps only the headers it set.
        let (status, headers, body) = answer.into_parts();
        let mut response = Response::new(axum::body::Body::from(body));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        response
    }
}
