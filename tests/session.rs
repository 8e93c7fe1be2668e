//! Sessions (leases with attached keys) on every server kind, the cluster and the memory
//! backend: attached keys live exactly as long as their lease, keep-alive extends them all
//! in one step, revoke removes them, claims make a name one lease's alone; late commands
//! bring nothing back; a slot move and a Sentinel failover cost latency, not errors.

mod support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::coordination::session::{
    Claim, MAX_KEY_NAME_LEN, MAX_KEYS_PER_SESSION, MAX_VALUE_LEN, ManagedSession, Session, Sessions,
};
use leasehold::coordination::{ManagedOptions, Release};
use leasehold::{Coordination, ErrorKind};
use support::ServerKind;
use support::target::{Target, scenario};
use tokio::time::Instant;

const MINUTE: Duration = Duration::from_secs(60);

scenario!(attached_keys_live_and_go_with_their_lease);

/// Keys put with a lease are read while it lives; a name put by another lease moves to it;
/// a delete removes only this lease's; revoking removes every key at once, and again finds
/// nothing; binary names and values; bounds refused before anything is sent.
async fn attached_keys_live_and_go_with_their_lease(target: Target) {
    let coordination = target.coordination("session").await;
    let space = Sessions::named(&coordination, "workers");
    let mut first = space.grant(MINUTE).await.expect("grant");
    let mut second = space.grant(MINUTE).await.expect("grant");
    assert_ne!(first.id(), second.id());
    let binary = [0u8, 255, b'\n', b'{', b'}'];
    assert!(first.put("a", "1").await.expect("put"));
    assert!(first.put(binary, binary).await.expect("put"));
    assert!(first.put("moves", "first").await.expect("put"));
    assert!(second.put("b", "2").await.expect("put"));
    assert_eq!(
        space.get("a").await.expect("get").as_deref(),
        Some(&b"1"[..])
    );
    assert_eq!(
        space.get(binary).await.expect("get").as_deref(),
        Some(&binary[..])
    );
    assert_eq!(space.get("none").await.expect("get"), None);

    // A put by another lease moves the name; a claim of a held name is refused.
    assert_eq!(
        second.claim("moves", "second").await.expect("claim"),
        Claim::Taken
    );
    assert!(second.put("moves", "second").await.expect("put"));
    assert_eq!(
        first.claim("moves", "first").await.expect("claim"),
        Claim::Taken
    );
    assert_eq!(
        second.claim("moves", "again").await.expect("claim"),
        Claim::Claimed,
        "claiming its own name again"
    );
    // The first lease's delete leaves the second's name alone.
    assert!(!first.delete("moves").await.expect("delete"));
    assert!(first.delete("a").await.expect("delete"));
    assert!(first.put("a", "1").await.expect("put"));

    let state = first.state().await.expect("state").expect("live");
    assert!(state.time_to_live() <= MINUTE && state.time_to_live() > MINUTE / 2);
    let mut keys = vec![b"a".to_vec(), binary.to_vec()];
    keys.sort();
    assert_eq!(state.keys(), keys);
    let mut listed = space.list().await.expect("list");
    listed.sort();
    let mut expected = vec![
        (b"a".to_vec(), b"1".to_vec()),
        (binary.to_vec(), binary.to_vec()),
        (b"b".to_vec(), b"2".to_vec()),
        (b"moves".to_vec(), b"again".to_vec()),
    ];
    expected.sort();
    assert_eq!(listed, expected);

    assert!(first.keep_alive().await.expect("keep alive"));
    assert_eq!(first.release().await.expect("revoke"), Release::Released);
    assert_eq!(space.get("a").await.expect("get"), None);
    assert_eq!(space.get(binary).await.expect("get"), None);
    assert_eq!(
        space.get("moves").await.expect("get").as_deref(),
        Some(&b"again"[..]),
        "the second lease's name stays"
    );
    assert_eq!(
        first.release().await.expect("again"),
        Release::AlreadyReleased
    );
    // By its id, from anywhere: nothing comes back.
    let stale = space.by_owner(first.id().parse().expect("an id"));
    assert!(!stale.renew(MINUTE).await.expect("renew"));
    assert_eq!(
        stale.release().await.expect("revoke"),
        Release::AlreadyReleased
    );
    assert_eq!(
        space
            .state_of(&first.id().parse().expect("id"))
            .await
            .expect("state"),
        None
    );

    for (name, value) in [
        (Vec::new(), Vec::new()),
        (vec![b'n'; MAX_KEY_NAME_LEN + 1], Vec::new()),
        (b"n".to_vec(), vec![0; MAX_VALUE_LEN + 1]),
    ] {
        let err = second.put(&name, &value).await.expect_err("out of bounds");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }
    assert_eq!(second.release().await.expect("revoke"), Release::Released);
    assert!(space.list().await.expect("list").is_empty());
}

