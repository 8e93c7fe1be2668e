//! The count of permit releases given up: a metric for operators.

use crate::coordination::ownership::{AbandonedCounters, AbandonedReleases};

/// Bumped by the shared release each time it gives up one of this primitive's releases.
pub(super) static ABANDONED: AbandonedCounters = AbandonedCounters::new();

/// How many permit releases this process has given up since it started: background releases
/// (of dropped permits, cancelled releases, and acquisitions whose answer was lost, cancelled
/// or late) that found no tokio runtime, that the backend refused, or that failed for a whole
/// minute. A metric to export: each one is a permit
/// that stays held on the backend until it expires, or until it is removed by hand when it
/// has no expiry. A warning is also logged through `tracing` for each.
///
/// # Example
///
/// ```
/// use leasehold::coordination::semaphore::abandoned_releases;
///
/// let before = abandoned_releases();
/// // ... export `abandoned_releases() - before` as a counter ...
/// assert!(abandoned_releases() >= before);
/// ```
pub fn abandoned_releases() -> u64 {
    ABANDONED.snapshot().total()
}

/// [`abandoned_releases`] by the stage the release ran at (a dropped handle, a cancelled
/// release, an uncertain acquisition, a late grant) and why it was given up (no runtime, a
/// backend unavailable for a minute, a refusal).
pub fn abandoned_release_counts() -> AbandonedReleases {
    ABANDONED.snapshot()
}
