//! The Redlock group on five independent Redis servers the tests start: acquisition with
//! two nodes down, a node slower than the node timeout, two contenders over 1,000 rounds with
//! a node restarted in the middle, group tokens, a renewal that loses its quorum, and a
//! release with two nodes down.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::redlock::ManagedRedlockLease;
use leasehold::coordination::redlock::RedlockGroup;
use leasehold::coordination::{ManagedOptions, Release};
use leasehold::{Coordination, ErrorKind};
use support::server::{Spec, launch_all};
use support::{Server, ServerKind, eventually, unique_prefix};

/// Five independent servers of this test's own.
fn five(test: &str) -> Vec<Server> {
    launch_all(
        (0..5)
            .map(|i| Spec::new(ServerKind::Redis7, format!("{test}-{i}"), &[]))
            .collect(),
    )
}

/// A handle on each server, under `prefix`.
async fn handles(servers: &[Server], prefix: &str) -> Vec<Coordination> {
    let mut handles = Vec::new();
    for server in servers {
        let backend = RedisBackend::standalone(server.unix_url())
            .key_prefix(prefix)
            .connect()
            .await
            .expect("connect");
        handles.push(backend.into());
    }
    handles
}

/// The keyspace events of `key` on `server` from now on (`set`, `del`, ...): to see a write
/// land and then go, which a read now and then could miss. Subscribed before it returns.
fn keyspace_events(server: &Server, key: &str) -> Arc<Mutex<Vec<String>>> {
    let () = server.cmd(&["CONFIG", "SET", "notify-keyspace-events", "Kg$"]);
    let events = Arc::new(Mutex::new(Vec::new()));
    let (ready, subscribed) = std::sync::mpsc::channel();
    let (url, channel, sink) = (
        server.url(),
        format!("__keyspace@0__:{key}"),
        Arc::clone(&events),
    );
    std::thread::spawn(move || {
        let client = redis::Client::open(url).expect("a url");
        let mut connection = client.get_connection().expect("connect");
        let mut pubsub = connection.as_pubsub();
        pubsub.subscribe(&channel).expect("subscribe");
        let _ = ready.send(());
        // Until the server stops with its test.
        while let Ok(message) = pubsub.get_message() {
            if let Ok(event) = message.get_payload::<String>() {
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(event);
            }
        }
    });
    subscribed
        .recv_timeout(Duration::from_secs(5))
        .expect("subscribed to the key's events");
    events
}

