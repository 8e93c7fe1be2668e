//! One held thing (a lock's lease, a semaphore's permit, a session, ...): its owner token,
//! its state, its conservative local estimate, and what each step on it does when it fails.
//! Written once, under the public [`Held`](crate::coordination::Held) handle.
//!
//! The states and what each step does in each are the public contract:
//! [the holding table](crate::coordination::ownership#the-holding-table).
//!
//! Every step compares the owner token on the backend, so a stale handle, or a late command
//! of one, can never renew or remove another holder's holding; a renewal only extends a
//! holding it still finds. A background release retries with capped, jittered backoff for up
//! to a minute; what is given up is counted per primitive.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{
    Detached, HoldingKeys, OwnerToken, ReleaseOnDrop, ReleaseStage, Renewed, release_bounded,
    worth_retrying,
};
use crate::error::Result;
use crate::telemetry::Renewal;

/// The state of a holding (see the
/// [table](crate::coordination::ownership#the-holding-table)).
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
    /// The shortest expiry an unanswered renewal asked for: it may still arrive at any time
    /// and set the expiry to its arrival plus that, so no estimate may count on more.
    unanswered_floor: Option<Duration>,
    state: State,
    /// When an earlier delivery of the acquisition was lost (and may still land, before its
    /// deadline, after this holding is released): a release by owner token that waits until
    /// the deadline has passed, sent once a release is answered, or when the holding is
    /// dropped.
    late_delivery: Option<ReleaseOnDrop<K>>,
}

impl<K: HoldingKeys> Holding<K> {
    /// A holding granted by a request first sent at `sent_at`; `None` when the grant arrived
    /// after its expiry had already run out by the local estimate (then it is released by
    /// owner token in the background at once: nobody can use it). `late_delivery`: the
    /// release to send once the holding ends, when an earlier delivery of the acquisition
    /// was lost (see [`Holding`]'s field).
    pub(crate) fn granted(
        keys: Arc<K>,
        token: String,
        expiry: Option<Duration>,
        sent_at: Instant,
        late_delivery: Option<ReleaseOnDrop<K>>,
    ) -> Option<Self> {
        if expiry.is_some_and(|expiry| sent_at.elapsed() >= expiry) {
            tracing::debug!(keys = %keys, "{} granted after its expiry ran out; releasing it", K::WHAT);
            // Now, and (dropped) once a lost delivery can no longer land.
            super::release_in_background(keys, token, ReleaseStage::LateGrant);
            drop(late_delivery);
            return None;
        }
        crate::telemetry::held(K::PRIMITIVE.label(), 1);
        Some(Holding {
            keys,
            token,
            expiry,
            expires_by: expiry.map(|expiry| sent_at + expiry),
            unanswered_floor: None,
            state: State::Held,
            late_delivery,
        })
    }

