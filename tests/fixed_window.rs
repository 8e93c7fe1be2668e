//! The fixed-window limiter against every server kind, the cluster, the INCREX fast path
//! (test module) and the memory backend.

mod support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::backend::key_slot;
use leasehold::backend::redis::{INCREX_REPROBE_AFTER, RedisBackend};
use leasehold::coordination::rate_limit::{FixedWindow, RateLimiter};
use leasehold::{Coordination, ErrorKind};
use support::target::{
    Target, command_calls, concurrent_grants, is_granted, scenario, storage_key,
};
use support::{Cluster, Server, ServerKind};

/// Every target, the INCREX fast path included (`scenario!` alone leaves it out).
macro_rules! every_target {
    ($scenario:ident) => {
        scenario!($scenario:
            redis7 => Target::Server(ServerKind::Redis7),
            redis8 => Target::Server(ServerKind::Redis8),
            valkey8 => Target::Server(ServerKind::Valkey8),
            increx => Target::Increx,
            cluster => Target::Cluster,
            memory => Target::Memory);
    };
}

/// Redis keeps a key until strictly after its expiry time: a window's permits are free one
/// millisecond after its TTL, and retry times say so.
const EXPIRY_MS: Duration = Duration::from_millis(1);

const MINUTE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------

every_target!(admits_exactly_the_limit_then_rejects_with_a_retry_time);

async fn admits_exactly_the_limit_then_rejects_with_a_retry_time(target: Target) {
    let coordination = target.coordination("exact").await;
    let limiter = FixedWindow::new(&coordination, "api", 3, MINUTE).expect("valid");
    for remaining in [2, 1, 0] {
        let decision = limiter.try_acquire(b"client", 1).await.expect("acquire");
        assert!(decision.is_granted());
        assert_eq!(decision.remaining(), remaining);
        assert_eq!(decision.limit(), 3);
        assert_eq!(decision.retry_after(), None);
        assert!(decision.reset_after() <= MINUTE && decision.reset_after() > MINUTE / 2);
    }
    for _ in 0..3 {
        let rejected = limiter.try_acquire(b"client", 1).await.expect("acquire");
        assert!(!rejected.is_granted());
        assert_eq!(rejected.remaining(), 0);
        let wait = rejected
            .retry_after()
            .expect("a request that can succeed later");
        assert!(
            wait > Duration::ZERO && wait <= MINUTE + EXPIRY_MS,
            "{wait:?}"
        );
        // Redis frees a key one millisecond after its TTL; the memory backend at its end.
        let past_expiry = match target {
            Target::Memory => Duration::ZERO,
            _ => EXPIRY_MS,
        };
        assert_eq!(wait, rejected.reset_after() + past_expiry);
    }
    // Another key is independent.
    assert!(is_granted(&limiter, b"other", 1).await);
}

// ---------------------------------------------------------------------------------------------

every_target!(weighted_permits_and_the_limit_boundaries);

