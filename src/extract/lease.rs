//! The `Lease` extractor: a handler that runs only while it holds a named lease.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use axum::extract::{FromRef, FromRequestParts};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use http::request::Parts;

use crate::Coordination;
use crate::coordination::ManagedOptions;
use crate::coordination::lock::{FencedLease, FencedLock, LockAttempt, ManagedLease};
use crate::coordination::ownership::OwnershipLost;
use crate::error::{Error, ErrorKind};
use crate::layer::key::KeyError;
use crate::layer::responses::{Answer, Responses, key_error_detail, log_key_error};
use crate::layer::{Rejection, RejectionKind};

/// Which lease a request needs, and how it is kept: implement it for a type of your own and
/// take [`Lease<YourType>`](Lease) in a handler.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use axum::http::request::Parts;
/// use leasehold::extract::LeaseSpec;
/// use leasehold::layer::key::KeyError;
///
/// /// One import at a time per tenant, named by the `/tenants/{tenant}/import` path.
/// struct TenantImport;
///
/// impl LeaseSpec for TenantImport {
///     async fn name(parts: &mut Parts) -> Result<Vec<u8>, KeyError> {
///         let tenant = parts
///             .uri
///             .path()
///             .strip_prefix("/tenants/")
///             .and_then(|rest| rest.split('/').next())
///             .filter(|tenant| !tenant.is_empty())
///             .ok_or_else(|| KeyError::new("no tenant in the path"))?;
///         Ok(format!("import:{tenant}").into_bytes())
///     }
///
///     fn max_wait() -> Duration {
///         Duration::from_secs(2)
///     }
/// }
/// ```
pub trait LeaseSpec: Send + Sync + 'static {
    /// The lease's name for this request (for example from a path parameter). An error
    /// rejects the request as a key error does on the layers: with its
    /// [status](KeyError::status) (`400 Bad Request` for [`KeyError::new`]) and its message
    /// as one line of text.
    fn name(parts: &mut Parts) -> impl Future<Output = Result<Vec<u8>, KeyError>> + Send;

    /// How the lease is kept while the handler runs. Default: [`ManagedOptions::new`].
    fn options() -> ManagedOptions {
        ManagedOptions::new()
    }

    /// How long a request waits when the lease is held elsewhere, before answering `409`.
    /// Default: no wait.
    fn max_wait() -> Duration {
        Duration::ZERO
    }

    /// How long the backend may take to answer an attempt to take the lease before the
    /// request is answered `503`, as the layers bound their decisions: the immediate try
    /// when [`max_wait`](Self::max_wait) is zero, and the last try after waiting otherwise.
    /// A request is so answered within `max_wait() + timeout()`, whatever the backend does.
    /// Default [`DEFAULT_LEASE_TIMEOUT`]. An acquisition cut short may still have taken the
    /// lease: it is released in the background (see [`FencedLock::try_acquire`]).
    fn timeout() -> Duration {
        DEFAULT_LEASE_TIMEOUT
    }

    /// The application's own answers to the requests refused for want of the lease: as for
    /// the layers' `rejection_response`, `Some` response, or `None` (the default) for the
    /// extractor's. It sees the refused request's parts, and is asked when the rejection is
    /// made (so also for a handler that takes `Result<Lease<R>, LeaseRejection>`).
    /// `Retry-After` is added when the response has none. A function written for the layers
    /// serves here as is (a function: a spec has no state of its own; read what it needs from
    /// the request's extensions).
    fn rejection_response(rejection: &Rejection<'_>, request: &Parts) -> Option<Response<Bytes>> {
        let _ = (rejection, request);
        None
    }
}

