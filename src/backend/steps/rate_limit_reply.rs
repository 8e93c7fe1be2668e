//! The answer every rate-limit step gives, computed on the server with its clock.

/// One rate-limit step's answer. Every duration comes from the backend's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateLimitReply {
    /// Whether the permits were granted (and consumed).
    pub(crate) granted: bool,
    /// Permits that a request could take right after this step.
    pub(crate) remaining: u64,
    /// Milliseconds until the quota is whole again.
    pub(crate) reset_after_ms: u64,
    /// For a rejection, milliseconds until the same request can be granted; `None` when
    /// granted, and when it never can (more permits than the limit).
    pub(crate) retry_after_ms: Option<u64>,
}