async fn weighted_permits_and_the_limit_boundaries(target: Target) {
    let coordination = target.coordination("weights").await;
    let limiter = FixedWindow::new(&coordination, "api", 5, MINUTE).expect("valid");

    // More than the limit: rejected, no retry time, nothing consumed, nothing created.
    let impossible = limiter.try_acquire(b"k", 6).await.expect("acquire");
    assert!(!impossible.is_granted());
    assert_eq!(impossible.retry_after(), None);
    assert_eq!(impossible.remaining(), 5);
    let huge = limiter.try_acquire(b"k", u64::MAX).await.expect("acquire");
    assert!(!huge.is_granted());
    assert_eq!(huge.retry_after(), None);

    // A probe consumes nothing.
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted());
    assert_eq!(probe.remaining(), 5);

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

    // permits == limit on a fresh key.
    assert!(is_granted(&limiter, b"fresh", 5).await);

    // Counts past 2^20 and 2^32 (the script packs a grant into the one integer
    // count * 2^32 + ms while the count is below 2^21).
    let large = FixedWindow::new(&coordination, "large", 1 << 40, MINUTE).expect("valid");
    for (permits, remaining) in [
        (1 << 19, (1 << 40) - (1 << 19)),
        (1 << 33, (1 << 40) - (1 << 19) - (1 << 33)),
    ] {
        let decision = large.try_acquire(b"k", permits).await.expect("acquire");
        assert!(decision.is_granted());
        assert_eq!(decision.remaining(), remaining);
        assert!(decision.reset_after() <= MINUTE && decision.reset_after() > MINUTE / 2);
    }
    // On either side of the packing's bound: a new window's first grant of 2^21 - 1 permits
    // packs, one of 2^21 arrives as a table. Both read the same.
    for (key, permits) in [(&b"below"[..], (1 << 21) - 1), (b"above", 1 << 21)] {
        let decision = large.try_acquire(key, permits).await.expect("acquire");
        assert!(decision.is_granted());
        assert_eq!(decision.remaining(), (1 << 40) - permits);
        assert!(decision.reset_after() <= MINUTE && decision.reset_after() > MINUTE / 2);
    }
}

// ---------------------------------------------------------------------------------------------

scenario!(the_first_request_fixes_the_windows_end:
    redis7 => Target::Server(ServerKind::Redis7),
    redis8 => Target::Server(ServerKind::Redis8),
    valkey8 => Target::Server(ServerKind::Valkey8),
    increx => Target::Increx,
    cluster => Target::Cluster);

async fn the_first_request_fixes_the_windows_end(target: Target) {
    let coordination = target.coordination("window-end").await;
    // A window long enough that a loaded machine's pause cannot end it between the steps.
    let limiter =
        FixedWindow::new(&coordination, "api", 10, Duration::from_millis(1500)).expect("valid");
    let first = limiter.try_acquire(b"k", 1).await.expect("acquire");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = limiter.try_acquire(b"k", 1).await.expect("acquire");
    // At least 50 ms passed on every clock: a window that later requests moved would not
    // have shrunk by that much (1 ms for PTTL rounding).
    assert!(
        second.reset_after() + Duration::from_millis(49) <= first.reset_after(),
        "{first:?} then {second:?}"
    );
    // Exhaust it, then wait for the server's end of the window: the quota is back.
    let rejected = limiter.try_acquire(b"k", 9).await.expect("acquire");
    assert!(!rejected.is_granted());
    let wait = rejected.retry_after().expect("retry time");
    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    let fresh = limiter.try_acquire(b"k", 9).await.expect("acquire");
    assert!(fresh.is_granted(), "{fresh:?}");
    assert_eq!(fresh.remaining(), 1);
}

#[tokio::test(start_paused = true)]
async fn memory_windows_follow_the_paused_clock() {
    let coordination = Coordination::memory();
    let limiter = FixedWindow::new(&coordination, "api", 2, MINUTE).expect("valid");
    assert!(is_granted(&limiter, b"k", 1).await);
    // The second grant counts in the same entry, which keeps the window's end.
    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(is_granted(&limiter, b"k", 1).await);
    tokio::time::advance(Duration::from_secs(10)).await;
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(Duration::from_secs(40)));
    tokio::time::advance(Duration::from_secs(40) - Duration::from_millis(1)).await;
    assert!(!is_granted(&limiter, b"k", 1).await);
    tokio::time::advance(Duration::from_millis(1)).await;
    let fresh = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(fresh.is_granted());
    assert_eq!(fresh.reset_after(), MINUTE);
}

// ---------------------------------------------------------------------------------------------

scenario!(storage_is_one_expiring_key_per_client_key:
    redis7 => Target::Server(ServerKind::Redis7),
    increx => Target::Increx,
    cluster => Target::Cluster);

