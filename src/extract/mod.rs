//! axum extractors.
//!
//! - [`Lease`]: the handler runs only while holding a named, self-renewing fenced lease.

mod lease;

pub use lease::{Lease, LeaseRejection, LeaseSpec};
