//! Concurrency limiting as a tower layer: a request holds a slot of a semaphore shared
//! through Redis until its response body ends, renewed while it streams.
//!
//! See [`RedisConcurrencyLimitLayer`].

mod answer;
mod future;
mod guard;
mod layer;
mod service;

/// [`crate::BoxError`], where the concurrency layer's body errors were first named.
pub use crate::BoxError;
pub use crate::coordination::semaphore::Capacity;
pub use crate::layer::admission::{HoldLimitReached, PermitLost, ResponseBody as GuardedBody};
pub use future::ResponseFuture;
pub use layer::{DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_LEASE, MIN_LEASE, RedisConcurrencyLimitLayer};
pub use service::ConcurrencyLimit;

pub(crate) use guard::{Cut, StreamGuard};
