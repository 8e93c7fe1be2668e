//! The stacked fixed-window limiter against every server kind, the cluster and the memory
//! backend.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::coordination::rate_limit::{
    MAX_STACKED_POLICIES, QueueOrder, QuotaUnit, RateLimitDecision, RateLimitPolicy, RateLimiter,
    Stacked,
};
use leasehold::{Coordination, ErrorKind};
use support::target::{Target, concurrent_grants, is_granted, scenario, server_ms, storage_key};

/// The windows of a stacked key: policy index → (count, window end in ms since the epoch).
fn windows(target: Target, key: &[u8]) -> BTreeMap<String, (u64, u64)> {
    let fields: BTreeMap<String, String> = target.query(&[b"HGETALL", key]);
    fields
        .into_iter()
        .map(|(field, value)| {
            let (count, end) = value.split_once(':').expect("<count>:<end>");
            (
                field,
                (
                    count.parse().expect("count"),
                    end.parse().expect("window end"),
                ),
            )
        })
        .collect()
}

/// Whether the backend holds no key for the limiter's client key.
fn nothing_stored(target: Target, coordination: &Coordination, key: &[u8]) -> bool {
    match coordination.backend().as_memory() {
        Some(memory) => memory.is_empty(),
        None => target.query::<i64>(&[b"EXISTS", key]) == 0,
    }
}

/// Each policy's remaining permits.
fn remaining(decision: &RateLimitDecision) -> Vec<u64> {
    decision
        .policy_states()
        .iter()
        .map(|state| state.remaining())
        .collect()
}

fn policy(name: &str, quota: u64, window: Duration) -> RateLimitPolicy {
    RateLimitPolicy::new(name, quota, window)
}

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

// ---------------------------------------------------------------------------------------------

scenario!(all_or_nothing);

