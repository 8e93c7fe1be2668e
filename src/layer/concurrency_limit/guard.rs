//! What keeps a response's permit alive while its body streams, and frees it after.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, oneshot};

use crate::coordination::ownership::LossReason;
use crate::coordination::semaphore::{ManagedPermit, ManagedPermitOptions, SemaphorePermit};

/// Completes when the permit is lost.
type Lost = Pin<Box<dyn Future<Output = LossReason> + Send + Sync>>;

/// The permit of one response, held from the inner service's call to the end of its body.
///
/// A coordinated permit is a [`ManagedPermit`]: renewed at half its lease, riding out a
/// backend that does not answer while the permit's estimate lasts, released when told to
/// ([`finish`](Self::finish), at the body's end, which may wait for the release) or when
/// this guard is dropped (a disconnect: nothing waits). If the permit is lost, the guard says
/// so to the body, which ends the stream with an error.
pub(crate) struct StreamGuard {
    permit: Option<ManagedPermit>,
    lost: Option<Lost>,
    /// A worker-local permit granted while failing open.
    local: Option<OwnedSemaphorePermit>,
}

impl StreamGuard {
    /// Keeps `permit` renewed to an expiry of `lease`.
    pub(crate) fn keep(permit: SemaphorePermit, lease: Duration) -> Self {
        match ManagedPermit::keep(permit, &ManagedPermitOptions::new(lease)) {
            Ok(permit) => {
                let mut ownership = permit.ownership();
                StreamGuard {
                    lost: Some(Box::pin(async move { ownership.lost().await })),
                    permit: Some(permit),
                    local: None,
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
                }
            }
        }
    }

    /// A guard for a permit of this process only, while the backend is unavailable.
    pub(crate) fn local(permit: OwnedSemaphorePermit) -> Self {
        StreamGuard {
            permit: None,
            lost: None,
            local: Some(permit),
        }
    }

    /// Whether the permit was lost; if not, `cx` is woken when it is.
    pub(crate) fn poll_lost(&mut self, cx: &mut Context<'_>) -> bool {
        match self.lost.as_mut().map(|lost| lost.as_mut().poll(cx)) {
            Some(Poll::Ready(reason)) => {
                tracing::warn!(%reason, "a streaming response's permit was lost; cutting the stream");
                self.lost = None;
                true
            }
            Some(Poll::Pending) | None => false,
        }
    }

    /// Releases the permit; the receiver completes once it is released (or the release gave
    /// up within its bound), `None` when there is nothing to wait for.
    pub(crate) fn finish(mut self) -> Option<oneshot::Receiver<()>> {
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

impl fmt::Debug for StreamGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamGuard")
            .field("permit", &self.permit)
            .field("local", &self.local.is_some())
            .finish_non_exhaustive()
    }
}
