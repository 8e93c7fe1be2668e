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

/// A future's bound in the table below: `Send`, so that a task on a multi-threaded runtime
/// may hold it across an await (what an axum handler or a `tokio::spawn` asks).
fn sent<F: std::future::Future + Send>(future: F) {
    drop(future);
}

/// The same, for a future that also owns everything it uses.
fn sent_static<F: std::future::Future + Send + 'static>(future: F) {
    drop(future);
}

/// The public futures of the coordination primitives, of the held lifecycle, of sessions and
/// of elections are `Send` (and owned where they take their handle by value); the plans'
/// are checked in `plans.rs`, the layers' above. Each is built and dropped unpolled, on the
/// memory backend: only its type is asked about.
#[tokio::test]
async fn every_public_future_is_send() {
    use std::time::Duration;

    use leasehold::Coordination;
    use leasehold::coordination::fenced_value::FencedValue;
    use leasehold::coordination::hash_lease::{LeaseHash, ManagedFieldLease};
    use leasehold::coordination::latch::CountdownLatch;
    use leasehold::coordination::lock::{FencedLock, ManagedLease};
    use leasehold::coordination::rate_limit::{
        FixedWindow, Gcra, RateLimitPolicy, Refill, SlidingWindow, Stacked, TokenBucket,
    };
    use leasehold::coordination::redlock::RedlockGroup;
    use leasehold::coordination::rw_lease::{ManagedRwLease, ReadWriteLock};
    use leasehold::coordination::semaphore::{KeyedSemaphore, ManagedPermit, Semaphore};
    use leasehold::coordination::session::{ManagedSession, Sessions};
    use leasehold::coordination::{Managed, ManagedOptions, OwnerToken};

    let minute = Duration::from_secs(60);
    let c = Coordination::memory();
    let options = ManagedOptions::new().lease(Duration::from_secs(10));
    let token: OwnerToken = "0".repeat(32).parse().expect("a token");

    sent(c.server_time());
    sent(c.ready());
    sent(c.backend().server_time());
    sent(Coordination::connect("redis://127.0.0.1:1", "p:"));
    sent(leasehold::backend::redis::RedisBackend::standalone("redis://127.0.0.1:1").connect());

    // Rate limits.
    let fixed = FixedWindow::new(&c, "f", 5, minute).expect("valid");
    sent(fixed.try_acquire(b"k", 1));
    sent(fixed.return_reserved());
    sent(
        SlidingWindow::new(&c, "s", 5, minute, 6)
            .expect("valid")
            .try_acquire(b"k", 1),
    );
    sent(
        TokenBucket::new(&c, "t", 5, Refill::new(1, minute))
            .expect("valid")
            .try_acquire(b"k", 1),
    );
    sent(
        Gcra::new(&c, "g", 5, minute, 2)
            .expect("valid")
            .try_acquire(b"k", 1),
    );
    let stacked = Stacked::new(&c, "st", [RateLimitPolicy::new("m", 5, minute)]).expect("valid");
    sent(stacked.try_acquire(b"k", 1));

    // The lock, and the one held lifecycle (the same for every held primitive).
    let lock = FencedLock::named(&c, "lock");
    sent(lock.try_acquire(minute));
    sent(lock.acquire(minute));
    sent(
        lock.clone()
            .durable(leasehold::coordination::lock::Durability::replicas(1).expect("valid")),
    );
    sent(ManagedLease::acquire(&lock, &options));
    sent(ManagedLease::try_acquire(&lock, &options));
    let by_owner = lock.by_owner(token.clone());
    sent(by_owner.renew(minute));
    sent(by_owner.verify());
    sent(by_owner.release());
    let mut lease = lock
        .try_acquire(minute)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    sent(lease.verify_still_held());
    sent(lease.renew(minute));
    sent(lease.release());
    sent_static(lease.detach());
    let kept = ManagedLease::try_acquire(&FencedLock::named(&c, "kept"), &options)
        .await
        .expect("try")
        .expect("free");
    let mut lost = kept.ownership();
    sent(lost.lost());
    sent_static(kept.release());
    let kept = ManagedLease::try_acquire(&FencedLock::named(&c, "kept2"), &options)
        .await
        .expect("try")
        .expect("free");
    sent_static(kept.detach());

    // Redlock.
    let group = RedlockGroup::new([c.clone(), Coordination::memory(), Coordination::memory()])
        .expect("three nodes");
    sent(group.try_acquire("r", minute));
    sent(group.acquire("r", minute));

    // Semaphores.
    let semaphore = Semaphore::new(&c, "sem", 2).expect("valid");
    sent(semaphore.try_acquire(minute));
    sent(semaphore.acquire(minute));
    sent(semaphore.held());
    sent(ManagedPermit::acquire(&semaphore, &options));
    sent(ManagedPermit::try_acquire(&semaphore, &options));
    let keyed = KeyedSemaphore::new(
        &c,
        "keyed",
        leasehold::coordination::semaphore::Capacity::per_key(2),
    )
    .expect("valid");
    sent(keyed.try_acquire(b"k", minute));
    sent(keyed.acquire(b"k", minute));
    sent(keyed.held(b"k"));

    // Read-write leases.
    let rw = ReadWriteLock::named(&c, "rw");
    sent(rw.try_read(minute));
    sent(rw.try_write(minute));
    sent(rw.read(minute));
    sent(rw.write(minute));
    sent(ManagedRwLease::read(&rw, &options));
    sent(ManagedRwLease::write(&rw, &options));
    sent(ManagedRwLease::try_read(&rw, &options));
    sent(ManagedRwLease::try_write(&rw, &options));
    let mut writer = rw
        .try_write(minute)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    sent(writer.downgrade());
    let mut managed_writer = Managed::keep(writer, &options).expect("keep");
    sent(managed_writer.downgrade());

    // Hash leases.
    let hash = LeaseHash::named(&c, "hash");
    sent(hash.try_acquire("f", minute));
    sent(hash.acquire("f", minute));
    sent(ManagedFieldLease::acquire(&hash, "f", &options));
    sent(ManagedFieldLease::try_acquire(&hash, "f", &options));

    // The latch.
    let latch = CountdownLatch::named(&c, "latch");
    sent(latch.create(2, None));
    sent(latch.reset(2, None));
    sent(latch.join());
    let generation = latch.create(2, None).await.expect("create").expect("new");
    sent(generation.count_down());
    sent(generation.count());
    sent(generation.wait());

    // The fenced value.
    let value = FencedValue::named(&c, "value");
    sent(value.write(1, "v"));
    sent(value.read());

    // Sessions and elections.
    let space = Sessions::named(&c, "space");
    sent(space.grant(minute));
    sent(space.get("n"));
    sent(space.list());
    sent(space.state_of(&token));
    sent(ManagedSession::grant(&space, &options));
    let mut session = space.grant(minute).await.expect("grant");
    sent(session.put("n", "v"));
    sent(session.claim("n", "v"));
    sent(session.delete("n"));
    sent(session.keep_alive());
    sent(session.state());
    let managed = ManagedSession::grant(&space, &options)
        .await
        .expect("grant");
    sent(managed.put("n", "v"));
    sent(managed.claim("n", "v"));
    sent(managed.delete("n"));
    sent(managed.state());
    let election = leasehold::coordination::election::Election::named(&space, "lead");
    sent(election.campaign(&managed, "me"));
    sent(election.leader());
    let mut observer = election.observe();
    sent(observer.changed());
    let leadership = election.campaign(&managed, "me").await.expect("campaign");
    sent(leadership.proclaim("v"));
    sent(leadership.is_leader());
    sent_static(leadership.resign());
}