async fn storage_is_one_expiring_key_per_client_key(target: Target) {
    let coordination = target.coordination("storage").await;
    let limiter = FixedWindow::new(&coordination, "api", 5, MINUTE).expect("valid");
    let key = storage_key(&coordination, "fw", "api", "\u{0}binary");
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
        target.raw(&[b"GET", &key]),
        redis::Value::BulkString(b"2".to_vec())
    );
    let ttl = target.pttl(&key);
    assert!(ttl > 50_000 && ttl <= 60_000, "{ttl}");

    // A zero counter left by someone else: one with an end keeps it, one without gets one.
    target.raw(&[b"SET", &key, b"0", b"PX", b"30000"]);
    assert!(is_granted(&limiter, b"\x00binary", 1).await);
    let ttl = target.pttl(&key);
    assert!(ttl > 20_000 && ttl <= 30_000, "{ttl}");
    target.raw(&[b"SET", &key, b"0"]);
    assert!(is_granted(&limiter, b"\x00binary", 1).await);
    let ttl = target.pttl(&key);
    assert!(ttl > 50_000 && ttl <= 60_000, "{ttl}");
    // An impossible request on a bare zero leaves no counter that would never expire.
    target.raw(&[b"SET", &key, b"0"]);
    limiter
        .try_acquire(b"\x00binary", 6)
        .await
        .expect("impossible");
    assert!(
        target.pttl(&key) != -1,
        "a counter without expiry was left behind"
    );
}

scenario!(a_corrupt_counter_fails_without_change:
    redis7 => Target::Server(ServerKind::Redis7),
    increx => Target::Increx,
    cluster => Target::Cluster);

async fn a_corrupt_counter_fails_without_change(target: Target) {
    let coordination = target.coordination("corrupt").await;
    let limiter = FixedWindow::new(&coordination, "api", 5, MINUTE).expect("valid");
    let key = storage_key(&coordination, "fw", "api", "k");
    target.raw(&[b"SET", &key, b"not a number"]);
    let err = limiter.try_acquire(b"k", 1).await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert_eq!(
        target.raw(&[b"GET", &key]),
        redis::Value::BulkString(b"not a number".to_vec())
    );
    // Another type under the key, or a string INCRBY does not read as an integer: named as
    // corrupt by the probe, not by the error's text, and left as it was (no expiry added).
    target.raw(&[b"DEL", &key]);
    target.raw(&[b"HSET", &key, b"f", b"1"]);
    let err = limiter.try_acquire(b"k", 1).await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert!(err.to_string().contains("fixed-window counter"), "{err}");
    for malformed in [
        b"1.5".as_slice(),
        b" 5",
        b"5 ",
        b"05",
        b"+5",
        b"1e3",
        b"0x10",
        b"9223372036854775808",
        b"99999999999999999999",
    ] {
        target.raw(&[b"SET", &key, malformed]);
        let shown = String::from_utf8_lossy(malformed);
        for permits in [1, 0] {
            let err = limiter
                .try_acquire(b"k", permits)
                .await
                .expect_err("corrupt");
            assert_eq!(err.kind(), ErrorKind::CorruptState, "{shown:?}: {err}");
        }
        assert_eq!(
            target.raw(&[b"GET", &key]),
            redis::Value::BulkString(malformed.to_vec()),
            "{shown:?}"
        );
        assert_eq!(target.pttl(&key), -1, "{shown:?}: no expiry added");
    }
    // A negative count (which no step writes) is corrupt to a probe, which leaves it.
    target.raw(&[b"SET", &key, b"-5"]);
    let err = limiter.try_acquire(b"k", 0).await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert_eq!(
        target.raw(&[b"GET", &key]),
        redis::Value::BulkString(b"-5".to_vec())
    );
    target.raw(&[b"DEL", &key]);
    // A counter that lost its expiry is given its window back instead of blocking forever.
    target.raw(&[b"SET", &key, b"5"]);
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert!(
        rejected
            .retry_after()
            .is_some_and(|d| d <= MINUTE + EXPIRY_MS)
    );
    let ttl = target.pttl(&key);
    assert!(ttl > 0, "{ttl}");
}

