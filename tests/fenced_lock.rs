//! Fenced locks against every server kind, the cluster and the memory backend, and their
//! failure rules against a private server that is made to stall (`CLIENT PAUSE`).

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::backend::key_slot;
use leasehold::backend::memory::MemoryBackend;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::Attempt;
use leasehold::coordination::lock::{FencedLease, FencedLock, Release};
use leasehold::coordination::ownership::abandoned_releases;
use leasehold::coordination::rw_lease::ReadWriteLock;
use leasehold::coordination::semaphore::{Capacity, KeyedSemaphore, Semaphore};
use leasehold::{Coordination, ErrorKind};
use support::proxy::Direction;
use support::target::{Target, scenario};
use support::{Server, ServerKind, eventually, unique_prefix};

const MINUTE: Duration = Duration::from_secs(60);
/// 2^53: the first integer after it is the first a double cannot hold.
const TWO_POW_53: u64 = 1 << 53;

async fn acquired(lock: &FencedLock, lease: Duration) -> FencedLease {
    lock.try_acquire(lease)
        .await
        .expect("try_acquire")
        .acquired()
        .expect("the lock is free")
}

/// How long the holder's lease has left, as a contender sees it; the lock must be held.
async fn contender_wait(lock: &FencedLock) -> Option<Duration> {
    match lock.try_acquire(MINUTE).await.expect("try_acquire") {
        Attempt::Busy { retry_after } => retry_after,
        Attempt::Acquired(lease) => panic!("acquired a held lock: {lease:?}"),
    }
}

/// The key a backend stores for a user key.
fn physical(coordination: &Coordination, key: &[u8]) -> Vec<u8> {
    coordination.backend().physical_key(key)
}

fn named_keys(name: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let tagged = [
        b"lock:{",
        name.len().to_string().as_bytes(),
        b":",
        name,
        b"}",
    ]
    .concat();
    (
        [tagged.as_slice(), b":lease"].concat(),
        [tagged.as_slice(), b":fence"].concat(),
    )
}

/// The backend's clock, in microseconds since the epoch: the floor of the next token.
async fn clock_micros(coordination: &Coordination) -> u64 {
    let now = coordination.server_time().await.expect("time");
    u64::try_from(now.as_micros()).expect("before the year 2255")
}

fn is_memory(target: Target) -> bool {
    matches!(target, Target::Memory)
}

fn bulk(text: &str) -> redis::Value {
    redis::Value::BulkString(text.as_bytes().to_vec())
}

// ---------------------------------------------------------------------------------------------

scenario!(acquire_contend_and_release);

async fn acquire_contend_and_release(target: Target) {
    let coordination = target.coordination("contend").await;
    let lock = FencedLock::named(&coordination, "invoice:42");
    let before = clock_micros(&coordination).await;
    let mut lease = acquired(&lock, MINUTE).await;
    // A new counter starts at the server's clock, in microseconds.
    let after = clock_micros(&coordination).await;
    assert!(
        (before..=after).contains(&lease.fencing_token()),
        "{} not within {before}..={after}",
        lease.fencing_token()
    );
    assert_eq!(lease.owner_token().len(), 32);
    assert_eq!(lease.lease(), MINUTE);
    let left = lease.remaining_estimate();
    assert!(
        left <= MINUTE && left > MINUTE - Duration::from_secs(5),
        "{left:?}"
    );
    assert!(!lease.is_released());

    for _ in 0..2 {
        let held = lock.try_acquire(MINUTE).await.expect("try");
        assert!(!held.is_acquired());
        let wait = held.retry_after().expect("the lease expires");
        assert!(
            wait <= MINUTE && wait > MINUTE - Duration::from_secs(5),
            "{wait:?}"
        );
        assert!(held.acquired().is_none());
    }
    // Another replica, over its own connection, contends for the same keys.
    let replica = target.handles(&coordination, 1).await.remove(0);
    let elsewhere = FencedLock::named(&replica, "invoice:42");
    assert!(contender_wait(&elsewhere).await.is_some());
    assert!(lease.verify_still_held().await.expect("verify"));

    assert_eq!(lease.release().await.expect("release"), Release::Released);
    assert!(lease.is_released());
    assert_eq!(lease.remaining_estimate(), Duration::ZERO);
    assert_eq!(
        lease.release().await.expect("again"),
        Release::AlreadyReleased
    );
    assert!(!lease.verify_still_held().await.expect("verify"));
    assert!(!lease.renew(MINUTE).await.expect("renew"));

    let mut next = acquired(&elsewhere, MINUTE).await;
    assert!(next.fencing_token() > lease.fencing_token());
    assert_ne!(next.owner_token(), lease.owner_token());
    assert_eq!(next.release().await.expect("release"), Release::Released);
    // The counter outlives its leases: one key is left.
    assert_eq!(target.count_keys(&coordination), 1);
}

// ---------------------------------------------------------------------------------------------

scenario!(fencing_tokens_strictly_increase);

async fn fencing_tokens_strictly_increase(target: Target) {
    let coordination = target.coordination("tokens").await;
    let named = FencedLock::named(&coordination, "tokens");
    // The same two keys given by hand are the same lock.
    let by_hand =
        FencedLock::new(&coordination, named.lease_key(), named.counter_key()).expect("one slot");
    assert_eq!(by_hand.lease_key(), named.lease_key());
    assert_eq!(by_hand.counter_key(), named.counter_key());

    let mut tokens = Vec::new();
    for round in 0..6 {
        let lock = if round % 2 == 0 { &named } else { &by_hand };
        let mut lease = acquired(lock, MINUTE).await;
        assert!(!named.try_acquire(MINUTE).await.expect("try").is_acquired());
        tokens.push(lease.fencing_token());
        assert_eq!(lease.release().await.expect("release"), Release::Released);
    }
    assert!(tokens.is_sorted_by(|a, b| a < b), "{tokens:?}");

    if !is_memory(target) {
        let counter = physical(&coordination, named.counter_key());
        let lease = physical(&coordination, named.lease_key());
        let last = tokens.last().expect("six tokens").to_string();
        assert_eq!(target.raw(&[b"GET", &counter]), bulk(&last));
        // Kept an hour past the later of its lease's end and the clock passing its token.
        let left = target.pttl(&counter);
        assert!(
            (KEEP_MS..=KEEP_MS + 60_000).contains(&left),
            "the counter expires in {left} ms"
        );
        assert_eq!(target.raw(&[b"EXISTS", &lease]), redis::Value::Int(0));
    }
}

/// How long a fencing counter outlives what its token can matter for, on Redis.
const KEEP_MS: i64 = 3_600_000;

// ---------------------------------------------------------------------------------------------

scenario!(released_names_leave_no_key_without_an_expiry redis);

/// Names a client chooses, each taken and released once (a lock's, a write lease's), leave
/// no key without an expiry: each fencing counter expires within its keeping time, and a
/// counter that had no expiry (kept by an older version) is given one by its next use.
async fn released_names_leave_no_key_without_an_expiry(target: Target) {
    let coordination = target.coordination("released-names").await;
    let mut keys = Vec::new();
    for id in 0..20 {
        let lock = FencedLock::named(&coordination, format!("report:{id}"));
        let mut lease = acquired(&lock, MINUTE).await;
        lease.release().await.expect("release");
        keys.push(physical(&coordination, lock.counter_key()));
        keys.push(physical(&coordination, lock.lease_key()));
        let rw = ReadWriteLock::named(&coordination, format!("report:{id}"));
        let mut writer = rw
            .try_write(MINUTE)
            .await
            .expect("write")
            .acquired()
            .expect("free");
        writer.release().await.expect("release");
        keys.push(physical(&coordination, rw.counter_key()));
        keys.push(physical(&coordination, rw.key()));
    }
    for key in &keys {
        let left = target.pttl(key);
        assert!(
            left == -2 || (0..=KEEP_MS + 60_000).contains(&left),
            "{}: PTTL {left}",
            String::from_utf8_lossy(key)
        );
    }
    // A counter without expiry, as an older version kept it, is given one by its next use.
    let lock = FencedLock::named(&coordination, "legacy");
    let counter = physical(&coordination, lock.counter_key());
    target.raw(&[b"SET", &counter, b"5"]);
    let mut lease = acquired(&lock, MINUTE).await;
    lease.release().await.expect("release");
    assert!(target.pttl(&counter) > KEEP_MS, "{}", target.pttl(&counter));
}

