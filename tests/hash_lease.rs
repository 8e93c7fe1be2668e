//! Hash-field leases on the servers with hash field expiry (Redis 8.2 here) and the memory
//! backend, and the clear refusal, with nothing written, everywhere else.

mod support;

use std::time::Duration;

use leasehold::coordination::ManagedOptions;
use leasehold::coordination::Release;
use leasehold::coordination::hash_lease::{FieldLease, LeaseHash, ManagedFieldLease};
use leasehold::{Coordination, ErrorKind};
use support::eventually;
use support::target::{Target, scenario};

const MINUTE: Duration = Duration::from_secs(60);

async fn acquired(hash: &LeaseHash, field: &[u8], lease: Duration) -> FieldLease {
    hash.try_acquire(field, lease)
        .await
        .expect("try_acquire")
        .acquired()
        .expect("the field is free")
}

/// The physical key of the hash; Redis only.
fn physical(coordination: &Coordination, hash: &LeaseHash) -> Vec<u8> {
    coordination.backend().physical_key(hash.key())
}

// ---------------------------------------------------------------------------------------------

scenario!(fields_are_leases_of_their_own field_expiry);

async fn fields_are_leases_of_their_own(target: Target) {
    let coordination = target.coordination("hash-basic").await;
    let hash = LeaseHash::named(&coordination, "devices");
    assert_eq!(hash.key(), b"hlease:7:devices");

    let mut phone = acquired(&hash, b"phone", MINUTE).await;
    assert_eq!(phone.field(), b"phone");
    let busy = hash.try_acquire("phone", MINUTE).await.expect("try");
    let wait = busy.retry_after().expect("held");
    assert!(wait > Duration::from_secs(55) && wait <= MINUTE, "{wait:?}");
    // Another field, binary names included, is another lease.
    let mut binary = acquired(&hash, b"\x00\xff|{}", Duration::from_secs(30)).await;
    assert!(phone.verify_still_held().await.expect("verify"));
    assert!(phone.renew(Duration::from_secs(90)).await.expect("renew"));
    assert_eq!(binary.release().await.expect("release"), Release::Released);
    assert!(
        phone
            .verify_still_held()
            .await
            .expect("other fields untouched")
    );
    assert_eq!(phone.release().await.expect("release"), Release::Released);
    assert_eq!(
        phone.release().await.expect("again"),
        Release::AlreadyReleased
    );
    assert!(
        hash.try_acquire("phone", MINUTE)
            .await
            .expect("try")
            .is_acquired()
    );
}

scenario!(a_stale_handle_cannot_touch_a_replacement_nor_another_field field_expiry);

async fn a_stale_handle_cannot_touch_a_replacement_nor_another_field(target: Target) {
    let coordination = target.coordination("hash-stale").await;
    let hash = LeaseHash::named(&coordination, "stale");
    let mut stale = acquired(&hash, b"job", Duration::from_millis(150)).await;
    let other = acquired(&hash, b"other", MINUTE).await;
    let mut replacement = None;
    eventually("the short lease expires", async || {
        replacement = hash
            .try_acquire("job", MINUTE)
            .await
            .expect("try")
            .acquired();
        replacement.is_some()
    })
    .await;
    let Some(mut replacement) = replacement else {
        unreachable!("eventually returned")
    };
    assert!(!stale.verify_still_held().await.expect("verify"));
    assert!(!stale.renew(MINUTE).await.expect("renew"));
    // Lost, so nothing is sent... and sent as it is, it finds another owner.
    assert_ne!(stale.release().await.expect("release"), Release::Released);
    assert!(replacement.verify_still_held().await.expect("verify"));
    assert!(other.verify_still_held().await.expect("the other field"));
    assert_eq!(
        replacement.release().await.expect("release"),
        Release::Released
    );
}

scenario!(every_write_leaves_the_field_an_expiry:
    redis8 => Target::Server(support::ServerKind::Redis8));

