//! Waiting for a fenced lock, and the self-renewing managed lease, on every server kind, the
//! cluster and the memory backend.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::coordination::ManagedOptions;
use leasehold::coordination::lock::{FencedLock, ManagedLease, Release};
use leasehold::coordination::ownership::LossReason;
use support::target::{Target, scenario};

/// Far below any lease held here: a wake-up this late did not come from an expiry.
const PROMPTLY: Duration = Duration::from_millis(500);

// ---------------------------------------------------------------------------------------------

scenario!(a_waiter_is_woken_by_the_release_not_by_the_expiry);

async fn a_waiter_is_woken_by_the_release_not_by_the_expiry(target: Target) {
    let coordination = target.coordination("wake").await;
    let handles = target.handles(&coordination, 2).await;
    let holder_lock = FencedLock::named(&handles[0], "wake");
    let waiter_lock = FencedLock::named(&handles[1], "wake");
    let mut holder = holder_lock
        .try_acquire(Duration::from_secs(30))
        .await
        .expect("acquire")
        .acquired()
        .expect("free");

    let waiter = tokio::spawn(async move {
        let lease = waiter_lock.acquire(Duration::from_secs(30)).await;
        (lease, Instant::now())
    });
    // The waiter has tried once and is waiting (on Redis: for an invalidation).
    support::until_waiting(&handles[1..2], 1).await;
    assert!(!waiter.is_finished(), "the lock is held for 30 s");

    let released_at = Instant::now();
    assert_eq!(holder.release().await.expect("release"), Release::Released);
    let (lease, acquired_at) = tokio::time::timeout(PROMPTLY * 4, waiter)
        .await
        .expect("the waiter wakes long before the lease would expire")
        .expect("the waiter");
    let lease = lease.expect("acquired");
    assert!(lease.fencing_token() > holder.fencing_token());
    let latency = acquired_at - released_at;
    // Redis wakes it by invalidation, memory by its 50 ms polling: either way promptly.
    assert!(latency < PROMPTLY, "woken {latency:?} after the release");
}

scenario!(a_waiter_takes_over_when_the_lease_expires);

async fn a_waiter_takes_over_when_the_lease_expires(target: Target) {
    let coordination = target.coordination("expiry").await;
    let lock = FencedLock::named(&coordination, "expiry");
    let holder = lock
        .try_acquire(Duration::from_millis(300))
        .await
        .expect("acquire")
        .acquired()
        .expect("free");
    // Never released: the waiter wakes at the lease's time left, without a notification
    // (Redis sends none for an expiry nobody reads in time).
    let started = Instant::now();
    let lease = tokio::time::timeout(
        Duration::from_secs(3),
        lock.acquire(Duration::from_secs(30)),
    )
    .await
    .expect("taken over within a bounded time")
    .expect("acquired");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert!(lease.fencing_token() > holder.fencing_token());
    std::mem::forget(holder);
}

scenario!(cancelling_a_wait_takes_nothing);

async fn cancelling_a_wait_takes_nothing(target: Target) {
    let coordination = target.coordination("cancel").await;
    let lock = FencedLock::named(&coordination, "cancel");
    let mut holder = lock
        .try_acquire(Duration::from_secs(30))
        .await
        .expect("acquire")
        .acquired()
        .expect("free");
    let waited = tokio::time::timeout(
        Duration::from_millis(150),
        lock.acquire(Duration::from_secs(30)),
    )
    .await;
    assert!(waited.is_err(), "still held");
    holder.release().await.expect("release");
    // Nothing was left behind by the cancelled waiter: the lock is free.
    let next = lock
        .try_acquire(Duration::from_secs(30))
        .await
        .expect("acquire");
    assert!(next.is_acquired());
}

scenario!(a_managed_lease_outlives_its_lease_duration_until_released);

