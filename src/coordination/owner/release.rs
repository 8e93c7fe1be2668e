//! Releasing what a token holds when its holder can no longer wait: one bounded attempt, or
//! retries in the background until they succeed or are given up.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use super::{HoldingKeys, ReleaseStage};
use crate::backend::delivery::Delivery;
use crate::backoff::Backoff;
use crate::coordination::ownership::AbandonCause;
use crate::error::{Error, ErrorKind, Result};

/// The bound of one release attempt: a failed renewal or release waits this long at most for
/// its cleanup, each background attempt is cut off after it, and so is a release the keeper
/// sends.
pub(super) const RELEASE_BOUND: Duration = Duration::from_secs(1);
/// How long background retries go on before the release is given up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);
/// The first pause between background release attempts (then doubled, jittered).
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause between background release attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// One owner-checked release, cut off after [`RELEASE_BOUND`] (then a timeout whose outcome
/// is uncertain).
pub(crate) async fn release_bounded<T: HoldingKeys>(keys: &T, token: &str) -> Result<T::Released> {
    match tokio::time::timeout(RELEASE_BOUND, keys.release(token)).await {
        Ok(result) => result,
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!("releasing a {} took more than {RELEASE_BOUND:?}", T::WHAT),
        )
        .uncertain(true)),
    }
}

/// Releases what `token` holds in a task of the current tokio runtime, retrying with capped,
/// jittered backoff for up to a minute. Never blocks. Without a runtime, the release is
/// given up at once.
pub(crate) fn release_in_background<T: HoldingKeys>(
    keys: Arc<T>,
    token: String,
    why: ReleaseStage,
) {
    release_in_background_after(keys, token, why, None);
}

/// Takes out what `id` left behind that holds nobody (a waiter's record, when its wait ends
/// without a holding), in a task of the current tokio runtime: at once, and again once an
/// attempt still on its way can no longer land (its deadline has passed on the server's
/// clock), since one that lands in between writes the record again. Each attempt is cut off
/// after [`RELEASE_BOUND`]; what they miss expires on its own. Without a runtime, nothing is
/// sent.
pub(crate) fn forget_in_background<T: HoldingKeys>(keys: Arc<T>, id: String) {
    let Ok(runtime) = Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let backend = keys.backend();
        // Later than the deadline of every attempt sent before now.
        let deadline = backend.acquire_deadline().await;
        let forget = async || {
            if let Err(err) = release_bounded(&*keys, &id).await {
                tracing::debug!(keys = %keys, error = %err, "a waiter's record was left to expire");
            }
        };
        forget().await;
        if let Ok(Some(deadline)) = deadline {
            backend.until_passed(deadline).await;
            forget().await;
        }
    });
}

/// What a release waits for before it is sent: the moment from which the command whose
/// outcome is uncertain can no longer take effect (its deadline has passed on the server's
/// clock), so that the release cannot be overtaken by it.
pub(crate) type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// [`release_in_background`], not before `not_before` completes (see [`Wait`]).
pub(crate) fn release_in_background_after<T: HoldingKeys>(
    keys: Arc<T>,
    token: String,
    why: ReleaseStage,
    not_before: Option<Wait>,
) {
    match Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                if let Some(wait) = not_before {
                    wait.await;
                }
                release_with_backoff(keys, token, why).await;
            });
        }
        Err(_) => abandon(
            &*keys,
            &token,
            why,
            AbandonCause::NoRuntime,
            "no tokio runtime to release it on",
        ),
    }
}

async fn release_with_backoff<T: HoldingKeys>(keys: Arc<T>, token: String, why: ReleaseStage) {
    let give_up_at = Instant::now() + GIVE_UP_AFTER;
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    let mut attempt = 0u32;
    loop {
        let err = match release_bounded(&*keys, &token).await {
            Ok(reply) => {
                tracing::debug!(keys = %keys, %why, ?reply, attempt, "{} released in the background", T::WHAT);
                return;
            }
            Err(err) => err,
        };
        let pause = backoff.next_pause();
        if !worth_retrying(&err) || Instant::now() + pause >= give_up_at {
            let cause = if worth_retrying(&err) {
                AbandonCause::Unavailable
            } else {
                AbandonCause::Refused
            };
            abandon(&*keys, &token, why, cause, &err);
            return;
        }
        tracing::debug!(keys = %keys, %why, attempt, error = %err, "background {} release failed; retrying", T::WHAT);
        tokio::time::sleep(pause).await;
        attempt += 1;
    }
}

/// Whether another attempt could succeed soon: after unavailability (the backend may come
/// back), not after a refusal (credentials, an ACL, a script error, corrupt state, arguments),
/// which the next attempt would meet again.
pub(crate) fn worth_retrying(err: &Error) -> bool {
    err.is_unavailable()
}

