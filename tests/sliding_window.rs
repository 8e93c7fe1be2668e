//! The sliding-window limiter against every server kind, the cluster and the memory backend.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold::backend::memory::MemoryBackend;
use leasehold::coordination::rate_limit::SlidingWindow;
use leasehold::{Coordination, ErrorKind};
use support::target::{Target, is_granted, scenario, server_ms, storage_key};

/// The segments of a sliding-window key: segment end (ms since the epoch) → count, without
/// the summary fields.
fn segments(target: Target, key: &[u8]) -> BTreeMap<u64, u64> {
    let fields: BTreeMap<String, String> = target.query(&[b"HGETALL", key]);
    fields
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "n" | "o"))
        .map(|(end, count)| {
            (
                end.parse().expect("a segment end"),
                count.parse().expect("a count"),
            )
        })
        .collect()
}

/// The summary fields of a sliding-window key: the sum of its counts (`n`) and its oldest
/// segment's end (`o`).
fn summary(target: Target, key: &[u8]) -> (Option<u64>, Option<u64>) {
    target.query(&[b"HMGET", key, b"n", b"o"])
}

const MINUTE: Duration = Duration::from_secs(60);
const MS: Duration = Duration::from_millis(1);

// ---------------------------------------------------------------------------------------------

scenario!(admits_exactly_the_limit_then_rejects_with_a_retry_time);

async fn admits_exactly_the_limit_then_rejects_with_a_retry_time(target: Target) {
    let coordination = target.coordination("exact").await;
    // Segments of 10 s: a permit stays counted between 60 and 70 s.
    let limiter = SlidingWindow::new(&coordination, "api", 3, MINUTE, 6).expect("valid");
    assert_eq!(limiter.policy().quota(), 3);
    assert_eq!(limiter.policy().window(), MINUTE);
    let counted = MINUTE / 2..=MINUTE + MINUTE / 6;
    for remaining in [2, 1, 0] {
        let decision = limiter.try_acquire(b"client", 1).await.expect("acquire");
        assert!(decision.is_granted());
        assert_eq!(decision.remaining(), remaining);
        assert_eq!(decision.limit(), 3);
        assert_eq!(decision.retry_after(), None);
        assert!(counted.contains(&decision.reset_after()), "{decision:?}");
    }
    for _ in 0..3 {
        let rejected = limiter.try_acquire(b"client", 1).await.expect("acquire");
        assert!(!rejected.is_granted());
        assert_eq!(rejected.remaining(), 0);
        let wait = rejected
            .retry_after()
            .expect("a request that can succeed later");
        assert!(counted.contains(&wait), "{rejected:?}");
        assert!(wait <= rejected.reset_after(), "{rejected:?}");
    }
    // Another key is independent.
    assert!(is_granted(&limiter, b"other", 1).await);
}

// ---------------------------------------------------------------------------------------------

scenario!(grants_too_large_to_pack_arrive_whole);

