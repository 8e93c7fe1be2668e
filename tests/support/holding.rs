//! The rules every self-renewing holding keeps, written once and run for each held
//! primitive from its own test file: implement [`Held`] for it there, and expand
//! [`holding_rules!`](crate::holding_rules) with the type. Each runs against a real Redis
//! behind the fault proxy: a stall shorter than the estimate costs nothing, a longer one ends
//! ownership before anyone else can take over, the lifetime limit is told before the
//! release, a late acquisition takes nothing, a release asked during a renewal wins over the
//! late renewal, an acquisition delivered twice is granted again, and a holding detached
//! from its handle goes on by its owner token, from another connection, with the same checks.
//! On a private server that stalls every client (`support::stalling`), each step of a plain
//! handle left without an answer keeps the holding table: an acquisition is sent again and
//! granted once, or released once it is uncertain; a grant that comes too late is released;
//! a renewal keeps the narrower estimate; past the estimate nothing is sent; a release is
//! retried once, then uncertain; a verification changes nothing.

use std::future::Future;
use std::time::Duration;

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::ownership::{LossReason, OwnershipLost};
use leasehold::coordination::{
    Attempt, ByOwner, HeldKind, Managed, ManagedOptions, OwnerToken, Release,
};
use tokio::time::Instant;

use super::proxy::Proxy;
use super::{ServerKind, shared, unique_prefix};
use crate::support;

/// The lease of every holding the rules take: renewed at 1.5 s.
pub const LEASE: Duration = Duration::from_secs(3);

/// A held primitive, as its rules need it: one resource named `"resource"` that one holder
/// at a time may hold. Its handles are the crate's one [`Held`](leasehold::coordination::Held)
/// and [`Managed`]: the rules need only how to take the resource and how to reach a
/// holding by its owner token.
pub trait Held {
    /// What it is, in the rules' messages.
    const WHAT: &'static str;
    /// The server its rules run on.
    const SERVER: ServerKind = ServerKind::Redis7;
    /// Whether one holder at a time holds it (a lock's lease, a field's), so that a release
    /// by another owner token finds another holder's lease there: `NotOwned` rather than
    /// `AlreadyReleased`.
    const EXCLUSIVE: bool = false;
    /// Whether its holder writes with a fencing token (a lock's lease, a write lease), which
    /// a detached holding carries.
    const FENCED: bool = false;
    /// The primitive.
    type Kind: HeldKind;

    /// Takes the resource now for `lease`, if it is free.
    fn try_acquire(
        coordination: &Coordination,
        lease: Duration,
    ) -> impl Future<Output = leasehold::Result<Attempt<Handle<Self>>>> + Send;

    /// The resource's holding under `owner`, reached by its token alone.
    fn by_owner(coordination: &Coordination, owner: OwnerToken) -> ByOwner;
}

/// The handle of `H`'s holdings.
pub type Handle<H> = leasehold::coordination::Held<<H as Held>::Kind>;

/// Takes the resource for [`LEASE`] and keeps it as `options` say; panics when it is not
/// free.
async fn keep<H: Held>(coordination: &Coordination, options: &ManagedOptions) -> Managed<H::Kind> {
    Managed::keep(acquired::<H>(coordination, LEASE).await, options).expect("keep")
}

/// Takes the resource for `lease`; panics when it is not free.
async fn acquired<H: Held>(coordination: &Coordination, lease: Duration) -> Handle<H> {
    H::try_acquire(coordination, lease)
        .await
        .expect("acquire")
        .acquired()
        .unwrap_or_else(|| panic!("{}: not free", H::WHAT))
}

/// Tries to take the resource for [`LEASE`]: `Ok(true)` when taken, which is then dropped
/// (released in the background).
async fn try_take<H: Held>(coordination: &Coordination) -> leasehold::Result<bool> {
    Ok(H::try_acquire(coordination, LEASE).await?.is_acquired())
}