fn abandon<T: HoldingKeys>(
    keys: &T,
    token: &str,
    why: ReleaseStage,
    cause: AbandonCause,
    reason: impl fmt::Display,
) {
    keys.abandoned().add(T::PRIMITIVE, why, cause);
    // The keys may carry a client's name (a lease named from a request, a client key's
    // permit): at `DEBUG` only. The token is a credential while the holding lives: its
    // first eight digits say which holding it was.
    tracing::warn!(
        token = super::shown_token(token),
        %why,
        %reason,
        "gave up releasing a {}: {}",
        T::WHAT,
        T::LEFT_HELD
    );
    tracing::debug!(keys = %keys, token, "the keys of the release given up");
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::backend::Backend;
    use crate::backend::memory::MemoryBackend;
    use crate::coordination::ownership::{AbandonedCounters, AbandonedReleases};

    /// Fails `failures` attempts with an error of `kind`, then releases; counts its attempts
    /// and its give-ups apart from every other test's.
    struct Fake {
        failures: u32,
        kind: ErrorKind,
        attempts: AtomicU32,
        abandoned: &'static AbandonedCounters,
        backend: Backend,
    }

    impl Fake {
        fn new(failures: u32, kind: ErrorKind) -> Arc<Self> {
            Arc::new(Fake {
                failures,
                kind,
                attempts: AtomicU32::new(0),
                abandoned: Box::leak(Box::new(AbandonedCounters::new())),
                backend: MemoryBackend::new().into(),
            })
        }

        fn attempts(&self) -> u32 {
            self.attempts.load(Ordering::Relaxed)
        }

        fn given_up(&self) -> u64 {
            self.abandoned.snapshot().of(Self::PRIMITIVE)
        }

        fn counts(&self) -> AbandonedReleases {
            self.abandoned.snapshot()
        }
    }

    impl fmt::Display for Fake {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("fake")
        }
    }

    impl HoldingKeys for Fake {
        type Released = ();
        const PRIMITIVE: crate::coordination::ownership::Primitive =
            crate::coordination::ownership::Primitive::FencedLease;
        const WHAT: &'static str = "fake holding";
        const LEFT_HELD: &'static str = "nothing";

        fn abandoned(&self) -> &'static AbandonedCounters {
            self.abandoned
        }

        fn backend(&self) -> &Backend {
            &self.backend
        }

        async fn renew(&self, _token: &str, _expiry_ms: Option<u64>) -> Result<bool> {
            Ok(true)
        }

        async fn verify(&self, _token: &str) -> Result<bool> {
            Ok(true)
        }

        async fn release(&self, _token: &str) -> Result<()> {
            if self.attempts.fetch_add(1, Ordering::Relaxed) < self.failures {
                Err(Error::new(self.kind, "fake failure"))
            } else {
                Ok(())
            }
        }
    }

    /// What a background release of `keys` did once `waited` has passed: (attempts, give-ups).
    async fn after(keys: Arc<Fake>, waited: Duration) -> (u32, u64) {
        release_in_background(Arc::clone(&keys), "t".to_owned(), ReleaseStage::Dropped);
        tokio::time::sleep(waited).await;
        (keys.attempts(), keys.given_up())
    }

    #[test]
    fn without_a_runtime_the_release_is_given_up_and_counted() {
        let keys = Fake::new(0, ErrorKind::Io);
        release_in_background(Arc::clone(&keys), "t".to_owned(), ReleaseStage::Dropped);
        assert_eq!((keys.attempts(), keys.given_up()), (0, 1));
        assert_eq!(
            keys.counts().get(
                Fake::PRIMITIVE,
                ReleaseStage::Dropped,
                AbandonCause::NoRuntime
            ),
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failed_attempts_are_retried_until_one_succeeds() {
        let keys = Fake::new(3, ErrorKind::Io);
        assert_eq!(after(keys, Duration::from_secs(10)).await, (4, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_given_up_at_once() {
        for kind in [
            ErrorKind::CorruptState,
            ErrorKind::Authentication,
            ErrorKind::Permission,
            ErrorKind::Script,
        ] {
            let keys = Fake::new(u32::MAX, kind);
            assert_eq!(
                after(keys, Duration::from_secs(10)).await,
                (1, 1),
                "{kind:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failover_reply_is_retried() {
        let keys = Fake::new(3, ErrorKind::Transient);
        assert_eq!(after(keys, Duration::from_secs(10)).await, (4, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_given_up_after_a_minute() {
        let keys = Fake::new(u32::MAX, ErrorKind::Io);
        let almost = GIVE_UP_AFTER - 2 * MAX_BACKOFF;
        assert_eq!(after(Arc::clone(&keys), almost).await.1, 0);
        tokio::time::sleep(GIVE_UP_AFTER - almost).await;
        assert_eq!(keys.given_up(), 1);
        let counts: Vec<_> = keys.counts().iter().collect();
        assert_eq!(
            counts,
            [(
                Fake::PRIMITIVE,
                ReleaseStage::Dropped,
                AbandonCause::Unavailable,
                1
            )]
        );
    }
}
