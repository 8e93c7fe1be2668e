//! The `Permit` extractor: a handler that runs only while it holds one of a named
//! semaphore's permits.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;

use axum::extract::{FromRef, FromRequestParts};
use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;

use super::rejection::{LeaseRejection, Reason};
use super::spec::Taking;
use super::taking::{request_name, take};
use super::while_held::{HoldingLost, while_held};
use crate::Coordination;
use crate::coordination::ownership::OwnershipLost;
use crate::coordination::semaphore::{Capacity, KeyedSemaphore, ManagedPermit, Semaphore};
use crate::layer::Rejection;
use crate::layer::key::KeyError;

/// Which semaphore permit a request needs, and how it is taken and kept: implement it for a
/// type of your own and take [`Permit<YourType>`](Permit) in a handler. Generic over the
/// router's state as [`LeaseSpec`](super::LeaseSpec) is.
///
/// # Example
///
/// ```
/// use axum::http::request::Parts;
/// use leasehold::extract::{PermitRequest, PermitSpec};
/// use leasehold::layer::key::KeyError;
///
/// /// At most four exports at once across every replica.
/// struct Exports;
///
/// impl<S: Sync> PermitSpec<S> for Exports {
///     async fn permit(_parts: &mut Parts, _state: &S) -> Result<PermitRequest, KeyError> {
///         Ok(PermitRequest::new("exports", 4))
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `PermitSpec<{S}>` for this router's state",
    note = "implement `PermitSpec<S>` for every state (`impl<S: Sync> PermitSpec<S> for \
            {Self}`), or for the states it reads its settings from through `FromRef`",
    note = "the router's state must also give a `Coordination` through `FromRef`"
)]
pub trait PermitSpec<S>: Send + Sync + 'static {
    /// The permit this request needs, and how it is taken and kept. An error rejects the
    /// request with the [`KeyError`]'s status and message.
    fn permit(
        parts: &mut Parts,
        state: &S,
    ) -> impl Future<Output = Result<PermitRequest, KeyError>> + Send;

    /// The application's own answers to the requests refused for want of a permit, as
    /// [`LeaseSpec::rejection_response`](super::LeaseSpec::rejection_response).
    fn rejection_response(rejection: &Rejection<'_>, request: &Parts) -> Option<Response<Bytes>> {
        let _ = (rejection, request);
        None
    }
}

/// The permit a request needs: its semaphore, and how it is taken and kept. Built by a
/// [`PermitSpec`] for each request.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::coordination::semaphore::Capacity;
/// use leasehold::extract::PermitRequest;
///
/// // Two exports per tenant, ten in all; wait up to a second for a free one.
/// let request = PermitRequest::keyed("exports", "tenant-7", Capacity::per_key(2).and_global(10))
///     .max_wait(Duration::from_secs(1));
/// # let _ = request;
/// ```
#[derive(Debug, Clone)]
pub struct PermitRequest {
    semaphore: SemaphoreName,
    taking: Taking,
}

#[derive(Debug, Clone)]
enum SemaphoreName {
    Plain {
        name: Vec<u8>,
        capacity: u32,
    },
    Keyed {
        name: Vec<u8>,
        key: Vec<u8>,
        capacity: Capacity,
    },
}

impl PermitRequest {
    /// A permit of [`Semaphore::new`]`(name, capacity)`, taken at once (no wait), within
    /// [`DEFAULT_LEASE_TIMEOUT`](super::DEFAULT_LEASE_TIMEOUT), and kept as
    /// [`ManagedOptions::new`](crate::coordination::ManagedOptions::new) says. A capacity of 0 is a `500` before anything is sent.
    pub fn new(name: impl Into<Vec<u8>>, capacity: u32) -> Self {
        PermitRequest {
            semaphore: SemaphoreName::Plain {
                name: name.into(),
                capacity,
            },
            taking: Taking::default(),
        }
    }

    /// A permit of [`KeyedSemaphore::new`]`(name, capacity)` for the client key `key`.
    pub fn keyed(name: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>, capacity: Capacity) -> Self {
        PermitRequest {
            semaphore: SemaphoreName::Keyed {
                name: name.into(),
                key: key.into(),
                capacity,
            },
            taking: Taking::default(),
        }
    }

    super::spec::taking_setters!(
        "permit",
        "for a free permit",
        "for want of a permit (by default, how long until expiries alone free one)"
    );
}