/// Whether another holder can take the resource now; it releases at once when it could.
async fn contend<H: Held>(coordination: &Coordination) -> bool {
    match H::try_acquire(coordination, LEASE)
        .await
        .expect("try")
        .acquired()
    {
        Some(mut held) => {
            held.release().await.expect("release");
            true
        }
        None => false,
    }
}

/// Expands every rule as a test for `$held` (a type of the test file implementing [`Held`]), in a module
/// named `holding_rules`.
#[macro_export]
macro_rules! holding_rules {
    ($held:ident) => {
        mod holding_rules {
            use $crate::support::holding as rules;

            #[tokio::test]
            async fn a_stall_shorter_than_the_estimate_costs_nothing() {
                rules::a_stall_shorter_than_the_estimate_costs_nothing::<super::$held>().await
            }

            #[tokio::test]
            async fn a_stall_longer_than_the_estimate_ends_ownership_before_anyone_takes_over() {
                rules::a_stall_longer_than_the_estimate_ends_ownership_before_anyone_takes_over::<super::$held>().await
            }

            #[tokio::test]
            async fn the_lifetime_limit_is_told_before_the_release() {
                rules::the_lifetime_limit_is_told_before_the_release::<super::$held>().await
            }

            #[tokio::test]
            async fn a_late_acquisition_leaves_nothing_once_delivered() {
                rules::a_late_acquisition_leaves_nothing_once_delivered::<super::$held>().await
            }

            #[tokio::test]
            async fn a_release_asked_during_a_renewal_frees_it_and_the_late_renewal_changes_nothing() {
                rules::a_release_asked_during_a_renewal_frees_it_and_the_late_renewal_changes_nothing::<super::$held>().await
            }

            #[tokio::test]
            async fn an_acquisition_delivered_twice_is_granted_again() {
                rules::an_acquisition_delivered_twice_is_granted_again::<super::$held>().await
            }

            #[tokio::test]
            async fn a_detached_holding_goes_on_by_its_owner_token_elsewhere() {
                rules::a_detached_holding_goes_on_by_its_owner_token_elsewhere::<super::$held>().await
            }

            #[tokio::test]
            async fn a_detach_asked_during_a_renewal_waits_for_its_answer() {
                rules::a_detach_asked_during_a_renewal_waits_for_its_answer::<super::$held>().await
            }

            #[tokio::test]
            async fn a_renewal_by_owner_token_delivered_after_the_release_brings_nothing_back() {
                rules::a_renewal_by_owner_token_delivered_after_the_release_brings_nothing_back::<super::$held>().await
            }

            #[tokio::test]
            async fn an_unanswered_acquisition_is_sent_again_and_granted_once() {
                rules::an_unanswered_acquisition_is_sent_again_and_granted_once::<super::$held>().await
            }

            #[tokio::test]
            async fn an_acquisition_unanswered_past_its_bound_is_released() {
                rules::an_acquisition_unanswered_past_its_bound_is_released::<super::$held>().await
            }

            #[tokio::test]
            async fn a_grant_answered_after_its_lease_ran_out_is_busy_and_released() {
                rules::a_grant_answered_after_its_lease_ran_out_is_busy_and_released::<super::$held>().await
            }

            #[tokio::test]
            async fn an_unanswered_renewal_keeps_it_with_the_narrower_estimate() {
                rules::an_unanswered_renewal_keeps_it_with_the_narrower_estimate::<super::$held>().await
            }

            #[tokio::test]
            async fn past_its_estimate_nothing_is_sent() {
                rules::past_its_estimate_nothing_is_sent::<super::$held>().await
            }

            #[tokio::test]
            async fn an_unanswered_release_is_retried_once_then_uncertain() {
                rules::an_unanswered_release_is_retried_once_then_uncertain::<super::$held>().await
            }

            #[tokio::test]
            async fn an_unanswered_verification_leaves_it_held() {
                rules::an_unanswered_verification_leaves_it_held::<super::$held>().await
            }
        }
    };
}

/// A managed holding, kept until dropped, with its ownership signal.
struct Holding<H: Held> {
    ownership: OwnershipLost,
    _held: Managed<H::Kind>,
}

