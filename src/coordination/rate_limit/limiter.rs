//! Any rate limiter, behind one type.

use super::{FixedWindow, RateLimitDecision, RateLimitPolicy};
use crate::error::Result;

/// Any of the crate's rate limiters, for code (such as the HTTP layer) that works with
/// whichever algorithm it is given.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{FixedWindow, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let limiter: RateLimiter =
///     FixedWindow::new(&Coordination::memory(), "api", 10, Duration::from_secs(1))?.into();
/// assert_eq!(limiter.policy().quota(), 10);
/// assert!(limiter.acquire(b"client", 1).await?.is_granted());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum RateLimiter {
    /// A [`FixedWindow`] limiter.
    FixedWindow(FixedWindow),
}

impl RateLimiter {
    /// The limiter's policy.
    pub fn policy(&self) -> &RateLimitPolicy {
        match self {
            RateLimiter::FixedWindow(limiter) => limiter.policy(),
        }
    }

    /// Asks for `permits` permits for `key` (see each limiter's `acquire`).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: once sent, the permits may be consumed even if the future is dropped.
    pub async fn acquire(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        match self {
            RateLimiter::FixedWindow(limiter) => limiter.acquire(key, permits).await,
        }
    }
}

impl From<FixedWindow> for RateLimiter {
    fn from(limiter: FixedWindow) -> Self {
        RateLimiter::FixedWindow(limiter)
    }
}
