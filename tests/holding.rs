//! What every self-renewing holding shares, run for the lock's lease, the semaphore's permit,
//! the read-write lock's write lease and a hash-field lease against a real Redis behind the
//! fault proxy (Redis 8.2 for the field lease, which needs hash field expiry; Redis 7
//! otherwise): a stall shorter than the estimate costs nothing, a longer one ends ownership
//! before anyone else can take over.

mod support;

use std::time::Duration;

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::ManagedOptions;
use leasehold::coordination::hash_lease::{LeaseHash, ManagedFieldLease};
use leasehold::coordination::lock::{FencedLock, ManagedLease};
use leasehold::coordination::ownership::{LossReason, OwnershipLost};
use leasehold::coordination::rw_lease::{ManagedRwLease, ReadWriteLock};
use leasehold::coordination::semaphore::{ManagedPermit, Semaphore};
use support::proxy::Proxy;
use support::{ServerKind, shared, unique_prefix};
use tokio::time::Instant;

/// The lease of every holding here: renewed at 1.5 s.
const LEASE: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Lease,
    Permit,
    WriteLease,
    FieldLease,
}

/// The server a holding of `kind` is tested on.
fn server(kind: Kind) -> ServerKind {
    match kind {
        Kind::FieldLease => ServerKind::Redis8,
        _ => ServerKind::Redis7,
    }
}

/// A managed holding of `kind`, kept alive by the returned guard.
struct Held {
    ownership: OwnershipLost,
    _guard: Box<dyn Send>,
}

async fn hold(kind: Kind, coordination: &Coordination) -> Held {
    hold_for(kind, coordination, None).await
}

/// [`hold`], detached (kept after its handle is dropped) with a lifetime limit when one is
/// given.
async fn hold_for(kind: Kind, coordination: &Coordination, lifetime: Option<Duration>) -> Held {
    let detached = lifetime.is_some();
    match kind {
        Kind::Lease => {
            let lock = FencedLock::named(coordination, "resource");
            let options = ManagedOptions::new()
                .lease(LEASE)
                .release_on_drop(!detached)
                .max_lifetime(lifetime);
            let lease = ManagedLease::try_acquire(&lock, &options)
                .await
                .expect("acquire")
                .expect("free");
            Held {
                ownership: lease.ownership(),
                _guard: Box::new(lease),
            }
        }
        Kind::Permit => {
            let semaphore = Semaphore::new(coordination, "resource", 1).expect("valid");
            let permit = semaphore
                .try_acquire(Some(LEASE))
                .await
                .expect("acquire")
                .into_permit()
                .expect("free");
            let options = ManagedOptions::new()
                .lease(LEASE)
                .release_on_drop(!detached)
                .max_lifetime(lifetime);
            let permit = ManagedPermit::keep(permit, &options).expect("keep");
            Held {
                ownership: permit.ownership(),
                _guard: Box::new(permit),
            }
        }
        Kind::WriteLease => {
            let lock = ReadWriteLock::named(coordination, "resource");
            let options = ManagedOptions::new()
                .lease(LEASE)
                .release_on_drop(!detached)
                .max_lifetime(lifetime);
            let lease = ManagedRwLease::try_write(&lock, &options)
                .await
                .expect("acquire")
                .expect("free");
            Held {
                ownership: lease.ownership(),
                _guard: Box::new(lease),
            }
        }
        Kind::FieldLease => {
            let hash = LeaseHash::named(coordination, "resource");
            let options = ManagedOptions::new()
                .lease(LEASE)
                .release_on_drop(!detached)
                .max_lifetime(lifetime);
            let lease = ManagedFieldLease::try_acquire(&hash, "field", &options)
                .await
                .expect("acquire")
                .expect("free");
            Held {
                ownership: lease.ownership(),
                _guard: Box::new(lease),
            }
        }
    }
}

/// Whether another holder (on its own connection) can take the resource now; it releases at
/// once when it could.
async fn contender_takes_it(kind: Kind, coordination: &Coordination) -> bool {
    match kind {
        Kind::Lease => {
            let lock = FencedLock::named(coordination, "resource");
            match lock.try_acquire(LEASE).await.expect("try").into_lease() {
                Some(mut lease) => {
                    lease.release().await.expect("release");
                    true
                }
                None => false,
            }
        }
        Kind::Permit => {
            let semaphore = Semaphore::new(coordination, "resource", 1).expect("valid");
            match semaphore
                .try_acquire(Some(LEASE))
                .await
                .expect("try")
                .into_permit()
            {
                Some(mut permit) => {
                    permit.release().await.expect("release");
                    true
                }
                None => false,
            }
        }
        Kind::WriteLease => {
            let lock = ReadWriteLock::named(coordination, "resource");
            match lock.try_write(LEASE).await.expect("try").into_lease() {
                Some(mut lease) => {
                    lease.release().await.expect("release");
                    true
                }
                None => false,
            }
        }
        Kind::FieldLease => {
            let hash = LeaseHash::named(coordination, "resource");
            match hash
                .try_acquire("field", LEASE)
                .await
                .expect("try")
                .into_lease()
            {
                Some(mut lease) => {
                    lease.release().await.expect("release");
                    true
                }
                None => false,
            }
        }
    }
}

