//! The token-bucket limiter against every server kind, the cluster and the memory backend.

mod support;

use std::time::Duration;

use leasehold::backend::memory::MemoryBackend;
use leasehold::coordination::rate_limit::{Refill, TokenBucket};
use leasehold::{Coordination, ErrorKind};
use support::target::{Target, is_granted, scenario, server_ms, storage_key};

/// The stored "<tokens>:<refilled at ms>".
fn stored(target: Target, key: &[u8]) -> (u64, u64) {
    let redis::Value::BulkString(value) = target.raw(&[b"GET", key]) else {
        panic!("the bucket is a string")
    };
    let value = String::from_utf8(value).expect("utf-8");
    let (tokens, at) = value.split_once(':').expect("tokens:ms");
    (
        tokens.parse().expect("tokens"),
        at.parse().expect("refill time"),
    )
}

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const MS: Duration = Duration::from_millis(1);

/// `d` lies in `(high - slack, high]`: a server-computed time, less what passed meanwhile.
fn assert_just_under(d: Duration, high: Duration) {
    let slack = Duration::from_secs(5);
    assert!(
        d <= high && d > high - slack,
        "{d:?} not just under {high:?}"
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(a_new_key_starts_full_then_rejects_with_a_retry_time);

async fn a_new_key_starts_full_then_rejects_with_a_retry_time(target: Target) {
    let coordination = target.coordination("burst").await;
    let limiter = TokenBucket::new(&coordination, "api", 3, Refill::new(1, MINUTE)).expect("valid");

    let probe = limiter.try_acquire(b"client", 0).await.expect("probe");
    assert!(probe.is_granted());
    assert_eq!(probe.remaining(), 3);
    assert_eq!(
        probe.reset_after(),
        Duration::ZERO,
        "a full bucket is whole"
    );

    for (taken, remaining) in [(1, 2), (2, 1), (3, 0)] {
        let decision = limiter.try_acquire(b"client", 1).await.expect("acquire");
        assert!(decision.is_granted());
        assert_eq!(decision.remaining(), remaining);
        assert_eq!(decision.limit(), 3);
        assert_eq!(decision.retry_after(), None);
        // One period per missing token, from the first take.
        assert_just_under(decision.reset_after(), MINUTE * taken);
    }
    for _ in 0..2 {
        let rejected = limiter.try_acquire(b"client", 1).await.expect("acquire");
        assert!(!rejected.is_granted());
        assert_eq!(rejected.remaining(), 0);
        let wait = rejected.retry_after().expect("a request that can succeed");
        assert_just_under(wait, MINUTE);
        assert_just_under(rejected.reset_after(), 3 * MINUTE);
    }
    // Another key has its own, full bucket.
    let other = limiter.try_acquire(b"other", 3).await.expect("acquire");
    assert!(other.is_granted());
    assert_eq!(other.remaining(), 0);
}

// ---------------------------------------------------------------------------------------------

scenario!(weighted_permits_and_the_limit_boundaries);

async fn weighted_permits_and_the_limit_boundaries(target: Target) {
    let coordination = target.coordination("weights").await;
    let limiter = TokenBucket::new(&coordination, "api", 5, Refill::new(1, MINUTE)).expect("valid");

    // More than the limit: rejected, no retry time, nothing consumed.
    for permits in [6, u64::MAX] {
        let impossible = limiter.try_acquire(b"k", permits).await.expect("acquire");
        assert!(!impossible.is_granted());
        assert_eq!(impossible.retry_after(), None);
        assert_eq!(impossible.remaining(), 5);
    }

    assert_eq!(
        limiter
            .try_acquire(b"k", 3)
            .await
            .expect("acquire")
            .remaining(),
        2
    );
    // 3 more: rejected and not taken; 1 token is missing, so one period.
    let rejected = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert_eq!(rejected.remaining(), 2);
    assert_just_under(rejected.retry_after().expect("retry time"), MINUTE);
    // 5 (the limit) needs 3 refills, which is also when the bucket is full.
    let rejected = limiter.try_acquire(b"k", 5).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(rejected.reset_after()));
    assert_just_under(rejected.reset_after(), 3 * MINUTE);
    // Still impossible with a partial bucket: the state is read, no retry time.
    let impossible = limiter.try_acquire(b"k", 6).await.expect("acquire");
    assert_eq!(impossible.remaining(), 2);
    assert_eq!(impossible.retry_after(), None);
    assert_just_under(impossible.reset_after(), 3 * MINUTE);

    // Taking exactly what is left is allowed.
    let last = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(last.is_granted());
    assert_eq!(last.remaining(), 0);
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted(), "a probe is never rejected");
    assert_eq!(probe.remaining(), 0);
    assert_just_under(probe.reset_after(), 5 * MINUTE);

    // permits == limit on a fresh key.
    let all = limiter.try_acquire(b"fresh", 5).await.expect("acquire");
    assert!(all.is_granted());
    assert_eq!(all.remaining(), 0);
}

