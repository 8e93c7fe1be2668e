//! Why a streaming response was cut: the errors its body ends with.

use std::fmt;

/// A streaming response was cut because its concurrency permit was lost: renewing it found
/// it gone (it expired, for example after a long pause, or Redis lost it), or the backend
/// could not be reached before it would have expired.
///
/// # Example
///
/// ```
/// use leasehold::BoxError;
/// use leasehold::layer::concurrency_limit::PermitLost;
///
/// // Tell a cut stream from other body errors, for example when logging.
/// fn was_cut(error: &BoxError) -> bool {
///     error.is::<PermitLost>()
/// }
/// assert!(!was_cut(&BoxError::from("some other failure")));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitLost;

impl fmt::Display for PermitLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the response's concurrency permit was lost; the stream was cut")
    }
}

impl std::error::Error for PermitLost {}

/// A streaming response was cut because it held its concurrency slot for the layer's
/// [longest hold](crate::layer::concurrency_limit::RedisConcurrencyLimitLayer::max_hold): its
/// body had not ended (a stalled upstream, a client reading slowly), and its permit was
/// released.
///
/// # Example
///
/// ```
/// use leasehold::BoxError;
/// use leasehold::layer::concurrency_limit::{HoldLimitReached, PermitLost};
///
/// // Tell why a stream was cut, for example when logging.
/// fn why_cut(error: &BoxError) -> Option<&'static str> {
///     if error.is::<HoldLimitReached>() {
///         Some("held its slot too long")
///     } else if error.is::<PermitLost>() {
///         Some("lost its permit")
///     } else {
///         None
///     }
/// }
/// assert_eq!(why_cut(&BoxError::from("some other failure")), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HoldLimitReached;

impl fmt::Display for HoldLimitReached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the response held its concurrency slot for the longest hold; the stream was cut",
        )
    }
}

impl std::error::Error for HoldLimitReached {}