/// Takes the resource as [`keep`] does, detached (kept after its handle is dropped)
/// with a lifetime limit when one is given.
async fn hold<H: Held>(coordination: &Coordination, lifetime: Option<Duration>) -> Holding<H> {
    let options = ManagedOptions::new()
        .lease(LEASE)
        .release_on_drop(lifetime.is_none())
        .max_lifetime(lifetime);
    let held = keep::<H>(coordination, &options).await;
    Holding {
        ownership: held.ownership(),
        _held: held,
    }
}

/// A holder reaching Redis through `proxy`, and a contender reaching it directly, sharing a
/// key prefix.
async fn sides<H: Held>(proxy: &Proxy, test: &str) -> (Coordination, Coordination) {
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
    let contender = connect(shared(H::SERVER).url()).await;
    (holder, contender)
}

pub async fn a_stall_shorter_than_the_estimate_costs_nothing<H: Held>() {
    let what = H::WHAT;
    let proxy = Proxy::to_port(shared(H::SERVER).port());
    let (holder, contender) = sides::<H>(&proxy, "short-stall").await;
    let held = hold::<H>(&holder, None).await;
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
            "{what}: lost at {:?}: {:?}",
            acquired.elapsed(),
            held.ownership.reason()
        );
        assert!(
            !contend::<H>(&contender).await,
            "{what}: another holder took it at {:?}",
            acquired.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn a_stall_longer_than_the_estimate_ends_ownership_before_anyone_takes_over<H: Held>() {
    let what = H::WHAT;
    let proxy = Proxy::to_port(shared(H::SERVER).port());
    let (holder, contender) = sides::<H>(&proxy, "long-stall").await;
    let held = hold::<H>(&holder, None).await;
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
            if contend::<H>(&contender).await {
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
    assert_eq!(reason, LossReason::Uncertain, "{what}");
    assert!(
        lost_at < taken_at,
        "{what}: ownership ended {:?} after acquisition, the contender took over at {:?}",
        lost_at - acquired,
        taken_at - acquired
    );
    // At the estimate (the lease, counted from before the acquisition was sent).
    let at = lost_at - acquired;
    assert!(
        at >= LEASE - Duration::from_millis(200) && at <= LEASE + Duration::from_millis(200),
        "{what}: lost {at:?} after acquisition"
    );
}

pub async fn the_lifetime_limit_is_told_before_the_release<H: Held>() {
    let what = H::WHAT;
    let proxy = Proxy::to_port(shared(H::SERVER).port());
    let (holder, contender) = sides::<H>(&proxy, "lifetime").await;
    let held = hold::<H>(&holder, Some(Duration::from_secs(1))).await;
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
    assert_eq!(reason, LossReason::LifetimeLimit, "{what}");
    // Told first: the release has not reached the server yet.
    assert!(
        !contend::<H>(&contender).await,
        "{what}: released before the holder was told"
    );
    // Then released, long before its lease would expire.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !contend::<H>(&contender).await {
        assert!(Instant::now() < deadline, "{what}: never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An acquisition held back by the network until after its client gave up, reconnected and
/// cleaned up: delivered then, it must not take what nobody holds.
pub async fn a_late_acquisition_leaves_nothing_once_delivered<H: Held>() {
    let what = H::WHAT;
    let behind = support::Behind::start_on(H::SERVER, "late");
    let (server, proxy, prefix) = (&behind.server, &behind.proxy, &behind.prefix);
    let holder = behind
        .through_proxy(|builder| {
            builder
                .response_timeout(Duration::from_millis(300))
                .transient_retry(Duration::from_millis(100))
        })
        .await;
    // The scripts are loaded: the held command is an EVALSHA that runs as it arrives.
    assert!(contend::<H>(&holder).await);
    let calls = || support::target::command_calls(server, "evalsha");
    let before = calls();
    // The lock's fencing counter stays, by design; nothing else may.
    let keys = server.count_keys(prefix.as_bytes());

    proxy.stall();
    let err = try_take::<H>(&holder)
        .await
        .expect_err("no answer within the response timeout");
    assert!(err.is_outcome_uncertain(), "{what}: {err}");
    // The client's connection breaks; the acquisition is still on its way.
    proxy.sever();
    proxy.pass();
    // The cleanup (a release by owner token, once the acquisition's deadline has passed)
    // runs over a new connection.
    support::eventually("the cleanup runs", async || calls() > before).await;
    assert_eq!(
        server.count_keys(prefix.as_bytes()),
        keys,
        "{what}: nothing yet"
    );
    proxy.deliver_held();
    support::eventually("the late acquisition runs", async || calls() > before + 1).await;
    // It changed nothing: nobody holds the resource, and no key is left.
    assert_eq!(
        server.count_keys(prefix.as_bytes()),
        keys,
        "{what}: the late acquisition took it"
    );
    let contender = behind.direct().await;
    assert!(contend::<H>(&contender).await, "{what}");
}

/// A managed holding whose keeper is renewing it when its holder asks for the release: the
/// renewal in flight is given up and the release sent. Here both are held by the network,
/// the client's connection breaks, and the release goes again over a new connection; the
/// held renewal, delivered after it, must not bring back what was released.
pub async fn a_release_asked_during_a_renewal_frees_it_and_the_late_renewal_changes_nothing<
    H: Held,
>() {
    let what = H::WHAT;
    let behind = support::Behind::start_on(H::SERVER, "release-renewing");
    let (server, proxy) = (&behind.server, &behind.proxy);
    let holder = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(300)))
        .await;
    let contender = behind.direct().await;
    let held = keep::<H>(&holder, &ManagedOptions::new().lease(LEASE)).await;
    let release = move || tokio::spawn(async move { held.release().await.is_ok() });
    let calls = || support::target::command_calls(server, "evalsha");
    // Held from just before the renewal (due at half the lease) until it has left the client.
    tokio::time::sleep(LEASE / 2 - Duration::from_millis(300)).await;
    let sent = proxy.sent();
    let ran = calls();
    proxy.stall();
    proxy.until_sent(sent, "the renewal is sent").await;
    let renewal_sent = proxy.sent();
    let released = release();
    // The release is held too; the client's connection breaks, and the release goes again.
    proxy.until_sent(renewal_sent, "the release is sent").await;
    proxy.sever();
    proxy.pass();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), released)
            .await
            .expect("the release ends")
            .expect("the release task"),
        "{what}: released"
    );
    assert!(contend::<H>(&contender).await, "{what}: free");
    // The held renewal (and the first release) arrive now, and find nothing of the holder's.
    let before = calls();
    proxy.deliver_held();
    support::eventually("the held commands run", async || calls() >= before + 2).await;
    assert!(calls() > ran + 2, "the renewal ran after the release");
    assert!(
        contend::<H>(&contender).await,
        "{what}: the late renewal brought it back"
    );
}