scenario!(a_detached_session_is_kept_alive_and_revoked_by_its_id);

/// A session let go of by its handle lives on: kept alive by its id from another handle
/// (its key with it, past the lease it had), then revoked by its id, its key with it.
async fn a_detached_session_is_kept_alive_and_revoked_by_its_id(target: Target) {
    let coordination = target.coordination("session-detached").await;
    let space = Sessions::named(&coordination, "detached");
    let lease = Duration::from_millis(800);
    let mut session = space.grant(lease).await.expect("grant");
    assert!(session.put("k", "v").await.expect("put"));
    let granted = Instant::now();
    let detached = session.detach().await.expect("held");
    assert_eq!(detached.expiry(), lease);
    let by_id = Sessions::named(&coordination, "detached").by_owner(detached.into_owner_token());
    assert!(by_id.verify().await.expect("verify"));
    assert!(by_id.renew(MINUTE).await.expect("keep alive"));
    tokio::time::sleep_until(granted + lease + Duration::from_millis(200)).await;
    assert!(
        space.get("k").await.expect("get").is_some(),
        "kept alive with its lease"
    );
    assert_eq!(by_id.release().await.expect("revoke"), Release::Released);
    assert_eq!(space.get("k").await.expect("get"), None);
    assert!(
        !by_id.renew(MINUTE).await.expect("renew"),
        "nothing comes back"
    );
}

scenario!(a_lease_holds_a_bounded_number_of_keys);

/// The bound on names per lease: the next name is refused with nothing written; a name it
/// holds can still be written; a name another lease took from it counts again when taken
/// back (on Redis and in memory alike).
async fn a_lease_holds_a_bounded_number_of_keys(target: Target) {
    let coordination = target.coordination("session-bound").await;
    let space = Sessions::named(&coordination, "bound");
    let mut session = space.grant(MINUTE).await.expect("grant");
    for i in 0..MAX_KEYS_PER_SESSION {
        assert!(session.put(i.to_string(), "v").await.expect("put"));
    }
    let err = session.put("one more", "v").await.expect_err("full");
    assert_eq!(err.kind(), ErrorKind::CapacityExceeded);
    assert_eq!(space.get("one more").await.expect("get"), None);
    assert!(session.put("0", "again").await.expect("a name it holds"));
    let state = session.state().await.expect("state").expect("live");
    assert_eq!(state.keys().len(), MAX_KEYS_PER_SESSION as usize);
    // A name another lease took is no longer this one's: taking it back counts, though the
    // lease's own set may still list it.
    let mut other = space.grant(MINUTE).await.expect("grant");
    assert!(other.put("1", "stolen").await.expect("put"));
    assert!(session.put("refill", "v").await.expect("room for one"));
    let err = session.put("1", "back").await.expect_err("full again");
    assert_eq!(err.kind(), ErrorKind::CapacityExceeded);
    let state = session.state().await.expect("state").expect("live");
    assert_eq!(state.keys().len(), MAX_KEYS_PER_SESSION as usize);
    assert_eq!(other.release().await.expect("revoke"), Release::Released);
    assert_eq!(session.release().await.expect("revoke"), Release::Released);
    assert!(space.list().await.expect("list").is_empty());
}

scenario!(attached_keys_are_gone_within_50_ms_of_their_lease);

