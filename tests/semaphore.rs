//! Semaphores against every server kind, the cluster and the memory backend, and the rules
//! every holding keeps (`holding_rules`, on a server that is made to stall among them).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use leasehold::backend::key_slot;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::ownership::abandoned_releases;
use leasehold::coordination::semaphore::{Capacity, KeyedSemaphore, Semaphore, SemaphorePermit};
use leasehold::coordination::{Attempt, Release};
use leasehold::{Coordination, ErrorKind};
use support::eventually;
use support::target::{Target, scenario, server_ms};

const MINUTE: Duration = Duration::from_secs(60);

/// Waits until the backend's clock reaches `at_ms` (ms since the epoch).
async fn wait_for_server_time(coordination: &Coordination, at_ms: u64) {
    eventually("the server clock moves on", async || {
        server_ms(coordination).await >= at_ms
    })
    .await;
}

async fn acquired(semaphore: &Semaphore, expiry: Duration) -> SemaphorePermit {
    semaphore
        .try_acquire(expiry)
        .await
        .expect("try_acquire")
        .acquired()
        .expect("a free slot")
}

async fn is_full(semaphore: &Semaphore) -> bool {
    !semaphore
        .try_acquire(MINUTE)
        .await
        .expect("try_acquire")
        .is_acquired()
}

/// The physical key of a user key under the handle's prefix; Redis only.
fn physical(coordination: &Coordination, user_key: &[u8]) -> Vec<u8> {
    coordination.backend().physical_key(user_key)
}

fn semaphore_key(name: &[u8]) -> Vec<u8> {
    [b"sem:", name.len().to_string().as_bytes(), b":", name].concat()
}

fn keyed_keys(name: &[u8], client: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let tagged = [
        b"sem:{",
        name.len().to_string().as_bytes(),
        b":",
        name,
        b"}",
    ]
    .concat();
    (
        [tagged.as_slice(), b":key:", client].concat(),
        [tagged.as_slice(), b":global"].concat(),
    )
}

// ---------------------------------------------------------------------------------------------

scenario!(capacity_is_respected_and_full_says_when_a_slot_frees);

async fn capacity_is_respected_and_full_says_when_a_slot_frees(target: Target) {
    let coordination = target.coordination("capacity").await;
    let semaphore = Semaphore::new(&coordination, "jobs", 3).expect("valid");
    assert_eq!(semaphore.capacity(), 3);
    assert_eq!(semaphore.held().await.expect("held"), 0);
    let _long = acquired(&semaphore, MINUTE).await;
    let mut short = acquired(&semaphore, Duration::from_secs(30)).await;
    let _another = acquired(&semaphore, MINUTE).await;
    assert_eq!(semaphore.held().await.expect("held"), 3);

    for _ in 0..2 {
        let full = semaphore.try_acquire(MINUTE).await.expect("try");
        assert!(!full.is_acquired());
        // The earliest expiry frees the first slot.
        let wait = full.retry_after().expect("a finite expiry frees a slot");
        assert!(
            wait <= Duration::from_secs(30) && wait > Duration::from_secs(25),
            "{wait:?}"
        );
        assert!(full.acquired().is_none());
    }
    assert_eq!(
        semaphore.held().await.expect("held"),
        3,
        "a refusal takes nothing"
    );

    // Without the short one, the next slot frees when the minute is up.
    assert!(short.release().await.expect("release").was_held());
    let third = acquired(&semaphore, MINUTE).await;
    let wait = semaphore
        .try_acquire(MINUTE)
        .await
        .expect("try")
        .retry_after()
        .expect("a finite expiry");
    assert!(
        wait <= MINUTE && wait > MINUTE - Duration::from_secs(5),
        "{wait:?}"
    );
    drop(third);
}

// ---------------------------------------------------------------------------------------------

scenario!(release_frees_a_slot_once);

async fn release_frees_a_slot_once(target: Target) {
    let coordination = target.coordination("release").await;
    let semaphore = Semaphore::new(&coordination, "jobs", 1).expect("valid");
    let mut permit = acquired(&semaphore, MINUTE).await;
    assert!(!permit.is_released());
    assert_eq!(permit.lease(), MINUTE);
    assert!(permit.remaining_estimate() <= MINUTE);
    assert!(is_full(&semaphore).await);

    assert!(permit.release().await.expect("release").was_held());
    assert!(permit.is_released());
    assert_eq!(permit.remaining_estimate(), Duration::ZERO);
    assert!(
        !permit.release().await.expect("again").was_held(),
        "released twice"
    );
    assert!(!permit.verify_still_held().await.expect("verify"));
    assert!(!permit.renew(MINUTE).await.expect("renew"));

    let mut next = acquired(&semaphore, MINUTE).await;
    assert_ne!(next.owner_token(), permit.owner_token());
    assert!(next.remaining_estimate() > Duration::ZERO);
    assert!(next.release().await.expect("release").was_held());
    assert_eq!(semaphore.held().await.expect("held"), 0);
    assert_eq!(target.count_keys(&coordination), 0);
}

// ---------------------------------------------------------------------------------------------

scenario!(capacities_must_agree_while_permits_are_held);