scenario!(large_numbers_stay_exact);

async fn large_numbers_stay_exact(target: Target) {
    let coordination = target.coordination("large").await;
    let max_exact = (1u64 << 53) - 1;
    let hour = 60 * MINUTE;
    let limiter = TokenBucket::new(&coordination, "big", max_exact, Refill::new(1 << 40, hour))
        .expect("valid");
    let taken = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(taken.remaining(), max_exact - 1);
    assert_eq!(taken.reset_after(), hour);
    let rejected = limiter.try_acquire(b"k", max_exact).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert_just_under(rejected.retry_after().expect("retry time"), hour);
    assert_eq!(
        limiter
            .try_acquire(b"k", 0)
            .await
            .expect("probe")
            .remaining(),
        max_exact - 1
    );
    if coordination.backend().as_redis().is_some() {
        let key = storage_key(&coordination, "tb", "big", "k");
        assert_eq!(stored(target, &key).0, max_exact - 1);
    }

    // On either side of the packing's bound: a bucket of L tokens refilled one a
    // millisecond packs a grant of one token as (L - 1) * (L + 1) + 1 = L^2, below 2^53 for
    // L up to 94,906,265; a bucket one token larger answers a table. Both read the same.
    for limit in [94_906_265, 94_906_266] {
        let name = format!("bound-{limit}");
        let bucket =
            TokenBucket::new(&coordination, &name, limit, Refill::new(1, MS)).expect("valid");
        let taken = bucket.try_acquire(b"k", 1).await.expect("acquire");
        assert!(taken.is_granted());
        assert_eq!(taken.remaining(), limit - 1);
        assert_eq!(taken.reset_after(), MS);
    }

    // An expiry of 2^44 periods of 100 ms (over 10^14 ms).
    let slow = TokenBucket::new(
        &coordination,
        "slow",
        1 << 45,
        Refill::new(1, Duration::from_millis(100)),
    )
    .expect("valid");
    let taken = slow.try_acquire(b"k", 1 << 44).await.expect("acquire");
    assert_eq!(taken.remaining(), 1 << 44);
    let full_in = Duration::from_millis(100 << 44);
    assert_eq!(taken.reset_after(), full_in);
    if coordination.backend().as_redis().is_some() {
        let key = storage_key(&coordination, "tb", "slow", "k");
        let ttl = Duration::from_millis(u64::try_from(target.pttl(&key)).expect("expiring"));
        assert_just_under(ttl, full_in);
    }
}

// ---------------------------------------------------------------------------------------------

scenario!(retry_after_is_exact_on_the_servers_clock redis);