#[tokio::test]
async fn invalid_configuration_is_rejected_at_construction() {
    let coordination = Coordination::memory();
    for (limit, window) in [
        (0, MINUTE),
        (1, Duration::ZERO),
        (1, Duration::from_micros(999)),
        (u64::MAX, MINUTE),
    ] {
        let err = FixedWindow::new(&coordination, "api", limit, window).expect_err("invalid");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{limit} {window:?}");
    }
    // The bound reads as a duration, not as a run of digits in milliseconds.
    let err = FixedWindow::new(&coordination, "api", 1, Duration::MAX).expect_err("invalid");
    assert!(err.to_string().contains("292 million years"), "{err}");
}

/// The memory backend's clock counts microseconds in 64 bits: its longest window is
/// refused beyond 2^52 ms at construction, and the longest one it takes is counted.
#[tokio::test(start_paused = true)]
async fn the_memory_backends_longest_window_is_bounded_at_construction() {
    let coordination = Coordination::memory();
    let longest = Duration::from_millis(1 << 52);
    let err = FixedWindow::new(&coordination, "api", 1, longest + Duration::from_millis(1))
        .expect_err("too long for the memory backend");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("142,000 years"), "{err}");
    let limiter = FixedWindow::new(&coordination, "api", 1, longest).expect("valid");
    let granted = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(granted.is_granted());
    assert_eq!(granted.reset_after(), longest);
    let rejected = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(longest));
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_fast_path_uses_increx_where_the_server_has_it() {
    let server = Server::start(
        ServerKind::Redis7,
        &[
            "--loadmodule",
            support::increx_module::module_path()
                .to_str()
                .expect("utf-8"),
        ],
    );
    let backend = RedisBackend::connect(server.unix_url(), "")
        .await
        .expect("connect");
    let limiter = FixedWindow::new(&backend.clone().into(), "api", 2, MINUTE).expect("valid");
    for _ in 0..3 {
        limiter.try_acquire(b"k", 1).await.expect("acquire");
    }
    assert!(backend.capabilities().should_try_increx());
    assert_eq!(command_calls(&server, "increx"), 3);
    assert_eq!(command_calls(&server, "evalsha"), 0);
    assert_eq!(command_calls(&server, "eval"), 0);
}

#[tokio::test]
async fn every_limiter_of_a_handle_falls_back_then_reprobes_after_five_minutes() {
    // A server that lacks INCREX until its module is loaded: an upgrade in place.
    let server = Server::start(ServerKind::Redis7, &["--enable-module-command", "yes"]);
    let backend = RedisBackend::connect(server.unix_url(), "")
        .await
        .expect("connect");
    let coordination: Coordination = backend.clone().into();
    let first = FixedWindow::new(&coordination, "first", 5, MINUTE).expect("valid");
    let second = FixedWindow::new(&coordination, "second", 5, MINUTE).expect("valid");

    // The rejected INCREX changed nothing; the request went on at once, as plain commands
    // for one permit and through Lua for more.
    let decision = first.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(decision.remaining(), 4);
    assert!(!backend.capabilities().should_try_increx());
    assert_eq!(command_calls(&server, "incr"), 1, "the plain commands ran");
    let decision = first.try_acquire(b"k", 2).await.expect("acquire");
    assert_eq!(decision.remaining(), 2);
    let lua_calls = command_calls(&server, "evalsha") + command_calls(&server, "eval");
    assert!(lua_calls >= 1, "the Lua script ran");

    // The server gains INCREX; the handle does not notice yet: no INCREX is sent.
    let module = support::increx_module::module_path();
    let () = server.cmd(&["MODULE", "LOAD", module.to_str().expect("utf-8")]);
    second.try_acquire(b"k", 1).await.expect("acquire");
    first.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(command_calls(&server, "increx"), 0);

    // Five minutes later (paused clock) the next step probes INCREX again and keeps it.
    tokio::time::pause();
    tokio::time::advance(INCREX_REPROBE_AFTER).await;
    tokio::time::resume();
    let decision = second.try_acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(
        decision.remaining(),
        3,
        "the plain and INCREX paths share one counter"
    );
    assert_eq!(command_calls(&server, "increx"), 1);
    assert!(backend.capabilities().should_try_increx());
    first.try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(command_calls(&server, "increx"), 2);
}