async fn all_or_nothing(target: Target) {
    let coordination = target.coordination("all-or-nothing").await;
    let limiter = Stacked::new(
        &coordination,
        "api",
        [policy("minute", 10, MINUTE), policy("hour", 3, HOUR)],
    )
    .expect("valid");
    let granted = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(granted.is_granted());
    assert_eq!(remaining(&granted), [8, 1]);
    // The hour binds: fewest permits left.
    assert_eq!((granted.remaining(), granted.limit()), (1, 3));
    assert_eq!(granted.reset_after(), HOUR);
    let [minute, hour] = granted.policy_states() else {
        panic!("two states")
    };
    assert_eq!((minute.limit(), minute.reset_after()), (10, MINUTE));
    assert_eq!((hour.limit(), hour.reset_after()), (3, HOUR));

    // The minute would admit 2 more, the hour not: rejected, and the minute counts nothing.
    let rejected = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert_eq!(remaining(&rejected), [8, 1]);
    let wait = rejected.retry_after().expect("a retry time");
    assert!(wait > HOUR - MINUTE && wait <= HOUR, "{wait:?}");
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted());
    assert_eq!(remaining(&probe), [8, 1], "the minute's count is unchanged");
    if !matches!(target, Target::Memory) {
        let stored = windows(target, &storage_key(&coordination, "st", "api", "k"));
        assert_eq!(stored.len(), 2, "{stored:?}");
        assert_eq!(
            stored["0"].0, 2,
            "the minute's count is unchanged: {stored:?}"
        );
        assert_eq!(stored["1"].0, 2, "{stored:?}");
        // Both windows started in the same step, on the same server time.
        assert_eq!(stored["1"].1 - stored["0"].1, 3_540_000, "{stored:?}");
    }

    // What fits in both is granted in both.
    let last = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(last.is_granted());
    assert_eq!(remaining(&last), [7, 0]);
    // Other client keys are independent.
    assert_eq!(
        remaining(&limiter.try_acquire(b"other", 3).await.expect("acquire")),
        [7, 0]
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(the_longest_wait_among_the_rejecting_policies_is_reported);

async fn the_longest_wait_among_the_rejecting_policies_is_reported(target: Target) {
    let coordination = target.coordination("longest-wait").await;
    let limiter = Stacked::new(
        &coordination,
        "api",
        [
            policy("minute", 1, MINUTE),
            policy("hour", 1, HOUR),
            policy("day", 5, DAY),
        ],
    )
    .expect("valid");
    assert!(is_granted(&limiter, b"k", 1).await);
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert_eq!(remaining(&rejected), [0, 0, 4]);
    let states = rejected.policy_states();
    // The minute and the hour reject; the hour's window ends last. The day admits: its
    // longer reset does not count.
    assert_eq!(rejected.retry_after(), Some(states[1].reset_after()));
    assert!(states[1].reset_after() > HOUR - MINUTE);
    assert!(states[2].reset_after() > states[1].reset_after());
    // The binding policy: a tie at 0 left, broken by the longest reset.
    assert_eq!(rejected.limit(), 1);
    assert_eq!(rejected.reset_after(), states[1].reset_after());

    // Only the short policy rejects: its own wait, not the others' resets.
    let limiter = Stacked::new(
        &coordination,
        "short",
        [policy("minute", 1, MINUTE), policy("hour", 5, HOUR)],
    )
    .expect("valid");
    assert!(is_granted(&limiter, b"k", 1).await);
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(!rejected.is_granted());
    let wait = rejected.retry_after().expect("retry time");
    assert!(wait <= MINUTE && wait > MINUTE / 2, "{wait:?}");
    assert_eq!(rejected.remaining(), 0);
    assert_eq!(rejected.limit(), 1);
}

// ---------------------------------------------------------------------------------------------

scenario!(permits_above_the_smallest_limit_never_succeed);

async fn permits_above_the_smallest_limit_never_succeed(target: Target) {
    let coordination = target.coordination("impossible").await;
    let limiter = Stacked::new(
        &coordination,
        "api",
        [policy("minute", 10, MINUTE), policy("day", 1000, DAY)],
    )
    .expect("valid");
    let key = match target {
        Target::Memory => Vec::new(),
        _ => storage_key(&coordination, "st", "api", "k"),
    };
    for permits in [11, 1000, u64::MAX] {
        let impossible = limiter.try_acquire(b"k", permits).await.expect("acquire");
        assert!(!impossible.is_granted(), "{permits}");
        assert_eq!(impossible.retry_after(), None, "{permits}");
        assert_eq!(remaining(&impossible), [10, 1000]);
    }
    assert!(nothing_stored(target, &coordination, &key));
    // The same with a window under way: still no retry time, still nothing counted.
    assert!(is_granted(&limiter, b"k", 4).await);
    let impossible = limiter.try_acquire(b"k", 11).await.expect("acquire");
    assert_eq!(impossible.retry_after(), None);
    assert_eq!(remaining(&impossible), [6, 996]);
    // Exactly the smallest limit fits a fresh key.
    assert!(is_granted(&limiter, b"fresh", 10).await);
}

// ---------------------------------------------------------------------------------------------

scenario!(probes_create_and_change_nothing);

async fn probes_create_and_change_nothing(target: Target) {
    let coordination = target.coordination("probe").await;
    let limiter = Stacked::new(
        &coordination,
        "api",
        [policy("minute", 5, MINUTE), policy("day", 50, DAY)],
    )
    .expect("valid");
    let key = match target {
        Target::Memory => Vec::new(),
        _ => storage_key(&coordination, "st", "api", "k"),
    };
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted());
    assert_eq!(remaining(&probe), [5, 50]);
    assert_eq!(probe.retry_after(), None);
    // No window under way: each reset is a whole window, as for a fixed window.
    let resets: Vec<_> = probe
        .policy_states()
        .iter()
        .map(|s| s.reset_after())
        .collect();
    assert_eq!(resets, [MINUTE, DAY]);
    assert!(nothing_stored(target, &coordination, &key));

    limiter.try_acquire(b"k", 5).await.expect("acquire");
    let before = (!matches!(target, Target::Memory)).then(|| windows(target, &key));
    for _ in 0..3 {
        let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
        assert!(probe.is_granted(), "a probe is never over the limit");
        assert_eq!(remaining(&probe), [0, 45]);
    }
    if let Some(before) = before {
        assert_eq!(windows(target, &key), before);
    }
}

