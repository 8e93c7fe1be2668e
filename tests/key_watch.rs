//! Key watches (RESP3 client tracking) against every server kind and the cluster: what wakes a
//! watch, what does not, and what happens when the tracking connection is lost; private
//! servers for flushes, restarts and a disabled expiry cycle; a private cluster whose slot
//! moves; Sentinel across a failover.

mod support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::backend::key_slot;
use leasehold::backend::redis::{KeyTtl, KeyWatch, RedisBackend};
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use support::target::{Target, scenario};
use support::{Cluster, Server, ServerKind, cluster, sentinel, shared, unique_prefix};
use tokio::time::{Instant, timeout};

/// How soon a watch must fire after the change that should wake it.
const FIRES_WITHIN: Duration = Duration::from_secs(2);
/// How long a watch must stay pending when nothing concerning it happens.
const STAYS_PENDING: Duration = Duration::from_millis(200);
/// How long a test waits for a server or a failover to come back before failing.
const PATIENCE: Duration = Duration::from_secs(30);

/// A client other than the backend under test, to make changes with.
enum Other {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Other {
    async fn to_url(url: &str) -> Other {
        let client = redis::Client::open(url).expect("valid url");
        Other::Server(
            client
                .get_multiplexed_async_connection()
                .await
                .expect("connect the other client"),
        )
    }

    async fn to_target(target: Target) -> Other {
        match target {
            Target::Server(kind) => Other::to_url(&shared(kind).unix_url()).await,
            Target::Cluster => Other::to_cluster(cluster()).await,
            Target::Increx | Target::Memory => unreachable!("Redis servers only"),
        }
    }

    async fn to_cluster(cluster: &Cluster) -> Other {
        Other::Cluster(
            cluster
                .client()
                .get_async_connection()
                .await
                .expect("connect the other cluster client"),
        )
    }

    async fn run<T: redis::FromRedisValue>(&mut self, args: &[&[u8]]) -> T {
        let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("ascii command"));
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        let reply = match self {
            Other::Server(connection) => cmd.query_async(connection).await,
            Other::Cluster(connection) => cmd.query_async(connection).await,
        };
        reply.unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(args[0])))
    }

    async fn set(&mut self, key: &[u8]) {
        self.run::<()>(&[b"SET", key, b"v"]).await;
    }
}

async fn backend(target: Target, test: &str) -> RedisBackend {
    target
        .redis_builder()
        .key_prefix(unique_prefix(test))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {target:?}: {e}"))
}

async fn private_backend(server: &Server, test: &str) -> RedisBackend {
    RedisBackend::standalone(server.unix_url())
        .key_prefix(unique_prefix(test))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {server:?}: {e}"))
}

async fn watch(backend: &RedisBackend, key: &[u8]) -> KeyWatch {
    backend
        .watch_key(key)
        .await
        .unwrap_or_else(|e| panic!("watch {:?}: {e}", String::from_utf8_lossy(key)))
}

async fn fires(watch: &mut KeyWatch, after: &str) {
    timeout(FIRES_WITHIN, watch.changed())
        .await
        .unwrap_or_else(|_| panic!("{watch:?} did not fire within {FIRES_WITHIN:?} after {after}"));
    assert!(watch.has_changed());
}

async fn stays_pending(watch: &mut KeyWatch, after: &str) {
    assert!(
        timeout(STAYS_PENDING, watch.changed()).await.is_err(),
        "{watch:?} fired after {after}"
    );
    assert!(!watch.has_changed());
}