async fn a_managed_lease_outlives_its_lease_duration_until_released(target: Target) {
    let coordination = target.coordination("managed").await;
    let lock = FencedLock::named(&coordination, "managed");
    let options = ManagedOptions::new().lease(Duration::from_secs(1));
    let lease = ManagedLease::acquire(&lock, &options)
        .await
        .expect("acquire");
    let token = lease.fencing_token();

    // Three leases long: renewed every half lease, so still held.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!lease.is_lost());
    assert!(
        !lock
            .try_acquire(Duration::from_secs(1))
            .await
            .expect("try")
            .is_acquired(),
        "still held"
    );
    let mut ownership = lease.ownership();
    assert_eq!(lease.release().await.expect("release"), Release::Released);
    assert_eq!(ownership.lost().await, LossReason::Released);
    let next = lock
        .try_acquire(Duration::from_secs(1))
        .await
        .expect("try")
        .acquired()
        .expect("released");
    assert!(next.fencing_token() > token);
}

scenario!(a_managed_lease_dropped_is_released_in_the_background);

async fn a_managed_lease_dropped_is_released_in_the_background(target: Target) {
    let coordination = target.coordination("dropped").await;
    let lock = FencedLock::named(&coordination, "dropped");
    let options = ManagedOptions::new().lease(Duration::from_secs(30));
    drop(
        ManagedLease::acquire(&lock, &options)
            .await
            .expect("acquire"),
    );
    let next = tokio::time::timeout(PROMPTLY * 4, lock.acquire(Duration::from_secs(30)))
        .await
        .expect("released soon after the drop, not at expiry")
        .expect("acquired");
    assert!(next.fencing_token() >= 2);
}

scenario!(a_detached_lease_keeps_renewing_until_its_lifetime_limit);

async fn a_detached_lease_keeps_renewing_until_its_lifetime_limit(target: Target) {
    let coordination = target.coordination("detached").await;
    let lock = FencedLock::named(&coordination, "detached");
    let options = ManagedOptions::new()
        .lease(Duration::from_secs(1))
        .release_on_drop(false)
        .max_lifetime(Some(Duration::from_millis(1800)));
    let lease = ManagedLease::acquire(&lock, &options)
        .await
        .expect("acquire");
    let mut ownership = lease.ownership();
    let started = Instant::now();
    drop(lease);
    // Past its 1 s lease, still held by the detached keeper.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(!ownership.is_lost());
    assert!(
        !lock
            .try_acquire(Duration::from_secs(1))
            .await
            .expect("try")
            .is_acquired()
    );
    // Then released at its lifetime limit.
    let reason = tokio::time::timeout(Duration::from_secs(3), ownership.lost())
        .await
        .expect("the limit is reached");
    assert_eq!(reason, LossReason::LifetimeLimit);
    assert!(started.elapsed() >= Duration::from_millis(1800));
    let next = tokio::time::timeout(PROMPTLY * 4, lock.acquire(Duration::from_secs(1)))
        .await
        .expect("released at the limit")
        .expect("acquired");
    assert!(next.fencing_token() >= 2);
}

scenario!(a_lost_lease_fires_the_ownership_signal redis);

async fn a_lost_lease_fires_the_ownership_signal(target: Target) {
    let coordination = target.coordination("lost").await;
    let lock = FencedLock::named(&coordination, "lost");
    let options = ManagedOptions::new().lease(Duration::from_secs(1));
    let lease = ManagedLease::acquire(&lock, &options)
        .await
        .expect("acquire");
    let mut ownership = lease.ownership();
    // Taken away behind its back (as a failover that lost it would): the next renewal,
    // within half a lease, finds it gone.
    let physical = physical_key(&coordination, lock.lease_key());
    target.raw(&[b"DEL", &physical]);
    let reason = tokio::time::timeout(Duration::from_secs(2), ownership.lost())
        .await
        .expect("detected within a renewal period");
    assert_eq!(reason, LossReason::NotRenewed);
    assert!(lease.is_lost());
    assert_eq!(
        lease.release().await.expect("release"),
        Release::AlreadyReleased
    );
}

#[tokio::test]
async fn invalid_options_are_refused() {
    let coordination = leasehold::Coordination::memory();
    let lock = FencedLock::named(&coordination, "invalid");
    for options in [
        ManagedOptions::new().lease(Duration::from_millis(99)),
        ManagedOptions::new().lease(Duration::from_secs(3601)),
        ManagedOptions::new().poll_interval(Duration::ZERO),
        ManagedOptions::new().max_lifetime(Some(Duration::ZERO)),
        // A lifetime limit is for a detached lease; one released with its handle has none.
        ManagedOptions::new().max_lifetime(Some(Duration::from_secs(60))),
    ] {
        let err = ManagedLease::acquire(&lock, &options)
            .await
            .expect_err("invalid");
        assert_eq!(
            err.kind(),
            leasehold::ErrorKind::InvalidArgument,
            "{options:?}"
        );
    }
    // Nothing was taken.
    assert!(
        lock.try_acquire(Duration::from_secs(1))
            .await
            .expect("try")
            .is_acquired()
    );
}

