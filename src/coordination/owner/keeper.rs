//! The one keeper of every self-renewing holding ([`Managed`](super::Managed)).
//!
//! A task owns the holding and:
//!
//! - renews it at half its lease;
//! - when a renewal gets no answer (or an error), tries again with jittered backoff (50 ms
//!   doubling to 1 s) **while the local estimate lasts**, each attempt bounded by what is
//!   left of the estimate, so that a stall shorter than the estimate costs nothing: the
//!   holding's own rule keeps the estimate at what every outcome of an unanswered renewal
//!   guarantees, and a renewal only ever extends what it still finds under its owner token;
//! - says ownership is lost only when the backend says so (a renewal finds the holding gone
//!   or another's) or when the estimate runs out, which is never later than the backend's
//!   expiry: a fiftieth of the lease (at least 20 ms) before it, for timers, scheduling and
//!   clock drift;
//! - tells the holder **before** it releases: at the lifetime limit, when the estimate ran
//!   out, and on a release the holder asked for (so that every clone of the signal, held by
//!   the work, stops before anyone else can take over).

use std::time::Duration;

use std::sync::Arc;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

// Past the bound, the holding's own drop releases it in the background.
use super::release::RELEASE_BOUND;
use super::{Detached, Holding, HoldingKeys, expiry_ms};
use crate::backoff::Backoff;
use crate::coordination::ownership::{LossReason, OwnershipLost};
use crate::error::{Error, ErrorKind, Result};

/// The least that ownership ends before the holding's local estimate does: a fiftieth of the
/// lease, and at least this. The estimate already starts before the request that set the
/// expiry was sent, but only by the request's way to the server, which on a fast network is
/// less than a timer's granularity (a millisecond), the time the work takes to see the
/// signal, or what the two clocks may drift apart over a lease.
const SAFETY_MARGIN_MIN: Duration = Duration::from_millis(20);

/// The first pause before a failed renewal is tried again (then doubled, jittered).
const FIRST_RETRY: Duration = Duration::from_millis(50);
/// The longest pause between two renewal attempts after a failure.
const MAX_RETRY: Duration = Duration::from_secs(1);

/// How a holding is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeepOptions {
    /// The lease asked on each renewal; renewed at half of it.
    pub(crate) lease: Duration,
    /// Whether dropping the handle releases the holding; otherwise it renews on its own.
    pub(crate) release_on_drop: bool,
    /// The longest the holding is kept in all; only for one kept after its handle is
    /// dropped.
    pub(crate) max_lifetime: Option<Duration>,
    /// The longest the crate itself keeps a holding released with its handle (the
    /// concurrency layer's longest hold): a lifetime limit, told and released the same way,
    /// that the public options refuse only because a holder can drop its handle instead.
    pub(crate) hold_limit: Option<Duration>,
}

impl KeepOptions {
    /// Fails with [`ErrorKind::InvalidArgument`] for a lifetime limit under a millisecond,
    /// or one set while dropping the handle releases the holding: the limit is for work that
    /// outlives its handle, and a released holding needs none.
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(limit) = self.max_lifetime {
            if limit < Duration::from_millis(1) {
                return Err(Error::invalid_argument(
                    "a lifetime limit must be at least 1 ms",
                ));
            }
            if self.release_on_drop {
                return Err(Error::invalid_argument(
                    "a lifetime limit is for a holding kept after its handle is dropped: set release_on_drop(false) with it",
                ));
            }
        }
        Ok(())
    }
}

/// What a release answers: what it found, `None` when nothing was sent (the handle had
/// already released it).
type Released<K> = Result<Option<<K as HoldingKeys>::Released>>;

/// What the holder asked of the keeper, and where to answer.
enum Request<K: HoldingKeys> {
    /// Release it: tell, release, answer with the outcome.
    Release(oneshot::Sender<Released<K>>),
    /// Stop keeping it and let go of it unreleased (told as detached), answering with what
    /// goes on; `None`, told as a loss, when it is no longer held.
    Detach(oneshot::Sender<Option<Detached>>),
}

/// The handle side of a kept holding: asks the keeper to release, and carries the signal.
pub(crate) struct Keeper<K: HoldingKeys> {
    control: Option<oneshot::Sender<Request<K>>>,
    ownership: OwnershipLost,
    release_on_drop: bool,
}