/// The same acquisition delivered twice (a network, or a client library, that sends it
/// again): the second delivery finds its own grant and answers granted, so that no caller
/// reads its own holding as someone else's; it takes nothing more, and the holder's release
/// frees the resource.
pub async fn an_acquisition_delivered_twice_is_granted_again<H: Held>() {
    let what = H::WHAT;
    let behind = support::Behind::start_on(H::SERVER, "twice");
    let holder = behind.through_proxy(|builder| builder).await;
    let contender = behind.direct().await;
    behind.proxy.take_delivered();
    let held = hold::<H>(&holder, None).await;
    let reply = support::proxy::replay_first_script(&behind.server, &behind.proxy.take_delivered());
    let redis::Value::Array(fields) = &reply else {
        panic!("{what}: a reply table: {reply:?}");
    };
    let status: String = redis::from_redis_value(fields[0].clone()).expect("a status");
    assert!(
        status == "granted" || status == "acquired",
        "{what}: the duplicate answered {reply:?}"
    );
    assert!(
        !contend::<H>(&contender).await,
        "{what}: held once, by its holder"
    );
    drop(held);
    support::eventually("the release frees it", async || {
        contend::<H>(&contender).await
    })
    .await;
}

/// A managed holding let go of unreleased: its signal says detached, it stays held with
/// nothing renewing it, and another connection (another process, for all the backend can
/// tell) renews, verifies and releases it by its owner token alone; a token that holds
/// nothing changes nothing, and nothing comes back after the release.
pub async fn a_detached_holding_goes_on_by_its_owner_token_elsewhere<H: Held>() {
    let what = H::WHAT;
    let proxy = Proxy::to_port(shared(H::SERVER).port());
    let (holder, other) = sides::<H>(&proxy, "detached").await;
    let held = keep::<H>(&holder, &ManagedOptions::new().lease(LEASE)).await;
    let mut ownership = held.ownership();
    let detached = held.detach().await.expect("held");
    let reason = tokio::time::timeout(Duration::from_secs(1), ownership.lost())
        .await
        .expect("told");
    assert_eq!(reason, LossReason::Detached, "{what}");
    assert_eq!(detached.expiry(), LEASE, "{what}");
    assert_eq!(
        detached.fencing_token().is_some(),
        H::FENCED,
        "{what}: its fencing token"
    );
    let left = detached.remaining_estimate();
    assert!(left <= LEASE && left > LEASE / 2, "{what}: {left:?} left");
    assert!(
        !contend::<H>(&other).await,
        "{what}: still held once detached"
    );

    let stranger = H::by_owner(&other, OwnerToken::parse(&"0".repeat(32)).expect("shape"));
    assert!(!stranger.verify().await.expect("verify"), "{what}");
    assert!(!stranger.renew(LEASE).await.expect("renew"), "{what}");
    let release = stranger.release().await.expect("release");
    let expected = if H::EXCLUSIVE {
        Release::NotOwned
    } else {
        Release::AlreadyReleased
    };
    assert_eq!(release, expected, "{what}: a stranger's release");
    assert!(!contend::<H>(&other).await, "{what}: a stranger freed it");

    let owner = H::by_owner(&other, detached.owner_token().clone());
    assert_eq!(owner.owner_token(), detached.owner_token(), "{what}");
    let refused = owner
        .renew(Duration::ZERO)
        .await
        .expect_err("a renewal under a millisecond");
    assert_eq!(
        refused.kind(),
        leasehold::ErrorKind::InvalidArgument,
        "{what}: {refused}"
    );
    assert!(owner.verify().await.expect("verify"), "{what}");
    let renewed_at = Instant::now();
    assert!(owner.renew(2 * LEASE).await.expect("renew"), "{what}");
    // Past the expiry it had when detached: the renewal by token holds it.
    tokio::time::sleep_until(renewed_at + LEASE + Duration::from_millis(200)).await;
    assert!(
        !contend::<H>(&other).await,
        "{what}: the renewal did not hold"
    );
    assert!(owner.verify().await.expect("verify"), "{what}");
    assert_eq!(
        owner.release().await.expect("release"),
        Release::Released,
        "{what}"
    );
    assert!(contend::<H>(&other).await, "{what}: released");
    assert!(!owner.verify().await.expect("verify"), "{what}");
    assert!(
        !owner.renew(LEASE).await.expect("renew"),
        "{what}: came back"
    );
    assert_eq!(
        owner.release().await.expect("release"),
        Release::AlreadyReleased,
        "{what}"
    );
    assert!(contend::<H>(&other).await, "{what}: came back");
}

