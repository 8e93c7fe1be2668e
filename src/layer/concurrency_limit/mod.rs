//! Concurrency limiting as a tower layer: a request holds a slot of a semaphore shared
//! through Redis until its response body ends, renewed while it streams.
//!
//! See [`RedisConcurrencyLimitLayer`].

mod answer;
mod config;
mod cut;
mod fallback;
mod future;
mod guard;
mod layer;
mod service;

pub use crate::coordination::semaphore::Capacity;
pub use cut::{HoldLimitReached, PermitLost};
pub use fallback::DEFAULT_FALLBACK_KEYS;
pub use future::ResponseFuture;
pub use layer::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_LEASE, DEFAULT_MAX_HOLD, MIN_LEASE, RedisConcurrencyLimitLayer,
};
pub use service::ConcurrencyLimit;
