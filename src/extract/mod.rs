//! axum extractors.
//!
//! - [`Lease`]: the handler runs only while holding a named, self-renewing fenced lease.
//! - [`RateLimitInfo`]: the rate-limit decision for the request, behind a
//!   [`RedisRateLimitLayer`](crate::layer::rate_limit::RedisRateLimitLayer) (re-exported
//!   from [`layer::rate_limit`](crate::layer::rate_limit)).

mod lease;

pub use crate::layer::rate_limit::{MissingRateLimitInfo, RateLimitInfo};
pub use lease::{DEFAULT_LEASE_TIMEOUT, Lease, LeaseRejection, LeaseSpec};