/// A renewal by owner token held by the network (its client's connection broken meanwhile)
/// while another process releases the holding by the same token: delivered after the
/// release, it finds nothing to renew and brings nothing back.
pub async fn a_renewal_by_owner_token_delivered_after_the_release_brings_nothing_back<H: Held>() {
    let what = H::WHAT;
    let behind = support::Behind::start_on(H::SERVER, "late-renewal-by-owner");
    let (server, proxy) = (&behind.server, &behind.proxy);
    let late = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(300)))
        .await;
    let direct = behind.direct().await;
    let held = keep::<H>(&direct, &ManagedOptions::new().lease(LEASE)).await;
    let token = held.detach().await.expect("held").into_owner_token();
    // The scripts are loaded on the server: the held renewal is an EVALSHA.
    assert!(
        H::by_owner(&late, token.clone())
            .verify()
            .await
            .expect("verify")
    );
    let calls = || support::target::command_calls(server, "evalsha");
    let sent = proxy.sent();
    proxy.stall();
    let renewal = tokio::spawn({
        let renewal = H::by_owner(&late, token.clone());
        async move { renewal.renew(LEASE).await }
    });
    proxy.until_sent(sent, "the renewal is sent").await;
    // The client's connection breaks; the renewal is still on its way.
    proxy.sever();
    proxy.pass();
    let released = H::by_owner(&direct, token)
        .release()
        .await
        .expect("release");
    assert_eq!(released, Release::Released, "{what}");
    let before = calls();
    proxy.deliver_held();
    support::eventually("the held renewal runs", async || calls() > before).await;
    let answered = tokio::time::timeout(Duration::from_secs(5), renewal)
        .await
        .expect("the renewal ends")
        .expect("the renewal task");
    assert!(
        !matches!(answered, Ok(true)),
        "{what}: the late renewal renewed: {answered:?}"
    );
    assert!(
        contend::<H>(&direct).await,
        "{what}: the late renewal brought it back"
    );
}