/// The script packs a grant into one integer (remaining * 2^32 + ms, or by the radix
/// window + segment + 1 past 2^21 remaining or 2^32 ms) while that stays below 2^53; a
/// larger one comes as a table. All must read the same.
async fn grants_too_large_to_pack_arrive_whole(target: Target) {
    let coordination = target.coordination("unpacked").await;
    let wide = SlidingWindow::new(&coordination, "wide", 1 << 21, MINUTE, 6).expect("valid");
    let decision = wide.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(decision.remaining(), (1 << 21) - 1);
    // 2^22 - 1 remaining, past 2^21: packed by the window and a segment, a radix the script
    // and the step must agree on to the unit.
    let wider = SlidingWindow::new(&coordination, "wider", 1 << 22, MINUTE, 6).expect("valid");
    let decision = wider.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(decision.remaining(), (1 << 22) - 1);
    assert!(decision.reset_after() > MINUTE / 2, "{decision:?}");
    assert!(
        decision.reset_after() <= MINUTE + MINUTE / 6,
        "{decision:?}"
    );
    // A window of 60 days: more than 2^32 ms (49.7 days), packed by the window.
    let days = MINUTE * 60 * 24 * 60;
    let long = SlidingWindow::new(&coordination, "long", 3, days, 1).expect("valid");
    let decision = long.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(decision.remaining(), 2);
    assert!(decision.reset_after() > days - MINUTE, "{decision:?}");
    assert!(decision.reset_after() <= days * 2, "{decision:?}");
    // The largest limit: 2^52 - 2 remaining, times 70,001, is far past 2^53.
    let huge = SlidingWindow::new(&coordination, "huge", (1 << 52) - 1, MINUTE, 6).expect("valid");
    let decision = huge.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(decision.remaining(), (1 << 52) - 2);
    assert!(decision.reset_after() > MINUTE / 2, "{decision:?}");
    assert!(
        decision.reset_after() <= MINUTE + MINUTE / 6,
        "{decision:?}"
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(weighted_permits_and_the_limit_boundaries);

async fn weighted_permits_and_the_limit_boundaries(target: Target) {
    let coordination = target.coordination("weights").await;
    let limiter = SlidingWindow::new(&coordination, "api", 5, MINUTE, 6).expect("valid");

    // More than the limit: rejected, no retry time, nothing consumed.
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
    assert_eq!(probe.remaining(), 5);
    assert_eq!(probe.reset_after(), Duration::ZERO);

    assert_eq!(
        limiter
            .try_acquire(b"k", 3)
            .await
            .expect("acquire")
            .remaining(),
        2
    );
    // 3 more would pass the limit: rejected and not counted.
    let rejected = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert!(rejected.retry_after().is_some());
    assert_eq!(rejected.remaining(), 2);
    // Exactly reaching the limit is allowed.
    let last = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(last.is_granted());
    assert_eq!(last.remaining(), 0);
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted(), "a probe is never over the limit");
    assert_eq!(probe.remaining(), 0);
    assert!(probe.reset_after() > MINUTE / 2);
    // Still no retry time for the impossible, but the state is reported.
    let impossible = limiter.try_acquire(b"k", 6).await.expect("acquire");
    assert_eq!(impossible.retry_after(), None);
    assert!(impossible.reset_after() > MINUTE / 2);

    // permits == limit on a fresh key.
    let whole = limiter.try_acquire(b"fresh", 5).await.expect("acquire");
    assert!(whole.is_granted());
    assert_eq!(whole.remaining(), 0);
}

// ---------------------------------------------------------------------------------------------

scenario!(retry_after_is_exact_and_frees_the_oldest_segment_first redis);

async fn retry_after_is_exact_and_frees_the_oldest_segment_first(target: Target) {
    let coordination = target.coordination("retry").await;
    // Segments of 500 ms: a loaded machine's pause of a few hundred milliseconds moves no
    // step into another segment than the one it is meant for.
    let window = Duration::from_millis(1500);
    let limiter = SlidingWindow::new(&coordination, "api", 3, window, 3).expect("valid");
    let started = Instant::now();
    assert!(is_granted(&limiter, b"k", 2).await);
    // One segment later, the next permit lands in a later segment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(is_granted(&limiter, b"k", 1).await);

    let rejected = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(!rejected.is_granted(), "{rejected:?}");
    let wait = rejected.retry_after().expect("retry time");
    // Only the first segment must leave, before the second one does.
    assert!(wait < rejected.reset_after(), "{rejected:?}");
    // Never early: the first permits stay counted a whole window after their grant.
    assert!(wait + started.elapsed() + MS >= window, "{rejected:?}");

    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    let granted = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(granted.is_granted(), "{granted:?}");
    assert_eq!(granted.remaining(), 0, "the second segment still counts");
}

#[tokio::test(start_paused = true)]
async fn memory_frees_the_oldest_segments_first_at_the_exact_time() {
    let backend = MemoryBackend::new();
    let limiter =
        SlidingWindow::new(&backend.clone().into(), "api", 10, SECOND, 10).expect("valid");
    // At a segment boundary B, so every time below is exact.
    align_to_segment(&backend, SEGMENT).await;
    let first = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert_eq!(first.remaining(), 7);
    // Counted in the segment ending at B + 100 ms, until B + 1100 ms.
    assert_eq!(first.reset_after(), ms(1100));

    tokio::time::advance(ms(250)).await;
    let second = limiter.try_acquire(b"k", 5).await.expect("acquire");
    assert_eq!(second.remaining(), 2);
    // The segment ending at B + 300 ms, until B + 1300 ms.
    assert_eq!(second.reset_after(), ms(1050));

    tokio::time::advance(ms(100)).await;
    // B + 350 ms: 4 permits need 2 freed, the first segment frees 3 at B + 1100 ms.
    let rejected = limiter.try_acquire(b"k", 4).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert_eq!(rejected.remaining(), 2);
    assert_eq!(rejected.retry_after(), Some(ms(750)));
    assert_eq!(rejected.reset_after(), ms(950));
    // 6 need both segments freed.
    let rejected = limiter.try_acquire(b"k", 6).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(ms(950)));

    tokio::time::advance(ms(749)).await;
    let early = limiter.try_acquire(b"k", 4).await.expect("acquire");
    assert!(!early.is_granted());
    assert_eq!(early.retry_after(), Some(ms(1)));
    tokio::time::advance(ms(1)).await;
    let granted = limiter.try_acquire(b"k", 4).await.expect("acquire");
    assert!(granted.is_granted());
    assert_eq!(granted.remaining(), 1, "the second segment still counts");
    // Now in the segment ending at B + 1200 ms, until B + 2200 ms.
    assert_eq!(granted.reset_after(), ms(1100));
}

