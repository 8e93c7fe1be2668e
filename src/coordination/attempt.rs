//! The answer to an acquisition that never waits, the same for every held thing.

use std::time::Duration;

/// The outcome of a `try_acquire` that never waits: the thing acquired (a
/// [`FencedLease`](crate::coordination::lock::FencedLease), a
/// [`SemaphorePermit`](crate::coordination::semaphore::SemaphorePermit)), or `Busy` (others
/// hold it) with when it may be free again.
///
/// Dropping an `Acquired` attempt drops what it holds, which releases it in the background.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::Attempt;
/// use leasehold::coordination::lock::FencedLock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "nightly-export");
/// let first = lock.try_acquire(Duration::from_secs(10)).await?;
/// assert!(first.is_acquired());
///
/// match lock.try_acquire(Duration::from_secs(10)).await? {
///     Attempt::Acquired(_lease) => unreachable!("the lock is held"),
///     Attempt::Busy { retry_after } => {
///         // The first lease expires within 10 s unless it is released or renewed.
///         assert!(retry_after.is_some_and(|wait| wait <= Duration::from_secs(10)));
///     }
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping an acquired lease or permit releases it"]
#[derive(Debug)]
pub enum Attempt<T> {
    /// Acquired, and held until released or dropped.
    Acquired(T),
    /// Others hold it; nothing changed.
    Busy {
        /// How long until expiries alone free it, on the backend's clock: a lease's time left,
        /// or when enough permits expire. `None` when that is not known: what holds it never
        /// expires, or this attempt's own grant arrived after its expiry had already run out
        /// by the local estimate (it was released at once: nobody could have used it). A
        /// release may free it sooner.
        retry_after: Option<Duration>,
    },
}

impl<T> Attempt<T> {
    /// Whether it was acquired.
    pub fn is_acquired(&self) -> bool {
        matches!(self, Attempt::Acquired(_))
    }

    /// What was acquired, if it was.
    pub fn acquired(self) -> Option<T> {
        match self {
            Attempt::Acquired(held) => Some(held),
            Attempt::Busy { .. } => None,
        }
    }

    /// For `Busy`, how long until expiries alone free it (see [`Attempt::Busy`]).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Attempt::Acquired(_) => None,
            Attempt::Busy { retry_after } => *retry_after,
        }
    }
}