/// A managed holding detached while its keeper's renewal is held by the network: the keeper
/// waits for the renewal's answer before it lets go, so that no renewal of the handle's is
/// left on its way to cut the next owner's renewals short.
pub async fn a_detach_asked_during_a_renewal_waits_for_its_answer<H: Held>() {
    let what = H::WHAT;
    let proxy = Proxy::to_port(shared(H::SERVER).port());
    let (holder, other) = sides::<H>(&proxy, "detach-renewing").await;
    let held = keep::<H>(&holder, &ManagedOptions::new().lease(LEASE)).await;
    let acquired = Instant::now();
    // Held from just before the renewal (due at half the lease) until it has left.
    tokio::time::sleep_until(acquired + LEASE / 2 - Duration::from_millis(200)).await;
    let sent = proxy.sent();
    proxy.stall();
    proxy.until_sent(sent, "the renewal is sent").await;
    let detach = tokio::spawn(held.detach());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !detach.is_finished(),
        "{what}: let go before the renewal answered"
    );
    proxy.pass();
    let detached = tokio::time::timeout(Duration::from_secs(2), detach)
        .await
        .expect("the detach ends")
        .expect("the detach task")
        .expect("held");
    assert_eq!(
        detached.renewal_cap(),
        None,
        "{what}: a renewal left unanswered"
    );
    let left = detached.remaining_estimate();
    assert!(
        left > LEASE - Duration::from_millis(500),
        "{what}: renewed: {left:?} left"
    );
    let owner = H::by_owner(&other, detached.into_owner_token());
    assert_eq!(
        owner.release().await.expect("release"),
        Release::Released,
        "{what}"
    );
}

// ---------------------------------------------------------------------------------------------
// A plain handle's steps left without an answer, on a private server that stalls every client.

/// The stalling server, with the primitive's scripts cached, and a patient handle to it.
async fn stalling<H: Held>() -> (super::stalling::Stalling, Coordination) {
    let stalling = super::stalling::Stalling::start_on(H::SERVER).await;
    let mut warm = acquired::<H>(&stalling.coordination, MINUTE).await;
    assert!(warm.verify_still_held().await.expect("verify"));
    assert!(warm.renew(MINUTE).await.expect("renew"));
    assert_eq!(warm.release().await.expect("release"), Release::Released);
    // The patient handle warmed too: what it asks once (a session's eviction policy) is
    // asked before any pause.
    let patient = stalling.patient().await;
    assert!(contend::<H>(&patient).await, "{}: free", H::WHAT);
    (stalling, patient)
}