/// A round taken and released on every node, so that each handle has read its server's
/// clock: a node's next acquisition is then sent at once (rather than first waiting on
/// the clock of a stalled server past the node timeout, which would send nothing at all).
async fn warm_up(group: &RedlockGroup) {
    let mut lease = group
        .try_acquire("warm-up", LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    assert!(lease.release().await.expect("release").was_held());
}

/// Whether `events` hold a write of the key (`set`) followed by its removal (`del`).
fn landed_then_removed(events: &Mutex<Vec<String>>) -> bool {
    let events = events.lock().unwrap_or_else(|e| e.into_inner());
    events
        .iter()
        .position(|event| event == "set")
        .is_some_and(|at| events[at..].iter().any(|event| event == "del"))
}

/// The lease key of `name` on a node, as a fenced lock of that name stores it.
fn lease_key(node: &Coordination, name: &str) -> String {
    let key = format!("redlock:{{{}:{name}}}:lease", name.len());
    String::from_utf8(node.backend().physical_key(key.as_bytes())).expect("text")
}

const LEASE: Duration = Duration::from_secs(5);

#[tokio::test]
async fn settings_that_cannot_be_kept_are_refused() {
    let memory = || Coordination::memory();
    for count in [1, 2, 4] {
        let err = RedlockGroup::new((0..count).map(|_| memory())).expect_err("not odd, or too few");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{count} nodes");
    }
    let servers = five("redlock-settings");
    let prefix = unique_prefix("redlock");
    let mut same = handles(&servers[..2], &prefix).await;
    same.push(same[0].clone());
    let err = RedlockGroup::new(same).expect_err("one deployment twice");
    assert!(err.to_string().contains("same deployment"), "{err}");
    let group = RedlockGroup::new([memory(), memory(), memory()]).expect("three");
    let err = group
        .clone()
        .node_timeout(Duration::ZERO)
        .expect_err("no timeout");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    // A lease one round could spend.
    let err = group
        .try_acquire("short", Duration::from_millis(300))
        .await
        .expect_err("spent by a round");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    // A waiting acquisition refuses it at once, even while the name is held.
    let _held = group
        .try_acquire("short", Duration::from_secs(10))
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let err = tokio::time::timeout(
        Duration::from_secs(1),
        group.acquire("short", Duration::from_millis(300)),
    )
    .await
    .expect("refused at once, not waited for")
    .expect_err("spent by a round");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

/// Two of five nodes down: a quorum of three grants the lease, renews it, and answers its
/// release; with three down, an acquisition fails naming each node.
#[tokio::test]
async fn two_of_five_down_still_make_a_quorum() {
    let servers = five("redlock-two-down");
    let prefix = unique_prefix("redlock");
    let group = RedlockGroup::new(handles(&servers, &prefix).await)
        .and_then(|group| group.node_timeout(Duration::from_millis(200)))
        .expect("five nodes");
    // Held on all five, then two go.
    let mut held = group
        .try_acquire("two-down", LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    servers[0].stop();
    servers[1].stop();
    assert!(held.renew(LEASE).await.expect("renew"), "three renew it");
    assert!(held.verify_still_held().await.expect("verify"));
    assert!(
        held.release().await.expect("release").was_held(),
        "three answer"
    );

    let mut again = group
        .try_acquire("two-down", LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("three of five grant it");
    assert!(again.fencing_token() > held.fencing_token());
    assert!(again.release().await.expect("release").was_held());

    servers[2].stop();
    let err = group
        .try_acquire("two-down", LEASE)
        .await
        .expect_err("no quorum possible");
    assert!(err.to_string().contains("node 2"), "{err}");
}

/// A release that reaches two of five nodes fails, uncertain: the handle keeps its token,
/// no longer reports ownership, and a release once the nodes are back removes it.
#[tokio::test]
async fn a_release_short_of_a_quorum_keeps_the_token_for_another() {
    let servers = five("redlock-release");
    let prefix = unique_prefix("redlock");
    let group = RedlockGroup::new(handles(&servers, &prefix).await)
        .and_then(|group| group.node_timeout(Duration::from_millis(100)))
        .expect("five nodes");
    let mut held = group
        .try_acquire("release", LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    for server in &servers[..3] {
        server.pause_clients(1_000);
    }
    let err = held.release().await.expect_err("two of five answer");
    assert!(err.is_outcome_uncertain(), "{err}");
    assert!(err.to_string().contains("2 of 5"), "{err}");
    assert_eq!(
        held.remaining_estimate(),
        Duration::ZERO,
        "no longer its own"
    );
    assert!(!held.verify_still_held().await.expect("verify"));
    // A command of the test's own is held by each pause too: answered, the pause is over.
    for server in &servers[..3] {
        let _: String = server.cmd(&["PING"]);
    }
    held.release().await.expect("a quorum answers now");
    let mut next = group
        .try_acquire("release", LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("released everywhere");
    assert!(next.release().await.expect("release").was_held());
}

/// A node that stalls past the node timeout counts as failed: the four others grant the
/// lease within about the timeout, and once the stall ends the stalled node's late grant is
/// removed.
#[tokio::test]
async fn a_node_slower_than_the_node_timeout_counts_as_failed() {
    let servers = five("redlock-slow");
    let prefix = unique_prefix("redlock");
    let timeout = Duration::from_millis(100);
    let nodes = handles(&servers, &prefix).await;
    let key = lease_key(&nodes[4], "slow");
    let group = RedlockGroup::new(nodes)
        .and_then(|group| group.node_timeout(timeout))
        .expect("five nodes");
    warm_up(&group).await;
    let events = keyspace_events(&servers[4], &key);
    servers[4].pause_clients(1_500);
    let started = Instant::now();
    let mut held = group
        .try_acquire("slow", LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("four of five grant it");
    assert!(
        // Well under the 1.5 s stall: the round did not wait for the stalled node.
        started.elapsed() < timeout * 8,
        "took {:?}",
        started.elapsed()
    );
    // Once the stall ends the late acquisition lands (before its deadline, which the
    // default timeouts put past the stall): it is then removed by its owner token, once
    // that deadline has passed.
    eventually("the late grant landed, then was removed", async || {
        landed_then_removed(&events)
    })
    .await;
    let value: Option<String> = servers[4].cmd(&["GET", &key]);
    assert_ne!(value.as_deref(), Some(held.owner_token()));
    assert!(held.release().await.expect("release").was_held());
}

/// A renewal that a quorum answered while one node's answer was lost may still land on that
/// node later, and end its copy at that renewal's expiry from then: the holder counts on no
/// more than it from then on, whatever longer renewal follows, as a single-node lease does
/// (and a detached lease hands the bound on as its renewal cap).
#[tokio::test]
async fn a_renewal_one_node_left_unanswered_bounds_the_estimate_from_then_on() {
    let servers = launch_all(
        (0..3)
            .map(|i| Spec::new(ServerKind::Redis7, format!("redlock-unanswered-{i}"), &[]))
            .collect(),
    );
    let prefix = unique_prefix("redlock");
    let proxy = support::proxy::Proxy::to_port(servers[2].port());
    let mut nodes = handles(&servers[..2], &prefix).await;
    nodes.push(
        RedisBackend::standalone(proxy.url())
            .key_prefix(&prefix)
            .connect()
            .await
            .expect("connect")
            .into(),
    );
    let group = RedlockGroup::new(nodes)
        .and_then(|group| group.node_timeout(Duration::from_millis(100)))
        .expect("three nodes");
    let mut lease = group
        .try_acquire("bounded", Duration::from_secs(60))
        .await
        .expect("try")
        .acquired()
        .expect("free");
    proxy.stall();
    let short = Duration::from_secs(2);
    assert!(lease.renew(short).await.expect("two of three renew it"));
    proxy.pass();
    assert!(lease.renew(Duration::from_secs(60)).await.expect("renew"));
    let left = lease.remaining_estimate();
    assert!(
        left <= short,
        "counts on {left:?} after a renewal of {short:?} may still land"
    );
    let detached = lease.detach().await.expect("held");
    assert_eq!(detached.renewal_cap(), Some(short));
    group
        .by_owner("bounded", detached.owner_token().clone())
        .release()
        .await
        .expect("release");
}

/// A node that forgets its counter (restarted without persistence) hands out its clock as
/// its next token, and a later majority may share only that node with the one the last
/// token was written back to. Tokens then keep rising only while the nodes' clocks agree:
/// with the clocks of one machine, the second holder's token is the greater; with one
/// node's clock ten seconds ahead of the others' (its counter set where that clock's token
/// would be), the second holder's token is below the first's, as the module docs say.
#[tokio::test]
async fn a_node_that_forgets_its_counter_keeps_tokens_rising_only_while_clocks_agree() {
    let servers = launch_all(
        (0..3)
            .map(|i| Spec::new(ServerKind::Redis7, format!("redlock-forget-{i}"), &[]))
            .collect(),
    );
    let prefix = unique_prefix("redlock");
    let lease = Duration::from_secs(1);
    let group = RedlockGroup::new(handles(&servers, &prefix).await)
        .and_then(|group| group.node_timeout(Duration::from_millis(200)))
        .expect("three nodes");
    let node_a = &handles(&servers[..1], &prefix).await[0];
    for (name, ahead_us) in [("agreeing", 0u64), ("skewed", 10_000_000)] {
        if ahead_us > 0 {
            let time: Vec<String> = servers[0].cmd(&["TIME"]);
            let now_us = time[0].parse::<u64>().expect("s") * 1_000_000
                + time[1].parse::<u64>().expect("us");
            let key = format!("redlock:{{{}:{name}}}:fence", name.len());
            let counter =
                String::from_utf8(node_a.backend().physical_key(key.as_bytes())).expect("text");
            let () = servers[0].cmd(&["SET", &counter, &(now_us + ahead_us).to_string()]);
        }
        // The first holder's majority: A and B.
        servers[2].stop();
        let first = taken(&group, name, lease).await;
        // B forgets everything, and is back after the longest lease (as the docs ask); A
        // is gone: the next majority, B and C, shares only B with the first.
        servers[0].stop();
        servers[1].stop();
        servers[1].start_again();
        tokio::time::sleep(lease + Duration::from_millis(100)).await;
        servers[2].start_again();
        let second = taken(&group, name, lease).await;
        if ahead_us == 0 {
            assert!(second > first, "{name}: {second} after {first}");
        } else {
            assert!(second < first, "{name}: {second} after {first}");
        }
        servers[0].start_again();
    }
}

/// The fencing token of a lease on `name`, taken (retried while nodes come back) and
/// released.
async fn taken(group: &RedlockGroup, name: &str, lease: Duration) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match group.try_acquire(name, lease).await {
            Ok(attempt) => {
                let mut held = attempt.acquired().expect("free");
                let token = held.fencing_token();
                held.release().await.expect("release");
                return token;
            }
            Err(err) => assert!(Instant::now() < deadline, "{name}: {err}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One server reached twice (by its socket and by its TCP address: different endpoints, so
/// the group takes them) votes once: each node holds a token of its own, and the second
/// entry finds the first's. With the third node down, no quorum, where one token for both
/// entries made one server two votes.
#[tokio::test]
async fn one_server_reached_twice_votes_once() {
    let servers = launch_all(
        (0..2)
            .map(|i| Spec::new(ServerKind::Redis7, format!("redlock-twice-{i}"), &[]))
            .collect(),
    );
    let prefix = unique_prefix("redlock");
    let connect = async |url: String| -> Coordination {
        RedisBackend::standalone(url)
            .key_prefix(&prefix)
            .connect()
            .await
            .expect("connect")
            .into()
    };
    let group = RedlockGroup::new([
        connect(servers[0].unix_url()).await,
        connect(servers[0].url()).await,
        connect(servers[1].url()).await,
    ])
    .and_then(|group| group.node_timeout(Duration::from_millis(200)))
    .expect("three entries the group cannot tell apart");
    servers[1].stop();
    match group.try_acquire("twice", LEASE).await {
        Ok(attempt) => assert!(
            attempt.acquired().is_none(),
            "one server made a quorum of two"
        ),
        Err(err) => assert!(
            err.is_unavailable() || err.kind() == ErrorKind::Transient,
            "{err}"
        ),
    }
}

/// With two nodes down, the three left are all needed: a third that stalls past the node
/// timeout fails the round within about that timeout, its failure named, rather than
/// holding it for the stall.
#[tokio::test]
async fn a_stalled_node_fails_the_round_within_the_node_timeout() {
    let servers = five("redlock-stalled");
    let prefix = unique_prefix("redlock");
    let timeout = Duration::from_millis(100);
    let group = RedlockGroup::new(handles(&servers, &prefix).await)
        .and_then(|group| group.node_timeout(timeout))
        .expect("five nodes");
    warm_up(&group).await;
    servers[0].stop();
    servers[1].stop();
    let key = lease_key(&handles(&servers[2..3], &prefix).await[0], "stalled");
    let events = keyspace_events(&servers[2], &key);
    servers[2].pause_clients(2_000);
    let started = Instant::now();
    let err = group
        .try_acquire("stalled", LEASE)
        .await
        .expect_err("no quorum without the stalled node");
    assert!(
        started.elapsed() < timeout * 5,
        "took {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("node 2"), "{err}");
    // The stalled node applies the acquisition once the stall ends, before its deadline:
    // the failed round's cleanup removes it once that deadline has passed.
    eventually(
        "the late grant landed on the stalled node, then was removed",
        async || landed_then_removed(&events),
    )
    .await;
    let value: Option<String> = servers[2].cmd(&["GET", &key]);
    assert_eq!(
        value, None,
        "the failed round left nothing on the stalled node"
    );
}

/// Two contenders with connections of their own, on two threads, take the lease in turns
/// over 1,000 rounds, each hold lasting a millisecond, a node restarted in the middle
/// (without persistence, after waiting out the longest lease, as the module documentation
/// asks): no two holds overlap, and the group's tokens increase in the order of the holds.
/// One node's counter starts far ahead of the others' clocks, so that tokens keep
/// increasing only if each round writes its token back to its majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_contenders_never_both_hold_it() {
    const ROUNDS: usize = 1_000;
    let servers = Arc::new(five("redlock-contend"));
    let prefix = unique_prefix("redlock");
    let lease = Duration::from_millis(700);
    let holds: Arc<Mutex<Vec<(Instant, Instant, u64)>>> = Arc::default();
    // An hour of microseconds ahead of the clock floor.
    let ahead = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_micros()
        + 3_600_000_000)
        .to_string();
    let first = handles(&servers[..1], &prefix).await.remove(0);
    let counter = String::from_utf8(first.backend().physical_key(b"redlock:{9:contended}:fence"))
        .expect("text");
    let () = servers[0].cmd(&["SET", &counter, &ahead]);
    let rounds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let back = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut contenders = Vec::new();
    for _ in 0..2 {
        let group = RedlockGroup::new(handles(&servers, &prefix).await)
            .and_then(|group| group.node_timeout(Duration::from_millis(200)))
            .expect("five nodes");
        let holds = Arc::clone(&holds);
        let rounds = Arc::clone(&rounds);
        let back = Arc::clone(&back);
        contenders.push(tokio::spawn(async move {
            // At least ROUNDS rounds, and on until the restarted node is back.
            while rounds.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < ROUNDS
                || !back.load(std::sync::atomic::Ordering::Relaxed)
            {
                let attempt = match group.try_acquire("contended", lease).await {
                    Ok(attempt) => attempt,
                    // Three nodes were busy or down for a moment: a lost round.
                    Err(err) => {
                        assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
                        continue;
                    }
                };
                if let Some(mut held) = attempt.acquired() {
                    let from = Instant::now();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let to = Instant::now();
                    holds
                        .lock()
                        .expect("not poisoned")
                        .push((from, to, held.fencing_token()));
                    // Released by a quorum, or failed as the round's acquisition may while
                    // a node restarts; never another holder's lease.
                    match held.release().await {
                        Ok(release) => assert_ne!(release, Release::NotOwned),
                        Err(err) => assert_eq!(err.kind(), ErrorKind::Transient, "{err}"),
                    }
                }
            }
        }));
    }
    // A node restarted in the middle, empty, after the longest lease.
    let restarting = Arc::clone(&servers);
    let during = Arc::clone(&rounds);
    let restarted = Arc::clone(&back);
    let restart = tokio::spawn(async move {
        // A third of the way in.
        while during.load(std::sync::atomic::Ordering::Relaxed) < ROUNDS / 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        restarting[2].stop();
        let stopped_at = during.load(std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(lease * 2).await;
        tokio::task::spawn_blocking(move || restarting[2].start_again())
            .await
            .expect("restarted");
        restarted.store(true, std::sync::atomic::Ordering::Relaxed);
        (
            stopped_at,
            during.load(std::sync::atomic::Ordering::Relaxed),
        )
    });
    for contender in contenders {
        tokio::time::timeout(Duration::from_secs(120), contender)
            .await
            .expect("the rounds end")
            .expect("contender");
    }
    let (stopped_at, started_at) = restart.await.expect("restart");
    let mut holds = holds.lock().expect("not poisoned").clone();
    holds.sort_by_key(|(from, _, _)| *from);
    assert!(
        holds.len() > 50,
        "only {} holds in {ROUNDS} rounds",
        holds.len()
    );
    for pair in holds.windows(2) {
        let ((_, first_to, first_token), (second_from, _, second_token)) = (pair[0], pair[1]);
        assert!(first_to <= second_from, "two holds overlapped");
        assert!(
            second_token > first_token,
            "tokens went back: {first_token}, {second_token}"
        );
    }
    println!(
        "{} holds in {} rounds, none overlapping; a node down from round {stopped_at} to \
         {started_at}",
        holds.len(),
        rounds.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A managed lease whose renewal reaches two of five nodes only (the key gone from two, as a
/// restart without persistence leaves it, and a third stalled past the node timeout) fires
/// its ownership signal, and only then is its token removed from every node: a contender
/// gets in after the signal, never before, and long before the two nodes that renewed it
/// would let it expire.
#[tokio::test]
async fn a_renewal_that_loses_its_quorum_fires_the_signal_before_anyone_acquires() {
    let servers = five("redlock-renewal");
    let prefix = unique_prefix("redlock");
    let nodes = handles(&servers, &prefix).await;
    let key = lease_key(&nodes[0], "renewal");
    let group = RedlockGroup::new(nodes).expect("five nodes");
    let contender = RedlockGroup::new(handles(&servers, &prefix).await).expect("five nodes");
    let lease = Duration::from_millis(600);
    let held = group
        .try_acquire("renewal", lease)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let kept = ManagedRedlockLease::keep(held, &ManagedOptions::new().lease(lease)).expect("keep");
    let mut lost = kept.ownership();
    for server in &servers[..2] {
        let deleted: i64 = server.cmd(&["DEL", &key]);
        assert_eq!(deleted, 1, "the lease was on every node");
    }
    servers[2].pause_clients(2_000);
    let lost_at = tokio::spawn(async move {
        lost.lost().await;
        Instant::now()
    });
    let acquired_at = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(mut lease) = contender
                .try_acquire("renewal", Duration::from_secs(5))
                .await
                .expect("try")
                .acquired()
            {
                let at = Instant::now();
                lease.release().await.expect("release");
                return at;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the contender gets in once the lease ended");
    let lost_at = tokio::time::timeout(Duration::from_secs(5), lost_at)
        .await
        .expect("the signal fired")
        .expect("task");
    assert!(
        lost_at <= acquired_at,
        "the contender got in before the signal"
    );
    // The two nodes that renewed it (at half the lease) would hold it a whole lease more.
    assert!(
        acquired_at - lost_at < lease / 2,
        "the token was not removed: the contender waited {:?}",
        acquired_at - lost_at
    );
    assert!(kept.is_lost());
}

/// A Redlock lease detached from its handle goes on by its owner token from other handles on
/// the same nodes: renewed and verified on a quorum (an expiry too short for the node
/// timeouts refused before anything is sent), and, when a renewal misses its quorum, its
/// token removed from the nodes that renewed it, as a handle's lost renewal does.
#[tokio::test]
async fn a_detached_lease_goes_on_by_its_owner_token_on_a_quorum() {
    let servers = five("redlock-detached");
    let prefix = unique_prefix("redlock");
    let nodes = handles(&servers, &prefix).await;
    let key = lease_key(&nodes[0], "detached");
    // Node timeouts a loaded machine keeps: a node that answers late would count as a no,
    // and the quorum this test counts on would be short by it.
    let group = RedlockGroup::new(nodes)
        .and_then(|group| group.node_timeout(Duration::from_millis(500)))
        .expect("five nodes");
    let elsewhere = RedlockGroup::new(handles(&servers, &prefix).await)
        .and_then(|group| group.node_timeout(Duration::from_millis(500)))
        .expect("five nodes");
    let held = group
        .try_acquire("detached", LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let fencing_token = held.fencing_token();
    let detached = held.detach().await.expect("held");
    assert_eq!(detached.fencing_token(), Some(fencing_token));
    let owner = elsewhere.by_owner("detached", detached.into_owner_token());
    let err = owner
        .renew(Duration::from_millis(300))
        .await
        .expect_err("spent by a round");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(owner.verify().await.expect("verify"));
    assert!(owner.renew(LEASE).await.expect("renew"));
    assert!(
        elsewhere
            .try_acquire("detached", LEASE)
            .await
            .expect("try")
            .acquired()
            .is_none(),
        "still held"
    );

    // Two nodes lose it: the three others renew, and their renewal is a quorum.
    for server in &servers[..2] {
        let deleted: i64 = server.cmd(&["DEL", &key]);
        assert_eq!(deleted, 1, "the lease was on every node");
    }
    // Renewed for longer than the test waits: only a removal can free it in time.
    let long = Duration::from_secs(60);
    assert!(owner.renew(long).await.expect("renew"), "three of five");
    // A third: two renew it, short of a quorum; the lease ends, and goes from those two.
    let deleted: i64 = servers[2].cmd(&["DEL", &key]);
    assert_eq!(deleted, 1);
    assert!(!owner.renew(long).await.expect("renew"), "two of five");
    eventually(
        "the token goes from the nodes that renewed it",
        async || {
            servers[3..]
                .iter()
                .all(|server| server.cmd::<i64>(&["EXISTS", &key]) == 0)
        },
    )
    .await;
    let mut next = elsewhere
        .try_acquire("detached", LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("free again");
    assert!(next.fencing_token() > fencing_token);
    assert!(next.release().await.expect("release").was_held());
}

/// The router's state for the extractor test: a handle for the crate's outage log, and the
/// group.
#[derive(Clone)]
struct Replicated {
    coordination: Coordination,
    group: RedlockGroup,
}

impl axum::extract::FromRef<Replicated> for Coordination {
    fn from_ref(state: &Replicated) -> Self {
        state.coordination.clone()
    }
}

/// The ledger's lease, on the group of the router's state.
struct Ledger;

impl leasehold::extract::LeaseSpec<Replicated> for Ledger {
    async fn lease(
        _parts: &mut http::request::Parts,
        state: &Replicated,
    ) -> Result<leasehold::extract::LeaseRequest, leasehold::layer::key::KeyError> {
        Ok(leasehold::extract::LeaseRequest::named("ledger").redlock(state.group.clone()))
    }
}

/// A `Lease` whose request names a Redlock group takes the lease on a quorum of its nodes:
/// `409` while another holds it there, then granted with the group's next fencing token.
#[tokio::test]
async fn the_lease_extractor_takes_a_redlock_lease() {
    use axum::routing::get;
    use leasehold::extract::Lease;

    let servers = five("redlock-extractor");
    let prefix = unique_prefix("redlock");
    let nodes = handles(&servers, &prefix).await;
    let group = RedlockGroup::new(nodes.clone()).expect("five nodes");
    let app = axum::Router::new()
        .route(
            "/ledger",
            get(|lease: Lease<Ledger>| async move { lease.fencing_token().to_string() }),
        )
        .with_state(Replicated {
            coordination: nodes[0].clone(),
            group: group.clone(),
        });
    let addr = support::http::serve(app).await;
    let client = support::http::client();
    let mut held = group
        .try_acquire("ledger", Duration::from_secs(30))
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let refused = support::http::get(&client, addr, "/ledger", &[]).await;
    assert_eq!(refused.status, http::StatusCode::CONFLICT, "{refused:?}");
    assert!(held.release().await.expect("release").was_held());
    let granted = support::http::get(&client, addr, "/ledger", &[]).await;
    assert_eq!(granted.status, http::StatusCode::OK, "{granted:?}");
    let token: u64 = std::str::from_utf8(&granted.body)
        .expect("text")
        .parse()
        .expect("a token");
    assert!(
        token > held.fencing_token(),
        "{token} after {}",
        held.fencing_token()
    );
}

/// A node whose lease key has no expiry (something else's, or corrupt) never frees by
/// itself: a waiting acquisition sends at most a round per poll interval (none while its
/// watches show the keys there), never spins at round-trip speed across every node.
#[tokio::test]
async fn a_lease_key_without_expiry_is_waited_for_at_the_poll_interval() {
    let servers = five("redlock-no-expiry");
    let prefix = unique_prefix("redlock");
    let nodes = handles(&servers, &prefix).await;
    for (server, node) in servers.iter().zip(&nodes).take(3) {
        let () = server.cmd(&["SET", &lease_key(node, "stuck"), "someone"]);
    }
    let group = RedlockGroup::new(nodes).expect("five nodes");
    assert_waits_without_spinning(&group, "stuck", &servers[4]).await;
}

/// Waits 500 ms for `name`, which stays held, and asserts that the wait sent no more scripts
/// to the free node `free` than a round every 50 ms or so would (each an acquisition and
/// its release).
async fn assert_waits_without_spinning(group: &RedlockGroup, name: &str, free: &Server) {
    let before = support::target::command_calls(free, "evalsha");
    let waited = tokio::time::timeout(Duration::from_millis(500), group.acquire(name, LEASE)).await;
    assert!(waited.is_err(), "{name} is held: no quorum is free");
    let scripts = support::target::command_calls(free, "evalsha") - before;
    assert!(scripts <= 40, "{scripts} scripts in 500 ms: a busy spin");
}

/// A waiter watches the lease key on every node: while a holder keeps a quorum it runs no
/// round at all (its watches tell it the keys are there), and the holder's release wakes it
/// to take the lease.
#[tokio::test]
async fn a_waiter_runs_no_round_while_a_quorum_is_held_and_takes_the_lease_once_released() {
    let servers = five("redlock-wake");
    let prefix = unique_prefix("redlock");
    let holder = RedlockGroup::new(handles(&servers, &prefix).await).expect("five nodes");
    // A node timeout that a loaded machine's registration never misses: a node that did not
    // answer in time would count as maybe free, and a round would go.
    let waiter = RedlockGroup::new(handles(&servers, &prefix).await)
        .expect("five nodes")
        .node_timeout(Duration::from_secs(1))
        .expect("a node timeout");
    warm_up(&waiter).await;
    let mut held = holder
        .try_acquire("wake", LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let waiting = tokio::spawn(async move { waiter.acquire("wake", LEASE).await });
    // The waiter's first registrations find the quorum held: no round, then or after.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before: Vec<u64> = servers
        .iter()
        .map(|server| support::target::command_calls(server, "evalsha"))
        .collect();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let rounds: u64 = servers
        .iter()
        .zip(&before)
        .map(|(server, before)| support::target::command_calls(server, "evalsha") - before)
        .sum();
    assert_eq!(rounds, 0, "scripts sent while the quorum was held");
    assert!(!waiting.is_finished(), "the waiter took a held lease");
    assert_eq!(held.release().await.expect("release"), Release::Released);
    let mut lease = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter takes the lease once it is released")
        .expect("waiter")
        .expect("acquire");
    assert!(lease.fencing_token() > held.fencing_token());
    assert_eq!(lease.release().await.expect("release"), Release::Released);
}

/// A node that cannot be watched (here an in-process one, which announces nothing) counts as
/// maybe free, so a waiter runs rounds while a holder keeps the quorum with it; each busy
/// round's own grants, given back on the free nodes, fire its watches there, and it must not
/// take them for the holder's release: it waits on the holder's nodes, rounds at most 50 ms
/// apart, and never spins.
#[tokio::test]
async fn a_waiter_beside_a_node_it_cannot_watch_does_not_spin_on_its_own_rounds() {
    let servers = five("redlock-unwatched");
    let prefix = unique_prefix("redlock");
    let mut nodes = handles(&servers[..4], &prefix).await;
    nodes.insert(2, Coordination::memory());
    let holder = RedlockGroup::new(nodes.clone()).expect("five nodes");
    let waiter = RedlockGroup::new(nodes.clone()).expect("five nodes");
    warm_up(&waiter).await;
    let _held = holder
        .try_acquire("spin", LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    // The holder keeps nodes 0, 1 and the in-process 2; nodes 3 and 4 are free.
    for (server, node) in servers[2..4].iter().zip(&nodes[3..]) {
        let () = server.cmd(&["DEL", &lease_key(node, "spin")]);
    }
    assert_waits_without_spinning(&waiter, "spin", &servers[3]).await;
}
