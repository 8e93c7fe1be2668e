//! Sending an acquisition, the one step that creates a holding, and settling its answer the
//! same way for every held primitive: with a deadline on the server's clock, and a cleanup
//! of an uncertain outcome that waits until the deadline has passed, so that a late delivery
//! cannot recreate what the cleanup removed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Holding, HoldingKeys, ReleaseOnDrop, ReleaseStage, new_token};
use crate::backend::delivery::{Delivery, Resends};
use crate::coordination::Attempt;
use crate::error::{Error, Result};

/// What an acquisition step answered, in the terms every held primitive shares.
#[derive(Debug)]
pub(crate) enum Acquisition<G> {
    /// Granted, with what the primitive adds to its holding (a fencing token, or nothing).
    Granted(G),
    /// Others hold it; nothing changed. `retry_after_ms`: when expiries alone free it, if
    /// they do.
    Busy { retry_after_ms: Option<u64> },
    /// The request reached the server after its deadline; nothing changed.
    Late,
    /// The step checked and refused, certainly without effect (a semaphore's capacity that
    /// differs from its holders').
    Refused(Error),
}

/// A held primitive's acquisition: the one step that creates a holding, sent and settled by
/// the kit's [`try_acquire`] the same way for every primitive.
pub(crate) trait Acquire: HoldingKeys {
    /// What an acquisition asks for beside its owner token and deadline (a lease, an access).
    type Ask: Send + Sync;
    /// What a grant adds to the holding: a fencing token, or nothing.
    type Granted;

    /// The expiry a grant of `ask` gives the holding, in whole milliseconds; `None`: none.
    fn expiry_ms(ask: &Self::Ask) -> Option<u64>;

    /// One delivery of the acquisition for `token`, a no-op answering
    /// [`Acquisition::Late`] on a server whose clock is past `not_after_ms` (0: no deadline).
    /// A delivery that finds its own token is a grant.
    fn acquire<'a>(
        &'a self,
        token: &'a str,
        ask: &'a Self::Ask,
        not_after_ms: u64,
    ) -> impl Future<Output = Result<Acquisition<Self::Granted>>> + Send + 'a;
}

/// Takes what `keys` guard for a new owner token now, if it is free: the acquisition sent by
/// [`send_acquisition`] and [settled](Sent::settle), the holding made into what the
/// primitive hands out by `hold`.
pub(crate) async fn try_acquire<K: Acquire, T>(
    keys: &Arc<K>,
    ask: K::Ask,
    hold: impl FnOnce(Holding<K>, K::Granted) -> T,
) -> Result<Attempt<T>> {
    let token = new_token()?;
    // Whatever is held is freed by a restart that keeps nothing, or by an eviction: told
    // once per handle.
    keys.backend().check_persistence_once();
    let sent = send_acquisition(keys, &token, |not_after_ms| {
        Box::pin(keys.acquire(&token, &ask, not_after_ms))
    })
    .await?;
    sent.settle(keys, token, K::expiry_ms(&ask), hold)
}

/// An acquisition the backend answered, to be [settled](Sent::settle).
pub(crate) struct Sent<K: HoldingKeys, G> {
    reply: Acquisition<G>,
    /// Releases the token in the background, once the deadline has passed, unless disarmed:
    /// disarmed for an answer that took nothing or a grant, unless an earlier delivery was
    /// lost (then dropped armed, or handed to [`Holding::granted`] to send when the holding
    /// ends).
    in_flight: ReleaseOnDrop<K>,
    /// When the first delivery was sent: the estimate of a grant counts from here.
    sent_at: Instant,
    /// Whether an earlier delivery of it was lost on the way: it may still land (before its
    /// deadline), so an answer that took nothing leaves the background release armed.
    after_uncertain: bool,
}

