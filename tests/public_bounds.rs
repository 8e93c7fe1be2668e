//! Every public type of the crate is `Send`, `Sync` and `'static` (generic ones for the
//! parameters a service gives them): an application moves them across tasks and threads and
//! keeps them in its state. Checked at compile time; the list is every struct and enum the
//! crate's docs list (`target/doc/leasehold/all.html`), so a new public type is added here.

#![cfg(all(
    feature = "axum",
    feature = "metrics",
    feature = "tls",
    feature = "serde"
))]

use std::convert::Infallible;

use axum::body::Body;
use http::{Request, Response};

fn bounds<T: Send + Sync + 'static>() {}

/// A future's or a body's bound: `Send` and `'static` (polled by one task at a time, as
/// axum's own body is).
fn polled_bounds<T: Send + 'static>() {}

/// The service a layer wraps, as axum's routes are.
type Inner = tower::util::BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

/// The spec of an extractor.
struct Spec;

#[test]
fn every_public_type_is_send_sync_and_static() {
    bounds::<leasehold::Error>();
    bounds::<leasehold::UnsupportedFeature>();
    bounds::<leasehold::backend::Backend>();
    bounds::<leasehold::backend::memory::MemoryBackend>();
    bounds::<leasehold::backend::memory::MemoryBackendBuilder>();
    bounds::<leasehold::backend::redis::Capabilities>();
    bounds::<leasehold::backend::redis::KeyWatch>();
    bounds::<leasehold::backend::redis::RedisBackend>();
    bounds::<leasehold::backend::redis::RedisBackendBuilder>();
    bounds::<leasehold::backend::redis::Script>();
    bounds::<leasehold::backend::redis::ServerVersion>();
    bounds::<leasehold::backend::redis::TlsSettings>();
    bounds::<leasehold::coordination::ByOwner>();
    bounds::<leasehold::coordination::Held<leasehold::coordination::lock::FencedLock>>();
    bounds::<leasehold::coordination::Managed<leasehold::coordination::lock::FencedLock>>();
    bounds::<leasehold::coordination::redlock::RedlockLease>();
    bounds::<leasehold::coordination::redlock::ManagedRedlockLease>();
    bounds::<leasehold::extract::HeldLease>();
    bounds::<leasehold::coordination::Coordination>();
    bounds::<leasehold::coordination::Detached>();
    bounds::<leasehold::coordination::ManagedOptions>();
    bounds::<leasehold::coordination::OwnerToken>();
    bounds::<leasehold::coordination::election::Election>();
    bounds::<leasehold::coordination::election::Leader>();
    bounds::<leasehold::coordination::election::Leadership>();
    bounds::<leasehold::coordination::election::Observer>();
    bounds::<leasehold::coordination::fenced_value::FencedRead>();
    bounds::<leasehold::coordination::fenced_value::FencedValue>();
    bounds::<leasehold::coordination::hash_lease::FieldLease>();
    bounds::<leasehold::coordination::hash_lease::LeaseHash>();
    bounds::<leasehold::coordination::hash_lease::ManagedFieldLease>();
    bounds::<leasehold::coordination::latch::CountdownLatch>();
    bounds::<leasehold::coordination::latch::LatchGeneration>();
    bounds::<leasehold::coordination::lock::Durability>();
    bounds::<leasehold::coordination::lock::FencedLease>();
    bounds::<leasehold::coordination::lock::FencedLock>();
    bounds::<leasehold::coordination::lock::ManagedLease>();
    bounds::<leasehold::coordination::ownership::AbandonedReleases>();
    bounds::<leasehold::coordination::ownership::OwnershipLost>();
    bounds::<leasehold::coordination::rate_limit::FixedWindow>();
    bounds::<leasehold::coordination::rate_limit::Gcra>();
    bounds::<leasehold::coordination::rate_limit::HotKeyStatistics>();
    bounds::<leasehold::coordination::rate_limit::HotKeys>();
    bounds::<leasehold::coordination::rate_limit::PlanChoice>();
    bounds::<leasehold::coordination::rate_limit::PolicyState>();
    bounds::<leasehold::coordination::rate_limit::Quota>();
    bounds::<leasehold::coordination::rate_limit::Quotas>();
    bounds::<leasehold::coordination::rate_limit::RateLimitDecision>();
    bounds::<leasehold::coordination::rate_limit::RateLimitPlans>();
    bounds::<leasehold::coordination::rate_limit::RateLimitPlansBuilder>();
    bounds::<leasehold::coordination::rate_limit::RateLimitPlansConfig>();
    bounds::<leasehold::coordination::rate_limit::RateLimitPolicy>();
    bounds::<leasehold::coordination::rate_limit::RateLimitStatistics>();
    bounds::<leasehold::coordination::rate_limit::RateLimiter>();
    bounds::<leasehold::coordination::rate_limit::Refill>();
    bounds::<leasehold::coordination::rate_limit::SlidingWindow>();
    bounds::<leasehold::coordination::rate_limit::Stacked>();
    bounds::<leasehold::coordination::rate_limit::TokenBucket>();
    bounds::<leasehold::coordination::redlock::RedlockGroup>();
    bounds::<leasehold::coordination::rw_lease::ManagedRwLease>();
    bounds::<leasehold::coordination::rw_lease::ReadWriteLock>();
    bounds::<leasehold::coordination::rw_lease::RwLease>();
    bounds::<leasehold::coordination::semaphore::Capacity>();
    bounds::<leasehold::coordination::semaphore::KeyedSemaphore>();
    bounds::<leasehold::coordination::semaphore::ManagedPermit>();
    bounds::<leasehold::coordination::semaphore::Semaphore>();
    bounds::<leasehold::coordination::semaphore::SemaphorePermit>();
    bounds::<leasehold::coordination::session::ManagedSession>();
    bounds::<leasehold::coordination::session::Session>();
    bounds::<leasehold::coordination::session::SessionState>();
    bounds::<leasehold::coordination::session::Sessions>();
    bounds::<leasehold::extract::HoldingLost>();
    bounds::<leasehold::extract::Lease<Spec>>();
    bounds::<leasehold::extract::LeaseRejection>();
    bounds::<leasehold::extract::LeaseRequest>();
    bounds::<leasehold::extract::Permit<Spec>>();
    bounds::<leasehold::extract::PermitRequest>();
    bounds::<leasehold::extract::ReadLease<Spec>>();
    bounds::<leasehold::extract::WriteLease<Spec>>();
    bounds::<leasehold::layer::CircuitBreaker>();
    polled_bounds::<leasehold::layer::ResponseBody<Body>>();
    bounds::<leasehold::layer::concurrency_limit::ConcurrencyLimit<Inner>>();
    bounds::<leasehold::layer::concurrency_limit::HoldLimitReached>();
    bounds::<leasehold::layer::concurrency_limit::PermitLost>();
    bounds::<leasehold::layer::concurrency_limit::RedisConcurrencyLimitLayer>();
    bounds::<leasehold::layer::key::InvalidTrustedProxy>();
    bounds::<leasehold::layer::key::KeyError>();
    bounds::<leasehold::layer::key::KeyExtractor>();
    bounds::<leasehold::layer::key::TrustedProxy>();
    bounds::<leasehold::layer::rate_limit::MissingRateLimitInfo>();
    bounds::<leasehold::layer::rate_limit::PlanChooser>();
    bounds::<leasehold::layer::rate_limit::RateLimit<Inner>>();
    polled_bounds::<leasehold::layer::rate_limit::ResponseFuture<Inner, Body>>();
    polled_bounds::<leasehold::layer::concurrency_limit::ResponseFuture<Inner, Body>>();
    // `layer::Rejection<'_>` is a view borrowed for one call of a rejection hook: not kept.
    bounds::<leasehold::layer::rate_limit::RateLimitInfo>();
    bounds::<leasehold::layer::rate_limit::RedisRateLimitLayer>();
    bounds::<leasehold::layer::rate_limit::ShadowSwitch>();
    bounds::<leasehold::ErrorKind>();
    bounds::<leasehold::backend::redis::KeyTtl>();
    bounds::<leasehold::coordination::Attempt<leasehold::coordination::lock::FencedLease>>();
    bounds::<leasehold::coordination::Release>();
    bounds::<leasehold::coordination::fenced_value::FencedWrite>();
    bounds::<leasehold::coordination::latch::CountDown>();
    bounds::<leasehold::coordination::ownership::AbandonCause>();
    bounds::<leasehold::coordination::ownership::LossReason>();
    bounds::<leasehold::coordination::ownership::Primitive>();
    bounds::<leasehold::coordination::ownership::ReleaseStage>();
    bounds::<leasehold::coordination::rate_limit::PlanAlgorithm>();
    bounds::<leasehold::coordination::rate_limit::QueueOrder>();
    bounds::<leasehold::coordination::rate_limit::QuotaUnit>();
    bounds::<leasehold::coordination::rw_lease::Access>();
    bounds::<leasehold::coordination::session::Claim>();
    bounds::<leasehold::layer::CircuitState>();
    bounds::<leasehold::layer::FailurePolicy>();
    bounds::<leasehold::layer::RejectionKind>();
    bounds::<leasehold::layer::key::IpNet>();
    bounds::<leasehold::layer::key::KeyErrorKind>();
}
