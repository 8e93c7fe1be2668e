//! The `ReadLease` and `WriteLease` extractors: a handler that runs only while it shares a
//! named read-write lease for reading, or holds it alone for writing.

use std::fmt;
use std::marker::PhantomData;

use axum::extract::{FromRef, FromRequestParts};
use http::request::Parts;

use super::rejection::{LeaseRejection, Reason};
use super::spec::LeaseSpec;
use super::taking::{request_name, take};
use super::while_held::{HoldingLost, while_held};
use crate::Coordination;
use crate::coordination::ownership::OwnershipLost;
use crate::coordination::rw_lease::{Access, ManagedRwLease, ReadWriteLock};

/// A held, self-renewing [read lease](crate::coordination::rw_lease) named by `R` for this
/// request: the handler runs only while no writer holds the lease, beside any number of
/// other readers, and the lease is released when the handler is done.
///
/// The lock is [`ReadWriteLock::named`] with the name of the
/// [`LeaseRequest`](super::LeaseRequest) that `R` makes, on the [`Coordination`] of the
/// router's state. A request that waits (see
/// [`LeaseRequest::max_wait`](super::LeaseRequest::max_wait)) waits in the phase-fair order:
/// the readers that came while a writer held go in together before the next writer, and a
/// waiting writer goes before the readers that came after it, so neither side starves (see
/// [`LeaseRequest::waiting_bound`](super::LeaseRequest::waiting_bound)). The answers are those of
/// [`Lease`](super::Lease): `409 Conflict` with `Retry-After` while a writer holds it, the
/// key error's status without a name, `503` when the backend fails or is too slow, `500`
/// when the request cannot be kept as configured.
///
/// # Example
///
/// ```
/// use axum::http::request::Parts;
/// use axum::{Router, routing::get};
/// use leasehold::Coordination;
/// use leasehold::extract::{LeaseRequest, LeaseSpec, ReadLease, WriteLease};
/// use leasehold::layer::key::KeyError;
///
/// struct Catalog;
///
/// impl<S: Sync> LeaseSpec<S> for Catalog {
///     async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
///         Ok(LeaseRequest::named("catalog"))
///     }
/// }
///
/// async fn show(_reading: ReadLease<Catalog>) -> &'static str {
///     "many requests read the catalog at once"
/// }
///
/// async fn replace(_writing: WriteLease<Catalog>) -> &'static str {
///     "one request rewrites it, while nobody reads"
/// }
///
/// let app: Router = Router::new()
///     .route("/catalog", get(show).put(replace))
///     .with_state(Coordination::memory());
/// # let _ = app;
/// ```
#[doc = include_str!("debug_handler.md")]
pub struct ReadLease<R> {
    lease: ManagedRwLease,
    spec: PhantomData<fn() -> R>,
}

/// A held, self-renewing write lease named by `R` for this request: the handler runs only
/// while it alone holds the [read-write lease](crate::coordination::rw_lease), and the lease
/// is released when the handler is done. See [`ReadLease`] for the lock and the answers; a
/// write lease is refused (`409`) while anyone reads or writes.
///
/// Redis restarted without persistence, or a failover that lost the last writes, frees a
/// write lease while its handler may still be writing, and so does a handler paused past its
/// lease: send [`fencing_token`](Self::fencing_token) with every write a stale holder must
/// not make, and have the resource refuse a token lower than the highest it has accepted.
/// Tokens never go back, even when the lock's counter is lost.
///
/// # Example
///
/// A write that goes on reading once the exclusive part is done, downgraded in one step:
///
/// ```
/// use axum::http::request::Parts;
/// use axum::{Router, routing::put};
/// use leasehold::Coordination;
/// use leasehold::extract::{LeaseRequest, LeaseSpec, WriteLease};
/// use leasehold::layer::key::KeyError;
///
/// struct Catalog;
///
/// impl<S: Sync> LeaseSpec<S> for Catalog {
///     async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
///         Ok(LeaseRequest::named("catalog"))
///     }
/// }
///
/// async fn replace(writing: WriteLease<Catalog>) -> String {
///     // ... rewrite the catalog alone, each write carrying the fencing token ...
///     let _token: u64 = writing.fencing_token();
///     let mut lease = writing.into_managed();
///     match lease.downgrade().await {
///         // ... then read it back beside other readers ...
///         Ok(true) => "replaced".to_owned(),
///         Ok(false) => "replaced, but the lease was lost".to_owned(),
///         Err(err) => format!("replaced; the downgrade failed: {err}"),
///     }
/// }
///
/// let app: Router = Router::new()
///     .route("/catalog", put(replace))
///     .with_state(Coordination::memory());
/// # let _ = app;
/// ```
#[doc = include_str!("debug_handler.md")]
pub struct WriteLease<R> {
    lease: ManagedRwLease,
    spec: PhantomData<fn() -> R>,
}