impl<K: HoldingKeys> Keeper<K> {
    /// Spawns the keeper of `holding` on the current tokio runtime. Fails with
    /// [`ErrorKind::InvalidArgument`] for invalid options or without a runtime (then
    /// `holding` is dropped, which releases it).
    pub(crate) fn spawn(holding: Holding<K>, options: KeepOptions) -> Result<Keeper<K>> {
        options.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("a managed {} needs a tokio runtime to renew it", K::WHAT),
            )
        })?;
        let (control, requests) = oneshot::channel();
        let (lost, reason) = watch::channel(None);
        let lease_ms = expiry_ms("a managed lease", options.lease)?;
        runtime.spawn(keep(holding, options, lease_ms, requests, lost));
        Ok(Keeper {
            control: Some(control),
            ownership: OwnershipLost::new(reason),
            release_on_drop: options.release_on_drop,
        })
    }

    /// The signal that fires when ownership ends.
    pub(crate) fn ownership(&self) -> OwnershipLost {
        self.ownership.clone()
    }

    /// Asks the keeper to tell the holder and release, at once (not at the first poll: a
    /// release dropped unpolled still happens); the future answers with the outcome, `None`
    /// when the keeper had already ended (the holding was lost, or released at its limit).
    pub(crate) fn release(mut self) -> impl Future<Output = Option<Released<K>>> + Send + use<K> {
        let asked = self.control.take().and_then(|control| {
            let (reply, outcome) = oneshot::channel();
            control.send(Request::Release(reply)).ok().map(|()| outcome)
        });
        async move { asked?.await.ok() }
    }

    /// Asks the keeper to stop renewing (a renewal in flight answered first), let go of the
    /// holding unreleased and tell the holder it was detached (see [`Holding::detach`]);
    /// `None` when the keeper had already ended (lost, or released at its limit), or the
    /// holding is no longer held (then told as a loss). Asked at once; dropped before the
    /// answer, what was let go of is released in the background.
    pub(crate) fn detach(mut self) -> impl Future<Output = Option<Detached>> + Send + use<K> {
        let asked = self.control.take().and_then(|control| {
            let (reply, detached) = oneshot::channel();
            control.send(Request::Detach(reply)).ok().map(|()| detached)
        });
        async move { asked?.await.ok().flatten() }
    }
}

impl<K: HoldingKeys> Drop for Keeper<K> {
    fn drop(&mut self) {
        if let Some(control) = self.control.take()
            && self.release_on_drop
        {
            // Nobody waits for the answer: the keeper releases in the background.
            let (reply, _) = oneshot::channel();
            let _ = control.send(Request::Release(reply));
        }
        // Otherwise the control channel closes and the keeper goes on alone.
    }
}

/// What woke the keeper while a renewal was in flight.
enum Event<K: HoldingKeys> {
    Asked(std::result::Result<Request<K>, oneshot::error::RecvError>),
    Renewal(std::result::Result<Result<bool>, tokio::time::error::Elapsed>),
}

async fn keep<K: HoldingKeys>(
    mut holding: Holding<K>,
    options: KeepOptions,
    lease_ms: u64,
    mut requests: oneshot::Receiver<Request<K>>,
    lost: watch::Sender<Option<LossReason>>,
) {
    // A limit too far to count is no limit.
    let lifetime_end = [options.max_lifetime, options.hold_limit]
        .into_iter()
        .flatten()
        .min()
        .and_then(|limit| Instant::now().checked_add(limit));
    let period = options.lease / 2;
    // Ownership ends this much before the estimate does (see `SAFETY_MARGIN_MIN`).
    let margin = (options.lease / 50).max(SAFETY_MARGIN_MIN);
    let left_of = |holding: &Holding<K>| {
        holding
            .remaining_estimate()
            .unwrap_or(Duration::MAX)
            .saturating_sub(margin)
    };
    // A holding taken over with less left than a lease is renewed at half of what is left.
    let mut next = Instant::now() + period.min(left_of(&holding) / 2);
    let mut backoff = Backoff::new(FIRST_RETRY, MAX_RETRY);
    // The handle was dropped without a release: no more requests will come.
    let mut unattended = false;
    loop {
        let estimate_end = Instant::now().checked_add(left_of(&holding));
        let wake = [Some(next), estimate_end, lifetime_end]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(next);
        tokio::select! {
            biased;
            asked = &mut requests, if !unattended => match asked {
                Ok(request) => return answer(holding, &lost, request).await,
                Err(_) => unattended = true,
            },
            () = tokio::time::sleep_until(wake) => {}
        }
        if lifetime_end.is_some_and(|end| Instant::now() >= end) {
            tracing::info!(
                what = K::WHAT,
                token = super::shown_token(holding.token()),
                "managed holding reached its lifetime limit; telling the holder, then releasing it"
            );
            return end(holding, &lost, LossReason::LifetimeLimit).await;
        }
        if left_of(&holding).is_zero() {
            tracing::warn!(
                what = K::WHAT,
                token = super::shown_token(holding.token()),
                "managed holding not renewed before its estimate ran out; treating it as lost"
            );
            return end(holding, &lost, LossReason::Uncertain).await;
        }
        if Instant::now() < next {
            continue;
        }
        // Past the estimate, ownership is over whatever the renewal's fate; past the lifetime
        // limit, it is to end.
        let left = lifetime_end.map_or(left_of(&holding), |end| {
            left_of(&holding).min(end.saturating_duration_since(Instant::now()))
        });
        let event = {
            let renewal = tokio::time::timeout(left, holding.renew(Some(lease_ms)));
            tokio::pin!(renewal);
            let event = tokio::select! {
                biased;
                asked = &mut requests, if !unattended => Event::<K>::Asked(asked),
                renewal = &mut renewal => Event::Renewal(renewal),
            };
            match event {
                Event::Asked(Ok(Request::Detach(reply))) => {
                    // The renewal in flight is answered first: dropped unanswered, it could
                    // still arrive after the next owner's renewal and cut it short.
                    let _ = renewal.await;
                    Event::Asked(Ok(Request::Detach(reply)))
                }
                event => event,
            }
        };
        match event {
            // The renewal was dropped mid-flight: the holding keeps the narrower estimate.
            Event::Asked(Ok(request)) => return answer(holding, &lost, request).await,
            Event::Asked(Err(_)) => unattended = true,
            Event::Renewal(Ok(Ok(true))) => {
                next = Instant::now() + period;
                backoff.reset();
            }
            Event::Renewal(Ok(Ok(false))) if holding.is_released() => {
                tracing::warn!(
                    what = K::WHAT,
                    token = super::shown_token(holding.token()),
                    "managed holding lost: gone or another holder's at renewal"
                );
                if K::RELEASE_WHEN_LOST {
                    return end(holding, &lost, LossReason::NotRenewed).await;
                }
                tell::<K>(&lost, LossReason::NotRenewed);
                return;
            }
            Event::Renewal(outcome) => {
                let error = match outcome {
                    Ok(Err(err)) => err.to_string(),
                    Err(_) => format!("no answer within the {left:?} left of the estimate"),
                    Ok(Ok(_)) => "not renewed".to_owned(),
                };
                let pause = backoff.next_pause();
                tracing::debug!(what = K::WHAT, %error, retry_in = ?pause, "managed holding renewal failed; retrying while the estimate lasts");
                next = Instant::now() + pause;
            }
        }
    }
}

