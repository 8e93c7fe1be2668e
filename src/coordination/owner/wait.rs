//! The one way a primitive waits (for a lock, a permit, a latch's zero): woken by the server's
//! invalidations, never by a polling loop where it has them.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::backend::delivery::{Delivery, Watch};
use crate::coordination::Attempt;
use crate::error::Result;

/// Tries `attempt` until it acquires, or fails: an error ends the wait.
///
/// Before each try it registers for the next invalidation of every key in `keys` (RESP3
/// client tracking, see
/// [`RedisBackend::watch_key`](crate::backend::redis::RedisBackend::watch_key)), so a change
/// during the try leaves a wake-up. After a busy answer it sleeps until one of the keys
/// changes, or until the holder's time left runs out (the busy answer's `retry_after`: one
/// wake then, so that an expiry never depends on a notification), and tries again.
/// Notifications are only hints: the atomic step alone decides. Where the backend has no
/// invalidations (the memory backend, a server that refuses tracking), tries are `poll`
/// apart, with a tenth of jitter either way (never later than `retry_after` says).
///
/// Cancel safe as `attempt` is: dropping the future stops waiting and drops the watches. Bound
/// the wait with `tokio::time::timeout`.
pub(crate) async fn acquire_waiting<T, A>(
    backend: &Backend,
    keys: &[&[u8]],
    poll: Duration,
    mut attempt: impl FnMut() -> A,
) -> Result<T>
where
    A: Future<Output = Result<Attempt<T>>>,
{
    loop {
        // Registered before the try: a change during it is not missed.
        let mut watches = Vec::with_capacity(keys.len());
        for key in keys {
            match backend.watch_key(key).await {
                Ok(Some(watch)) => watches.push(watch),
                Ok(None) => break,
                Err(err) => {
                    tracing::debug!(error = %err, "cannot watch the key; polling instead");
                    break;
                }
            }
        }
        let watching = !keys.is_empty() && watches.len() == keys.len();
        let retry_after = match attempt().await? {
            Attempt::Acquired(held) => return Ok(held),
            Attempt::Busy { retry_after } => retry_after,
        };
        let now = Instant::now();
        let pause = if watching { None } else { Some(jittered(poll)) };
        let wake = [
            retry_after.map(|left| crate::time::after(now, left)),
            pause.map(|pause| now + pause),
        ]
        .into_iter()
        .flatten()
        .min();
        let sleep = async {
            match wake {
                Some(wake) => tokio::time::sleep_until(wake).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = any_changed(&mut watches), if watching => {}
            () = sleep => {}
        }
    }
}

/// Completes when the first of `watches` fires.
async fn any_changed(watches: &mut [Watch]) {
    let mut changes: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = watches
        .iter_mut()
        .map(|watch| Box::pin(watch.changed()) as Pin<Box<dyn Future<Output = ()> + Send>>)
        .collect();
    poll_fn(|cx| {
        if changes
            .iter_mut()
            .any(|change| change.as_mut().poll(cx).is_ready())
        {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// `interval` plus or minus up to a tenth, at random, at least a millisecond.
fn jittered(interval: Duration) -> Duration {
    crate::jitter::around(interval, 10).max(Duration::from_millis(1))
}
