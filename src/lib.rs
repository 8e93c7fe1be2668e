//! Redis-backed rate limits, concurrency limits and distributed coordination for
//! [tower](https://docs.rs/tower) and [axum](https://docs.rs/axum) services.
//!
//! When a service runs as many replicas behind a load balancer, limits and ownership must be
//! shared. `leasehold` keeps them in Redis (or Valkey) and decides on the server, with the
//! server's clock: each step of a primitive is one Lua script on one server, which Redis runs
//! atomically. Where a step is not one script, its docs say so:
//!
//! - a fixed window's step outside a Cluster may be one pipeline of native commands whose
//!   one deciding write is the count: `INCREX` and `PTTL` where the server has `INCREX`,
//!   otherwise `SET NX PX`, `INCR` and `PTTL` for a step of one permit;
//! - a [Redlock](coordination::redlock) round goes to several independent servers, each
//!   deciding its part in one script, and the majority decides the whole;
//! - some answers are given in the process, on purpose: the fail-open fallback while Redis
//!   cannot decide (each instance's share of a quota, not coordinated), the deny cache's
//!   rejections until a retry time Redis gave, the hot-key tier's grants of permits Redis
//!   reserved first, and the waiting queue's order;
//! - [durable fencing](coordination::lock::FencedLock::durable) follows the script with a
//!   `WAIT` for the replicas.
//!
//! The crate has three layers:
//!
//! - [`coordination`]: the primitives, with no HTTP in sight, built from a [`Coordination`]
//!   handle over a [`backend`]: Redis (standalone, Cluster, Sentinel) or the in-process
//!   memory backend;
//! - tower layers ([`layer`]): [`RedisRateLimitLayer`](layer::rate_limit::RedisRateLimitLayer)
//!   answers `429` with `Retry-After` and the IETF `RateLimit` fields, and
//!   [`RedisConcurrencyLimitLayer`](layer::concurrency_limit::RedisConcurrencyLimitLayer)
//!   holds a concurrency permit for the life of a streaming response;
//! - axum extractors ([`extract`]) that hand a handler what it holds for the request,
//!   self-renewing, named by a spec that reads the router's state:
//!   [`Lease`](extract::Lease) (a fenced lease), [`ReadLease`](extract::ReadLease) and
//!   [`WriteLease`](extract::WriteLease) (a read-write lease), [`Permit`](extract::Permit) (a
//!   semaphore permit); and [`RateLimitInfo`](extract::RateLimitInfo), the rate-limit
//!   decision.
//!
//! # Quickstart
//!
//! An axum app whose `/hello` route allows each client 5 requests per 10 seconds; the same
//! code runs as `cargo run --example quickstart`. With `REDIS_URL` set, every replica shares
//! the limit through Redis; without it, limits live in this process.
//!
//! ```
//! # #[cfg(feature = "axum")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use axum::{Router, routing::get};
//! use leasehold::Coordination;
//! use leasehold::layer::key::KeyExtractor;
//! use leasehold::layer::rate_limit::RedisRateLimitLayer;
//!
//! let coordination = match std::env::var("REDIS_URL") {
//!     // Shared by every replica; "myapp:" is this service's key namespace (required).
//!     Ok(url) => Coordination::connect(url, "myapp:").await?,
//!     Err(_) => Coordination::memory(), // one process, no server
//! };
//! let limit = RedisRateLimitLayer::fixed_window(&coordination, "hello", 5, Duration::from_secs(10))?
//!     .key(KeyExtractor::peer_ip());
//! let app: Router = Router::new()
//!     .route("/hello", get(|| async { "Hello!\n" }).layer(limit))
//!     .route("/", get(|| async { "Try /hello\n" }));
//!
//! // Serve it with the peer address, which `KeyExtractor::peer_ip` keys by:
//! // let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await?;
//! # use tower::ServiceExt;
//! # let request = || {
//! #     http::Request::get("/hello")
//! #         .extension(axum::extract::ConnectInfo(std::net::SocketAddr::from(([192, 0, 2, 1], 5000))))
//! #         .body(axum::body::Body::empty())
//! # };
//! # for _ in 0..5 {
//! #     assert_eq!(app.clone().oneshot(request()?).await?.status(), 200);
//! # }
//! # let rejected = app.oneshot(request()?).await?;
//! # assert_eq!(rejected.status(), 429);
//! # assert!(rejected.headers().contains_key("retry-after"));
//! # Ok(()) }
//! # #[cfg(not(feature = "axum"))]
//! # fn main() {}
//! ```
//!
//! Without HTTP, the same limiter is a [`coordination::rate_limit::FixedWindow`]; every
//! primitive starts from a [`Coordination`] handle.
//!
//! # The manual
//!
//! The [`manual`] holds one page per subject, each starting with the question it answers:
//!
//! - [Rate limiting a router](manual::rate_limiting): keys, the fields and `429`, **which
//!   algorithm to choose**, stacked limits, hot keys, the waiting queue, the deny cache,
//!   shadow mode;
//! - [Plans, overrides and runtime limits](manual::plans): a quota per customer;
//! - [Streaming and concurrency limits](manual::concurrency): the concurrency layer, the
//!   `Permit` extractor, semaphores;
//! - [Locks, leases and fencing](manual::locks): **how to run a job on one replica**, fencing
//!   tokens, the `Lease` extractor;
//! - [Coordination across replicas](manual::coordination): latches, read-write leases,
//!   hash-field leases, sessions, leader election, Redlock;
//! - [Operations](manual::operations): metrics and a Grafana dashboard, traces, readiness,
//!   shadow mode, TLS;
//! - [Deploying Redis](manual::deploying_redis): persistence, eviction, Sentinel, Cluster,
//!   the ACL commands;
//! - [The failure model](manual::failure_model), [security](manual::security),
//!   [upgrading](manual::upgrading) and [performance](manual::performance).
//!
//! The [`coordination`] module's docs choose among the primitives: when to use each, and what
//! it costs on Redis.
//!
//! # More than one limit on a route
//!
//! [`RedisRateLimitLayer::stacked`](layer::rate_limit::RedisRateLimitLayer::stacked) checks
//! several fixed windows on one key in one atomic step, all or nothing, and lists each in
//! the response fields: 10 per second and 10,000 per day, say. Other algorithms (sliding
//! window, token bucket, GCRA) have a constructor of their own on the layer; the manual says
//! [which to choose](manual::rate_limiting#which-algorithm).
//!
//! ```
//! # fn main() -> leasehold::Result<()> {
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::rate_limit::RateLimitPolicy;
//! use leasehold::layer::rate_limit::RedisRateLimitLayer;
//!
//! let coordination = Coordination::memory();
//! let per_second = RateLimitPolicy::new("per-second", 10, Duration::from_secs(1));
//! let per_day = RateLimitPolicy::new("per-day", 10_000, Duration::from_secs(86_400));
//! let limit = RedisRateLimitLayer::stacked(&coordination, "api", [per_second, per_day])?;
//! # let _ = limit;
//! # Ok(()) }
//! ```
//!
//! # Streams and exclusive handlers
//!
//! - [`RedisConcurrencyLimitLayer`](layer::concurrency_limit::RedisConcurrencyLimitLayer)
//!   bounds how many requests run at once, per client and in all, across every replica; a
//!   request holds its slot until its response body ends, renewed while it streams.
//! - [`Lease<R>`](extract::Lease) runs a handler only while it holds the lease `R` names
//!   (one import per tenant, say), with a fencing token for every protected write; a request
//!   that finds it held gets `409` with `Retry-After`. [`ReadLease<R>`](extract::ReadLease)
//!   and [`WriteLease<R>`](extract::WriteLease) share a lease among readers or hold it for
//!   one writer, and [`Permit<R>`](extract::Permit) holds one of a semaphore's permits
//!   (`429` when none is free).
//!
//! # Your own answers
//!
//! The crate answers a refusal with its status, `Retry-After` and the limit's fields (an RFC
//! 9457 problem with `problem_json`). One function of yours,
//! `Fn(&Rejection, &Parts) -> Option<Response<Bytes>>`, can word every refusal instead, with
//! the request's parts in view: give it to both layers' `rejection_response` and to
//! [`LeaseSpec::rejection_response`](extract::LeaseSpec::rejection_response); see
//! [`layer::Rejection`].
//!
//! `cargo run --example api_service` puts it all together: stacked per-client limits behind
//! trusted proxies, a per-API-key bucket, streams, a lease per report, JSON refusals and a
//! failure policy per limit.
//!
//! # Failure model
//!
//! Every step says what happens when Redis is unavailable (no answer: the layers' failure
//! policy decides), refuses (an ACL, a Lua error, out of memory: always an error, never a
//! pass) or leaves the outcome uncertain (a reply lost: cleaned up by owner token, fenced by
//! a server-time deadline). See [`Error`] and [the failure model](manual::failure_model).
//!
//! # Feature flags
//!
//! - `axum` (default): axum extractors and integration.
//! - `metrics`: metrics through the `metrics` facade (see [`telemetry`] for their names).
//! - `serde`: limits from configuration: `Quota` (`"100/min"`, `"10/s burst 20"`), `Quotas`,
//!   `PlanAlgorithm` and `RateLimitPlansConfig` deserialize from TOML, YAML, JSON, ...
//! - `tls`: `rediss://` connections through rustls.
//! - `test-util`: hooks for tests that look inside the backends; not for production.

// On docs.rs, items behind a feature say which.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod backend;
mod backoff;
pub mod coordination;
pub mod error;
#[cfg(feature = "axum")]
pub mod extract;
mod jitter;
pub mod layer;
pub mod manual;
mod outage_log;
mod response;
mod retry_after;
pub mod telemetry;
mod time;

pub use coordination::Coordination;
pub use error::{Error, ErrorKind, Result, UnsupportedFeature};
/// The redis-rs crate this crate is built on, re-exported so that an application names the
/// very version the backend uses: [`backend::redis::RedisBackend::eval`] takes its
/// `ToRedisArgs` arguments and `FromRedisValue` replies, and a direct dependency on another
/// version would give types that do not fit.
pub use redis;

/// A boxed error, as tower and hyper pass them around: the error type of the response bodies
/// the layers wrap (the inner body's error, or one of the layer's own, such as
/// [`PermitLost`](layer::concurrency_limit::PermitLost)).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
