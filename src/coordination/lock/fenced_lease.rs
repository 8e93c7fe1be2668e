//! One held lease (its fencing token, its owner token, its local estimate, and what each step
//! on it does when it fails), and the same kept renewed.

use std::fmt;
use std::time::Duration;

use super::fenced_lock::LockKeys;
use super::{FencedLock, Release};
use crate::coordination::owner::{Holding, Managed, expiry_ms};
use crate::coordination::ownership::OwnershipLost;
use crate::coordination::redlock::{GroupKeys, check_lease, release_everywhere};
use crate::coordination::{Detached, ManagedOptions};
use crate::error::Result;

/// A lease on a [`FencedLock`](super::FencedLock), or on a quorum of a
/// [`RedlockGroup`](crate::coordination::redlock::RedlockGroup)'s nodes: the lock is held
/// under a random owner token that only this handle knows, and with a fencing token that
/// orders it after every earlier holder.
///
/// Send [`fencing_token`](Self::fencing_token) with every write to the protected resource,
/// and have the resource refuse a token lower than the highest it has accepted: a holder
/// that was paused past its lease (and replaced) is then refused, whatever it believes. The
/// lease itself only says who may try.
///
/// Renew it with [`renew`](Self::renew) before it runs out, check it with
/// [`verify_still_held`](Self::verify_still_held), and release it with
/// [`release`](Self::release) or by dropping it (see [Dropping](#dropping)). Every one of
/// these compares the owner token on the backend, so a stale handle can never renew or
/// delete a later holder's lease.
///
/// # Failures
///
/// The handle **fails closed**: whenever it cannot be sure the lease is still its own, it
/// says it is not, and only [`release`](Self::release) can settle the question.
///
/// - [`remaining_estimate`](Self::remaining_estimate) is measured from before the request
///   that set the expiry was sent, so it ends no later than the lease on the backend. Once
///   it is zero, [`renew`](Self::renew) and [`verify_still_held`](Self::verify_still_held)
///   answer `false` without contacting the backend: stop protected work then.
/// - A [`renew`](Self::renew) refused before anything was sent (an invalid lease, a refused
///   connection) leaves the handle as it was: retry it while the estimate lasts.
/// - A renewal whose outcome is unknown (a timeout, a connection lost after sending, a
///   server error, or the future dropped mid-flight) leaves the handle **held**, with the
///   estimate both outcomes guarantee: the earlier of the old expiry and the one the renewal
///   asked for, counted from before it was sent. A renewal only ever extends a lease it
///   still finds under its owner token, so a late one cannot revive a released or taken-over
///   lease; retrying [`renew`](Self::renew) while the estimate lasts is safe, which is how
///   a [`ManagedLease`](super::ManagedLease) rides out a stall.
/// - A renewal that finds the lease gone or owned by another holder marks the handle lost
///   ([`is_released`](Self::is_released) is then true).
/// - A failed [`release`](Self::release) is retried once, bounded by about a second. If
///   neither attempt answers, a release that may have run leaves the handle **uncertain**:
///   [`renew`](Self::renew) and [`verify_still_held`](Self::verify_still_held) answer `false`
///   without sending, the estimate is zero, and only `release` (or dropping the handle)
///   settles it.
/// - A failed or cancelled [`verify_still_held`](Self::verify_still_held) leaves the handle
///   as it was.
///
/// # Dropping
///
/// Dropping a lease that is held or uncertain never blocks: it spawns a task on the current
/// tokio runtime that releases it by owner token, retrying with capped, jittered backoff
/// (50 ms doubling to 2 s) for up to a minute. A release given up then, or that finds no
/// runtime, is counted by [`abandoned_releases`](crate::coordination::ownership::abandoned_releases) and logged as a
/// warning; the lock is then blocked until the lease expires.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::lock::{FencedLock, Release};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "invoice:42");
/// let Some(mut lease) = lock.try_acquire(Duration::from_secs(30)).await?.into_lease() else {
///     return Ok(()); // someone else holds it
/// };
/// let token = lease.fencing_token();
/// assert!(token > 0);
/// assert_eq!(lease.owner_token().len(), 32);
/// assert_eq!(lease.lease(), Duration::from_secs(30));
/// assert!(lease.remaining_estimate() <= Duration::from_secs(30));
///
/// // Long work: check in, and extend the lease; the fencing token stays.
/// assert!(lease.verify_still_held().await?);
/// assert!(lease.renew(Duration::from_secs(60)).await?);
/// assert_eq!(lease.fencing_token(), token);
///
/// assert_eq!(lease.release().await?, Release::Released);
/// assert!(lease.is_released());
/// assert_eq!(lease.remaining_estimate(), Duration::ZERO);
/// # Ok(()) }
/// ```
pub struct FencedLease {
    holding: Held,
    fencing_token: u64,
}