/// A holder reaching Redis through `proxy`, and a contender reaching it directly, sharing a
/// key prefix.
async fn sides(proxy: &Proxy, test: &str, kind: Kind) -> (Coordination, Coordination) {
    let prefix = unique_prefix(test);
    let connect = |url: String| {
        let prefix = prefix.clone();
        async move {
            let backend = RedisBackend::standalone(url)
                .key_prefix(prefix)
                .connect()
                .await
                .expect("connect");
            Coordination::from(backend)
        }
    };
    let holder = connect(proxy.url()).await;
    let contender = connect(shared(server(kind)).url()).await;
    (holder, contender)
}

async fn a_stall_shorter_than_the_estimate_costs_nothing(kind: Kind) {
    let proxy = Proxy::to_port(shared(server(kind)).port());
    let (holder, contender) = sides(&proxy, "short-stall", kind).await;
    let held = hold(kind, &holder).await;
    let acquired = Instant::now();
    // The renewal at 1.5 s meets a 1.2 s stall, longer than the 1 s response timeout.
    tokio::time::sleep_until(acquired + Duration::from_millis(1300)).await;
    proxy.stall();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    proxy.pass();
    // Past the first lease and well into the next: still held, never signalled.
    while acquired.elapsed() < LEASE + Duration::from_secs(1) {
        assert!(
            !held.ownership.is_lost(),
            "{kind:?}: lost at {:?}: {:?}",
            acquired.elapsed(),
            held.ownership.reason()
        );
        assert!(
            !contender_takes_it(kind, &contender).await,
            "{kind:?}: another holder took it at {:?}",
            acquired.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_stall_longer_than_the_estimate_ends_ownership_before_anyone_takes_over(kind: Kind) {
    let proxy = Proxy::to_port(shared(server(kind)).port());
    let (holder, contender) = sides(&proxy, "long-stall", kind).await;
    let held = hold(kind, &holder).await;
    let acquired = Instant::now();
    tokio::time::sleep_until(acquired + Duration::from_millis(1300)).await;
    proxy.stall();
    let mut ownership = held.ownership.clone();
    let watcher = tokio::spawn(async move {
        let reason = ownership.lost().await;
        (reason, Instant::now())
    });
    // The contender polls from its own connection until it gets the resource.
    let taken_at = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if contender_takes_it(kind, &contender).await {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the contender takes it once the lease expires");
    proxy.pass();
    let (reason, lost_at) = tokio::time::timeout(Duration::from_secs(1), watcher)
        .await
        .expect("ownership ended")
        .expect("watcher");
    assert_eq!(reason, LossReason::Uncertain, "{kind:?}");
    assert!(
        lost_at < taken_at,
        "{kind:?}: ownership ended {:?} after acquisition, the contender took over at {:?}",
        lost_at - acquired,
        taken_at - acquired
    );
    // At the estimate (the lease, counted from before the acquisition was sent).
    let at = lost_at - acquired;
    assert!(
        at >= LEASE - Duration::from_millis(200) && at <= LEASE + Duration::from_millis(200),
        "{kind:?}: lost {at:?} after acquisition"
    );
}

async fn the_lifetime_limit_is_told_before_the_release(kind: Kind) {
    let proxy = Proxy::to_port(shared(server(kind)).port());
    let (holder, contender) = sides(&proxy, "lifetime", kind).await;
    let held = hold_for(kind, &holder, Some(Duration::from_secs(1))).await;
    let mut ownership = held.ownership.clone();
    drop(held);
    // Everything the holder sends from now on takes 300 ms to arrive: its release too.
    proxy.latency(
        support::proxy::Direction::ToServer,
        Duration::from_millis(300),
    );
    let reason = tokio::time::timeout(Duration::from_secs(3), ownership.lost())
        .await
        .expect("the limit is reached");
    assert_eq!(reason, LossReason::LifetimeLimit, "{kind:?}");
    // Told first: the release has not reached the server yet.
    assert!(
        !contender_takes_it(kind, &contender).await,
        "{kind:?}: released before the holder was told"
    );
    // Then released, long before its lease would expire.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !contender_takes_it(kind, &contender).await {
        assert!(Instant::now() < deadline, "{kind:?}: never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Tries to take the resource through `coordination`: `Ok(true)` when taken (it is then
/// dropped, which releases it in the background).
async fn try_take(
    kind: Kind,
    coordination: &Coordination,
    expiry: Option<Duration>,
) -> leasehold::Result<bool> {
    match kind {
        Kind::Lease => {
            let lock = FencedLock::named(coordination, "resource");
            Ok(lock
                .try_acquire(expiry.unwrap_or(LEASE))
                .await?
                .is_acquired())
        }
        Kind::Permit => {
            let semaphore = Semaphore::new(coordination, "resource", 1).expect("valid");
            Ok(semaphore.try_acquire(expiry).await?.is_acquired())
        }
        Kind::WriteLease => {
            let lock = ReadWriteLock::named(coordination, "resource");
            Ok(lock.try_write(expiry.unwrap_or(LEASE)).await?.is_acquired())
        }
        Kind::FieldLease => {
            let hash = LeaseHash::named(coordination, "resource");
            Ok(hash
                .try_acquire("field", expiry.unwrap_or(LEASE))
                .await?
                .is_acquired())
        }
    }
}

/// An acquisition held back by the network until after its client gave up, reconnected and
/// cleaned up: delivered then, it must not take what nobody holds.
async fn a_late_acquisition_leaves_nothing_once_delivered(kind: Kind, expiry: Option<Duration>) {
    let behind = support::Behind::start_on(server(kind), "late");
    let (server, proxy, prefix) = (&behind.server, &behind.proxy, &behind.prefix);
    let holder = behind
        .through_proxy(|builder| {
            builder
                .response_timeout(Duration::from_millis(300))
                .transient_retry(Duration::from_millis(100))
        })
        .await;
    // The scripts are loaded: the held command is an EVALSHA that runs as it arrives.
    assert!(contender_takes_it(kind, &holder).await);
    let calls = || support::target::command_calls(server, "evalsha");
    let before = calls();
    // The lock's fencing counter stays, by design; nothing else may.
    let keys = server.count_keys(prefix.as_bytes());

    proxy.stall();
    let err = try_take(kind, &holder, expiry)
        .await
        .expect_err("no answer within the response timeout");
    assert!(err.is_outcome_uncertain(), "{kind:?}: {err}");
    // The client's connection breaks; the acquisition is still on its way.
    proxy.sever();
    proxy.pass();
    // The cleanup (a release by owner token, once the acquisition's deadline has passed)
    // runs over a new connection.
    support::eventually("the cleanup runs", async || calls() > before).await;
    assert_eq!(
        server.count_keys(prefix.as_bytes()),
        keys,
        "{kind:?}: nothing yet"
    );
    proxy.deliver_held();
    support::eventually("the late acquisition runs", async || calls() > before + 1).await;
    // It changed nothing: nobody holds the resource, and no key is left.
    assert_eq!(
        server.count_keys(prefix.as_bytes()),
        keys,
        "{kind:?}: the late acquisition took it"
    );
    let contender = behind.direct().await;
    assert!(contender_takes_it(kind, &contender).await, "{kind:?}");
}

/// A managed holding whose keeper is renewing it when its holder asks for the release: the
/// renewal in flight is given up and the release sent. Here both are held by the network,
/// the client's connection breaks, and the release goes again over a new connection; the
/// held renewal, delivered after it, must not bring back what was released.
async fn a_release_asked_during_a_renewal_frees_it_and_the_late_renewal_changes_nothing(
    kind: Kind,
) {
    let behind = support::Behind::start_on(server(kind), "release-renewing");
    let (server, proxy) = (&behind.server, &behind.proxy);
    let holder = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(300)))
        .await;
    let contender = behind.direct().await;
    let release: Box<dyn FnOnce() -> tokio::task::JoinHandle<bool> + Send> = match kind {
        Kind::Lease => {
            let lock = FencedLock::named(&holder, "resource");
            let options = ManagedOptions::new().lease(LEASE);
            let lease = ManagedLease::try_acquire(&lock, &options)
                .await
                .expect("acquire")
                .expect("free");
            Box::new(move || tokio::spawn(async move { lease.release().await.is_ok() }))
        }
        Kind::Permit => {
            let semaphore = Semaphore::new(&holder, "resource", 1).expect("valid");
            let permit = semaphore
                .try_acquire(Some(LEASE))
                .await
                .expect("acquire")
                .into_permit()
                .expect("free");
            let permit =
                ManagedPermit::keep(permit, &ManagedOptions::new().lease(LEASE)).expect("keep");
            Box::new(move || tokio::spawn(async move { permit.release().await.is_ok() }))
        }
        Kind::WriteLease => {
            let lock = ReadWriteLock::named(&holder, "resource");
            let options = ManagedOptions::new().lease(LEASE);
            let lease = ManagedRwLease::try_write(&lock, &options)
                .await
                .expect("acquire")
                .expect("free");
            Box::new(move || tokio::spawn(async move { lease.release().await.is_ok() }))
        }
        Kind::FieldLease => {
            let hash = LeaseHash::named(&holder, "resource");
            let options = ManagedOptions::new().lease(LEASE);
            let lease = ManagedFieldLease::try_acquire(&hash, "field", &options)
                .await
                .expect("acquire")
                .expect("free");
            Box::new(move || tokio::spawn(async move { lease.release().await.is_ok() }))
        }
    };
    let calls = || support::target::command_calls(server, "evalsha");
    // Held from just before the renewal (due at half the lease) until it has left the client.
    tokio::time::sleep(LEASE / 2 - Duration::from_millis(300)).await;
    let sent = proxy.bytes_received(support::proxy::Direction::ToServer);
    let ran = calls();
    proxy.stall();
    support::eventually("the renewal is sent", async || {
        proxy.bytes_received(support::proxy::Direction::ToServer) > sent
    })
    .await;
    let released = release();
    // The release is held too; the client's connection breaks, and the release goes again.
    tokio::time::sleep(Duration::from_millis(50)).await;
    proxy.sever();
    proxy.pass();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), released)
            .await
            .expect("the release ends")
            .expect("the release task"),
        "{kind:?}: released"
    );
    assert!(contender_takes_it(kind, &contender).await, "{kind:?}: free");
    // The held renewal (and the first release) arrive now, and find nothing of the holder's.
    let before = calls();
    proxy.deliver_held();
    support::eventually("the held commands run", async || calls() >= before + 2).await;
    assert!(calls() > ran + 2, "the renewal ran after the release");
    assert!(
        contender_takes_it(kind, &contender).await,
        "{kind:?}: the late renewal brought it back"
    );
}

/// The same acquisition delivered twice (a network, or a client library, that sends it
/// again): the second delivery finds its own grant and answers granted, so that no caller
/// reads its own holding as someone else's; it takes nothing more, and the holder's release
/// frees the resource.
async fn an_acquisition_delivered_twice_is_granted_again(kind: Kind) {
    let behind = support::Behind::start_on(server(kind), "twice");
    let holder = behind.through_proxy(|builder| builder).await;
    let contender = behind.direct().await;
    behind.proxy.take_delivered();
    let held = hold(kind, &holder).await;
    let reply = support::proxy::replay_last_script(&behind.server, &behind.proxy.take_delivered());
    let redis::Value::Array(fields) = &reply else {
        panic!("{kind:?}: a reply table: {reply:?}");
    };
    let status: String = redis::from_redis_value(fields[0].clone()).expect("a status");
    assert!(
        status == "granted" || status == "acquired",
        "{kind:?}: the duplicate answered {reply:?}"
    );
    assert!(
        !contender_takes_it(kind, &contender).await,
        "{kind:?}: held once, by its holder"
    );
    drop(held);
    support::eventually("the release frees it", async || {
        contender_takes_it(kind, &contender).await
    })
    .await;
}

mod a_late_acquisition_leaves_nothing_once_delivered {
    use super::*;

    #[tokio::test]
    async fn lease() {
        super::a_late_acquisition_leaves_nothing_once_delivered(Kind::Lease, Some(LEASE)).await
    }

    #[tokio::test]
    async fn write_lease() {
        super::a_late_acquisition_leaves_nothing_once_delivered(Kind::WriteLease, Some(LEASE)).await
    }

    #[tokio::test]
    async fn field_lease() {
        super::a_late_acquisition_leaves_nothing_once_delivered(Kind::FieldLease, Some(LEASE)).await
    }

    #[tokio::test]
    async fn expiring_permit() {
        super::a_late_acquisition_leaves_nothing_once_delivered(Kind::Permit, Some(LEASE)).await
    }

    #[tokio::test]
    async fn permit_without_expiry() {
        super::a_late_acquisition_leaves_nothing_once_delivered(Kind::Permit, None).await
    }
}

macro_rules! for_each_holding {
    ($($scenario:ident),+ $(,)?) => {
        $(
            mod $scenario {
                use super::*;

                #[tokio::test]
                async fn lease() {
                    super::$scenario(Kind::Lease).await
                }

                #[tokio::test]
                async fn permit() {
                    super::$scenario(Kind::Permit).await
                }

                #[tokio::test]
                async fn write_lease() {
                    super::$scenario(Kind::WriteLease).await
                }

                #[tokio::test]
                async fn field_lease() {
                    super::$scenario(Kind::FieldLease).await
                }
            }
        )+
    };
}

for_each_holding!(
    an_acquisition_delivered_twice_is_granted_again,
    a_release_asked_during_a_renewal_frees_it_and_the_late_renewal_changes_nothing,
    the_lifetime_limit_is_told_before_the_release,
    a_stall_shorter_than_the_estimate_costs_nothing,
    a_stall_longer_than_the_estimate_ends_ownership_before_anyone_takes_over,
);