/// Retries `watch_key` until the tracking connection is back (bounded by [`PATIENCE`]).
async fn watch_when_back(backend: &RedisBackend, key: &[u8]) -> KeyWatch {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match backend.watch_key(key).await {
            Ok(watch) => return watch,
            Err(err) => {
                assert!(
                    Instant::now() < deadline,
                    "no watch within {PATIENCE:?}: {err}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Every server kind and the cluster

async fn fires_when_another_client_writes(target: Target) {
    let backend = backend(target, "fires_on_write").await;
    let key = backend.physical_key(b"k");
    let mut other = Other::to_target(target).await;

    let mut created = watch(&backend, b"k").await;
    assert_eq!(created.ttl(), KeyTtl::Missing);
    other.set(&key).await;
    fires(&mut created, "SET of a missing key").await;
    // A watch fires once: it stays fired.
    fires(&mut created, "nothing more").await;

    let mut overwritten = watch(&backend, b"k").await;
    assert_eq!(overwritten.ttl(), KeyTtl::Persistent);
    other.run::<()>(&[b"SET", &key, b"other value"]).await;
    fires(&mut overwritten, "SET of an existing key").await;

    let mut deleted = watch(&backend, b"k").await;
    other.run::<i64>(&[b"DEL", &key]).await;
    fires(&mut deleted, "DEL").await;

    // Any type: a list, changed by RPUSH.
    other.run::<i64>(&[b"RPUSH", &key, b"a"]).await;
    let mut pushed = watch(&backend, b"k").await;
    assert_eq!(pushed.ttl(), KeyTtl::Persistent);
    other.run::<i64>(&[b"RPUSH", &key, b"b"]).await;
    fires(&mut pushed, "RPUSH").await;

    // A new expiry is a write.
    let mut expiring = watch(&backend, b"k").await;
    other.run::<i64>(&[b"PEXPIRE", &key, b"60000"]).await;
    fires(&mut expiring, "PEXPIRE").await;
    assert_eq!(backend.watch_count(), 0, "fired watches leave the registry");
}
scenario!(fires_when_another_client_writes redis);

async fn fires_when_the_key_expires(target: Target) {
    let backend = backend(target, "fires_on_expiry").await;
    let key = backend.physical_key(b"k");
    let mut other = Other::to_target(target).await;
    other.run::<()>(&[b"SET", &key, b"v", b"PX", b"300"]).await;

    let mut expiring = watch(&backend, b"k").await;
    let KeyTtl::ExpiresIn(left) = expiring.ttl() else {
        panic!("expected an expiring key, got {:?}", expiring.ttl());
    };
    assert!(left <= Duration::from_millis(300), "{left:?}");
    fires(&mut expiring, "the key's expiry").await;
    let pttl: i64 = other.run(&[b"PTTL", &key]).await;
    assert_eq!(pttl, -2, "the watch fired before the key expired");
}
scenario!(fires_when_the_key_expires redis);

async fn ignores_other_keys(target: Target) {
    let backend = backend(target, "ignores_other_keys").await;
    let mut other = Other::to_target(target).await;
    let mut watched = watch(&backend, b"watched").await;
    other.set(&backend.physical_key(b"watched2")).await;
    other.set(&backend.physical_key(b"elsewhere")).await;
    stays_pending(&mut watched, "writes to other keys").await;
    other.set(&backend.physical_key(b"watched")).await;
    fires(&mut watched, "a write to the watched key").await;
}
scenario!(ignores_other_keys redis);

async fn reports_the_ttl(target: Target) {
    let backend = backend(target, "reports_the_ttl").await;
    let mut other = Other::to_target(target).await;
    assert_eq!(watch(&backend, b"missing").await.ttl(), KeyTtl::Missing);
    assert!(!KeyTtl::Missing.exists());

    other.set(&backend.physical_key(b"persistent")).await;
    let persistent = watch(&backend, b"persistent").await.ttl();
    assert_eq!(persistent, KeyTtl::Persistent);
    assert!(persistent.exists());

    let hash = backend.physical_key(b"hash");
    other.run::<i64>(&[b"HSET", &hash, b"f", b"v"]).await;
    other.run::<i64>(&[b"PEXPIRE", &hash, b"60000"]).await;
    match watch(&backend, b"hash").await.ttl() {
        KeyTtl::ExpiresIn(left) => assert!(
            left > Duration::from_secs(50) && left <= Duration::from_secs(60),
            "{left:?}"
        ),
        other => panic!("expected an expiring key, got {other:?}"),
    }
}
scenario!(reports_the_ttl redis);

async fn many_watches_of_one_key_all_fire(target: Target) {
    let backend = backend(target, "many_watches").await;
    let mut other = Other::to_target(target).await;
    let mut watches = Vec::new();
    for _ in 0..50 {
        watches.push(watch(&backend, b"k").await);
    }
    // A clone shares the tracking connection and the registry.
    let clone = backend.clone();
    watches.push(watch(&clone, b"k").await);
    assert_eq!(backend.watch_count(), 51);
    other.set(&backend.physical_key(b"k")).await;
    for watch in &mut watches {
        fires(watch, "one SET").await;
    }
    assert_eq!(backend.watch_count(), 0);
}
scenario!(many_watches_of_one_key_all_fire redis);

async fn dropped_watches_leave_the_registry(target: Target) {
    let backend = backend(target, "dropped_watches").await;
    let mut watches = Vec::new();
    for i in 0..40 {
        watches.push(watch(&backend, format!("k{}", i % 10).as_bytes()).await);
    }
    assert_eq!(backend.watch_count(), 40);
    watches.truncate(15);
    assert_eq!(backend.watch_count(), 15);

    // A watch dropped while `changed` is pending, and a `watch_key` dropped mid-flight.
    let mut pending = watches.pop().expect("a watch");
    assert!(
        timeout(Duration::from_millis(10), pending.changed())
            .await
            .is_err()
    );
    drop(pending);
    let cancelled = timeout(Duration::from_micros(1), backend.watch_key(b"cancelled")).await;
    drop(cancelled);
    assert_eq!(backend.watch_count(), 14);

    drop(watches);
    assert_eq!(backend.watch_count(), 0);
}
scenario!(dropped_watches_leave_the_registry redis);

/// A key that does not exist is created by another client at about the moment the watch
/// reads it. Whenever the read saw the key missing, the creation came after the read and must
/// wake the watch: it was registered before the read, so the invalidation cannot slip by.
async fn fires_when_a_write_races_the_read(target: Target) {
    let backend = backend(target, "races_the_read").await;
    let (mut before, mut after) = (0, 0);
    for round in 0..40u32 {
        let name = format!("k{round}");
        let key = backend.physical_key(name.as_bytes());
        let mut other = Other::to_target(target).await;
        let go = Arc::new(tokio::sync::Barrier::new(2));
        let writer = tokio::spawn({
            let go = Arc::clone(&go);
            async move {
                go.wait().await;
                // Spread the write over the read's round trip.
                for _ in 0..round % 8 {
                    tokio::task::yield_now().await;
                }
                other.set(&key).await;
            }
        });
        go.wait().await;
        let mut watch = watch(&backend, name.as_bytes()).await;
        writer.await.expect("writer");
        match watch.ttl() {
            KeyTtl::Missing => {
                before += 1;
                fires(&mut watch, "a creation that followed the read").await;
            }
            _ => after += 1,
        }
    }
    eprintln!("{target:?}: read before the write {before} times, after it {after} times");
}
scenario!(fires_when_a_write_races_the_read redis);

/// The same race with the writer and the watch on different threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn fires_when_a_write_races_the_read_on_threads() {
    fires_when_a_write_races_the_read(Target::Server(ServerKind::Redis7)).await;
    fires_when_a_write_races_the_read(Target::Cluster).await;
}

// ---------------------------------------------------------------------------------------------
// Private servers: flushes, restarts, an expiry cycle turned off, a dropped backend

async fn flushall_wakes_every_watch(kind: ServerKind) {
    let server = Server::start(kind, &[]);
    let backend = private_backend(&server, "flushall").await;
    let mut other = Other::to_url(&server.unix_url()).await;
    other.set(&backend.physical_key(b"a")).await;
    let mut watches = vec![
        watch(&backend, b"a").await,
        watch(&backend, b"b").await,
        watch(&backend, b"c").await,
    ];
    other.run::<()>(&[b"FLUSHALL"]).await;
    for watch in &mut watches {
        fires(watch, "FLUSHALL").await;
    }
    assert_eq!(backend.watch_count(), 0);
}
scenario!(flushall_wakes_every_watch: redis7 => ServerKind::Redis7,
    redis8 => ServerKind::Redis8,
    valkey8 => ServerKind::Valkey8);

async fn a_restart_wakes_every_watch_and_tracking_comes_back(kind: ServerKind) {
    let server = Server::start(kind, &[]);
    let backend = private_backend(&server, "restart").await;
    let mut watches = Vec::new();
    for key in [&b"a"[..], b"b", b"c", b"c"] {
        watches.push(watch(&backend, key).await);
    }

    server.stop();
    for watch in &mut watches {
        fires(watch, "the server stopped").await;
    }
    assert_eq!(backend.watch_count(), 0);
    // While the server is down, a watch fails with the refused connection of the attempt it
    // asked for, instead of waiting.
    let asked = Instant::now();
    let err = backend
        .watch_key(b"a")
        .await
        .expect_err("no server to watch on");
    assert_eq!(err.kind(), leasehold::ErrorKind::Io, "{err}");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );

    server.start_again();
    let mut watch = watch_when_back(&backend, b"a").await;
    // The server came back empty (no persistence): tracking is on again on the new connection.
    assert_eq!(watch.ttl(), KeyTtl::Missing);
    let mut other = Other::to_url(&server.unix_url()).await;
    stays_pending(&mut watch, "the reconnection").await;
    other.set(&backend.physical_key(b"a")).await;
    fires(&mut watch, "a write after the restart").await;
}
scenario!(a_restart_wakes_every_watch_and_tracking_comes_back: redis7 => ServerKind::Redis7,
    redis8 => ServerKind::Redis8,
    valkey8 => ServerKind::Valkey8);

/// With the server's active expiry off, an expired key is only noticed when it is accessed,
/// so no invalidation comes: the watch still fires, at the TTL it read.
async fn the_ttl_alone_wakes_an_expiring_watch(kind: ServerKind) {
    let server = Server::start(kind, &["--enable-debug-command", "yes"]);
    let backend = private_backend(&server, "ttl_alone").await;
    let mut other = Other::to_url(&server.unix_url()).await;
    other
        .run::<()>(&[b"DEBUG", b"SET-ACTIVE-EXPIRE", b"0"])
        .await;
    let key = backend.physical_key(b"k");
    other.run::<()>(&[b"SET", &key, b"v", b"PX", b"300"]).await;
    let mut watch = watch(&backend, b"k").await;
    let set_at = Instant::now();
    assert!(matches!(watch.ttl(), KeyTtl::ExpiresIn(_)));
    fires(&mut watch, "the TTL ran out").await;
    assert!(
        set_at.elapsed() >= Duration::from_millis(250),
        "fired after {:?}, before the TTL ran out",
        set_at.elapsed()
    );
    let pttl: i64 = other.run(&[b"PTTL", &key]).await;
    assert_eq!(pttl, -2);
}
scenario!(the_ttl_alone_wakes_an_expiring_watch: redis7 => ServerKind::Redis7,
    redis8 => ServerKind::Redis8,
    valkey8 => ServerKind::Valkey8);

/// Tracking clients the server knows (`t` in `CLIENT LIST` flags).
async fn tracking_clients(other: &mut Other) -> usize {
    let list: String = other.run(&[b"CLIENT", b"LIST"]).await;
    list.lines()
        .filter(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("flags="))
                .is_some_and(|flags| flags.contains('t'))
        })
        .count()
}