/// Sends an acquisition for `token` with `send`, which gets the server time (ms since the
/// epoch; 0 for none) after which the step must change nothing. Its future is boxed and
/// type-erased: the backend's future is a deeply nested type, which an application spawning
/// acquisitions would otherwise have to raise its recursion limit for.
///
/// A failure that certainly changed nothing is returned as is. One lost on the way (no
/// reply in time, a connection lost mid-flight) is sent again, with the same token and
/// deadline, within the transient-retry bound: an acquisition that finds its own token is a
/// grant, so a delivery that landed twice takes once, and a failover or a cut connection
/// costs latency, not an error. One that may have applied and is not sent again (or the
/// future dropped mid-flight) leaves a background release of `token`, which waits until the
/// deadline has certainly passed on the server, so the request cannot land after it; so
/// does an answer that took nothing after an earlier delivery was lost.
pub(crate) async fn send_acquisition<'a, K, G>(
    keys: &Arc<K>,
    token: &str,
    mut send: impl FnMut(u64) -> Pin<Box<dyn Future<Output = Result<Acquisition<G>>> + Send + 'a>>,
) -> Result<Sent<K, G>>
where
    K: HoldingKeys,
{
    let backend = keys.backend();
    // Nothing is sent yet: a backend that cannot be reached fails the acquisition as is.
    let deadline = backend.acquire_deadline().await?;
    let in_flight = ReleaseOnDrop::arm(keys, token, ReleaseStage::UncertainAcquire)
        .not_before(backend, deadline);
    let not_after_ms = deadline.map_or(0, |deadline| deadline.server_ms);
    let mut lost: Option<Error> = None;
    let mut resends = Resends::new();
    // The first delivery's: a grant found by a later one (its own token) was made by an
    // earlier one, and its expiry counts from then.
    let sent_at = Instant::now();
    loop {
        let err = match (send(not_after_ms).await, lost) {
            // Too late to take anything now, but an earlier delivery may have.
            (Ok(Acquisition::Late), Some(lost)) => {
                backend.deadline_missed();
                return Err(uncertain(keys, in_flight, lost));
            }
            (Ok(reply), lost) => {
                return Ok(Sent {
                    reply,
                    in_flight,
                    sent_at,
                    after_uncertain: lost.is_some(),
                });
            }
            (Err(err), None) if !err.may_have_applied() => {
                in_flight.disarm();
                tracing::debug!(keys = %keys, error = %err, "{} acquisition failed; nothing changed", K::WHAT);
                return Err(err);
            }
            // This delivery certainly changed nothing, an earlier one may have: its own
            // failure (a refusal stays a refusal), uncertain.
            (Err(err), Some(_)) if !err.may_have_applied() => {
                return Err(uncertain(keys, in_flight, err.uncertain(true)));
            }
            (Err(err), _) => err,
        };
        if !backend.resend_after(&mut resends, &err).await {
            return Err(uncertain(keys, in_flight, err));
        }
        tracing::debug!(keys = %keys, error = %err, "{} acquisition lost on the way; sending it again", K::WHAT);
        lost = Some(err);
    }
}

/// The answer to an acquisition whose outcome stays uncertain: `err`, once `in_flight` is
/// dropped, releasing the token in the background once its deadline has passed.
fn uncertain<K: HoldingKeys>(keys: &Arc<K>, in_flight: ReleaseOnDrop<K>, err: Error) -> Error {
    tracing::debug!(keys = %keys, error = %err, "{} acquisition uncertain; releasing its token once its deadline has passed", K::WHAT);
    drop(in_flight);
    err
}

impl<K: HoldingKeys, G> Sent<K, G> {
    /// What the answer means for the caller, the same for every held primitive: a holding of
    /// `token` under `keys`, made into what the primitive hands out by `hold`; busy, with
    /// when expiries free it; or an error. A grant whose answer came after its expiry had
    /// already run out by the local estimate is released at once and answered as busy, with
    /// no time (nobody could have used it). A late request took nothing, and the server's
    /// clock is read again (it may not be the one the deadline came from).
    pub(crate) fn settle<T>(
        self,
        keys: &Arc<K>,
        token: String,
        expiry_ms: Option<u64>,
        hold: impl FnOnce(Holding<K>, G) -> T,
    ) -> Result<Attempt<T>> {
        let Sent {
            reply,
            in_flight,
            sent_at,
            after_uncertain,
        } = self;
        // An answer that took nothing after an earlier delivery was lost: that delivery may
        // still land before its deadline, and its token must go then.
        let took_nothing = |in_flight: ReleaseOnDrop<K>| {
            if after_uncertain {
                drop(in_flight);
            } else {
                in_flight.disarm();
            }
        };
        match reply {
            Acquisition::Granted(extra) => {
                let expiry = expiry_ms.map(Duration::from_millis);
                // An earlier delivery was lost, and may still land before its deadline: the
                // holding keeps its release, to send once the holding ends.
                let late_delivery = if after_uncertain {
                    Some(in_flight)
                } else {
                    in_flight.disarm();
                    None
                };
                match Holding::granted(Arc::clone(keys), token, expiry, sent_at, late_delivery) {
                    Some(holding) => {
                        tracing::debug!(keys = %keys, expiry_ms, "{} acquired", K::WHAT);
                        Ok(Attempt::Acquired(hold(holding, extra)))
                    }
                    None => Ok(Attempt::Busy { retry_after: None }),
                }
            }
            Acquisition::Busy { retry_after_ms } => {
                took_nothing(in_flight);
                tracing::debug!(keys = %keys, retry_after_ms, "{} busy", K::WHAT);
                Ok(Attempt::Busy {
                    retry_after: retry_after_ms.map(Duration::from_millis),
                })
            }
            Acquisition::Late => {
                took_nothing(in_flight);
                keys.backend().deadline_missed();
                tracing::debug!(keys = %keys, "{} acquisition arrived after its deadline; nothing changed", K::WHAT);
                Err(Error::arrived_late("the acquisition"))
            }
            Acquisition::Refused(err) => {
                took_nothing(in_flight);
                tracing::debug!(keys = %keys, error = %err, "{} acquisition refused", K::WHAT);
                Err(err)
            }
        }
    }
}
