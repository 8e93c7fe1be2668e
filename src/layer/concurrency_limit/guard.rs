//! What keeps a response's permit alive while its body streams, and frees it after.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Sleep;

use super::fallback::LocalPermit;
use super::{HoldLimitReached, PermitLost};
use crate::BoxError;
use crate::coordination::ManagedOptions;
use crate::coordination::ownership::LossReason;
use crate::coordination::semaphore::{ManagedPermit, SemaphorePermit};
use crate::layer::admission::BodyGuard;

/// Completes when the permit is lost.
type Lost = Pin<Box<dyn Future<Output = LossReason> + Send + Sync>>;

/// The permit of one response, held from the inner service's call to the end of its body.
///
/// A coordinated permit is a [`ManagedPermit`]: renewed at half its lease, riding out a
/// backend that does not answer while the permit's estimate lasts, released when told to
/// ([`finish`](Self::finish), at the body's end, which may wait for the release) or when
/// this guard is dropped (a disconnect: nothing waits). If the permit is lost, or the
/// response reaches the layer's longest hold, the guard says so to the body, which ends the
/// stream with an error (and drops the guard, which releases the permit).
pub(crate) struct StreamGuard {
    permit: Option<ManagedPermit>,
    lost: Option<Lost>,
    /// A worker-local permit granted while failing open.
    local: Option<LocalPermit>,
    /// When a worker-local permit has been held for the layer's longest hold, if it has one.
    /// (A coordinated permit's keeper keeps that time itself, whether the body is polled or
    /// not, and tells it as a loss for its lifetime limit.)
    hold_limit: Option<Pin<Box<Sleep>>>,
}

impl StreamGuard {
    /// Keeps `permit` renewed to an expiry of `lease`, for at most `max_hold`: past it, its
    /// keeper releases it, whatever the response is doing (its handler still running, its
    /// body not polled because the client does not read), and says so to the body.
    pub(crate) fn keep(permit: SemaphorePermit, lease: Duration, max_hold: Duration) -> Self {
        let options = ManagedOptions::new()
            .lease(lease)
            .hold_limit(Some(max_hold));
        match ManagedPermit::keep(permit, &options) {
            Ok(permit) => {
                let mut ownership = permit.ownership();
                StreamGuard {
                    lost: Some(Box::pin(async move { ownership.lost().await })),
                    permit: Some(permit),
                    local: None,
                    hold_limit: None,
                }
            }
            // No runtime to renew it (the permit was dropped, which releases it the way a
            // dropped permit always is): the stream cannot be guarded.
            Err(err) => {
                tracing::warn!(error = %err, "cannot keep a streaming response's permit");
                StreamGuard {
                    lost: Some(Box::pin(std::future::ready(LossReason::Uncertain))),
                    permit: None,
                    local: None,
                    hold_limit: None,
                }
            }
        }
    }

    /// A guard for a permit of this process only, while the backend is unavailable, for at
    /// most `max_hold`.
    pub(crate) fn local(permit: LocalPermit, max_hold: Duration) -> Self {
        StreamGuard {
            permit: None,
            lost: None,
            local: Some(permit),
            hold_limit: hold_limit(max_hold),
        }
    }
}

impl BodyGuard for StreamGuard {
    /// [`PermitLost`] when the permit was lost, [`HoldLimitReached`] when the response
    /// reached the longest hold.
    fn poll_cut(&mut self, cx: &mut Context<'_>) -> Option<BoxError> {
        if let Some(Poll::Ready(reason)) = self.lost.as_mut().map(|lost| lost.as_mut().poll(cx)) {
            self.lost = None;
            // The keeper's lifetime limit is the layer's longest hold.
            if reason == LossReason::LifetimeLimit {
                tracing::warn!(
                    "a streaming response held its slot for the longest hold; cutting the stream"
                );
                return Some(Box::new(HoldLimitReached));
            }
            tracing::warn!(%reason, "a streaming response's permit was lost; cutting the stream");
            return Some(Box::new(PermitLost));
        }
        if let Some(Poll::Ready(())) = self
            .hold_limit
            .as_mut()
            .map(|limit| limit.as_mut().poll(cx))
        {
            tracing::warn!(
                "a streaming response held its slot for the longest hold; cutting the stream"
            );
            self.hold_limit = None;
            return Some(Box::new(HoldLimitReached));
        }
        None
    }

    /// Releases the permit; the receiver completes once it is released (or the release gave
    /// up within its bound), `None` when there is nothing to wait for.
    fn finish(mut self: Box<Self>) -> Option<oneshot::Receiver<()>> {
        drop(self.local.take());
        let permit = self.permit.take()?;
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (done, released) = oneshot::channel();
        runtime.spawn(async move {
            match permit.release().await {
                Ok(_) => tracing::trace!("streaming response's permit released"),
                Err(err) => {
                    tracing::debug!(error = %err, "releasing a streaming response's permit failed");
                }
            }
            let _ = done.send(());
        });
        Some(released)
    }
}

/// The timer of the longest hold, from now; none for a bound too far to count.
fn hold_limit(max_hold: Duration) -> Option<Pin<Box<Sleep>>> {
    let end = tokio::time::Instant::now().checked_add(max_hold)?;
    Some(Box::pin(tokio::time::sleep_until(end)))
}

impl fmt::Debug for StreamGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamGuard")
            .field("permit", &self.permit)
            .field("local", &self.local.is_some())
            .finish_non_exhaustive()
    }
}
