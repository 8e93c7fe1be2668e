//! The manual: one page per subject a user comes with, each starting with the question it
//! answers and the shortest example that works. The pages hold no code; their examples are
//! compiled and run as the crate's tests.
//!
//! - [Rate limiting a router](rate_limiting): the layer, keys, the fields and `429`, which
//!   algorithm to choose, stacked limits, hot keys, the waiting queue, the deny cache, shadow
//!   mode.
//! - [Plans, overrides and runtime limits](plans): a quota per customer, changed at runtime in
//!   every replica.
//! - [Streaming and concurrency limits](concurrency): the concurrency layer, the `Permit`
//!   extractor, semaphores.
//! - [Locks, leases and fencing](locks): running a job on one replica, fenced locks, managed
//!   leases, the `Lease` extractor, fencing tokens, fenced values.
//! - [Coordination across replicas](coordination): latches, read-write leases, hash-field
//!   leases, sessions, leader election, Redlock.
//! - [Operations](operations): metrics and a Grafana dashboard, traces, readiness, shadow
//!   mode, TLS.
//! - [Deploying Redis](deploying_redis): persistence, eviction, Sentinel, Cluster, clocks, the
//!   ACL commands, and what each choice costs the guarantees.
//! - [The failure model](failure_model): what every layer, extractor and primitive does when
//!   Redis fails, row by row.
//! - [Security](security): what the limits defend against, and what is left to the
//!   application.
//! - [Upgrading](upgrading): rolling deploys and the stored keys.
//! - [Performance](performance): the measurements, and how to run them again.

#[doc = include_str!("../docs/rate-limiting.md")]
pub mod rate_limiting {}

#[doc = include_str!("../docs/plans.md")]
pub mod plans {}

#[doc = include_str!("../docs/concurrency.md")]
pub mod concurrency {}

#[doc = include_str!("../docs/locks.md")]
pub mod locks {}

#[doc = include_str!("../docs/coordination.md")]
pub mod coordination {}

#[doc = include_str!("../docs/operations.md")]
pub mod operations {}

#[doc = include_str!("../docs/deploying-redis.md")]
pub mod deploying_redis {}

#[doc = include_str!("../docs/failure-model.md")]
pub mod failure_model {}

#[doc = include_str!("../docs/security.md")]
pub mod security {}

#[doc = include_str!("../docs/upgrading.md")]
pub mod upgrading {}

#[doc = include_str!("../docs/performance.md")]
pub mod performance {}
