//! The `Lease` extractor: a handler that runs only while it holds a named lease.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use axum::extract::{FromRef, FromRequestParts};
use axum::response::{IntoResponse, Response};
use http::header::RETRY_AFTER;
use http::request::Parts;
use http::{HeaderValue, StatusCode};

use crate::Coordination;
use crate::coordination::lock::{
    FencedLock, LockAttempt, ManagedLease, ManagedLeaseOptions, OwnershipLost,
};
use crate::error::{Error, ErrorKind};

/// Which lease a request needs, and how it is kept: implement it for a type of your own and
/// take [`Lease<YourType>`](Lease) in a handler.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use http::request::Parts;
/// use leasehold::extract::LeaseSpec;
///
/// /// One import at a time per tenant, named by the `/tenants/{tenant}/import` path.
/// struct TenantImport;
///
/// impl LeaseSpec for TenantImport {
///     async fn name(parts: &mut Parts) -> Result<Vec<u8>, String> {
///         let tenant = parts
///             .uri
///             .path()
///             .strip_prefix("/tenants/")
///             .and_then(|rest| rest.split('/').next())
///             .filter(|tenant| !tenant.is_empty())
///             .ok_or("no tenant in the path")?;
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
    /// rejects the request with `400 Bad Request` and the message.
    fn name(parts: &mut Parts) -> impl Future<Output = Result<Vec<u8>, String>> + Send;

    /// How the lease is kept while the handler runs. Default: [`ManagedLeaseOptions::new`].
    fn options() -> ManagedLeaseOptions {
        ManagedLeaseOptions::new()
    }

    /// How long a request waits when the lease is held elsewhere, before answering `409`.
    /// Default: no wait.
    fn max_wait() -> Duration {
        Duration::ZERO
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
/// when it is held elsewhere (after waiting up to [`LeaseSpec::max_wait`]), `400` when no
/// name can be derived, `503` when the backend fails. There is no fail-open policy: a handler
/// that needs mutual exclusion never runs without the lease, whether the backend is
/// [unavailable](crate::Error::is_unavailable) (a `tracing` warning) or
/// [refuses](crate::Error::is_refused) (a `tracing` error naming the cause).
///
/// # Storage
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
/// use http::request::Parts;
/// use leasehold::Coordination;
/// use leasehold::extract::{Lease, LeaseSpec};
///
/// struct Reindex;
///
/// impl LeaseSpec for Reindex {
///     async fn name(_parts: &mut Parts) -> Result<Vec<u8>, String> {
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
/// use http::request::Parts;
/// use leasehold::Coordination;
/// use leasehold::extract::{Lease, LeaseSpec};
///
/// /// One import at a time per tenant: `/tenants/{tenant}/import`.
/// struct TenantImport;
///
/// impl LeaseSpec for TenantImport {
///     async fn name(parts: &mut Parts) -> Result<Vec<u8>, String> {
///         let Path(tenant) = Path::<String>::from_request_parts(parts, &())
///             .await
///             .map_err(|rejection| rejection.body_text())?;
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
    /// [`ManagedLeaseOptions::release_on_drop`]).
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
        let name = R::name(parts).await.map_err(LeaseRejection::InvalidName)?;
        let coordination = Coordination::from_ref(state);
        let lock = FencedLock::named(&coordination, &name);
        let options = R::options();
        let max_wait = R::max_wait();
        let lease = if max_wait.is_zero() {
            match lock
                .try_acquire(options.lease_duration())
                .await
                .map_err(LeaseRejection::Unavailable)?
            {
                LockAttempt::Acquired(lease) => lease,
                LockAttempt::Busy { retry_after } => {
                    return Err(LeaseRejection::Held { retry_after });
                }
            }
        } else {
            match tokio::time::timeout(max_wait, lock.acquire_with(&options)).await {
                Ok(lease) => lease.map_err(LeaseRejection::Unavailable)?,
                Err(_) => {
                    // Gave up waiting: say how long the current holder has left.
                    let retry_after = match lock.try_acquire(options.lease_duration()).await {
                        Ok(LockAttempt::Busy { retry_after }) => retry_after,
                        Ok(LockAttempt::Acquired(lease)) => {
                            let lease = ManagedLease::keep(lease, &options)
                                .map_err(LeaseRejection::Unavailable)?;
                            return Ok(Lease {
                                lease,
                                spec: PhantomData,
                            });
                        }
                        Err(err) => return Err(LeaseRejection::Unavailable(err)),
                    };
                    return Err(LeaseRejection::Held { retry_after });
                }
            }
        };
        let lease = ManagedLease::keep(lease, &options).map_err(LeaseRejection::Unavailable)?;
        Ok(Lease {
            lease,
            spec: PhantomData,
        })
    }
}

/// Why a [`Lease`] could not be taken for a request; answers as an HTTP response.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use axum::response::IntoResponse;
/// use http::StatusCode;
/// use leasehold::extract::LeaseRejection;
///
/// let response = LeaseRejection::Held { retry_after: Some(Duration::from_millis(2500)) }
///     .into_response();
/// assert_eq!(response.status(), StatusCode::CONFLICT);
/// assert_eq!(response.headers()["retry-after"], "3");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum LeaseRejection {
    /// Held elsewhere: `409 Conflict`, with `Retry-After` from the lease's time left.
    Held {
        /// How long the current holder's lease has left, on the server's clock.
        retry_after: Option<Duration>,
    },
    /// No lease name could be derived from the request: `400 Bad Request`.
    InvalidName(String),
    /// The backend failed: `503 Service Unavailable` with `Retry-After` when the backend
    /// says ([`Error::retry_after`]), else `Retry-After: 1`.
    Unavailable(Error),
}

impl fmt::Display for LeaseRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseRejection::Held { .. } => f.write_str("the lease is held by another request"),
            LeaseRejection::InvalidName(reason) => write!(f, "no lease name: {reason}"),
            LeaseRejection::Unavailable(err) => write!(f, "the lease backend failed: {err}"),
        }
    }
}

impl std::error::Error for LeaseRejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseRejection::Unavailable(err) => Some(err),
            _ => None,
        }
    }
}

impl IntoResponse for LeaseRejection {
    fn into_response(self) -> Response {
        let (status, retry_after, body) = match &self {
            LeaseRejection::Held { retry_after } => (
                StatusCode::CONFLICT,
                // At least a second: `Retry-After: 0` invites an immediate retry.
                Some(
                    retry_after
                        .unwrap_or(Duration::from_secs(1))
                        .max(Duration::from_secs(1)),
                ),
                // No body, as the layers' refusals: the status and `Retry-After` say it.
                String::new(),
            ),
            LeaseRejection::InvalidName(reason) => {
                (StatusCode::BAD_REQUEST, None, format!("{reason}\n"))
            }
            LeaseRejection::Unavailable(err) => {
                if err.kind() == ErrorKind::InvalidArgument {
                    tracing::error!(error = %err, "the lease extractor is misconfigured");
                } else if err.is_refused() {
                    tracing::error!(error = %err, "the lease backend refused the lease");
                } else {
                    tracing::warn!(error = %err, "the lease backend is unavailable");
                }
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    // When the backend says (a full memory backend), else a second.
                    Some(err.retry_after().unwrap_or(Duration::from_secs(1))),
                    String::new(),
                )
            }
        };
        let mut response = if body.is_empty() {
            status.into_response()
        } else {
            (status, body).into_response()
        };
        if let Some(wait) = retry_after {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
