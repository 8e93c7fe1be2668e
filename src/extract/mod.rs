//! axum extractors.
//!
//! - [`Lease`]: the handler runs only while holding a named, self-renewing fenced lease.
//! - [`ReadLease`] and [`WriteLease`]: the handler runs only while sharing a named
//!   read-write lease for reading, or holding it alone for writing.
//! - [`Permit`]: the handler runs only while holding one of a named semaphore's permits.
//! - [`RateLimitInfo`]: the rate-limit decision for the request, behind a
//!   [`RedisRateLimitLayer`](crate::layer::rate_limit::RedisRateLimitLayer) (re-exported
//!   from [`layer::rate_limit`](crate::layer::rate_limit)).
//!
//! Each held extractor is named by a spec of the application's: a [`LeaseSpec`] (or a
//! [`PermitSpec`]) that makes, from the request and the router's state, a [`LeaseRequest`]
//! (or a [`PermitRequest`]): the name, how long to wait, how the lease is kept, and the
//! longest `Retry-After` of a refusal. Every refusal is a [`LeaseRejection`]. A handler runs
//! its work with `while_held` to have it stopped, and answered [`HoldingLost`], as soon as
//! what it holds is lost.

mod lease;
mod permit;
mod rejection;
mod rw_lease;
mod spec;
mod taking;
mod while_held;

pub use crate::layer::rate_limit::{MissingRateLimitInfo, RateLimitInfo};
pub use lease::{HeldLease, Lease};
pub use permit::{Permit, PermitRequest, PermitSpec};
pub use rejection::LeaseRejection;
pub use rw_lease::{ReadLease, WriteLease};
pub use spec::{DEFAULT_LEASE_TIMEOUT, LeaseRequest, LeaseSpec};
pub use while_held::HoldingLost;
