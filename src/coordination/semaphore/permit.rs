//! One held permit: its owner token, its expiry, and what each step on it does when it fails.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::Attempt;
use super::sets::PermitSets;
use crate::coordination::Release;
use crate::coordination::owner::{Holding, HoldingKeys, acquire_waiting, try_acquire};
use crate::error::Result;

/// One permit of a [`Semaphore`](super::Semaphore) or a
/// [`KeyedSemaphore`](super::KeyedSemaphore), held under a unique owner token (128 random
/// bits, in hex) that only this handle knows.
///
/// Release it with [`release`](Self::release), or drop it: dropping an unreleased permit
/// releases it in the background (see [Dropping](#dropping)). Check it with
/// [`verify_still_held`](Self::verify_still_held), and renew or change its expiry with
/// [`renew`](Self::renew).
///
/// # Failures
///
/// - A failed or cancelled [`verify_still_held`](Self::verify_still_held) leaves the permit
///   as it was: retry it.
/// - A [`renew`](Self::renew) that certainly changed nothing (a refused connection, a
///   failover reply) leaves the permit as it was: retry it while
///   [`remaining_estimate`](Self::remaining_estimate) lasts.
/// - A renewal whose outcome is unknown (a timeout, a connection lost after sending, or the
///   future dropped mid-flight) leaves the permit **held**, with the estimate both outcomes
///   guarantee: the earlier of the old expiry and the one the renewal asked for, counted
///   from before it was sent. A renewal only ever changes a permit it still finds under its
///   owner token, so a late one cannot revive a released or expired permit; retrying
///   [`renew`](Self::renew) while the estimate lasts is safe, which is how a
///   [`ManagedPermit`](super::ManagedPermit) rides out a stall.
/// - Past its [estimate](Self::remaining_estimate), [`renew`](Self::renew) and
///   [`verify_still_held`](Self::verify_still_held) answer `false` without contacting the
///   backend: the permit may be another holder's slot by now. Stop the work it guards, and
///   release it (which settles it).
/// - A failed [`release`](Self::release) is retried once (bounded by about a second) before
///   the error is returned. If the retry confirms the release, the handle is released;
///   otherwise, while the release may have run, its state is **uncertain**:
///   [`is_released`](Self::is_released) stays false, the handle must not guard protected
///   work any more ([`verify_still_held`](Self::verify_still_held) and
///   [`renew`](Self::renew) answer `false` without contacting the backend), and only
///   [`release`](Self::release) may be retried, to confirm the cleanup. Dropping it releases
///   it in the background.
///
/// Every state and step is the one shared by every holding of the crate (the lock's leases
/// too): owner token, state, conservative estimate, one bounded retry of a release, and a
/// background release on drop.
///
/// # Dropping
///
/// Dropping an unreleased (or uncertain) permit never blocks: it spawns a task on the
/// current tokio runtime that releases the permit, retrying with capped, jittered backoff
/// (50 ms doubling to 2 s) for up to a minute. A release given up then, or that finds no
/// runtime, is counted by [`abandoned_releases`](crate::coordination::ownership::abandoned_releases) and logged as a
/// warning; the permit is then held until it expires.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::Release;
/// use leasehold::coordination::semaphore::Semaphore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let semaphore = Semaphore::new(&Coordination::memory(), "exports", 1)?;
/// let Some(mut permit) = semaphore.try_acquire(Duration::from_secs(30)).await?.into_permit()
/// else {
///     return Ok(()); // someone else is exporting
/// };
/// assert_eq!(permit.owner_token().len(), 32);
/// assert!(permit.remaining_estimate() <= Duration::from_secs(30));
///
/// // Long work: check in, and extend the expiry.
/// assert!(permit.verify_still_held().await?);
/// assert!(permit.renew(Duration::from_secs(30)).await?);
///
/// assert_eq!(permit.release().await?, Release::Released);
/// assert!(permit.is_released());
/// assert_eq!(permit.remaining_estimate(), Duration::ZERO);
/// # Ok(()) }
/// ```
pub struct SemaphorePermit {
    holding: Holding<PermitSets>,
}

impl SemaphorePermit {
    pub(super) fn new(holding: Holding<PermitSets>) -> Self {
        SemaphorePermit { holding }
    }

    /// The permit's owner token: 32 lower-case hex digits, unique to this permit (as a
    /// lease's [`owner_token`](crate::coordination::lock::FencedLease::owner_token) is).
    pub fn owner_token(&self) -> &str {
        self.holding.token()
    }

    /// Whether this handle no longer holds its permit: it was released, or found lost
    /// (expired or removed) by [`renew`](Self::renew). False for a permit whose release failed
    /// without confirmation (see [Failures](#failures)).
    pub fn is_released(&self) -> bool {
        self.holding.is_released()
    }

    /// A conservative local estimate of the time the permit has left: measured from
    /// **before** the request that set its expiry was sent, since the server counted from
    /// a later moment, and after a renewal without an answer, the earlier of the expiry before
    /// it and the one it asked for; zero once released, lost, uncertain, or past its
    /// expiry.
    ///
    /// An estimate only: the server's clock decides, and the permit may have been removed
    /// meanwhile; [`verify_still_held`](Self::verify_still_held) asks the server.
    pub fn remaining_estimate(&self) -> Duration {
        self.holding.remaining_estimate().unwrap_or_default()
    }

    /// The expiry asked for at acquisition or at the last successful renewal, in whole
    /// milliseconds.
    pub fn expiry(&self) -> Duration {
        self.holding.expiry().unwrap_or_default()
    }