// ---------------------------------------------------------------------------------------------

scenario!(a_window_that_ends_frees_only_its_policy redis);

async fn a_window_that_ends_frees_only_its_policy(target: Target) {
    let coordination = target.coordination("window-end").await;
    let limiter = Stacked::new(
        &coordination,
        "api",
        [
            policy("short", 2, Duration::from_millis(300)),
            policy("long", 5, MINUTE),
        ],
    )
    .expect("valid");
    let key = storage_key(&coordination, "st", "api", "k");
    assert!(is_granted(&limiter, b"k", 2).await);
    let before = windows(target, &key);
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(!rejected.is_granted());
    let wait = rejected.retry_after().expect("retry time");
    assert!(wait <= Duration::from_millis(300), "{wait:?}");

    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    let fresh = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(fresh.is_granted(), "{fresh:?}");
    assert_eq!(remaining(&fresh), [1, 2], "the long window kept its count");
    let [short, long] = fresh.policy_states() else {
        panic!("two states")
    };
    assert_eq!(
        short.reset_after(),
        Duration::from_millis(300),
        "a new window"
    );
    assert!(long.reset_after() < MINUTE - wait, "{long:?}");
    let after = windows(target, &key);
    assert_eq!(
        after["1"],
        (3, before["1"].1),
        "the long window's end stays"
    );
    assert!(after["0"].1 >= before["0"].1 + 300, "{before:?} {after:?}");
    assert_eq!(after["0"].0, 1);
}

