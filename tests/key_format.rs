//! The stored key of every primitive, pinned: for the prefix `app:` and the name `job` (and
//! the client key `client`), the exact keys each one leaves in Redis. A change that moves a
//! key makes an old and a new replica use different keys for the same thing during a rolling
//! deploy (and starts fencing tokens again at 1): it must come with a CHANGELOG entry and an
//! upgrade note in `docs/upgrading.md`, and change this test.

mod support;

use std::time::Duration;

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::hash_lease::LeaseHash;
use leasehold::coordination::latch::CountdownLatch;
use leasehold::coordination::lock::FencedLock;
use leasehold::coordination::rate_limit::{
    FixedWindow, Gcra, RateLimitPolicy, Refill, SlidingWindow, Stacked, TokenBucket,
};
use leasehold::coordination::rw_lease::ReadWriteLock;
use leasehold::coordination::semaphore::{Capacity, KeyedSemaphore, Semaphore};
use support::{Server, ServerKind};

const MINUTE: Duration = Duration::from_secs(60);

/// A name over the 128 bytes stored as given.
const LONG_NAME: &[u8] = &[b'x'; 200];

/// The keys under `app:` after `act` ran on a fresh Redis 8 server (which has hash field
/// expiry), sorted.
async fn keys_after<F: Future<Output = ()>>(
    act: impl FnOnce(Coordination, String) -> F,
) -> Vec<String> {
    let server = Server::start(ServerKind::Redis8, &[]);
    let coordination: Coordination = RedisBackend::standalone(server.url())
        .key_prefix("app:")
        .connect()
        .await
        .expect("connect")
        .into();
    act(coordination, server.url()).await;
    let mut keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    keys.sort();
    keys
}

