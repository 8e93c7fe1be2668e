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
//!   [`CountDown::Stale`], or `AlreadyComplete` when that generation completed first.
//!   Neither changes anything.
//! - **A count-down counts exactly once.** It carries an id of its own, which its
//!   generation records (and forgets with it): delivered twice (sent again after a lost
//!   answer, or duplicated by the network), it counts once and answers the same.
//! - A wait returns `true` once its generation's count is zero, and `false` once the latch
//!   holds another generation or none and its own did not complete. Every waiter wakes, on
//!   every connection: each one registers for the key's invalidation **before** it reads,
//!   and reads the generation and count again after every wake-up and at its
//!   [re-read interval](CountdownLatch::reread_interval) without one, so a lost notification
//!   delays a waiter by that interval at most and never blocks it.
//! - **A completion is not lost to a reset.** A generation that completed reads as complete
//!   to its waiters and to [`count`](LatchGeneration::count) after the latch was reset or
//!   expired, for [ten minutes](COMPLETION_KEPT_FOR) after its completion and among the
//!   latch's [latest 1,000](COMPLETIONS_KEPT) completed generations: a coordinator may start
//!   the next round as soon as the last one completes.
//!
//! # Failures
//!
//! - A count-down whose answer is lost (a timeout, a connection lost after sending) is sent
//!   again with its id within the backend's
//!   [transient-retry bound](crate::backend::redis::RedisBackendBuilder::transient_retry),
//!   and counts once. Past the bound, the error says it may have counted
//!   ([`is_outcome_uncertain`](crate::Error::is_outcome_uncertain)): once, never twice. A
//!   count-down dropped after it was sent counts at most once.
//! - Out of memory (Redis's `OOM`), no generation is started
//!   ([`ErrorKind::OutOfMemory`](crate::ErrorKind::OutOfMemory), nothing changed), while
//!   count-downs of a running one still count: each grows the latch by its own record only,
//!   and refusing them would leave the round one short for good.
//! - A wait rides out an unavailable backend: it reads again at its interval until the
//!   backend answers (bound it with `tokio::time::timeout`). A refusal (an ACL, corrupt
//!   state) ends it with the error. Dropping a wait changes nothing on the backend.
//! - The latch lives in two Redis keys on one primary. A failover that loses acknowledged
//!   writes (asynchronous replication), or a restart without persistence, can lose
//!   count-downs, their records, a completion or a reset; a restored backup brings back an
//!   older count. Where that matters, use a consensus-backed store.
//! - The caller owns the latch's lifetime. Give a latch whose participants might die an
//!   expiry: once it passes, the latch is gone (waits of a generation that did not complete
//!   return `false`, count-downs are stale). A latch without one stays until it is reset or
//!   its key is deleted.
//!
//! # Storage
//!
//! Two Redis keys per latch, under the backend's prefix, in one cluster slot:
//!
//! - `latch:{<name length>:<name>}`: a hash with the current generation's random id
//!   (`gen`), its count (`count`) and, for each of its count-downs, `d:<count-down id>` with
//!   the count it left; with the expiry its creator gave it. Started with no expiry
//!   (`None`), it stays until a reset with one, or until deleted by hand: the one key of a
//!   latch that can outlive its use, so give an expiry to latches named by what a client
//!   chooses (a job id from a request).
//! - `latch:{<name length>:<name>}:done`: a sorted set of the completed generations (and
//!   beside each one the id of the count-down that completed it), scored by the server time
//!   of completion; it expires ten minutes after the latest completion and keeps at most
//!   1,000 generations.
//!
//! A name longer than [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) bytes is stored
//! as its digest.
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

pub use countdown_latch::{
    COMPLETION_KEPT_FOR, COMPLETIONS_KEPT, CountdownLatch, DEFAULT_REREAD_INTERVAL, MAX_COUNT,
};
pub use generation::{CountDown, LatchGeneration};