/// A lease with three keys, renewed once to 1 s and never again: every key is read until
/// just before the lease's end and gone within 50 ms after it, however the server cleans
/// up; a revoked lease's keys are gone at once.
async fn attached_keys_are_gone_within_50_ms_of_their_lease(target: Target) {
    let coordination = target.coordination("session-expiry").await;
    let space = Sessions::named(&coordination, "expiry");
    let lease = Duration::from_secs(1);
    let mut session = space.grant(MINUTE).await.expect("grant");
    for name in ["a", "b", "c"] {
        assert!(session.put(name, "v").await.expect("put"));
    }
    // The server counts the lease from between these two moments.
    let asked = Instant::now();
    assert!(session.renew(lease).await.expect("renew"));
    let answered = Instant::now();
    // Halfway through the lease: far from its end on a loaded machine.
    tokio::time::sleep_until(asked + lease / 2).await;
    assert_eq!(space.list().await.expect("list").len(), 3, "early");
    // Gone from the lease's end (counted from the renewal's answer, the latest the server
    // can have counted it from) plus 50 ms.
    tokio::time::sleep_until(answered + lease + Duration::from_millis(50)).await;
    assert!(space.list().await.expect("list").is_empty(), "late");
    for name in ["a", "b", "c"] {
        assert_eq!(space.get(name).await.expect("get"), None, "{name} late");
    }
    assert!(!session.keep_alive().await.expect("keep alive"), "expired");

    let mut revoked = space.grant(MINUTE).await.expect("grant");
    assert!(revoked.put("r", "v").await.expect("put"));
    revoked.release().await.expect("revoke");
    assert_eq!(space.get("r").await.expect("get"), None);
}

/// Names that no user key can collide with the server's out-of-memory guard; a lease
/// whose names moved to another lease counts only its own against the bound; and out of
/// memory, a new key is refused while a keep-alive still extends the lease and its keys.
#[tokio::test]
async fn edges_of_the_bound_and_of_memory() {
    let server = support::Server::start(ServerKind::Redis7, &[]);
    let coordination = support::connect(server.url(), "session-edges").await;
    let space = Sessions::named(&coordination, "edges");
    let mut first = space.grant(MINUTE).await.expect("grant");
    let mut second = space.grant(MINUTE).await.expect("grant");
    // A user's name equal to the guard's member survives other puts.
    assert!(first.put("out-of-memory guard", "v").await.expect("put"));
    assert!(first.put("other", "v").await.expect("put"));
    assert!(
        space
            .get("out-of-memory guard")
            .await
            .expect("get")
            .is_some()
    );

    // The first lease fills up; the second takes one name; the first has room again.
    for i in 0..MAX_KEYS_PER_SESSION - 2 {
        assert!(first.put(format!("n{i}"), "v").await.expect("put"));
    }
    assert_eq!(
        first.put("full", "v").await.expect_err("full").kind(),
        ErrorKind::CapacityExceeded
    );
    assert!(second.put("n0", "moved").await.expect("put"));
    assert!(first.put("full", "v").await.expect("room for one"));

    server.out_of_memory(true);
    let err = second.put("new", "v").await.expect_err("out of memory");
    assert_eq!(err.kind(), ErrorKind::OutOfMemory);
    assert!(!err.is_outcome_uncertain());
    assert!(
        second
            .renew(MINUTE)
            .await
            .expect("a keep-alive grows nothing")
    );
    server.out_of_memory(false);
    assert_eq!(space.get("new").await.expect("get"), None);
    assert!(space.get("n0").await.expect("get").is_some());
    for invalid in [Vec::new(), vec![b'n'; MAX_KEY_NAME_LEN + 1]] {
        assert_eq!(
            space.get(&invalid).await.expect_err("bounded").kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            first.delete(&invalid).await.expect_err("bounded").kind(),
            ErrorKind::InvalidArgument
        );
    }
    first.release().await.expect("revoke");
    second.release().await.expect("revoke");
}

