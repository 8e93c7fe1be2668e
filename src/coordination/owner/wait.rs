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
    let watched: Vec<(&Backend, &[u8])> = keys.iter().map(|key| (backend, *key)).collect();
    loop {
        // Registered before the try: a change during it is not missed.
        let registered = register(&watched, None).await;
        let watching = !keys.is_empty() && registered.iter().all(Option::is_some);
        let mut watches: Vec<Watch> = registered.into_iter().flatten().collect();
        let retry_after = match attempt().await? {
            Attempt::Acquired(held) => return Ok(held),
            Attempt::Busy { retry_after } => retry_after,
        };
        let pause = if watching { None } else { Some(jittered(poll)) };
        wait_for_change(&mut watches, retry_after, pause).await;
    }
}

/// Sleeps until one of `watches` fires (`true`), or until the earlier of `retry_after` and
/// `pause` from now (`false`); without either, until a watch fires.
pub(crate) async fn wait_for_change(
    watches: &mut [Watch],
    retry_after: Option<Duration>,
    pause: Option<Duration>,
) -> bool {
    let now = Instant::now();
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
        () = any_changed(watches), if !watches.is_empty() => true,
        () = sleep => false,
    }
}

/// A watch on every key, registered at once, each within `bound`: `None` for a key whose
/// backend announces nothing, refuses, or does not answer in time (it is polled instead).
pub(crate) async fn register(
    keys: &[(&Backend, &[u8])],
    bound: Option<Duration>,
) -> Vec<Option<Watch>> {
    let mut pending: Vec<Pin<Box<dyn Future<Output = Option<Watch>> + Send + '_>>> = keys
        .iter()
        .map(|&(backend, key)| {
            Box::pin(async move {
                let registered = match bound {
                    Some(bound) => tokio::time::timeout(bound, backend.watch_key(key))
                        .await
                        .unwrap_or_else(|_| Ok(None)),
                    None => backend.watch_key(key).await,
                };
                registered.unwrap_or_else(|err| {
                    tracing::debug!(error = %err, "cannot watch the key; polling instead");
                    None
                })
            }) as Pin<Box<dyn Future<Output = Option<Watch>> + Send + '_>>
        })
        .collect();
    let mut done: Vec<Option<Option<Watch>>> = keys.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut all = true;
        for (slot, future) in done.iter_mut().zip(pending.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(watch) => *slot = Some(watch),
                    Poll::Pending => all = false,
                }
            }
        }
        if all { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    done.into_iter().map(Option::flatten).collect()
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
pub(crate) fn jittered(interval: Duration) -> Duration {
    crate::jitter::around(interval, 10).max(Duration::from_millis(1))
}
