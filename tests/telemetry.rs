//! The metrics the crate records, read back through a debugging recorder: one decision per
//! check on every path, the held leases, renewals and losses, the backend's errors by class,
//! the queue and the circuit breaker. Each test installs its recorder on its own thread
//! (a current-thread runtime), so that tests running side by side do not count each other.

#![cfg(all(feature = "metrics", feature = "axum"))]

mod support;

use std::time::Duration;

use http::StatusCode;
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::ManagedOptions;
use leasehold::coordination::lock::{FencedLock, ManagedLease};
use leasehold::coordination::ownership::LossReason;
use leasehold::coordination::rate_limit::{
    FixedWindow, HotKeys, PlanAlgorithm, PlanChoice, Quota, RateLimitPlans,
};
use leasehold::coordination::semaphore::{ManagedPermit, Semaphore};
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::{PlanChooser, RedisRateLimitLayer};
use leasehold::layer::{CircuitBreaker, FailurePolicy};
use leasehold::telemetry;
use metrics_util::debugging::DebugValue;
use support::http::{behind, status_of};
use support::proxy::Proxy;
use support::recorder::{Recorded, counter, decisions, gauge, latencies, value};
use support::{Server, ServerKind, connect, shared, unique_prefix};

/// Every check counted once, with its decision, whichever path decided it: the backend,
/// the deny cache, a wait in the queue; and a latency for each.
#[tokio::test(flavor = "current_thread")]
async fn every_check_is_counted_once_with_the_path_that_decided_it() {
    let recorded = Recorded::start();
    let coordination = connect(shared(ServerKind::Redis7).url(), "decisions").await;
    let minute = Duration::from_secs(60);
    let cached = behind(
        RedisRateLimitLayer::fixed_window(&coordination, "cached", 2, minute)
            .expect("valid")
            .key(KeyExtractor::global())
            .deny_cache(10),
    );
    let statuses = [
        status_of(&cached).await,
        status_of(&cached).await,
        status_of(&cached).await,
        status_of(&cached).await,
    ];
    assert_eq!(
        statuses.map(|s| s.as_u16()),
        [200, 200, 429, 429],
        "the last from the deny cache"
    );
    let queued = behind(
        RedisRateLimitLayer::fixed_window(&coordination, "queued", 1, Duration::from_millis(200))
            .expect("valid")
            .key(KeyExtractor::global())
            .wait(Duration::from_secs(1), 10),
    );
    assert_eq!(status_of(&queued).await, StatusCode::OK);
    assert_eq!(status_of(&queued).await, StatusCode::OK, "after a wait");

    let taken = recorded.take();
    assert_eq!(decisions(&taken, "cached", "allowed"), 2);
    assert_eq!(decisions(&taken, "cached", "limited"), 2);
    assert_eq!(latencies(&taken, "cached"), 4, "one latency per check");
    assert_eq!(decisions(&taken, "queued", "allowed"), 2);
    assert_eq!(
        decisions(&taken, "queued", "limited"),
        0,
        "the wait is one check"
    );
    assert_eq!(latencies(&taken, "queued"), 2);
    // The queue held the waiting request's permit, and gave it back.
    assert_eq!(
        gauge(&taken, telemetry::QUEUED_PERMITS, &[("policy", "queued")]),
        0.0
    );
    assert!(
        value(&taken, telemetry::QUEUED_PERMITS, &[("policy", "queued")]).is_some(),
        "the queue's gauge was set"
    );
}

