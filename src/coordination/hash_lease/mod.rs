//! Named leases in the fields of one hash: one field per lease, each with its own expiry on
//! the backend's clock, its value the holder's owner token.
//!
//! - [`LeaseHash`]: a group of named leases in one hash;
//!   [`try_acquire`](LeaseHash::try_acquire) takes a field now or says how long its holder
//!   has left, [`acquire`](LeaseHash::acquire) waits for it.
//! - [`FieldLease`]: one holder's lease of one field, which it renews, verifies and
//!   releases; [`ManagedFieldLease`] keeps one renewed, with the ownership signal.
//!
//! # Servers
//!
//! On Redis, field leases need hash field expiry: Redis 7.4 or later, Valkey 9.0 or later.
//! The backend learns once per connection whether its server has it (`COMMAND INFO
//! HPEXPIRE`, asked again on every new connection, which may reach another server after a
//! failover); on a server without it
//! (Redis 6.2 and 7.0, Valkey 8), every step fails with
//! [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported), naming the feature and the
//! versions, before anything is written. The memory backend keeps a deadline per field.
//!
//! # Guarantees
//!
//! - By the backend's clock, a field is held by at most one live lease. Each step checks the
//!   owner token in the field's value, so a stale handle can change neither a replacement
//!   lease of its field nor any other field of the hash. Field names are any bytes.
//! - Every write sets the field's absolute expiry in the same atomic step as its value (a
//!   plain `HSET` would clear the expiry and leave the lease held forever), and the hash
//!   carries no key-level expiry: one already there is refused as corrupt state before
//!   anything is written. The hash goes with its last field.
//! - The number of live leases is never read with `HLEN`, which counts expired fields the
//!   server has not removed yet.
//!
//! # Failures
//!
//! As every held handle's ([`Held`](crate::coordination::Held#failures)): an acquisition
//! that may have applied is released by owner token once its server-side deadline has
//! passed; a renewal without an answer leaves the lease held with the earlier of the two
//! expiries; a release without an answer leaves it uncertain until released again. The
//! leases live on one primary: a failover that loses acknowledged writes can lose a lease.
//! Waiters on one hash wake together on any change to it (the server tells changes per key),
//! and each tries its own field again; notifications are hints, and a waiter also wakes when
//! its holder's time runs out.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::hash_lease::LeaseHash;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! // One import at a time per shard, every shard's lease in one hash.
//! let shards = LeaseHash::named(&Coordination::memory(), "import:2026-12-01");
//! let mut first = shards.acquire("shard-1", Duration::from_secs(30)).await?;
//! let second = shards.try_acquire("shard-2", Duration::from_secs(30)).await?;
//! assert!(second.is_acquired(), "another field, another lease");
//! first.release().await?;
//! # Ok(()) }
//! ```

mod field_lease;
mod lease_hash;

pub use field_lease::{FieldLease, ManagedFieldLease};
pub use lease_hash::LeaseHash;
