//! What a layer does when the backend cannot decide.

use std::time::Duration;

/// What a layer does when the backend fails or does not answer in time.
///
/// Either way a `tracing` event (`warn`) records the failure, and the request never hangs:
/// the layer's timeout bounds the wait for a decision.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::layer::FailurePolicy;
///
/// let strict = FailurePolicy::default();
/// assert_eq!(strict, FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) });
/// let lenient = FailurePolicy::FailOpen;
/// # let _ = lenient;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Answer `503 Service Unavailable` with `Retry-After`, without calling the inner
    /// service. The default: no limit is silently lifted.
    FailClosed {
        /// The `Retry-After` advertised with the 503.
        retry_after: Duration,
    },
    /// Let the request through unlimited (and without rate-limit fields): availability over
    /// enforcement while the backend is down.
    FailOpen,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        }
    }
}