    /// Releases the permit by its owner token: [`Release::Released`] when it was still held
    /// and is now released, [`Release::AlreadyReleased`] when it no longer was (it expired or
    /// was removed), or when this handle had already released it (then nothing is sent).
    ///
    /// On an unavailable backend, one more release is tried, bounded by about a second, and
    /// its answer is returned if it gets one. A refusal is not tried again: it leaves the
    /// handle as it was, or uncertain if it may have applied. A release that may have run
    /// without an answer leaves the handle uncertain (see [Failures](#failures)): call
    /// `release` again, or drop the handle to release it in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: if the future is dropped after the request was sent, the
    /// release goes on in a background task (retried as on drop) and the handle counts as
    /// released.
    pub async fn release(&mut self) -> Result<Release> {
        Ok(Release::from_found(self.holding.release().await?))
    }

    /// Whether the permit is still held, asked of the server: a point-in-time answer, since
    /// the permit may expire right after. The step prunes expired permits, so on Redis it
    /// runs on the primary and needs write permission for the key. `Ok(false)` without
    /// contacting the backend once this handle is released, lost or uncertain, or past its
    /// estimate; and `Ok(false)` when the estimate ran out while the question was in flight.
    ///
    /// A failure leaves the permit as it was.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the permit as it was (the step, if it ran,
    /// only pruned expired permits).
    pub async fn verify_still_held(&self) -> Result<bool> {
        self.holding.verify().await
    }

    /// Gives the permit a new expiry, counted from now on the server's clock: `Ok(true)`
    /// when renewed; `Ok(false)` when the permit was lost (expired or
    /// removed; the handle is then lost), or when nothing was sent because this handle is
    /// released, lost or uncertain, or past its [estimate](Self::remaining_estimate).
    ///
    /// An expiry under a millisecond or over about 34 years fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) before anything is
    /// sent, leaving the permit as it was; so does a failure that certainly changed nothing.
    /// A failure that may have applied leaves the permit held with the estimate both outcomes
    /// guarantee (see [Failures](#failures)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropping the future after the renewal was sent leaves the
    /// permit as an unanswered renewal does, held with the narrower estimate.
    pub async fn renew(&mut self, expiry: Duration) -> Result<bool> {
        let expiry_ms = expiry_ms(expiry)?;
        self.holding.renew(expiry_ms).await
    }

    /// Lets go of the permit without releasing it, for another owner to go on with by its
    /// owner token (see [`Detached`](crate::coordination::Detached) and [`Semaphore::by_owner`](super::Semaphore::by_owner) or
    /// [`KeyedSemaphore::by_owner`](super::KeyedSemaphore::by_owner)): it
    /// stays held until it expires or is released by that token. `None` when this
    /// handle no longer holds it (released, lost, uncertain, or past its estimate); it is
    /// then dropped as the handle is (released in the background unless already).
    ///
    /// Returns at once, unless the acquisition was sent twice (its first delivery lost on
    /// the way): it then first waits until that delivery can no longer land (the acquisition's
    /// deadline: its timeouts and retry bound), since landing after the permit was released by its
    /// token it would take it again, for nobody.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it returns, the permit is released in the background, as when the
    /// handle is dropped.
    pub async fn detach(self) -> Option<crate::coordination::Detached> {
        self.holding.detach().await
    }

    /// Takes a permit in every set (each with its capacity), or in none.
    ///
    /// When the step may have applied (a timeout or a connection lost after sending, a
    /// reply that could not be read, or the future dropped mid-flight), a release of the
    /// token that was sent is spawned before the error is returned, so a lost answer cannot
    /// leave a permit that nobody holds; the permit's expiry is the fallback if that release
    /// fails too. The step carries a deadline on the server's clock (Redis), and the release
    /// waits until it has passed: a request delayed in the network past the release is then
    /// a no-op, so it cannot leave a permit nobody holds either.
    pub(super) async fn try_acquire(sets: &Arc<PermitSets>, expiry: Duration) -> Result<Attempt> {
        let expiry_ms = expiry_ms(expiry)?;
        try_acquire(sets, expiry_ms, |holding, ()| SemaphorePermit::new(holding)).await
    }

    /// Takes a permit as [`try_acquire`](Self::try_acquire) does, waiting for one to free.
    pub(super) async fn acquire(
        sets: &Arc<PermitSets>,
        expiry: Duration,
        poll: Duration,
    ) -> Result<SemaphorePermit> {
        let keys: Vec<&[u8]> = sets.keys().iter().map(Vec::as_slice).collect();
        acquire_waiting(sets.backend(), &keys, poll, || {
            Self::try_acquire(sets, expiry)
        })
        .await
    }

    /// [`acquire`](Self::acquire) with the lease (as the expiry) and the poll interval of
    /// `options`, validated first: what the [`Permit`](crate::extract::Permit) extractor
    /// waits with, on either semaphore.
    pub(super) async fn acquire_with(
        sets: &Arc<PermitSets>,
        options: &crate::coordination::ManagedOptions,
    ) -> Result<SemaphorePermit> {
        options.validate()?;
        let expiry = options.lease_duration();
        Self::acquire(sets, expiry, options.poll()).await
    }

    /// The holding, to be kept by a [`ManagedPermit`](super::ManagedPermit).
    pub(super) fn into_holding(self) -> Holding<PermitSets> {
        self.holding
    }
}

/// A permit's expiry in whole milliseconds, within the one bound (as the holding kit takes
/// it: every permit this crate takes expires).
pub(super) fn expiry_ms(expiry: Duration) -> Result<Option<u64>> {
    crate::coordination::owner::expiry_ms("a permit expiry", expiry).map(Some)
}

impl fmt::Debug for SemaphorePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("keys", &format_args!("{}", self.holding.keys()))
            .field("owner_token", &self.holding.token())
            .field("expiry", &self.holding.expiry())
            .field("state", &self.holding.state())
            .finish()
    }
}
