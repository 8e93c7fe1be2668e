//! tower layers: rate limits over HTTP.
//!
//! - [`rate_limit`]: [`RedisRateLimitLayer`](rate_limit::RedisRateLimitLayer) answers
//!   `429` with `Retry-After` and the IETF `RateLimit`/`RateLimit-Policy` fields.
//! - [`key`]: how a layer derives the client key from a request (global, peer IP, client IP
//!   behind trusted proxies, a header, or any closure).
//! - [`FailurePolicy`]: what a layer does when the backend cannot decide.

mod failure;
pub(crate) mod headers;
pub mod key;
pub mod rate_limit;

pub use failure::FailurePolicy;