// ---------------------------------------------------------------------------------------------

scenario!(renewal_keeps_the_token_and_extends_the_lease);

async fn renewal_keeps_the_token_and_extends_the_lease(target: Target) {
    let coordination = target.coordination("renew").await;
    let lock = FencedLock::named(&coordination, "renew");
    let mut lease = acquired(&lock, Duration::from_secs(10)).await;
    let token = lease.fencing_token();
    let wait = contender_wait(&lock).await.expect("expiring");
    assert!(wait <= Duration::from_secs(10), "{wait:?}");

    assert!(lease.renew(2 * MINUTE).await.expect("renew"));
    assert_eq!(lease.fencing_token(), token);
    assert_eq!(lease.lease(), 2 * MINUTE);
    let left = lease.remaining_estimate();
    assert!(left <= 2 * MINUTE && left > MINUTE, "{left:?}");
    let wait = contender_wait(&lock).await.expect("expiring");
    assert!(wait <= 2 * MINUTE && wait > MINUTE, "{wait:?}");
    if !is_memory(target) {
        let ttl = target.pttl(&physical(&coordination, lock.lease_key()));
        assert!(ttl > 115_000 && ttl <= 120_000, "{ttl}");
    }

    // An invalid lease is refused before anything is sent: the lease is still held.
    for invalid in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_millis((1 << 40) + 1),
        Duration::MAX,
    ] {
        let err = lease.renew(invalid).await.expect_err("invalid");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(lease.verify_still_held().await.expect("verify"));
    }
    assert_eq!(lease.lease(), 2 * MINUTE);
    assert_eq!(lease.release().await.expect("release"), Release::Released);
}

// ---------------------------------------------------------------------------------------------

scenario!(a_stale_holder_cannot_touch_the_new_lease);

async fn a_stale_holder_cannot_touch_the_new_lease(target: Target) {
    let coordination = target.coordination("stale").await;
    let lock = FencedLock::named(&coordination, "stale");
    let mut stale = acquired(&lock, Duration::from_millis(100)).await;
    let mut fresh = None;
    eventually(
        "the stale lease expires and the lock is taken again",
        async || {
            fresh = lock.try_acquire(MINUTE).await.expect("try").acquired();
            fresh.is_some()
        },
    )
    .await;
    let Some(mut fresh) = fresh else {
        unreachable!("eventually returned")
    };
    assert!(fresh.fencing_token() > stale.fencing_token());

    // The stale handle's estimate ran out before the server's lease did: it answers alone.
    assert_eq!(stale.remaining_estimate(), Duration::ZERO);
    assert!(!stale.verify_still_held().await.expect("verify"));
    assert!(!stale.renew(MINUTE).await.expect("renew"));
    assert_eq!(stale.release().await.expect("release"), Release::NotOwned);
    assert!(stale.is_released());
    drop(stale);
    assert!(fresh.verify_still_held().await.expect("verify"));
    assert!(contender_wait(&lock).await.is_some(), "still held");

    if is_memory(target) {
        assert_eq!(fresh.release().await.expect("release"), Release::Released);
        return;
    }
    // A lease taken away by hand while its estimate lasts: the backend answers. The owner
    // check refuses the renewal, and the release leaves the newer lease alone.
    let lease_key = physical(&coordination, lock.lease_key());
    target.raw(&[b"DEL", &lease_key]);
    let mut newest = acquired(&lock, MINUTE).await;
    assert!(fresh.remaining_estimate() > Duration::ZERO);
    assert!(!fresh.verify_still_held().await.expect("verify"));
    assert!(!fresh.renew(MINUTE).await.expect("renew"));
    assert!(fresh.is_released(), "found lost");
    assert_eq!(fresh.release().await.expect("release"), Release::NotOwned);
    assert_eq!(
        target.raw(&[b"GET", &lease_key]),
        bulk(newest.owner_token())
    );
    assert!(newest.verify_still_held().await.expect("verify"));
    assert_eq!(newest.release().await.expect("release"), Release::Released);
}

// ---------------------------------------------------------------------------------------------

scenario!(the_holder_detects_expiry redis);

async fn the_holder_detects_expiry(target: Target) {
    let coordination = target.coordination("expiry").await;
    let lock = FencedLock::named(&coordination, "expiry");
    let mut lease = acquired(&lock, Duration::from_millis(300)).await;
    let key = physical(&coordination, lock.lease_key());
    assert!(lease.verify_still_held().await.expect("verify"));
    eventually("the lease expires on the server", async || {
        target.pttl(&key) == -2
    })
    .await;
    assert!(!lease.verify_still_held().await.expect("verify"));
    assert_eq!(lease.remaining_estimate(), Duration::ZERO);
    assert!(!lease.renew(MINUTE).await.expect("renew"));
    assert!(!lease.is_released(), "not known to be released");
    assert_eq!(
        lease.release().await.expect("release"),
        Release::AlreadyReleased
    );
    assert!(lease.is_released());
}

#[tokio::test(start_paused = true)]
async fn memory_leases_follow_the_paused_clock() {
    let coordination = Coordination::memory();
    let lock = FencedLock::named(&coordination, "paused");
    let mut first = acquired(&lock, Duration::from_secs(10)).await;
    tokio::time::advance(Duration::from_secs(4)).await;
    assert_eq!(first.remaining_estimate(), Duration::from_secs(6));
    assert_eq!(contender_wait(&lock).await, Some(Duration::from_secs(6)));

    // Renewal counts from the renewal.
    assert!(first.renew(Duration::from_secs(5)).await.expect("renew"));
    assert_eq!(first.lease(), Duration::from_secs(5));
    assert_eq!(first.remaining_estimate(), Duration::from_secs(5));
    tokio::time::advance(Duration::from_secs(5) - Duration::from_millis(1)).await;
    assert!(first.verify_still_held().await.expect("verify"));
    assert_eq!(contender_wait(&lock).await, Some(Duration::from_millis(1)));

    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(first.remaining_estimate(), Duration::ZERO);
    assert!(!first.verify_still_held().await.expect("verify"));
    assert!(!first.renew(MINUTE).await.expect("renew"));
    let mut second = acquired(&lock, Duration::from_secs(10)).await;
    assert!(second.fencing_token() > first.fencing_token());
    assert_eq!(first.release().await.expect("release"), Release::NotOwned);
    assert!(second.verify_still_held().await.expect("verify"));
    assert_eq!(second.release().await.expect("release"), Release::Released);
}

// ---------------------------------------------------------------------------------------------

scenario!(tokens_above_two_pow_53_are_exact redis);

async fn tokens_above_two_pow_53_are_exact(target: Target) {
    let coordination = target.coordination("big").await;
    let lock = FencedLock::named(&coordination, "big");
    let counter = physical(&coordination, lock.counter_key());
    let lease_key = physical(&coordination, lock.lease_key());

    target.raw(&[b"SET", &counter, TWO_POW_53.to_string().as_bytes()]);
    let mut lease = acquired(&lock, MINUTE).await;
    // A double would have rounded 2^53 + 1 to 2^53.
    assert_eq!(lease.fencing_token(), TWO_POW_53 + 1);
    assert_eq!(target.raw(&[b"GET", &counter]), bulk("9007199254740993"));
    assert_eq!(lease.release().await.expect("release"), Release::Released);

    let max = i64::MAX.unsigned_abs();
    target.raw(&[b"SET", &counter, (max - 2).to_string().as_bytes()]);
    let mut lease = acquired(&lock, MINUTE).await;
    assert_eq!(lease.fencing_token(), max - 1);
    assert_eq!(lease.release().await.expect("release"), Release::Released);
    let mut lease = acquired(&lock, MINUTE).await;
    assert_eq!(
        lease.fencing_token(),
        max,
        "the largest token is granted once"
    );
    assert_eq!(lease.release().await.expect("release"), Release::Released);

    let err = lock.try_acquire(MINUTE).await.expect_err("exhausted");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert!(err.to_string().contains("largest fencing token"), "{err}");
    assert_eq!(target.raw(&[b"EXISTS", &lease_key]), redis::Value::Int(0));
    assert_eq!(target.raw(&[b"GET", &counter]), bulk(&max.to_string()));
}