/// A minute: longer than every test here.
const MINUTE: Duration = Duration::from_secs(60);

/// An acquisition whose answer does not come within the response timeout is sent again (its
/// token and deadline unchanged) while `transient_retry` lasts: once the server answers, the
/// first delivery grants and the others find its token. Held once: nobody else takes it, and
/// its one release frees it.
pub async fn an_unanswered_acquisition_is_sent_again_and_granted_once<H: Held>() {
    let what = H::WHAT;
    let (stalling, patient) = stalling::<H>().await;
    stalling.server.pause_clients(400);
    let mut held = acquired::<H>(&stalling.coordination, MINUTE).await;
    assert!(!contend::<H>(&patient).await, "{what}: held by another");
    assert_eq!(
        held.release().await.expect("release"),
        Release::Released,
        "{what}"
    );
    assert!(contend::<H>(&patient).await, "{what}: granted twice");
}

/// An acquisition that gets no answer for longer than `transient_retry` is uncertain: once
/// the server answers, every delivery runs, then the release of its token that the failure
/// spawned. Nothing stays held, and no key is left.
pub async fn an_acquisition_unanswered_past_its_bound_is_released<H: Held>() {
    let what = H::WHAT;
    let (stalling, patient) = stalling::<H>().await;
    let (keys, scripts) = (stalling.server.count_keys(b""), stalling.calls("evalsha"));
    stalling.server.pause_clients(1500);
    let err = H::try_acquire(&stalling.coordination, MINUTE)
        .await
        .expect_err("no answer in time");
    assert!(err.is_outcome_uncertain(), "{what}: {err}");
    // The stalled acquisition ran once the pause ended, and its release after it.
    support::eventually("the stalled acquisition and its release run", async || {
        stalling.calls("evalsha") >= scripts + 2 && stalling.server.count_keys(b"") == keys
    })
    .await;
    assert!(contend::<H>(&patient).await, "{what}: still held");
}

/// A grant whose answer comes after the lease it asked for ran out: nobody can use it, so it
/// is answered as busy with no time to wait (a session's grant: as timed out), and released
/// by its token.
pub async fn a_grant_answered_after_its_lease_ran_out_is_busy_and_released<H: Held>() {
    let what = H::WHAT;
    let (stalling, patient) = stalling::<H>().await;
    let keys = stalling.server.count_keys(b"");
    stalling.server.pause_clients(400);
    let attempt = H::try_acquire(&patient, Duration::from_millis(250)).await;
    assert!(
        match &attempt {
            Ok(attempt) => matches!(attempt, Attempt::Busy { retry_after: None }),
            Err(err) => err.kind() == leasehold::ErrorKind::Timeout,
        },
        "{what}: {attempt:?}"
    );
    // The grant ran (it was answered), and its release leaves no key.
    support::eventually("the late grant is released", async || {
        stalling.server.count_keys(b"") == keys
    })
    .await;
    assert!(
        contend::<H>(&stalling.coordination).await,
        "{what}: still held"
    );
}

/// A renewal without an answer leaves the handle held, with what both outcomes guarantee:
/// the renewal's expiry when it is the shorter, counted from before it was sent. Renewing
/// again is safe.
pub async fn an_unanswered_renewal_keeps_it_with_the_narrower_estimate<H: Held>() {
    let what = H::WHAT;
    let (stalling, patient) = stalling::<H>().await;
    let mut held = acquired::<H>(&stalling.coordination, MINUTE).await;
    stalling.server.pause_clients(400);
    let err = held
        .renew(Duration::from_secs(10))
        .await
        .expect_err("no answer in time");
    assert!(err.is_outcome_uncertain(), "{what}: {err}");
    assert!(!held.is_released(), "{what}");
    let estimate = held.remaining_estimate();
    assert!(
        estimate <= Duration::from_secs(10) && !estimate.is_zero(),
        "{what}: {estimate:?}"
    );
    support::eventually("the server answers", async || {
        stalling.coordination.server_time().await.is_ok()
    })
    .await;
    assert!(
        held.renew(MINUTE).await.expect("renew after the stall"),
        "{what}"
    );
    assert!(held.verify_still_held().await.expect("verify"), "{what}");
    assert!(!contend::<H>(&patient).await, "{what}: taken while held");
    assert_eq!(
        held.release().await.expect("release"),
        Release::Released,
        "{what}"
    );
}

