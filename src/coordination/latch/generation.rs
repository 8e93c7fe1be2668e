//! One generation of a latch: counted down, read and waited for.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::CountdownLatch;
use crate::backend::delivery::Delivery;
use crate::backend::steps::latch::{
    LatchCountDownReply, LatchCountDownStep, LatchRead, LatchReadStep,
};
use crate::coordination::Attempt;
use crate::coordination::owner::{acquire_waiting, new_token};
use crate::error::{Error, ErrorKind, Result};

/// How often a waiter reads the latch on a backend that tells of no changes (the memory
/// backend): well under the 50 ms in which waiters are to see a count reach zero.
const POLL: Duration = Duration::from_millis(20);

/// What a count-down did.
///
/// # Example
///
/// ```
/// use leasehold::Coordination;
/// use leasehold::coordination::latch::{CountDown, CountdownLatch};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let latch = CountdownLatch::named(&Coordination::memory(), "shards");
/// let round = latch.reset(2, None).await?;
/// match round.count_down().await? {
///     CountDown::Remaining(0) => println!("the last one: the round is complete"),
///     CountDown::Remaining(left) => println!("{left} to go"),
///     // The round was reset (or expired): this work belongs to a round that is over.
///     CountDown::Stale => println!("too late for this round"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CountDown {
    /// Counted down: the count the generation has left (0: it is complete now).
    Remaining(u64),
    /// The latch no longer holds this generation (it was reset, or expired, or its key was
    /// deleted): nothing changed.
    Stale,
}

/// One generation of a [`CountdownLatch`], started by
/// [`create`](CountdownLatch::create) or [`reset`](CountdownLatch::reset), or joined by
/// [`join`](CountdownLatch::join). Cheap to clone: every clone names the same generation.
///
/// # Example
///
/// ```
/// use leasehold::Coordination;
/// use leasehold::coordination::latch::{CountDown, CountdownLatch};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let latch = CountdownLatch::named(&Coordination::memory(), "warm-up");
/// let generation = latch.reset(2, None).await?;
/// assert_eq!(generation.count_down().await?, CountDown::Remaining(1));
/// assert_eq!(generation.count().await?, Some(1));
/// assert_eq!(generation.count_down().await?, CountDown::Remaining(0));
/// assert!(generation.wait().await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LatchGeneration {
    latch: CountdownLatch,
    id: Arc<str>,
}

impl LatchGeneration {
    pub(super) fn new(latch: CountdownLatch, id: Arc<str>) -> Self {
        LatchGeneration { latch, id }
    }

    /// The generation's random id: 32 lower-case hex digits.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The latch it belongs to.
    pub fn latch(&self) -> &CountdownLatch {
        &self.latch
    }

    /// Counts the generation down by one, atomically on the server, exactly once.
    ///
    /// [`CountDown::Remaining`] with the count left (0: this count-down completed the
    /// generation), or [`CountDown::Stale`] when the latch no longer holds this generation
    /// and it did not complete. Fails with
    /// [`ErrorKind::AlreadyComplete`](crate::ErrorKind::AlreadyComplete) when its count is
    /// zero already (also once a completed generation was replaced or expired), and
    /// [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState) when a key holds
    /// something else; neither changes anything.
    ///
    /// Every count-down carries an id of its own, which the generation records: delivered
    /// twice, it counts once and answers the same. So a count-down whose answer is lost (a
    /// timeout, a connection lost after sending) is sent again, within the backend's
    /// [transient-retry bound](crate::backend::redis::RedisBackendBuilder::transient_retry),
    /// as a step that certainly did not apply is. An error still uncertain after that
    /// ([`is_outcome_uncertain`](crate::Error::is_outcome_uncertain)) means the count-down
    /// may have counted once, never twice. Sent again after its generation completed and
    /// was replaced, it answers `Remaining(0)` when it was the one that completed it, and
    /// `AlreadyComplete` otherwise (it may have counted before the last one); after its
    /// generation was replaced without completing, `Stale`.
    ///
    /// Out of memory (Redis's `OOM`), a count-down still counts: it grows the latch by its
    /// own record only, and refusing it would leave the generation one short for good.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after the request was sent, the count-down may have counted
    /// (once), unknown to the caller.
    pub async fn count_down(&self) -> Result<CountDown> {
        let inner = self.latch.inner();
        let id = new_token()?;
        let reply = inner
            .backend
            .run_idempotent(LatchCountDownStep {
                keys: inner.keys(),
                generation: &self.id,
                id: &id,
            })
            .await?;
        tracing::debug!(latch = %self.latch, generation = %self.id, ?reply, "latch count-down");
        match reply {
            LatchCountDownReply::Counted { remaining } => Ok(CountDown::Remaining(remaining)),
            LatchCountDownReply::Stale => Ok(CountDown::Stale),
            LatchCountDownReply::Completed => Err(Error::new(
                ErrorKind::AlreadyComplete,
                format!(
                    "the latch {} was counted down to zero already; nothing changed",
                    self.latch
                ),
            )),
        }
    }

    /// The generation's count now: `Some(0)` once it completed, also after the latch was
    /// reset or expired, for [ten minutes](super::COMPLETION_KEPT_FOR) after its
    /// completion; `None` when the latch no longer holds it and it did not complete.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn count(&self) -> Result<Option<u64>> {
        let inner = self.latch.inner();
        let read = inner
            .backend
            .run_idempotent(LatchReadStep {
                keys: inner.keys(),
                generation: Some(&self.id),
            })
            .await?;
        Ok(match read {
            LatchRead::Current(state) => Some(state.count),
            LatchRead::Completed => Some(0),
            LatchRead::None => None,
        })
    }

    /// Waits until the generation's count is zero (`true`), or until the latch no longer
    /// holds it and it did not complete (`false`: reset, expired or deleted before its last
    /// count-down). Returns at once when either is so already. A waiter that reads only
    /// after its completed generation was reset or expired still returns `true`, for ten
    /// minutes after the completion.
    ///
    /// Before each read it registers for the key's next invalidation (on Redis), and it
    /// reads again after each wake-up and at the latch's
    /// [re-read interval](CountdownLatch::reread_interval) without one; on the memory
    /// backend it reads every 20 ms. A read the backend cannot answer (*unavailable*) is
    /// tried again at the interval; a refusal (an ACL, corrupt state) ends the wait with its
    /// error. Bound the wait with `tokio::time::timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads, and dropping it changes nothing on the backend.
    pub async fn wait(&self) -> Result<bool> {
        let inner = self.latch.inner();
        let keys = [inner.key.as_slice()];
        // Where the backend tells of changes but this waiter cannot hear them (tracking
        // refused, or the backend away), reading at the re-read interval is the promise.
        let poll = if inner.backend.tells_changes() {
            inner.reread
        } else {
            POLL
        };
        acquire_waiting(&inner.backend, &keys, poll, || async {
            match self.count().await {
                Ok(Some(0)) => Ok(Attempt::Acquired(true)),
                Ok(None) => Ok(Attempt::Acquired(false)),
                Ok(Some(_)) => Ok(Attempt::Busy {
                    retry_after: Some(inner.reread),
                }),
                Err(err) if err.is_unavailable() => {
                    tracing::debug!(latch = %self.latch, error = %err, "latch unreadable; reading again at the interval");
                    Ok(Attempt::Busy {
                        retry_after: Some(inner.reread),
                    })
                }
                Err(err) => Err(err),
            }
        })
        .await
    }
}

impl fmt::Debug for LatchGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatchGeneration")
            .field("latch", &format_args!("{}", self.latch))
            .field("id", &self.id)
            .finish()
    }
}