/// Peer libraries turned leases into permanent fields with a plain `HSET`: after every write
/// path the field has an expiry, and the hash none of its own.
async fn every_write_leaves_the_field_an_expiry(target: Target) {
    let coordination = target.coordination("hash-ttl").await;
    let hash = LeaseHash::named(&coordination, "ttl");
    let key = physical(&coordination, &hash);
    let field_ttl = || -> i64 {
        let ttls: Vec<i64> = target.query(&[b"HPTTL", &key, b"FIELDS", b"1", b"f"]);
        ttls[0]
    };
    let mut lease = acquired(&hash, b"f", MINUTE).await;
    assert!(field_ttl() > 55_000, "{}", field_ttl());
    assert!(lease.renew(Duration::from_secs(5)).await.expect("renew"));
    let ttl = field_ttl();
    assert!(ttl > 4_000 && ttl <= 5_000, "{ttl}");
    assert_eq!(target.pttl(&key), -1, "no key-level expiry");
    let owner: Vec<u8> = target.query(&[b"HGET", &key, b"f"]);
    assert_eq!(owner, lease.owner_token().as_bytes());
    assert_eq!(lease.release().await.expect("release"), Release::Released);
    assert_eq!(target.pttl(&key), -2, "gone with its last field");
}

scenario!(a_hash_with_a_key_level_expiry_is_refused_unchanged:
    redis8 => Target::Server(support::ServerKind::Redis8));

async fn a_hash_with_a_key_level_expiry_is_refused_unchanged(target: Target) {
    let coordination = target.coordination("hash-key-ttl").await;
    let hash = LeaseHash::named(&coordination, "key-ttl");
    let key = physical(&coordination, &hash);
    target.raw(&[b"HSET", &key, b"other", b"value"]);
    target.raw(&[b"PEXPIRE", &key, b"60000"]);
    let err = hash.try_acquire("f", MINUTE).await.expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert!(err.to_string().contains("key-level expiry"), "{err}");
    let exists: bool = target.query(&[b"HEXISTS", &key, b"f"]);
    assert!(!exists, "nothing written");
    target.raw(&[b"DEL", &key]);
    target.raw(&[b"SET", &key, b"a string"]);
    let err = hash.try_acquire("f", MINUTE).await.expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
}

scenario!(a_waiter_gets_the_field_when_it_is_released field_expiry);

async fn a_waiter_gets_the_field_when_it_is_released(target: Target) {
    let coordination = target.coordination("hash-wait").await;
    let hash = LeaseHash::named(&coordination, "wait");
    let mut held = acquired(&hash, b"f", MINUTE).await;
    let waiter = tokio::spawn({
        let hash = hash.clone();
        async move { hash.acquire("f", MINUTE).await }
    });
    support::until_waiting(std::slice::from_ref(&coordination), 1).await;
    assert!(!waiter.is_finished(), "the field is held");
    // A change to another field (which wakes the waiter on Redis: see
    // `a_waiter_is_woken_by_the_hash_and_at_the_fields_expiry`) leaves it waiting.
    let mut other = acquired(&hash, b"other", MINUTE).await;
    assert_eq!(other.release().await.expect("release"), Release::Released);
    assert_eq!(held.release().await.expect("release"), Release::Released);
    let mut got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gets it once released")
        .expect("task")
        .expect("acquire");
    assert_eq!(got.release().await.expect("release"), Release::Released);
}

scenario!(a_managed_field_lease_renews_itself field_expiry);