/// A held, self-renewing [fenced lease](crate::coordination::lock::FencedLock) named by
/// `R` for this request: the handler runs only while holding it, and it is released when
/// the handler is done (dropped with the handler's arguments, as the response is produced).
///
/// The lock is [`FencedLock::named`] with the name `R` gives, on the [`Coordination`] taken
/// from the router's state through [`FromRef`], as axum's own extractors take theirs. The
/// lease is renewed at half its duration meanwhile; [`ownership`](Self::ownership) fires if
/// it is lost, and [`fencing_token`](Self::fencing_token) is what every protected write
/// should carry.
///
/// Rejections ([`LeaseRejection`]): `409 Conflict` with `Retry-After` (the lease's time left)
/// when it is held elsewhere (after waiting up to [`LeaseSpec::max_wait`]), the
/// [`KeyError`]'s status (`400` for [`KeyError::new`]) when no name can be derived, `503` when
/// the backend fails or gives no answer within [`LeaseSpec::timeout`] (so every request is
/// answered within `max_wait + timeout`), or when [`LeaseSpec::options`] cannot be kept
/// (checked before anything is sent); [`LeaseSpec::rejection_response`] words them as the
/// application wants.
/// There is no fail-open policy: a handler that needs mutual exclusion never runs without the
/// lease, whether the backend is
/// [unavailable](crate::Error::is_unavailable) (a `tracing` warning) or
/// [refuses](crate::Error::is_refused) (a `tracing` error naming the cause).
///
/// # Storage
///
/// The name comes from the request, so it is bounded as client keys are: a name longer than
/// [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) bytes is stored as its digest
/// (`sha256:<hex>`), so the lock's keys stay short whatever the request holds (see
/// [`FencedLock::named`]).
///
/// Every distinct name leaves a fencing counter in Redis that never expires (see
/// [`FencedLock`]: the counter must outlive every lease, or tokens would start again). Name
/// leases after a bounded set of resources (a tenant, a report kind), not after something
/// unbounded such as a job id, or delete a resource's counter yourself once nothing can use
/// its tokens any more.
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use axum::{Router, routing::post};
/// use axum::http::request::Parts;
/// use leasehold::Coordination;
/// use leasehold::extract::{Lease, LeaseSpec};
/// use leasehold::layer::key::KeyError;
///
/// struct Reindex;
///
/// impl LeaseSpec for Reindex {
///     async fn name(_parts: &mut Parts) -> Result<Vec<u8>, KeyError> {
///         Ok(b"reindex".to_vec())
///     }
/// }
///
/// async fn reindex(lease: Lease<Reindex>) -> String {
///     // Only one replica runs this at a time; writes carry the fencing token.
///     format!("reindexing with token {}", lease.fencing_token())
/// }
///
/// let app: Router = Router::new()
///     .route("/reindex", post(reindex))
///     .with_state(Coordination::memory());
/// # let _ = app;
/// # }
/// ```
///
/// A lease named by a path parameter, read with axum's own `Path` extractor:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use axum::extract::{FromRequestParts, Path};
/// use axum::{Router, routing::post};
/// use axum::http::request::Parts;
/// use leasehold::Coordination;
/// use leasehold::extract::{Lease, LeaseSpec};
/// use leasehold::layer::key::KeyError;
///
/// /// One import at a time per tenant: `/tenants/{tenant}/import`.
/// struct TenantImport;
///
/// impl LeaseSpec for TenantImport {
///     async fn name(parts: &mut Parts) -> Result<Vec<u8>, KeyError> {
///         let Path(tenant) = Path::<String>::from_request_parts(parts, &())
///             .await
///             .map_err(|rejection| KeyError::new(rejection.body_text()))?;
///         Ok(format!("import:{tenant}").into_bytes())
///     }
/// }
///
/// async fn import(lease: Lease<TenantImport>) -> String {
///     format!("importing with token {}", lease.fencing_token())
/// }
///
/// let app: Router = Router::new()
///     .route("/tenants/{tenant}/import", post(import))
///     .with_state(Coordination::memory());
/// # let _ = app;
/// # }
/// ```
pub struct Lease<R> {
    lease: ManagedLease,
    spec: PhantomData<fn() -> R>,
}

impl<R> Lease<R> {
    /// The fencing token to send with every protected write.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token()
    }

    /// The signal that fires if the lease is lost while the handler runs.
    pub fn ownership(&self) -> OwnershipLost {
        self.lease.ownership()
    }

    /// The managed lease itself.
    pub fn managed(&self) -> &ManagedLease {
        &self.lease
    }

    /// The managed lease, to keep it beyond the handler (see
    /// [`ManagedOptions::release_on_drop`]).
    pub fn into_managed(self) -> ManagedLease {
        self.lease
    }
}

impl<R> fmt::Debug for Lease<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease").field("lease", &self.lease).finish()
    }
}

impl<S, R> FromRequestParts<S> for Lease<R>
where
    S: Send + Sync,
    Coordination: FromRef<S>,
    R: LeaseSpec,
{
    type Rejection = LeaseRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let coordination = Coordination::from_ref(state);
        match take::<R>(parts, &coordination).await {
            Ok(lease) => Ok(lease),
            // The application's answer is written here, where the request is at hand.
            Err(reason) => Err(LeaseRejection::new::<R>(reason, parts)),
        }
    }
}

/// Takes `R`'s lease for the request, or says why not.
async fn take<R: LeaseSpec>(
    parts: &mut Parts,
    coordination: &Coordination,
) -> Result<Lease<R>, Reason> {
    // Options that cannot be kept are refused before anything is sent: no lock taken and
    // released, no fencing token spent, on every request.
    let options = R::options();
    options.validate().map_err(Reason::Unavailable)?;
    let name = R::name(parts).await.map_err(Reason::InvalidName)?;
    let lock = FencedLock::named(coordination, &name);
    let (max_wait, timeout) = (R::max_wait(), R::timeout());
    let lease = if max_wait.is_zero() {
        try_once(&lock, &options, timeout).await?
    } else {
        match tokio::time::timeout(max_wait, lock.acquire_with(&options)).await {
            Ok(lease) => lease.map_err(Reason::Unavailable)?,
            // Gave up waiting: one last try, which also says how long the holder has left.
            Err(_) => try_once(&lock, &options, timeout).await?,
        }
    };
    let lease = ManagedLease::keep(lease, &options).map_err(Reason::Unavailable)?;
    Ok(Lease {
        lease,
        spec: PhantomData,
    })
}