// ---------------------------------------------------------------------------------------------

scenario!(corrupt_state_fails_without_a_lease redis);

async fn corrupt_state_fails_without_a_lease(target: Target) {
    let coordination = target.coordination("corrupt").await;
    let lock = FencedLock::named(&coordination, "corrupt");
    let counter = physical(&coordination, lock.counter_key());
    let lease_key = physical(&coordination, lock.lease_key());
    let dump = |key: &[u8]| target.raw(&[b"DUMP", key]);

    let mut cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (vec![b"SET", &counter, b"-1"], "negative"),
        (vec![b"HSET", &counter, b"f", b"1"], "hash"),
        (vec![b"SET", &counter, b"9223372036854775807"], "largest"),
        (vec![b"SET", &counter, b"9223372036854775808"], "largest"),
        (vec![b"SET", &counter, b"99999999999999999999"], "largest"),
    ];
    for malformed in [
        b"abc".as_slice(),
        b"1.5",
        b" 5",
        b"5 ",
        b"+5",
        b"",
        b"05",
        b"1e3",
    ] {
        cases.push((vec![b"SET", &counter, malformed], "not a decimal integer"));
    }
    for (setup, reason) in cases {
        target.raw(&[b"DEL", &counter]);
        target.raw(&setup);
        let before = (dump(&counter), target.pttl(&counter) > 0);
        let err = lock.try_acquire(MINUTE).await.expect_err("corrupt");
        let shown = String::from_utf8_lossy(setup[2]);
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{shown:?}: {err}");
        assert!(err.to_string().contains(reason), "{shown:?}: {err}");
        assert_eq!(
            target.raw(&[b"EXISTS", &lease_key]),
            redis::Value::Int(0),
            "{shown:?}: no lease"
        );
        assert_eq!(
            (dump(&counter), target.pttl(&counter) > 0),
            before,
            "{shown:?}: the counter is unchanged"
        );
    }

    // A counter at 0 is valid: the next token is the clock's.
    target.raw(&[b"SET", &counter, b"0"]);
    let before = clock_micros(&coordination).await;
    let mut lease = acquired(&lock, MINUTE).await;
    assert!(lease.fencing_token() >= before);
    assert_eq!(lease.release().await.expect("release"), Release::Released);

    // A lease key that is not a string: nothing is created beside it.
    target.raw(&[b"DEL", &counter]);
    target.raw(&[b"HSET", &lease_key, b"f", b"1"]);
    let err = lock.try_acquire(MINUTE).await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert!(err.to_string().contains("lease key holds a hash"), "{err}");
    assert_eq!(target.raw(&[b"EXISTS", &counter]), redis::Value::Int(0));
    assert_eq!(target.raw(&[b"HGET", &lease_key, b"f"]), bulk("1"));
}

// ---------------------------------------------------------------------------------------------

scenario!(cross_slot_pairs_are_refused_before_anything_is_sent);

async fn cross_slot_pairs_are_refused_before_anything_is_sent(target: Target) {
    let coordination = target.coordination("slots").await;
    let lease = b"lease".as_slice();
    let slot = key_slot(&physical(&coordination, lease));
    let counter = (0..)
        .map(|i| format!("fence-{i}").into_bytes())
        .find(|key| key_slot(&physical(&coordination, key)) != slot)
        .expect("another slot");
    let err = FencedLock::new(&coordination, lease, &counter).expect_err("cross slot");
    assert_eq!(err.kind(), ErrorKind::CrossSlot, "{err}");
    let err = FencedLock::new(&coordination, lease, lease).expect_err("same key");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");

    // A prefix that starts with an empty hash tag hashes whole keys, splitting the named
    // pair: the first step refuses it before sending.
    let prefix = format!("{{}}{}", unique_prefix("split"));
    let split: Coordination = if is_memory(target) {
        MemoryBackend::builder()
            .key_prefix(&prefix)
            .build()
            .expect("valid")
            .into()
    } else {
        target
            .redis_builder()
            .key_prefix(&prefix)
            .connect()
            .await
            .expect("connect")
            .into()
    };
    let name = (0..)
        .map(|i| format!("split-{i}"))
        .find(|name| {
            let (lease, counter) = named_keys(name.as_bytes());
            key_slot(&physical(&split, &lease)) != key_slot(&physical(&split, &counter))
        })
        .expect("a split pair");
    let lock = FencedLock::named(&split, &name);
    let err = lock.try_acquire(MINUTE).await.expect_err("cross slot");
    assert_eq!(err.kind(), ErrorKind::CrossSlot, "{err}");
    let err =
        FencedLock::new(&split, lock.lease_key(), lock.counter_key()).expect_err("cross slot");
    assert_eq!(err.kind(), ErrorKind::CrossSlot, "{err}");

    assert_eq!(target.count_keys(&coordination), 0);
    assert_eq!(target.count_keys(&split), 0);
}

// ---------------------------------------------------------------------------------------------

scenario!(long_names_are_stored_as_their_digest);