/// Past its estimate, a handle renews and verifies nothing, and sends nothing; once the
/// backend let it go, its release finds nothing.
pub async fn past_its_estimate_nothing_is_sent<H: Held>() {
    let what = H::WHAT;
    let (stalling, patient) = stalling::<H>().await;
    let mut held = acquired::<H>(&stalling.coordination, Duration::from_millis(200)).await;
    support::eventually("the estimate runs out", async || {
        held.remaining_estimate().is_zero()
    })
    .await;
    let sent = stalling.calls("evalsha");
    assert!(!held.renew(MINUTE).await.expect("renew"), "{what}");
    assert!(!held.verify_still_held().await.expect("verify"), "{what}");
    assert_eq!(stalling.calls("evalsha"), sent, "{what}: nothing was sent");
    assert!(!held.is_released(), "{what}");
    support::eventually("it expires on the server", async || {
        contend::<H>(&patient).await
    })
    .await;
    assert_eq!(
        held.release().await.expect("release"),
        Release::AlreadyReleased,
        "{what}"
    );
}

/// A release without an answer is retried once, bounded; unconfirmed, the handle is
/// uncertain (unusable for work, its estimate zero, renewals and verifications answered
/// `false` without sending), and only a release settles it.
pub async fn an_unanswered_release_is_retried_once_then_uncertain<H: Held>() {
    let what = H::WHAT;
    let (stalling, patient) = stalling::<H>().await;
    let mut held = acquired::<H>(&stalling.coordination, MINUTE).await;
    stalling.server.pause_clients(600);
    let err = held.release().await.expect_err("no answer in time");
    assert!(err.is_outcome_uncertain(), "{what}: {err}");
    assert!(!held.is_released(), "{what}");
    assert_eq!(held.remaining_estimate(), Duration::ZERO, "{what}");
    assert!(
        !held.verify_still_held().await.expect("uncertain"),
        "{what}"
    );
    assert!(!held.renew(MINUTE).await.expect("uncertain"), "{what}");
    // Once the server answers, the cleanup is confirmed (the stalled releases ran first).
    let mut answer = None;
    support::eventually("a release is confirmed", async || {
        answer = held.release().await.ok();
        answer.is_some()
    })
    .await;
    assert_eq!(answer, Some(Release::AlreadyReleased), "{what}");
    assert!(held.is_released(), "{what}");
    assert!(contend::<H>(&patient).await, "{what}: still held");
}

/// A verification only reads: one without an answer is sent again while `transient_retry`
/// lasts (latency), and one without an answer for longer fails as uncertain and leaves the
/// handle held.
pub async fn an_unanswered_verification_leaves_it_held<H: Held>() {
    let what = H::WHAT;
    let (stalling, _patient) = stalling::<H>().await;
    let mut held = acquired::<H>(&stalling.coordination, MINUTE).await;
    stalling.server.pause_clients(300);
    assert!(
        held.verify_still_held().await.expect("sent again"),
        "{what}"
    );
    stalling.server.pause_clients(1500);
    let err = held
        .verify_still_held()
        .await
        .expect_err("no answer in time");
    assert!(err.is_outcome_uncertain(), "{what}: {err}");
    assert!(!held.is_released(), "{what}");
    assert!(held.remaining_estimate() > Duration::ZERO, "{what}");
    let mut answer = None;
    support::eventually("a verification answers", async || {
        answer = held.verify_still_held().await.ok();
        answer.is_some()
    })
    .await;
    assert_eq!(answer, Some(true), "{what}");
    assert_eq!(
        held.release().await.expect("release"),
        Release::Released,
        "{what}"
    );
}
