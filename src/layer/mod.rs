//! tower layers: rate and concurrency limits over HTTP.
//!
//! - [`rate_limit`]: [`RedisRateLimitLayer`] answers
//!   `429` with `Retry-After` and the IETF `RateLimit`/`RateLimit-Policy` fields.
//! - [`concurrency_limit`]:
//!   [`RedisConcurrencyLimitLayer`] holds a
//!   slot of a shared semaphore for each request until its response body ends, renewing it
//!   while the body streams.
//! - [`key`]: how a layer derives the client key from a request (global, peer IP, client IP
//!   behind trusted proxies, a header, or any closure).
//! - [`FailurePolicy`]: what a layer does when the backend cannot decide, and
//!   [`CircuitBreaker`]: how it stops asking a backend that keeps failing.
//!
//! # Errors
//!
//! The layer constructors return a [`Result`](crate::Result), so a call site reads
//! `.layer(RedisRateLimitLayer::fixed_window(...)?)`. They check the configuration once, at
//! start-up, and nothing else: they send nothing and never fail because of Redis (a backend
//! that is down is the [failure policy](FailurePolicy)'s business, request by request).
//!
//! They stay fallible because what makes a limit valid depends on its arguments together,
//! which types cannot say: a sliding window's segments must split its window into whole
//! milliseconds, a GCRA's emission interval (window / limit) must last at least 1 µs, an
//! empty token bucket must refill within 2^52 ms, stacked policies need distinct names, and
//! Redis scripts count in doubles, exact only below 2^53. Numbers that could be swapped
//! are kept apart by types instead: a token bucket's
//! [`Refill`](crate::coordination::rate_limit::Refill) and a concurrency limit's
//! [`Capacity`](concurrency_limit::Capacity). An error is
//! [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) and names the value
//! and the rule it breaks, so returning it from `main` is enough.
//!
//! ```
//! use std::time::Duration;
//! use leasehold::{Coordination, ErrorKind};
//! use leasehold::layer::rate_limit::RedisRateLimitLayer;
//!
//! let coordination = Coordination::memory();
//! // 60 s do not split into 7 segments of whole milliseconds.
//! let minute = Duration::from_secs(60);
//! let err = RedisRateLimitLayer::sliding_window(&coordination, "api", 100, minute, 7)
//!     .expect_err("an invalid window");
//! assert_eq!(err.kind(), ErrorKind::InvalidArgument);
//! assert!(err.to_string().contains("7 segments"), "{err}");
//! ```

pub(crate) mod admission;
pub mod concurrency_limit;
mod failure;
pub mod key;
pub mod rate_limit;

pub use crate::coordination::circuit_breaker::{CircuitBreaker, CircuitState};
pub use crate::response::{Rejection, RejectionKind};
pub use admission::ResponseBody;
pub use concurrency_limit::RedisConcurrencyLimitLayer;
pub use failure::FailurePolicy;
pub use key::KeyExtractor;
pub use rate_limit::RedisRateLimitLayer;
