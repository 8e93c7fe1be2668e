//! Leader election on every server kind, the cluster and the memory backend: candidates
//! lead in the order they began, terms increase, observers see every change and the gaps
//! with no leader, a lost session ends its campaign and leaves nothing; across processes, a
//! killed leader is replaced within its lease, and a paused one is fenced.

mod support;

use std::time::Duration;

use leasehold::coordination::ManagedOptions;
use leasehold::coordination::election::{Election, Leader};
use leasehold::coordination::session::{ManagedSession, Sessions};
use leasehold::{Coordination, ErrorKind};
use support::ServerKind;
use support::target::{Target, scenario};
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);

async fn session(sessions: &Sessions, lease: Duration) -> ManagedSession {
    ManagedSession::grant(sessions, &ManagedOptions::new().lease(lease))
        .await
        .expect("grant")
}

async fn next_change(observer: &mut leasehold::coordination::election::Observer) -> Option<Leader> {
    tokio::time::timeout(WAIT, observer.changed())
        .await
        .expect("a change")
        .expect("observe")
}

scenario!(candidates_lead_in_turn_with_increasing_terms);

/// Three candidates: the first leads, the others wait in the order they began; proclaim
/// changes the value observers read; each resign hands the leadership to the next with a
/// greater term; the last resign leaves nobody, which the observer sees too.
async fn candidates_lead_in_turn_with_increasing_terms(target: Target) {
    let coordination = target.coordination("election").await;
    let sessions = Sessions::named(&coordination, "nodes");
    let election = Election::named(&sessions, "primary");
    let mut observer = election.observe();
    assert_eq!(next_change(&mut observer).await, None, "nobody yet");

    let lease = Duration::from_secs(10);
    let (a, b, c) = (
        session(&sessions, lease).await,
        session(&sessions, lease).await,
        session(&sessions, lease).await,
    );
    let first = election.campaign(&a, "a").await.expect("campaign");
    let leader = next_change(&mut observer).await.expect("a leads");
    assert_eq!((leader.value(), leader.term()), (&b"a"[..], first.term()));
    let (election_b, election_c) = (election.clone(), election.clone());
    let second = tokio::spawn(async move { election_b.campaign(&b, "b").await.map(|l| (l, b)) });
    // b began first: c waits behind it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let third = tokio::spawn(async move { election_c.campaign(&c, "c").await.map(|l| (l, c)) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!second.is_finished() && !third.is_finished(), "a leads");

    assert!(first.proclaim("a, draining").await.expect("proclaim"));
    let leader = next_change(&mut observer).await.expect("a leads");
    assert_eq!(leader.value(), b"a, draining");
    assert!(first.is_leader().await.expect("is leader"));
    let first_term = first.term();
    assert!(first.resign().await.expect("resign"));

    let (second, b) = tokio::time::timeout(WAIT, second)
        .await
        .expect("b leads next")
        .expect("task")
        .expect("campaign");
    assert!(second.term() > first_term);
    let leader = next_change(&mut observer).await.expect("b leads");
    assert_eq!((leader.value(), leader.term()), (&b"b"[..], second.term()));
    assert!(!third.is_finished(), "c waits for b");
    let second_term = second.term();
    assert!(second.resign().await.expect("resign"));
    let (third, c) = tokio::time::timeout(WAIT, third)
        .await
        .expect("c leads next")
        .expect("task")
        .expect("campaign");
    assert!(third.term() > second_term);
    assert_eq!(next_change(&mut observer).await.expect("c").value(), b"c");
    assert!(third.resign().await.expect("resign"));
    assert_eq!(next_change(&mut observer).await, None, "nobody leads");
    assert_eq!(election.leader().await.expect("leader"), None);
    drop((b, c));
}

scenario!(a_lost_session_ends_its_campaign);

/// A waiting candidate whose session is revoked (from another handle, by its id) fails
/// with `NotHeld` within the session's keep-alive period; a session of another space is
/// refused before anything is sent.
async fn a_lost_session_ends_its_campaign(target: Target) {
    let coordination = target.coordination("election-lost").await;
    let sessions = Sessions::named(&coordination, "nodes");
    let election = Election::named(&sessions, "primary");
    let leader = session(&sessions, Duration::from_secs(10)).await;
    let leadership = election
        .campaign(&leader, "leader")
        .await
        .expect("campaign");

    let waiting = session(&sessions, Duration::from_secs(1)).await;
    let id: leasehold::coordination::OwnerToken = waiting.id().parse().expect("an id");
    let campaign = election.clone();
    let waiter =
        tokio::spawn(async move { campaign.campaign(&waiting, "waiter").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "waits for the leader");
    let revoked = Instant::now();
    assert!(
        sessions
            .by_owner(id)
            .release()
            .await
            .expect("revoke")
            .was_held()
    );
    let err = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the campaign ends")
        .expect("task")
        .expect_err("its session is gone");
    assert_eq!(err.kind(), ErrorKind::NotHeld);
    println!(
        "the campaign ended {:?} after its session was revoked",
        revoked.elapsed()
    );
    assert!(leadership.resign().await.expect("resign"));
    assert_eq!(election.leader().await.expect("leader"), None);

    let elsewhere = Sessions::named(&coordination, "elsewhere");
    let foreign = session(&elsewhere, Duration::from_secs(10)).await;
    let err = election
        .campaign(&foreign, "x")
        .await
        .expect_err("another space");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

/// A campaign dropped while it waits leaves no candidate behind: once its last step's
/// deadline has passed, its entry is gone, so the leader's resign leaves nobody leading
/// (a candidate left behind would lead, for a process that stopped campaigning).
#[tokio::test]
async fn a_cancelled_campaign_withdraws_its_candidate() {
    let server = support::Server::start(ServerKind::Redis7, &[]);
    let prefix = support::unique_prefix("election-cancel");
    let coordination: Coordination =
        leasehold::backend::redis::RedisBackend::standalone(server.url())
            .key_prefix(&prefix)
            .connect()
            .await
            .expect("connect")
            .into();
    let sessions = Sessions::named(&coordination, "nodes");
    let election = Election::named(&sessions, "primary");
    let leader = session(&sessions, Duration::from_secs(10)).await;
    let leadership = election
        .campaign(&leader, "leader")
        .await
        .expect("campaign");
    let waiting = session(&sessions, Duration::from_secs(10)).await;
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        election.campaign(&waiting, "waiter"),
    )
    .await;
    assert!(cancelled.is_err(), "it waited");
    let candidates = String::from_utf8(
        coordination
            .backend()
            .physical_key(b"session:{5:nodes}:election:7:primary:candidates"),
    )
    .expect("text");
    support::eventually("the candidate is withdrawn", async || {
        server.cmd::<i64>(&["ZCARD", &candidates]) == 1
    })
    .await;
    assert!(leadership.resign().await.expect("resign"));
    assert_eq!(election.leader().await.expect("leader"), None);
    drop(waiting);
}