async fn retry_after_is_exact_on_the_servers_clock(target: Target) {
    const PERIOD: Duration = Duration::from_millis(300);
    let coordination = target.coordination("retry").await;
    let limiter =
        TokenBucket::new(&coordination, "api", 10, Refill::new(2, PERIOD)).expect("valid");
    let key = storage_key(&coordination, "tb", "api", "k");

    // The refill time stored is the server's clock at the step.
    let before = server_ms(&coordination).await;
    assert!(is_granted(&limiter, b"k", 10).await);
    let after = server_ms(&coordination).await;
    let (tokens, refilled_at) = stored(target, &key);
    assert_eq!(tokens, 0);
    assert!(
        (before..=after).contains(&refilled_at),
        "{before} <= {refilled_at} <= {after}"
    );

    // 3 tokens need two refills: retry = 2 periods - (server now - refilled_at).
    let before = server_ms(&coordination).await;
    let rejected = limiter.try_acquire(b"k", 3).await.expect("acquire");
    let after = server_ms(&coordination).await;
    let wait = rejected.retry_after().expect("retry time");
    let wait_ms = u64::try_from(wait.as_millis()).expect("ms");
    let two_periods = 2 * 300;
    assert!(
        two_periods - (after - refilled_at) <= wait_ms
            && wait_ms <= two_periods - (before - refilled_at),
        "{wait_ms} ms, server clock {before}..{after}, refilled at {refilled_at}"
    );
    let one_token = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(one_token.retry_after().expect("retry time") <= PERIOD);

    // After the server-computed time (and a little more for the network), it succeeds, with
    // exactly two refills: 4 tokens, 3 taken.
    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    let granted = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert!(granted.is_granted(), "{granted:?}");
    assert_eq!(granted.remaining(), 1);
    // The refill time moved by whole periods only.
    assert_eq!(stored(target, &key), (1, refilled_at + two_periods));
}

#[tokio::test(start_paused = true)]
async fn memory_retry_after_is_exact_to_the_millisecond() {
    let coordination = Coordination::memory();
    let limiter =
        TokenBucket::new(&coordination, "api", 10, Refill::new(2, SECOND)).expect("valid");
    assert!(is_granted(&limiter, b"k", 10).await);
    tokio::time::advance(Duration::from_millis(700)).await;

    let rejected = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(Duration::from_millis(1300)));
    assert_eq!(rejected.reset_after(), Duration::from_millis(4300));
    assert_eq!(
        limiter
            .try_acquire(b"k", 2)
            .await
            .expect("acquire")
            .retry_after(),
        Some(Duration::from_millis(300))
    );

    tokio::time::advance(Duration::from_millis(1299)).await;
    let almost = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert!(!almost.is_granted());
    assert_eq!(almost.remaining(), 2, "one refill so far");
    assert_eq!(almost.retry_after(), Some(MS));
    tokio::time::advance(MS).await;
    let granted = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert!(granted.is_granted());
    assert_eq!(granted.remaining(), 1);
    // The second refill happened just now: 9 missing tokens take 5 whole periods.
    assert_eq!(granted.reset_after(), 5 * SECOND);
}

