//! Backend conformance: the same scenarios against every server kind, the cluster and, where
//! the step applies, the memory backend.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::backend::Backend;
use leasehold::backend::memory::MemoryBackend;
use leasehold::backend::redis::{RedisBackend, Script};
use leasehold::{Coordination, ErrorKind};
use support::target::{Target, scenario};
use support::{Server, ServerKind, cluster, shared, unique_prefix};

/// A binary prefix, to show prefixes are not treated as text.
fn binary_prefix(test: &str) -> Vec<u8> {
    let mut prefix = unique_prefix(test).into_bytes();
    prefix.extend_from_slice(b"\x00\xff:");
    prefix
}

async fn redis_backend(target: Target, prefix: &[u8]) -> RedisBackend {
    let builder = match target {
        Target::Server(kind) => RedisBackend::standalone(shared(kind).unix_url()),
        Target::Cluster => RedisBackend::cluster(cluster().urls()),
        Target::Memory | Target::Increx => unreachable!("not a Redis target of this suite"),
    };
    builder
        .key_prefix(prefix)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {target:?}: {e}"))
}

async fn backend(target: Target, prefix: &[u8]) -> Backend {
    match target {
        Target::Memory => MemoryBackend::builder()
            .key_prefix(prefix)
            .build()
            .expect("valid settings")
            .into(),
        _ => redis_backend(target, prefix).await.into(),
    }
}

/// A raw GET of a physical key, beside the backend under test.
fn raw_get(target: Target, key: &[u8]) -> Option<Vec<u8>> {
    let mut cmd = redis::cmd("GET");
    cmd.arg(key);
    match target {
        Target::Server(kind) => cmd.query(&mut shared(kind).connection()).expect("GET"),
        Target::Cluster => {
            let mut conn = cluster()
                .client()
                .get_connection()
                .expect("cluster connection");
            cmd.query(&mut conn).expect("GET")
        }
        Target::Memory | Target::Increx => unreachable!("not a Redis target of this suite"),
    }
}

/// `SCRIPT FLUSH` on every node of the target.
fn flush_scripts(target: Target) {
    let nodes: Vec<&Server> = match target {
        Target::Server(kind) => vec![shared(kind)],
        Target::Cluster => cluster().nodes().iter().collect(),
        Target::Memory | Target::Increx => unreachable!("not a Redis target of this suite"),
    };
    for node in nodes {
        let () = node.cmd(&["SCRIPT", "FLUSH"]);
    }
}

/// A script call without arguments.
const NO_ARGS: &[&str; 0] = &[];

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
}

// ---------------------------------------------------------------------------------------------

scenario!(the_server_version_is_read_on_connect redis);

async fn the_server_version_is_read_on_connect(target: Target) {
    let backend = redis_backend(target, b"").await;
    let version = backend.server_version().expect("connected").to_string();
    let expected = match target {
        Target::Server(ServerKind::Redis6) => "Redis 6.2.",
        Target::Server(ServerKind::Redis7) | Target::Cluster => "Redis 7.0.",
        Target::Server(ServerKind::Redis8) => "Redis 8.2.",
        Target::Server(ServerKind::Valkey8) => "Valkey 8.1.",
        _ => unreachable!("Redis targets only"),
    };
    assert!(version.starts_with(expected), "{version}");
}

#[tokio::test]
async fn a_server_below_the_floor_is_refused_naming_its_version() {
    let server = Server::start(ServerKind::Redis5, &[]);
    let err = RedisBackend::standalone(server.unix_url())
        .key_prefix("")
        .connect()
        .await
        .expect_err("Redis 5.0 is below the floor");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(
        err.unsupported_feature(),
        Some(leasehold::backend::redis::SERVER_FLOOR)
    );
    let text = err.to_string();
    assert!(text.contains("Redis 5.0."), "{text}");
    assert!(text.contains("Redis 6.2 or Valkey 7.2"), "{text}");
}

// ---------------------------------------------------------------------------------------------

scenario!(server_time_is_the_backends_clock);