#[tokio::test(start_paused = true)]
async fn memory_permits_are_never_freed_early_and_the_key_expires() {
    let backend = MemoryBackend::new();
    let limiter = SlidingWindow::new(&backend.clone().into(), "api", 2, SECOND, 10).expect("valid");
    // A probe or a rejection creates nothing.
    limiter.try_acquire(b"k", 0).await.expect("probe");
    limiter.try_acquire(b"k", 3).await.expect("impossible");
    assert_eq!(backend.len(), 0);

    // Just after a boundary: the request is rounded forward to its segment's end.
    align_to_segment(&backend, SEGMENT).await;
    tokio::time::advance(ms(1)).await;
    let granted = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert_eq!(granted.reset_after(), ms(1099));
    assert_eq!(backend.len(), 1);
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(ms(1099)));
    assert_eq!(backend.len(), 1);

    tokio::time::advance(ms(1098)).await;
    assert!(!is_granted(&limiter, b"k", 1).await);
    tokio::time::advance(ms(1)).await;
    assert_eq!(
        backend.len(),
        0,
        "the key expires when its last segment leaves"
    );
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert_eq!(
        (probe.remaining(), probe.reset_after()),
        (2, Duration::ZERO)
    );
    assert!(is_granted(&limiter, b"k", 2).await);
}

const SECOND: Duration = Duration::from_secs(1);
const SEGMENT: Duration = Duration::from_millis(100);

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// Advances paused time to the next segment boundary of the backend's epoch clock.
async fn align_to_segment(backend: &MemoryBackend, segment: Duration) {
    let into = backend.now().as_nanos() % segment.as_nanos();
    if into != 0 {
        let left = u64::try_from(segment.as_nanos() - into).expect("fits");
        tokio::time::advance(Duration::from_nanos(left)).await;
    }
    assert_eq!(backend.now().as_nanos() % segment.as_nanos(), 0);
}

// ---------------------------------------------------------------------------------------------

scenario!(storage_is_one_expiring_hash_on_the_servers_clock redis);

async fn storage_is_one_expiring_hash_on_the_servers_clock(target: Target) {
    let coordination = target.coordination("storage").await;
    let limiter = SlidingWindow::new(&coordination, "api", 5, MINUTE, 6).expect("valid");
    let key = storage_key(&coordination, "sw", "api", "\u{0}binary");
    // A probe or a rejection creates nothing.
    limiter.try_acquire(b"\x00binary", 0).await.expect("probe");
    limiter
        .try_acquire(b"\x00binary", 6)
        .await
        .expect("impossible");
    assert_eq!(target.query::<i64>(&[b"EXISTS", &key]), 0);

    let before = server_ms(&coordination).await;
    limiter
        .try_acquire(b"\x00binary", 2)
        .await
        .expect("acquire");
    let after = server_ms(&coordination).await;
    limiter
        .try_acquire(b"\x00binary", 4)
        .await
        .expect("rejected");
    assert_eq!(target.query::<String>(&[b"TYPE", &key]), "hash");
    // One segment: the end of the server's 10 s segment holding the request; and the
    // summary: its count, and it as the oldest segment.
    let stored = segments(target, &key);
    let (&end, &count) = stored.iter().next().expect("one segment");
    assert_eq!((stored.len(), count), (1, 2), "{stored:?}");
    assert_eq!(summary(target, &key), (Some(2), Some(end)));
    assert_eq!(target.query::<i64>(&[b"HLEN", &key]), 3);
    let segment_end = |t: u64| t - t % 10_000 + 10_000;
    assert!(
        end == segment_end(before) || end == segment_end(after),
        "{end} for server times {before}..={after}"
    );
    // It expires when that segment leaves the window.
    target.assert_expires_at(&key, end + 60_000);
    let ttl = target.pttl(&key);
    assert!(ttl > 50_000 && ttl <= 70_000, "{ttl}");
}

scenario!(a_grant_prunes_the_segments_that_left_the_window redis);