async fn capacities_must_agree_while_permits_are_held(target: Target) {
    let coordination = target.coordination("mismatch").await;
    let three = Semaphore::new(&coordination, "jobs", 3).expect("valid");
    let mut first = acquired(&three, MINUTE).await;
    let mut second = acquired(&three, MINUTE).await;

    for other in [1, 2, 4] {
        let lower = Semaphore::new(&coordination, "jobs", other).expect("valid");
        let err = lower.try_acquire(MINUTE).await.expect_err("mismatch");
        assert_eq!(err.kind(), ErrorKind::CapacityMismatch, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("capacity of 3") && text.contains(&format!("not {other}")),
            "{text}"
        );
    }
    // Asking with a lower capacity revoked nothing.
    assert_eq!(three.held().await.expect("held"), 2);
    assert!(first.verify_still_held().await.expect("verify"));
    assert!(second.verify_still_held().await.expect("verify"));
    assert!(three.try_acquire(MINUTE).await.expect("try").is_acquired());

    // Once every permit is gone, a new capacity applies.
    assert!(first.release().await.expect("release").was_held());
    assert!(second.release().await.expect("release").was_held());
    eventually("the dropped permit is released", async || {
        three.held().await.expect("held") == 0
    })
    .await;
    let one = Semaphore::new(&coordination, "jobs", 1).expect("valid");
    let _only = acquired(&one, MINUTE).await;
    assert!(is_full(&one).await);
    let err = three.try_acquire(MINUTE).await.expect_err("now 1");
    assert_eq!(err.kind(), ErrorKind::CapacityMismatch);
}

// ---------------------------------------------------------------------------------------------

scenario!(expired_permits_are_pruned_by_the_next_step);