/// Fires the ownership signal with `reason`, and counts it when it is a loss.
fn tell<K: HoldingKeys>(lost: &watch::Sender<Option<LossReason>>, reason: LossReason) {
    lost.send_replace(Some(reason));
    if let Some(loss) = reason.loss_label() {
        crate::telemetry::lost(K::PRIMITIVE.label(), loss);
    }
}

/// Tells the holder `reason`, then releases (which settles the holding on the backend if it
/// is still this one's).
async fn end<K: HoldingKeys>(
    mut holding: Holding<K>,
    lost: &watch::Sender<Option<LossReason>>,
    reason: LossReason,
) {
    tell::<K>(lost, reason);
    let _ = release(&mut holding).await;
}

/// Does what the holder asked, telling every clone of the signal first: releases and
/// answers with the outcome, or lets go of the holding unreleased and answers with what goes
/// on (released, if nobody waits for it any more).
async fn answer<K: HoldingKeys>(
    mut holding: Holding<K>,
    lost: &watch::Sender<Option<LossReason>>,
    request: Request<K>,
) {
    match request {
        Request::Release(reply) => {
            tell::<K>(lost, LossReason::Released);
            let outcome = release(&mut holding).await;
            let _ = reply.send(outcome);
        }
        Request::Detach(reply) => {
            if holding.is_released() {
                // Lost by the renewal the detach waited for.
                let _ = reply.send(None);
                if K::RELEASE_WHEN_LOST {
                    return end(holding, lost, LossReason::NotRenewed).await;
                }
                tell::<K>(lost, LossReason::NotRenewed);
                return;
            }
            let keys = Arc::clone(holding.keys());
            match holding.detach().await {
                Some(detached) => {
                    tell::<K>(lost, LossReason::Detached);
                    if let Err(Some(detached)) = reply.send(Some(detached)) {
                        // Nobody waits for it any more: released, as a dropped handle's.
                        super::release_in_background(
                            keys,
                            detached.into_owner_token().into_string(),
                            super::ReleaseStage::Dropped,
                        );
                    }
                }
                None => {
                    // Its estimate ran out; dropped, it is released in the background.
                    tell::<K>(lost, LossReason::Uncertain);
                    let _ = reply.send(None);
                }
            }
        }
    }
}

/// Releases `holding`, bounded; past the bound, dropping it retries in the background.
async fn release<K: HoldingKeys>(holding: &mut Holding<K>) -> Released<K> {
    match tokio::time::timeout(RELEASE_BOUND, holding.release()).await {
        Ok(outcome) => outcome,
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!(
                "releasing a managed {} took over {RELEASE_BOUND:?}; retrying in the background",
                K::WHAT
            ),
        )
        .uncertain(true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifetime_limit_needs_an_unattended_holding() {
        let options = |release_on_drop, max_lifetime| KeepOptions {
            lease: Duration::from_secs(1),
            release_on_drop,
            max_lifetime,
            hold_limit: None,
        };
        assert!(options(true, None).validate().is_ok());
        assert!(options(false, None).validate().is_ok());
        assert!(
            options(false, Some(Duration::from_secs(1)))
                .validate()
                .is_ok()
        );
        for invalid in [
            options(true, Some(Duration::from_secs(1))),
            options(false, Some(Duration::ZERO)),
        ] {
            let err = invalid.validate().expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{invalid:?}");
        }
    }
}
