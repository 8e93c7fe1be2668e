//! The `Lease` extractor: a handler that runs only while it holds a named fenced lease.

use std::fmt;
use std::marker::PhantomData;

use axum::extract::{FromRef, FromRequestParts};
use http::request::Parts;

use super::rejection::{LeaseRejection, Reason};
#[cfg(doc)]
use super::spec::LeaseRequest;
use super::spec::LeaseSpec;
use super::taking::{request_name, take};
use super::while_held::{HoldingLost, while_held};
use crate::Coordination;
use crate::coordination::lock::{FencedLock, ManagedLease};
use crate::coordination::ownership::OwnershipLost;
use crate::coordination::redlock::ManagedRedlockLease;
use crate::coordination::{Detached, Managed, Release};
#[cfg(doc)]
use crate::layer::key::KeyError;

/// A held, self-renewing [fenced lease](crate::coordination::lock::FencedLock) named by
/// `R` for this request: the handler runs only while holding it, and it is released when
/// the handler is done (dropped with the handler's arguments, as the response is produced).
///
/// The lock is [`FencedLock::named`] with the name of the [`LeaseRequest`] that `R` makes for
/// the request (from the request and the router's state), on the [`Coordination`] taken from
/// the router's state through [`FromRef`], as axum's own extractors take theirs. The
/// lease is renewed at half its duration meanwhile; [`ownership`](Self::ownership) fires if
/// it is lost, and [`fencing_token`](Self::fencing_token) is what every protected write
/// should carry.
///
/// Rejections ([`LeaseRejection`]): `409 Conflict` with `Retry-After` (the lease's time left,
/// at most [`LeaseRequest::retry_after_at_most`]) when it is held elsewhere (after waiting up
/// to [`LeaseRequest::max_wait`]), the [`KeyError`]'s status (`400` for [`KeyError::new`])
/// when no name can be derived or the name is empty, `503` when the backend fails or gives
/// no answer within [`LeaseRequest::timeout`] (so every request is answered within
/// `max_wait + timeout`), and `500` without `Retry-After` when the request cannot be kept as
/// configured (a zero timeout, [`LeaseRequest::options`] out of range, or
/// `release_on_drop(false)` without a lifetime limit, which would leave a lease renewed
/// forever after every request): checked before anything is sent, and logged once;
/// [`LeaseSpec::rejection_response`] words them as the application wants. The name's braces
/// are escaped as a client key's are, so that no client picks its lease's cluster slot.
/// There is no fail-open policy: a handler that needs mutual exclusion never runs without the
/// lease, whether the backend is
/// [unavailable](crate::Error::is_unavailable) or [refuses](crate::Error::is_refused): an
/// outage is logged once (a `WARN`, or an `ERROR` naming a refusal), each request at
/// `DEBUG`.
///
/// # Storage
///
/// The name comes from the request, so it is bounded as client keys are: a name longer than
/// [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) bytes is stored as its digest
/// (`sha256:<hex>`), so the lock's keys stay short whatever the request holds (see
/// [`FencedLock::named`]).
///
/// Every distinct name leaves a fencing counter behind, which expires once no token of it
/// can matter: an hour after its lease ended and the server's clock passed the token (on the
/// memory backend, as soon as both have happened; see
/// [`FencedLock`](crate::coordination::lock::FencedLock#storage)). A client that can choose
/// names so costs at most the names it uses in an hour, and the fencing token never goes
/// back, whether the counter expired, was deleted, evicted or lost with Redis's memory.
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use axum::{Router, routing::post};
/// use axum::http::request::Parts;
/// use leasehold::Coordination;
/// use leasehold::extract::{HoldingLost, Lease, LeaseRequest, LeaseSpec};
/// use leasehold::layer::key::KeyError;
///
/// struct Reindex;
///
/// impl<S: Sync> LeaseSpec<S> for Reindex {
///     async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
///         Ok(LeaseRequest::named("reindex"))
///     }
/// }
///
/// async fn reindex(lease: Lease<Reindex>) -> Result<String, HoldingLost> {
///     // Only one replica runs this at a time, and only while it holds the lease: lost
///     // midway, the work stops and the client gets a 503. Writes carry the fencing token.
///     let token = lease.fencing_token();
///     lease
///         .while_held(async move { format!("reindexed with token {token}") })
///         .await
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
/// use leasehold::extract::{Lease, LeaseRequest, LeaseSpec};
/// use leasehold::layer::key::KeyError;
///
/// /// One import at a time per tenant: `/tenants/{tenant}/import`.
/// struct TenantImport;
///
/// impl<S: Sync> LeaseSpec<S> for TenantImport {
///     async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
///         let Path(tenant) = Path::<String>::from_request_parts(parts, &())
///             .await
///             .map_err(|rejection| KeyError::new(rejection.body_text()))?;
///         Ok(LeaseRequest::named(format!("import:{tenant}")))
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
#[doc = include_str!("debug_handler.md")]
pub struct Lease<R> {
    lease: HeldLease,
    spec: PhantomData<fn() -> R>,
}

