//! One held thing (a lock's lease, a semaphore's permit): its owner token, its state, its
//! conservative local estimate, and what each step on it does when it fails. Written once;
//! [`FencedLease`](crate::coordination::lock::FencedLease) and
//! [`SemaphorePermit`](crate::coordination::semaphore::SemaphorePermit) add a fencing token
//! or an optional expiry on top.
//!
//! | state | renew | verify | release | drop |
//! |---|---|---|---|---|
//! | **held** | `false`, not sent, past the estimate. Sent otherwise: renewed → held, the estimate counts from before this request; gone or another's → **lost**; failed certainly without effect → as before; may have applied (no answer, cancelled) → held, the estimate the earlier of the old one and the one asked for | `false`, not sent, past the estimate; else asked, and `false` if the estimate ran out meanwhile; a failure changes nothing | sent → **released**; a failure that may pass is retried once, bounded; unconfirmed while it may have applied → **uncertain**; refused → as before | released in the background |
//! | **uncertain** (a release may have run) | `false`, not sent | `false`, not sent | sent, which settles it | released in the background |
//! | **lost** | `false`, not sent | `false`, not sent | sent (owner-checked: it finds nothing of this holder's) | nothing |
//! | **released** | `false`, not sent | `false`, not sent | nothing sent: already released | nothing |
//!
//! Every step compares the owner token on the backend, so a stale handle, or a late command
//! of one, can never renew or remove another holder's holding; a renewal only extends a
//! holding it still finds. A background release retries with capped, jittered backoff for up
//! to a minute; what is given up is counted per primitive.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{
    OwnerRelease, ReleaseOnDrop, ReleaseStage, had_no_effect, release_bounded, worth_retrying,
};
use crate::error::Result;

/// The steps a holding takes on its backend, besides the release every owner has.
pub(crate) trait HoldingKeys: OwnerRelease {
    /// Gives the holding of `token` a new expiry (`None`: none): `Ok(false)` when it is gone
    /// or another holder's.
    fn renew_owned(
        &self,
        token: &str,
        expiry_ms: Option<u64>,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Whether `token` still holds it.
    fn verify_owned(&self, token: &str) -> impl Future<Output = Result<bool>> + Send;
}

/// The state of a holding (see the [table](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Held,
    /// A release may have run without an answer: only a release may settle it.
    Uncertain,
    /// A renewal found it gone or another holder's.
    Lost,
    /// Released by this handle (or handed to a background release).
    Released,
}

/// One holding under its owner token (see the [table](self)).
pub(crate) struct Holding<K: HoldingKeys> {
    keys: Arc<K>,
    token: String,
    /// The expiry asked at acquisition or at the last confirmed renewal; `None`: none.
    expiry: Option<Duration>,
    /// The local estimate's end: the expiry counted from before the request that set it was
    /// sent (the backend counted from a later moment), and never later than an unanswered
    /// renewal may have set it. `None`: no expiry.
    expires_by: Option<Instant>,
    state: State,
}

impl<K: HoldingKeys> Holding<K> {
    /// A holding granted by a request sent at `sent_at`; `None` when the grant arrived after
    /// its expiry had already run out by the local estimate (then it is released by owner
    /// token in the background at once: nobody can use it).
    pub(crate) fn granted(
        keys: Arc<K>,
        token: String,
        expiry: Option<Duration>,
        sent_at: Instant,
        in_flight: ReleaseOnDrop<K>,
    ) -> Option<Self> {
        if expiry.is_some_and(|expiry| sent_at.elapsed() >= expiry) {
            tracing::debug!(keys = %keys, "{} granted after its expiry ran out; releasing it", K::WHAT);
            in_flight.release_now(ReleaseStage::LateGrant);
            return None;
        }
        in_flight.disarm();
        Some(Holding {
            keys,
            token,
            expiry,
            expires_by: expiry.map(|expiry| sent_at + expiry),
            state: State::Held,
        })
    }