async fn a_grant_prunes_the_segments_that_left_the_window(target: Target) {
    let coordination = target.coordination("prune").await;
    // Segments of 500 ms: room for a loaded machine's pause between the steps.
    let limiter = SlidingWindow::new(&coordination, "api", 2, ms(1000), 2).expect("valid");
    let key = storage_key(&coordination, "sw", "api", "k");
    assert!(is_granted(&limiter, b"k", 1).await);
    tokio::time::sleep(ms(500)).await;
    assert!(is_granted(&limiter, b"k", 1).await);
    let before = segments(target, &key);
    assert_eq!(before.len(), 2, "{before:?}");

    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    let wait = rejected.retry_after().expect("retry time");
    tokio::time::sleep(wait + ms(5)).await;
    assert!(is_granted(&limiter, b"k", 1).await);
    let after = segments(target, &key);
    let (oldest, second) = (before.keys().next(), before.keys().nth(1));
    assert!(!after.contains_key(oldest.expect("two")), "{after:?}");
    assert!(after.contains_key(second.expect("two")), "{after:?}");
    assert_eq!(after.len(), 2, "{after:?}");
    // The summary was rebuilt from the segments left.
    assert_eq!(
        summary(target, &key),
        (Some(after.values().sum()), after.keys().next().copied())
    );
}

scenario!(the_summary_follows_the_segments_and_heals redis);

/// Grants and probes read the summary (`n`, `o`) while the oldest segment is in the window;
/// it must always match the segments, and a summary that does not read as numbers, or a
/// hash without one, must be rebuilt rather than trusted.
async fn the_summary_follows_the_segments_and_heals(target: Target) {
    let coordination = target.coordination("summary").await;
    // Segments of 100 ms in a window of 2 s: the steps below take a few segments each, and
    // none leaves the window before the test ends.
    let limiter = SlidingWindow::new(&coordination, "api", 10, ms(2000), 20).expect("valid");
    let key = storage_key(&coordination, "sw", "api", "k");
    let check = || {
        let stored = segments(target, &key);
        assert_eq!(
            summary(target, &key),
            (Some(stored.values().sum()), stored.keys().next().copied()),
            "{stored:?}"
        );
    };
    for permits in [1, 2, 3] {
        assert!(is_granted(&limiter, b"k", permits).await);
        check();
        tokio::time::sleep(ms(100)).await;
    }
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert_eq!(probe.remaining(), 4);
    assert!(
        probe.reset_after() > ms(1500) && probe.reset_after() <= ms(2100),
        "{probe:?}"
    );

    // A summary that does not read as numbers is rebuilt by the next grant; so is one that
    // reads as a number but is no integer to HINCRBY.
    for garbled in ["lots", "1e3"] {
        let () = target.query(&[b"HSET", &key, b"n", garbled.as_bytes()]);
        assert!(is_granted(&limiter, b"k", 1).await, "{garbled}");
        check();
    }
    // So is a hash without one (as an older version of the script left it).
    let () = target.query(&[b"HDEL", &key, b"n", b"o"]);
    let decision = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    check();
    // Whatever the summary said, the segments decide: 9 of 10 are taken, not fewer.
    assert_eq!(
        decision.remaining(),
        10 - segments(target, &key).values().sum::<u64>()
    );
    let rejected = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert!(!rejected.is_granted(), "{rejected:?}");

    // A segment count that HINCRBY refuses fails the step with nothing changed, the
    // summary's count included. Both possible current segments (of a minute) hold one.
    let minute = SlidingWindow::new(&coordination, "minute", 10, MINUTE, 1).expect("valid");
    let minute_key = storage_key(&coordination, "sw", "minute", "k");
    assert!(is_granted(&minute, b"k", 1).await);
    let now = server_ms(&coordination).await;
    let end = now - now % 60_000 + 60_000;
    for field in [end.to_string(), (end + 60_000).to_string()] {
        let () = target.query(&[b"HSET", &minute_key, field.as_bytes(), b"1e3"]);
    }
    let err = minute.try_acquire(b"k", 1).await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert_eq!(summary(target, &minute_key).0, Some(1));
}

scenario!(corrupt_state_fails_without_change redis);

