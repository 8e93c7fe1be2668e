//! The answer to an immediate acquisition.

use std::time::Duration;

use super::SemaphorePermit;

/// The outcome of [`Semaphore::try_acquire`](super::Semaphore::try_acquire) or
/// [`KeyedSemaphore::try_acquire`](super::KeyedSemaphore::try_acquire): a permit, or a full
/// semaphore and when expiries alone would free a slot.
///
/// Dropping an `Acquired` attempt drops its permit, which releases it in the background.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::semaphore::{Attempt, Semaphore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let semaphore = Semaphore::new(&Coordination::memory(), "uploads", 1)?;
/// let first = semaphore.try_acquire(Some(Duration::from_secs(10))).await?;
/// assert!(first.is_acquired());
///
/// match semaphore.try_acquire(Some(Duration::from_secs(10))).await? {
///     Attempt::Acquired(_permit) => unreachable!("the only permit is taken"),
///     Attempt::Full { retry_after } => {
///         // The first permit expires within 10 s unless it is released or renewed.
///         assert!(retry_after.is_some_and(|wait| wait <= Duration::from_secs(10)));
///     }
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping an acquired permit releases it"]
#[derive(Debug)]
pub enum Attempt {
    /// A permit is held.
    Acquired(SemaphorePermit),
    /// Every slot is taken; nothing was acquired.
    Full {
        /// How long until expiries alone free a slot (in every full set, for a
        /// [`KeyedSemaphore`](super::KeyedSemaphore)), measured on the backend's clock.
        /// Releases may free one sooner and renewals keep one taken longer. `None` when that
        /// takes a permit that never expires. Suitable for `Retry-After`.
        retry_after: Option<Duration>,
    },
}

impl Attempt {
    /// Whether a permit was acquired.
    pub fn is_acquired(&self) -> bool {
        matches!(self, Attempt::Acquired(_))
    }

    /// The permit, if one was acquired.
    pub fn into_permit(self) -> Option<SemaphorePermit> {
        match self {
            Attempt::Acquired(permit) => Some(permit),
            Attempt::Full { .. } => None,
        }
    }

    /// For a full semaphore, how long until expiries free a slot (see [`Attempt::Full`]);
    /// `None` when a permit was acquired or no expiry will free one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Attempt::Acquired(_) => None,
            Attempt::Full { retry_after } => *retry_after,
        }
    }
}
