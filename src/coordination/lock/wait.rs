//! Waiting for a fenced lock: woken by the server's invalidations, never by a polling loop.

use std::time::Duration;

use super::{FencedLease, FencedLock, LockAttempt};
use crate::coordination::ManagedOptions;
use crate::error::Result;

impl FencedLock {
    /// Takes the lock, waiting as long as it takes; see [`try_acquire`](Self::try_acquire)
    /// for `lease` and the errors. Bound the wait with `tokio::time::timeout`.
    ///
    /// On Redis the waiter does not poll. Before each attempt it registers for the lease
    /// key's next invalidation (RESP3 client tracking, see
    /// [`RedisBackend::watch_key`](crate::backend::redis::RedisBackend::watch_key)), so a
    /// release or expiry during the attempt leaves a wake-up; after a refused attempt it
    /// sleeps until that invalidation, or until the holder's lease would expire (one wake
    /// at its time left, so expiry never depends on a notification), and tries the atomic
    /// step again. A lost tracking connection wakes every waiter to try again.
    /// Notifications are only hints: the atomic step alone grants the lock. Where tracking
    /// is not available (the memory backend, or a server that refuses it), attempts are
    /// 50 ms apart with jitter, or as often as
    /// [`ManagedOptions::poll_interval`] says through [`ManagedLease::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops waiting; an attempt in flight then is not
    /// replayed, and a lease it may have been granted is released by owner token in the
    /// background (see [`try_acquire`](Self::try_acquire)).
    ///
    /// [`ManagedLease::acquire`]: super::ManagedLease::acquire
    pub async fn acquire(&self, lease: Duration) -> Result<FencedLease> {
        self.wait(lease, ManagedOptions::new().poll()).await
    }

    /// [`acquire`](Self::acquire) with the lease and poll interval of `options`.
    pub(crate) async fn acquire_with(&self, options: &ManagedOptions) -> Result<FencedLease> {
        options.validate()?;
        self.wait(options.lease_duration(), options.poll()).await
    }

    async fn wait(&self, lease: Duration, poll: Duration) -> Result<FencedLease> {
        loop {
            // Registered before the attempt: a change during it is not missed.
            let mut watch = match self.backend().watch_key(self.lease_key()).await {
                Ok(watch) => watch,
                Err(err) => {
                    tracing::debug!(error = %err, "cannot watch the lease key; polling instead");
                    None
                }
            };
            let retry_after = match self.try_acquire(lease).await? {
                LockAttempt::Acquired(lease) => return Ok(lease),
                LockAttempt::Busy { retry_after } => retry_after,
            };
            match &mut watch {
                // Fires at the next invalidation, or when the holder's lease (the time left
                // read with the watch) runs out, whichever comes first.
                Some(watch) => watch.changed().await,
                None => {
                    let pause = jittered(poll);
                    tokio::time::sleep(retry_after.map_or(pause, |left| pause.min(left))).await;
                }
            }
        }
    }
}

/// `interval` plus or minus up to a tenth, at random, at least a millisecond.
fn jittered(interval: Duration) -> Duration {
    let tenth = interval / 10;
    crate::jitter::between(interval - tenth, interval + tenth).max(Duration::from_millis(1))
}