// ---------------------------------------------------------------------------------------------

every_target!(one_permit_rejections_turn_no_later_decision);

/// Requests of one permit and of several, on one key: every target decides the same. On
/// Redis without `INCREX`, a rejected request of one permit stays counted (plain commands),
/// one of several is taken back (Lua): neither changes what a later request is told.
async fn one_permit_rejections_turn_no_later_decision(target: Target) {
    let coordination = target.coordination("mixed").await;
    let limiter = FixedWindow::new(&coordination, "api", 5, MINUTE).expect("valid");
    // (permits, granted, remaining after)
    let steps = [
        (1, true, 4),
        (1, true, 3),
        (3, true, 0),
        (1, false, 0),
        (1, false, 0),
        (2, false, 0),
        (1, false, 0),
        (0, true, 0),
    ];
    for (i, (permits, granted, remaining)) in steps.into_iter().enumerate() {
        let decision = limiter.try_acquire(b"k", permits).await.expect("decided");
        assert_eq!(decision.is_granted(), granted, "step {i}: {permits}");
        assert_eq!(decision.remaining(), remaining, "step {i}: {permits}");
        if !granted {
            let wait = decision.retry_after().expect("a retry time");
            assert!(wait > MINUTE / 2 && wait <= MINUTE + EXPIRY_MS, "{wait:?}");
        }
    }
    // A rejection of several permits while some are left consumes nothing, however many
    // rejections of one permit came before in another window.
    let other = limiter.try_acquire(b"other", 4).await.expect("decided");
    assert_eq!(other.remaining(), 1);
    assert!(!is_granted(&limiter, b"other", 2).await);
    assert!(is_granted(&limiter, b"other", 1).await);
    assert!(!is_granted(&limiter, b"other", 1).await);
}

scenario!(an_acl_that_denies_a_plain_command_sends_one_permit_through_lua:
    set => "set",
    incr => "incr");

/// An ACL that allows scripts but denies `SET` or `INCR` (which the script does not call):
/// steps of one permit go through Lua, the handle stops sending the denied command, the limit
/// holds, and the counter gets its window. When `INCR` itself was allowed, the request that
/// met the denial was counted by it and by Lua: one permit under-admitted, never one over.
async fn an_acl_that_denies_a_plain_command_sends_one_permit_through_lua(denied: &str) {
    let server = Server::start(ServerKind::Redis7, &[]);
    let url = server.acl_user(&[&format!("-{denied}")]);
    let backend = RedisBackend::connect(url, "acl:").await.expect("connect");
    let coordination: Coordination = backend.into();
    let limiter = FixedWindow::new(&coordination, "api", 3, MINUTE).expect("valid");
    let mut remaining = Vec::new();
    for _ in 0..5 {
        let decision = limiter.try_acquire(b"k", 1).await.expect("decided");
        remaining.push((decision.is_granted(), decision.remaining()));
    }
    let expected = if denied == "incr" {
        [(true, 2), (true, 1), (true, 0), (false, 0), (false, 0)]
    } else {
        [(true, 1), (true, 0), (false, 0), (false, 0), (false, 0)]
    };
    assert_eq!(remaining, expected, "{denied} denied");
    let stat = server
        .info_field("commandstats", &format!("cmdstat_{denied}"))
        .unwrap_or_default();
    assert!(
        stat.contains("rejected_calls=1,"),
        "denied once, then not sent again: {stat}"
    );
    let key = String::from_utf8(storage_key(&coordination, "fw", "api", "k")).expect("utf-8");
    let pttl: i64 = server.cmd(&["PTTL", &key]);
    assert!(pttl > 50_000, "the counter has its window: {pttl}");
}