/// A keep-alive is one round trip, whatever the lease holds: one `EVALSHA` that extends
/// the lease and its 50 keys, which then outlive their first expiry.
#[tokio::test]
async fn a_keep_alive_extends_every_key_in_one_command() {
    let server = support::Server::start(ServerKind::Redis7, &[]);
    let coordination = support::connect(server.url(), "session-one-step").await;
    let space = Sessions::named(&coordination, "one-step");
    let lease = Duration::from_millis(500);
    let mut session = space.grant(MINUTE).await.expect("grant");
    for i in 0..50 {
        assert!(session.put(i.to_string(), "v").await.expect("put"));
    }
    assert!(session.renew(lease).await.expect("renew"));
    let calls = || {
        ["evalsha", "eval", "evalsha_ro", "eval_ro"]
            .iter()
            .map(|command| support::target::command_calls(&server, command))
            .sum::<u64>()
    };
    // The first keep-alive loaded the script (`NOSCRIPT`, then `EVAL`): this one is measured.
    let scripts = calls();
    let kept_at = Instant::now();
    assert!(
        session
            .renew(Duration::from_secs(2))
            .await
            .expect("keep alive")
    );
    // One script from the client: the lease and its 50 keys are commands inside it.
    assert_eq!(calls() - scripts, 1);
    tokio::time::sleep_until(kept_at + lease + Duration::from_millis(200)).await;
    for i in 0..50 {
        assert!(
            space.get(i.to_string()).await.expect("get").is_some(),
            "key {i} not extended"
        );
    }
    session.release().await.expect("revoke");
}

/// A put and a keep-alive held by the network (the connection broken) while the lease is
/// revoked from another handle: delivered after the revoke, they find no live lease and
/// bring nothing back.
#[tokio::test]
async fn late_puts_and_keep_alives_bring_nothing_back() {
    let behind = support::Behind::start("session-late");
    let late = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(300)))
        .await;
    let direct = behind.direct().await;
    let space = Sessions::named(&late, "late");
    let mut session = space.grant(MINUTE).await.expect("grant");
    assert!(session.put("kept", "v").await.expect("put"));
    let id = session.id().to_owned();
    let calls = || support::target::command_calls(&behind.server, "evalsha");
    let sent = behind.proxy.sent();
    behind.proxy.stall();
    let held = tokio::spawn(async move {
        let put = session.put("late", "v").await;
        (session, put)
    });
    behind.proxy.until_sent(sent, "the put is sent").await;
    behind.proxy.sever();
    behind.proxy.pass();
    let (session, put) = held.await.expect("the put task");
    assert!(put.expect_err("no answer").is_outcome_uncertain());
    // The keep-alive, held the same way, on a connection made first (a step that reads):
    // the bytes waited for are then the keep-alive's, not a new connection's handshake.
    space.list().await.expect("connected again");
    let sent = behind.proxy.sent();
    behind.proxy.stall();
    let keeper = space.by_owner(id.parse().expect("id"));
    let kept = tokio::spawn(async move { keeper.renew(MINUTE).await });
    behind
        .proxy
        .until_sent(sent, "the keep-alive is sent")
        .await;
    behind.proxy.sever();
    behind.proxy.pass();
    let kept = kept.await.expect("the keep-alive task");
    assert!(
        kept.expect_err("no answer").is_outcome_uncertain(),
        "a keep-alive lost on the way is uncertain, never sent again"
    );

    let elsewhere = Sessions::named(&direct, "late");
    let revoked = elsewhere
        .by_owner(id.parse().expect("id"))
        .release()
        .await
        .expect("revoke");
    assert_eq!(revoked, Release::Released);
    drop(session);
    let before = calls();
    behind.proxy.deliver_held();
    support::eventually("the held commands run", async || calls() >= before + 2).await;
    assert_eq!(
        elsewhere.get("late").await.expect("get"),
        None,
        "the put came back"
    );
    assert_eq!(elsewhere.get("kept").await.expect("get"), None);
    assert_eq!(
        elsewhere
            .state_of(&id.parse().expect("id"))
            .await
            .expect("state"),
        None,
        "the keep-alive brought the lease back"
    );
}

