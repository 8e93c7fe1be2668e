//! Sending an acquisition, the one step that creates a holding: with a deadline on the
//! server's clock, and a cleanup of an uncertain outcome that waits until the deadline has
//! passed, so that a late delivery cannot recreate what the cleanup removed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::time::Instant;

use super::{HoldingKeys, ReleaseOnDrop, ReleaseStage};
use crate::backend::Backend;
use crate::error::{Error, ErrorKind, Result};

/// An acquisition the backend answered.
pub(crate) struct Sent<K: HoldingKeys, R> {
    /// What the backend answered.
    pub(crate) reply: R,
    /// Releases the token in the background unless disarmed: disarm it for an answer that
    /// took nothing, or hand it to [`Holding::granted`](super::Holding::granted).
    pub(crate) in_flight: ReleaseOnDrop<K>,
    /// When the request was sent: the estimate of a grant counts from here.
    pub(crate) sent_at: Instant,
}

/// Sends an acquisition for `token` with `send`, which gets the server time (ms since the
/// epoch; 0 for none) after which the step must change nothing. Its future is boxed and
/// type-erased: the backend's future is a deeply nested type, which an application spawning
/// acquisitions would otherwise have to raise its recursion limit for.
///
/// A failure that certainly changed nothing is returned as is. One that may have applied (or
/// the future dropped mid-flight) leaves a background release of `token`, which waits until
/// the deadline has certainly passed on the server, so the request cannot land after it.
pub(crate) async fn send_acquisition<'a, K, R>(
    keys: &Arc<K>,
    token: &str,
    backend: &Backend,
    send: impl FnOnce(u64) -> Pin<Box<dyn Future<Output = Result<R>> + Send + 'a>>,
) -> Result<Sent<K, R>>
where
    K: HoldingKeys,
{
    // Nothing is sent yet: a backend that cannot be reached fails the acquisition as is.
    let deadline = backend.acquire_deadline().await?;
    let in_flight = ReleaseOnDrop::arm(keys, token, ReleaseStage::UncertainAcquire)
        .not_before(backend, deadline);
    let sent_at = Instant::now();
    match send(deadline.map_or(0, |deadline| deadline.server_ms)).await {
        Ok(reply) => Ok(Sent {
            reply,
            in_flight,
            sent_at,
        }),
        Err(err) if !err.may_have_applied() => {
            in_flight.disarm();
            tracing::debug!(keys = %keys, error = %err, "{} acquisition failed; nothing changed", K::WHAT);
            Err(err)
        }
        Err(err) => {
            tracing::debug!(keys = %keys, error = %err, "{} acquisition uncertain; releasing its token once its deadline has passed", K::WHAT);
            drop(in_flight);
            Err(err)
        }
    }
}

/// The answer to an acquisition that reached the server after its deadline: it took
/// nothing, and the server's clock is read again (it may not be the one the deadline came
/// from).
pub(crate) fn arrived_after_its_deadline<K: HoldingKeys>(
    in_flight: ReleaseOnDrop<K>,
    backend: &Backend,
) -> Error {
    in_flight.disarm();
    backend.deadline_missed();
    arrived_late()
}

/// The error for an acquisition that reached the server after its deadline: certainly
/// without effect, and *unavailable* (the backend did not answer in time for it to count).
fn arrived_late() -> Error {
    Error::new(
        ErrorKind::Timeout,
        "the acquisition reached the server after its deadline; nothing was taken",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_acquisition_certainly_took_nothing_and_is_unavailability() {
        let err = arrived_late();
        assert!(!err.may_have_applied());
        assert!(err.is_unavailable());
    }
}