    /// Moves to `state`, keeping the count of holdings held (held or uncertain: not yet
    /// ended by this handle) in step.
    fn set_state(&mut self, state: State) {
        let counted = |state| matches!(state, State::Held | State::Uncertain);
        match (counted(self.state), counted(state)) {
            (true, false) => crate::telemetry::held(K::PRIMITIVE.label(), -1),
            (false, true) => crate::telemetry::held(K::PRIMITIVE.label(), 1),
            _ => {}
        }
        self.state = state;
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

    /// [`remaining_estimate`](Self::remaining_estimate) whatever the state.
    fn remaining_estimate_if_held(&self) -> Option<Duration> {
        self.expires_by
            .map(|end| end.saturating_duration_since(Instant::now()))
    }

    /// A step of the primitive's own (a downgrade) found it gone: it is lost, as a renewal
    /// that finds it gone leaves it.
    pub(crate) fn found_gone(&mut self) {
        if self.state == State::Held {
            self.set_state(State::Lost);
        }
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
        let before = (self.expires_by, self.unanswered_floor);
        self.expires_by = least(before.0, asked.map(|asked| sent_at + asked));
        // Counted as unanswered until an answer comes: a cancelled renewal stays so.
        self.unanswered_floor = least(before.1, asked);
        // A renewal dropped before its answer (cut off at the keeper's estimate, or its
        // caller gone) may have run: counted uncertain, as one answered by no reply.
        let mut unanswered = UncertainIfDropped(Some(K::PRIMITIVE.label()));
        let settled = self.keys.renew_settled(&self.token, expiry_ms).await;
        unanswered.0 = None;
        match settled {
            Ok(renewed @ (Renewed::Fully | Renewed::WithPartUnanswered)) => {
                self.expiry = asked;
                // A part of this renewal that was not answered may still land, as a
                // renewal lost whole may: the floor keeps it then.
                if renewed == Renewed::Fully {
                    self.unanswered_floor = before.1;
                }
                // A renewal lost earlier may still arrive and shorten this one.
                let counted = least(asked, self.unanswered_floor);
                self.expires_by = counted.map(|counted| sent_at + counted);
                tracing::debug!(keys = %self.keys, expiry_ms, "{} renewed", K::WHAT);
                crate::telemetry::renewed(K::PRIMITIVE.label(), Renewal::Renewed);
                Ok(true)
            }
            Ok(Renewed::Gone) => {
                self.set_state(State::Lost);
                tracing::debug!(keys = %self.keys, "{} lost before its renewal", K::WHAT);
                crate::telemetry::renewed(K::PRIMITIVE.label(), Renewal::Lost);
                Ok(false)
            }
            Err(err) if !err.may_have_applied() => {
                (self.expires_by, self.unanswered_floor) = before;
                tracing::debug!(keys = %self.keys, error = %err, "{} renewal failed; nothing changed", K::WHAT);
                crate::telemetry::renewed(K::PRIMITIVE.label(), Renewal::Failed);
                Err(err)
            }
            Err(err) => {
                tracing::debug!(keys = %self.keys, error = %err, "{} renewal unanswered; the estimate keeps what both outcomes guarantee", K::WHAT);
                crate::telemetry::renewed(K::PRIMITIVE.label(), Renewal::Uncertain);
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
        let held = self.keys.verify(&self.token).await? && self.usable();
        tracing::debug!(keys = %self.keys, held, "{} verified", K::WHAT);
        Ok(held)
    }

    /// Releases it by owner token (see the [table](self)): `None` when this handle had
    /// already released it (nothing sent), else what the backend found.
    ///
    /// Cancel safe in effect: dropped after the request was sent, the release goes on in a
    /// background task and the handle counts as released.
    pub(crate) async fn release(&mut self) -> Result<Option<K::Released>> {
        if self.state == State::Released {
            return Ok(None);
        }
        let before = self.state;
        self.set_state(State::Released);
        let in_flight = ReleaseOnDrop::arm(&self.keys, &self.token, ReleaseStage::CancelledRelease);
        let err = match self.keys.release(&self.token).await {
            Ok(reply) => {
                in_flight.disarm();
                self.release_late_delivery();
                tracing::debug!(keys = %self.keys, ?reply, "{} released", K::WHAT);
                return Ok(Some(reply));
            }
            Err(err) => err,
        };
        if !worth_retrying(&err) {
            in_flight.disarm();
            // A refusal that may have applied (a script that failed part way, a reply that
            // could not be read) leaves it uncertain: only another release settles it.
            self.set_state(if err.may_have_applied() {
                State::Uncertain
            } else {
                before
            });
            tracing::debug!(keys = %self.keys, error = %err, state = ?self.state, "{} release refused", K::WHAT);
            return Err(err);
        }
        match release_bounded(&*self.keys, &self.token).await {
            Ok(reply) => {
                in_flight.disarm();
                self.release_late_delivery();
                tracing::debug!(keys = %self.keys, ?reply, error = %err, "{} released on the retry", K::WHAT);
                Ok(Some(reply))
            }
            Err(retry_err) => {
                in_flight.disarm();
                self.set_state(
                    if !err.may_have_applied() && !retry_err.may_have_applied() {
                        before
                    } else {
                        State::Uncertain
                    },
                );
                tracing::debug!(keys = %self.keys, error = %err, retry_error = %retry_err, "{} release unconfirmed", K::WHAT);
                Err(err)
            }
        }
    }

    /// Lets go of the holding without releasing it, for another owner to go on with by its
    /// owner token (see [`Detached`]). `None` when the handle no longer holds it (released,
    /// lost, past its estimate) or a release may have run (uncertain): the holding is then
    /// dropped as the handle would be, released in the background if not already, and the
    /// release owed to a lost delivery of its acquisition still sent after its deadline.
    ///
    /// When an earlier delivery of the acquisition was lost, it first waits until that one
    /// can no longer land (its deadline passed on the server's clock): landing after another
    /// owner released the holding, it would take it again under the same token, for nobody.
    ///
    /// Cancel safe in effect: dropped while it waits, the holding is dropped as the handle
    /// would be (released in the background, and again after the deadline).
    pub(crate) async fn detach(mut self) -> Option<Detached> {
        if self.state != State::Held || !self.usable() {
            tracing::debug!(keys = %self.keys, state = ?self.state, "{} not detached: not held", K::WHAT);
            return None;
        }
        if let Some(late_delivery) = self.late_delivery.take() {
            // Dropped mid-wait, the guard releases after the deadline, and the holding at
            // once (it is still held).
            late_delivery.wait_out().await;
        }
        if !self.usable() {
            tracing::debug!(keys = %self.keys, "{} not detached: its estimate ran out", K::WHAT);
            return None;
        }
        self.set_state(State::Released);
        tracing::debug!(keys = %self.keys, "{} detached from its handle", K::WHAT);
        Some(Detached::new(
            OwnerToken::from_new(std::mem::take(&mut self.token)),
            self.expiry,
            self.remaining_estimate_if_held(),
            self.unanswered_floor,
        ))
    }

    /// Once this holding's release was answered: a lost delivery of its acquisition may still
    /// land, so its token is released again once the acquisition's deadline has passed. Not
    /// sooner (the foreground release must answer what it found), and not while the holding
    /// is still held (a release refused without effect keeps it).
    fn release_late_delivery(&mut self) {
        drop(self.late_delivery.take());
    }
}

/// The lesser of two bounds, `None` being none (an end that never comes, no expiry).
fn least<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<K: HoldingKeys> Drop for Holding<K> {
    fn drop(&mut self) {
        if matches!(self.state, State::Held | State::Uncertain) {
            crate::telemetry::held(K::PRIMITIVE.label(), -1);
            super::release_in_background(
                Arc::clone(&self.keys),
                std::mem::take(&mut self.token),
                ReleaseStage::Dropped,
            );
        }
    }
}

/// Counts a renewal of the primitive it names as uncertain when dropped: one whose future
/// was dropped before its answer came.
struct UncertainIfDropped(Option<&'static str>);

impl Drop for UncertainIfDropped {
    fn drop(&mut self) {
        if let Some(primitive) = self.0 {
            crate::telemetry::renewed(primitive, Renewal::Uncertain);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::fmt;
    use std::sync::Mutex;

    use super::*;
    use crate::backend::Backend;
    use crate::backend::memory::MemoryBackend;
    use crate::coordination::ownership::AbandonedCounters;
    use crate::error::{Error, ErrorKind};

    /// Answers renewals and releases from scripts of replies; past them, they succeed.
    struct Scripted {
        renewals: Mutex<VecDeque<Result<bool>>>,
        releases: Mutex<VecDeque<Result<bool>>>,
        abandoned: &'static AbandonedCounters,
        backend: Backend,
    }

    impl fmt::Display for Scripted {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("scripted")
        }
    }

    impl HoldingKeys for Scripted {
        type Released = bool;
        const PRIMITIVE: crate::coordination::ownership::Primitive =
            crate::coordination::ownership::Primitive::FencedLease;
        const WHAT: &'static str = "scripted holding";
        const LEFT_HELD: &'static str = "nothing";

        fn abandoned(&self) -> &'static AbandonedCounters {
            self.abandoned
        }

        fn backend(&self) -> &Backend {
            &self.backend
        }

        async fn release(&self, _token: &str) -> Result<bool> {
            self.releases
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front()
                .unwrap_or(Ok(true))
        }

        async fn renew(&self, _token: &str, _expiry_ms: Option<u64>) -> Result<bool> {
            self.renewals
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front()
                .unwrap_or(Ok(true))
        }

        async fn verify(&self, _token: &str) -> Result<bool> {
            Ok(true)
        }
    }

    fn holding(renewals: Vec<Result<bool>>, expiry: Duration) -> Holding<Scripted> {
        let keys = Arc::new(Scripted {
            renewals: Mutex::new(renewals.into()),
            releases: Mutex::new(VecDeque::new()),
            abandoned: Box::leak(Box::new(AbandonedCounters::new())),
            backend: MemoryBackend::new().into(),
        });
        Holding::granted(keys, "t".to_owned(), Some(expiry), Instant::now(), None)
            .expect("granted in time")
    }

    /// A holding granted after a lost delivery of its acquisition keeps the release it owes
    /// that delivery while it is held: a release refused without effect leaves it held and
    /// owing; an answered release sends it (after the acquisition's deadline).
    #[tokio::test(start_paused = true)]
    async fn a_late_delivery_is_released_once_a_release_is_answered_not_before() {
        let keys = Arc::new(Scripted {
            renewals: Mutex::new(VecDeque::new()),
            releases: Mutex::new(VecDeque::from([Err(Error::new(
                ErrorKind::Permission,
                "refused",
            ))])),
            abandoned: Box::leak(Box::new(AbandonedCounters::new())),
            backend: MemoryBackend::new().into(),
        });
        let owed = ReleaseOnDrop::arm(&keys, "t", ReleaseStage::UncertainAcquire);
        let mut held = Holding::granted(
            Arc::clone(&keys),
            "t".to_owned(),
            Some(Duration::from_secs(60)),
            Instant::now(),
            Some(owed),
        )
        .expect("granted in time");
        held.release().await.expect_err("refused");
        assert_eq!(held.state(), State::Held);
        assert!(held.late_delivery.is_some(), "still owed while held");
        assert_eq!(held.release().await.expect("released"), Some(true));
        assert!(held.late_delivery.is_none(), "sent once answered");
    }

    /// A holding detached after a lost delivery of its acquisition waits until that
    /// delivery's deadline has passed (it could take the holding again after a release by
    /// token), then lets go: nothing is released, then or later.
    #[tokio::test(start_paused = true)]
    async fn detaching_waits_out_a_late_delivery_and_releases_nothing() {
        let backend: Backend = MemoryBackend::new().into();
        let keys = Arc::new(Scripted {
            renewals: Mutex::new(VecDeque::new()),
            // Any release sent would take this.
            releases: Mutex::new(VecDeque::from([Ok(false)])),
            abandoned: Box::leak(Box::new(AbandonedCounters::new())),
            backend: backend.clone(),
        });
        let passed_at = Instant::now() + Duration::from_secs(2);
        let deadline = crate::backend::delivery::Deadline {
            server_ms: 0,
            passed_at,
        };
        let owed = ReleaseOnDrop::arm(&keys, "t", ReleaseStage::UncertainAcquire)
            .not_before(&backend, Some(deadline));
        let held = Holding::granted(
            Arc::clone(&keys),
            "0123456789abcdef0123456789abcdef".to_owned(),
            Some(Duration::from_secs(60)),
            Instant::now(),
            Some(owed),
        )
        .expect("granted in time");
        let detached = held.detach().await.expect("held");
        assert_eq!(Instant::now(), passed_at, "waited for the deadline");
        assert_eq!(detached.expiry(), Duration::from_secs(60));
        assert_eq!(detached.remaining_estimate(), Duration::from_secs(58));
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(
            keys.releases
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len(),
            1,
            "nothing released"
        );
    }

    /// A holding found lost keeps the release it owes a lost delivery of its acquisition
    /// when it is detached: nothing is handed on, and the release goes after the deadline.
    #[tokio::test(start_paused = true)]
    async fn detaching_a_lost_holding_keeps_the_release_it_owes() {
        let backend: Backend = MemoryBackend::new().into();
        let keys = Arc::new(Scripted {
            renewals: Mutex::new(VecDeque::from([Ok(false)])),
            releases: Mutex::new(VecDeque::from([Ok(false)])),
            abandoned: Box::leak(Box::new(AbandonedCounters::new())),
            backend: backend.clone(),
        });
        let deadline = crate::backend::delivery::Deadline {
            server_ms: 0,
            passed_at: Instant::now() + Duration::from_secs(2),
        };
        let owed = ReleaseOnDrop::arm(&keys, "t", ReleaseStage::UncertainAcquire)
            .not_before(&backend, Some(deadline));
        let mut held = Holding::granted(
            Arc::clone(&keys),
            "0123456789abcdef0123456789abcdef".to_owned(),
            Some(Duration::from_secs(60)),
            Instant::now(),
            Some(owed),
        )
        .expect("granted in time");
        assert!(!held.renew(Some(60_000)).await.expect("answered"));
        assert!(held.detach().await.is_none(), "lost: nothing to hand on");
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            keys.releases
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty(),
            "the owed release was sent"
        );
    }

    fn unanswered() -> Result<bool> {
        Err(Error::new(ErrorKind::Timeout, "no answer").uncertain(true))
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_renewal_narrows_the_estimate_and_keeps_the_holding() {
        let second = Duration::from_secs(1);
        let mut held = holding(vec![unanswered()], 60 * second);
        tokio::time::advance(10 * second).await;
        assert!(held.renew(Some(5_000)).await.is_err());
        assert_eq!(held.state(), State::Held);
        // The earlier of the old end (50 s left) and the renewal's 5 s.
        assert_eq!(held.remaining_estimate(), Some(5 * second));
        // And a later renewal that is answered cannot count on more than the lost one asked:
        // it may still arrive and set the expiry to its arrival plus 5 s.
        assert!(held.renew(Some(60_000)).await.expect("renewed"));
        assert_eq!(held.remaining_estimate(), Some(5 * second));
        assert_eq!(held.expiry(), Some(60 * second));
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_certainly_did_nothing_leaves_the_estimate() {
        let second = Duration::from_secs(1);
        let refused = Err(Error::new(ErrorKind::Io, "refused"));
        let mut held = holding(vec![refused], 60 * second);
        assert!(held.renew(Some(1_000)).await.is_err());
        assert_eq!(held.remaining_estimate(), Some(60 * second));
        // Renewed as asked: no lost renewal holds it back.
        assert!(held.renew(Some(30_000)).await.expect("renewed"));
        assert_eq!(held.remaining_estimate(), Some(30 * second));
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_estimate_nothing_is_sent_and_a_release_settles_it() {
        let mut held = holding(vec![], Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!held.renew(Some(1_000)).await.expect("not sent"));
        assert!(!held.verify().await.expect("not sent"));
        assert!(!held.is_released());
        assert_eq!(held.release().await.expect("released"), Some(true));
        assert!(held.is_released());
        assert_eq!(held.release().await.expect("already"), None);
    }

    fn refused_releases(held: &Holding<Scripted>, replies: Vec<Result<bool>>) {
        *held.keys.releases.lock().unwrap_or_else(|e| e.into_inner()) = replies.into();
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_refused_after_it_may_have_applied_is_uncertain() {
        let mut held = holding(vec![], Duration::from_secs(60));
        let part_way = Error::new(ErrorKind::Script, "failed part way").uncertain(true);
        refused_releases(&held, vec![Err(part_way)]);
        assert!(held.release().await.is_err());
        assert_eq!(held.state(), State::Uncertain);
        // Nothing but a release is sent now, and it settles it.
        assert!(!held.renew(Some(1_000)).await.expect("not sent"));
        assert_eq!(held.release().await.expect("released"), Some(true));
        assert!(held.is_released());

        let mut held = holding(vec![], Duration::from_secs(60));
        // As the decoder makes it: the script ran, its reply could not be read.
        let unreadable = Error::unexpected_reply("garbled");
        refused_releases(&held, vec![Err(unreadable)]);
        assert!(held.release().await.is_err());
        assert_eq!(held.state(), State::Uncertain);
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_refused_without_effect_leaves_it_held() {
        for refused in [
            Error::new(ErrorKind::Permission, "NOPERM"),
            // An error reply outside a script (`WRONGTYPE`, say): the command did not run.
            Error::new(ErrorKind::Server, "WRONGTYPE"),
        ] {
            let mut held = holding(vec![], Duration::from_secs(60));
            refused_releases(&held, vec![Err(refused)]);
            assert!(held.release().await.is_err());
            assert_eq!(held.state(), State::Held);
        }
    }
}