async fn server_time_is_the_backends_clock(target: Target) {
    let coordination = Coordination::new(backend(target, b"").await);
    let before = unix_now();
    let first = coordination.server_time().await.expect("server time");
    let second = coordination.server_time().await.expect("server time");
    let after = unix_now();
    // Same machine: the server's clock agrees with ours to well under a second.
    assert!(
        first + Duration::from_secs(1) >= before,
        "{first:?} vs {before:?}"
    );
    assert!(
        second <= after + Duration::from_secs(1),
        "{second:?} vs {after:?}"
    );
    assert!(
        second >= first,
        "the clock went back: {first:?} then {second:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn memory_time_follows_a_paused_clock() {
    let coordination = Coordination::memory();
    let start = coordination.server_time().await.expect("time");
    tokio::time::advance(Duration::from_secs(3600)).await;
    let later = coordination.server_time().await.expect("time");
    assert_eq!(later - start, Duration::from_secs(3600));
}

// ---------------------------------------------------------------------------------------------

/// Writes ARGV[i] to KEYS[i] and returns what the script saw, so the test can check the
/// physical keys and values byte for byte.
const ECHO_SOURCE: &str = r#"
for i, key in ipairs(KEYS) do
    redis.call('SET', key, ARGV[i], 'PX', 60000)
end
return { KEYS[1], KEYS[2], redis.call('GET', KEYS[2]) }
"#;

scenario!(script_call_with_binary_keys_and_prefix redis);

async fn script_call_with_binary_keys_and_prefix(target: Target) {
    let prefix = binary_prefix("binary-keys");
    let backend = redis_backend(target, &prefix).await;
    let script = Script::new("echo", ECHO_SOURCE);
    let keys: [&[u8]; 2] = [b"{tag}\x00\x01\xfe\xff", b"{tag}\r\n\"'"];
    let values: [&[u8]; 2] = [b"\x00value\xff", b"\xc3\x28 not utf-8"];

    let (seen1, seen2, read): (Vec<u8>, Vec<u8>, Vec<u8>) = backend
        .eval(&script, &keys, &values)
        .await
        .expect("script call");

    let physical = |key: &[u8]| [prefix.as_slice(), b"|", key].concat();
    assert_eq!(seen1, physical(keys[0]));
    assert_eq!(seen2, physical(keys[1]));
    assert_eq!(read, values[1]);
    assert_eq!(backend.physical_key(keys[0]), physical(keys[0]));
    assert_eq!(
        raw_get(target, &physical(keys[0])).as_deref(),
        Some(values[0])
    );
    // Nothing was written under the bare key.
    assert_eq!(raw_get(target, keys[0]), None);
}

// ---------------------------------------------------------------------------------------------

scenario!(nested_prefixes_never_share_a_key:
    redis7 => Target::Server(ServerKind::Redis7), cluster => Target::Cluster);

/// Two services whose prefixes are prefixes of one another (`…a:` and `…a:b:`): the first's
/// key `b:{n}` and the second's `{n}` were one Redis key when prefixes were joined raw, so
/// that a client choosing part of one service's key could spend the other's budget.
async fn nested_prefixes_never_share_a_key(target: Target) {
    let outer = format!("{}a:", unique_prefix("nested"));
    let inner = format!("{outer}b:");
    let outer_backend = redis_backend(target, outer.as_bytes()).await;
    let inner_backend = redis_backend(target, inner.as_bytes()).await;
    let script = Script::new("incr", "return redis.call('INCR', KEYS[1])");
    let outer_count: i64 = outer_backend
        .eval(&script, &["b:{n}"], NO_ARGS)
        .await
        .expect("outer INCR");
    let inner_count: i64 = inner_backend
        .eval(&script, &["{n}"], NO_ARGS)
        .await
        .expect("inner INCR");
    assert_eq!(
        (outer_count, inner_count),
        (1, 1),
        "one key for two services"
    );
    assert_ne!(
        outer_backend.physical_key(b"b:{n}"),
        inner_backend.physical_key(b"{n}")
    );
    assert!(
        outer_backend
            .physical_key(b"k")
            .starts_with(outer.as_bytes())
    );
}

scenario!(noscript_is_recovered_after_script_flush redis);

async fn noscript_is_recovered_after_script_flush(target: Target) {
    let prefix = unique_prefix("noscript");
    let backend = redis_backend(target, prefix.as_bytes()).await;
    // A source unique to this test, so no other test caches or flushes it by chance.
    let script = Script::new(
        "incr",
        format!("-- {prefix}\nreturn redis.call('INCR', KEYS[1])"),
    );
    let first: i64 = backend
        .eval(&script, &["{n}"], NO_ARGS)
        .await
        .expect("first call");
    flush_scripts(target);
    let second: i64 = backend
        .eval(&script, &["{n}"], NO_ARGS)
        .await
        .expect("call after SCRIPT FLUSH");
    assert_eq!(
        (first, second),
        (1, 2),
        "the script ran exactly once per call"
    );
    // EVAL cached the script again: the next call is a plain EVALSHA hit.
    let third: i64 = backend
        .eval(&script, &["{n}"], NO_ARGS)
        .await
        .expect("third call");
    assert_eq!(third, 3);
}

// ---------------------------------------------------------------------------------------------

scenario!(cross_slot_keys_are_rejected_before_sending redis);

async fn cross_slot_keys_are_rejected_before_sending(target: Target) {
    let prefix = unique_prefix("cross-slot");
    let backend = redis_backend(target, prefix.as_bytes()).await;
    let script = Script::new("echo", ECHO_SOURCE);
    let keys = ["{a}lease", "{b}fence"];
    assert_ne!(
        leasehold::backend::key_slot(&backend.physical_key(keys[0].as_bytes())),
        leasehold::backend::key_slot(&backend.physical_key(keys[1].as_bytes())),
    );
    let err = backend
        .eval::<redis::Value, _, _>(&script, &keys, ("x", "y"))
        .await
        .expect_err("cross-slot keys must be rejected");
    assert_eq!(err.kind(), ErrorKind::CrossSlot);
    assert!(!err.is_outcome_uncertain());
    // Rejected locally: the script never ran, so neither key exists.
    for key in keys {
        assert_eq!(raw_get(target, &backend.physical_key(key.as_bytes())), None);
    }
    // The same keys under one hash tag go through.
    let tagged = ["{a}lease", "{a}fence"];
    let _: redis::Value = backend
        .eval(&script, &tagged, ("x", "y"))
        .await
        .expect("same slot");
}

// ---------------------------------------------------------------------------------------------

scenario!(reconnects_after_the_server_restarts servers);

async fn reconnects_after_the_server_restarts(target: Target) {
    let Target::Server(kind) = target else {
        unreachable!("standalone only")
    };
    let server = Server::start(kind, &[]);
    let backend = RedisBackend::standalone(server.url())
        .key_prefix(unique_prefix("reconnect"))
        .connect()
        .await
        .expect("connect");
    let script = Script::new("incr", "return redis.call('INCR', KEYS[1])");
    let before: i64 = backend
        .eval(&script, &["n"], NO_ARGS)
        .await
        .expect("before restart");
    assert_eq!(before, 1);

    server.restart();

    // The first command may meet the dead connection; the backend reconnects by itself
    // (no new handle, no restart of the app) within a bounded time.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut failures = Vec::new();
    let after = loop {
        match backend.eval::<i64, _, _>(&script, &["n"], NO_ARGS).await {
            Ok(value) => break value,
            Err(err) => {
                assert!(
                    matches!(err.kind(), ErrorKind::Io | ErrorKind::Timeout),
                    "unexpected error while reconnecting: {err}"
                );
                failures.push(err.to_string());
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no reconnect within 10 s: {failures:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // The restarted server lost its data and its script cache: EVAL recovered the script.
    assert_eq!(after, 1);
    assert!(
        failures.len() <= 3,
        "too many failures before reconnecting: {failures:?}"
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(timeout_is_reported_as_uncertain servers);

/// Busy-waits on the server clock for ARGV[1] ms, then writes KEYS[1].
const SLOW_SOURCE: &str = r#"
local function now()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local start = now()
while now() - start < tonumber(ARGV[1]) do end
return redis.call('SET', KEYS[1], 'done')
"#;

async fn timeout_is_reported_as_uncertain(target: Target) {
    let Target::Server(kind) = target else {
        unreachable!("standalone only")
    };
    // A private server: the slow script blocks it. Redis 8 freezes TIME inside a script
    // until the event loop runs again, which it does once a script passes the busy
    // threshold: keep that short so the busy wait ends soon after its 400 ms.
    // Redis 6.2 calls the threshold lua-time-limit.
    let threshold = match kind {
        ServerKind::Redis6 => "--lua-time-limit",
        _ => "--busy-reply-threshold",
    };
    let server = Server::start(kind, &[threshold, "100"]);
    let backend = RedisBackend::standalone(server.unix_url())
        .key_prefix("")
        .response_timeout(Duration::from_millis(100))
        .connect()
        .await
        .expect("connect");
    let script = Script::new("slow", SLOW_SOURCE);
    let err = backend
        .eval::<redis::Value, _, _>(&script, &["slow"], 400)
        .await
        .expect_err("the reply comes after the timeout");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.is_outcome_uncertain());
    // The script ran anyway: a timeout is never "nothing happened". (The server answers
    // BUSY to other commands while a long script runs; wait for it, bounded.)
    support::wait_until(Duration::from_secs(10), "the slow script's write", || {
        let value: Option<String> = redis::cmd("GET")
            .arg("|slow")
            .query(&mut server.connection())
            .map_err(|e| e.to_string())?;
        match value.as_deref() {
            Some("done") => Ok(()),
            other => Err(format!("GET slow = {other:?}")),
        }
    });
}

// ---------------------------------------------------------------------------------------------

scenario!(hash_field_expiry_is_probed redis);

async fn hash_field_expiry_is_probed(target: Target) {
    let backend = redis_backend(target, b"").await;
    let expected = matches!(target, Target::Server(ServerKind::Redis8));
    assert_eq!(backend.hash_field_expiry().await.expect("probe"), expected);
    // Whether the answer is kept: `hash_lease.rs`, on private servers.
    assert_eq!(backend.hash_field_expiry().await.expect("again"), expected);
    match backend.require_hash_field_expiry().await {
        Ok(()) => assert!(expected),
        Err(err) => {
            assert!(!expected);
            assert_eq!(err.kind(), ErrorKind::Unsupported);
            let feature = err.unsupported_feature().expect("names the feature");
            assert_eq!(feature.minimum_version(), "Redis 7.4 or Valkey 9.0");
            assert!(err.to_string().contains("HPEXPIRE"), "{err}");
        }
    }
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn capabilities_are_shared_by_clones_of_one_handle() {
    let backend = redis_backend(Target::Server(ServerKind::Redis7), b"").await;
    let clone = backend.clone();
    backend.capabilities().record_increx_rejected();
    assert!(!clone.capabilities().should_try_increx());
    // A separately connected handle has its own state.
    let other = redis_backend(Target::Server(ServerKind::Redis7), b"").await;
    assert!(other.capabilities().should_try_increx());
}

#[tokio::test]
async fn connect_errors_are_clear() {
    let err = RedisBackend::connect("not a url", "")
        .await
        .expect_err("bad url");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");

    // No namespace: refused, saying how to name one (two services would share keys).
    let err = RedisBackend::standalone(shared(ServerKind::Redis7).unix_url())
        .connect()
        .await
        .expect_err("no key prefix");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains(".key_prefix(\"myapp:\")"), "{err}");

    let err = RedisBackend::cluster(Vec::<String>::new())
        .key_prefix("")
        .connect()
        .await
        .expect_err("no nodes");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("at least one node"), "{err}");

    // A port nobody listens on: the handle is made (a service whose failure policy covers an
    // outage boots during one), and every step fails with a certain I/O failure (a step
    // tries again within the transient-retry bound first), not a hang, naming the
    // deployment.
    let port = support::server::free_port();
    let backend = RedisBackend::connect(format!("redis://:s3cret@127.0.0.1:{port}"), "")
        .await
        .expect("unreachable is no reason to refuse the handle");
    assert_eq!(backend.server_version(), None);
    let errors = [
        backend.ready().await.expect_err("nothing listens there"),
        backend
            .server_time()
            .await
            .expect_err("nothing listens there"),
    ];
    for err in errors {
        assert_eq!(err.kind(), ErrorKind::Io, "{err}");
        assert!(err.is_unavailable() && !err.is_outcome_uncertain(), "{err}");
        let shown = err.to_string();
        assert!(
            shown.contains(&format!("redis://:***@127.0.0.1:{port}")) && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}

#[tokio::test]
async fn cluster_reconnects_after_a_node_restarts() {
    // A private cluster: restarting a node of the shared one would disturb other tests.
    let cluster = support::Cluster::start(ServerKind::Redis7);
    let backend = RedisBackend::cluster(cluster.urls())
        .key_prefix(unique_prefix("cluster-reconnect"))
        .connect()
        .await
        .expect("connect");
    let script = Script::new("incr", "return redis.call('INCR', KEYS[1])");
    // One key on each node, so the restarted node owns one of them.
    let keys = ["{a}", "{b}", "{c}"];
    for key in keys {
        let n: i64 = backend
            .eval(&script, &[key], NO_ARGS)
            .await
            .expect("before");
        assert_eq!(n, 1);
    }

    cluster.nodes()[0].restart();
    cluster.wait_converged(Duration::from_secs(30));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    for key in keys {
        let mut failures = Vec::new();
        loop {
            match backend.eval::<i64, _, _>(&script, &[key], NO_ARGS).await {
                Ok(n) => {
                    assert!(n >= 1);
                    break;
                }
                Err(err) => {
                    failures.push(err.to_string());
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "{key}: no reconnect within 15 s: {failures:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}
