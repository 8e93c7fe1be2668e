//! The fixed-window limiter against every server kind, the cluster, the INCREX fast path
//! (test module) and the memory backend.

mod support;

use std::time::Duration;

use leasehold::backend::memory::MemoryBackend;
use leasehold::backend::redis::{INCREX_REPROBE_AFTER, RedisBackend};
use leasehold::coordination::rate_limit::FixedWindow;
use leasehold::{Coordination, ErrorKind};
use support::{Server, ServerKind, cluster, shared, unique_prefix};

#[derive(Clone, Copy, Debug)]
enum Target {
    Server(ServerKind),
    /// Redis 7.0 with the INCREX test module: the fast path.
    Increx,
    Cluster,
    Memory,
}

async fn coordination(target: Target, test: &str) -> Coordination {
    let prefix = unique_prefix(test);
    let builder = match target {
        Target::Server(kind) => RedisBackend::standalone(shared(kind).unix_url()),
        Target::Increx => RedisBackend::standalone(support::increx().unix_url()),
        Target::Cluster => RedisBackend::cluster(cluster().urls()),
        Target::Memory => {
            return MemoryBackend::builder()
                .key_prefix(prefix)
                .build()
                .expect("valid")
                .into();
        }
    };
    builder
        .key_prefix(prefix)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {target:?}: {e}"))
        .into()
}

/// The physical key of a fixed-window limiter's client key (see `FixedWindow` docs).
fn storage_key(coordination: &Coordination, name: &str, key: &str) -> Vec<u8> {
    let leasehold::backend::Backend::Redis(redis) = coordination.backend() else {
        unreachable!("Redis targets only")
    };
    redis.physical_key(format!("rl:fw:{}:{name}:{key}", name.len()).as_bytes())
}

fn raw(target: Target, args: &[&[u8]]) -> redis::Value {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("ascii command"));
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    match target {
        Target::Server(kind) => cmd.query(&mut shared(kind).connection()).expect("raw"),
        Target::Increx => cmd.query(&mut support::increx().connection()).expect("raw"),
        Target::Cluster => cmd
            .query(&mut cluster().client().get_connection().expect("cluster"))
            .expect("raw"),
        Target::Memory => unreachable!("Redis targets only"),
    }
}

macro_rules! scenario {
    ($scenario:ident: $($name:ident => $target:expr),+ $(,)?) => {
        mod $scenario {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    super::$scenario($target).await
                }
            )+
        }
    };
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

const MINUTE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------

scenario!(admits_exactly_the_limit_then_rejects_with_a_retry_time);