/// A put held in the network while its holder settles the name as the docs say (its answer
/// lost, the error's retry time waited out, the name put again): delivered then, the first
/// put changes nothing, since its deadline on the server's clock has passed, and the second
/// value stays. The same for a delete held while the name is put again.
#[tokio::test]
async fn a_put_or_delete_delivered_after_its_deadline_undoes_nothing() {
    let behind = support::Behind::start("session-put-deadline");
    // A deadline of at most 600 ms past the server's clock at sending (and its 100 ms margin).
    let bounds = |builder: leasehold::backend::redis::RedisBackendBuilder| {
        builder
            .response_timeout(Duration::from_millis(300))
            .connection_timeout(Duration::from_millis(300))
            .transient_retry(Duration::ZERO)
    };
    let late = behind.through_proxy(bounds).await;
    let space = Sessions::named(&late, "deadline");
    let mut session = space.grant(MINUTE).await.expect("grant");
    let calls = || support::target::command_calls(&behind.server, "evalsha");
    // Both scripts loaded: a held first use would be refused `NOSCRIPT` when delivered.
    assert!(!session.delete("absent").await.expect("delete"));
    for held_step in ["put", "delete"] {
        assert!(session.put("job", "settled").await.expect("put"));
        let sent = behind.proxy.sent();
        behind.proxy.stall();
        let held = tokio::spawn(async move {
            let outcome = if held_step == "put" {
                session.put("job", "first").await.map(|_| ())
            } else {
                session.delete("job").await.map(|_| ())
            };
            (session, outcome)
        });
        behind.proxy.until_sent(sent, "the step is sent").await;
        behind.proxy.sever();
        behind.proxy.pass();
        let (returned, outcome) = held.await.expect("the step's task");
        session = returned;
        let err = outcome.expect_err("no answer");
        assert!(err.is_outcome_uncertain(), "{held_step}: {err}");
        // Settled as the docs say: sent again once the error's retry time has passed.
        let settle_after = err
            .retry_after()
            .expect("the wait until the deadline has passed");
        assert!(settle_after <= Duration::from_secs(2), "{settle_after:?}");
        tokio::time::sleep(settle_after).await;
        assert!(session.put("job", "second").await.expect("put again"));
        let before = calls();
        behind.proxy.deliver_held();
        support::eventually(&format!("the held {held_step} runs"), async || {
            calls() > before
        })
        .await;
        assert_eq!(
            space.get("job").await.expect("get"),
            Some(b"second".to_vec()),
            "the held {held_step} undid the put that settled it"
        );
    }
    session.release().await.expect("revoke");
}

/// A managed session's keeper keeps it alive past many leases; with the server stalled it
/// tells the holder at its estimate, before the server lets the lease (and its keys) go.
#[tokio::test]
async fn a_managed_session_is_kept_and_told_lost_when_the_server_stalls() {
    let behind = support::Behind::start("session-managed");
    let holder = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(200)))
        .await;
    let reader = Sessions::named(&behind.direct().await, "managed");
    let lease = Duration::from_millis(600);
    let session = ManagedSession::grant(
        &Sessions::named(&holder, "managed"),
        &ManagedOptions::new().lease(lease),
    )
    .await
    .expect("grant");
    assert!(session.put("instance", "a").await.expect("put"));
    tokio::time::sleep(3 * lease).await;
    assert!(!session.is_lost());
    assert!(
        reader.get("instance").await.expect("get").is_some(),
        "kept alive"
    );
    let mut lost = session.ownership();
    let stalled_at = Instant::now();
    behind.proxy.stall();
    let reason = tokio::time::timeout(2 * lease, lost.lost())
        .await
        .expect("told within the lease");
    let told_at = Instant::now();
    assert_eq!(
        reason,
        leasehold::coordination::ownership::LossReason::Uncertain
    );
    // Told before the server lets the lease go: the server's clock when told (at most its
    // reading now less the time since, however late this read comes) is before the lease's
    // expiry on the server, which no renewal moved since the stall.
    let leases = behind
        .server
        .keys(behind.prefix.as_bytes())
        .into_iter()
        .find(|key| key.ends_with(b":leases"))
        .expect("the space's leases key");
    let asked_at = Instant::now();
    let (seconds, micros): (u64, u64) = behind.server.cmd(&["TIME"]);
    let expiry: f64 = redis::cmd("ZSCORE")
        .arg(&leases)
        .arg(session.id())
        .query(&mut behind.server.connection())
        .expect("the lease's expiry");
    let told_ms = (seconds * 1000 + micros / 1000)
        .saturating_sub(u64::try_from((asked_at - told_at).as_millis()).expect("ms"));
    assert!(
        (told_ms as f64) < expiry,
        "told {:?} after the stall, {} ms after the lease's expiry",
        told_at - stalled_at,
        told_ms as f64 - expiry
    );
    behind.proxy.pass();
    assert!(!session.put("after", "x").await.expect("put"));
}

