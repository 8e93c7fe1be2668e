//! Fenced locks: mutual exclusion under an expiring lease, with a fencing token that lets
//! the protected resource refuse a holder whose lease has run out.
//!
//! - [`FencedLock`]: the lock, over a lease key and a fencing counter key in one slot.
//! - [`FencedLease`]: one holder's lease, with its [fencing token](FencedLease::fencing_token)
//!   and its random [owner token](FencedLease::owner_token).
//!
//! [`FencedLock::try_acquire`] takes the lock now or says how long its holder has left
//! ([`Attempt`](crate::coordination::Attempt)); [`FencedLock::acquire`] waits for it, woken when the lease key changes
//! (on Redis) rather than polling. The owner
//! token guards renewal, verification and release, so a stale holder can never extend or
//! delete a later holder's lease ([`Release`] says what a release found). A lease that its
//! holder drops, or that may have been granted without an answer, is released in the
//! background;
//! [`abandoned_releases`](crate::coordination::ownership::abandoned_releases) counts the
//! releases that had to be given up.
//!
//! # Fencing
//!
//! A lease expires while its holder may still be working: after a long pause it can wake
//! up and write, while a new holder writes too. The lock cannot prevent that; the resource
//! can. Each acquisition takes the next value of the lock's counter, so a later holder
//! always has a higher token. Send the token with every write and have the resource, in the
//! same atomic step as the write, refuse a token lower than the highest it has accepted:
//!
//! ```
//! use std::sync::Mutex;
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::lock::FencedLock;
//!
//! /// Stands in for a database row, a file service...: whatever enforces the order.
//! struct Resource(Mutex<(u64, String)>);
//!
//! impl Resource {
//!     fn write(&self, fencing_token: u64, value: &str) -> bool {
//!         let mut state = self.0.lock().unwrap();
//!         // Equal tokens are the same holder writing again.
//!         if fencing_token < state.0 {
//!             return false;
//!         }
//!         *state = (fencing_token, value.to_owned());
//!         true
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> leasehold::Result<()> {
//! let lock = FencedLock::named(&Coordination::memory(), "invoice:42");
//! let resource = Resource(Mutex::new((0, String::new())));
//!
//! let slow = lock.try_acquire(Duration::from_secs(1)).await?.acquired().expect("free");
//! tokio::time::sleep(Duration::from_secs(2)).await; // paused past its lease
//! let fresh = lock.try_acquire(Duration::from_secs(1)).await?.acquired().expect("expired");
//!
//! assert!(resource.write(fresh.fencing_token(), "new owner"));
//! assert!(!resource.write(slow.fencing_token(), "stale owner")); // refused
//! # Ok(()) }
//! ```
//!
//! Tokens never go back, even when the counter is lost with the server's memory: see
//! [`FencedLock`](FencedLock#tokens-never-go-back).

mod durability;
mod fenced_lease;
mod fenced_lock;
pub mod redlock;

/// What a release found: the answer every held primitive shares, re-exported here where the
/// lock's lease first used it.
pub use crate::coordination::Release;
pub use durability::{DEFAULT_DURABILITY_TIMEOUT, Durability, MAX_DURABILITY_TIMEOUT};
pub use fenced_lease::{FencedLease, ManagedLease};
pub use fenced_lock::FencedLock;
pub(crate) use fenced_lock::LockKeys;