/// What a [`FencedLease`] holds: a fenced lock's lease on one backend, or a Redlock group's
/// on a quorum of its nodes (every step on every node, a quorum deciding). One lifecycle,
/// the kit's, for both.
enum Held {
    Lock(Holding<LockKeys>),
    Redlock(Holding<GroupKeys>),
}

/// `$body` with `$holding` bound to whichever holding `$held` is.
macro_rules! on_held {
    ($held:expr, $holding:ident => $body:expr) => {
        match $held {
            Held::Lock($holding) => $body,
            Held::Redlock($holding) => $body,
        }
    };
}

impl FencedLease {
    pub(super) fn new(holding: Holding<LockKeys>, fencing_token: u64) -> Self {
        FencedLease {
            holding: Held::Lock(holding),
            fencing_token,
        }
    }

    /// A Redlock group's lease.
    pub(crate) fn redlock(holding: Holding<GroupKeys>, fencing_token: u64) -> Self {
        FencedLease {
            holding: Held::Redlock(holding),
            fencing_token,
        }
    }

    /// The fencing token: greater than every token granted before it for the same lock, even
    /// when the lock's counter was lost (see
    /// [Tokens never go back](super::FencedLock#tokens-never-go-back)); at least the
    /// server's clock in microseconds since the epoch at the acquisition, and at most
    /// `i64::MAX`, exact over that whole range. A renewal keeps it. Tokens skip values.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The owner token: 32 lower-case hex digits (128 random bits), unique to this lease.
    pub fn owner_token(&self) -> &str {
        on_held!(&self.holding, holding => holding.token())
    }

    /// The lease asked for at acquisition or at the last successful renewal, in whole
    /// milliseconds.
    pub fn lease(&self) -> Duration {
        on_held!(&self.holding, holding => holding.expiry()).unwrap_or_default()
    }

    /// A conservative local estimate of the time the lease has left: measured from
    /// **before** the request that set its expiry was sent, since the backend counted from a
    /// later moment, and after a renewal without an answer, the earlier of the expiry before
    /// it and the one it asked for. Zero once released, lost, uncertain, or past the lease.
    ///
    /// An estimate only: the backend's clock decides, and it says nothing of a lease taken
    /// away by hand; [`verify_still_held`](Self::verify_still_held) asks the backend.
    pub fn remaining_estimate(&self) -> Duration {
        on_held!(&self.holding, holding => holding.remaining_estimate()).unwrap_or_default()
    }

    /// Whether this handle no longer holds its lease: released by it, or found gone or
    /// another holder's by [`renew`](Self::renew). False for an uncertain handle (see
    /// [Failures](#failures)), which still needs a release.
    pub fn is_released(&self) -> bool {
        on_held!(&self.holding, holding => holding.is_released())
    }

    /// Gives the lease a new expiry of `lease`, counted from now on the backend's clock, if
    /// it is still held under this handle's owner token; the fencing token does not change.
    ///
    /// `Ok(true)`: renewed, and the estimate starts again from this request. `Ok(false)`:
    /// the lease is gone or another holder's (the handle is then lost), or nothing was sent
    /// because the handle is released, lost or uncertain, or its
    /// [`remaining_estimate`](Self::remaining_estimate) has run out. A renewal sent within
    /// the estimate may still answer `true` after it ran out: the new lease counts from the
    /// renewal.
    ///
    /// A lease under a millisecond or over about 34 years fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) before anything is
    /// sent. A failure that certainly changed nothing (a refused connection) leaves the
    /// handle as it was; one that may have applied leaves it held with the estimate both
    /// outcomes guarantee (see [Failures](#failures)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropping the future after the renewal was sent leaves the handle
    /// as an unanswered renewal does, held with the narrower estimate.
    pub async fn renew(&mut self, lease: Duration) -> Result<bool> {
        let lease_ms = expiry_ms("a lease", lease)?;
        match &mut self.holding {
            Held::Lock(holding) => holding.renew(Some(lease_ms)).await,
            Held::Redlock(holding) => {
                check_lease(lease, holding.keys().node_timeout)?;
                let was_held = !holding.is_released();
                let renewed = holding.renew(Some(lease_ms)).await?;
                if was_held && holding.is_released() {
                    // Lost by this renewal: the nodes that renewed still hold the token.
                    release_everywhere(holding.keys(), holding.token());
                }
                Ok(renewed)
            }
        }
    }