macro_rules! held_rw_lease {
    ($extractor:ident, $access:expr) => {
        impl<R> $extractor<R> {
            /// The signal that fires if the lease is lost while the handler runs.
            pub fn ownership(&self) -> OwnershipLost {
                self.lease.ownership()
            }

            /// Runs `work` only while the lease is held: its output, or [`HoldingLost`] (a
            /// `503` the handler can return as is) as soon as the loss is known, the work
            /// then dropped at its next await (see [`Lease::while_held`](super::Lease::while_held)).
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: dropping it drops `work`, and changes nothing held.
            pub async fn while_held<F: std::future::Future>(
                &self,
                work: F,
            ) -> Result<F::Output, HoldingLost> {
                while_held(self.ownership(), work).await
            }

            /// The managed lease itself.
            pub fn managed(&self) -> &ManagedRwLease {
                &self.lease
            }

            /// The managed lease, to keep it beyond the handler, or to
            /// [downgrade](ManagedRwLease::downgrade) a write lease.
            pub fn into_managed(self) -> ManagedRwLease {
                self.lease
            }
        }

        impl<R> fmt::Debug for $extractor<R> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($extractor))
                    .field("lease", &self.lease)
                    .finish()
            }
        }

        impl<S, R> FromRequestParts<S> for $extractor<R>
        where
            S: Send + Sync,
            Coordination: FromRef<S>,
            R: LeaseSpec<S>,
        {
            type Rejection = LeaseRejection;

            async fn from_request_parts(
                parts: &mut Parts,
                state: &S,
            ) -> Result<Self, Self::Rejection> {
                match take_rw::<S, R>(parts, state, $access).await {
                    Ok(lease) => Ok($extractor {
                        lease,
                        spec: PhantomData,
                    }),
                    Err(reason) => Err(LeaseRejection::new(reason, parts, R::rejection_response)),
                }
            }
        }
    };
}

held_rw_lease!(ReadLease, Access::Read);
held_rw_lease!(WriteLease, Access::Write);

impl<R> WriteLease<R> {
    /// The write lease's fencing token, to send with every protected write: greater than
    /// every token a write lease of the same name took before it (see
    /// [`RwLease::fencing_token`](crate::coordination::rw_lease::RwLease::fencing_token)).
    pub fn fencing_token(&self) -> u64 {
        // A write lease always has one.
        self.lease.fencing_token().unwrap_or_default()
    }
}

/// Takes `R`'s read-write lease with `access` for the request, or says why not.
async fn take_rw<S, R>(
    parts: &mut Parts,
    state: &S,
    access: Access,
) -> Result<ManagedRwLease, Reason>
where
    S: Send + Sync,
    Coordination: FromRef<S>,
    R: LeaseSpec<S>,
{
    let coordination = Coordination::from_ref(state);
    let request = R::lease(parts, state).await.map_err(Reason::InvalidName)?;
    let bound = request.waiting_bound_asked();
    let (name, taking) = request.into_parts();
    let name = request_name(name, "lease")?;
    let mut lock = ReadWriteLock::named(&coordination, &name);
    if let Some(bound) = bound {
        lock = lock.waiting_bound(bound).map_err(Reason::Misconfigured)?;
    }
    let options = &taking.options;
    let lease = take(
        &taking,
        &coordination,
        coordination.breaker(),
        Reason::held,
        || async {
            let lease = options.lease_duration();
            match access {
                Access::Read => lock.try_read(lease).await,
                Access::Write => lock.try_write(lease).await,
            }
        },
        || lock.acquire_with(access, options),
    )
    .await?;
    ManagedRwLease::keep(lease, options).map_err(Reason::failed)
}