/// Workers in turn claim one job while its slot moves from master to master: a claim or a
/// revoke that meets the slot half-moved costs latency, not an error, and no two workers
/// ever hold the job at once.
#[tokio::test]
async fn workers_take_turns_at_a_job_while_its_slot_moves() {
    support::turns::while_its_slot_moves(
        ServerKind::Redis7,
        "session-slot-move",
        b"session:{4:jobs}:leases",
        claim_turn,
    )
    .await;
}

/// The same across a Sentinel failover (the primary killed): only a claim the old primary
/// acknowledged but had not replicated may overlap another, and its revoke tells.
#[tokio::test]
async fn workers_take_turns_at_a_job_across_a_sentinel_failover() {
    support::turns::across_a_sentinel_failover(ServerKind::Redis7, "session-failover", claim_turn)
        .await;
}

/// One worker's turn at the job: a session, the job claimed under it (tried again while
/// another holds it, or when a claim's answer was lost: claiming again is safe; a session
/// a failover lost is replaced), the work, the revoke.
async fn claim_turn(
    coordination: Coordination,
    occupancy: Arc<support::turns::Occupancy>,
) -> Result<(), String> {
    let jobs = Sessions::named(&coordination, "jobs");
    // A grant costs latency, not errors (it is sent again when lost). A claim whose answer
    // is lost is never sent again: it fails uncertain, and the worker claims again, as
    // documented; any other error fails the turn (a claim certainly not applied is sent
    // again within the handle's transient-retry bound, longer than the failover).
    // A grant answered after its 2 s lease ran out fails `Timeout` (the lease revoked), a
    // documented answer to the failover's latency: the worker asks again.
    'session: loop {
        let mut session = match jobs.grant(Duration::from_secs(2)).await {
            Ok(session) => session,
            Err(err) if err.kind() == ErrorKind::Timeout => continue,
            Err(err) => return Err(format!("grant: {err}")),
        };
        loop {
            match session.claim("job", "mine").await {
                Ok(Claim::Claimed) => break,
                Ok(Claim::Taken) => tokio::time::sleep(Duration::from_millis(5)).await,
                // The lease lost with the old primary's tail: an answer, not an error.
                Ok(_) => continue 'session,
                Err(err) if err.is_outcome_uncertain() => {}
                Err(err) => return Err(format!("claim: {err}")),
            }
        }
        let stay = occupancy.stay().await;
        let revoked = session.release().await;
        return occupancy.released(stay, revoked);
    }
}