#[tokio::test(start_paused = true)]
async fn memory_windows_follow_the_paused_clock() {
    let coordination = Coordination::memory();
    let limiter = Stacked::new(
        &coordination,
        "api",
        [policy("second", 2, SECOND), policy("minute", 3, MINUTE)],
    )
    .expect("valid");
    assert!(is_granted(&limiter, b"k", 2).await);
    tokio::time::advance(Duration::from_millis(400)).await;
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(Duration::from_millis(600)));
    assert_eq!(remaining(&rejected), [0, 1]);

    tokio::time::advance(Duration::from_millis(600)).await;
    // The second's window ended; the minute's goes on.
    let granted = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(granted.is_granted());
    assert_eq!(remaining(&granted), [1, 0]);
    let resets: Vec<_> = granted
        .policy_states()
        .iter()
        .map(|s| s.reset_after())
        .collect();
    assert_eq!(resets, [SECOND, MINUTE - SECOND]);
    // Now only the minute rejects: its exact wait.
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(MINUTE - SECOND));
    assert_eq!((rejected.limit(), rejected.remaining()), (3, 0));

    tokio::time::advance(MINUTE - SECOND - Duration::from_millis(1)).await;
    assert!(!is_granted(&limiter, b"k", 1).await);
    tokio::time::advance(Duration::from_millis(1)).await;
    let fresh = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(fresh.is_granted());
    assert_eq!(remaining(&fresh), [0, 1]);
    // Once the last window ends the key is gone.
    tokio::time::advance(MINUTE).await;
    assert!(
        coordination
            .backend()
            .as_memory()
            .expect("memory")
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(storage_is_one_hash_expiring_with_its_last_window redis);

async fn storage_is_one_hash_expiring_with_its_last_window(target: Target) {
    let coordination = target.coordination("storage").await;
    let limiter = Stacked::new(
        &coordination,
        "api",
        [policy("minute", 5, MINUTE), policy("hour", 10, HOUR)],
    )
    .expect("valid");
    let key = storage_key(&coordination, "st", "api", "\u{0}binary");
    let before = server_ms(&coordination).await;
    limiter
        .try_acquire(b"\x00binary", 2)
        .await
        .expect("acquire");
    let after = server_ms(&coordination).await;
    assert_eq!(
        target.query::<String>(&[b"TYPE", &key]),
        "hash",
        "one hash per client key"
    );
    let stored = windows(target, &key);
    assert_eq!(stored.keys().collect::<Vec<_>>(), ["0", "1"]);
    for (field, window) in [("0", 60_000), ("1", 3_600_000)] {
        let (count, end) = stored[field];
        assert_eq!(count, 2);
        assert!(
            end >= before + window && end <= after + window,
            "{field}: {end} not within [{before}, {after}] + {window}"
        );
    }
    let ttl = target.pttl(&key);
    assert!(ttl > 3_590_000 && ttl <= 3_600_000, "{ttl}");
}

scenario!(corrupt_state_fails_without_change redis);

async fn corrupt_state_fails_without_change(target: Target) {
    let coordination = target.coordination("corrupt").await;
    let limiter = Stacked::new(
        &coordination,
        "api",
        [policy("minute", 5, MINUTE), policy("hour", 10, HOUR)],
    )
    .expect("valid");
    let key = storage_key(&coordination, "st", "api", "k");

    target.query::<()>(&[b"SET", &key, b"not a hash"]);
    for permits in [0, 1] {
        let err = limiter
            .try_acquire(b"k", permits)
            .await
            .expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    }
    assert_eq!(target.query::<String>(&[b"GET", &key]), "not a hash");
    target.query::<()>(&[b"DEL", &key]);

    let future = (server_ms(&coordination).await + 60_000).to_string();
    let valid = format!("1:{future}");
    for bad in [
        "garbage",
        "5",
        "1:",
        ":5",
        "-1:5",
        "1.5:5",
        "1:5:6",
        " 1:5",
        "4503599627370496:5",
        "1:9007199254740992",
        "99999999999999999999999:5",
    ] {
        target.query::<()>(&[b"HSET", &key, b"1", valid.as_bytes(), b"0", bad.as_bytes()]);
        let err = limiter.try_acquire(b"k", 1).await.expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{bad}: {err}");
        let fields: BTreeMap<String, String> = target.query(&[b"HGETALL", &key]);
        assert_eq!(fields.len(), 2, "{bad}");
        assert_eq!(fields["0"], bad, "nothing written");
        assert_eq!(fields["1"], valid, "nothing written");
    }
    target.query::<()>(&[b"DEL", &key]);

    // Windows that lost their expiry get it back, even from a probe.
    target.query::<()>(&[b"HSET", &key, b"0", valid.as_bytes()]);
    assert_eq!(target.pttl(&key), -1);
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert_eq!(remaining(&probe), [4, 10]);
    let ttl = target.pttl(&key);
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
    // Windows that all ended and lost their expiry are deleted.
    target.query::<()>(&[b"HSET", &key, b"0", b"3:1000", b"1", b"3:2000"]);
    target.query::<()>(&[b"PERSIST", &key]);
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert_eq!(remaining(&probe), [5, 10], "ended windows count nothing");
    assert_eq!(target.query::<i64>(&[b"EXISTS", &key]), 0);
}

#[tokio::test]
async fn invalid_configuration_is_rejected_at_construction() {
    let coordination = Coordination::memory();
    let ok = || policy("ok", 1, SECOND);
    let too_many: Vec<_> = (0..=MAX_STACKED_POLICIES)
        .map(|i| policy(&format!("p{i}"), 1, SECOND))
        .collect();
    let cases: Vec<(&str, Vec<RateLimitPolicy>)> = vec![
        ("no policy", vec![]),
        ("17 policies", too_many),
        ("limit 0", vec![ok(), policy("zero", 0, SECOND)]),
        ("limit 2^52", vec![policy("huge", 1 << 52, SECOND)]),
        ("limit u64::MAX", vec![policy("huge", u64::MAX, SECOND)]),
        ("window 0", vec![policy("zero", 1, Duration::ZERO)]),
        (
            "window 999 µs",
            vec![policy("short", 1, Duration::from_micros(999))],
        ),
        (
            "window 2^40 + 1 ms",
            vec![policy("long", 1, Duration::from_millis((1 << 40) + 1))],
        ),
        ("duplicate names", vec![ok(), policy("ok", 5, MINUTE)]),
        (
            "mixed units",
            vec![
                ok(),
                policy("bytes", 5, MINUTE).with_unit(QuotaUnit::ContentBytes),
            ],
        ),
    ];
    for (case, policies) in cases {
        let err = Stacked::new(&coordination, "api", policies).expect_err(case);
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{case}: {err}");
    }
    // The bound reads as a duration, not as a run of digits in milliseconds.
    let err = Stacked::new(&coordination, "api", [policy("long", 1, Duration::MAX)])
        .expect_err("invalid");
    assert!(
        err.to_string().contains("2^40 ms (about 34 years)"),
        "{err}"
    );
    // The bounds themselves are valid; sub-millisecond parts are dropped.
    let most: Vec<_> = (0..MAX_STACKED_POLICIES)
        .map(|i| {
            policy(
                &format!("p{i}"),
                (1 << 52) - 1,
                Duration::from_millis(1 << 40),
            )
        })
        .collect();
    let limiter = Stacked::new(&coordination, "api", most).expect("valid");
    assert_eq!(limiter.policies().len(), MAX_STACKED_POLICIES);
    let limiter = Stacked::new(
        &coordination,
        "api",
        [policy("odd", 1, Duration::from_micros(1_500))],
    )
    .expect("valid");
    assert_eq!(limiter.policy().window(), Duration::from_millis(1));
}

// ---------------------------------------------------------------------------------------------

scenario!(concurrent_callers_count_grants_exactly);

async fn concurrent_callers_count_grants_exactly(target: Target) {
    const CALLERS: usize = 8;
    const ATTEMPTS: usize = 10;
    let first = target.coordination("concurrent").await;
    // Several independent connections (separate handles) sharing one prefix, as replicas do.
    let handles = target.handles(&first, CALLERS).await;
    let policies = [policy("minute", 50, MINUTE), policy("hour", 30, HOUR)];
    let granted = concurrent_grants(handles, ATTEMPTS, |coordination| {
        Stacked::new(coordination, "api", policies.clone()).expect("valid")
    })
    .await;
    assert_eq!(
        granted, 30,
        "{CALLERS}×{ATTEMPTS} attempts against 30 per hour"
    );
    // Every grant counted in both windows, and no rejection counted in either.
    let limiter = Stacked::new(&first, "api", policies).expect("valid");
    let probe = limiter.try_acquire(b"hot", 0).await.expect("probe");
    assert_eq!(remaining(&probe), [20, 0]);
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_queued_request_waits_for_the_longest_window() {
    let stacked = Stacked::new(
        &Coordination::memory(),
        "api",
        [policy("second", 1, SECOND), policy("ten", 1, 10 * SECOND)],
    )
    .expect("valid");
    let limiter = RateLimiter::from(stacked).with_queue(5, QueueOrder::OldestFirst);
    assert_eq!(limiter.policies().len(), 2);
    assert_eq!(limiter.policy().name(), "api/second", "the first policy");
    assert!(is_granted(&limiter, b"k", 1).await);
    let start = tokio::time::Instant::now();
    let decision = limiter.acquire(b"k", 1, MINUTE).await.expect("wait");
    assert!(decision.is_granted());
    assert_eq!(
        start.elapsed(),
        10 * SECOND,
        "woken when both windows ended"
    );
    assert_eq!(remaining(&decision), [0, 0]);
}

#[tokio::test(start_paused = true)]
async fn the_deny_cache_keeps_every_policy_state() {
    let stacked = Stacked::new(
        &Coordination::memory(),
        "api",
        [policy("second", 1, SECOND), policy("minute", 5, MINUTE)],
    )
    .expect("valid");
    let limiter = RateLimiter::from(stacked).with_deny_cache(10);
    assert!(is_granted(&limiter, b"k", 1).await);
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(SECOND));
    tokio::time::advance(Duration::from_millis(400)).await;
    let cached = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(!cached.is_granted());
    assert_eq!(cached.retry_after(), Some(Duration::from_millis(600)));
    assert_eq!(remaining(&cached), [0, 4]);
    let resets: Vec<_> = cached
        .policy_states()
        .iter()
        .map(|s| s.reset_after())
        .collect();
    assert_eq!(
        resets,
        [
            Duration::from_millis(600),
            MINUTE - Duration::from_millis(400)
        ]
    );
    tokio::time::advance(Duration::from_millis(600)).await;
    assert!(is_granted(&limiter, b"k", 1).await);
    let stats = limiter.statistics();
    assert_eq!((stats.granted(), stats.rejected()), (2, 2));
}

scenario!(a_shadow_policy_never_rejects_and_counts_only_what_it_would_admit);

/// A shadow policy beside an enforced one: a request it alone would reject is granted,
/// counted by the enforced policy and not by it, and the decision says so; the enforced
/// policy still rejects (without a retry time of the shadow's), and a request beyond the
/// shadow's limit alone is no impossible request.
async fn a_shadow_policy_never_rejects_and_counts_only_what_it_would_admit(target: Target) {
    let coordination = target.coordination("shadow-policy").await;
    let limiter = Stacked::new(
        &coordination,
        "api",
        [
            policy("minute", 4, MINUTE),
            policy("burst", 2, HOUR).shadow(),
        ],
    )
    .expect("valid");
    assert!(!limiter.policies()[0].is_shadow());
    assert!(limiter.policies()[1].is_shadow());
    let mut seen = Vec::new();
    for _ in 0..5 {
        let decision = limiter.try_acquire(b"k", 1).await.expect("decided");
        seen.push((
            decision.is_granted(),
            decision.is_shadow_rejection(),
            remaining(&decision),
        ));
    }
    assert_eq!(
        seen,
        [
            (true, false, vec![3, 1]),
            (true, false, vec![2, 0]),
            // The shadow policy would reject: granted, counted by the enforced one only.
            (true, true, vec![1, 0]),
            (true, true, vec![0, 0]),
            // The enforced policy rejects.
            (false, false, vec![0, 0]),
        ]
    );
    let rejected = limiter.try_acquire(b"k", 1).await.expect("decided");
    let wait = rejected.retry_after().expect("a retry time");
    assert!(
        wait <= MINUTE,
        "the enforced policy's wait, not the shadow's hour: {wait:?}"
    );

    // Three permits: beyond the shadow's limit of 2 only, so granted (on a fresh key).
    let big = limiter.try_acquire(b"big", 3).await.expect("decided");
    assert!(big.is_granted() && big.is_shadow_rejection(), "{big:?}");
    assert_eq!(remaining(&big), [1, 2]);
}

scenario!(a_stack_of_shadow_policies_only_grants_everything);

/// Every policy a shadow: every request is granted, those the policies would reject counted
/// nowhere (and nothing written for them), whatever they ask.
async fn a_stack_of_shadow_policies_only_grants_everything(target: Target) {
    let coordination = target.coordination("all-shadow").await;
    let limiter = Stacked::new(
        &coordination,
        "api",
        [
            policy("minute", 1, MINUTE).shadow(),
            policy("hour", 2, HOUR).shadow(),
        ],
    )
    .expect("valid");
    let first = limiter.try_acquire(b"k", 1).await.expect("decided");
    assert!(first.is_granted() && !first.is_shadow_rejection());
    assert_eq!(remaining(&first), [0, 1]);
    for permits in [1, 5] {
        let next = limiter.try_acquire(b"k", permits).await.expect("decided");
        assert!(next.is_granted() && next.is_shadow_rejection(), "{next:?}");
    }
    // The hour counted the second request of one permit (it admits it), the minute did not.
    let probe = limiter.try_acquire(b"k", 0).await.expect("decided");
    assert_eq!(remaining(&probe), [0, 0]);
}