/// Two instances count one key one permit at a time while its slot moves from master to
/// master twice (through Lua: on a Cluster, steps of one permit are not sent as plain
/// commands, which a moving slot would send back and forth): no error, and the count on the
/// slot's new node is every grant, exactly. Then the limit holds across the moved key. A
/// private cluster: its slot map changes.
#[tokio::test]
async fn steps_of_one_permit_ride_out_a_slot_move() {
    const LIMIT: u64 = 1_000_000;
    let cluster = Arc::new(Cluster::start(ServerKind::Redis7));
    let handles = cluster.handles("fw-slot-move", 2).await;
    let limiters: Vec<RateLimiter> = handles
        .iter()
        .map(|coordination| {
            FixedWindow::new(coordination, "api", LIMIT, MINUTE)
                .expect("valid")
                .into()
        })
        .collect();
    let storage = storage_key(&handles[0], "fw", "api", "k");
    let slot = key_slot(&storage);
    let granted = cluster.grants_while_moving(slot, &limiters, b"k").await;
    let owner = cluster.owner_of(slot);
    let count: u64 = redis::cmd("GET")
        .arg(&storage)
        .query(&mut owner.connection())
        .expect("GET");
    assert_eq!(count, granted, "every grant counted once");
    assert!(granted > 100, "{granted}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&storage)
        .query(&mut owner.connection())
        .expect("PTTL");
    assert!(ttl > 0, "the moved counter keeps its window: {ttl}");
    // The rest of the window, to the permit, and not one more.
    let left = limiters[0]
        .try_acquire(b"k", 0)
        .await
        .expect("probe")
        .remaining();
    assert_eq!(left, LIMIT - granted);
    for node in cluster.nodes() {
        assert_eq!(
            command_calls(node, "incr"),
            0,
            "no plain command on a Cluster"
        );
    }
}

/// An ACL without scripts: steps of one permit are counted exactly (plain commands), a
/// counter that lost its expiry gets it back without a script, and any other step is refused.
#[tokio::test]
async fn an_acl_without_scripts_still_counts_one_permit_steps() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let url = server.acl_user(&["-@scripting"]);
    let backend = RedisBackend::connect(url, "noscript:")
        .await
        .expect("connect");
    let coordination: Coordination = backend.into();
    let limiter = FixedWindow::new(&coordination, "api", 3, MINUTE).expect("valid");
    let key = String::from_utf8(storage_key(&coordination, "fw", "api", "k")).expect("utf-8");
    let () = server.cmd(&["SET", &key, "1"]);
    let mut decisions = Vec::new();
    for _ in 0..3 {
        let decision = limiter.try_acquire(b"k", 1).await.expect("decided");
        decisions.push((decision.is_granted(), decision.remaining()));
    }
    assert_eq!(decisions, [(true, 1), (true, 0), (false, 0)]);
    let pttl: i64 = server.cmd(&["PTTL", &key]);
    assert!(pttl > 50_000, "the counter has its window: {pttl}");
    for permits in [0, 2] {
        let err = limiter
            .try_acquire(b"other", permits)
            .await
            .expect_err("scripts denied");
        assert_eq!(err.kind(), ErrorKind::Permission, "{permits}: {err}");
    }
}

// ---------------------------------------------------------------------------------------------

// The contract suite (`rate_limit_contract.rs`) runs this on every other target.
scenario!(concurrent_callers_never_exceed_the_limit: increx => Target::Increx);

async fn concurrent_callers_never_exceed_the_limit(target: Target) {
    const LIMIT: u64 = 50;
    const CALLERS: usize = 8;
    const ATTEMPTS: usize = 40;
    let first = target.coordination("concurrent").await;
    // Several independent connections (separate handles) sharing one prefix, as replicas do.
    let handles = target.handles(&first, CALLERS).await;
    let granted = concurrent_grants(handles, ATTEMPTS, |coordination| {
        FixedWindow::new(coordination, "api", LIMIT, MINUTE).expect("valid")
    })
    .await;
    assert_eq!(
        granted, LIMIT,
        "{CALLERS}×{ATTEMPTS} attempts against a limit of {LIMIT}"
    );
}
