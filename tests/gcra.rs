//! The GCRA limiter against every server kind, the cluster and the memory backend.

mod support;

use std::time::Duration;

use leasehold::backend::memory::MemoryBackend;
use leasehold::coordination::rate_limit::Gcra;
use leasehold::{Coordination, ErrorKind};
use support::ServerKind;
use support::target::{Target, is_granted, scenario, storage_key};

async fn server_micros(coordination: &Coordination) -> u64 {
    let now = coordination.backend().server_time().await.expect("TIME");
    u64::try_from(now.as_micros()).expect("µs fit")
}

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);

/// Whether `actual` is `expected` less at most the time a test step may take.
fn about(actual: Duration, expected: Duration) -> bool {
    actual <= expected && actual + SECOND > expected
}

// ---------------------------------------------------------------------------------------------

scenario!(admits_the_burst_then_spaces_permits);

async fn admits_the_burst_then_spaces_permits(target: Target) {
    let coordination = target.coordination("burst").await;
    // T = 10 s, bursts of 3.
    let limiter = Gcra::new(&coordination, "api", 6, MINUTE, 3).expect("valid");
    assert_eq!(limiter.emission_interval(), 10 * SECOND);
    for (taken, remaining) in [(1, 2), (2, 1), (3, 0)] {
        let decision = limiter.try_acquire(b"client", 1).await.expect("acquire");
        assert!(decision.is_granted());
        assert_eq!(decision.remaining(), remaining);
        assert_eq!(decision.limit(), 6);
        assert_eq!(decision.retry_after(), None);
        assert!(
            about(decision.reset_after(), taken * 10 * SECOND),
            "{decision:?}"
        );
    }
    for _ in 0..3 {
        let rejected = limiter.try_acquire(b"client", 1).await.expect("acquire");
        assert!(!rejected.is_granted());
        assert_eq!(rejected.remaining(), 0);
        let wait = rejected.retry_after().expect("a request that can succeed");
        assert!(about(wait, 10 * SECOND), "{rejected:?}");
        assert!(about(rejected.reset_after(), 30 * SECOND), "{rejected:?}");
    }
    // Another key is independent.
    let other = limiter.try_acquire(b"other", 1).await.expect("acquire");
    assert!(other.is_granted());
    assert_eq!(other.remaining(), 2);
}

// ---------------------------------------------------------------------------------------------

scenario!(grants_too_large_to_pack_arrive_whole);

/// The script packs a grant into one integer (remaining * 2^32 + µs ahead, or by the radix
/// b*T + 1 past 2^21 remaining or 2^32 µs ahead) while that stays below 2^53; a larger one
/// comes as a table. All must read the same.
async fn grants_too_large_to_pack_arrive_whole(target: Target) {
    let coordination = target.coordination("unpacked").await;
    // One permit a second with a burst of 2^21: 2^21 - 1 remain after the first, packed by
    // 2^32.
    let wide =
        Gcra::new(&coordination, "wide", 1 << 21, SECOND * (1 << 21), 1 << 21).expect("valid");
    let decision = wide.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(decision.remaining(), (1 << 21) - 1);
    assert!(about(decision.reset_after(), SECOND), "{decision:?}");
    // One permit in two hours: the TAT moves 7.2 * 10^9 µs (more than 2^32) ahead, packed by
    // the tolerance.
    let slow = Gcra::new(&coordination, "slow", 1, 120 * MINUTE, 2).expect("valid");
    let decision = slow.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(decision.remaining(), 1);
    assert!(about(decision.reset_after(), 120 * MINUTE), "{decision:?}");
    // A burst of 2^22 a microsecond apart: 2^22 - 1 remain, past 2^21, packed by the
    // tolerance of 2^22 µs (a radix the script and the step must agree on to the unit).
    let dense = Gcra::new(
        &coordination,
        "dense",
        1 << 22,
        Duration::from_micros(1 << 22),
        1 << 22,
    )
    .expect("valid");
    let decision = dense.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(decision.remaining(), (1 << 22) - 1);
    assert!(
        decision.reset_after() <= Duration::from_millis(1),
        "{decision:?}"
    );
    // A burst of 2^22 a second apart: 2^22 - 1 remain, times a tolerance of 2^22 seconds in
    // µs, is far past 2^53: a table.
    let vast =
        Gcra::new(&coordination, "vast", 1 << 22, SECOND * (1 << 22), 1 << 22).expect("valid");
    let decision = vast.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(decision.remaining(), (1 << 22) - 1);
    assert!(about(decision.reset_after(), SECOND), "{decision:?}");
}