async fn a_managed_field_lease_renews_itself(target: Target) {
    let coordination = target.coordination("hash-managed").await;
    let hash = LeaseHash::named(&coordination, "managed");
    let options = ManagedOptions::new().lease(Duration::from_millis(400));
    let lease = ManagedFieldLease::try_acquire(&hash, "f", &options)
        .await
        .expect("try")
        .expect("free");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!lease.is_lost(), "renewed past its first lease");
    assert!(
        !hash
            .try_acquire("f", MINUTE)
            .await
            .expect("try")
            .is_acquired()
    );
    assert_eq!(lease.release().await.expect("release"), Release::Released);
    assert!(
        hash.try_acquire("f", MINUTE)
            .await
            .expect("try")
            .is_acquired()
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(servers_without_field_expiry_refuse_before_writing without_field_expiry);

async fn servers_without_field_expiry_refuse_before_writing(target: Target) {
    let coordination = target.coordination("hash-unsupported").await;
    let hash = LeaseHash::named(&coordination, "unsupported");
    let err = hash
        .try_acquire("f", MINUTE)
        .await
        .expect_err("unsupported");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.is_refused() && !err.is_outcome_uncertain(), "{err}");
    let feature = err.unsupported_feature().expect("names the feature");
    assert!(feature.name().contains("HPEXPIRE"), "{err}");
    assert!(feature.minimum_version().contains("Redis 7.4"), "{err}");
    assert!(feature.minimum_version().contains("Valkey 9.0"), "{err}");
    let err = hash.acquire("f", MINUTE).await.expect_err("no wait either");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(target.count_keys(&coordination), 0, "nothing written");
}

#[tokio::test]
async fn invalid_leases_are_refused_before_anything_is_sent() {
    let coordination = Coordination::memory();
    let hash = LeaseHash::named(&coordination, "invalid");
    for lease in [Duration::ZERO, Duration::MAX] {
        let err = hash.try_acquire("f", lease).await.expect_err("invalid");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    }
    assert!(
        coordination
            .backend()
            .as_memory()
            .is_some_and(|memory| memory.is_empty())
    );
}

/// Redis out of memory (`noeviction`): a new field lease is refused (`OutOfMemory`,
/// certainly without effect), while a held one still renews (a new expiry grows nothing) and
/// releases.
#[tokio::test]
async fn out_of_memory_refuses_new_leases_and_renews_held_ones() {
    let server = support::Server::start(support::ServerKind::Redis8, &[]);
    let coordination: Coordination =
        leasehold::backend::redis::RedisBackend::standalone(server.url())
            .key_prefix(support::unique_prefix("hash-oom"))
            .connect()
            .await
            .expect("connect")
            .into();
    let hash = LeaseHash::named(&coordination, "oom");
    let mut held = acquired(&hash, b"held", MINUTE).await;
    server.out_of_memory(true);
    let err = hash
        .try_acquire("new", MINUTE)
        .await
        .expect_err("out of memory");
    assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
    assert!(err.is_refused() && !err.is_outcome_uncertain(), "{err}");
    assert!(held.renew(MINUTE).await.expect("renewed out of memory"));
    assert_eq!(held.release().await.expect("released"), Release::Released);
    server.out_of_memory(false);
}

/// An ACL that denies `HPEXPIREAT` (as a node of an older version in a cluster refuses it):
/// the acquisition is refused, and leaves no field behind without its expiry.
#[tokio::test]
async fn a_refused_field_expiry_leaves_no_field() {
    let server = support::Server::start(support::ServerKind::Redis8, &[]);
    let coordination: Coordination =
        leasehold::backend::redis::RedisBackend::standalone(server.acl_user(&["-hpexpireat"]))
            .key_prefix(support::unique_prefix("hash-no-expiry"))
            .connect()
            .await
            .expect("connect")
            .into();
    let hash = LeaseHash::named(&coordination, "acl");
    let err = hash
        .try_acquire("field", MINUTE)
        .await
        .expect_err("the expiry is refused");
    assert!(err.is_refused(), "{err}");
    let key = coordination.backend().physical_key(hash.key());
    let key = String::from_utf8(key).expect("a text key");
    let fields: i64 = server.cmd(&["HLEN", &key]);
    assert_eq!(fields, 0, "no field without its expiry");
}