#[tokio::test]
async fn many_waiters_take_the_lock_one_at_a_time_in_token_order() {
    let target = Target::Server(support::ServerKind::Redis7);
    let coordination = target.coordination("many").await;
    let handles = target.handles(&coordination, 4).await;
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..12 {
        let lock = FencedLock::named(&handles[i % handles.len()], "many");
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let mut lease = lock
                .acquire(Duration::from_secs(10))
                .await
                .expect("acquire");
            let start = Instant::now();
            tokio::time::sleep(Duration::from_millis(10)).await;
            let end = Instant::now();
            log.lock()
                .unwrap()
                .push((start, end, lease.fencing_token()));
            lease.release().await.expect("release");
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("every waiter gets its turn")
            .expect("task");
    }
    let mut log = log.lock().unwrap().clone();
    log.sort_by_key(|(start, _, _)| *start);
    for pair in log.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "two holders at once");
        assert!(pair[1].2 > pair[0].2, "tokens increase with each holder");
    }
}

fn physical_key(coordination: &leasehold::Coordination, key: &[u8]) -> Vec<u8> {
    match coordination.backend().as_redis() {
        Some(_) => coordination.backend().physical_key(key),
        None => key.to_vec(),
    }
}

#[tokio::test]
async fn renewals_without_answers_end_ownership_at_the_estimate() {
    let server = support::Server::start(support::ServerKind::Redis7, &[]);
    let coordination: leasehold::Coordination =
        leasehold::backend::redis::RedisBackend::standalone(server.unix_url())
            .key_prefix("")
            .response_timeout(Duration::from_millis(100))
            .connect()
            .await
            .expect("connect")
            .into();
    let lock = FencedLock::named(&coordination, "stalled");
    // Warm the scripts up: a NOSCRIPT answer during the stall would only add noise.
    let options = ManagedOptions::new().lease(Duration::from_secs(1));
    ManagedLease::acquire(&lock, &options)
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    let lease = ManagedLease::acquire(&lock, &options)
        .await
        .expect("acquire");
    let acquired = Instant::now();
    let mut ownership = lease.ownership();

    // The server stops answering: the renewal at half the lease gets no answer, so the
    // lease may or may not have been extended. Ownership ends when the estimate does.
    server.pause_clients(2500);
    let reason = tokio::time::timeout(Duration::from_secs(3), ownership.lost())
        .await
        .expect("ownership ends within the lease");
    assert_eq!(reason, LossReason::Uncertain);
    let at = acquired.elapsed();
    assert!(
        at >= Duration::from_millis(900) && at < Duration::from_millis(1600),
        "lost {at:?} after acquisition, expected at the 1 s estimate"
    );
}

scenario!(a_release_dropped_unpolled_still_releases);

/// `release` asks the keeper when it is called: a detached lease whose release future is
/// dropped before it is polled (a `select!` whose other branch was ready) is released all
/// the same, rather than left renewing on its own.
async fn a_release_dropped_unpolled_still_releases(target: Target) {
    let coordination = target.coordination("release-unpolled").await;
    let lock = FencedLock::named(&coordination, "unpolled");
    let options = ManagedOptions::new()
        .lease(Duration::from_secs(30))
        .release_on_drop(false);
    let lease = ManagedLease::acquire(&lock, &options)
        .await
        .expect("acquire");
    let mut ownership = lease.ownership();
    drop(lease.release());
    assert_eq!(
        tokio::time::timeout(PROMPTLY, ownership.lost())
            .await
            .expect("told at once"),
        LossReason::Released
    );
    let next = tokio::time::timeout(PROMPTLY * 4, lock.acquire(Duration::from_secs(30)))
        .await
        .expect("released, not renewing for 30 s")
        .expect("acquired");
    assert!(next.fencing_token() >= 2);
}