// ---------------------------------------------------------------------------------------------

scenario!(weighted_permits_and_the_burst_boundaries);

async fn weighted_permits_and_the_burst_boundaries(target: Target) {
    let coordination = target.coordination("weights").await;
    // T = 12 s, bursts of 5.
    let limiter = Gcra::new(&coordination, "api", 5, MINUTE, 5).expect("valid");

    // More than the burst: rejected, no retry time, nothing consumed.
    for permits in [6, u64::MAX] {
        let impossible = limiter.try_acquire(b"k", permits).await.expect("acquire");
        assert!(!impossible.is_granted());
        assert_eq!(impossible.retry_after(), None);
        assert_eq!(impossible.remaining(), 5);
        assert_eq!(impossible.reset_after(), Duration::ZERO);
    }
    // A probe consumes nothing.
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted());
    assert_eq!(
        (probe.remaining(), probe.reset_after()),
        (5, Duration::ZERO)
    );

    // Three permits move the TAT by three intervals.
    let three = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert_eq!(three.remaining(), 2);
    assert!(about(three.reset_after(), 36 * SECOND), "{three:?}");
    // Three more would end 12 s past the burst window: rejected, not counted.
    let rejected = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert_eq!(rejected.remaining(), 2);
    assert!(about(rejected.retry_after().expect("retry"), 12 * SECOND));
    // Exactly reaching the burst is allowed.
    let last = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(last.is_granted());
    assert_eq!(last.remaining(), 0);
    assert!(about(last.reset_after(), MINUTE), "{last:?}");
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted(), "a probe always conforms");
    assert_eq!(probe.remaining(), 0);
    let impossible = limiter.try_acquire(b"k", 6).await.expect("acquire");
    assert_eq!(
        (impossible.is_granted(), impossible.retry_after()),
        (false, None)
    );
    assert!(about(impossible.reset_after(), MINUTE));

    // permits == burst on a fresh key.
    let whole = limiter.try_acquire(b"fresh", 5).await.expect("acquire");
    assert!(whole.is_granted());
    assert_eq!(whole.remaining(), 0);
}

// ---------------------------------------------------------------------------------------------

scenario!(waiting_the_retry_time_is_exactly_enough redis);

async fn waiting_the_retry_time_is_exactly_enough(target: Target) {
    let coordination = target.coordination("retry").await;
    // T = 1 s, bursts of 2: waits long enough that a loaded machine's pause of a few hundred
    // milliseconds cannot carry a request past the halfway mark.
    let limiter = Gcra::new(&coordination, "api", 10, 10 * SECOND, 2).expect("valid");
    assert!(is_granted(&limiter, b"k", 2).await);
    let first = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(!first.is_granted());
    let wait = first.retry_after().expect("retry");
    assert!(wait > 1500 * MS && wait <= 2000 * MS, "{first:?}");
    // Halfway there the server still refuses, and counts down from its own clock.
    tokio::time::sleep(wait / 2).await;
    let second = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(!second.is_granted(), "{second:?}");
    let rest = second.retry_after().expect("retry");
    assert!(rest + wait / 2 <= wait + MS, "{first:?} then {second:?}");
    tokio::time::sleep(rest + 5 * MS).await;
    let granted = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(granted.is_granted(), "{granted:?}");
    assert_eq!(granted.remaining(), 0);
}

#[tokio::test(start_paused = true)]
async fn memory_retry_times_are_exact_on_the_paused_clock() {
    let backend = MemoryBackend::new();
    let coordination: Coordination = backend.clone().into();
    // T = 1 s, bursts of 2.
    let limiter = Gcra::new(&coordination, "api", 60, MINUTE, 2).expect("valid");
    let burst = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert_eq!(burst.reset_after(), 2 * SECOND);
    tokio::time::advance(300 * MS).await;
    let one = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(one.retry_after(), Some(700 * MS));
    assert_eq!((one.remaining(), one.reset_after()), (0, 1700 * MS));
    let two = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert_eq!(two.retry_after(), Some(1700 * MS));

    tokio::time::advance(699 * MS).await;
    let early = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(early.retry_after(), Some(MS));
    tokio::time::advance(MS).await;
    let on_time = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(on_time.is_granted());
    assert_eq!(
        (on_time.remaining(), on_time.reset_after()),
        (0, 2 * SECOND)
    );

    // The key expires when the TAT passes: the full burst is back and nothing is stored.
    tokio::time::advance(2 * SECOND - MS).await;
    assert_eq!(backend.len(), 1);
    tokio::time::advance(MS).await;
    assert_eq!(backend.len(), 0);
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert_eq!(
        (probe.remaining(), probe.reset_after()),
        (2, Duration::ZERO)
    );
    assert_eq!(backend.len(), 0, "a probe creates nothing");
}