/// A new connection that reaches another server (a failover to a newer one, or an older
/// one) probes for hash field expiry again: refused as unsupported while the handle reaches
/// Redis 7, granted once it reaches Redis 8.
#[tokio::test]
async fn the_field_expiry_probe_runs_again_on_a_new_connection() {
    let older = support::Server::start(support::ServerKind::Redis7, &[]);
    let newer = support::Server::start(support::ServerKind::Redis8, &[]);
    let proxy = support::proxy::Proxy::to_port(older.port());
    let coordination: Coordination =
        leasehold::backend::redis::RedisBackend::standalone(proxy.url())
            .key_prefix(support::unique_prefix("hash-reprobe"))
            .connect()
            .await
            .expect("connect")
            .into();
    let hash = LeaseHash::named(&coordination, "reprobe");
    let err = hash
        .try_acquire("field", MINUTE)
        .await
        .expect_err("Redis 7 has no field expiry");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    proxy.retarget(newer.port());
    proxy.cut();
    support::eventually("the new server's field expiry is found", async || {
        hash.try_acquire("field", MINUTE)
            .await
            .is_ok_and(|attempt| attempt.is_acquired())
    })
    .await;
}

/// The field-expiry probe's answer is kept for the connection when it is yes, and asked
/// again when it is no (the server may change behind the same address): counted by the
/// server's `COMMAND INFO` calls, on private servers.
#[tokio::test]
async fn a_yes_from_the_field_expiry_probe_is_kept_and_a_no_asked_again() {
    for (kind, has, probes) in [
        (support::ServerKind::Redis8, true, 1),
        (support::ServerKind::Redis7, false, 2),
    ] {
        let server = support::Server::start(kind, &[]);
        let backend = leasehold::backend::redis::RedisBackend::standalone(server.url())
            .key_prefix(support::unique_prefix("hash-probe"))
            .connect()
            .await
            .expect("connect");
        let before = support::target::command_calls(&server, "command|info");
        assert_eq!(backend.hash_field_expiry().await.expect("probe"), has);
        assert_eq!(backend.hash_field_expiry().await.expect("again"), has);
        assert_eq!(
            support::target::command_calls(&server, "command|info") - before,
            probes,
            "{kind:?}"
        );
    }
}

/// Four holders with handles of their own take turns at one field lease while the hash's
/// slot moves from master to master (a Redis 8 cluster: hash field expiry): latency, not
/// errors, never two holders at once, and the field keeps its expiry through the migration.
#[tokio::test]
async fn field_leases_ride_out_a_slot_move() {
    let hash = LeaseHash::named(&Coordination::memory(), "moving");
    support::turns::while_its_slot_moves(
        support::ServerKind::Redis8,
        "hash-slot-move",
        hash.key(),
        field_turn,
    )
    .await;
}

/// Four holders, each with a handle of its own, take turns at one field lease while the
/// Sentinel primary is killed and its replica elected: latency, not errors (the failover
/// within `transient_retry`), and never two holders at once, except where a grant the old primary
/// acknowledged was lost with it, which its release tells. A Redis 8 setup (hash field expiry): the new primary is
/// probed for it on its new connection.
#[tokio::test]
async fn field_leases_ride_out_a_sentinel_failover() {
    support::turns::across_a_sentinel_failover(
        support::ServerKind::Redis8,
        "hash-failover",
        field_turn,
    )
    .await;
}

/// One holder's turn at the field `field` of the hash `moving`: see
/// [`support::turns::exclusive_turns`].
async fn field_turn(
    coordination: Coordination,
    occupancy: std::sync::Arc<support::turns::Occupancy>,
) -> Result<(), String> {
    let hash = LeaseHash::named(&coordination, "moving");
    let mut lease = hash
        .acquire("field", Duration::from_secs(2))
        .await
        .map_err(|err| format!("acquire: {err}"))?;
    let stay = occupancy.stay().await;
    let released = lease.release().await;
    occupancy.released(stay, released)
}

