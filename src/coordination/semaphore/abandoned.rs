//! The count of permit releases given up: a metric for operators.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bumped by the shared release each time it gives up one of this primitive's releases.
pub(super) static ABANDONED: AtomicU64 = AtomicU64::new(0);

/// How many permit releases this process has given up since it started: background releases
/// (of dropped permits, surrendered renewals and uncertain acquisitions) that found no tokio
/// runtime, or that failed for a whole minute. A metric to export: each one is a permit
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
    ABANDONED.load(Ordering::Relaxed)
}
