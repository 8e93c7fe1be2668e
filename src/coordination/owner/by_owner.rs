//! The steps on a holding known by its owner token alone: what a handle's steps do, from any
//! process, with no handle.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use super::Detached;
use super::managed::ReleaseReply;
use super::{HoldingKeys, OwnerToken, expiry_ms, release_bounded, worth_retrying};
use crate::coordination::Release;
use crate::error::Result;

type Step<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A holding's owner-checked steps, object-safe, so that one [`ByOwner`] serves every
/// primitive.
trait OwnerSteps: fmt::Display + Send + Sync {
    fn renew<'a>(&'a self, token: &'a str, expiry: Duration) -> Step<'a, bool>;
    fn verify<'a>(&'a self, token: &'a str) -> Step<'a, bool>;
    fn release<'a>(&'a self, token: &'a str) -> Step<'a, Release>;
}

impl<K: HoldingKeys> OwnerSteps for K
where
    K::Released: ReleaseReply,
{
    fn renew<'a>(&'a self, token: &'a str, expiry: Duration) -> Step<'a, bool> {
        Box::pin(async move {
            self.check_expiry(expiry)?;
            let asked = expiry_ms(K::WHAT, expiry)?;
            let renewed = HoldingKeys::renew(self, token, Some(asked)).await?;
            if !renewed {
                self.after_lost_renewal(token);
            }
            Ok(renewed)
        })
    }

    fn verify<'a>(&'a self, token: &'a str) -> Step<'a, bool> {
        Box::pin(HoldingKeys::verify(self, token))
    }

    fn release<'a>(&'a self, token: &'a str) -> Step<'a, Release> {
        Box::pin(async move {
            let found = match HoldingKeys::release(self, token).await {
                Ok(found) => found,
                // As a handle's release: unavailable, one more bounded try.
                Err(err) if worth_retrying(&err) => {
                    release_bounded(self, token).await.map_err(|_| err)?
                }
                Err(err) => return Err(err),
            };
            Ok(K::Released::into_release(Some(found)))
        })
    }
}

/// A lease or permit reached by its owner token alone, from any process: every primitive's
/// `by_owner` gives one, for a holding whose handle was [detached](super::Detached) here or
/// elsewhere. Each step checks the owner token on the backend exactly as the handle's own
/// step does, so it renews, verifies or releases that holding and never another holder's;
/// a renewal never brings back a holding that expired or was released (a late one finds
/// nothing under the token). It keeps no state: the backend's answer is all there is.
///
/// # Failures
///
/// - A step refused before anything is sent (an invalid expiry) or by the server (a
///   refused script, credentials) fails as is; nothing changed.
/// - A renewal without an answer may have applied: the holding keeps either its old expiry
///   or the new one, and since it may still arrive at any time, count on no more than it
///   asked for after any later renewal (as [`Detached::renewal_cap`] says of a handle's).
///   Renewing again never brings back what expired or was released.
/// - A release on an unavailable backend is tried once more, bounded by about a second;
///   without an answer it may have run: release again (finding nothing is
///   [`Release::AlreadyReleased`]).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::Release;
/// use leasehold::coordination::lock::FencedLock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "import:7");
/// let lease = lock.try_acquire(Duration::from_secs(30)).await?.acquired().expect("free");
/// let token = lease.detach().await.expect("held").into_owner_token();
///
/// let held = lock.by_owner(token);
/// assert!(held.verify().await?);
/// assert!(held.renew(Duration::from_secs(60)).await?);
/// assert_eq!(held.release().await?, Release::Released);
/// assert!(!held.verify().await?);
/// assert!(!held.renew(Duration::from_secs(60)).await?, "nothing comes back");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ByOwner {
    steps: Arc<dyn OwnerSteps>,
    token: OwnerToken,
}

impl ByOwner {
    pub(crate) fn new<K: HoldingKeys>(keys: Arc<K>, token: OwnerToken) -> ByOwner
    where
        K::Released: ReleaseReply,
    {
        ByOwner { steps: keys, token }
    }

    /// The owner token the steps are taken under.
    pub fn owner_token(&self) -> &OwnerToken {
        &self.token
    }

    /// Gives the holding a new expiry of `expiry`, counted from now on the backend's clock,
    /// if it is still held under the owner token: `Ok(true)`; `Ok(false)` when it is gone or
    /// another holder's (nothing changed). A quorum lease is renewed on every node and
    /// counts as renewed when a quorum renewed it (a node's error counts as a no);
    /// otherwise it ends: `Ok(false)`, and the token is removed in the background from the
    /// nodes that did renew it, as its handle does. `Ok(true)` does not say whether a node
    /// left the renewal unanswered (it may still land there, at any time): with a quorum
    /// lease, count on no more than the shortest expiry renewed by owner since, as a
    /// handle counts on its own.
    ///
    /// An expiry under a millisecond or over about 34 years (or, for a quorum lease, too
    /// short for its nodes' timeouts) fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) before anything is
    /// sent.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropped after it was sent, the renewal may or may not apply;
    /// either way the holding stays its owner's.
    pub async fn renew(&self, expiry: Duration) -> Result<bool> {
        let renewed = self.steps.renew(self.token.as_str(), expiry).await?;
        tracing::debug!(keys = %self.steps, renewed, "renewed by owner token");
        Ok(renewed)
    }

    /// Whether the holding is still held under the owner token, asked of the backend (a
    /// quorum lease: of a quorum of its nodes): a point-in-time answer, with no local
    /// estimate to cut it short as a handle's has.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the step only reads.
    pub async fn verify(&self) -> Result<bool> {
        self.steps.verify(self.token.as_str()).await
    }

    /// Releases the holding if it is still held under the owner token; never another
    /// holder's: [`Release::Released`], [`Release::AlreadyReleased`] (nothing of this
    /// token's was there) or [`Release::NotOwned`] (another holder's lease stands there).
    /// Repeat-safe.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropped after it was sent, the release may or may not apply;
    /// releasing again settles it.
    pub async fn release(&self) -> Result<Release> {
        let release = self.steps.release(self.token.as_str()).await?;
        tracing::debug!(keys = %self.steps, ?release, "released by owner token");
        Ok(release)
    }
}

impl fmt::Debug for ByOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ByOwner")
            .field("keys", &self.steps.to_string())
            .field("owner_token", &self.token)
            .finish()
    }
}