/// On Redis a waiter does not poll: a change to another field of the hash wakes it (it tries
/// again at once, and finds its own field still held), and a holder that never releases is
/// outlasted at its field's expiry (the waiter sleeps until the field's `HPTTL`, not a poll
/// interval), each with a handful of attempts.
#[tokio::test]
async fn a_waiter_is_woken_by_the_hash_and_at_the_fields_expiry() {
    let server = support::Server::start(support::ServerKind::Redis8, &[]);
    let connect = || async {
        let coordination: Coordination =
            leasehold::backend::redis::RedisBackend::standalone(server.url())
                .key_prefix("wake:")
                .connect()
                .await
                .expect("connect")
                .into();
        coordination
    };
    let (holding, waiting) = (connect().await, connect().await);
    let hash = LeaseHash::named(&holding, "wake");
    let held = acquired(&hash, b"f", Duration::from_millis(1500)).await;
    let scripts = || {
        support::target::command_calls(&server, "evalsha")
            + support::target::command_calls(&server, "eval")
    };
    let started = tokio::time::Instant::now();
    let waiter = tokio::spawn({
        let hash = LeaseHash::named(&waiting, "wake");
        async move { hash.acquire("f", MINUTE).await }
    });
    // The waiter's first attempt, refused.
    let before = scripts();
    eventually("the waiter tries", async || scripts() > before).await;
    // One script per attempt: its field's time left is read without one.
    let settled = scripts();
    assert_eq!(settled, before + 1, "one attempt");
    // Another field's change: the waiter tries again at once (two scripts are ours).
    let mut other = acquired(&hash, b"other", MINUTE).await;
    assert_eq!(other.release().await.expect("release"), Release::Released);
    eventually("another field's change wakes the waiter", async || {
        scripts() >= settled + 3
    })
    .await;
    assert!(!waiter.is_finished(), "its own field is still held");
    // The holder never releases: its field expires 1.5 s after it was taken.
    std::mem::forget(held);
    let tries_before_expiry = scripts();
    let mut got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gets the field once it expires")
        .expect("task")
        .expect("acquire");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1300),
        "not before the field expired: {waited:?}"
    );
    let tries = scripts() - tries_before_expiry;
    assert!(
        tries <= 3,
        "woken at the field's expiry, not polling: {tries} tries"
    );
    assert_eq!(got.release().await.expect("release"), Release::Released);
}

scenario!(binary_hash_names field_expiry);

/// A lease hash named by any bytes (a NUL, a byte over 0x7f, braces) works end to end.
async fn binary_hash_names(target: Target) {
    let coordination = target.coordination("hash-binary").await;
    let name = b"\x00\xff}{|\n".as_slice();
    let hash = LeaseHash::named(&coordination, name);
    let mut held = acquired(&hash, b"\x00f", MINUTE).await;
    let same = LeaseHash::named(&coordination, name);
    let attempt = same.try_acquire(b"\x00f", MINUTE).await.expect("try");
    assert!(!attempt.is_acquired(), "the same hash: the field is held");
    let other = LeaseHash::named(&coordination, b"\x00\xff}{|");
    let mut elsewhere = acquired(&other, b"\x00f", MINUTE).await;
    assert_eq!(held.release().await.expect("release"), Release::Released);
    assert_eq!(
        elsewhere.release().await.expect("release"),
        Release::Released
    );
}

// ---------------------------------------------------------------------------------------------
// The rules every self-renewing holding keeps (`support::holding`), for a field lease, on
// Redis 8 (hash field expiry).

struct OneField;

impl support::holding::Held for OneField {
    const EXCLUSIVE: bool = true;
    const WHAT: &'static str = "field lease";
    const SERVER: support::ServerKind = support::ServerKind::Redis8;
    type Kind = LeaseHash;

    async fn try_acquire(
        coordination: &Coordination,
        lease: Duration,
    ) -> leasehold::Result<leasehold::coordination::Attempt<FieldLease>> {
        LeaseHash::named(coordination, "resource")
            .try_acquire("field", lease)
            .await
    }

    fn by_owner(
        coordination: &Coordination,
        owner: leasehold::coordination::OwnerToken,
    ) -> leasehold::coordination::ByOwner {
        LeaseHash::named(coordination, "resource").by_owner("field", owner)
    }
}

holding_rules!(OneField);
