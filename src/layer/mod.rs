//! tower layers: rate and concurrency limits over HTTP.
//!
//! - [`rate_limit`]: [`RedisRateLimitLayer`](rate_limit::RedisRateLimitLayer) answers
//!   `429` with `Retry-After` and the IETF `RateLimit`/`RateLimit-Policy` fields.
//! - [`concurrency_limit`]:
//!   [`RedisConcurrencyLimitLayer`](concurrency_limit::RedisConcurrencyLimitLayer) holds a
//!   slot of a shared semaphore for each request until its response body ends, renewing it
//!   while the body streams.
//! - [`key`]: how a layer derives the client key from a request (global, peer IP, client IP
//!   behind trusted proxies, a header, or any closure).
//! - [`FailurePolicy`]: what a layer does when the backend cannot decide, and
//!   [`CircuitBreaker`]: how it stops asking a backend that keeps failing.

mod admission;
mod circuit_breaker;
pub mod concurrency_limit;
mod failure;
pub(crate) mod headers;
pub mod key;
pub mod rate_limit;

pub use circuit_breaker::{CircuitBreaker, CircuitState};
pub use failure::FailurePolicy;