#[tokio::test(start_paused = true)]
async fn a_fractional_interval_rounds_against_the_client() {
    let coordination = Coordination::memory();
    // 10 ms / 3 = 3333.3 µs: T = 3334 µs, so never more than 3 per 10 ms.
    let limiter = Gcra::new(&coordination, "api", 3, 10 * MS, 1).expect("valid");
    assert_eq!(limiter.emission_interval(), Duration::from_micros(3334));
    let granted = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(granted.reset_after(), 4 * MS, "3334 µs rounds up");
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(4 * MS));
    tokio::time::advance(3 * MS).await;
    let early = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(early.retry_after(), Some(MS), "334 µs left rounds up");
    tokio::time::advance(MS).await;
    assert!(is_granted(&limiter, b"k", 1).await);
}

// ---------------------------------------------------------------------------------------------

scenario!(storage_is_one_key_holding_the_servers_tat:
    redis7 => Target::Server(ServerKind::Redis7),
    cluster => Target::Cluster);

async fn storage_is_one_key_holding_the_servers_tat(target: Target) {
    let coordination = target.coordination("storage").await;
    // T = 100 ms, bursts of 3.
    let limiter = Gcra::new(&coordination, "api", 10, SECOND, 3).expect("valid");
    let key = storage_key(&coordination, "gcra", "api", "\u{0}binary");
    // A probe or a rejection creates nothing.
    limiter.try_acquire(b"\x00binary", 0).await.expect("probe");
    limiter
        .try_acquire(b"\x00binary", 4)
        .await
        .expect("impossible");
    assert_eq!(target.raw(&[b"EXISTS", &key]), redis::Value::Int(0));

    let before = server_micros(&coordination).await;
    limiter
        .try_acquire(b"\x00binary", 2)
        .await
        .expect("acquire");
    let after = server_micros(&coordination).await;
    let redis::Value::BulkString(tat) = target.raw(&[b"GET", &key]) else {
        panic!("a string key")
    };
    let tat: u64 = std::str::from_utf8(&tat)
        .expect("ascii")
        .parse()
        .expect("an integer");
    // The TAT is the server's TIME in µs plus two intervals.
    assert!(
        tat >= before + 200_000 && tat <= after + 200_000,
        "{before} {tat} {after}"
    );
    let ttl = target.pttl(&key);
    assert!(ttl > 100 && ttl <= 200, "{ttl}");

    // Full: a rejection changes neither the TAT nor the expiry.
    limiter
        .try_acquire(b"\x00binary", 1)
        .await
        .expect("acquire");
    let stored = target.raw(&[b"GET", &key]);
    let rejected = limiter
        .try_acquire(b"\x00binary", 1)
        .await
        .expect("acquire");
    assert!(!rejected.is_granted());
    assert_eq!(target.raw(&[b"GET", &key]), stored);
    assert!(target.pttl(&key) <= 300);

    // The key goes when the TAT passes.
    tokio::time::sleep(rejected.reset_after() + 5 * MS).await;
    assert_eq!(target.raw(&[b"EXISTS", &key]), redis::Value::Int(0));
}

scenario!(corrupt_state_fails_without_change:
    redis7 => Target::Server(ServerKind::Redis7),
    valkey8 => Target::Server(ServerKind::Valkey8),
    cluster => Target::Cluster);

