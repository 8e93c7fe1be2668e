//! Redis-backed rate limits, concurrency limits and distributed coordination for
//! [tower](https://docs.rs/tower) and [axum](https://docs.rs/axum) services.
//!
//! When a service runs as many replicas behind a load balancer, limits and ownership must be
//! shared. `leasehold` keeps them in Redis (or Valkey) and takes every decision atomically
//! on the server, with the server's clock, in one script call per step.
//!
//! The crate has three layers:
//!
//! - [`coordination`]: the primitives, with no HTTP in sight, built from a [`Coordination`]
//!   handle over a [`backend`]: Redis (standalone, Cluster, Sentinel) or the in-process
//!   memory backend;
//! - tower layers that answer `429` with `Retry-After` and the IETF `RateLimit` fields, or
//!   hold a concurrency permit for the life of a streaming response;
//! - axum extractors that hand a handler a held, self-renewing lease.
//!
//! # Example
//!
//! ```
//! use leasehold::Coordination;
//! use leasehold::backend::redis::RedisBackend;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! let coordination = match std::env::var("REDIS_URL") {
//!     // Every replica shares the same state.
//!     Ok(url) => Coordination::new(RedisBackend::standalone(url).key_prefix("myapp:").connect().await?),
//!     // One process on its own: no server needed.
//!     Err(_) => Coordination::memory(),
//! };
//! let now = coordination.server_time().await?;
//! println!("the backend's clock reads {} ms", now.as_millis());
//! # Ok(()) }
//! ```
//!
//! # Feature flags
//!
//! - `axum` (default): axum extractors.
//! - `tls`: `rediss://` connections through rustls.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod backend;
pub mod coordination;
mod error;
pub mod layer;

pub use coordination::Coordination;
pub use error::{Error, ErrorKind, Result, UnsupportedFeature};
