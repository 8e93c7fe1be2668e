//! What keeps a response's permit alive while its body streams, and frees it after.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, oneshot};
use tokio::time::Instant;

use crate::coordination::semaphore::SemaphorePermit;

/// The permit of one response, held from the inner service's call to the end of its body.
///
/// A coordinated permit is owned by a small task that renews it at half its lease and
/// releases it when told to ([`finish`](Self::finish), at the body's end, which may wait
/// for the release) or when this guard is dropped (a disconnect: nothing waits). If the
/// task finds the permit lost, the guard says so to the body, which ends the stream with
/// an error.
#[derive(Debug)]
pub(crate) struct StreamGuard {
    /// Tells the keeper to release the permit, and where to say it is done; dropped, it
    /// tells the keeper to release without saying.
    finish: Option<oneshot::Sender<oneshot::Sender<()>>>,
    lost: Arc<LostSignal>,
    /// A worker-local permit granted while failing open.
    local: Option<OwnedSemaphorePermit>,
}

impl StreamGuard {
    /// Hands `permit` to a keeper task that renews it every half `lease`.
    pub(crate) fn keep(permit: SemaphorePermit, lease: Duration) -> Self {
        let (finish, stop) = oneshot::channel();
        let lost = Arc::new(LostSignal::default());
        // Called from a service's future, so a runtime is running; without one the permit
        // is dropped here, which releases it the way a dropped permit always is.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(keep(permit, lease, stop, lost.clone()));
        } else {
            lost.set();
        }
        StreamGuard {
            finish: Some(finish),
            lost,
            local: None,
        }
    }

    /// A guard for a permit of this process only, while the backend is unavailable.
    pub(crate) fn local(permit: OwnedSemaphorePermit) -> Self {
        StreamGuard {
            finish: None,
            lost: Arc::new(LostSignal::default()),
            local: Some(permit),
        }
    }

    /// Whether the permit was lost; if not, `cx` is woken when it is.
    pub(crate) fn poll_lost(&self, cx: &mut Context<'_>) -> bool {
        self.lost.poll(cx)
    }

    /// Releases the permit; the receiver completes once the keeper has released it (or
    /// given up within its bound), `None` when there is nothing to wait for.
    pub(crate) fn finish(mut self) -> Option<oneshot::Receiver<()>> {
        drop(self.local.take());
        let finish = self.finish.take()?;
        let (done, released) = oneshot::channel();
        finish.send(done).ok()?;
        Some(released)
    }
}

/// Renews `permit` until told to finish (or the guard is dropped), then releases it.
async fn keep(
    mut permit: SemaphorePermit,
    lease: Duration,
    mut stop: oneshot::Receiver<oneshot::Sender<()>>,
    lost: Arc<LostSignal>,
) {
    let period = lease / 2;
    // After a failure that left the permit held (nothing reached the server), try again
    // sooner, while the local estimate says the permit lives.
    let retry = (lease / 10).min(Duration::from_secs(1));
    let mut next = Instant::now() + period;
    loop {
        tokio::select! {
            biased;
            done = &mut stop => return release(permit, done.ok()).await,
            () = tokio::time::sleep_until(next) => {}
        }
        // Bounded so that one renewal cannot outlast the lease; a renewal cut short
        // surrenders the permit, which the check below reports as lost.
        let renewal = tokio::select! {
            biased;
            done = &mut stop => {
                // The body ended mid-renewal: dropping the renewal surrenders the permit,
                // and the permit releases itself in the background.
                if let Ok(done) = done {
                    let _ = done.send(());
                }
                return;
            }
            renewal = tokio::time::timeout(lease / 4, permit.renew(Some(lease))) => renewal,
        };
        match renewal {
            Ok(Ok(true)) => next = Instant::now() + period,
            Ok(Err(err)) if !permit.is_released() => {
                if permit.remaining_estimate() == Some(Duration::ZERO) {
                    tracing::warn!(error = %err, "could not renew a streaming response's permit before it expired; cutting the stream");
                    lost.set();
                    return;
                }
                tracing::debug!(error = %err, "renewing a streaming response's permit failed; retrying");
                next = Instant::now() + retry;
            }
            Ok(Ok(false)) | Ok(Err(_)) | Err(_) => {
                tracing::warn!("a streaming response's permit was lost; cutting the stream");
                lost.set();
                return;
            }
        }
    }
}

/// Releases `permit`, bounded (past the bound, dropping the permit retries in the
/// background), then says so on `done`.
async fn release(mut permit: SemaphorePermit, done: Option<oneshot::Sender<()>>) {
    match tokio::time::timeout(Duration::from_secs(1), permit.release()).await {
        Ok(Ok(_)) => tracing::trace!("streaming response's permit released"),
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "releasing a streaming response's permit failed");
        }
        Err(_) => tracing::debug!("releasing a streaming response's permit timed out"),
    }
    drop(permit);
    if let Some(done) = done {
        let _ = done.send(());
    }
}

/// A one-way flag with a waker: set once by the keeper, polled by the body.
#[derive(Debug, Default)]
struct LostSignal {
    lost: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl LostSignal {
    fn set(&self) {
        self.lost.store(true, Ordering::Release);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn poll(&self, cx: &mut Context<'_>) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        {
            let mut slot = self
                .waker
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match &mut *slot {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
        }
        // Set between the first check and the registration: seen now, not missed.
        self.lost.load(Ordering::Acquire)
    }
}
