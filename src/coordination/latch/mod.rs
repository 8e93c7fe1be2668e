//! Countdown latches: a count that participants in any process count down, and that waiters
//! on any connection see reach zero, one generation at a time.
//!
//! - [`CountdownLatch`]: a latch by name, which starts a generation
//!   ([`create`](CountdownLatch::create), [`reset`](CountdownLatch::reset)) or joins the
//!   current one ([`join`](CountdownLatch::join)).
//! - [`LatchGeneration`]: one generation, which is counted down, read and waited for.
//!
//! # Guarantees
//!
//! - Each count-down takes exactly one from its generation's count, atomically on the
//!   server, and never below zero: a count-down of a complete generation fails with
//!   [`ErrorKind::AlreadyComplete`](crate::ErrorKind::AlreadyComplete), and one of a
//!   generation the latch no longer holds (reset, expired or deleted) answers
//!   [`CountDown::Stale`]. Neither changes anything.
//! - A wait returns `true` once its generation's count is zero, and `false` once the latch
//!   holds another generation or none. Every waiter wakes, on every connection: each one
//!   registers for the key's invalidation **before** it reads, and reads the generation and
//!   count again after every wake-up and at its
//!   [re-read interval](CountdownLatch::reread_interval) without one, so a lost notification
//!   delays a waiter by that interval at most and never blocks it.
//!
//! # Failures
//!
//! - A count-down whose answer is lost (a timeout, a connection lost after sending, the
//!   future dropped) may have counted: the error says so
//!   ([`is_outcome_uncertain`](crate::Error::is_outcome_uncertain)), and the count-down is
//!   never sent again by the crate, since sending it twice could count twice. Read the count
//!   to learn where it stands.
//! - A wait rides out an unavailable backend: it reads again at its interval until the
//!   backend answers (bound it with `tokio::time::timeout`). A refusal (an ACL, corrupt
//!   state) ends it with the error. Dropping a wait changes nothing on the backend.
//! - The latch lives in one Redis key on one primary. A failover that loses acknowledged
//!   writes (asynchronous replication) can lose count-downs or a reset; a restored backup
//!   brings back an older count. Where that matters, use a consensus-backed store.
//! - The caller owns the latch's lifetime. Give a latch whose participants might die an
//!   expiry: once it passes, the latch is gone (waits return `false`, count-downs are
//!   stale). A latch without one stays until it is reset or its key is deleted.
//!
//! # Storage
//!
//! One Redis key per latch, `latch:{<name length>:<name>}` under the backend's prefix: a hash
//! with the current generation's random id (`gen`) and its count (`count`), with the expiry
//! its creator gave it. A name longer than
//! [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) bytes is stored as its digest.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::latch::{CountDown, CountdownLatch};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! let coordination = Coordination::memory();
//! let latch = CountdownLatch::named(&coordination, "nightly-import");
//! // Three shards to import; the latch's key goes away after an hour whatever happens.
//! let round = latch.reset(3, Some(Duration::from_secs(3600))).await?;
//!
//! let waiter = tokio::spawn({
//!     let round = round.clone();
//!     async move { round.wait().await }
//! });
//! for _shard in 0..3 {
//!     // ... each shard's worker, in any process, joins and counts down when done:
//!     let joined = latch.join().await?.expect("a round is under way");
//!     assert!(matches!(joined.count_down().await?, CountDown::Remaining(_)));
//! }
//! assert!(waiter.await.expect("the waiter")?, "all three shards are done");
//! assert_eq!(round.count().await?, Some(0));
//! # Ok(()) }
//! ```

mod countdown_latch;
mod generation;

pub use countdown_latch::{CountdownLatch, DEFAULT_REREAD_INTERVAL, MAX_COUNT};
pub use generation::{CountDown, LatchGeneration};