/// With plans, each check is counted under the plan that decided it (an override under
/// its own name): the `policy` label is the plan's, bounded by the plans.
#[tokio::test(flavor = "current_thread")]
async fn a_plans_checks_are_counted_under_the_plan_that_decided_them() {
    let recorded = Recorded::start();
    let coordination = Coordination::memory();
    let minute = Duration::from_secs(60);
    let plans = RateLimitPlans::builder(&coordination, "tiers", PlanAlgorithm::FixedWindow)
        .plan("basic", Quota::per_minute(1))
        .plan("gold", Quota::per_minute(10))
        .customer_override("acme", Quota::new(2, minute))
        .build()
        .expect("valid");
    let router = |chooser| {
        behind(
            RedisRateLimitLayer::plans(plans.clone())
                .key(KeyExtractor::global())
                .choose_plan(chooser),
        )
    };
    let basic = router(PlanChooser::from_fn(|_| PlanChoice::plan("basic")));
    let acme = router(PlanChooser::from_fn(|_| {
        PlanChoice::plan("gold").customer("acme")
    }));
    assert_eq!(status_of(&basic).await, StatusCode::OK);
    assert_eq!(status_of(&basic).await, StatusCode::TOO_MANY_REQUESTS);
    // Its own count: the key's state is shared, 1 spent of the override's 2.
    assert_eq!(status_of(&acme).await, StatusCode::OK);

    let taken = recorded.take();
    assert_eq!(decisions(&taken, "basic", "allowed"), 1);
    assert_eq!(decisions(&taken, "basic", "limited"), 1);
    assert_eq!(decisions(&taken, "override", "allowed"), 1);
    assert_eq!(decisions(&taken, "gold", "allowed"), 0);
    assert_eq!(decisions(&taken, "tiers", "allowed"), 0);
}

