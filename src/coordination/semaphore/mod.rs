//! Distributed counting semaphores: at most N permits held at once across every process
//! that shares the backend.
//!
//! - [`Semaphore`]: one capacity under one name.
//! - [`KeyedSemaphore`]: a capacity per client key and/or a global one, both taken in one
//!   atomic step (for example at most 2 concurrent exports per user and 20 in all).
//!
//! [`try_acquire`](Semaphore::try_acquire) is immediate ([`Attempt`](crate::coordination::Attempt));
//! [`acquire`](Semaphore::acquire) waits for a permit. Neither queues nor promises fairness.
//! Each permit ([`SemaphorePermit`]) is held under its own owner token, expires at a time on
//! the backend's clock, and is pruned by the next step once expired, so capacity
//! abandoned by a crashed holder comes back without a cleanup worker. A permit that its
//! holder drops, or that may have been granted without an answer, is released in the
//! background;
//! [`abandoned_releases`](crate::coordination::ownership::abandoned_releases) counts the
//! releases that had to be given up.
//! [`ManagedPermit`] renews a permit by itself and says when it is lost.

mod capacity;
mod keyed;
mod permit;
#[allow(clippy::module_inception)] // the type the module is named after
mod semaphore;
mod sets;

pub use capacity::Capacity;
pub use keyed::KeyedSemaphore;
pub use permit::{ManagedPermit, SemaphorePermit};
pub use semaphore::Semaphore;