#[tokio::test(start_paused = true)]
async fn memory_refills_are_discrete_and_keep_the_partial_period() {
    let backend = MemoryBackend::new();
    let coordination = Coordination::new(backend.clone());
    let limiter =
        TokenBucket::new(&coordination, "api", 10, Refill::new(1, SECOND)).expect("valid");
    assert!(is_granted(&limiter, b"k", 10).await);

    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(
        limiter
            .try_acquire(b"k", 0)
            .await
            .expect("probe")
            .remaining(),
        0
    );
    tokio::time::advance(Duration::from_millis(501)).await;
    // 1.5 periods: one refill, and the half period under way is kept.
    let taken = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(taken.is_granted());
    assert_eq!(taken.remaining(), 0);
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(Duration::from_millis(500)));
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(
        limiter
            .try_acquire(b"k", 0)
            .await
            .expect("probe")
            .remaining(),
        1
    );

    // Refills stop at the limit, and the bucket's state is gone once it is full.
    assert_eq!(backend.len(), 1);
    tokio::time::advance(9 * SECOND - MS).await;
    assert_eq!(
        limiter
            .try_acquire(b"k", 0)
            .await
            .expect("probe")
            .remaining(),
        9
    );
    assert_eq!(backend.len(), 1);
    tokio::time::advance(MS).await;
    assert_eq!(backend.len(), 0);
    tokio::time::advance(MINUTE).await;
    let full = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert_eq!(full.remaining(), 10);
    assert_eq!(full.reset_after(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn memory_a_full_bucket_starts_its_period_at_the_first_take() {
    let coordination = Coordination::memory();
    let limiter = TokenBucket::new(&coordination, "api", 2, Refill::new(1, SECOND)).expect("valid");
    assert!(is_granted(&limiter, b"k", 1).await);
    tokio::time::advance(Duration::from_millis(1500)).await;
    // Full again; the next period starts now, as it would after the key expired.
    let taken = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(taken.remaining(), 1);
    assert_eq!(taken.reset_after(), SECOND);
}

#[tokio::test(start_paused = true)]
async fn memory_tokens_per_period_above_the_limit_only_fill_the_bucket() {
    let coordination = Coordination::memory();
    let limiter =
        TokenBucket::new(&coordination, "api", 3, Refill::new(10, SECOND)).expect("valid");
    assert_eq!(limiter.policy().window(), SECOND);
    assert!(is_granted(&limiter, b"k", 3).await);
    let rejected = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(SECOND));
    assert_eq!(rejected.reset_after(), SECOND);
    tokio::time::advance(SECOND).await;
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert_eq!(probe.remaining(), 3);
    assert!(!is_granted(&limiter, b"k", 4).await);
}

// ---------------------------------------------------------------------------------------------

scenario!(storage_is_one_string_expiring_when_the_bucket_is_full redis);

async fn storage_is_one_string_expiring_when_the_bucket_is_full(target: Target) {
    let coordination = target.coordination("storage").await;
    let limiter = TokenBucket::new(&coordination, "api", 5, Refill::new(1, MINUTE)).expect("valid");
    let key = storage_key(&coordination, "tb", "api", "\u{0}binary");

    // A probe or a rejection creates nothing.
    limiter.try_acquire(b"\x00binary", 0).await.expect("probe");
    limiter
        .try_acquire(b"\x00binary", 6)
        .await
        .expect("impossible");
    assert_eq!(target.raw(&[b"EXISTS", &key]), redis::Value::Int(0));

    limiter
        .try_acquire(b"\x00binary", 2)
        .await
        .expect("acquire");
    assert_eq!(
        target.raw(&[b"TYPE", &key]),
        redis::Value::SimpleString("string".into())
    );
    let (tokens, refilled_at) = stored(target, &key);
    assert_eq!(tokens, 3);
    // Expires when the 2 missing tokens are back: two periods.
    let ttl = target.pttl(&key);
    assert!(ttl > 115_000 && ttl <= 120_000, "{ttl}");

    // A rejection changes nothing, neither the state nor its expiry.
    limiter
        .try_acquire(b"\x00binary", 3)
        .await
        .expect("acquire");
    let ttl = target.pttl(&key);
    assert!(ttl > 295_000 && ttl <= 300_000, "{ttl}");
    assert!(!is_granted(&limiter, b"\x00binary", 1).await);
    assert_eq!(stored(target, &key), (0, refilled_at));
    assert!(target.pttl(&key) <= ttl);

    // An idle key disappears when its bucket would be full: a missing key is a full bucket.
    let quick = TokenBucket::new(
        &coordination,
        "quick",
        2,
        Refill::new(2, Duration::from_millis(150)),
    )
    .expect("valid");
    let quick_key = storage_key(&coordination, "tb", "quick", "k");
    let taken = quick.try_acquire(b"k", 1).await.expect("acquire");
    let ttl = target.pttl(&quick_key);
    assert!(ttl > 0 && ttl <= 150, "{ttl}");
    tokio::time::sleep(taken.reset_after() + Duration::from_millis(10)).await;
    assert_eq!(target.raw(&[b"EXISTS", &quick_key]), redis::Value::Int(0));
    assert_eq!(
        quick.try_acquire(b"k", 0).await.expect("probe").remaining(),
        2
    );
}

scenario!(corrupt_or_odd_state_is_handled_without_change redis);

async fn corrupt_or_odd_state_is_handled_without_change(target: Target) {
    let coordination = target.coordination("corrupt").await;
    let limiter = TokenBucket::new(&coordination, "api", 5, Refill::new(1, MINUTE)).expect("valid");
    let key = storage_key(&coordination, "tb", "api", "k");

    for garbage in [&b"not a number"[..], b"5:abc", b"-1:5", b"1.5:1000", b"3"] {
        target.raw(&[b"SET", &key, garbage]);
        let err = limiter.try_acquire(b"k", 1).await.expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
        assert_eq!(
            target.raw(&[b"GET", &key]),
            redis::Value::BulkString(garbage.to_vec())
        );
    }
    target.raw(&[b"DEL", &key]);
    target.raw(&[b"HSET", &key, b"tokens", b"1"]);
    let err = limiter.try_acquire(b"k", 0).await.expect_err("wrong type");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert_eq!(
        target.raw(&[b"TYPE", &key]),
        redis::Value::SimpleString("hash".into())
    );
    target.raw(&[b"DEL", &key]);

    let now = server_ms(&coordination).await;
    // More tokens than the limit (a limiter rebuilt smaller) are capped.
    target.raw(&[b"SET", &key, format!("99:{now}").as_bytes()]);
    assert_eq!(
        limiter
            .try_acquire(b"k", 0)
            .await
            .expect("probe")
            .remaining(),
        5
    );
    // A refill time ahead of the server's clock restarts the period now.
    let later = now + 3_600_000;
    target.raw(&[b"SET", &key, format!("0:{later}").as_bytes()]);
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_just_under(rejected.retry_after().expect("retry time"), MINUTE);
    // A bucket that lost its expiry still refills from its stored time, and the next take
    // gives it an expiry again.
    let earlier = now - 2 * 60_000;
    target.raw(&[b"SET", &key, format!("0:{earlier}").as_bytes()]);
    let taken = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(taken.is_granted());
    assert_eq!(taken.remaining(), 0);
    let ttl = target.pttl(&key);
    assert!(ttl > 0 && ttl <= 300_000, "{ttl}");
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn invalid_configuration_is_rejected_at_construction() {
    let coordination = Coordination::memory();
    let max_exact = (1u64 << 53) - 1;
    for (limit, per_period, period) in [
        (0, 1, MINUTE),
        (1, 0, MINUTE),
        (1, 1, Duration::ZERO),
        (1, 1, Duration::from_micros(999)),
        (max_exact + 1, 1, MS),
        (u64::MAX, u64::MAX, MS),
        // Refilling an empty bucket would take more than 2^52 ms.
        (1 << 52, 1, 2 * MS),
        (max_exact, 1, MS),
        (1, 1, Duration::from_millis((1 << 52) + 1)),
        (1, 1, Duration::MAX),
    ] {
        let err = TokenBucket::new(&coordination, "api", limit, Refill::new(per_period, period))
            .expect_err("invalid");
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidArgument,
            "{limit} {per_period} {period:?}"
        );
    }
    // The bound reads as a duration, not as a run of digits in milliseconds.
    let err = TokenBucket::new(&coordination, "api", 1, Refill::new(1, Duration::MAX))
        .expect_err("invalid");
    assert!(err.to_string().contains("142,000 years"), "{err}");
    for (limit, per_period, period) in [
        (1 << 52, 1, MS),
        (max_exact, 2, MS),
        (max_exact, u64::MAX, Duration::from_millis(1 << 52)),
        (1, 1, Duration::from_micros(1001)),
    ] {
        TokenBucket::new(&coordination, "api", limit, Refill::new(per_period, period))
            .expect("valid");
    }
}

#[tokio::test]
async fn the_policy_is_the_limit_per_time_to_refill_an_empty_bucket() {
    let coordination = Coordination::memory();
    for (limit, per_period, period, window) in [
        (10, 2, SECOND, 5 * SECOND),
        (10, 3, SECOND, 4 * SECOND),
        (3, 10, SECOND, SECOND),
        (
            1,
            1,
            Duration::from_millis(1500),
            Duration::from_millis(1500),
        ),
        (1, 1, Duration::from_micros(1999), MS),
    ] {
        let limiter = TokenBucket::new(
            &coordination,
            "uploads",
            limit,
            Refill::new(per_period, period),
        )
        .expect("valid");
        let policy = limiter.policy();
        assert_eq!(policy.name(), "uploads");
        assert_eq!(policy.quota(), limit);
        assert_eq!(policy.window(), window, "{limit} {per_period} {period:?}");
    }
}