    /// Whether the lease is still held under this handle's owner token, asked of the
    /// backend: a point-in-time answer, which cannot promise anything of a later write (the
    /// fencing token does that).
    ///
    /// `Ok(false)` without contacting the backend when the handle is released, lost or
    /// uncertain, or its [`remaining_estimate`](Self::remaining_estimate) has run out; and
    /// `Ok(false)` when the estimate ran out while the question was in flight, whatever the
    /// answer. A failure leaves the handle as it was.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the step only reads, and the handle is unchanged.
    pub async fn verify_still_held(&self) -> Result<bool> {
        on_held!(&self.holding, holding => holding.verify().await)
    }

    /// Deletes the lease if it is still held under this handle's owner token; never
    /// another holder's. The counter is left as it is.
    ///
    /// [`Release::Released`] when it was held and is now deleted;
    /// [`Release::AlreadyReleased`] when no lease existed (it expired), or when this handle
    /// had already released it (then nothing is sent); [`Release::NotOwned`] when another
    /// holder's lease exists. A lost or uncertain handle sends the release too, which settles
    /// it.
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
        on_held!(&mut self.holding, holding => holding.release().await).map(Release::from_reply)
    }

    /// Lets go of the lease without releasing it, for another owner to go on with by its
    /// owner token (see [`Detached`], and [`FencedLock::by_owner`] or
    /// [`RedlockGroup::by_owner`](crate::coordination::redlock::RedlockGroup::by_owner)): it
    /// stays held until it expires or is released by that token, and the fencing token
    /// stays [`fencing_token`](Self::fencing_token)'s. `None` when this handle no longer
    /// holds it (released, lost, uncertain, or past its estimate); it is then dropped as the
    /// handle is (released in the background unless already).
    ///
    /// Returns at once, unless the acquisition was sent twice (its first delivery lost on
    /// the way): it then first waits until that delivery can no longer land (the acquisition's
    /// deadline: its timeouts and retry bound), since landing after the lease was released by its token
    /// it would take the lock again, for nobody.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it returns, the lease is released in the background, as when the
    /// handle is dropped.
    pub async fn detach(self) -> Option<Detached> {
        let fencing_token = Some(self.fencing_token);
        on_held!(self.holding, holding => holding.detach().await)
            .map(|detached| detached.with_fencing_token(fencing_token))
    }

    /// The holding, kept by a [`ManagedLease`] as `options` say.
    fn keep(self, options: &ManagedOptions) -> Result<Kept> {
        Ok(match self.holding {
            Held::Lock(holding) => Kept::Lock(Managed::keep(holding, options)?),
            Held::Redlock(holding) => {
                check_lease(options.lease_duration(), holding.keys().node_timeout)?;
                Kept::Redlock(Managed::keep(holding, options)?)
            }
        })
    }
}

impl fmt::Debug for FencedLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedLease")
            .field(
                "lease_key",
                &on_held!(&self.holding, holding => holding.keys().to_string()),
            )
            .field("fencing_token", &self.fencing_token)
            .field("owner_token", &self.owner_token())
            .field("lease", &self.lease())
            .field(
                "state",
                &on_held!(&self.holding, holding => holding.state()),
            )
            .finish()
    }
}

/// A [`FencedLease`] kept by a background task: renewed at half its lease until it is
/// released, dropped (by default), lost, or past its lifetime limit. Ownership loss (a
/// renewal that finds the lease gone or another holder's, or renewals failing until the
/// local estimate ran out) fires [`OwnershipLost`], before the lease is released: stop the
/// protected work then. A stall shorter than the estimate costs nothing.
///
/// Release on drop is best-effort: it never blocks and never removes another owner's lease
/// (releases check the owner token).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::ManagedOptions;
/// use leasehold::coordination::lock::{FencedLock, ManagedLease, Release};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "nightly-report");
/// let options = ManagedOptions::new().lease(Duration::from_secs(10));
/// let lease = ManagedLease::acquire(&lock, &options).await?;
/// let mut lost = lease.ownership();
/// let token = lease.fencing_token();
///
/// let work = async { /* writes carrying `token` */ };
/// tokio::select! {
///     () = work => {}
///     reason = lost.lost() => println!("stopped: {reason}"),
/// }
/// assert_eq!(lease.release().await?, Release::Released);
/// # let _ = token;
/// # Ok(()) }
/// ```
pub struct ManagedLease {
    fencing_token: u64,
    kept: Kept,
}

/// What a [`ManagedLease`] keeps: a fenced lock's lease, or a Redlock group's.
enum Kept {
    Lock(Managed<LockKeys>),
    Redlock(Managed<GroupKeys>),
}