async fn corrupt_state_fails_without_change(target: Target) {
    let coordination = target.coordination("corrupt").await;
    let limiter = Gcra::new(&coordination, "api", 10, SECOND, 3).expect("valid");
    let key = storage_key(&coordination, "gcra", "api", "k");
    for bad in [
        &b"not a number"[..],
        b"1.5",
        b"-1",
        b"1e300",
        b"9007199254740992",
        b"nan",
        b"",
    ] {
        target.raw(&[b"SET", &key, bad]);
        let err = limiter.try_acquire(b"k", 1).await.expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
        assert_eq!(
            target.raw(&[b"GET", &key]),
            redis::Value::BulkString(bad.to_vec())
        );
        assert_eq!(target.pttl(&key), -1, "nothing changed");
    }
    target.raw(&[b"DEL", &key]);
    target.raw(&[b"HSET", &key, b"field", b"1"]);
    let err = limiter.try_acquire(b"k", 0).await.expect_err("wrong type");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert_eq!(
        target.raw(&[b"TYPE", &key]),
        redis::Value::SimpleString("hash".into())
    );

    // With seconds to spare for a busy machine: one permit every 10 s, a burst of 3 (30 s).
    let slow = Gcra::new(&coordination, "slow", 1, 10 * SECOND, 3).expect("valid");
    let slow_key = storage_key(&coordination, "gcra", "slow", "k");
    // A TAT that lost its expiry gets one instead of living forever, even on a rejection.
    let ahead = server_micros(&coordination).await + 20_000_000;
    target.raw(&[b"SET", &slow_key, ahead.to_string().as_bytes()]);
    let admitted = slow.try_acquire(b"k", 1).await.expect("acquire");
    assert!(admitted.is_granted(), "{admitted:?}");
    let ttl = target.pttl(&slow_key);
    assert!(ttl > 25_000 && ttl <= 30_000, "{ttl}");
    target.raw(&[b"PERSIST", &slow_key]);
    let rejected = slow.try_acquire(b"k", 1).await.expect("acquire");
    assert!(!rejected.is_granted(), "{rejected:?}");
    assert_ne!(target.pttl(&slow_key), -1, "given an expiry on a rejection");

    // A TAT an hour ahead (written before the server's clock stepped back an hour) counts as
    // a full burst, written back so, not as an hour of refusals: the key conforms again
    // after one emission interval.
    target.raw(&[b"DEL", &slow_key]);
    let an_hour_ahead = server_micros(&coordination).await + 3_600_000_000;
    target.raw(&[b"SET", &slow_key, an_hour_ahead.to_string().as_bytes()]);
    let rejected = slow.try_acquire(b"k", 1).await.expect("acquire");
    assert!(!rejected.is_granted());
    let wait = rejected.retry_after().expect("retry");
    assert!(wait <= 10 * SECOND, "{rejected:?}");
    let ttl = target.pttl(&slow_key);
    assert!(ttl > 25_000 && ttl <= 30_000, "{ttl}");
    // And a past one, even on a probe (it means a full burst, like no key).
    target.raw(&[b"SET", &key, b"1000"]);
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted());
    assert_eq!(
        (probe.remaining(), probe.reset_after()),
        (3, Duration::ZERO)
    );
    assert_ne!(target.pttl(&key), -1);
}

#[tokio::test]
async fn invalid_configuration_is_rejected_at_construction() {
    let coordination = Coordination::memory();
    let max = Duration::from_micros(1 << 50);
    for (limit, period, burst) in [
        (0, MINUTE, 1),
        (1, MINUTE, 0),
        (1, Duration::ZERO, 1),
        (1, Duration::from_nanos(999), 1),
        // T = 999 ns
        (1001, MS, 1),
        (u64::MAX, MINUTE, 1),
        (1, max + Duration::from_micros(1), 1),
        (1, MINUTE, u64::MAX),
        (1, max, 2),
    ] {
        let err = Gcra::new(&coordination, "api", limit, period, burst).expect_err("invalid");
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidArgument,
            "{limit} {period:?} {burst}"
        );
    }
    // The bound is told as a duration, not as a run of digits in microseconds.
    let err = Gcra::new(&coordination, "api", 1, max, 2).expect_err("beyond the bound");
    assert!(
        err.to_string().contains("2^50 µs (about 35 years)"),
        "{err}"
    );
    for (limit, period, burst, interval) in [
        (1000, MS, 1, Duration::from_micros(1)),
        (1, max, 1, max),
        (1, Duration::from_nanos(1001), 1, Duration::from_micros(2)),
    ] {
        let limiter = Gcra::new(&coordination, "api", limit, period, burst).expect("valid");
        assert_eq!(limiter.emission_interval(), interval);
        assert_eq!(limiter.policy().quota(), limit);
        assert_eq!(limiter.policy().window(), period);
        assert_eq!(limiter.burst(), burst);
    }
}