#[tokio::test]
async fn every_primitive_stores_its_keys_where_it_did() {
    let stored = keys_after(|coordination, url| async move {
        let c = &coordination;
        let fixed = FixedWindow::new(c, "job", 10, MINUTE).expect("valid");
        fixed.try_acquire(b"client", 2).await.expect("fixed window");
        let sliding = SlidingWindow::new(c, "job", 10, MINUTE, 6).expect("valid");
        sliding
            .try_acquire(b"client", 1)
            .await
            .expect("sliding window");
        let bucket =
            TokenBucket::new(c, "job", 10, Refill::new(1, Duration::from_secs(1))).expect("valid");
        bucket
            .try_acquire(b"client", 1)
            .await
            .expect("token bucket");
        let gcra = Gcra::new(c, "job", 10, MINUTE, 5).expect("valid");
        gcra.try_acquire(b"client", 1).await.expect("gcra");
        let stacked =
            Stacked::new(c, "job", [RateLimitPolicy::new("minute", 10, MINUTE)]).expect("valid");
        stacked.try_acquire(b"client", 1).await.expect("stacked");

        let lock = FencedLock::named(c, "job");
        let lease = lock.try_acquire(MINUTE).await.expect("lock").acquired();
        std::mem::forget(lease.expect("free"));
        let semaphore = Semaphore::new(c, "job", 2).expect("valid");
        let permit = semaphore.try_acquire(MINUTE).await.expect("permit");
        std::mem::forget(permit.acquired().expect("free"));
        let keyed =
            KeyedSemaphore::new(c, "job", Capacity::per_key(2).and_global(4)).expect("valid");
        let permit = keyed.try_acquire(b"client", MINUTE).await.expect("permit");
        std::mem::forget(permit.acquired().expect("free"));
        let rw = ReadWriteLock::named(c, "job");
        let lease = rw.try_write(MINUTE).await.expect("write lease").acquired();
        std::mem::forget(lease.expect("free"));
        let hash = LeaseHash::named(c, "job");
        let lease = hash
            .try_acquire("field", MINUTE)
            .await
            .expect("field lease");
        std::mem::forget(lease.acquired().expect("free"));
        // A name over 128 bytes is stored as its digest.
        let long = FencedLock::named(c, LONG_NAME);
        let lease = long.try_acquire(MINUTE).await.expect("lock").acquired();
        std::mem::forget(lease.expect("free"));
        let latch = CountdownLatch::named(c, "job");
        let generation = latch.reset(1, None).await.expect("latch");
        generation.count_down().await.expect("count down");
        let value = leasehold::coordination::fenced_value::FencedValue::named(c, "job");
        value.write(1, b"value").await.expect("fenced value");
        let sessions = leasehold::coordination::session::Sessions::named(c, "job");
        let mut session = sessions.grant(MINUTE).await.expect("session");
        assert!(session.put("worker", "a").await.expect("put"));
        session.detach().await.expect("held");
        let election = leasehold::coordination::election::Election::named(&sessions, "job");
        let candidate = leasehold::coordination::session::ManagedSession::grant(
            &sessions,
            &leasehold::coordination::ManagedOptions::new(),
        )
        .await
        .expect("session");
        let leadership = election.campaign(&candidate, "v").await.expect("leads");
        std::mem::forget(leadership);
        std::mem::forget(candidate);
        // A Redlock group's keys on each of its nodes (three handles on one server here,
        // under prefixes of their own).
        let mut nodes: Vec<Coordination> = Vec::new();
        for node in 0..3 {
            let backend = RedisBackend::standalone(url.clone())
                .key_prefix(format!("node{node}:"))
                .connect()
                .await
                .expect("connect");
            nodes.push(backend.into());
        }
        let group = leasehold::coordination::redlock::RedlockGroup::new(nodes).expect("three");
        let lease = group
            .try_acquire("job", MINUTE)
            .await
            .expect("redlock")
            .acquired();
        std::mem::forget(lease.expect("free"));
    })
    .await;
    let digest = {
        use sha2::Digest;
        let hash = sha2::Sha256::digest(LONG_NAME);
        hash.iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>()
    };
    // A session's key set is named by its lease id, 32 random hex digits.
    let lease_set = "app:|session:{3:job}:lease:";
    let stored: Vec<String> = stored
        .into_iter()
        .map(|key| match key.strip_prefix(lease_set) {
            Some(id) if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
                format!("{lease_set}<id>")
            }
            _ => key,
        })
        .collect();
    let mut expected = vec![
        "app:|hlease:3:job".to_owned(),
        "app:|latch:{3:job}".to_owned(),
        "app:|latch:{3:job}:done".to_owned(),
        "app:|lock:{3:job}:fence".to_owned(),
        "app:|lock:{3:job}:lease".to_owned(),
        format!("app:|lock:{{71:sha256:{digest}}}:fence"),
        format!("app:|lock:{{71:sha256:{digest}}}:lease"),
        "app:|rl:fw:3:job:client".to_owned(),
        "app:|rl:gcra:3:job:client".to_owned(),
        "app:|rl:st:3:job:client".to_owned(),
        "app:|rl:sw:3:job:client".to_owned(),
        "app:|rl:tb:3:job:client".to_owned(),
        "app:|fenced:{3:job}".to_owned(),
        "node0:|redlock:{3:job}:fence".to_owned(),
        "node0:|redlock:{3:job}:lease".to_owned(),
        "node1:|redlock:{3:job}:fence".to_owned(),
        "node1:|redlock:{3:job}:lease".to_owned(),
        "node2:|redlock:{3:job}:fence".to_owned(),
        "node2:|redlock:{3:job}:lease".to_owned(),
        "app:|rwlease:{3:job}".to_owned(),
        "app:|rwlease:{3:job}:fence".to_owned(),
        "app:|sem:3:job".to_owned(),
        "app:|sem:{3:job}:global".to_owned(),
        "app:|sem:{3:job}:key:client".to_owned(),
        "app:|session:{3:job}:election:3:job:candidates".to_owned(),
        "app:|session:{3:job}:election:3:job:leader".to_owned(),
        "app:|session:{3:job}:election:3:job:terms".to_owned(),
        "app:|session:{3:job}:election:3:job:values".to_owned(),
        "app:|session:{3:job}:entries".to_owned(),
        "app:|session:{3:job}:expiries".to_owned(),
        "app:|session:{3:job}:lease:<id>".to_owned(),
        "app:|session:{3:job}:leases".to_owned(),
    ];
    expected.sort();
    assert_eq!(stored, expected);
}