/// A held, self-renewing [semaphore permit](crate::coordination::semaphore) named by `R`
/// for this request: the handler runs only while holding it, and it is released when the
/// handler is done. For a limit on a whole route, the
/// [concurrency layer](crate::layer::concurrency_limit) also holds its permit while a
/// streaming body lasts; this extractor holds it for the handler alone.
///
/// Rejections ([`LeaseRejection`]): `429 Too Many Requests` with `Retry-After` when no permit
/// is free (after waiting up to [`PermitRequest::max_wait`]), the key error's status when
/// `R` can name none (or an empty name or key), `503` when the backend fails or is too slow,
/// and `500` without `Retry-After` when the request's capacity or options cannot be kept
/// (checked before anything is sent, and logged once). A waiting request tries again as
/// often as its options' [poll interval](crate::coordination::ManagedOptions::poll_interval) says where the
/// backend tells of no changes. The name's and the key's braces are escaped as a client
/// key's are.
///
/// # Example
///
/// ```
/// use axum::http::request::Parts;
/// use axum::{Router, routing::post};
/// use leasehold::Coordination;
/// use leasehold::extract::{Permit, PermitRequest, PermitSpec};
/// use leasehold::layer::key::KeyError;
///
/// struct Exports;
///
/// impl<S: Sync> PermitSpec<S> for Exports {
///     async fn permit(_parts: &mut Parts, _state: &S) -> Result<PermitRequest, KeyError> {
///         Ok(PermitRequest::new("exports", 4))
///     }
/// }
///
/// async fn export(_permit: Permit<Exports>) -> &'static str {
///     "one of at most four exports running"
/// }
///
/// let app: Router = Router::new()
///     .route("/export", post(export))
///     .with_state(Coordination::memory());
/// # let _ = app;
/// ```
#[doc = include_str!("debug_handler.md")]
pub struct Permit<R> {
    permit: ManagedPermit,
    spec: PhantomData<fn() -> R>,
}

impl<R> Permit<R> {
    /// The signal that fires if the permit is lost while the handler runs.
    pub fn ownership(&self) -> OwnershipLost {
        self.permit.ownership()
    }

    /// Runs `work` only while the permit is held: its output, or [`HoldingLost`] (a `503`
    /// the handler can return as is) as soon as the loss is known, the work then dropped at
    /// its next await (see [`Lease::while_held`](super::Lease::while_held)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it drops `work`, and changes nothing held.
    pub async fn while_held<F: Future>(&self, work: F) -> Result<F::Output, HoldingLost> {
        while_held(self.ownership(), work).await
    }

    /// The managed permit itself.
    pub fn managed(&self) -> &ManagedPermit {
        &self.permit
    }

    /// The managed permit, to keep it beyond the handler.
    pub fn into_managed(self) -> ManagedPermit {
        self.permit
    }
}

impl<R> fmt::Debug for Permit<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("permit", &self.permit)
            .finish()
    }
}

impl<S, R> FromRequestParts<S> for Permit<R>
where
    S: Send + Sync,
    Coordination: FromRef<S>,
    R: PermitSpec<S>,
{
    type Rejection = LeaseRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match take_permit::<S, R>(parts, state).await {
            Ok(permit) => Ok(Permit {
                permit,
                spec: PhantomData,
            }),
            Err(reason) => Err(LeaseRejection::new(reason, parts, R::rejection_response)),
        }
    }
}

/// Takes `R`'s permit for the request, or says why not.
async fn take_permit<S, R>(parts: &mut Parts, state: &S) -> Result<ManagedPermit, Reason>
where
    S: Send + Sync,
    Coordination: FromRef<S>,
    R: PermitSpec<S>,
{
    let coordination = Coordination::from_ref(state);
    let PermitRequest { semaphore, taking } =
        R::permit(parts, state).await.map_err(Reason::InvalidName)?;
    let options = &taking.options;
    let expiry = options.lease_duration();
    let permit = match semaphore {
        SemaphoreName::Plain { name, capacity } => {
            let name = request_name(name, "semaphore")?;
            let semaphore =
                Semaphore::new(&coordination, name, capacity).map_err(Reason::failed)?;
            take(
                &taking,
                &coordination,
                coordination.breaker(),
                Reason::full,
                || semaphore.try_acquire(expiry),
                || semaphore.acquire_with(options),
            )
            .await?
        }
        SemaphoreName::Keyed {
            name,
            key,
            capacity,
        } => {
            let name = request_name(name, "semaphore")?;
            let key = request_name(key, "client key")?;
            let semaphore =
                KeyedSemaphore::new(&coordination, name, capacity).map_err(Reason::failed)?;
            take(
                &taking,
                &coordination,
                coordination.breaker(),
                Reason::full,
                || semaphore.try_acquire(&key, expiry),
                || semaphore.acquire_with(&key, options),
            )
            .await?
        }
    };
    ManagedPermit::keep(permit, options).map_err(Reason::failed)
}