/// A lock (or semaphore) named from a request, with a 64 KiB name: its keys stay short, two
/// long names are two locks, and a name that looks like a digest is not another's.
async fn long_names_are_stored_as_their_digest(target: Target) {
    let coordination = target.coordination("long-name").await;
    let long = vec![b'n'; 64 * 1024];
    let lock = FencedLock::named(&coordination, &long);
    assert!(lock.lease_key().starts_with(b"lock:{71:sha256:"));
    assert!(lock.lease_key().len() < 100, "{}", lock.lease_key().len());
    let _held = acquired(&lock, MINUTE).await;
    let other = FencedLock::named(&coordination, [long.as_slice(), b"x"].concat());
    let _also = acquired(&other, MINUTE).await;
    let lookalike = String::from_utf8_lossy(&lock.lease_key()[9..80]).into_owned();
    assert!(lookalike.starts_with("sha256:"), "{lookalike}");
    let _third = acquired(&FencedLock::named(&coordination, &lookalike), MINUTE).await;

    let semaphore = Semaphore::new(&coordination, &long, 1).expect("valid");
    let permit = semaphore.try_acquire(MINUTE).await.expect("try");
    assert!(permit.is_acquired());
    let keyed = KeyedSemaphore::new(&coordination, &long, Capacity::per_key(1)).expect("valid");
    let permit = keyed
        .try_acquire(&long, MINUTE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    assert!(
        !keyed
            .try_acquire(&long, MINUTE)
            .await
            .expect("try")
            .is_acquired()
    );
    drop(permit);
    if !is_memory(target) {
        let prefix = physical(&coordination, b"");
        // At most two digests (a keyed semaphore's name and client key) and their framing.
        let longest = target.key_lengths(&coordination).into_iter().max();
        assert!(
            longest.is_some_and(|len| len < prefix.len() + 2 * 71 + 32),
            "{longest:?} bytes"
        );
    }
}

// ---------------------------------------------------------------------------------------------

scenario!(binary_keys);

async fn binary_keys(target: Target) {
    let coordination = target.coordination("binary").await;
    let (lease_key, counter_key) = (
        b"\x00\xff{bin}\nlease".as_slice(),
        b"{bin}\xfe\x00".as_slice(),
    );
    let lock = FencedLock::new(&coordination, lease_key, counter_key).expect("one slot");
    assert_eq!(lock.lease_key(), lease_key);
    let mut lease = acquired(&lock, MINUTE).await;
    assert!(contender_wait(&lock).await.is_some());
    assert!(lease.verify_still_held().await.expect("verify"));
    if !is_memory(target) {
        let stored = target.raw(&[b"GET", &physical(&coordination, lease_key)]);
        assert_eq!(stored, bulk(lease.owner_token()));
        let counter = target.raw(&[b"GET", &physical(&coordination, counter_key)]);
        assert_eq!(counter, bulk(&lease.fencing_token().to_string()));
    }
    assert_eq!(lease.release().await.expect("release"), Release::Released);

    let named = FencedLock::named(&coordination, b"\xff\x00}{");
    assert_eq!(named.lease_key(), named_keys(b"\xff\x00}{").0);
    let mut lease = acquired(&named, MINUTE).await;
    assert!(lease.verify_still_held().await.expect("verify"));
    assert_eq!(lease.release().await.expect("release"), Release::Released);
    assert_eq!(target.count_keys(&coordination), 2, "the two counters");
}

// ---------------------------------------------------------------------------------------------

scenario!(named_pairs_share_a_slot);

async fn named_pairs_share_a_slot(target: Target) {
    let coordination = target.coordination("named").await;
    // Names with braces of their own cannot split the pair.
    for name in [b"invoice:42".as_slice(), b"a}b{c", b"{x}", b"}", b""] {
        let lock = FencedLock::named(&coordination, name);
        let (lease_key, counter_key) = named_keys(name);
        assert_eq!(lock.lease_key(), lease_key);
        assert_eq!(lock.counter_key(), counter_key);
        let (lease_key, counter_key) = (
            physical(&coordination, &lease_key),
            physical(&coordination, &counter_key),
        );
        assert_eq!(key_slot(&lease_key), key_slot(&counter_key));
        if matches!(target, Target::Cluster) {
            let lease_slot: i64 = target.query(&[b"CLUSTER", b"KEYSLOT", &lease_key]);
            let counter_slot: i64 = target.query(&[b"CLUSTER", b"KEYSLOT", &counter_key]);
            assert_eq!(lease_slot, counter_slot);
            assert_eq!(lease_slot, i64::from(key_slot(&lease_key)));
        }
        // A cluster refuses a script over two slots: this succeeding says they are one.
        let mut lease = acquired(&lock, MINUTE).await;
        if !is_memory(target) {
            assert_eq!(target.raw(&[b"EXISTS", &lease_key]), redis::Value::Int(1));
            assert_eq!(target.raw(&[b"EXISTS", &counter_key]), redis::Value::Int(1));
        }
        assert_eq!(lease.release().await.expect("release"), Release::Released);
    }
}

// ---------------------------------------------------------------------------------------------

scenario!(concurrent_holders_never_overlap);

async fn concurrent_holders_never_overlap(target: Target) {
    const TASKS: usize = 8;
    const ATTEMPTS: usize = 20;
    let first = target.coordination("concurrent").await;
    let handles = target.handles(&first, TASKS).await;
    let holding = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    // Pushed while the lock is held, so in grant order.
    let granted = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = handles
        .into_iter()
        .map(|coordination| {
            let (holding, most, granted) = (
                Arc::clone(&holding),
                Arc::clone(&most),
                Arc::clone(&granted),
            );
            tokio::spawn(async move {
                let lock = FencedLock::named(&coordination, "hot");
                for _ in 0..ATTEMPTS {
                    let attempt = lock.try_acquire(MINUTE).await.expect("try");
                    let Some(mut lease) = attempt.acquired() else {
                        tokio::task::yield_now().await;
                        continue;
                    };
                    // Counted from the grant's answer until before the release is sent:
                    // within the time the backend holds the lease.
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    granted
                        .lock()
                        .expect("not poisoned")
                        .push(lease.fencing_token());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    holding.fetch_sub(1, Ordering::SeqCst);
                    assert_eq!(lease.release().await.expect("release"), Release::Released);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(most.load(Ordering::SeqCst), 1, "held by two at once");
    let granted = granted.lock().expect("not poisoned").clone();
    assert!(granted.len() >= 2, "only {} grants", granted.len());
    // Unique and increasing in grant order.
    assert!(granted.is_sorted_by(|a, b| a < b), "{granted:?}");
    assert_eq!(target.count_keys(&first), 1, "the counter alone");
}

// ---------------------------------------------------------------------------------------------

scenario!(a_dropped_lease_is_released_in_the_background);

async fn a_dropped_lease_is_released_in_the_background(target: Target) {
    let coordination = target.coordination("drop").await;
    let lock = FencedLock::named(&coordination, "drop");
    let abandoned =
        abandoned_releases().of(leasehold::coordination::ownership::Primitive::FencedLease);
    let mut last = 0;
    for round in 1..=2u64 {
        if round == 1 {
            drop(acquired(&lock, MINUTE).await);
        } else {
            let attempt = lock.try_acquire(MINUTE).await.expect("try");
            assert!(attempt.is_acquired());
            drop(attempt);
        }
        // A minute's lease: only the background release can free the lock this soon.
        let mut next = None;
        eventually("the dropped lease is released", async || {
            next = lock.try_acquire(MINUTE).await.expect("try").acquired();
            next.is_some()
        })
        .await;
        let Some(mut next) = next else {
            unreachable!("eventually returned")
        };
        // Above the dropped lease's, which was above the last round's.
        assert!(next.fencing_token() > last);
        last = next.fencing_token();
        assert_eq!(next.release().await.expect("release"), Release::Released);
    }
    assert_eq!(
        abandoned_releases().of(leasehold::coordination::ownership::Primitive::FencedLease),
        abandoned
    );
}

// ---------------------------------------------------------------------------------------------

/// An acquisition dropped after its request was sent (held by the network until then): the
/// request runs once delivered and takes the lock, and the release spawned at the drop
/// frees it once the acquisition's deadline has passed, long before its minute.
#[tokio::test]
async fn a_cancelled_acquisition_is_released() {
    let behind = support::Behind::start("cancel");
    let coordination = behind.through_proxy(|builder| builder).await;
    let direct = behind.direct().await;
    let lock = FencedLock::named(&coordination, "cancel");
    // Connected, its script loaded and the clock read: the next acquisition is one request.
    let mut warm = acquired(&lock, MINUTE).await;
    let warm_token = warm.fencing_token();
    warm.release().await.expect("release");
    let counter = String::from_utf8(physical(&direct, lock.counter_key())).expect("text");
    let sent = behind.proxy.sent();
    behind.proxy.stall();
    let attempt = tokio::spawn(async move { lock.try_acquire(MINUTE).await.map(|_| ()) });
    behind
        .proxy
        .until_sent(sent, "the acquisition is sent")
        .await;
    attempt.abort();
    assert!(attempt.await.is_err(), "dropped before its answer");
    behind.proxy.pass();
    // The request ran: the counter moved past the warm-up's token.
    eventually("the cancelled acquisition ran", async || {
        let token: Option<u64> = behind.server.cmd(&["GET", &counter]);
        token.is_some_and(|token| token > warm_token)
    })
    .await;
    // And the lock is free well before its minute is up.
    let other = FencedLock::named(&direct, "cancel");
    let mut lease = None;
    eventually("the cancelled acquisition is released", async || {
        lease = other.try_acquire(MINUTE).await.expect("try").acquired();
        lease.is_some()
    })
    .await;
    let Some(mut lease) = lease else {
        unreachable!("eventually returned")
    };
    assert!(lease.fencing_token() > warm_token);
    assert_eq!(lease.release().await.expect("release"), Release::Released);
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn invalid_arguments_are_refused_before_anything_is_sent() {
    let backend = MemoryBackend::new();
    let coordination = Coordination::from(backend.clone());
    let lock = FencedLock::named(&coordination, "invalid");
    for invalid in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_millis((1 << 40) + 1),
        Duration::MAX,
    ] {
        let err = lock.try_acquire(invalid).await.expect_err("invalid");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{invalid:?}");
    }
    assert!(backend.is_empty());
    // Sub-millisecond parts are dropped; the longest lease is accepted.
    let mut lease = acquired(&lock, Duration::from_micros(1_500)).await;
    assert_eq!(lease.lease(), Duration::from_millis(1));
    assert!(
        lease
            .renew(Duration::from_millis(1 << 40))
            .await
            .expect("renew")
    );
    assert_eq!(lease.release().await.expect("release"), Release::Released);
    let debug = format!("{lock:?} {lease:?}");
    assert!(debug.contains("lock:{7:invalid}:lease"), "{debug}");
}

// ---------------------------------------------------------------------------------------------
// Failure rules, on a private server that stalls every client (see `support::stalling`).

/// The stalling server, with a lock whose scripts it has cached.
struct Stalling {
    on: support::stalling::Stalling,
    lock: FencedLock,
    /// The same lock through a handle whose response timeout outlasts the pauses.
    patient: FencedLock,
    /// The fencing token of the warm-up acquisition.
    warm_token: u64,
}

impl std::ops::Deref for Stalling {
    type Target = support::stalling::Stalling;

    fn deref(&self) -> &Self::Target {
        &self.on
    }
}

impl Stalling {
    async fn start() -> Stalling {
        let on = support::stalling::Stalling::start().await;
        let lock = FencedLock::named(&on.coordination, "jobs");
        let mut warm = acquired(&lock, MINUTE).await;
        assert!(warm.verify_still_held().await.expect("verify"));
        assert!(warm.renew(MINUTE).await.expect("renew"));
        assert_eq!(warm.release().await.expect("release"), Release::Released);
        Stalling {
            lock,
            patient: FencedLock::named(&on.patient().await, "jobs"),
            warm_token: warm.fencing_token(),
            on,
        }
    }

    /// The writes a grant makes, counted by the server: two per grant (the counter, by
    /// `INCR` or `SET`, and the lease, by `SET`); renewals and releases make none of these.
    /// Waits for a pause to end.
    fn grant_writes(&self) -> u64 {
        self.calls("incr") + self.calls("set")
    }

    /// The lock's counter: the last token handed out. Waits for a pause to end.
    fn counter(&self) -> u64 {
        let key = physical(&self.coordination, self.lock.counter_key());
        let value: String = redis::cmd("GET")
            .arg(key)
            .query(&mut self.server.connection())
            .expect("GET");
        value.parse().expect("a counter")
    }

    /// Whether the lease key exists; waits for a pause to end.
    fn lease_exists(&self) -> bool {
        let key = physical(&self.coordination, self.lock.lease_key());
        let exists: i64 = redis::cmd("EXISTS")
            .arg(key)
            .query(&mut self.server.connection())
            .expect("EXISTS");
        exists == 1
    }
}

/// An acquisition whose answer does not come within the response timeout is sent again
/// (its token and deadline unchanged) while `transient_retry` lasts: once the server answers,
/// the first delivery grants and the second finds its own token: granted once, one fencing
/// token taken.
#[tokio::test]
async fn an_acquisition_without_an_answer_is_sent_again_and_granted_once() {
    let stalling = Stalling::start().await;
    let abandoned =
        abandoned_releases().of(leasehold::coordination::ownership::Primitive::FencedLease);
    let writes = stalling.grant_writes();
    stalling.server.pause_clients(400);
    let mut lease = acquired(&stalling.lock, MINUTE).await;
    assert!(lease.fencing_token() > stalling.warm_token);
    assert_eq!(stalling.grant_writes(), writes + 2, "granted once");
    assert_eq!(stalling.counter(), lease.fencing_token(), "one token taken");
    assert_eq!(lease.release().await.expect("release"), Release::Released);
    assert_eq!(
        abandoned_releases().of(leasehold::coordination::ownership::Primitive::FencedLease),
        abandoned
    );
}

/// An acquisition whose grant's answer is held back past the response timeout is sent again
/// and finds its own token: granted, with an estimate counted from the first delivery's
/// send, since the grant's expiry counts from when that delivery ran; never more than the
/// lease has left on the server.
#[tokio::test]
async fn a_grant_found_again_is_estimated_from_the_first_delivery() {
    let behind = support::Behind::start("estimate-first");
    let direct = behind.direct().await;
    let through = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(200)))
        .await;
    let lock = FencedLock::named(&through, "estimate");
    let mut warm = acquired(&lock, MINUTE).await;
    assert_eq!(warm.release().await.expect("release"), Release::Released);
    let scripts = || {
        support::target::command_calls(&behind.server, "evalsha")
            + support::target::command_calls(&behind.server, "eval")
    };

    let before = scripts();
    behind.proxy.stall_direction(Direction::ToClient);
    let acquiring = tokio::spawn(async move { lock.try_acquire(Duration::from_secs(3)).await });
    // The first delivery grants; a second, sent after the response timeout, finds its token.
    eventually("sent again", async || scripts() >= before + 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    behind.proxy.pass();
    let lease = tokio::time::timeout(Duration::from_secs(5), acquiring)
        .await
        .expect("bounded")
        .expect("task")
        .expect("granted on a resend")
        .acquired()
        .expect("its own grant");
    let key = physical(&direct, FencedLock::named(&direct, "estimate").lease_key());
    let key = String::from_utf8(key).expect("an ASCII key");
    let left_ms: i64 = behind.server.cmd(&["PTTL", &key]);
    let estimate = lease.remaining_estimate();
    assert!(
        estimate <= Duration::from_millis(u64::try_from(left_ms).expect("held") + 2),
        "estimate {estimate:?}, the server's {left_ms} ms"
    );
}

/// An acquisition that gets no answer for longer than `transient_retry` is uncertain: once
/// the server answers, every delivery runs (the first grants, the others find its token),
/// then the release of its token that the failure spawned. Nothing is granted twice.
#[tokio::test]
async fn an_acquisition_without_an_answer_for_the_bound_is_released() {
    let stalling = Stalling::start().await;
    let abandoned =
        abandoned_releases().of(leasehold::coordination::ownership::Primitive::FencedLease);
    let (writes, del) = (stalling.grant_writes(), stalling.calls("del"));
    stalling.server.pause_clients(1500);
    let err = stalling
        .lock
        .try_acquire(MINUTE)
        .await
        .expect_err("no answer in time");
    assert!(err.is_outcome_uncertain(), "{err}");
    eventually("the stalled grant is released", async || {
        !stalling.lease_exists()
    })
    .await;
    assert_eq!(stalling.grant_writes(), writes + 2, "granted once");
    assert!(stalling.calls("del") > del, "its token was released");
    // The unanswered grant took a token: the next one is above it.
    let lost = stalling.counter();
    assert!(lost > stalling.warm_token);
    let mut next = acquired(&stalling.lock, MINUTE).await;
    assert!(next.fencing_token() > lost);
    assert_eq!(next.release().await.expect("release"), Release::Released);
    assert_eq!(
        abandoned_releases().of(leasehold::coordination::ownership::Primitive::FencedLease),
        abandoned
    );
}

#[tokio::test]
async fn a_grant_after_its_lease_ran_out_is_not_returned() {
    let stalling = Stalling::start().await;
    let (writes, del) = (stalling.grant_writes(), stalling.calls("del"));
    stalling.server.pause_clients(400);
    // The answer comes after the pause, later than the lease asked for.
    let attempt = stalling
        .patient
        .try_acquire(Duration::from_millis(250))
        .await
        .expect("answered");
    assert!(
        matches!(attempt, Attempt::Busy { retry_after: None }),
        "{attempt:?}"
    );
    assert_eq!(stalling.grant_writes(), writes + 2, "the grant ran");
    eventually("the late grant is released", async || {
        stalling.calls("del") > del
    })
    .await;
    assert!(!stalling.lease_exists());
    let lost = stalling.counter();
    let mut next = acquired(&stalling.lock, MINUTE).await;
    assert!(next.fencing_token() > lost);
    assert_eq!(next.release().await.expect("release"), Release::Released);
}

// ---------------------------------------------------------------------------------------------

/// How many times the server ran `command`, from `INFO commandstats`.
fn calls(server: &Server, command: &str) -> u64 {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

/// Read-only steps go as `EVALSHA_RO` (a replica may answer them, and the server refuses a
/// write they would try); a user whose ACL denies it is answered through `EVALSHA`, and the
/// handle stops asking.
#[tokio::test]
async fn read_only_steps_go_as_evalsha_ro_unless_the_acl_denies_it() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let () = server.cmd(&[
        "ACL",
        "SETUSER",
        "strict",
        "on",
        ">secret",
        "~*",
        "&*",
        "+@all",
        "-evalsha_ro",
        "-eval_ro",
    ]);
    for (user, read_only) in [("default", true), ("strict:secret", false)] {
        let () = server.cmd(&["CONFIG", "RESETSTAT"]);
        let url = match user {
            "default" => format!("redis://127.0.0.1:{}", server.port()),
            credentials => format!("redis://{credentials}@127.0.0.1:{}", server.port()),
        };
        let coordination: Coordination = RedisBackend::standalone(url)
            .key_prefix(unique_prefix("ro"))
            .connect()
            .await
            .expect("connect")
            .into();
        let lock = FencedLock::named(&coordination, "ro");
        let mut lease = acquired(&lock, MINUTE).await;
        for _ in 0..2 {
            assert!(lease.verify_still_held().await.expect("verify"), "{user}");
        }
        assert_eq!(lease.release().await.expect("release"), Release::Released);
        let ro = calls(&server, "evalsha_ro") + calls(&server, "eval_ro");
        // A first EVALSHA_RO may meet NOSCRIPT, then EVAL_RO: every call counts.
        if read_only {
            assert!(ro >= 2, "both verifications as EVALSHA_RO: {ro} calls");
        } else {
            // Refused by the ACL (a rejected call, never run), then sent as EVALSHA.
            assert_eq!(ro, 0, "{user}");
            let plain = calls(&server, "evalsha") + calls(&server, "eval");
            assert!(
                plain >= 4,
                "acquire, two verifications, release: {plain} calls"
            );
        }
    }
}

/// Four holders, each with a handle of its own (as four processes), loop on one lock while
/// its slot moves from master to master the way a reshard moves it, its two keys migrated one
/// at a time: the steps that meet the slot half-moved (`ASK`, `TRYAGAIN`) cost latency, not
/// errors, and no two holders ever hold it at once. A private cluster: its slot map changes.
#[tokio::test]
async fn waiting_acquisitions_ride_out_a_slot_move() {
    let (lease_key, _) = named_keys(b"moving");
    support::turns::while_its_slot_moves(ServerKind::Redis7, "slot-move", &lease_key, lock_turn)
        .await;
}

/// An acquisition delivered twice answers the counter's value as its token, checked as a
/// new acquisition checks it: the largest token is granted again, and a counter that is not
/// a decimal integer is corrupt state (the script run as the crate sends it,
/// with the held lease's owner token).
#[tokio::test]
async fn a_duplicate_acquisition_checks_the_counter() {
    let server = support::shared(ServerKind::Redis7);
    let backend = RedisBackend::standalone(server.url())
        .key_prefix(unique_prefix("dup-counter"))
        .connect()
        .await
        .expect("connect");
    let coordination = Coordination::from(backend.clone());
    let lock = FencedLock::named(&coordination, "dup");
    let lease = acquired(&lock, MINUTE).await;
    let acquire = leasehold::backend::redis::Script::new(
        "fenced_lock_acquire",
        concat!(
            include_str!("../src/backend/steps/key_kinds.lua"),
            include_str!("../src/backend/steps/clock.lua"),
            include_str!("../src/backend/steps/fenced_lock/fenced_lock.lua"),
            include_str!("../src/backend/steps/fencing_counter.lua"),
            include_str!("../src/backend/steps/fenced_lock/fenced_lock_acquire.lua")
        ),
    );
    // The counter as a string with an expiry (0: none), or as a hash.
    let put = leasehold::backend::redis::Script::new(
        "put",
        "redis.call('DEL', KEYS[1]) \
         if ARGV[1] == 'hash' then return redis.call('HSET', KEYS[1], 'f', 'v') end \
         redis.call('SET', KEYS[1], ARGV[1]) \
         if ARGV[2] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end \
         return 1",
    );
    let keys = [lock.lease_key(), lock.counter_key()];
    for (counter, expiry_ms, answer) in [
        ("9223372036854775807", 0, "acquired"),
        ("12x", 0, "corrupt"),
        ("0", 0, "corrupt"),
        ("5", 0, "acquired"),
        // An expiry is a counter's own: it is kept while its tokens matter.
        ("5", 60_000, "acquired"),
        ("hash", 0, "corrupt"),
    ] {
        let _: i64 = backend
            .eval(&put, &[lock.counter_key()], (counter, expiry_ms))
            .await
            .expect("put");
        let reply: Vec<String> = backend
            .eval(&acquire, &keys, (lease.owner_token(), 60_000, 0))
            .await
            .expect("eval");
        let expected: &[&str] = if answer == "acquired" {
            &["acquired", counter]
        } else {
            &["corrupt", "2"]
        };
        assert_eq!(
            &reply[..expected.len().min(reply.len())],
            expected,
            "counter {counter} (expiry {expiry_ms} ms): {reply:?}"
        );
    }
}

/// Four holders, each with a handle of its own, take turns at one lock while the
/// Sentinel primary is killed and its replica elected: latency, not errors (the failover
/// within `transient_retry`), and no two holders at once, except where a grant the old primary
/// acknowledged was lost with it, which its release tells.
#[tokio::test]
async fn waiting_acquisitions_ride_out_a_sentinel_failover() {
    support::turns::across_a_sentinel_failover(ServerKind::Redis7, "lock-failover", lock_turn)
        .await;
}

/// One holder's turn at the lock `moving`: see [`support::turns::exclusive_turns`].
async fn lock_turn(
    coordination: Coordination,
    occupancy: Arc<support::turns::Occupancy>,
) -> Result<(), String> {
    // A short lease: a waiter whose invalidation went to the node the slot left (or to the
    // old primary) wakes at the holder's time left at the latest.
    let lock = FencedLock::named(&coordination, "moving");
    let mut lease = lock
        .acquire(Duration::from_secs(2))
        .await
        .map_err(|err| format!("acquire: {err}"))?;
    let stay = occupancy.stay().await;
    let released = lease.release().await;
    occupancy.released(stay, released)
}

// ---------------------------------------------------------------------------------------------
// The rules every self-renewing holding keeps (`support::holding`), for the lock's lease.

struct LockLease;

impl support::holding::Held for LockLease {
    const FENCED: bool = true;
    const EXCLUSIVE: bool = true;
    const WHAT: &'static str = "lease";
    type Kind = FencedLock;

    async fn try_acquire(
        coordination: &Coordination,
        lease: Duration,
    ) -> leasehold::Result<Attempt<FencedLease>> {
        FencedLock::named(coordination, "resource")
            .try_acquire(lease)
            .await
    }

    fn by_owner(
        coordination: &Coordination,
        owner: leasehold::coordination::OwnerToken,
    ) -> leasehold::coordination::ByOwner {
        FencedLock::named(coordination, "resource").by_owner(owner)
    }
}

holding_rules!(LockLease);

// ---------------------------------------------------------------------------------------------

/// A server restarted without persistence loses the counter, and so does `FLUSHALL`: the next
/// token starts again from the server's clock, above every token handed out before it. Twenty
/// restarts and a `FLUSHALL` in the middle of a run of acquisitions, one of them while a
/// lease is held (whose holder must then be refused at the resource): every token is greater
/// than every earlier one.
#[tokio::test]
async fn tokens_never_go_back_when_the_server_loses_its_counter() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let coordination: Coordination = RedisBackend::standalone(server.unix_url())
        .key_prefix("")
        .connect()
        .await
        .expect("connect")
        .into();
    let lock = FencedLock::named(&coordination, "restarts");
    // After a restart the handle reconnects: the first attempt may meet the closed connection.
    let next = async || {
        let mut lease = None;
        eventually("the lock is acquired", async || {
            lease = lock
                .try_acquire(MINUTE)
                .await
                .ok()
                .and_then(Attempt::acquired);
            lease.is_some()
        })
        .await;
        lease.expect("eventually acquired")
    };
    let mut tokens = Vec::new();
    for round in 0..=21 {
        for _ in 0..3 {
            let mut lease = next().await;
            tokens.push(lease.fencing_token());
            assert_eq!(lease.release().await.expect("release"), Release::Released);
        }
        match round {
            // A holder across the loss: the next holder's token is above its.
            7 => {
                let held = next().await;
                tokens.push(held.fencing_token());
                server.restart();
                let mut after = next().await;
                assert!(after.fencing_token() > held.fencing_token());
                tokens.push(after.fencing_token());
                assert_eq!(after.release().await.expect("release"), Release::Released);
                drop(held);
            }
            11 => {
                let () = server.cmd(&["FLUSHALL"]);
            }
            21 => {}
            _ => server.restart(),
        }
    }
    assert_eq!(tokens.len(), 22 * 3 + 2);
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens went back: {tokens:?}"
    );
}

/// A release of a short lease: released, or lapsed already on a slow machine (its 300 ms
/// over); never an error, never another holder's.
fn released_or_lapsed(release: leasehold::Result<Release>) {
    let release = release.expect("release");
    assert!(
        matches!(release, Release::Released | Release::AlreadyReleased),
        "{release:?}"
    );
}

/// Twenty Sentinel failovers, each after the primary took acquisitions with its replica's
/// link cut (and kept cut), then was killed with SIGKILL: every new primary's counter is
/// behind the last tokens, as after a failover that lost its tail. Every token is still
/// greater than every earlier one.
#[tokio::test]
async fn tokens_never_go_back_across_sentinel_failovers_that_lose_writes() {
    const FAILOVERS: usize = 20;
    let setup = Arc::new(support::SentinelSetup::start(support::ServerKind::Redis7));
    let handle = setup.handles("fence-failover", 1).await.remove(0);
    let lock = FencedLock::named(&handle, "fence");
    // Short leases: a release lost with a primary leaves a lease that lapses soon.
    let lease = Duration::from_millis(300);
    let mut tokens = Vec::new();
    let mut lost = 0;
    for _ in 0..FAILOVERS {
        for _ in 0..2 {
            let mut held = lock.acquire(lease).await.expect("acquire");
            tokens.push(held.fencing_token());
            released_or_lapsed(held.release().await);
        }
        // From here the primary's writes reach no replica: its link cut, and its attempts to
        // link again refused (a password the primary does not have) until it is promoted.
        let primary = setup.current_master();
        let replica = setup
            .data_nodes()
            .into_iter()
            .find(|node| node.port() != primary.port())
            .expect("a replica");
        let () = replica.cmd(&["CONFIG", "SET", "masterauth", "not-the-primary's"]);
        let cut: i64 = primary.cmd(&["CLIENT", "KILL", "TYPE", "replica"]);
        assert_eq!(cut, 1, "the replica's link");
        let mut alone = lock.acquire(lease).await.expect("acquire");
        tokens.push(alone.fencing_token());
        let counter: Option<String> = primary.cmd(&[
            "GET",
            std::str::from_utf8(&handle.backend().physical_key(lock.counter_key()))
                .expect("a text key"),
        ]);
        released_or_lapsed(alone.release().await);
        let port = primary.port();
        // Dead, the primary can give the replica nothing more: its password is mended at
        // once, so that whatever Sentinel makes of it (promoted, or left a replica of the
        // primary restarted below) it can link.
        primary.stop();
        let () = replica.cmd(&["CONFIG", "SET", "masterauth", ""]);
        setup.kill_primary().await;
        // The node that was killed comes back as a replica of the new primary.
        let restarting = setup.clone();
        tokio::task::spawn_blocking(move || {
            let node = restarting
                .data_nodes()
                .into_iter()
                .find(|node| node.port() == port)
                .expect("a data node");
            node.start_again();
            restarting.wait_healthy();
        })
        .await
        .expect("the setup heals");
        let now: Option<String> = setup.current_master().cmd(&[
            "GET",
            std::str::from_utf8(&handle.backend().physical_key(lock.counter_key()))
                .expect("a text key"),
        ]);
        if now != counter {
            lost += 1;
        }
    }
    let mut last = lock.acquire(lease).await.expect("acquire");
    tokens.push(last.fencing_token());
    released_or_lapsed(last.release().await);
    // Each failover lost the write (the replica could not link again before it was
    // promoted); a run where none did would not have tested what it is named for.
    assert_eq!(
        lost, FAILOVERS,
        "failovers that lost the counter's last write"
    );
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens went back: {tokens:?}"
    );
}

/// A fenced lock on a server that keeps nothing across a restart (no RDB snapshots, no AOF)
/// is told of once per handle, at its first acquisition, in the background; a server with
/// an AOF is not.
#[tokio::test(flavor = "current_thread")]
async fn a_server_that_keeps_nothing_across_a_restart_is_told_of_once() {
    let logs = support::logs::capture();
    let warned = || logs.count("WARN", "keeps nothing across a restart");
    for (args, warnings) in [(&[][..], 1), (&["--appendonly", "yes"][..], 0)] {
        let server = Server::start(ServerKind::Redis7, args);
        let coordination: Coordination = RedisBackend::standalone(server.unix_url())
            .key_prefix("")
            .connect()
            .await
            .expect("connect")
            .into();
        let before = warned();
        let lock = FencedLock::named(&coordination, "persistence");
        for _ in 0..3 {
            let mut lease = acquired(&lock, MINUTE).await;
            assert_eq!(lease.release().await.expect("release"), Release::Released);
        }
        // Asked once: persistence in two settings, eviction in one (no `maxmemory`, so
        // its policy is not asked).
        eventually("the settings were read", async || {
            support::target::command_calls(&server, "config|get") == 3
        })
        .await;
        assert_eq!(warned() - before, warnings, "{args:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Durable fencing

/// A primary and its replica, in sync, both started with `args`.
fn primary_and_replica(kind: ServerKind, args: &[&str]) -> (Server, Server) {
    let sync = ["--repl-diskless-sync-delay", "0"];
    let primary = Server::start(kind, &[args, &sync[..]].concat());
    let port = primary.port().to_string();
    let replica = Server::start(
        kind,
        &[&["--replicaof", "127.0.0.1", &port][..], args, &sync[..]].concat(),
    );
    support::server::wait_until(Duration::from_secs(20), "the replica to sync", || {
        let link = replica.info_field("replication", "master_link_status");
        (link.as_deref() == Some("up"))
            .then_some(())
            .ok_or_else(|| format!("master_link_status {link:?}"))
    });
    // And acknowledging what it receives, as the primary sees it: with an AOF, once the
    // replica has written its own (rebuilt after the sync).
    if args.contains(&"appendonly") {
        let acked: Vec<i64> = primary.cmd(&["WAITAOF", "1", "1", "10000"]);
        assert_eq!(acked, [1, 1], "the replica acknowledges");
    } else {
        let acked: i64 = primary.cmd(&["WAIT", "1", "10000"]);
        assert_eq!(acked, 1, "the replica acknowledges");
    }
    (primary, replica)
}

/// Durable fencing hands out a lease and its token only once the replica holds it: while
/// the replica is stopped, every acquisition fails closed (an error that says so, within
/// its wait, and the lease released: the lock is free); once it is back, acquisitions are
/// granted again. The lock without the option sends no `WAIT`. What the option costs per
/// acquisition is printed beside the same acquisitions without it.
#[tokio::test]
async fn durable_fencing_grants_only_what_a_replica_holds() {
    let (primary, replica) = primary_and_replica(ServerKind::Redis7, &[]);
    let coordination: Coordination = RedisBackend::standalone(primary.unix_url())
        .key_prefix("")
        .connect()
        .await
        .expect("connect")
        .into();
    let plain = FencedLock::named(&coordination, "durable");
    let durable_within = async |within| {
        plain
            .clone()
            .durable(
                leasehold::coordination::lock::Durability::replicas(1)
                    .and_then(|durability| durability.within(within))
                    .expect("valid"),
            )
            .await
            .expect("the server allows WAIT")
    };
    // Room for a replica that two busy cores leave waiting, while it answers.
    let durable = durable_within(Duration::from_secs(2)).await;
    let within = Duration::from_millis(200);
    let strict = durable_within(within).await;
    let lease = Duration::from_secs(10);

    // The same acquisitions with and without the option, taken in turns (what the option
    // costs in time is the replica's round trip, which the benchmarks measure, not a test).
    let waits = || support::target::command_calls(&primary, "wait");
    let before = waits();
    for _ in 0..10 {
        for lock in [&durable, &plain] {
            let mut held = lock.acquire(lease).await.expect("acquire");
            assert!(held.release().await.expect("release").was_held());
        }
    }
    // One WAIT per durable acquisition, and one more with the first, whose EVALSHA met
    // NOSCRIPT on the lock's new connection (sent again with the script); none from the
    // plain lock (`strict`, probed before, sends none meanwhile).
    let sent = waits() - before;
    assert!((10..=11).contains(&sent), "{sent} WAITs");

    // No replica to confirm: nothing is granted, and nothing is left held.
    let stopped = replica.freeze();
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let err = strict.try_acquire(lease).await.expect_err("not confirmed");
        let took = started.elapsed();
        assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
        assert!(err.to_string().contains("0 of 1 replica"), "{err}");
        assert!(!err.is_outcome_uncertain(), "released: {err}");
        assert!(
            took >= within && took < within + Duration::from_millis(500),
            "failed after {took:?}"
        );
        let mut free = plain
            .try_acquire(lease)
            .await
            .expect("try")
            .acquired()
            .expect("the unconfirmed lease was released");
        assert!(free.release().await.expect("release").was_held());
    }
    drop(stopped);
    let mut back = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match durable.try_acquire(lease).await {
                Ok(attempt) => return attempt.acquired().expect("free"),
                Err(err) => assert_eq!(err.kind(), ErrorKind::Transient, "{err}"),
            }
        }
    })
    .await
    .expect("granted again once the replica answers");
    assert!(back.release().await.expect("release").was_held());
}

/// With the AOF asked for (and the server's on, 7.2+), an acquisition waits for the
/// primary's and the replica's AOF: about a second, the replica's acknowledgement.
#[tokio::test]
async fn durable_fencing_waits_for_the_aof_where_it_is_on() {
    // Written to disk at every write: with the default `everysec`, an AOF confirms within a
    // second, and an acquisition's wait must be that long.
    let (primary, _replica) = primary_and_replica(
        ServerKind::Redis8,
        &["--appendonly", "yes", "--appendfsync", "always"],
    );
    let coordination: Coordination = RedisBackend::standalone(primary.unix_url())
        .key_prefix("")
        .connect()
        .await
        .expect("connect")
        .into();
    let lock = FencedLock::named(&coordination, "aof")
        .durable(
            leasehold::coordination::lock::Durability::replicas(1)
                .and_then(|durability| durability.within(Duration::from_secs(2)))
                .expect("valid")
                .written_to_aof(),
        )
        .await
        .expect("allowed");
    let before = support::target::command_calls(&primary, "waitaof");
    let started = std::time::Instant::now();
    let mut held = lock
        .acquire(Duration::from_secs(10))
        .await
        .expect("acquire");
    let confirmed = started.elapsed();
    assert!(held.release().await.expect("release").was_held());
    // One, and one more if the first EVALSHA met NOSCRIPT.
    let sent = support::target::command_calls(&primary, "waitaof") - before;
    assert!((1..=2).contains(&sent), "{sent} WAITAOFs");
    let plain = FencedLock::named(&coordination, "aof");
    let started = std::time::Instant::now();
    let mut held = plain
        .acquire(Duration::from_secs(10))
        .await
        .expect("acquire");
    println!(
        "confirmed by the replica's AOF in {confirmed:?}; without durable fencing {:?}",
        started.elapsed()
    );
    assert!(held.release().await.expect("release").was_held());
}

/// A server that forbids `WAIT` (an ACL here, a managed service elsewhere) refuses durable
/// fencing when it is set, once, not at each acquisition; the memory backend has no
/// replicas; settings out of range are refused before anything is sent.
#[tokio::test]
async fn durable_fencing_is_refused_where_it_cannot_be_kept() {
    use leasehold::coordination::lock::Durability;
    let server = Server::start(ServerKind::Redis7, &[]);
    let forbidden: Coordination = RedisBackend::standalone(server.acl_user(&["-wait"]))
        .key_prefix("")
        .connect()
        .await
        .expect("connect")
        .into();
    let durability = Durability::replicas(1).expect("valid");
    let err = FencedLock::named(&forbidden, "durable")
        .durable(durability)
        .await
        .expect_err("WAIT is forbidden");
    assert_eq!(err.kind(), ErrorKind::Permission, "{err}");
    assert!(err.to_string().contains("WAIT"), "{err}");

    // Redis 7.0 has no WAITAOF.
    let plain: Coordination = RedisBackend::standalone(server.unix_url())
        .key_prefix("")
        .connect()
        .await
        .expect("connect")
        .into();
    let err = FencedLock::named(&plain, "durable")
        .durable(durability.written_to_aof())
        .await
        .expect_err("no WAITAOF");
    assert!(err.to_string().contains("WAITAOF"), "{err}");

    let err = FencedLock::named(&Coordination::memory(), "durable")
        .durable(durability)
        .await
        .expect_err("no replicas");
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert_eq!(
        Durability::replicas(0).expect_err("none").kind(),
        ErrorKind::InvalidArgument
    );
    for timeout in [Duration::ZERO, Duration::from_secs(11)] {
        let err = durability.within(timeout).expect_err("out of range");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }
}

/// On a cluster, the pair (the script, then `WAIT`) goes to the primary of the lock's slot,
/// written together: the harness's cluster has no replicas, so every durable acquisition,
/// in slots of every node, fails closed, and leaves its lock free.
#[tokio::test]
async fn durable_fencing_on_a_cluster_without_replicas_fails_closed() {
    let coordination = Target::Cluster.coordination("durable-cluster").await;
    for name in 0..12 {
        let plain = FencedLock::named(&coordination, format!("durable-{name}"));
        let durable = plain
            .clone()
            .durable(
                leasehold::coordination::lock::Durability::replicas(1)
                    .and_then(|durability| durability.within(Duration::from_millis(20)))
                    .expect("valid"),
            )
            .await
            .expect("the cluster allows WAIT");
        let err = durable
            .try_acquire(Duration::from_secs(10))
            .await
            .expect_err("no replica confirms");
        assert!(err.to_string().contains("0 of 1 replica"), "{err}");
        let mut free = plain
            .try_acquire(Duration::from_secs(10))
            .await
            .expect("try")
            .acquired()
            .expect("released");
        assert!(free.release().await.expect("release").was_held());
    }
}

/// A waiter whose connections fall silent while it waits (no FIN, no RST: a host gone, a VIP
/// moved; new connections reach the same healthy server), the holder releasing from
/// elsewhere: the silent tracking connection is found out and the wait ends, taken or failed
/// as unavailable, within 5 s of the release, not at the holder's expiry a minute later;
/// the same handle takes the lock again within 5 s more (the silent connection replaced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_connections_fall_silent_hears_of_the_release_within_seconds() {
    let behind = support::Behind::start("silent-waiter");
    let waiting_side = behind.through_proxy(|builder| builder).await;
    let direct = behind.direct().await;
    let mut held = FencedLock::named(&direct, "silent")
        .try_acquire(Duration::from_secs(60))
        .await
        .expect("acquire")
        .acquired()
        .expect("free");
    let lock = FencedLock::named(&waiting_side, "silent");
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire(Duration::from_secs(60)).await }
    });
    support::until_waiting(std::slice::from_ref(&waiting_side), 1).await;
    // A step answered on the waiter's connection after its first attempt: that attempt was
    // answered too (one connection, in order), and the waiter sleeps on its watch, which
    // only its tracking connection can end before the lock's expiry a minute away.
    waiting_side.ready().await.expect("ready");
    assert!(!waiter.is_finished(), "the lock is held for a minute");
    behind.proxy.silence_open();
    let released_at = std::time::Instant::now();
    assert_eq!(held.release().await.expect("release"), Release::Released);
    let waited = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the wait ended within 30 s")
        .expect("the waiter");
    let ended = released_at.elapsed();
    assert!(
        ended < Duration::from_secs(5),
        "the wait ended {ended:?} after the release"
    );
    let mut lease = match waited {
        Ok(lease) => lease,
        Err(err) => {
            assert!(err.is_unavailable(), "{err}");
            let mut taken = None;
            while taken.is_none() {
                assert!(
                    released_at.elapsed() < Duration::from_secs(10),
                    "not taken again within 10 s of the release"
                );
                taken = lock
                    .try_acquire(Duration::from_secs(60))
                    .await
                    .ok()
                    .and_then(|attempt| attempt.acquired());
            }
            taken.expect("taken")
        }
    };
    lease.release().await.expect("release");
}