impl Kept {
    fn owner_token(&self) -> &str {
        match self {
            Kept::Lock(kept) => kept.owner_token(),
            Kept::Redlock(kept) => kept.owner_token(),
        }
    }

    fn ownership(&self) -> OwnershipLost {
        match self {
            Kept::Lock(kept) => kept.ownership(),
            Kept::Redlock(kept) => kept.ownership(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Kept::Lock(kept) => kept.is_lost(),
            Kept::Redlock(kept) => kept.is_lost(),
        }
    }
}

impl ManagedLease {
    /// Takes over `lease` and keeps it as `options` say: a Redlock group's lease is renewed
    /// on every node of its group, and a renewal that misses its quorum ends it (the signal
    /// fires, then its token is removed from every node).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// invalid options (for a Redlock group's lease, also a lease not longer than three of
    /// its node timeouts), or without a tokio runtime to run the keeper (then `lease` is
    /// dropped, which releases it).
    pub fn keep(lease: FencedLease, options: &ManagedOptions) -> Result<ManagedLease> {
        Ok(ManagedLease {
            fencing_token: lease.fencing_token(),
            kept: lease.keep(options)?,
        })
    }

    /// Waits for `lock` (see [`FencedLock::acquire`]: invalidations on Redis, attempts every
    /// [poll interval](ManagedOptions::poll_interval) elsewhere), then keeps its lease
    /// as `options` say.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`FencedLock::acquire`] is.
    pub async fn acquire(lock: &FencedLock, options: &ManagedOptions) -> Result<ManagedLease> {
        let lease = lock.acquire_with(options).await?;
        ManagedLease::keep(lease, options)
    }

    /// Takes `lock` now if it is free (see [`FencedLock::try_acquire`]) and keeps its lease;
    /// `None` when it is held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect, as [`FencedLock::try_acquire`] is.
    pub async fn try_acquire(
        lock: &FencedLock,
        options: &ManagedOptions,
    ) -> Result<Option<ManagedLease>> {
        options.validate()?;
        match lock
            .try_acquire(options.lease_duration())
            .await?
            .into_lease()
        {
            Some(lease) => ManagedLease::keep(lease, options).map(Some),
            None => Ok(None),
        }
    }

    /// The fencing token to send with every protected write.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The owner token of the lease.
    pub fn owner_token(&self) -> &str {
        self.kept.owner_token()
    }

    /// The signal that fires when ownership is lost (or the lease released).
    pub fn ownership(&self) -> OwnershipLost {
        self.kept.ownership()
    }

    /// Whether ownership is lost.
    pub fn is_lost(&self) -> bool {
        self.kept.is_lost()
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Detached`](crate::coordination::ownership::LossReason::Detached), and
    /// lets go of the lease without releasing it, as [`FencedLease::detach`] does: `None`
    /// when it was no longer held (lost, or released at its lifetime limit), then told as
    /// a loss.
    ///
    /// # Cancel safety
    ///
    /// Nothing is asked until the future is first polled (dropped unpolled, the keeper goes
    /// on as its options say); then a renewal in flight is answered first, and dropped
    /// before it returns, the lease is released in the background.
    pub async fn detach(self) -> Option<Detached> {
        let fencing_token = Some(self.fencing_token);
        match self.kept {
            Kept::Lock(kept) => kept.detach().await,
            Kept::Redlock(kept) => kept.detach().await,
        }
        .map(|detached| detached.with_fencing_token(fencing_token))
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Released`](crate::coordination::ownership::LossReason::Released), then
    /// releases the lease (owner-checked): [`Release::Released`] when it was still held,
    /// [`Release::AlreadyReleased`] when it no longer was (lost, or released at its lifetime
    /// limit),
    /// [`Release::NotOwned`] when another holder's lease stands in its place. A failure is the held one's release's
    /// (one more attempt on an unavailable backend, bounded by about a second); a release
    /// that may have run without an answer goes on in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the release is asked of the keeper when this is called, and
    /// goes on there if the future is dropped, polled or not.
    pub fn release(self) -> impl Future<Output = Result<Release>> + Send {
        // Asked of the keeper now, whichever it keeps.
        let released: std::pin::Pin<Box<dyn Future<Output = Result<Release>> + Send>> =
            match self.kept {
                Kept::Lock(kept) => Box::pin(kept.release()),
                Kept::Redlock(kept) => Box::pin(kept.release()),
            };
        released
    }
}

impl fmt::Debug for ManagedLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedLease")
            .field("fencing_token", &self.fencing_token)
            .field("lost", &self.kept.ownership().reason())
            .finish_non_exhaustive()
    }
}