/// The managed lease a [`Lease`] holds: a fenced lock's, or a Redlock group's when its
/// [`LeaseRequest`] named one (see [`LeaseRequest::redlock`]).
///
/// # Example
///
/// ```
/// use leasehold::extract::{HeldLease, Lease};
///
/// fn keep_beyond_the_handler<R>(lease: Lease<R>) -> u64 {
///     match lease.into_managed() {
///         HeldLease::Lock(lease) => lease.fencing_token(),
///         HeldLease::Redlock(lease) => lease.fencing_token(),
///     }
/// }
/// # let _ = keep_beyond_the_handler::<()>;
/// ```
#[derive(Debug)]
pub enum HeldLease {
    /// A fenced lock's lease.
    Lock(ManagedLease),
    /// A Redlock group's lease.
    Redlock(ManagedRedlockLease),
}

impl HeldLease {
    /// The fencing token to send with every protected write.
    pub fn fencing_token(&self) -> u64 {
        match self {
            HeldLease::Lock(lease) => lease.fencing_token(),
            HeldLease::Redlock(lease) => lease.fencing_token(),
        }
    }

    /// The signal that fires if the lease is lost.
    pub fn ownership(&self) -> OwnershipLost {
        match self {
            HeldLease::Lock(lease) => lease.ownership(),
            HeldLease::Redlock(lease) => lease.ownership(),
        }
    }

    /// The owner token of the lease.
    pub fn owner_token(&self) -> &str {
        match self {
            HeldLease::Lock(lease) => lease.owner_token(),
            HeldLease::Redlock(lease) => lease.owner_token(),
        }
    }

    /// Whether ownership is lost.
    pub fn is_lost(&self) -> bool {
        match self {
            HeldLease::Lock(lease) => lease.is_lost(),
            HeldLease::Redlock(lease) => lease.is_lost(),
        }
    }

    /// Stops renewing and lets go of the lease without releasing it (see
    /// [`Managed::detach`]).
    ///
    /// # Cancel safety
    ///
    /// As [`Managed::detach`]'s.
    pub async fn detach(self) -> Option<Detached> {
        match self {
            HeldLease::Lock(lease) => lease.detach().await,
            HeldLease::Redlock(lease) => lease.detach().await,
        }
    }

    /// Stops renewing and releases the lease (see [`Managed::release`]).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe in effect: the release is asked of the keeper when this is
    /// called, and goes on there if the future is dropped, polled or not.
    pub fn release(self) -> impl Future<Output = crate::error::Result<Release>> + Send {
        // Asked of the keeper now, whichever it keeps.
        let released: std::pin::Pin<Box<dyn Future<Output = _> + Send>> = match self {
            HeldLease::Lock(lease) => Box::pin(lease.release()),
            HeldLease::Redlock(lease) => Box::pin(lease.release()),
        };
        released
    }
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

    /// Runs `work` only while the lease is held: its output, or [`HoldingLost`] (a `503` the
    /// handler can return as is) as soon as the loss is known, the work then dropped at its
    /// next await. A handler that writes with [`fencing_token`](Self::fencing_token) after
    /// the loss would be refused by a resource that checks tokens; one that cannot check
    /// them needs this.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it drops `work`, and changes nothing held.
    pub async fn while_held<F: Future>(&self, work: F) -> Result<F::Output, HoldingLost> {
        while_held(self.ownership(), work).await
    }

    /// The managed lease itself.
    pub fn managed(&self) -> &HeldLease {
        &self.lease
    }

    /// The managed lease, to keep it beyond the handler (see
    /// [`ManagedOptions::release_on_drop`](crate::coordination::ManagedOptions::release_on_drop)).
    pub fn into_managed(self) -> HeldLease {
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
    R: LeaseSpec<S>,
{
    type Rejection = LeaseRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let coordination = Coordination::from_ref(state);
        let taken = async {
            let request = R::lease(parts, state).await.map_err(Reason::InvalidName)?;
            let group = request.redlock_group().cloned();
            let (name, taking) = request.into_parts();
            let name = request_name(name, "lease")?;
            let options = &taking.options;
            if let Some(group) = group {
                let lease = take(
                    &taking,
                    &coordination,
                    // The group's nodes are not the handle's backend, whose breaker would
                    // judge their silence by its own server's answers.
                    None,
                    Reason::held,
                    || group.try_acquire(&name, options.lease_duration()),
                    || group.acquire(&name, options.lease_duration()),
                )
                .await?;
                return Managed::keep(lease, options)
                    .map(HeldLease::Redlock)
                    .map_err(Reason::failed);
            }
            let lock = FencedLock::named(&coordination, &name);
            let lease = take(
                &taking,
                &coordination,
                coordination.breaker(),
                Reason::held,
                || lock.try_acquire(options.lease_duration()),
                || lock.acquire_with(options),
            )
            .await?;
            Managed::keep(lease, options)
                .map(HeldLease::Lock)
                .map_err(Reason::failed)
        };
        match taken.await {
            Ok(lease) => Ok(Lease {
                lease,
                spec: PhantomData,
            }),
            Err(reason) => Err(LeaseRejection::new(reason, parts, R::rejection_response)),
        }
    }
}