/// A concurrency limit's decisions are counted as a rate limit's are: a permit `allowed`, a
/// full limit's 429 `limited`, and with Redis gone, a local permit or the local capacity's
/// 429 `failed_open`, a 503 `failed_closed`; a latency for each.
#[tokio::test(flavor = "current_thread")]
async fn a_concurrency_limits_decisions_are_counted() {
    use leasehold::layer::concurrency_limit::{Capacity, RedisConcurrencyLimitLayer};
    let recorded = Recorded::start();
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = connect(proxy.url(), "concurrency-decisions").await;
    let layer = |name: &str, capacity, policy| {
        RedisConcurrencyLimitLayer::new(&coordination, name, capacity)
            .expect("valid")
            .timeout(Duration::from_millis(300))
            .failure_policy(policy)
    };
    // The permit of each request is released when its response is dropped: one at a time.
    let behind =
        |layer| axum::Router::new().route("/", axum::routing::get(|| async { "ok" }).layer(layer));
    let closed = behind(layer(
        "closed",
        Capacity::global(1),
        FailurePolicy::default(),
    ));
    let open = behind(layer("open", Capacity::global(1), FailurePolicy::FailOpen));
    assert_eq!(status_of(&closed).await, StatusCode::OK);
    proxy.refuse();
    proxy.cut();
    assert_eq!(status_of(&closed).await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(status_of(&open).await, StatusCode::OK, "a local permit");

    let taken = recorded.take();
    let count = |limit: &str, decision: &str| {
        counter(
            &taken,
            telemetry::CONCURRENCY_DECISIONS,
            &[("limit", limit), ("decision", decision)],
        )
    };
    assert_eq!(count("closed", "allowed"), 1);
    assert_eq!(count("closed", "failed_closed"), 1);
    assert_eq!(count("open", "failed_open"), 1);
    let latencies = |limit: &str| match value(
        &taken,
        telemetry::CONCURRENCY_DECISION_SECONDS,
        &[("limit", limit)],
    ) {
        Some(DebugValue::Histogram(values)) => values.len(),
        other => panic!("no histogram: {other:?}"),
    };
    assert_eq!((latencies("closed"), latencies("open")), (2, 1));
}

/// With Redis unreachable, every check is still counted once: `failed_closed` for a 503
/// (the backend's failure, then the open circuit's), `failed_open` for the fail-open
/// fallback's answers, whether it admits or refuses.
#[tokio::test(flavor = "current_thread")]
async fn checks_without_a_decision_are_counted_as_failing_open_or_closed() {
    let recorded = Recorded::start();
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = connect(proxy.url(), "failing").await.circuit_breaker(Some(
        CircuitBreaker::new()
            .failure_threshold(2)
            .open_for(Duration::from_secs(60)),
    ));
    let minute = Duration::from_secs(60);
    let closed = behind(
        RedisRateLimitLayer::fixed_window(&coordination, "closed", 10, minute)
            .expect("valid")
            .key(KeyExtractor::global()),
    );
    let open = behind(
        RedisRateLimitLayer::fixed_window(&coordination, "open", 1, minute)
            .expect("valid")
            .key(KeyExtractor::global())
            .failure_policy(FailurePolicy::FailOpen),
    );
    assert_eq!(status_of(&closed).await, StatusCode::OK);
    recorded.take();

    proxy.refuse();
    proxy.cut();
    for _ in 0..4 {
        assert_eq!(status_of(&closed).await, StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(
        coordination.circuit_state(),
        Some(leasehold::layer::CircuitState::Open)
    );
    // The fallback admits its quota of 1, then refuses.
    assert_eq!(status_of(&open).await, StatusCode::OK);
    assert_eq!(status_of(&open).await, StatusCode::TOO_MANY_REQUESTS);

    let taken = recorded.take();
    assert_eq!(decisions(&taken, "closed", "failed_closed"), 4);
    assert_eq!(decisions(&taken, "closed", "allowed"), 0);
    assert_eq!(decisions(&taken, "open", "failed_open"), 2);
    assert_eq!(decisions(&taken, "open", "limited"), 0);
    assert_eq!(latencies(&taken, "closed"), 4);
    // The handle's breaker opened: its gauge, named by the deployment, says 2.
    assert_eq!(
        gauge(
            &taken,
            telemetry::CIRCUIT_STATE,
            &[("breaker", coordination.endpoint())]
        ),
        2.0
    );
    // Straight on the primitive, with no layer's timeout, the step's failure (an
    // unavailable server) is counted by its class.
    let err =
        leasehold::coordination::rate_limit::FixedWindow::new(&coordination, "direct", 1, minute)
            .expect("valid")
            .try_acquire(b"k", 1)
            .await
            .expect_err("no server");
    assert!(err.is_unavailable(), "{err}");
    let class = if err.is_outcome_uncertain() {
        "uncertain"
    } else {
        "unavailable"
    };
    let taken = recorded.take();
    assert_eq!(
        counter(
            &taken,
            telemetry::BACKEND_ERRORS,
            &[
                ("primitive", "fixed_window"),
                ("step", "fixed_window"),
                ("class", class)
            ],
        ),
        1,
        "{taken:?}"
    );
    proxy.pass();
}

/// A refusal (an ACL that denies the scripts) is counted as `refused`, by primitive and step:
/// a lock's, a session's and a fenced value's.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_step_is_counted_by_class_primitive_and_step() {
    let recorded = Recorded::start();
    let url = shared(ServerKind::Redis7).acl_user(&["-@scripting", "-incr"]);
    let coordination = connect(url, "refused").await;
    let lock = FencedLock::named(&coordination, "refused");
    let err = lock
        .try_acquire(Duration::from_secs(1))
        .await
        .expect_err("scripts are denied");
    assert!(err.is_refused(), "{err}");
    // The newer primitives' steps are counted the same way.
    let err = leasehold::coordination::session::Sessions::named(&coordination, "nodes")
        .grant(Duration::from_secs(5))
        .await
        .expect_err("scripts are denied");
    assert!(err.is_refused(), "{err}");
    let err = leasehold::coordination::fenced_value::FencedValue::named(&coordination, "config")
        .write(1, "v")
        .await
        .expect_err("scripts are denied");
    assert!(err.is_refused(), "{err}");
    let taken = recorded.take();
    for (primitive, step) in [
        ("fenced_lock", "fenced_acquire"),
        ("session", "session_grant"),
        ("fenced_value", "fenced_write"),
    ] {
        assert_eq!(
            counter(
                &taken,
                telemetry::BACKEND_ERRORS,
                &[
                    ("primitive", primitive),
                    ("step", step),
                    ("class", "refused")
                ]
            ),
            1,
            "{primitive} {step}: {taken:?}"
        );
    }
}

/// A managed lease is counted held while it is, its renewals by outcome, and its loss by
/// reason when its key is removed behind its back.
#[tokio::test(flavor = "current_thread")]
async fn a_held_lease_is_counted_held_renewed_then_lost() {
    let recorded = Recorded::start();
    let server = shared(ServerKind::Redis7);
    let prefix = unique_prefix("held");
    let coordination: Coordination = RedisBackend::standalone(server.url())
        .key_prefix(prefix.clone())
        .connect()
        .await
        .expect("connect")
        .into();
    let lock = FencedLock::named(&coordination, "held");
    let options = ManagedOptions::new().lease(Duration::from_millis(300));
    let lease = ManagedLease::try_acquire(&lock, &options)
        .await
        .expect("acquired")
        .expect("free");
    let held = [("primitive", "fenced_lease")];
    assert_eq!(gauge(&recorded.take(), telemetry::LEASES_HELD, &held), 1.0);

    // Renewed every half lease.
    support::eventually("a renewal", async || {
        counter(
            &recorded.take(),
            telemetry::RENEWALS,
            &[("primitive", "fenced_lease"), ("outcome", "renewed")],
        ) > 0
    })
    .await;
    for key in server.keys(prefix.as_bytes()) {
        let _: () = server.cmd(&["DEL", &String::from_utf8_lossy(&key)]);
    }
    let mut ownership = lease.ownership();
    let reason = tokio::time::timeout(Duration::from_secs(2), ownership.lost())
        .await
        .expect("told within a renewal");
    assert_eq!(reason, LossReason::NotRenewed);
    let taken = recorded.take();
    assert_eq!(
        counter(
            &taken,
            telemetry::LEASES_LOST,
            &[("primitive", "fenced_lease"), ("reason", "not_renewed")]
        ),
        1
    );
    assert_eq!(
        counter(
            &taken,
            telemetry::RENEWALS,
            &[("primitive", "fenced_lease"), ("outcome", "lost")]
        ),
        1
    );
    // Lost: no longer held (the gauge moved by -1 since the last look).
    assert_eq!(gauge(&taken, telemetry::LEASES_HELD, &held), -1.0);
    drop(lease);
}

/// The other two ways a managed lease ends are counted by their reasons: its lifetime limit
/// reached (`lifetime_limit`), and a stall that outlasts its estimate (its renewal counted
/// `uncertain`, its loss `uncertain`).
#[tokio::test(flavor = "current_thread")]
async fn a_lease_ended_by_its_lifetime_or_a_stall_is_counted_by_reason() {
    let recorded = Recorded::start();
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = connect(proxy.url(), "lost-reasons").await;
    let lock = FencedLock::named(&coordination, "reasons");
    let lease = Duration::from_millis(600);
    let limited = ManagedLease::try_acquire(
        &lock,
        &ManagedOptions::new()
            .lease(lease)
            .release_on_drop(false)
            .max_lifetime(Some(Duration::from_millis(400))),
    )
    .await
    .expect("acquired")
    .expect("free");
    let reason = tokio::time::timeout(Duration::from_secs(2), limited.ownership().lost())
        .await
        .expect("told at its lifetime limit");
    assert_eq!(reason, LossReason::LifetimeLimit);
    drop(limited);
    let lost = |reason: &'static str| [("primitive", "fenced_lease"), ("reason", reason)];
    support::eventually("the lifetime limit is counted", async || {
        counter(
            &recorded.take(),
            telemetry::LEASES_LOST,
            &lost("lifetime_limit"),
        ) == 1
    })
    .await;

    let mut taken_again = None;
    support::eventually("the lock free again", async || {
        taken_again = ManagedLease::try_acquire(&lock, &ManagedOptions::new().lease(lease))
            .await
            .ok()
            .flatten();
        taken_again.is_some()
    })
    .await;
    let stalled = taken_again.expect("taken again");
    proxy.stall();
    let reason = tokio::time::timeout(Duration::from_secs(5), stalled.ownership().lost())
        .await
        .expect("told when its estimate ran out");
    assert_eq!(reason, LossReason::Uncertain);
    let taken = recorded.take();
    assert_eq!(
        counter(&taken, telemetry::LEASES_LOST, &lost("uncertain")),
        1,
        "{taken:?}"
    );
    assert!(
        counter(
            &taken,
            telemetry::RENEWALS,
            &[("primitive", "fenced_lease"), ("outcome", "uncertain")]
        ) >= 1,
        "{taken:?}"
    );
    proxy.pass();
    drop(stalled);
}

/// Every kind of held thing is counted in the held gauge while it is held, each under its
/// primitive's label (a field lease, a read lease, a session, a Redlock lease), and no
/// longer once released.
#[tokio::test(flavor = "current_thread")]
async fn every_kind_of_holding_is_counted_held_while_it_is() {
    use leasehold::coordination::hash_lease::{LeaseHash, ManagedFieldLease};
    use leasehold::coordination::redlock::RedlockGroup;
    use leasehold::coordination::rw_lease::{ManagedRwLease, ReadWriteLock};
    use leasehold::coordination::session::{ManagedSession, Sessions};
    let recorded = Recorded::start();
    // Redis 8: field leases need hash field expiry (7.4+).
    let coordination = connect(shared(ServerKind::Redis8).url(), "held-kinds").await;
    let lease = Duration::from_secs(30);
    let options = ManagedOptions::new().lease(lease);
    let field =
        ManagedFieldLease::try_acquire(&LeaseHash::named(&coordination, "fields"), "f", &options)
            .await
            .expect("acquire")
            .expect("free");
    let read = ManagedRwLease::read(&ReadWriteLock::named(&coordination, "rw"), &options)
        .await
        .expect("read");
    let session = ManagedSession::grant(&Sessions::named(&coordination, "nodes"), &options)
        .await
        .expect("grant");
    // Three independent servers: the shared ones of three kinds.
    let mut nodes = Vec::new();
    for kind in [ServerKind::Redis7, ServerKind::Redis8, ServerKind::Valkey8] {
        nodes.push(connect(shared(kind).url(), "held-kinds-redlock").await);
    }
    let group = RedlockGroup::new(nodes).expect("three nodes");
    let redlock = leasehold::coordination::redlock::ManagedRedlockLease::keep(
        group
            .try_acquire("r", lease)
            .await
            .expect("try")
            .acquired()
            .expect("free"),
        &options,
    )
    .expect("keep");
    let kinds = [
        "hash_field_lease",
        "read_write_lease",
        "session",
        "redlock_lease",
    ];
    let taken = recorded.take();
    for kind in kinds {
        let held = [("primitive", kind)];
        assert_eq!(gauge(&taken, telemetry::LEASES_HELD, &held), 1.0, "{kind}");
    }
    assert!(field.release().await.expect("release").was_held());
    assert!(read.release().await.expect("release").was_held());
    assert!(session.release().await.expect("revoke").was_held());
    assert!(redlock.release().await.expect("release").was_held());
    let taken = recorded.take();
    for kind in kinds {
        let held = [("primitive", kind)];
        assert_eq!(gauge(&taken, telemetry::LEASES_HELD, &held), -1.0, "{kind}");
    }
}

/// The hot-key tier's local grants are checks like any other: one decision each, and a
/// latency; a request waiting in the queue shows in its gauge while it waits.
#[tokio::test(flavor = "current_thread")]
async fn the_hot_key_tier_and_a_waiting_request_are_counted() {
    let recorded = Recorded::start();
    let coordination = connect(shared(ServerKind::Redis7).url(), "tiers").await;
    let minute = Duration::from_secs(60);
    let window = FixedWindow::new(&coordination, "hot", 100, minute)
        .expect("valid")
        .with_hot_keys(HotKeys::new(10))
        .expect("valid");
    let layer = RedisRateLimitLayer::new(window).key(KeyExtractor::global());
    let hot = behind(layer.clone());
    for _ in 0..5 {
        assert_eq!(status_of(&hot).await, StatusCode::OK);
    }
    let tier = layer
        .limiter()
        .statistics()
        .hot_keys()
        .expect("the tier is on");
    assert_eq!(tier.spent(), 4, "four granted by the tier");
    let taken = recorded.take();
    assert_eq!(decisions(&taken, "hot", "allowed"), 5);
    assert_eq!(latencies(&taken, "hot"), 5);

    let queued = behind(
        RedisRateLimitLayer::fixed_window(&coordination, "waiting", 1, Duration::from_millis(300))
            .expect("valid")
            .key(KeyExtractor::global())
            .wait(Duration::from_secs(2), 10),
    );
    assert_eq!(status_of(&queued).await, StatusCode::OK);
    let waiting = tokio::spawn({
        let queued = queued.clone();
        async move { status_of(&queued).await }
    });
    let waits = [("policy", "waiting")];
    support::eventually("the request waits in the queue", async || {
        gauge(&recorded.take(), telemetry::QUEUED_PERMITS, &waits) == 1.0
    })
    .await;
    // The debugging recorder hands a gauge over and resets it to 0: a sentinel written now
    // (before the waiting task runs again, on this one thread) reads back as 0 only if the
    // queue sets the gauge once the permit is given back.
    metrics::gauge!(telemetry::QUEUED_PERMITS, "policy" => "waiting").set(99.0);
    assert_eq!(waiting.await.expect("the request"), StatusCode::OK);
    let taken = recorded.take();
    assert_eq!(gauge(&taken, telemetry::QUEUED_PERMITS, &waits), 0.0);
    assert_eq!(decisions(&taken, "waiting", "allowed"), 1, "{taken:?}");
}

/// The breaker's gauge through a whole round: open (2), half-open once the open time is
/// over (1, before a probe goes) and while a probe is out, closed once it is answered (0).
#[tokio::test(flavor = "current_thread")]
async fn the_breaker_gauge_follows_open_half_open_and_closed() {
    let recorded = Recorded::start();
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = connect(proxy.url(), "breaker").await.circuit_breaker(Some(
        CircuitBreaker::new()
            .failure_threshold(1)
            .open_for(Duration::from_millis(300)),
    ));
    let breaker = [("breaker", coordination.endpoint())];
    // A decision timeout that outlasts the probe's stall, however slow the machine.
    let router = behind(
        RedisRateLimitLayer::fixed_window(&coordination, "probed", 100, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .timeout(Duration::from_secs(5)),
    );
    assert_eq!(status_of(&router).await, StatusCode::OK);
    proxy.refuse();
    proxy.cut();
    assert_eq!(status_of(&router).await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        gauge(&recorded.take(), telemetry::CIRCUIT_STATE, &breaker),
        2.0
    );

    // Past the open time (a fifth more at most, its jitter), the next request is a probe:
    // held by the network until the test lets it go.
    proxy.pass();
    support::eventually("the open time is over", async || {
        coordination.circuit_state() == Some(leasehold::layer::CircuitState::HalfOpen)
    })
    .await;
    // Shown half-open from the look that found the open time over, before any probe.
    assert_eq!(
        gauge(&recorded.take(), telemetry::CIRCUIT_STATE, &breaker),
        1.0
    );
    proxy.stall();
    let probe = tokio::spawn({
        let router = router.clone();
        async move { status_of(&router).await }
    });
    support::eventually("the probe is out", async || {
        gauge(&recorded.take(), telemetry::CIRCUIT_STATE, &breaker) == 1.0
    })
    .await;
    // A recorder of its own from here: the debugging one shows a gauge it handed over as 0,
    // which would pass for a closed circuit.
    drop(recorded);
    let recorded = Recorded::start();
    proxy.pass();
    assert_eq!(probe.await.expect("the probe"), StatusCode::OK);
    let taken = recorded.take();
    assert!(
        matches!(
            value(&taken, telemetry::CIRCUIT_STATE, &breaker),
            Some(DebugValue::Gauge(closed)) if closed.into_inner() == 0.0
        ),
        "closed: {taken:?}"
    );
}

/// A managed permit is counted held and renewed; a release the server refuses in the
/// background (an ACL that took the scripts away) is counted abandoned, by primitive, stage
/// and cause.
#[tokio::test(flavor = "current_thread")]
async fn a_permit_is_counted_held_and_renewed_and_a_refused_release_abandoned() {
    let recorded = Recorded::start();
    // A server of its own: its ACL changes under the test.
    let server = Server::start(ServerKind::Redis7, &[]);
    let coordination = connect(server.acl_user(&[]), "abandoned").await;
    let semaphore = Semaphore::new(&coordination, "permits", 2).expect("valid");
    let options = ManagedOptions::new().lease(Duration::from_millis(300));
    let permit = ManagedPermit::try_acquire(&semaphore, &options)
        .await
        .expect("acquired")
        .expect("free");
    let held = [("primitive", "semaphore_permit")];
    assert_eq!(gauge(&recorded.take(), telemetry::LEASES_HELD, &held), 1.0);
    support::eventually("a renewal", async || {
        counter(
            &recorded.take(),
            telemetry::RENEWALS,
            &[("primitive", "semaphore_permit"), ("outcome", "renewed")],
        ) > 0
    })
    .await;
    // Its keeper releases it, and then it is no longer held.
    drop(permit);
    support::eventually("the permit is released", async || {
        gauge(&recorded.take(), telemetry::LEASES_HELD, &held) == -1.0
    })
    .await;

    let lock = FencedLock::named(&coordination, "abandoned");
    let lease = lock
        .try_acquire(Duration::from_secs(30))
        .await
        .expect("acquired")
        .acquired()
        .expect("free");
    server.acl_user(&["-@scripting"]);
    drop(lease);
    support::eventually("the release is given up", async || {
        counter(
            &recorded.take(),
            telemetry::ABANDONED_RELEASES,
            &[
                ("primitive", "fenced_lease"),
                ("stage", "dropped"),
                ("cause", "refused"),
            ],
        ) == 1
    })
    .await;
}

/// The metrics example serves `/metrics` in the Prometheus text format, where the decision
/// counter moves with the requests to its limited route: in process, and through Redis.
#[tokio::test(flavor = "current_thread")]
async fn the_example_serves_the_decisions_on_its_metrics_route() {
    let redis = shared(ServerKind::Redis7).url();
    for env in [vec![], vec![("REDIS_URL", redis)]] {
        let running = support::example::start("metrics", &env);
        let client = support::http::client();
        for _ in 0..3 {
            let reply = support::http::get(&client, running.addr, "/hello", &[]).await;
            assert_eq!(reply.status, 200);
        }
        let reply = support::http::get(&client, running.addr, "/metrics", &[]).await;
        assert_eq!(reply.status, 200);
        let body = String::from_utf8_lossy(&reply.body);
        let allowed = body
            .lines()
            .find(|line| {
                line.starts_with("leasehold_rate_limit_decisions_total{")
                    && line.contains("policy=\"hello\"")
                    && line.contains("decision=\"allowed\"")
            })
            .unwrap_or_else(|| panic!("no decision counter in {body}"));
        assert!(allowed.ends_with(" 3"), "{allowed} ({env:?})");
        assert!(
            body.contains("leasehold_rate_limit_decision_duration_seconds"),
            "{body}"
        );
    }
}

/// The Grafana dashboard of the manual (`docs/grafana-dashboard.json`) queries only the
/// metrics the crate emits, each under its name as a Prometheus exporter renders it (a
/// histogram's `_bucket`, `_sum` and `_count` series, or the summary's own name), and every
/// one of them in some panel; its panels read the templated `$datasource`.
#[test]
fn the_dashboard_names_only_metrics_the_crate_emits() {
    use std::collections::BTreeSet;

    // Every name the crate emits: the telemetry module's constants, read from its source,
    // so that a metric added there without a panel fails here.
    let source = include_str!("../src/telemetry/mod.rs");
    let emitted: BTreeSet<&str> = source
        .lines()
        .filter_map(|line| {
            let constant = line.trim().strip_prefix("pub const ")?;
            let (_, value) = constant.split_once(": &str = \"")?;
            value.strip_suffix("\";")
        })
        .collect();
    let public: BTreeSet<&str> = [
        telemetry::DECISIONS,
        telemetry::DECISION_SECONDS,
        telemetry::QUEUED_PERMITS,
        telemetry::CONCURRENCY_DECISIONS,
        telemetry::CONCURRENCY_DECISION_SECONDS,
        telemetry::BACKEND_ERRORS,
        telemetry::LEASES_HELD,
        telemetry::RENEWALS,
        telemetry::LEASES_LOST,
        telemetry::ABANDONED_RELEASES,
        telemetry::CIRCUIT_STATE,
    ]
    .into_iter()
    .collect();
    assert_eq!(
        emitted, public,
        "the source's constants are the public ones"
    );
    let histograms = [
        telemetry::DECISION_SECONDS,
        telemetry::CONCURRENCY_DECISION_SECONDS,
    ];
    // A name as the exporter renders it, back to the name the crate records.
    let recorded = |name: &str| -> String {
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix)
                && histograms.contains(&base)
            {
                return base.to_owned();
            }
        }
        name.to_owned()
    };
    // Every `leasehold_...` name in a text.
    let names_in = |text: &str| -> Vec<String> {
        let mut names = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("leasehold_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            names.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
        names
    };

    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../docs/grafana-dashboard.json"))
            .expect("the dashboard is JSON");
    // Anywhere in the dashboard (queries, variables, descriptions): only emitted names.
    let mut strings = Vec::new();
    let mut stack = vec![&dashboard];
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::String(text) => strings.push(text.as_str()),
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(fields) => stack.extend(fields.values()),
            _ => {}
        }
    }
    for text in &strings {
        for name in names_in(text) {
            assert!(
                emitted.contains(recorded(&name).as_str()),
                "the dashboard names {name}, which the crate does not emit: {text}"
            );
        }
    }

    // The panels' queries: every emitted name in one at least, from the templated source.
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("template variables");
    assert!(
        variables
            .iter()
            .any(|variable| variable["name"] == "datasource"
                && variable["type"] == "datasource"
                && variable["query"] == "prometheus"),
        "a `datasource` variable of Prometheus sources"
    );
    let mut queried = BTreeSet::new();
    let mut panels: Vec<&serde_json::Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(panel) = panels.pop() {
        if let Some(inner) = panel["panels"].as_array() {
            panels.extend(inner);
        }
        let Some(targets) = panel["targets"].as_array() else {
            continue;
        };
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{}: the templated source",
            panel["title"]
        );
        for target in targets {
            let expr = target["expr"].as_str().expect("a Prometheus query");
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{expr}");
            for name in names_in(expr) {
                queried.insert(recorded(&name));
            }
        }
    }
    let missing: Vec<&&str> = emitted
        .iter()
        .filter(|name| !queried.contains(**name))
        .collect();
    assert!(missing.is_empty(), "no panel queries {missing:?}");
}