/// The lease now, or how long its current holder has left, within `timeout`.
async fn try_once(
    lock: &FencedLock,
    options: &ManagedOptions,
    timeout: Duration,
) -> Result<FencedLease, Reason> {
    let attempt = tokio::time::timeout(timeout, lock.try_acquire(options.lease_duration()))
        .await
        .map_err(|_| {
            Reason::Unavailable(
                Error::new(
                    ErrorKind::Timeout,
                    format!("no answer from the lease backend within {timeout:?}"),
                )
                .uncertain(true),
            )
        })?;
    match attempt.map_err(Reason::Unavailable)? {
        LockAttempt::Acquired(lease) => Ok(lease),
        LockAttempt::Busy { retry_after } => Err(Reason::Held { retry_after }),
    }
}

/// The default of [`LeaseSpec::timeout`]: the layers' decision timeout.
pub const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_millis(500);

/// What the answer to a lease name that is the server's fault starts with.
const LEASE_NAME_UNAVAILABLE: &str = "lease name unavailable";

/// Why a [`Lease`] could not be taken for a request; answers as an HTTP response.
///
/// The answer is the [`LeaseSpec::rejection_response`] of the lease's spec, or else the
/// extractor's: `409 Conflict` with `Retry-After` when the lease is held elsewhere, the key
/// error's status and message when no name can be derived, `503` with `Retry-After` when
/// the backend fails (the backend's hint when it has one, else a second).
///
/// # Example
///
/// A handler that answers for itself, taking `Result<Lease<R>, LeaseRejection>`:
///
/// ```
/// use axum::response::{IntoResponse, Response};
/// use axum::http::request::Parts;
/// use leasehold::extract::{Lease, LeaseRejection, LeaseSpec};
/// use leasehold::layer::RejectionKind;
/// use leasehold::layer::key::KeyError;
///
/// struct Nightly;
///
/// impl LeaseSpec for Nightly {
///     async fn name(_parts: &mut Parts) -> Result<Vec<u8>, KeyError> {
///         Ok(b"nightly".to_vec())
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

enum Reason {
    Held { retry_after: Option<Duration> },
    InvalidName(KeyError),
    Unavailable(Error),
}

impl LeaseRejection {
    fn new<R: LeaseSpec>(reason: Reason, request: &Parts) -> Self {
        let mut rejection = LeaseRejection {
            reason,
            custom: None,
        };
        let detail = || rejection.detail();
        let described = rejection.describe(&detail);
        let custom = R::rejection_response(&described, request)
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
            Reason::InvalidName(err) => key_error_detail(err, LEASE_NAME_UNAVAILABLE),
            Reason::Unavailable(_) => "The lease cannot be taken right now.".to_owned(),
        }
    }

    /// Why the lease was not taken: [`RejectionKind::LeaseHeld`],
    /// [`InvalidKey`](RejectionKind::InvalidKey) (no name) or
    /// [`Unavailable`](RejectionKind::Unavailable).
    pub fn kind(&self) -> RejectionKind {
        match self.reason {
            Reason::Held { .. } => RejectionKind::LeaseHeld,
            Reason::InvalidName(_) => RejectionKind::InvalidKey,
            Reason::Unavailable(_) => RejectionKind::Unavailable,
        }
    }

    /// The status of the extractor's answer.
    pub fn status(&self) -> StatusCode {
        match &self.reason {
            Reason::Held { .. } => StatusCode::CONFLICT,
            Reason::InvalidName(err) => err.status(),
            Reason::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The extractor's `Retry-After`, before rounding up to whole seconds: the holder's time
    /// left (at least a second: `Retry-After: 0` invites an immediate retry), or the
    /// backend's hint (else a second); `None` for a name that cannot be derived.
    pub fn retry_after(&self) -> Option<Duration> {
        match &self.reason {
            Reason::Held { retry_after } => Some(
                retry_after
                    .unwrap_or(Duration::from_secs(1))
                    .max(Duration::from_secs(1)),
            ),
            Reason::InvalidName(_) => None,
            Reason::Unavailable(err) => Some(err.retry_after().unwrap_or(Duration::from_secs(1))),
        }
    }

    /// The backend's error, when it failed.
    pub fn error(&self) -> Option<&Error> {
        match &self.reason {
            Reason::Unavailable(err) => Some(err),
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
            Reason::Unavailable(err) => {
                if err.kind() == ErrorKind::InvalidArgument {
                    tracing::error!(error = %err, "the lease extractor is misconfigured");
                } else if err.is_refused() {
                    tracing::error!(error = %err, "the lease backend refused the lease");
                } else {
                    tracing::warn!(error = %err, "the lease backend is unavailable");
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
            Reason::InvalidName(reason) => write!(f, "no lease name: {reason}"),
            Reason::Unavailable(err) => write!(f, "the lease backend failed: {err}"),
        }
    }
}

impl std::error::Error for LeaseRejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.reason {
            Reason::Unavailable(err) => Some(err),
            Reason::InvalidName(err) => Some(err),
            Reason::Held { .. } => None,
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