async fn expired_permits_are_pruned_by_the_next_step(target: Target) {
    const EXPIRY: Duration = Duration::from_millis(150);
    let coordination = target.coordination("expiry").await;
    let semaphore = Semaphore::new(&coordination, "jobs", 1).expect("valid");
    let mut first = acquired(&semaphore, EXPIRY).await;
    let granted_by = server_ms(&coordination).await;
    let wait = semaphore
        .try_acquire(MINUTE)
        .await
        .expect("try")
        .retry_after()
        .expect("it expires");
    assert!(wait <= EXPIRY && !wait.is_zero(), "{wait:?}");

    // Past the expiry on the server's clock, whatever happened to the local one.
    wait_for_server_time(&coordination, granted_by + 151).await;
    assert_eq!(semaphore.held().await.expect("held"), 0);
    assert!(!first.verify_still_held().await.expect("verify"));
    let mut second = acquired(&semaphore, MINUTE).await;
    // The lost permit cannot come back: past its estimate, no renewal is sent, and its
    // release (which settles it) says it was no longer held.
    assert!(!first.renew(MINUTE).await.expect("renew"));
    assert!(
        !first.is_released(),
        "past its estimate, only a release settles it"
    );
    assert_eq!(first.remaining_estimate(), Duration::ZERO);
    assert!(!first.release().await.expect("release").was_held());
    assert!(first.is_released());
    assert!(second.verify_still_held().await.expect("verify"));
    assert!(second.release().await.expect("release").was_held());

    // A permit that expired with nobody stepping on it leaves no key behind.
    let forgotten = acquired(&semaphore, EXPIRY).await;
    let granted_by = server_ms(&coordination).await;
    std::mem::forget(forgotten); // no background release: expiry alone must clean up
    wait_for_server_time(&coordination, granted_by + 152).await;
    eventually("the expired key is gone", async || {
        target.count_keys(&coordination) == 0
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn memory_permits_follow_the_paused_clock() {
    let coordination = Coordination::memory();
    let semaphore = Semaphore::new(&coordination, "jobs", 1).expect("valid");
    let first = acquired(&semaphore, Duration::from_secs(10)).await;
    tokio::time::advance(Duration::from_secs(4)).await;
    assert_eq!(
        first.remaining_estimate(),
        Duration::from_secs(6),
        "measured from the request"
    );
    let full = semaphore.try_acquire(MINUTE).await.expect("try");
    assert_eq!(full.retry_after(), Some(Duration::from_secs(6)));
    tokio::time::advance(Duration::from_secs(6) - Duration::from_millis(1)).await;
    assert!(is_full(&semaphore).await);
    assert_eq!(semaphore.held().await.expect("held"), 1);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(semaphore.held().await.expect("held"), 0);
    assert_eq!(first.remaining_estimate(), Duration::ZERO);
    assert!(!first.verify_still_held().await.expect("verify"));
    let mut second = acquired(&semaphore, Duration::from_secs(10)).await;

    // Renewal counts from the renewal.
    tokio::time::advance(Duration::from_secs(8)).await;
    assert!(second.renew(Duration::from_secs(5)).await.expect("renew"));
    assert_eq!(second.lease(), Duration::from_secs(5));
    assert_eq!(second.remaining_estimate(), Duration::from_secs(5));
    tokio::time::advance(Duration::from_secs(4)).await;
    assert!(second.verify_still_held().await.expect("verify"));
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(!second.verify_still_held().await.expect("verify"));
    // Past its estimate: nothing is sent; the release settles it.
    assert!(!second.renew(MINUTE).await.expect("lost"));
    assert!(!second.is_released());
    assert!(!second.release().await.expect("release").was_held());
    assert!(second.is_released());
    drop(first);
    assert!(coordination_is_empty(&coordination));
}

fn coordination_is_empty(coordination: &Coordination) -> bool {
    coordination
        .backend()
        .as_memory()
        .expect("memory only")
        .is_empty()
}

// ---------------------------------------------------------------------------------------------

scenario!(renewal_extends_or_finds_the_permit_lost);

async fn renewal_extends_or_finds_the_permit_lost(target: Target) {
    let coordination = target.coordination("renew").await;
    let semaphore = Semaphore::new(&coordination, "jobs", 2).expect("valid");
    let mut permit = acquired(&semaphore, Duration::from_secs(30)).await;
    assert!(permit.renew(2 * MINUTE).await.expect("renew"));
    assert_eq!(permit.lease(), 2 * MINUTE);
    let left = permit.remaining_estimate();
    assert!(left <= 2 * MINUTE && left > MINUTE, "{left:?}");
    let wait = semaphore_full_wait(&semaphore).await;
    assert!(wait > MINUTE && wait <= 2 * MINUTE, "{wait:?}");

    // A shorter expiry shortens it.
    assert!(permit.renew(MINUTE).await.expect("renew"));
    assert_eq!(permit.lease(), MINUTE);
    assert!(permit.remaining_estimate() <= MINUTE);
    assert!(permit.verify_still_held().await.expect("verify"));

    // An invalid expiry is refused before anything is sent: the permit is still held.
    for invalid in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
        let err = permit.renew(invalid).await.expect_err("invalid");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(!permit.is_released());
    }

    // Lost: expired on the server before the renewal came.
    assert!(permit.renew(Duration::from_millis(1)).await.expect("renew"));
    let renewed_by = server_ms(&coordination).await;
    wait_for_server_time(&coordination, renewed_by + 2).await;
    // Past its estimate: no renewal is sent; the release finds it gone and settles it.
    assert!(!permit.renew(MINUTE).await.expect("lost"));
    assert_eq!(permit.remaining_estimate(), Duration::ZERO);
    assert!(!permit.release().await.expect("release").was_held());
    assert!(permit.is_released());
    assert_eq!(semaphore.held().await.expect("held"), 0);
    assert_eq!(target.count_keys(&coordination), 0);
}

/// Fills the semaphore's last slot with a permit that never expires, reads the retry time
/// of the next acquisition, and gives the slot back.
async fn semaphore_full_wait(semaphore: &Semaphore) -> Duration {
    // A filler that outlasts every permit the tests measure.
    let mut filler = acquired(semaphore, 10 * MINUTE).await;
    let wait = semaphore
        .try_acquire(MINUTE)
        .await
        .expect("try")
        .retry_after()
        .expect("a finite expiry");
    assert!(filler.release().await.expect("release").was_held());
    wait
}

// ---------------------------------------------------------------------------------------------

scenario!(a_waiting_acquire_is_woken_by_a_release);

/// On Redis by the set's invalidation, in memory by its 50 ms polling: either way long
/// before the minute the holder's permit would last.
async fn a_waiting_acquire_is_woken_by_a_release(target: Target) {
    let coordination = target.coordination("sem-wake").await;
    let handles = target.handles(&coordination, 2).await;
    let holder = Semaphore::new(&handles[0], "wake", 1).expect("valid");
    let waiter = Semaphore::new(&handles[1], "wake", 1).expect("valid");
    let mut held = acquired(&holder, MINUTE).await;

    let waiting = tokio::spawn(async move {
        let permit = waiter.acquire(MINUTE).await;
        (permit, std::time::Instant::now())
    });
    support::until_waiting(&handles[1..2], 1).await;
    assert!(!waiting.is_finished(), "the only slot is held for a minute");

    let released_at = std::time::Instant::now();
    assert!(held.release().await.expect("release").was_held());
    let (permit, acquired_at) = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("woken long before the holder's expiry")
        .expect("the waiter");
    let permit = permit.expect("acquired");
    assert!(!permit.is_released());
    let latency = acquired_at - released_at;
    assert!(
        latency < Duration::from_millis(500),
        "woken {latency:?} after"
    );
}

scenario!(a_waiting_acquire_takes_the_slot_an_expiry_frees);

/// Nobody releases: the waiter wakes when expiries alone free a slot, told by the full
/// answer, without a notification.
async fn a_waiting_acquire_takes_the_slot_an_expiry_frees(target: Target) {
    let coordination = target.coordination("sem-expiry").await;
    let semaphore = Semaphore::new(&coordination, "expiry", 1).expect("valid");
    let _held = acquired(&semaphore, Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let permit = tokio::time::timeout(Duration::from_secs(3), semaphore.acquire(MINUTE))
        .await
        .expect("acquired within a bounded time")
        .expect("acquired");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(semaphore.held().await.expect("held"), 1);
    drop(permit);
}

scenario!(a_keyed_waiter_is_woken_by_a_release_of_another_key);

/// The global capacity is full with another key's permit: the waiter watches the global set
/// too, and its release wakes it.
async fn a_keyed_waiter_is_woken_by_a_release_of_another_key(target: Target) {
    let coordination = target.coordination("keyed-wake").await;
    let handles = target.handles(&coordination, 2).await;
    let capacity = Capacity::per_key(1).and_global(1);
    let holder = KeyedSemaphore::new(&handles[0], "exports", capacity).expect("valid");
    let waiter = KeyedSemaphore::new(&handles[1], "exports", capacity).expect("valid");
    let mut held = holder
        .try_acquire(b"alice", MINUTE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let waiting = tokio::spawn(async move { waiter.acquire(b"bob", MINUTE).await });
    support::until_waiting(&handles[1..2], 1).await;
    assert!(!waiting.is_finished(), "the global slot is alice's");
    assert!(held.release().await.expect("release").was_held());
    let permit = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("woken by the global set's release")
        .expect("the waiter")
        .expect("acquired");
    assert!(!permit.is_released());
}

scenario!(storage_follows_the_permits redis);

async fn storage_follows_the_permits(target: Target) {
    let coordination = target.coordination("storage").await;
    let semaphore = Semaphore::new(&coordination, "jobs", 3).expect("valid");
    let key = physical(&coordination, &semaphore_key(b"jobs"));

    // Every permit expires, so the key always does: with its latest permit.
    let mut long = acquired(&semaphore, 2 * MINUTE).await;
    let ttl = target.pttl(&key);
    assert!(ttl > 115_000 && ttl <= 120_001, "{ttl}");
    let mut minute = acquired(&semaphore, MINUTE).await;
    let ttl = target.pttl(&key);
    assert!(ttl > 115_000 && ttl <= 120_001, "{ttl}");
    assert!(long.release().await.expect("release").was_held());
    let ttl = target.pttl(&key);
    assert!(ttl > 55_000 && ttl <= 60_001, "{ttl}");

    // The latest expiry decides, renewals included.
    let mut short = acquired(&semaphore, Duration::from_secs(5)).await;
    let ttl = target.pttl(&key);
    assert!(ttl > 55_000 && ttl <= 60_001, "{ttl}");
    assert!(short.renew(2 * MINUTE).await.expect("renew"));
    let ttl = target.pttl(&key);
    assert!(ttl > 115_000 && ttl <= 120_001, "{ttl}");

    // Members: the capacity (negative score) and one per permit, scored by its expiry.
    let members: Vec<(Vec<u8>, String)> =
        target.query(&[b"ZRANGE", &key, b"0", b"-1", b"WITHSCORES"]);
    assert_eq!(members.len(), 3, "{members:?}");
    assert_eq!(members[0], (b"c".to_vec(), "-3".to_owned()));
    assert_eq!(
        members[1].0,
        format!("p:{}", minute.owner_token()).into_bytes()
    );
    assert_eq!(
        members[2].0,
        format!("p:{}", short.owner_token()).into_bytes()
    );
    let server_now = server_ms(&coordination).await;
    let expires: u64 = members[2].1.parse().expect("a time");
    assert!(expires > server_now + 115_000, "{expires} vs {server_now}");

    assert!(minute.release().await.expect("release").was_held());
    assert!(short.release().await.expect("release").was_held());
    assert_eq!(target.raw(&[b"EXISTS", &key]), redis::Value::Int(0));
}

// ---------------------------------------------------------------------------------------------

scenario!(nothing_is_left_behind);

async fn nothing_is_left_behind(target: Target) {
    let coordination = target.coordination("leaks").await;
    let semaphore = Semaphore::new(&coordination, "jobs", 4).expect("valid");
    let keyed = KeyedSemaphore::new(&coordination, "api", Capacity::per_key(2).and_global(4))
        .expect("valid");

    let mut released = acquired(&semaphore, MINUTE).await;
    let dropped = acquired(&semaphore, MINUTE).await;
    let expiring = acquired(&semaphore, Duration::from_millis(100)).await;
    let mut keyed_released = keyed
        .try_acquire(b"a", MINUTE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let keyed_dropped = keyed.try_acquire(b"b", MINUTE).await.expect("try");
    let keyed_expiring = keyed
        .try_acquire(b"c", Duration::from_millis(100))
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let granted_by = server_ms(&coordination).await;
    assert!(keyed_dropped.is_acquired());
    assert_eq!(keyed.held(b"b").await.expect("held"), (Some(1), Some(3)));
    assert!(target.count_keys(&coordination) > 0);

    assert!(released.release().await.expect("release").was_held());
    assert!(keyed_released.release().await.expect("release").was_held());
    drop(dropped);
    drop(keyed_dropped);
    // Expiry alone must take these away.
    std::mem::forget(expiring);
    std::mem::forget(keyed_expiring);
    wait_for_server_time(&coordination, granted_by + 102).await;
    eventually("every key is gone", async || {
        target.count_keys(&coordination) == 0
    })
    .await;
}

// ---------------------------------------------------------------------------------------------

scenario!(keyed_capacity_is_per_key_and_global_all_or_nothing);

async fn keyed_capacity_is_per_key_and_global_all_or_nothing(target: Target) {
    let coordination = target.coordination("keyed").await;
    let keyed = KeyedSemaphore::new(&coordination, "exports", Capacity::per_key(1).and_global(2))
        .expect("valid");
    assert_eq!((keyed.per_key(), keyed.global()), (Some(1), Some(2)));

    let alice = keyed
        .try_acquire(b"alice", Duration::from_secs(30))
        .await
        .expect("try");
    assert!(alice.is_acquired());
    // Alice's own semaphore is full: nothing is taken from the global one.
    for _ in 0..3 {
        let full = keyed.try_acquire(b"alice", MINUTE).await.expect("try");
        let wait = full.retry_after().expect("alice's permit expires");
        assert!(wait <= Duration::from_secs(30) && wait > Duration::from_secs(25));
    }
    assert_eq!(
        keyed.held(b"alice").await.expect("held"),
        (Some(1), Some(1))
    );

    let bob = keyed.try_acquire(b"bob", MINUTE).await.expect("try");
    assert!(bob.is_acquired());
    // The global semaphore is full: carol's own one stays empty. Its slot frees when the
    // earliest global permit (alice's) expires.
    let full = keyed.try_acquire(b"carol", MINUTE).await.expect("try");
    let wait = full.retry_after().expect("global permits expire");
    assert!(
        wait <= Duration::from_secs(30) && wait > Duration::from_secs(25),
        "{wait:?}"
    );
    assert_eq!(
        keyed.held(b"carol").await.expect("held"),
        (Some(0), Some(2))
    );

    // Both full: the later of the two frees decides.
    let wait = keyed
        .try_acquire(b"bob", MINUTE)
        .await
        .expect("try")
        .retry_after()
        .expect("expiring");
    assert!(
        wait <= MINUTE && wait > MINUTE - Duration::from_secs(5),
        "{wait:?}"
    );

    // Releasing alice's permit frees both of its slots.
    let mut alice = alice.acquired().expect("acquired");
    assert!(alice.release().await.expect("release").was_held());
    assert_eq!(
        keyed.held(b"alice").await.expect("held"),
        (Some(0), Some(1))
    );
    let carol = keyed.try_acquire(b"carol", MINUTE).await.expect("try");
    assert!(carol.is_acquired());

    // A mismatch on either side takes nothing from the other.
    let other = KeyedSemaphore::new(&coordination, "exports", Capacity::per_key(1).and_global(5))
        .expect("valid");
    let err = other
        .try_acquire(b"dave", MINUTE)
        .await
        .expect_err("global mismatch");
    assert_eq!(err.kind(), ErrorKind::CapacityMismatch);
    assert!(err.to_string().contains(":global"), "{err}");
    assert_eq!(keyed.held(b"dave").await.expect("held"), (Some(0), Some(2)));

    // One side only.
    let per_key =
        KeyedSemaphore::new(&coordination, "per-key", Capacity::per_key(1)).expect("valid");
    let _p = per_key.try_acquire(b"k", MINUTE).await.expect("try");
    assert_eq!(per_key.held(b"k").await.expect("held"), (Some(1), None));
    assert!(
        per_key
            .try_acquire(b"other", MINUTE)
            .await
            .expect("try")
            .is_acquired()
    );
    let global = KeyedSemaphore::new(&coordination, "global", Capacity::global(1)).expect("valid");
    let _g = global.try_acquire(b"k", MINUTE).await.expect("try");
    assert_eq!(global.held(b"other").await.expect("held"), (None, Some(1)));
    assert!(
        !global
            .try_acquire(b"other", MINUTE)
            .await
            .expect("try")
            .is_acquired()
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(keyed_keys_share_a_slot redis);

async fn keyed_keys_share_a_slot(target: Target) {
    let coordination = target.coordination("slot").await;
    // A name with braces of its own cannot split the pair.
    for name in [b"api".as_slice(), b"a}b{c", b"{x}"] {
        let keyed = KeyedSemaphore::new(&coordination, name, Capacity::per_key(1).and_global(3))
            .expect("valid");
        let (per_key, global) = keyed_keys(name, b"client}{");
        let (per_key, global) = (
            physical(&coordination, &per_key),
            physical(&coordination, &global),
        );
        assert_eq!(key_slot(&per_key), key_slot(&global));
        let mut permit = keyed
            .try_acquire(b"client}{", MINUTE)
            .await
            .expect("one slot")
            .acquired()
            .expect("free");
        assert_eq!(target.raw(&[b"EXISTS", &per_key]), redis::Value::Int(1));
        assert_eq!(target.raw(&[b"EXISTS", &global]), redis::Value::Int(1));
        if matches!(target, Target::Cluster) {
            let per_key_slot: i64 = target.query(&[b"CLUSTER", b"KEYSLOT", &per_key]);
            let global_slot: i64 = target.query(&[b"CLUSTER", b"KEYSLOT", &global]);
            assert_eq!(per_key_slot, global_slot);
            assert_eq!(per_key_slot, i64::from(key_slot(&per_key)));
        }
        assert!(permit.release().await.expect("release").was_held());
    }
}

// ---------------------------------------------------------------------------------------------

scenario!(binary_names_and_keys);

async fn binary_names_and_keys(target: Target) {
    let coordination = target.coordination("binary").await;
    let name = b"\x00\xff{bin}\n".as_slice();
    let semaphore = Semaphore::new(&coordination, name, 1).expect("valid");
    let mut permit = acquired(&semaphore, MINUTE).await;
    assert!(is_full(&semaphore).await);
    if !matches!(target, Target::Memory) {
        let key = physical(&coordination, &semaphore_key(name));
        assert_eq!(target.raw(&[b"EXISTS", &key]), redis::Value::Int(1));
    }
    assert!(permit.verify_still_held().await.expect("verify"));
    assert!(permit.release().await.expect("release").was_held());

    let keyed = KeyedSemaphore::new(
        &coordination,
        b"n\x00}{",
        Capacity::per_key(1).and_global(2),
    )
    .expect("valid");
    let client = b"\xfe\x00:key".as_slice();
    let mut permit = keyed
        .try_acquire(client, MINUTE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    assert_eq!(keyed.held(client).await.expect("held"), (Some(1), Some(1)));
    assert_eq!(
        keyed.held(b"\xfe\x00").await.expect("held"),
        (Some(0), Some(1))
    );
    if !matches!(target, Target::Memory) {
        let (per_key, _) = keyed_keys(b"n\x00}{", client);
        let per_key = physical(&coordination, &per_key);
        assert_eq!(target.raw(&[b"EXISTS", &per_key]), redis::Value::Int(1));
    }
    assert!(permit.release().await.expect("release").was_held());
    assert_eq!(target.count_keys(&coordination), 0);
}

// ---------------------------------------------------------------------------------------------

scenario!(corrupt_state_fails_without_change redis);

async fn corrupt_state_fails_without_change(target: Target) {
    let coordination = target.coordination("corrupt").await;
    let semaphore = Semaphore::new(&coordination, "jobs", 2).expect("valid");
    let key = physical(&coordination, &semaphore_key(b"jobs"));
    let text = redis::Value::BulkString(b"not a set".to_vec());

    target.raw(&[b"SET", &key, b"not a set"]);
    let err = semaphore.try_acquire(MINUTE).await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    let err = semaphore.held().await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert_eq!(target.raw(&[b"GET", &key]), text);
    assert_eq!(target.pttl(&key), -1);

    // Sorted sets that are not a semaphore's: no capacity, a negative permit score, a
    // capacity that is not a positive whole number.
    for members in [
        vec![b"5".as_slice(), b"p:x"],
        vec![b"-2", b"c", b"-1", b"p:x"],
        vec![b"-1.5", b"c", b"5", b"p:x"],
        vec![b"0", b"c", b"5", b"p:x"],
    ] {
        target.raw(&[b"DEL", &key]);
        let mut zadd = vec![b"ZADD".as_slice(), &key];
        zadd.extend(members.iter().copied());
        target.raw(&zadd);
        let before = target.raw(&[b"ZRANGE", &key, b"0", b"-1", b"WITHSCORES"]);
        let err = semaphore.try_acquire(MINUTE).await.expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{members:?}: {err}");
        assert_eq!(
            target.raw(&[b"ZRANGE", &key, b"0", b"-1", b"WITHSCORES"]),
            before
        );
    }

    // Keyed: a corrupt global key stops the client key's acquisition before it writes.
    let keyed = KeyedSemaphore::new(&coordination, "api", Capacity::per_key(1).and_global(2))
        .expect("valid");
    let (per_key, global) = keyed_keys(b"api", b"k");
    let user_global = global.clone();
    let (per_key, global) = (
        physical(&coordination, &per_key),
        physical(&coordination, &global),
    );
    target.raw(&[b"SET", &global, b"not a set"]);
    let err = keyed.try_acquire(b"k", MINUTE).await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState);
    // The key is named apart from the message, which logs carry at ERROR.
    assert_eq!(err.key(), Some(&user_global[..]), "{err:?}");
    assert!(
        !err.to_string()
            .contains(&*String::from_utf8_lossy(&user_global)),
        "{err}"
    );
    assert_eq!(target.raw(&[b"EXISTS", &per_key]), redis::Value::Int(0));
    assert_eq!(target.raw(&[b"GET", &global]), text);
}

// ---------------------------------------------------------------------------------------------

scenario!(concurrent_holders_never_exceed_the_capacity);

async fn concurrent_holders_never_exceed_the_capacity(target: Target) {
    const CAPACITY: u32 = 3;
    const TASKS: usize = 8;
    const ATTEMPTS: usize = 25;
    let first = target.coordination("concurrent").await;
    let handles = target.handles(&first, TASKS).await;
    let holding = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = handles
        .into_iter()
        .map(|coordination| {
            let (holding, most) = (Arc::clone(&holding), Arc::clone(&most));
            tokio::spawn(async move {
                let semaphore = Semaphore::new(&coordination, "hot", CAPACITY).expect("valid");
                let mut granted = 0u32;
                for _ in 0..ATTEMPTS {
                    let attempt = semaphore.try_acquire(MINUTE).await.expect("try");
                    let Some(mut permit) = attempt.acquired() else {
                        tokio::task::yield_now().await;
                        continue;
                    };
                    granted += 1;
                    // Counted from the grant's answer until before the release is sent: within
                    // the time the server counts the permit.
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    holding.fetch_sub(1, Ordering::SeqCst);
                    assert!(permit.release().await.expect("release").was_held());
                }
                granted
            })
        })
        .collect();
    let mut granted = 0;
    for task in tasks {
        granted += task.await.expect("task");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= CAPACITY, "{most} held at once");
    assert!(granted >= CAPACITY, "only {granted} grants");
    let semaphore = Semaphore::new(&first, "hot", CAPACITY).expect("valid");
    assert_eq!(semaphore.held().await.expect("held"), 0);
    assert_eq!(target.count_keys(&first), 0);
}

// ---------------------------------------------------------------------------------------------

scenario!(a_dropped_permit_is_released_in_the_background);

async fn a_dropped_permit_is_released_in_the_background(target: Target) {
    let coordination = target.coordination("drop").await;
    let semaphore = Semaphore::new(&coordination, "jobs", 1).expect("valid");
    let abandoned =
        abandoned_releases().of(leasehold::coordination::ownership::Primitive::SemaphorePermit);
    drop(acquired(&semaphore, MINUTE).await);
    eventually("the dropped permit is released", async || {
        semaphore.held().await.expect("held") == 0
    })
    .await;
    let _next = acquired(&semaphore, MINUTE).await;
    assert_eq!(
        abandoned_releases().of(leasehold::coordination::ownership::Primitive::SemaphorePermit),
        abandoned
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(a_cancelled_renewal_keeps_the_permit_with_the_narrower_estimate redis);

async fn a_cancelled_renewal_keeps_the_permit_with_the_narrower_estimate(target: Target) {
    let coordination = target.coordination("cancel").await;
    let semaphore = Semaphore::new(&coordination, "jobs", 1).expect("valid");
    let mut permit = acquired(&semaphore, 5 * MINUTE).await;
    {
        // Poll the renewal once (its request is on its way), then drop it.
        let renewal = permit.renew(MINUTE);
        tokio::select! {
            biased;
            result = renewal => panic!("a round trip finished in one poll: {result:?}"),
            () = std::future::ready(()) => {}
        }
    }
    // The renewal may have run (an expiry of a minute) or not (five minutes): the estimate
    // keeps what both guarantee, and the permit is still held.
    assert!(!permit.is_released());
    let estimate = permit.remaining_estimate();
    assert!(
        estimate <= MINUTE && estimate > MINUTE - Duration::from_secs(5),
        "{estimate:?}"
    );
    assert!(permit.verify_still_held().await.expect("verify"));
    // Renewing again is safe: a late renewal only extends a permit it still finds.
    assert!(permit.renew(MINUTE).await.expect("renew"));
    assert!(permit.release().await.expect("release").was_held());
    assert_eq!(target.count_keys(&coordination), 0);
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn invalid_arguments_are_refused_before_anything_is_sent() {
    let coordination = Coordination::memory();
    let err = Semaphore::new(&coordination, "s", 0).expect_err("zero");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    for capacity in [
        Capacity::per_key(0),
        Capacity::global(0),
        Capacity::per_key(1).and_global(0),
        Capacity::global(1).and_per_key(0),
    ] {
        let err = KeyedSemaphore::new(&coordination, "k", capacity).expect_err("invalid");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{capacity:?}");
    }
    let semaphore = Semaphore::new(&coordination, "s", 1).expect("valid");
    for invalid in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_secs(40 * 365 * 24 * 3600),
    ] {
        let err = semaphore.try_acquire(invalid).await.expect_err("invalid");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{invalid:?}");
    }
    assert!(coordination_is_empty(&coordination));
    // Sub-millisecond parts are dropped.
    let permit = acquired(&semaphore, Duration::from_micros(1_500)).await;
    assert_eq!(permit.lease(), Duration::from_millis(1));
}

// ---------------------------------------------------------------------------------------------
// Failure rules of the semaphore's own (the rules every holding keeps on a stalling server are
// `holding_rules`).

/// An acquisition whose first delivery is held by the network (its connection reset under
/// it) is sent again on a new connection and granted; the holder releases it; then the held
/// delivery lands, before its deadline, and takes a permit that never expires under the same
/// token. The holding sent, when it was released, a second release that waits for that
/// deadline: the permit goes with it.
#[tokio::test]
async fn a_lost_delivery_landing_after_the_release_is_released_too() {
    let behind = support::Behind::start("late-delivery");
    let direct = behind.direct().await;
    let through = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(200)))
        .await;
    let watching = Semaphore::new(&direct, "late", 1).expect("valid");
    let semaphore = Semaphore::new(&through, "late", 1).expect("valid");
    // Warm: the script is cached, the connection made.
    let mut warm = acquired(&semaphore, MINUTE).await;
    assert!(warm.release().await.expect("release").was_held());
    let scripts = || {
        support::target::command_calls(&behind.server, "evalsha")
            + support::target::command_calls(&behind.server, "eval")
    };

    behind.proxy.stall();
    let sent = behind.proxy.sent();
    let acquiring = tokio::spawn(async move { semaphore.try_acquire(MINUTE).await });
    behind
        .proxy
        .until_sent(sent, "the first delivery is in the network")
        .await;
    behind.proxy.sever();
    behind.proxy.pass();
    let mut permit = tokio::time::timeout(Duration::from_secs(5), acquiring)
        .await
        .expect("bounded")
        .expect("task")
        .expect("sent again on a new connection")
        .acquired()
        .expect("granted");
    assert!(permit.release().await.expect("release").was_held());
    assert_eq!(watching.held().await.expect("held"), 0);

    let before = scripts();
    behind.proxy.deliver_held();
    eventually("the held delivery lands", async || scripts() > before).await;
    eventually("the permit it took is released", async || {
        watching.held().await.is_ok_and(|held| held == 0)
    })
    .await;
}

/// A grant that reaches the client after its expiry already ran out (the reply took 400 ms,
/// the permit lasts 200 ms): nobody could use it, so it is released by its token at once and
/// answered as busy with no time to wait; the semaphore is free for the next holder.
#[tokio::test]
async fn a_grant_that_arrives_after_its_expiry_is_released_and_answered_as_busy() {
    let behind = support::Behind::start("late-grant");
    let (server, proxy) = (&behind.server, &behind.proxy);
    let holder = behind.through_proxy(|builder| builder).await;
    let semaphore = Semaphore::new(&holder, "late", 1).expect("valid");
    // The script is loaded: the acquisition below is one EVALSHA, the release another.
    drop(acquired(&semaphore, MINUTE).await);
    eventually("the first permit is released", async || {
        semaphore.held().await.expect("held") == 0
    })
    .await;
    let calls = || support::target::command_calls(server, "evalsha");
    let before = calls();

    proxy.latency(
        support::proxy::Direction::ToClient,
        Duration::from_millis(400),
    );
    let attempt = semaphore
        .try_acquire(Duration::from_millis(200))
        .await
        .expect("answered");
    assert!(
        matches!(attempt, Attempt::Busy { retry_after: None }),
        "{attempt:?}"
    );
    // The release by token went out at once (and its reply is on its way back).
    eventually("the late grant is released", async || calls() >= before + 2).await;
    proxy.latency(support::proxy::Direction::ToClient, Duration::ZERO);
    let contender = behind.direct().await;
    let other = Semaphore::new(&contender, "late", 1).expect("valid");
    assert!(other.try_acquire(MINUTE).await.expect("try").is_acquired());
}

/// Redis out of memory (`noeviction`): a new permit is refused (`OutOfMemory`, certainly
/// without effect), also where the step prunes first (its removal of expired permits is a
/// write, which would let the grant past the server's refusal), while a held permit is still
/// renewed (a renewal grows nothing) and released.
#[tokio::test]
async fn out_of_memory_refuses_new_permits_and_renews_held_ones() {
    let server = support::Server::start(support::ServerKind::Redis7, &[]);
    let coordination: Coordination = RedisBackend::standalone(server.url())
        .key_prefix(support::unique_prefix("sem-oom"))
        .connect()
        .await
        .expect("connect")
        .into();
    let held_semaphore = Semaphore::new(&coordination, "held", 2).expect("valid");
    let mut held = acquired(&held_semaphore, MINUTE).await;
    let other = Semaphore::new(&coordination, "new", 2).expect("valid");
    let other_key = physical(&coordination, &semaphore_key(b"new"));
    let other_key = String::from_utf8(other_key).expect("a text key");
    // An empty set, and one with a permit whose expiry (1 ms after the epoch) has passed.
    for expired in [false, true] {
        if expired {
            let _: i64 = server.cmd(&["ZADD", &other_key, "-2", "c", "1", "p:expired"]);
        }
        server.out_of_memory(true);
        let err = other.try_acquire(MINUTE).await.expect_err("out of memory");
        assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
        assert!(err.is_refused() && !err.is_outcome_uncertain(), "{err}");
        let err = held_semaphore
            .try_acquire(MINUTE)
            .await
            .expect_err("out of memory");
        assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
        server.out_of_memory(false);
        let members: Vec<String> = server.cmd(&["ZRANGE", &other_key, "0", "-1"]);
        let expected: &[&str] = if expired { &["c", "p:expired"] } else { &[] };
        assert_eq!(members, expected, "nothing changed");
    }
    server.out_of_memory(true);
    assert!(held.renew(MINUTE).await.expect("renewed out of memory"));
    assert!(
        held.release()
            .await
            .expect("released out of memory")
            .was_held()
    );
    server.out_of_memory(false);
}

/// Four holders with handles of their own take turns at a semaphore of one permit while its
/// slot moves from master to master: latency, not errors, and never two permits at once.
#[tokio::test]
async fn permits_ride_out_a_slot_move() {
    support::turns::while_its_slot_moves(
        support::ServerKind::Redis7,
        "sem-slot-move",
        &semaphore_key(b"moving"),
        permit_turn,
    )
    .await;
}

/// Four holders, each with a handle of its own, take turns at a semaphore of one permit while the
/// Sentinel primary is killed and its replica elected: latency, not errors (the failover
/// within `transient_retry`), and never two permits at once, except where a grant the old primary
/// acknowledged was lost with it, which its release tells.
#[tokio::test]
async fn permits_ride_out_a_sentinel_failover() {
    support::turns::across_a_sentinel_failover(
        support::ServerKind::Redis7,
        "sem-failover",
        permit_turn,
    )
    .await;
}

/// One holder's turn at the semaphore `moving` of one permit: see
/// [`support::turns::exclusive_turns`].
async fn permit_turn(
    coordination: Coordination,
    occupancy: Arc<support::turns::Occupancy>,
) -> Result<(), String> {
    let semaphore = Semaphore::new(&coordination, "moving", 1).expect("valid");
    let mut permit = semaphore
        .acquire(Duration::from_secs(2))
        .await
        .map_err(|err| format!("acquire: {err}"))?;
    let stay = occupancy.stay().await;
    let released = permit.release().await;
    occupancy.released(stay, released)
}

scenario!(a_managed_permit_is_taken_now_or_waited_for);

/// `ManagedPermit::try_acquire` takes a free permit and answers `None` when every one is
/// held; `ManagedPermit::acquire` waits until one frees, each kept with the options' lease.
async fn a_managed_permit_is_taken_now_or_waited_for(target: Target) {
    use leasehold::coordination::ManagedOptions;
    use leasehold::coordination::semaphore::ManagedPermit;
    let coordination = target.coordination("sem-managed").await;
    let semaphore = Semaphore::new(&coordination, "managed", 1).expect("valid");
    let options = ManagedOptions::new().lease(Duration::from_secs(10));
    let first = ManagedPermit::try_acquire(&semaphore, &options)
        .await
        .expect("try")
        .expect("free");
    assert!(
        ManagedPermit::try_acquire(&semaphore, &options)
            .await
            .expect("try")
            .is_none(),
        "the one permit is held"
    );
    let waiting = tokio::spawn({
        let semaphore = semaphore.clone();
        async move { ManagedPermit::acquire(&semaphore, &options).await }
    });
    assert_eq!(first.release().await.expect("release"), Release::Released);
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken once the permit frees")
        .expect("task")
        .expect("acquired");
    assert!(!second.is_lost());
    assert_eq!(second.release().await.expect("release"), Release::Released);
}

// ---------------------------------------------------------------------------------------------
// The rules every self-renewing holding keeps (`support::holding`), for a permit of a
// semaphore of one.

struct OnePermit;

impl support::holding::Held for OnePermit {
    const WHAT: &'static str = "permit";
    type Kind = Semaphore;

    async fn try_acquire(
        coordination: &Coordination,
        lease: Duration,
    ) -> leasehold::Result<Attempt<SemaphorePermit>> {
        let semaphore = Semaphore::new(coordination, "resource", 1).expect("valid");
        semaphore.try_acquire(lease).await
    }

    fn by_owner(
        coordination: &Coordination,
        owner: leasehold::coordination::OwnerToken,
    ) -> leasehold::coordination::ByOwner {
        Semaphore::new(coordination, "resource", 1)
            .expect("valid")
            .by_owner(owner)
    }
}

holding_rules!(OnePermit);

scenario!(a_detached_keyed_permit_goes_on_by_its_owner_token);

/// A keyed permit's plain handle detached: another handle finds it by its client key and
/// owner token, verifies, renews and releases it in both its sets, and the slots are free
/// again; a permit carries no fencing token.
async fn a_detached_keyed_permit_goes_on_by_its_owner_token(target: Target) {
    let coordination = target.coordination("keyed-detached").await;
    let capacity = Capacity::per_key(1).and_global(1);
    let keyed = KeyedSemaphore::new(&coordination, "exports", capacity).expect("valid");
    let permit = keyed
        .try_acquire(b"alice", MINUTE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let detached = permit.detach().await.expect("held");
    assert_eq!(detached.fencing_token(), None);
    let other = KeyedSemaphore::new(
        &target.handles(&coordination, 1).await[0],
        "exports",
        capacity,
    )
    .expect("valid");
    assert_eq!(
        other.held(b"alice").await.expect("held"),
        (Some(1), Some(1))
    );
    let owner = other.by_owner(b"alice", detached.owner_token().clone());
    assert!(owner.verify().await.expect("verify"));
    assert!(owner.renew(2 * MINUTE).await.expect("renew"));
    // Another key's owner token finds nothing under alice's.
    let stranger = other.by_owner(b"bob", detached.owner_token().clone());
    assert!(!stranger.verify().await.expect("verify"));
    assert_eq!(owner.release().await.expect("release"), Release::Released);
    assert_eq!(
        other.held(b"alice").await.expect("held"),
        (Some(0), Some(0))
    );
    assert!(
        other
            .try_acquire(b"bob", MINUTE)
            .await
            .expect("try")
            .acquired()
            .is_some(),
        "the global slot is free again"
    );
}