    pub(crate) fn keys(&self) -> &Arc<K> {
        &self.keys
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    pub(crate) fn expiry(&self) -> Option<Duration> {
        self.expiry
    }

    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// Whether the holding is no longer this handle's: released, or found lost.
    pub(crate) fn is_released(&self) -> bool {
        matches!(self.state, State::Released | State::Lost)
    }

    /// What the conservative local estimate has left: `Some(ZERO)` once not held or past it,
    /// `None` without an expiry.
    pub(crate) fn remaining_estimate(&self) -> Option<Duration> {
        if self.state != State::Held {
            return Some(Duration::ZERO);
        }
        self.expires_by
            .map(|end| end.saturating_duration_since(Instant::now()))
    }

    fn usable(&self) -> bool {
        self.remaining_estimate() != Some(Duration::ZERO)
    }

    /// Renews to `expiry_ms` (see the [table](self)).
    ///
    /// Cancel safe in effect: dropped after the request was sent, the holding stays as an
    /// unanswered renewal leaves it, held with the narrower estimate.
    pub(crate) async fn renew(&mut self, expiry_ms: Option<u64>) -> Result<bool> {
        if !self.usable() {
            tracing::debug!(keys = %self.keys, "{} not renewed: not held, or past its estimate", K::WHAT);
            return Ok(false);
        }
        // Until the answer comes (or if it never does), only what both outcomes guarantee:
        // the renewal, if it ran, counted its expiry from after this moment.
        let sent_at = Instant::now();
        let asked = expiry_ms.map(Duration::from_millis);
        let before = self.expires_by;
        self.expires_by = match (before, asked.map(|asked| sent_at + asked)) {
            (Some(old), Some(new)) => Some(old.min(new)),
            (old, new) => old.or(new),
        };
        match self.keys.renew_owned(&self.token, expiry_ms).await {
            Ok(true) => {
                self.expiry = asked;
                self.expires_by = asked.map(|asked| sent_at + asked);
                tracing::debug!(keys = %self.keys, expiry_ms, "{} renewed", K::WHAT);
                Ok(true)
            }
            Ok(false) => {
                self.state = State::Lost;
                tracing::debug!(keys = %self.keys, "{} lost before its renewal", K::WHAT);
                Ok(false)
            }
            Err(err) if had_no_effect(&err) => {
                self.expires_by = before;
                tracing::debug!(keys = %self.keys, error = %err, "{} renewal failed; nothing changed", K::WHAT);
                Err(err)
            }
            Err(err) => {
                tracing::debug!(keys = %self.keys, error = %err, "{} renewal unanswered; the estimate keeps what both outcomes guarantee", K::WHAT);
                Err(err)
            }
        }
    }

    /// Whether the holding is still this one's, asked of the backend (see the
    /// [table](self)). Cancel safe: it changes nothing here.
    pub(crate) async fn verify(&self) -> Result<bool> {
        if !self.usable() {
            return Ok(false);
        }
        let held = self.keys.verify_owned(&self.token).await? && self.usable();
        tracing::debug!(keys = %self.keys, held, "{} verified", K::WHAT);
        Ok(held)
    }

    /// Releases it by owner token (see the [table](self)): `None` when this handle had
    /// already released it (nothing sent), else what the backend found.
    ///
    /// Cancel safe in effect: dropped after the request was sent, the release goes on in a
    /// background task and the handle counts as released.
    pub(crate) async fn release(&mut self) -> Result<Option<K::Reply>> {
        if self.state == State::Released {
            return Ok(None);
        }
        let before = self.state;
        self.state = State::Released;
        let in_flight = ReleaseOnDrop::arm(&self.keys, &self.token, ReleaseStage::CancelledRelease);
        let err = match self.keys.release_owned(&self.token).await {
            Ok(reply) => {
                in_flight.disarm();
                tracing::debug!(keys = %self.keys, ?reply, "{} released", K::WHAT);
                return Ok(Some(reply));
            }
            Err(err) => err,
        };
        if !worth_retrying(&err) {
            in_flight.disarm();
            self.state = before;
            tracing::debug!(keys = %self.keys, error = %err, "{} release refused", K::WHAT);
            return Err(err);
        }
        match release_bounded(&self.keys, &self.token).await {
            Ok(reply) => {
                in_flight.disarm();
                tracing::debug!(keys = %self.keys, ?reply, error = %err, "{} released on the retry", K::WHAT);
                Ok(Some(reply))
            }
            Err(retry_err) => {
                in_flight.disarm();
                self.state = if had_no_effect(&err) && had_no_effect(&retry_err) {
                    before
                } else {
                    State::Uncertain
                };
                tracing::debug!(keys = %self.keys, error = %err, retry_error = %retry_err, "{} release unconfirmed", K::WHAT);
                Err(err)
            }
        }
    }
}

impl<K: HoldingKeys> Drop for Holding<K> {
    fn drop(&mut self) {
        if matches!(self.state, State::Held | State::Uncertain) {
            super::release_in_background(
                Arc::clone(&self.keys),
                std::mem::take(&mut self.token),
                ReleaseStage::Dropped,
            );
        }
    }
}