async fn admits_exactly_the_limit_then_rejects_with_a_retry_time(target: Target) {
    let coordination = coordination(target, "exact").await;
    let limiter = FixedWindow::new(&coordination, "api", 3, MINUTE).expect("valid");
    for remaining in [2, 1, 0] {
        let decision = limiter.acquire(b"client", 1).await.expect("acquire");
        assert!(decision.is_granted());
        assert_eq!(decision.remaining(), remaining);
        assert_eq!(decision.limit(), 3);
        assert_eq!(decision.retry_after(), None);
        assert!(decision.reset_after() <= MINUTE && decision.reset_after() > MINUTE / 2);
    }
    for _ in 0..3 {
        let rejected = limiter.acquire(b"client", 1).await.expect("acquire");
        assert!(!rejected.is_granted());
        assert_eq!(rejected.remaining(), 0);
        let wait = rejected
            .retry_after()
            .expect("a request that can succeed later");
        assert!(wait > Duration::ZERO && wait <= MINUTE, "{wait:?}");
        assert_eq!(wait, rejected.reset_after());
    }
    // Another key is independent.
    assert!(
        limiter
            .acquire(b"other", 1)
            .await
            .expect("acquire")
            .is_granted()
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(weighted_permits_and_the_limit_boundaries);

async fn weighted_permits_and_the_limit_boundaries(target: Target) {
    let coordination = coordination(target, "weights").await;
    let limiter = FixedWindow::new(&coordination, "api", 5, MINUTE).expect("valid");

    // More than the limit: rejected, no retry time, nothing consumed, nothing created.
    let impossible = limiter.acquire(b"k", 6).await.expect("acquire");
    assert!(!impossible.is_granted());
    assert_eq!(impossible.retry_after(), None);
    assert_eq!(impossible.remaining(), 5);
    let huge = limiter.acquire(b"k", u64::MAX).await.expect("acquire");
    assert!(!huge.is_granted());
    assert_eq!(huge.retry_after(), None);

    // A probe consumes nothing.
    let probe = limiter.acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted());
    assert_eq!(probe.remaining(), 5);

    assert_eq!(
        limiter.acquire(b"k", 3).await.expect("acquire").remaining(),
        2
    );
    // 3 more would pass the limit: rejected and not counted.
    let rejected = limiter.acquire(b"k", 3).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert!(rejected.retry_after().is_some());
    assert_eq!(rejected.remaining(), 2);
    // Exactly reaching the limit is allowed.
    let last = limiter.acquire(b"k", 2).await.expect("acquire");
    assert!(last.is_granted());
    assert_eq!(last.remaining(), 0);
    let probe = limiter.acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted(), "a probe is never over the limit");
    assert_eq!(probe.remaining(), 0);

    // permits == limit on a fresh key.
    assert!(
        limiter
            .acquire(b"fresh", 5)
            .await
            .expect("acquire")
            .is_granted()
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(the_first_request_fixes_the_windows_end:
    redis7 => Target::Server(ServerKind::Redis7),
    redis8 => Target::Server(ServerKind::Redis8),
    valkey8 => Target::Server(ServerKind::Valkey8),
    increx => Target::Increx,
    cluster => Target::Cluster);

async fn the_first_request_fixes_the_windows_end(target: Target) {
    let coordination = coordination(target, "window-end").await;
    let limiter =
        FixedWindow::new(&coordination, "api", 10, Duration::from_millis(300)).expect("valid");
    let first = limiter.acquire(b"k", 1).await.expect("acquire");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = limiter.acquire(b"k", 1).await.expect("acquire");
    // At least 50 ms passed on every clock: a window that later requests moved would not
    // have shrunk by that much (1 ms for PTTL rounding).
    assert!(
        second.reset_after() + Duration::from_millis(49) <= first.reset_after(),
        "{first:?} then {second:?}"
    );
    // Exhaust it, then wait for the server's end of the window: the quota is back.
    let rejected = limiter.acquire(b"k", 9).await.expect("acquire");
    assert!(!rejected.is_granted());
    let wait = rejected.retry_after().expect("retry time");
    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    let fresh = limiter.acquire(b"k", 9).await.expect("acquire");
    assert!(fresh.is_granted(), "{fresh:?}");
    assert_eq!(fresh.remaining(), 1);
}

#[tokio::test(start_paused = true)]
async fn memory_windows_follow_the_paused_clock() {
    let coordination = Coordination::memory();
    let limiter = FixedWindow::new(&coordination, "api", 2, MINUTE).expect("valid");
    assert!(
        limiter
            .acquire(b"k", 2)
            .await
            .expect("acquire")
            .is_granted()
    );
    tokio::time::advance(Duration::from_secs(20)).await;
    let rejected = limiter.acquire(b"k", 1).await.expect("acquire");
    assert_eq!(rejected.retry_after(), Some(Duration::from_secs(40)));
    tokio::time::advance(Duration::from_secs(40) - Duration::from_millis(1)).await;
    assert!(
        !limiter
            .acquire(b"k", 1)
            .await
            .expect("acquire")
            .is_granted()
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    let fresh = limiter.acquire(b"k", 1).await.expect("acquire");
    assert!(fresh.is_granted());
    assert_eq!(fresh.reset_after(), MINUTE);
}

// ---------------------------------------------------------------------------------------------

scenario!(storage_is_one_expiring_key_per_client_key:
    redis7 => Target::Server(ServerKind::Redis7),
    increx => Target::Increx,
    cluster => Target::Cluster);

async fn storage_is_one_expiring_key_per_client_key(target: Target) {
    let coordination = coordination(target, "storage").await;
    let limiter = FixedWindow::new(&coordination, "api", 5, MINUTE).expect("valid");
    let key = storage_key(&coordination, "api", "\u{0}binary");
    // A probe or a rejection creates nothing.
    limiter.acquire(b"\x00binary", 0).await.expect("probe");
    limiter.acquire(b"\x00binary", 6).await.expect("impossible");
    assert_eq!(raw(target, &[b"EXISTS", &key]), redis::Value::Int(0));
    limiter.acquire(b"\x00binary", 2).await.expect("acquire");
    assert_eq!(
        raw(target, &[b"GET", &key]),
        redis::Value::BulkString(b"2".to_vec())
    );
    let redis::Value::Int(ttl) = raw(target, &[b"PTTL", &key]) else {
        panic!("PTTL is an integer")
    };
    assert!(ttl > 50_000 && ttl <= 60_000, "{ttl}");
}

scenario!(a_corrupt_counter_fails_without_change:
    redis7 => Target::Server(ServerKind::Redis7),
    increx => Target::Increx,
    cluster => Target::Cluster);

async fn a_corrupt_counter_fails_without_change(target: Target) {
    let coordination = coordination(target, "corrupt").await;
    let limiter = FixedWindow::new(&coordination, "api", 5, MINUTE).expect("valid");
    let key = storage_key(&coordination, "api", "k");
    raw(target, &[b"SET", &key, b"not a number"]);
    let err = limiter.acquire(b"k", 1).await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert_eq!(
        raw(target, &[b"GET", &key]),
        redis::Value::BulkString(b"not a number".to_vec())
    );
    // A counter that lost its expiry is given its window back instead of blocking forever.
    raw(target, &[b"SET", &key, b"5"]);
    let rejected = limiter.acquire(b"k", 1).await.expect("acquire");
    assert!(!rejected.is_granted());
    assert!(rejected.retry_after().is_some_and(|d| d <= MINUTE));
    let redis::Value::Int(ttl) = raw(target, &[b"PTTL", &key]) else {
        panic!("PTTL is an integer")
    };
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
}

// ---------------------------------------------------------------------------------------------

fn command_calls(server: &Server, command: &str) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

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
    let backend = RedisBackend::connect(server.unix_url())
        .await
        .expect("connect");
    let limiter = FixedWindow::new(&backend.clone().into(), "api", 2, MINUTE).expect("valid");
    for _ in 0..3 {
        limiter.acquire(b"k", 1).await.expect("acquire");
    }
    assert!(backend.capabilities().should_try_increx());
    assert_eq!(command_calls(&server, "increx"), 3);
    assert_eq!(command_calls(&server, "evalsha"), 0);
    assert_eq!(command_calls(&server, "eval"), 0);
}

#[tokio::test]
async fn every_limiter_of_a_handle_falls_back_to_lua_then_reprobes_after_five_minutes() {
    // A server that lacks INCREX until its module is loaded: an upgrade in place.
    let server = Server::start(ServerKind::Redis7, &["--enable-module-command", "yes"]);
    let backend = RedisBackend::connect(server.unix_url())
        .await
        .expect("connect");
    let coordination: Coordination = backend.clone().into();
    let first = FixedWindow::new(&coordination, "first", 5, MINUTE).expect("valid");
    let second = FixedWindow::new(&coordination, "second", 5, MINUTE).expect("valid");

    // The rejected INCREX changed nothing; the request went through Lua at once.
    let decision = first.acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(decision.remaining(), 4);
    assert!(!backend.capabilities().should_try_increx());
    let lua_calls = command_calls(&server, "evalsha") + command_calls(&server, "eval");
    assert!(lua_calls >= 1, "the Lua script ran");

    // The server gains INCREX; the handle does not notice yet: no INCREX is sent.
    let module = support::increx_module::module_path();
    let () = server.cmd(&["MODULE", "LOAD", module.to_str().expect("utf-8")]);
    second.acquire(b"k", 1).await.expect("acquire");
    first.acquire(b"k", 1).await.expect("acquire");
    assert_eq!(command_calls(&server, "increx"), 0);

    // Five minutes later (paused clock) the next step probes INCREX again and keeps it.
    tokio::time::pause();
    tokio::time::advance(INCREX_REPROBE_AFTER).await;
    tokio::time::resume();
    let decision = second.acquire(b"k", 1).await.expect("acquire");
    assert!(decision.is_granted());
    assert_eq!(
        decision.remaining(),
        3,
        "the Lua and INCREX paths share one counter"
    );
    assert_eq!(command_calls(&server, "increx"), 1);
    assert!(backend.capabilities().should_try_increx());
    first.acquire(b"k", 1).await.expect("acquire");
    assert_eq!(command_calls(&server, "increx"), 2);
}

// ---------------------------------------------------------------------------------------------

scenario!(concurrent_callers_never_exceed_the_limit);

async fn concurrent_callers_never_exceed_the_limit(target: Target) {
    const LIMIT: u64 = 50;
    const CALLERS: usize = 8;
    const ATTEMPTS: usize = 40;
    let prefix_coordination = coordination(target, "concurrent").await;
    // Several independent connections (separate handles) sharing one prefix, as replicas do.
    let handles: Vec<Coordination> = match target {
        Target::Memory => vec![prefix_coordination; CALLERS],
        _ => {
            let leasehold::backend::Backend::Redis(redis) = prefix_coordination.backend() else {
                unreachable!()
            };
            let prefix = redis.key_prefix().to_vec();
            let mut handles = Vec::new();
            for _ in 0..CALLERS {
                let builder = match target {
                    Target::Server(kind) => RedisBackend::standalone(shared(kind).unix_url()),
                    Target::Increx => RedisBackend::standalone(support::increx().unix_url()),
                    Target::Cluster => RedisBackend::cluster(cluster().urls()),
                    Target::Memory => unreachable!(),
                };
                handles.push(
                    builder
                        .key_prefix(&prefix)
                        .connect()
                        .await
                        .expect("connect")
                        .into(),
                );
            }
            handles
        }
    };
    let tasks: Vec<_> = handles
        .into_iter()
        .map(|coordination| {
            tokio::spawn(async move {
                let limiter = FixedWindow::new(&coordination, "api", LIMIT, MINUTE).expect("valid");
                let mut granted = 0u64;
                for _ in 0..ATTEMPTS {
                    if limiter
                        .acquire(b"hot", 1)
                        .await
                        .expect("acquire")
                        .is_granted()
                    {
                        granted += 1;
                    }
                }
                granted
            })
        })
        .collect();
    let mut granted = 0;
    for task in tasks {
        granted += task.await.expect("task");
    }
    assert_eq!(
        granted, LIMIT,
        "{CALLERS}×{ATTEMPTS} attempts against a limit of {LIMIT}"
    );
}
