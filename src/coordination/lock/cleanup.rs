//! Releasing leases that their holder can no longer wait for: bounded attempts, background
//! retries, and the count of releases given up.
//!
//! Every release here is owner-checked, so a late one can never remove another holder's
//! lease: at worst it finds the lease gone or owned by someone else.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use super::keys::LockKeys;
use crate::backend::fenced_lock::LeaseReleaseReply;
use crate::error::{Error, ErrorKind, Result};

/// The bound of one release attempt: a failed release waits this long at most for its retry,
/// and each background attempt is cut off after it.
const RELEASE_BOUND: Duration = Duration::from_secs(1);
/// How long background retries go on before the release is given up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

static ABANDONED: AtomicU64 = AtomicU64::new(0);

/// How many fenced lease releases this process has given up since it started: background
/// releases (of dropped leases, cancelled releases, and acquisitions whose answer was lost,
/// cancelled or late) that found no tokio runtime, or that failed for a whole minute. A
/// metric to export: each one is a lease that blocks its lock until it expires. A warning is
/// also logged through `tracing` for each.
///
/// # Example
///
/// ```
/// use leasehold::coordination::lock::abandoned_releases;
///
/// let before = abandoned_releases();
/// // ... export `abandoned_releases() - before` as a counter ...
/// assert!(abandoned_releases() >= before);
/// ```
pub fn abandoned_releases() -> u64 {
    ABANDONED.load(Ordering::Relaxed)
}

/// Why a release runs without its holder, for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// The lease was dropped unreleased.
    Dropped,
    /// A release was cancelled mid-flight.
    CancelledRelease,
    /// An acquisition may have been granted although no answer arrived.
    UncertainAcquire,
    /// A grant arrived after its lease had run out by the local estimate.
    LateGrant,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Why::Dropped => "lease dropped",
            Why::CancelledRelease => "release cancelled",
            Why::UncertainAcquire => "acquisition uncertain",
            Why::LateGrant => "grant arrived after its lease",
        })
    }
}

/// One owner-checked release, cut off after [`RELEASE_BOUND`] (then a timeout whose outcome
/// is uncertain).
pub(super) async fn release_bounded(keys: &LockKeys, token: &str) -> Result<LeaseReleaseReply> {
    match tokio::time::timeout(RELEASE_BOUND, keys.release(token)).await {
        Ok(result) => result,
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!("releasing a lease took more than {RELEASE_BOUND:?}"),
        )
        .uncertain(true)),
    }
}

/// Releases `token`'s lease in a task of the current tokio runtime, retrying with capped,
/// jittered backoff for up to a minute. Never blocks. Without a runtime, the release is
/// given up at once.
pub(super) fn release_in_background(keys: Arc<LockKeys>, token: String, why: Why) {
    match Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(release_with_backoff(keys, token, why));
        }
        Err(_) => abandon(&keys, why, "no tokio runtime to release it on"),
    }
}

async fn release_with_backoff(keys: Arc<LockKeys>, token: String, why: Why) {
    let give_up_at = Instant::now() + GIVE_UP_AFTER;
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 0u32;
    loop {
        let err = match release_bounded(&keys, &token).await {
            Ok(reply) => {
                tracing::debug!(lease = %keys, %why, ?reply, attempt, "fenced lease released in the background");
                return;
            }
            Err(err) => err,
        };
        let pause = jittered(backoff, &token, attempt);
        if !worth_retrying(&err) || Instant::now() + pause >= give_up_at {
            abandon(&keys, why, &err);
            return;
        }
        tracing::debug!(lease = %keys, %why, attempt, error = %err, "background lease release failed; retrying");
        tokio::time::sleep(pause).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        attempt += 1;
    }
}

/// Whether another attempt could succeed: not for state or arguments that will not change.
pub(super) fn worth_retrying(err: &Error) -> bool {
    !matches!(
        err.kind(),
        ErrorKind::CorruptState | ErrorKind::CrossSlot | ErrorKind::InvalidArgument
    )
}

/// Between half of `backoff` and all of it, so that many releases failing together do not
/// retry together. The spread comes from std's randomly keyed hasher: no extra dependency.
fn jittered(backoff: Duration, token: &str, attempt: u32) -> Duration {
    let half = backoff / 2;
    let spread = u64::try_from(half.as_millis()).unwrap_or(u64::MAX).max(1);
    let random = std::collections::hash_map::RandomState::new().hash_one((token, attempt));
    half + Duration::from_millis(random % spread)
}

fn abandon(keys: &LockKeys, why: Why, reason: impl fmt::Display) {
    ABANDONED.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        lease = %keys,
        %why,
        %reason,
        "gave up releasing a fenced lease: it blocks the lock until it expires"
    );
}

/// Releases a lease in the background if dropped while armed: for a request whose future
/// may be dropped after it was sent, leaving the lease's fate unknown.
pub(super) struct ReleaseOnDrop {
    keys: Arc<LockKeys>,
    token: String,
    why: Why,
    armed: bool,
}

impl ReleaseOnDrop {
    pub(super) fn arm(keys: &Arc<LockKeys>, token: &str, why: Why) -> Self {
        ReleaseOnDrop {
            keys: Arc::clone(keys),
            token: token.to_owned(),
            why,
            armed: true,
        }
    }

    /// The outcome is settled: nothing to release.
    pub(super) fn disarm(mut self) {
        self.armed = false;
    }

    /// Releases in the background now, for `why`.
    pub(super) fn release_now(mut self, why: Why) {
        self.why = why;
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if self.armed {
            release_in_background(
                Arc::clone(&self.keys),
                std::mem::take(&mut self.token),
                self.why,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_between_half_and_whole() {
        for attempt in 0..200 {
            for backoff in [FIRST_BACKOFF, MAX_BACKOFF, Duration::from_millis(1)] {
                let pause = jittered(backoff, "token", attempt);
                assert!(pause >= backoff / 2 && pause <= backoff, "{pause:?}");
            }
        }
    }

    #[test]
    fn without_a_runtime_the_release_is_given_up_and_counted() {
        let before = abandoned_releases();
        let keys = Arc::new(LockKeys::new(
            crate::backend::memory::MemoryBackend::new().into(),
            b"{l}:lease".to_vec(),
            b"{l}:fence".to_vec(),
        ));
        release_in_background(keys, "t".to_owned(), Why::Dropped);
        assert!(abandoned_releases() > before);
    }
}