/// The worker-ownership and presence examples, run as a user would against Redis: a worker
/// killed mid-job hands its job over within one lease (and not before), and a dead
/// instance leaves the live set when its lease runs out. Each example checks itself and
/// fails otherwise.
#[test]
fn the_worker_ownership_and_presence_examples_keep_their_word() {
    let url = support::shared(ServerKind::Redis7).url();
    for example in ["worker_ownership", "presence"] {
        let output = std::process::Command::new(support::example::binary(example))
            .env("REDIS_URL", &url)
            .output()
            .expect("the example runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{example} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        println!("{example}:\n{stdout}");
    }
}

/// A server that evicts keys when full evicts a session space's keys one at a time, which
/// breaks its claims with no step noticing (an evicted `…:expiries` lets a claimed name be
/// claimed again): a grant on such a server is refused, naming the policy, and a fenced
/// lock is allowed with one warning (its holder learns of an evicted lease at its next
/// renewal). Once the policy is `noeviction` the same handle grants; a server with no
/// `maxmemory` grants too.
#[tokio::test]
async fn a_server_that_evicts_keys_refuses_sessions_and_warns_lock_holders() {
    let server = support::Server::start(ServerKind::Redis7, &[]);
    let connect = async || -> Coordination {
        leasehold::backend::redis::RedisBackend::standalone(server.url())
            .key_prefix(support::unique_prefix("session-eviction"))
            .connect()
            .await
            .expect("connect")
            .into()
    };
    let () = server.cmd(&["CONFIG", "SET", "maxmemory", "1gb"]);
    let () = server.cmd(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
    let logs = support::logs::capture();
    let coordination = connect().await;
    let refused = Sessions::named(&coordination, "jobs")
        .grant(MINUTE)
        .await
        .expect_err("refused on a server that evicts");
    assert_eq!(refused.kind(), ErrorKind::Unsupported);
    assert!(refused.to_string().contains("volatile-lru"), "{refused}");
    let lock = leasehold::coordination::lock::FencedLock::named(&coordination, "report");
    let mut lease = lock.acquire(MINUTE).await.expect("a lock is allowed");
    support::eventually("the lock's holder is warned", async || {
        logs.count(
            "WARN",
            "evicts keys when full (maxmemory-policy volatile-lru)",
        ) == 1
    })
    .await;
    lease.release().await.expect("release");

    // The same handle grants once the policy is mended, without a restart.
    let () = server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let mut session = Sessions::named(&coordination, "jobs")
        .grant(MINUTE)
        .await
        .expect("noeviction");
    session.release().await.expect("revoke");
    let () = server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    let () = server.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let mut session = Sessions::named(&connect().await, "jobs")
        .grant(MINUTE)
        .await
        .expect("no maxmemory: nothing is evicted");
    session.release().await.expect("revoke");
}

/// A session's expiries key evicted (as a server that evicts despite the refusal above, or
/// an operator's `DEL`, removes it) leaves names whose holder lives: a claim of one by
/// another session, and a read, are refused as corrupt state rather than finding the name
/// free, and the holder's keep-alive fails the same way (a managed session is then told it
/// lost its lease when its estimate runs out), before it writes anything. Once the holder
/// is gone, the name is free again.
#[tokio::test]
async fn a_name_whose_expiry_was_evicted_is_neither_claimed_again_nor_kept_silently() {
    let server = support::Server::start(ServerKind::Redis7, &[]);
    let coordination = support::connect(server.url(), "session-evicted").await;
    let prefix = coordination
        .backend()
        .as_redis()
        .expect("on Redis")
        .key_prefix()
        .to_vec();
    let space = Sessions::named(&coordination, "jobs");
    let mut first = space.grant(MINUTE).await.expect("grant");
    assert_eq!(
        first.claim("job:42", "a").await.expect("claim"),
        Claim::Claimed
    );
    let expiries: Vec<Vec<u8>> = server
        .keys(&prefix)
        .into_iter()
        .filter(|key| key.ends_with(b":expiries"))
        .collect();
    assert_eq!(expiries.len(), 1, "one expiries key");
    let _: u64 = redis::cmd("DEL")
        .arg(&expiries[0])
        .query(&mut server.connection())
        .expect("DEL");

    let mut second = space.grant(MINUTE).await.expect("grant");
    let refused = second
        .claim("job:42", "b")
        .await
        .expect_err("a live holder's name is not free");
    assert_eq!(refused.kind(), ErrorKind::CorruptState, "{refused}");
    let unreadable = space.get("job:42").await.expect_err("nor read as absent");
    assert_eq!(unreadable.kind(), ErrorKind::CorruptState, "{unreadable}");
    let leases = expiries[0][..expiries[0].len() - b"expiries".len()]
        .iter()
        .chain(b"leases")
        .copied()
        .collect::<Vec<u8>>();
    let first_id = first.id().to_owned();
    let lease_expiry = || -> Option<String> {
        redis::cmd("ZSCORE")
            .arg(&leases)
            .arg(&first_id)
            .query(&mut server.connection())
            .expect("ZSCORE")
    };
    let before = lease_expiry();
    assert!(before.is_some(), "the holder's lease is live");
    let told = first.keep_alive().await.expect_err("the holder is told");
    assert_eq!(told.kind(), ErrorKind::CorruptState, "{told}");
    assert_eq!(
        lease_expiry(),
        before,
        "nothing written before the refusal: the lease kept its expiry"
    );

    // Its holder gone (its lease's record removed, as an expiry would), the name is free
    // again: an entry left without an expiry does not block it forever.
    let _: u64 = redis::cmd("ZREM")
        .arg(&leases)
        .arg(&first_id)
        .query(&mut server.connection())
        .expect("ZREM");
    assert_eq!(space.get("job:42").await.expect("get"), None);
    assert_eq!(
        second.claim("job:42", "b").await.expect("claim"),
        Claim::Claimed
    );
    second.release().await.expect("revoke");
}

scenario!(a_sessions_own_answers_and_the_order_of_a_list);

/// The plain handle's accessors and bounds, and the list's order: the lease it was granted,
/// an estimate within it, verified while held; a renewal out of bounds refused before
/// anything is sent; the list names the soonest to expire first; once revoked, the handle
/// is released, a claim answers `NotHeld` and a verification no.
async fn a_sessions_own_answers_and_the_order_of_a_list(target: Target) {
    let coordination = target.coordination("session-answers").await;
    let space = Sessions::named(&coordination, "answers");
    let lease = Duration::from_secs(5);
    let mut soon = space.grant(lease).await.expect("grant");
    let mut late = space.grant(MINUTE).await.expect("grant");
    assert_eq!(soon.lease(), lease);
    let left = soon.remaining_estimate();
    assert!(left <= lease && left > lease / 2, "{left:?}");
    assert!(!soon.is_released());
    assert!(soon.verify_still_held().await.expect("verify"));
    assert!(late.put("late", "l").await.expect("put"));
    assert!(soon.put("soon", "s").await.expect("put"));
    let names: Vec<Vec<u8>> = space
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, [b"soon".to_vec(), b"late".to_vec()], "soonest first");
    let refused = soon
        .renew(Duration::ZERO)
        .await
        .expect_err("under a millisecond");
    assert_eq!(refused.kind(), ErrorKind::InvalidArgument, "{refused}");

    assert_eq!(soon.release().await.expect("revoke"), Release::Released);
    assert!(soon.is_released());
    assert_eq!(soon.claim("x", "v").await.expect("claim"), Claim::NotHeld);
    assert!(!soon.verify_still_held().await.expect("verify"));
    late.release().await.expect("revoke");
}

/// A server that will not say whether it evicts (`CONFIG` refused, as managed services
/// refuse it) is trusted, with one warning per handle that sessions need `noeviction`.
#[tokio::test]
async fn a_server_that_refuses_config_is_trusted_with_one_warning() {
    let server = support::Server::start(ServerKind::Redis7, &[]);
    let url = server.acl_user(&["-config"]);
    let logs = support::logs::capture();
    let coordination = support::connect(url, "session-no-config").await;
    let space = Sessions::named(&coordination, "jobs");
    for _ in 0..3 {
        let mut session = space.grant(MINUTE).await.expect("granted");
        session.release().await.expect("revoke");
    }
    assert_eq!(
        logs.count("WARN", "cannot tell whether Redis evicts keys"),
        1,
        "one warning per handle"
    );
}

// ---------------------------------------------------------------------------------------------
// The rules every self-renewing holding keeps (`support::holding`), for a session that claims
// the resource: one worker's at a time.

struct ClaimingSession;

impl support::holding::Held for ClaimingSession {
    const WHAT: &'static str = "session";
    type Kind = Sessions;

    /// A session granted for `lease` that claims the name `"resource"`; busy (the session
    /// released) when another live session holds it.
    async fn try_acquire(
        coordination: &Coordination,
        lease: Duration,
    ) -> leasehold::Result<leasehold::coordination::Attempt<Session>> {
        let mut session = Sessions::named(coordination, "resource")
            .grant(lease)
            .await?;
        match session.claim("resource", "holder").await? {
            Claim::Claimed => Ok(leasehold::coordination::Attempt::Acquired(session)),
            _ => {
                session.release().await?;
                Ok(leasehold::coordination::Attempt::Busy { retry_after: None })
            }
        }
    }

    fn by_owner(
        coordination: &Coordination,
        owner: leasehold::coordination::OwnerToken,
    ) -> leasehold::coordination::ByOwner {
        Sessions::named(coordination, "resource").by_owner(owner)
    }
}

holding_rules!(ClaimingSession);