async fn corrupt_state_fails_without_change(target: Target) {
    let coordination = target.coordination("corrupt").await;
    let limiter = SlidingWindow::new(&coordination, "api", 5, MINUTE, 6).expect("valid");
    let key = storage_key(&coordination, "sw", "api", "k");

    let () = target.query(&[b"SET", &key, b"not a hash"]);
    let err = limiter.try_acquire(b"k", 1).await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert_eq!(target.query::<String>(&[b"GET", &key]), "not a hash");

    let future = (server_ms(&coordination).await + 1_000).to_string();
    for (field, value) in [
        ("abc", "1"),
        (future.as_str(), "x"),
        (future.as_str(), "-1"),
        (future.as_str(), "1.5"),
        ("1.5", "1"),
        ("99999999999999999999", "1"),
    ] {
        let () = target.query(&[b"DEL", &key]);
        let () = target.query(&[b"HSET", &key, field.as_bytes(), value.as_bytes()]);
        for permits in [0, 1] {
            let err = limiter
                .try_acquire(b"k", permits)
                .await
                .expect_err("corrupt");
            assert_eq!(
                err.kind(),
                ErrorKind::CorruptState,
                "{field}={value}: {err}"
            );
        }
        let stored: BTreeMap<String, String> = target.query(&[b"HGETALL", &key]);
        assert_eq!(stored.len(), 1);
        assert_eq!(stored.get(field).map(String::as_str), Some(value));
        assert_eq!(target.pttl(&key), -1);
    }

    // A count that reads as a number but is no integer to HINCRBY: a grant fails before any
    // write (the stale segment is not pruned). Both possible current segments hold one.
    let big = SlidingWindow::new(&coordination, "big", 1_000_000, MINUTE, 1).expect("valid");
    let big_key = storage_key(&coordination, "sw", "big", "k");
    let now = server_ms(&coordination).await;
    let end = now - now % 60_000 + 60_000;
    let fields = [
        end.to_string(),
        (end + 60_000).to_string(),
        (now - 120_000).to_string(),
    ];
    for (field, value) in fields.iter().zip(["1e3", "1e3", "1"]) {
        let () = target.query(&[b"HSET", &big_key, field.as_bytes(), value.as_bytes()]);
    }
    let err = big.try_acquire(b"k", 1).await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    let stored: BTreeMap<String, String> = target.query(&[b"HGETALL", &big_key]);
    assert_eq!(stored.len(), 3, "{stored:?}");
    assert_eq!(stored.get(&fields[0]).map(String::as_str), Some("1e3"));

    // Segments that lost their expiry are given it back instead of living forever.
    let () = target.query(&[b"DEL", &key]);
    let () = target.query(&[b"HSET", &key, future.as_bytes(), b"5"]);
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert!(rejected.retry_after().is_some_and(|d| d <= MINUTE + SECOND));
    target.assert_expires_at(&key, future.parse::<u64>().expect("ms") + 60_000);
    // ... and stale ones are dropped at once, even by a probe.
    let stale = (server_ms(&coordination).await - 120_000).to_string();
    let () = target.query(&[b"DEL", &key]);
    let () = target.query(&[b"HSET", &key, stale.as_bytes(), b"5"]);
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert_eq!(
        (probe.remaining(), probe.reset_after()),
        (5, Duration::ZERO)
    );
    assert_eq!(target.query::<i64>(&[b"EXISTS", &key]), 0);
}

#[tokio::test]
async fn invalid_configuration_is_rejected_at_construction() {
    let coordination = Coordination::memory();
    for (limit, window, segments) in [
        (0, MINUTE, 6),
        (1 << 52, MINUTE, 6),
        (u64::MAX, MINUTE, 6),
        (1, Duration::ZERO, 1),
        (1, Duration::from_micros(999), 1),
        (1, Duration::from_micros(1500), 1),
        (1, MINUTE, 0),
        (1, Duration::from_secs(100), 1001),
        (1, Duration::from_millis(1000), 3),
        (1, Duration::from_millis(5), 10),
        (1, Duration::from_millis((1 << 40) + 1), 1),
    ] {
        let err =
            SlidingWindow::new(&coordination, "api", limit, window, segments).expect_err("invalid");
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidArgument,
            "{limit} {window:?} {segments}"
        );
    }
    // The bound reads as a duration, not as a run of digits in milliseconds.
    let err = SlidingWindow::new(&coordination, "api", 1, Duration::MAX, 1).expect_err("invalid");
    assert!(
        err.to_string().contains("2^40 ms (about 34 years)"),
        "{err}"
    );
    for (limit, window, segments) in [
        ((1 << 52) - 1, Duration::from_millis(1 << 40), 1),
        (1, MS, 1),
        (1, SECOND, 1000),
    ] {
        SlidingWindow::new(&coordination, "api", limit, window, segments).expect("valid");
    }
}
