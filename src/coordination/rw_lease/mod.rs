//! Read-write leases: any number of readers at once, or one writer alone, each under an
//! expiring lease of its own on the backend's clock.
//!
//! - [`ReadWriteLock`]: the lock by name; [`try_read`](ReadWriteLock::try_read) and
//!   [`try_write`](ReadWriteLock::try_write) take a lease now or say how long until it could
//!   be had, [`read`](ReadWriteLock::read) and [`write`](ReadWriteLock::write) wait for one.
//! - [`RwLease`]: one holder's lease, read or write ([`Access`]), which it renews, verifies,
//!   [downgrades](RwLease::downgrade) (write to read) and releases.
//! - [`ManagedRwLease`]: a lease renewed by a background task, with the ownership signal.
//!
//! # Guarantees
//!
//! - By the backend's clock, while a write lease is live no other lease is, and while a read
//!   lease is live no write lease is. Each acquisition is decided in one atomic step that
//!   first removes every entry whose deadline has passed.
//! - Each holder has its own expiry, and each step on a lease touches that holder's entry
//!   alone: a renewal never shortens or extends another reader's lease, and a stale handle
//!   can never renew or remove another holder's. The key lives as long as its longest
//!   holder.
//! - No reentrancy: every acquisition is a holder of its own, with its own token, even in
//!   one task. A task that holds a read lease and waits for the write lease waits for
//!   itself until its read lease runs out; one that holds a read lease and waits for
//!   another read lease waits behind any writer waiting meanwhile, which waits for the
//!   first read lease: until it runs out too.
//! - No upgrade from read to write: two readers upgrading at once would each wait for the
//!   other. A write lease can be [downgraded](RwLease::downgrade) to a read lease in one
//!   step, with no gap in which another writer could come in.
//!
//! # The phase-fair order
//!
//! Leases taken by waiting ([`read`](ReadWriteLock::read), [`write`](ReadWriteLock::write)
//! and the managed and extractor forms) go in the phase-fair order, so that neither side
//! starves:
//!
//! - readers that came while a writer held go in together as soon as it is gone, before the
//!   next writer;
//! - a waiting writer goes before the readers that came after it, which wait for its turn;
//! - waiting writers go in the order they began waiting.
//!
//! Each waiter records itself in the set as an expiring entry, and every acquisition,
//! waiting or not, honours the records: an immediate [`try_read`](ReadWriteLock::try_read)
//! or [`try_write`](ReadWriteLock::try_write) never jumps the line. So, with holds of at most
//! `R` for readers and `W` for writers, and `n` writers waiting ahead of it, a reader waits
//! at most one reader hold and one writer hold (`R + W`), and a writer at most
//! `(n + 1) × (R + W)`, plus a round trip per turn: a reader phase is never longer than one
//! reader hold, because readers that come while a writer waits wait for the phase after it.
//! Measured with 4 reader processes (20 ms holds) and 2 writer processes (5 ms holds) for
//! 10 s on one Redis 7: readers waited 11 ms at p50, 15 ms at p99 and 48 ms at worst (bound
//! 25 ms, and two turns), writers 60, 66 and 73 ms (bound 50 ms, and four turns; a turn, a
//! wake-up and a round trip, cost a few milliseconds there).
//!
//! A waiter's record lasts [`waiting_bound`](ReadWriteLock::waiting_bound) from when it was
//! written (5 s unless set), renewed while it waits. A wait that ends without a lease takes
//! its record out in the background; a waiter that crashes holds the others back for that
//! bound at most. Writers go in the order they began waiting on the backend's clock, as
//! each read it (to about a millisecond across processes), however long they wait.
//!
//! # Why not a weighted semaphore
//!
//! tokio's `RwLock` is a semaphore whose writer takes every permit. Here that would need a
//! weight on every permit and a sum over all holders in every step, and it could not say
//! "no new reader while a writer waits" at all. One sorted set with the writer, the readers
//! and each kind of waiter in a score range of its own answers every question of an
//! acquisition with a range lookup, whatever the number of readers.
//!
//! # Failures
//!
//! | step | unavailable (no answer, nothing sent) | refused (the server said no) | uncertain (may have applied) |
//! |---|---|---|---|
//! | acquire | the error; nothing taken | the error (an ACL, corrupt state); nothing changed | the error; a lease it may have been granted is released by owner token once the step's server-side deadline has passed, so a late delivery takes nothing |
//! | renew | the error; the handle as it was | the error; the handle as it was | the error; held with the earlier of the two expiries |
//! | downgrade | the error; still a write lease | the error; still a write lease | the error; a reader, which another downgrade settles |
//! | release | retried once, bounded | the error | uncertain until released again; dropping releases it in the background |
//!
//! A [`ManagedRwLease`] rides out a stall shorter than its lease's estimate: it renews again
//! while the estimate lasts, and fires its loss signal only when a renewal finds the lease
//! gone or the estimate runs out.
//!
//! The leases live in one Redis key on one primary. A failover that loses acknowledged
//! writes (asynchronous replication) can lose a lease, and let a writer in beside its
//! holder. A holder paused past its lease (a long GC, a stalled VM) may wake and act while
//! another holds the lock. A write lease therefore carries a fencing token
//! ([`RwLease::fencing_token`]), from a counter beside the set that never goes back (as a
//! [`FencedLock`'s](crate::coordination::lock::FencedLock#tokens-never-go-back)): send it
//! with every write, and have the resource refuse a token lower than the highest it has
//! accepted.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::rw_lease::ReadWriteLock;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! let coordination = Coordination::memory();
//! // Waiters go in the phase-fair order; one that crashes holds the others back 2 s at most.
//! let lock = ReadWriteLock::named(&coordination, "price-list")
//!     .waiting_bound(Duration::from_secs(2))?;
//!
//! let mut reader = lock.read(Duration::from_secs(10)).await?;
//! // ... read the price list ...
//! reader.release().await?;
//!
//! let mut writer = lock.write(Duration::from_secs(10)).await?;
//! // ... rewrite it, then go on reading it beside other readers:
//! writer.downgrade().await?;
//! writer.release().await?;
//! # Ok(()) }
//! ```

mod lease;
mod read_write_lock;

pub use lease::{ManagedRwLease, RwLease};
pub use read_write_lock::{DEFAULT_WAITING_BOUND, ReadWriteLock};

/// What a [`RwLease`] allows: shared reading, or exclusive writing.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rw_lease::{Access, ReadWriteLock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = ReadWriteLock::named(&Coordination::memory(), "catalog");
/// let lease = lock.try_write(Duration::from_secs(10)).await?.acquired().expect("free");
/// assert_eq!(lease.access(), Access::Write);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Shared with other readers; no writer holds the lease meanwhile.
    Read,
    /// Exclusive: no reader and no other writer holds the lease meanwhile.
    Write,
}