async fn dropping_the_backend_wakes_watches_and_closes_tracking(kind: ServerKind) {
    let server = Server::start(kind, &[]);
    let mut other = Other::to_url(&server.unix_url()).await;
    let backend = private_backend(&server, "drop_backend").await;
    let mut watch = watch(&backend, b"k").await;
    assert_eq!(tracking_clients(&mut other).await, 1);

    drop(backend);
    fires(&mut watch, "the backend was dropped").await;
    let deadline = Instant::now() + FIRES_WITHIN;
    while tracking_clients(&mut other).await != 0 {
        assert!(
            Instant::now() < deadline,
            "the tracking connection outlived the backend"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The watch outlives its backend harmlessly.
    fires(&mut watch, "nothing more").await;
    drop(watch);
}
scenario!(dropping_the_backend_wakes_watches_and_closes_tracking: redis7 => ServerKind::Redis7,
    redis8 => ServerKind::Redis8,
    valkey8 => ServerKind::Valkey8);

// ---------------------------------------------------------------------------------------------
// Cluster

/// Which of the shared cluster's nodes serves `key` (slot ranges as the harness assigns them).
fn node_of(key: &[u8]) -> usize {
    match key_slot(key) {
        0..=5460 => 0,
        5461..=10922 => 1,
        _ => 2,
    }
}

#[tokio::test]
async fn cluster_keys_on_every_node_fire() {
    let backend = backend(Target::Cluster, "every_node").await;
    let mut other = Other::to_target(Target::Cluster).await;
    let mut names: [Option<String>; 3] = [None, None, None];
    for i in 0.. {
        let name = format!("k{i}");
        let slot = &mut names[node_of(&backend.physical_key(name.as_bytes()))];
        if slot.is_none() {
            *slot = Some(name);
        }
        if names.iter().all(Option::is_some) {
            break;
        }
    }
    let names: Vec<String> = names.into_iter().flatten().collect();
    let mut watches = Vec::new();
    for name in &names {
        watches.push(watch(&backend, name.as_bytes()).await);
    }
    for (i, name) in names.iter().enumerate() {
        other.set(&backend.physical_key(name.as_bytes())).await;
        fires(&mut watches[i], &format!("SET of {name} on node {i}")).await;
        for later in &mut watches[i + 1..] {
            assert!(!later.has_changed(), "{later:?} fired for {name}");
        }
    }
    // One tracking connection per node.
    for node in cluster().nodes() {
        let mut other = Other::to_url(&node.unix_url()).await;
        assert!(tracking_clients(&mut other).await >= 1);
    }
}

/// On a private cluster, a slot moves to another node: the next watch of one of its keys is
/// redirected, wakes every watch (they may sit on the old owner), and lands on the new owner.
#[tokio::test]
async fn cluster_a_moved_slot_wakes_watches_and_finds_the_new_owner() {
    let cluster = tokio::task::spawn_blocking(|| Cluster::start(ServerKind::Redis7))
        .await
        .expect("start a private cluster");
    let backend = RedisBackend::cluster(cluster.urls())
        .key_prefix(unique_prefix("moved"))
        .connect()
        .await
        .expect("connect");
    let key = backend.physical_key(b"k");
    let slot = key_slot(&key);
    let from = node_of(&key);
    let to = (from + 1) % 3;
    let mut before = watch(&backend, b"k").await;

    // The resharding steps of the cluster specification; the slot is empty, so no MIGRATE.
    let id = |node: &Server| -> String { node.cmd(&["CLUSTER", "MYID"]) };
    let (from_id, to_id) = (id(&cluster.nodes()[from]), id(&cluster.nodes()[to]));
    let slot = slot.to_string();
    let _: () = cluster.nodes()[to].cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    let _: () = cluster.nodes()[from].cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    for node in [to, from, 3 - from - to] {
        let _: () = cluster.nodes()[node].cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }

    let mut after = watch(&backend, b"k").await;
    fires(&mut before, "the redirection").await;
    assert_eq!(after.ttl(), KeyTtl::Missing);
    let mut other = Other::to_url(&cluster.nodes()[to].unix_url()).await;
    stays_pending(&mut after, "the redirection").await;
    other.set(&key).await;
    fires(&mut after, "a write on the new owner").await;
    drop(cluster);
}

// ---------------------------------------------------------------------------------------------
// Sentinel

#[tokio::test]
async fn sentinel_watches_follow_the_primary_across_a_failover() {
    let setup = tokio::task::spawn_blocking(sentinel)
        .await
        .expect("start the sentinel setup");
    let backend = RedisBackend::sentinel(setup.sentinel_urls(), setup.service_name())
        .key_prefix(unique_prefix("sentinel"))
        .connect()
        .await
        .expect("connect through sentinel");
    let key = backend.physical_key(b"k");
    let primary_url = |setup: &support::SentinelSetup| {
        format!("redis://127.0.0.1:{}", setup.current_master().port())
    };

    let mut first = watch(&backend, b"k").await;
    Other::to_url(&primary_url(setup)).await.set(&key).await;
    fires(&mut first, "a write on the primary").await;

    let mut across = watch(&backend, b"k").await;
    tokio::task::spawn_blocking(move || setup.failover())
        .await
        .expect("failover");
    // The sentinels kill the clients of the old primary when they demote it.
    timeout(PATIENCE, across.changed())
        .await
        .expect("the failover woke the watch");

    // The old primary's clients were killed as it was demoted (which woke the watch): the
    // tracking connection made since reaches the new primary, and the first watch made on it
    // wakes on its writes; none is missed.
    let mut watch = watch_when_back(&backend, b"k").await;
    Other::to_url(&primary_url(setup))
        .await
        .run::<()>(&[b"SET", &key, b"after the failover"])
        .await;
    timeout(FIRES_WITHIN, watch.changed())
        .await
        .expect("a write on the new primary wakes the first watch made after the failover");
}
