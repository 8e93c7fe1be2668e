//! The failure model over HTTP: both layers (and what stands behind them) against a real Redis
//! reached through the fault proxy, or made to refuse (ACL, a rotated password, a full memory
//! backend). Each test is a row of the maintainers' table in `docs/failure-model.md`, which
//! `tests/docs_index.rs` checks names only tests that exist.

#![cfg(feature = "axum")]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use http::request::Parts;
use leasehold::backend::memory::MemoryBackend;
use leasehold::backend::redis::{DEFAULT_TRANSIENT_RETRY, RedisBackend};
use leasehold::coordination::lock::FencedLock;
use leasehold::coordination::rate_limit::FixedWindow;
use leasehold::coordination::semaphore::Semaphore;
use leasehold::extract::{
    Lease, LeaseRequest, LeaseSpec, Permit, PermitRequest, PermitSpec, ReadLease, WriteLease,
};
use leasehold::layer::concurrency_limit::{Capacity, RedisConcurrencyLimitLayer};
use leasehold::layer::key::{KeyError, KeyExtractor};
use leasehold::layer::rate_limit::RedisRateLimitLayer;
use leasehold::layer::{CircuitBreaker, CircuitState, FailurePolicy};
use leasehold::{Coordination, ErrorKind};
use support::http::{Reply, client, get as http_get, serve};
use support::proxy::{Direction, Proxy};
use support::{Server, ServerKind, shared, unique_prefix};

/// The layers' decision timeout in these tests.
const DECISION_TIMEOUT: Duration = Duration::from_millis(400);

async fn through(url: String, test: &str) -> Coordination {
    support::connect(url, test).await
}

/// A lease of a name of its own for each request (so that no request finds another's lease
/// still held), answered within the layers' decision timeout.
struct EachRequest;

/// A lease name of its own for every request.
fn each_request() -> LeaseRequest {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    LeaseRequest::named(format!("lease-{}", NEXT.fetch_add(1, Ordering::Relaxed)))
}

impl<S: Sync> LeaseSpec<S> for EachRequest {
    async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(each_request().timeout(DECISION_TIMEOUT))
    }
}

/// One of a hundred permits, for each request.
struct EachPermit;

impl<S: Sync> PermitSpec<S> for EachPermit {
    async fn permit(_parts: &mut Parts, _state: &S) -> Result<PermitRequest, KeyError> {
        Ok(PermitRequest::new("extractor-permits", 100).timeout(DECISION_TIMEOUT))
    }
}

/// `/rate` behind a fixed window of 1000 per minute, `/concurrent` behind a concurrency limit
/// of 100, both with `policy`; `/lease`, `/read`, `/write` and `/permit` take a `Lease`, a
/// `ReadLease`, a `WriteLease` and a `Permit` (which never fail open).
fn app(coordination: &Coordination, policy: FailurePolicy) -> (Router, RedisConcurrencyLimitLayer) {
    let rate =
        RedisRateLimitLayer::fixed_window(coordination, "rate", 1000, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .timeout(DECISION_TIMEOUT)
            .failure_policy(policy);
    let concurrent =
        RedisConcurrencyLimitLayer::new(coordination, "concurrent", Capacity::global(100))
            .expect("valid")
            .timeout(DECISION_TIMEOUT)
            .failure_policy(policy);
    let router = Router::new()
        .route("/rate", get(|| async { "ok" }).layer(rate))
        .route(
            "/concurrent",
            get(|| async { "ok" }).layer(concurrent.clone()),
        )
        .merge(extractor_routes(coordination));
    (router, concurrent)
}

/// The extractors' routes ([`EXTRACTORS`]), each taking a lease or a permit of its own.
fn extractor_routes(coordination: &Coordination) -> Router {
    Router::new()
        .route(
            LEASE,
            get(|lease: Lease<EachRequest>| async move { lease.fencing_token().to_string() }),
        )
        .route("/read", get(|_: ReadLease<EachRequest>| async { "ok" }))
        .route("/write", get(|_: WriteLease<EachRequest>| async { "ok" }))
        .route("/permit", get(|_: Permit<EachPermit>| async { "ok" }))
        .with_state(coordination.clone())
}

/// The app of [`app`] with `policy`, served, reaching the shared Redis through a fault proxy
/// of its own, and healthy on every route before the fault a test then injects.
async fn served_through_a_proxy(
    test: &str,
    policy: FailurePolicy,
) -> (Proxy, Coordination, RedisConcurrencyLimitLayer, SocketAddr) {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = through(proxy.url(), test).await;
    let (router, concurrent) = app(&coordination, policy);
    let addr = serve(router).await;
    assert!(each_route(addr).await.iter().all(|r| r.status == 200));
    (proxy, coordination, concurrent, addr)
}

/// The layers' routes.
const ROUTES: [&str; 2] = ["/rate", "/concurrent"];
/// The `Lease` extractor's route.
const LEASE: &str = "/lease";
/// The extractors' routes.
const EXTRACTORS: [&str; 4] = [LEASE, "/read", "/write", "/permit"];
/// Every route: the layers' and the extractors'.
const ALL_ROUTES: [&str; 6] = ["/rate", "/concurrent", LEASE, "/read", "/write", "/permit"];

/// One request to every route, the extractors' included.
async fn each_route(addr: SocketAddr) -> Vec<Reply> {
    let client = client();
    let mut replies = Vec::new();
    for route in ALL_ROUTES {
        replies.push(http_get(&client, addr, route, &[]).await);
    }
    replies
}

#[track_caller]
fn assert_503_with_retry_after(reply: &Reply, what: &str) {
    assert_eq!(reply.status, 503, "{what}: {reply:?}");
    assert!(reply.retry_after_secs() >= 1, "{what}: {reply:?}");
}

#[tokio::test]
async fn a_stall_shorter_than_the_decision_timeout_gives_normal_answers() {
    let (proxy, _coordination, _concurrent, addr) =
        served_through_a_proxy("stall", FailurePolicy::default()).await;

    for route in ALL_ROUTES {
        let sent = proxy.sent();
        proxy.stall();
        let client = client();
        let request = tokio::spawn(async move { http_get(&client, addr, route, &[]).await });
        // The request's step is held by the stall (it met the fault), for a quarter of the
        // decision timeout.
        proxy.until_sent(sent, "the step is held").await;
        tokio::time::sleep(DECISION_TIMEOUT / 4).await;
        proxy.pass();
        let reply = request.await.expect("the request task");
        assert_eq!(reply.status, 200, "{route} after a short stall: {reply:?}");
    }
}

#[tokio::test]
async fn a_blackhole_answers_503_within_the_decision_timeout_and_nothing_hangs() {
    let (proxy, _coordination, _concurrent, addr) =
        served_through_a_proxy("blackhole", FailurePolicy::default()).await;

    proxy.blackhole();
    let started = Instant::now();
    let mut requests = Vec::new();
    for i in 0..9 {
        let client = client();
        let route = ALL_ROUTES[i % ALL_ROUTES.len()];
        requests.push(tokio::spawn(async move {
            let sent = Instant::now();
            let reply = http_get(&client, addr, route, &[]).await;
            (route, reply, sent.elapsed())
        }));
    }
    for request in requests {
        let (route, reply, took) = request.await.expect("the request task");
        assert_503_with_retry_after(&reply, route);
        assert!(
            took < DECISION_TIMEOUT + Duration::from_millis(600),
            "{route} answered after {took:?}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(3));
    proxy.pass();
}

#[tokio::test]
async fn after_a_cut_requests_are_served_once_the_backend_reconnects() {
    let (proxy, _coordination, _concurrent, addr) =
        served_through_a_proxy("cut", FailurePolicy::default()).await;
    let connections = proxy.connections_accepted();

    proxy.cut();
    for route in ALL_ROUTES {
        let client = client();
        let deadline = Instant::now() + support::PATIENCE;
        loop {
            let reply = http_get(&client, addr, route, &[]).await;
            if reply.status == 200 {
                break;
            }
            // Until then, only fail-closed answers.
            assert_503_with_retry_after(&reply, route);
            assert!(
                Instant::now() < deadline,
                "{route} never served after a cut"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(
        proxy.connections_accepted() > connections,
        "a new connection was made"
    );
}

/// A lease of a name of its own for each request, with the extractor's default timeout.
struct EachRequestByDefault;

impl<S: Sync> LeaseSpec<S> for EachRequestByDefault {
    async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(each_request())
    }
}

/// `/rate` behind a fixed window and `/lease` taking a `Lease`, everything at its defaults
/// (timeouts, circuit breaker, fail closed) but for `breaker`, on a handle through `proxy`.
async fn served_by_default(
    proxy: &Proxy,
    test: &str,
    breaker: Option<CircuitBreaker>,
) -> (SocketAddr, Coordination) {
    let mut coordination = through(proxy.url(), test).await;
    if breaker.is_some() {
        coordination = coordination.circuit_breaker(breaker);
    }
    let rate =
        RedisRateLimitLayer::fixed_window(&coordination, "rate", 1000, Duration::from_secs(60))
            .expect("valid");
    let router = Router::new()
        .route("/rate", get(|| async { "ok" }).layer(rate))
        .route(
            LEASE,
            get(|_lease: Lease<EachRequestByDefault>| async { "ok" }),
        )
        .with_state(coordination.clone());
    let addr = serve(router).await;
    for route in ["/rate", LEASE] {
        let reply = http_get(&client(), addr, route, &[]).await;
        assert_eq!(reply.status, 200, "{route}: {reply:?}");
    }
    (addr, coordination)
}

/// Requests to `route` every 20 ms (each within its own timeout) until one is served,
/// every other answer a 503 with `Retry-After`; how long after `since` it was served.
async fn served_again(addr: SocketAddr, route: &str, since: Instant) -> Duration {
    let client = client();
    loop {
        let reply = http_get(&client, addr, route, &[]).await;
        if reply.status == 200 {
            return since.elapsed();
        }
        assert_503_with_retry_after(&reply, route);
        assert!(
            since.elapsed() < support::PATIENCE,
            "{route} never served again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every connection the handle holds falls silent (no FIN, no RST: a host gone, a VIP
/// moved) while new connections reach the same healthy server: the silent connection is
/// replaced after a bounded number of unanswered steps, and both routes serve again within
/// 5 s of the silence, at their defaults. Timed from the moment the silence starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_replaced_and_served_again_within_five_seconds() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let (addr, _coordination) = served_by_default(&proxy, "silent", None).await;
    let connections = proxy.connections_accepted();

    proxy.silence_open();
    let silent_since = Instant::now();
    let (rate, lease) = tokio::join!(
        served_again(addr, "/rate", silent_since),
        served_again(addr, LEASE, silent_since),
    );
    for (route, took) in [("/rate", rate), (LEASE, lease)] {
        assert!(
            took < Duration::from_secs(5),
            "{route} served again {took:?} after the silence"
        );
    }
    assert!(
        proxy.connections_accepted() > connections,
        "a new connection was made"
    );
}

/// A cluster's node falls silent alone (its connections hold their requests, new ones reach
/// it), then every node does: the cluster client heals a node's broken connection but keeps
/// a silent one, so it is replaced whole, both times, and a fixed-window layer at its
/// defaults serves again within 5 s of the silence. The first time, the other nodes answer
/// all along (a request each time the layer's own key waits), so that their answers cannot
/// hide the silent node. Timed from the moment the silence starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_cluster_node_is_replaced_and_served_again_within_five_seconds() {
    let cluster = support::Cluster::start(ServerKind::Redis7);
    let proxies = cluster.behind_proxies();
    let prefix = unique_prefix("cluster-silent");
    let coordination: Coordination = RedisBackend::cluster(proxies.iter().map(Proxy::url))
        .key_prefix(prefix.clone())
        .connect()
        .await
        .expect("connect")
        .into();
    let rate =
        RedisRateLimitLayer::fixed_window(&coordination, "rate", 1000, Duration::from_secs(60))
            .expect("valid");
    let addr = serve(Router::new().route("/rate", get(|| async { "ok" }).layer(rate))).await;
    assert_eq!(http_get(&client(), addr, "/rate", &[]).await.status, 200);
    // The node that holds the layer's key, found by the key itself.
    let pattern = format!("{prefix}*");
    let holder = cluster
        .nodes()
        .iter()
        .position(|node| !node.cmd::<Vec<Vec<u8>>>(&["KEYS", &pattern]).is_empty())
        .expect("the layer's key is on a node");

    // Another node keeps answering steps on keys of its own meanwhile: the client keys of
    // a second limiter that its keys show are not on the silent node.
    let other = leasehold::coordination::rate_limit::RateLimiter::from(
        FixedWindow::new(&coordination, "other", 1_000_000, Duration::from_secs(60))
            .expect("valid"),
    );
    for i in 0..20 {
        other
            .try_acquire(format!("k{i}").as_bytes(), 1)
            .await
            .expect("answered");
    }
    let elsewhere: Vec<Vec<u8>> = cluster
        .nodes()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != holder)
        .flat_map(|(_, node)| node.cmd::<Vec<Vec<u8>>>(&["KEYS", &format!("{prefix}*other*")]))
        .filter_map(|key| Some(key.rsplit(|b| *b == b':').next()?.to_vec()))
        .collect();
    assert!(!elsewhere.is_empty(), "a client key on another node");
    let answered = Arc::new(AtomicU64::new(0));
    let answering = tokio::spawn({
        let answered = answered.clone();
        async move {
            for key in elsewhere.iter().cycle() {
                if other.try_acquire(key, 1).await.is_ok() {
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    let connections: u64 = proxies.iter().map(Proxy::connections_accepted).sum();
    proxies[holder].silence_open();
    let silent_since = Instant::now();
    let answered_before = answered.load(Ordering::Relaxed);
    let took = served_again(addr, "/rate", silent_since).await;
    answering.abort();
    assert!(
        answered.load(Ordering::Relaxed) > answered_before,
        "the other nodes answered meanwhile"
    );
    assert!(
        took < Duration::from_secs(5),
        "served again {took:?} after one node fell silent"
    );
    let now: u64 = proxies.iter().map(Proxy::connections_accepted).sum();
    assert!(now > connections, "new connections were made");

    for proxy in &proxies {
        proxy.silence_open();
    }
    let silent_since = Instant::now();
    let took = served_again(addr, "/rate", silent_since).await;
    assert!(
        took < Duration::from_secs(5),
        "served again {took:?} after every node fell silent"
    );
    let later: u64 = proxies.iter().map(Proxy::connections_accepted).sum();
    assert!(later > now, "new connections were made");
}

/// A server that restarts (its connections reset, new ones refused) long enough for the
/// circuit breaker to open is served again within 0.5 s of answering: the handle keeps
/// connecting in the background, and a connection made is a probe, however long the
/// breaker's pause has still to run (ten seconds here, so that only that probe can serve).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_served_within_half_a_second_of_answering() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let long_pause = CircuitBreaker::new().open_for(Duration::from_secs(10));
    let coordination = through(proxy.url(), "restarted")
        .await
        .circuit_breaker(Some(long_pause));
    let rate =
        RedisRateLimitLayer::fixed_window(&coordination, "rate", 1000, Duration::from_secs(60))
            .expect("valid");
    let addr = serve(Router::new().route("/rate", get(|| async { "ok" }).layer(rate))).await;
    assert_eq!(http_get(&client(), addr, "/rate", &[]).await.status, 200);

    proxy.refuse();
    proxy.cut();
    let down_since = Instant::now();
    // Down for long enough that the breaker opened.
    let client = client();
    while down_since.elapsed() < Duration::from_secs(2) {
        let reply = http_get(&client, addr, "/rate", &[]).await;
        assert_503_with_retry_after(&reply, "/rate");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(coordination.circuit_state(), Some(CircuitState::Open));
    proxy.pass();
    let up_since = Instant::now();
    let took = served_again(addr, "/rate", up_since).await;
    assert!(
        took < Duration::from_millis(500),
        "served again {took:?} after the server answered"
    );
}

/// A half-open circuit's probe is settled by the backend's first answer, also when that
/// answer is a rejection and the request then waits in the layer's queue: the breaker closes
/// at once, and a request for another key is served meanwhile, not failed fast for as long
/// as the first one waits.
#[tokio::test]
async fn a_probe_that_waits_in_the_queue_closes_the_circuit_with_its_first_answer() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = through(proxy.url(), "probe-waits")
        .await
        .circuit_breaker(Some(
            CircuitBreaker::new()
                .failure_threshold(1)
                .open_for(Duration::from_millis(200)),
        ));
    let rate = RedisRateLimitLayer::fixed_window(&coordination, "rate", 1, Duration::from_secs(3))
        .expect("valid")
        .key(KeyExtractor::header_in_clear("x-client").expect("a header name"))
        .timeout(DECISION_TIMEOUT)
        .wait(Duration::from_secs(5), 10);
    let addr = serve(Router::new().route("/rate", get(|| async { "ok" }).layer(rate))).await;
    let client = client();
    let ask = |who: &'static str| {
        let client = client.clone();
        async move { http_get(&client, addr, "/rate", &[("x-client", who)]).await }
    };
    assert_eq!(ask("a").await.status, 200, "a's one permit of the window");

    // A silence opens the circuit; once the server answers again and the pause is over, the
    // next request is the probe.
    proxy.stall();
    assert_eq!(ask("x").await.status, 503);
    assert_eq!(coordination.circuit_state(), Some(CircuitState::Open));
    proxy.pass();
    support::eventually("the circuit half-opens", async || {
        coordination.circuit_state() == Some(CircuitState::HalfOpen)
    })
    .await;
    // The probe: a's window is spent, so it waits in the queue for the next one.
    let probe = tokio::spawn(ask("a"));
    support::eventually("the probe's first answer closes the circuit", async || {
        coordination.circuit_state() == Some(CircuitState::Closed)
    })
    .await;
    assert!(!probe.is_finished(), "the probe still waits in the queue");
    let other = ask("b").await;
    assert_eq!(
        other.status, 200,
        "another key, served meanwhile: {other:?}"
    );
    assert_eq!(
        probe.await.expect("the probe").status,
        200,
        "after its wait"
    );
}

#[tokio::test]
async fn refused_connections_under_fail_open_pass_and_open_the_breaker() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = through(proxy.url(), "refused").await;
    let rate = RedisRateLimitLayer::fixed_window(&coordination, "rate", 1, Duration::from_secs(60))
        .expect("valid")
        .key(KeyExtractor::global())
        .timeout(DECISION_TIMEOUT)
        .failure_policy(FailurePolicy::FailOpen);
    let concurrent =
        RedisConcurrencyLimitLayer::new(&coordination, "concurrent", Capacity::global(100))
            .expect("valid")
            .timeout(DECISION_TIMEOUT)
            .failure_policy(FailurePolicy::FailOpen)
            .circuit_breaker(
                CircuitBreaker::new()
                    .failure_threshold(2)
                    .open_for(Duration::from_secs(60)),
            );
    let router = Router::new()
        .route("/rate", get(|| async { "ok" }).layer(rate))
        .route(
            "/concurrent",
            get(|| async { "ok" }).layer(concurrent.clone()),
        )
        .merge(extractor_routes(&coordination));
    let addr = serve(router).await;
    let client = client();
    assert_eq!(http_get(&client, addr, "/rate", &[]).await.status, 200);
    assert_eq!(
        http_get(&client, addr, "/rate", &[]).await.status,
        429,
        "the limit holds"
    );

    proxy.refuse();
    proxy.cut();
    // Unreachable, the backend cannot decide: the rate limit admits by its fallback in this
    // process (its quota of 1, fresh here), the concurrency limit by local permits; a lease
    // never fails open. Every request from the cut on is answered within the decision
    // timeout (and a scheduler's slack), before the breaker opens as after.
    let cut = Instant::now();
    let timed = async |route: &str| {
        let started = Instant::now();
        let reply = http_get(&client, addr, route, &[]).await;
        let took = started.elapsed();
        assert!(
            took < DECISION_TIMEOUT + Duration::from_millis(500),
            "{route}, {:?} after the cut, answered in {took:?}",
            started - cut
        );
        reply
    };
    let rate: Vec<u16> = {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(timed("/rate").await.status.as_u16());
        }
        statuses
    };
    assert_eq!(rate, [200, 429, 429], "the fallback's quota");
    for _ in 0..3 {
        assert_eq!(timed("/concurrent").await.status, 200);
        for route in EXTRACTORS {
            assert_503_with_retry_after(&timed(route).await, route);
        }
    }
    support::eventually("the circuit opens", async || {
        concurrent.circuit_state() == Some(CircuitState::Open)
    })
    .await;
    // Open: a local permit at once, without waiting for the backend.
    let started = Instant::now();
    assert_eq!(
        http_get(&client, addr, "/concurrent", &[]).await.status,
        200
    );
    assert!(
        started.elapsed() < DECISION_TIMEOUT,
        "{:?}",
        started.elapsed()
    );
    proxy.pass();
}

/// Redis gone and its port refusing, no circuit breaker: once the outage outlasts the
/// transient-retry bound, every request is answered at once (a refused connection is
/// certain), rather than after the layer's timeout. Timed from the moment of the cut.
#[tokio::test]
async fn an_outage_costs_no_timeout_once_it_outlasts_the_retry_bound() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    // Without the circuit breaker, whose opening would answer at once for other reasons.
    let coordination = through(proxy.url(), "outage").await.circuit_breaker(None);
    let (router, _) = app(&coordination, FailurePolicy::default());
    let addr = serve(router).await;
    assert!(each_route(addr).await.iter().all(|r| r.status == 200));

    proxy.refuse();
    proxy.cut();
    let cut = Instant::now();
    // Inside the bound a restart would cost latency, not errors; past it, nothing waits.
    let settled = DEFAULT_TRANSIENT_RETRY + Duration::from_millis(100);
    let mut slow = Vec::new();
    let mut past_the_bound = 0;
    while cut.elapsed() < settled + Duration::from_secs(2) {
        for route in ALL_ROUTES {
            let started = Instant::now();
            let reply = http_get(&client(), addr, route, &[]).await;
            let took = started.elapsed();
            assert_503_with_retry_after(&reply, route);
            assert!(
                took < DECISION_TIMEOUT + Duration::from_millis(500),
                "{route}: {took:?}"
            );
            if started.duration_since(cut) > settled {
                past_the_bound += 1;
                if took > FAST {
                    slow.push((started.duration_since(cut), route, took));
                }
            }
        }
    }
    assert!(past_the_bound >= 10, "{past_the_bound} requests");
    assert!(slow.is_empty(), "waited past the bound: {slow:?}");
    // A request after a quiet spell longer than the bound still finds the outage.
    tokio::time::sleep(DEFAULT_TRANSIENT_RETRY * 2).await;
    for route in ALL_ROUTES {
        let started = Instant::now();
        let reply = http_get(&client(), addr, route, &[]).await;
        assert_503_with_retry_after(&reply, route);
        assert!(
            started.elapsed() < FAST,
            "{route} after a quiet spell: {:?}",
            started.elapsed()
        );
    }

    proxy.pass();
    support::eventually("served again", async || {
        each_route(addr).await.iter().all(|r| r.status == 200)
    })
    .await;
}

/// Redis restarting (its port refusing for 200 ms, well within the 1 s retry bound, after its
/// connections were reset): every step waits for it and is served, on every route, within
/// the layers' 400 ms timed from the moment of the cut: a short restart costs latency, not
/// errors.
#[tokio::test]
async fn a_restart_within_the_retry_bound_costs_latency_not_errors() {
    let (proxy, _coordination, _concurrent, addr) =
        served_through_a_proxy("restart", FailurePolicy::default()).await;

    proxy.refuse();
    proxy.cut();
    let cut = Instant::now();
    support::eventually("the proxy resets the connections", async || {
        proxy.connections_open() == 0
    })
    .await;
    // A request sent on a connection already reset cannot tell that it was not sent, and is
    // answered as unavailable (503): one, before the backend knows.
    let first = http_get(&client(), addr, "/rate", &[]).await;
    assert!(matches!(first.status.as_u16(), 200 | 503), "{first:?}");
    let requests: Vec<_> = ALL_ROUTES
        .iter()
        .cycle()
        .take(6)
        .map(|&route| {
            tokio::spawn(async move {
                let sent = cut.elapsed();
                let reply = http_get(&client(), addr, route, &[]).await;
                (route, reply, sent, cut.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200).saturating_sub(cut.elapsed())).await;
    proxy.pass();
    let passed = cut.elapsed();
    for request in requests {
        let (route, reply, sent, answered) = request.await.expect("the request task");
        let what = format!(
            "{route} during a short restart (sent {sent:?} after the cut, answered {answered:?}, \
             the port open again at {passed:?}): {reply:?}"
        );
        // Sent while the port refused: the restart's window was lived through.
        assert!(sent < passed, "{what}");
        // A 200 is an answer within the layer's decision timeout (past it: 503).
        assert_eq!(reply.status, 200, "{what}");
    }
}

/// An answer that waited for nothing: well under the decision timeout, with room for a
/// busy machine.
const FAST: Duration = Duration::from_millis(250);

/// Every route answers 503 with Retry-After under fail-open: a refusal is never a pass.
async fn refusals_are_503(addr: SocketAddr, what: &str) {
    for _ in 0..3 {
        for (route, reply) in ALL_ROUTES.iter().zip(each_route(addr).await) {
            assert_503_with_retry_after(&reply, &format!("{what} on {route}"));
        }
    }
}

/// An ACL user without scripting, nor `INCR` (which the fixed window's steps of one permit
/// use instead of a script): every route is refused, and answers 503 under fail-open.
#[tokio::test]
async fn an_acl_user_without_scripting_gets_503_under_fail_open() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let url = server.acl_user(&["-@scripting", "-incr"]);
    let coordination = through(url, "acl").await;
    let err = FixedWindow::new(&coordination, "probe", 1, Duration::from_secs(1))
        .expect("valid")
        .try_acquire(b"k", 1)
        .await
        .expect_err("EVALSHA is denied");
    assert_eq!(err.kind(), ErrorKind::Permission, "{err:?}");
    assert!(err.is_refused());
    let (router, _) = app(&coordination, FailurePolicy::FailOpen);
    refusals_are_503(serve(router).await, "NOPERM").await;
}

/// Timed from the moment the app's connections are killed: the reconnect that meets the new
/// password is every waiting step's answer at once, and the next ones', until a reconnect
/// succeeds. Only a request whose command was already on the killed connection may pass.
#[tokio::test]
async fn a_password_rotated_under_a_running_app_gets_503_under_fail_open() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let () = server.cmd(&["ACL", "SETUSER", "app", "on", ">old", "~*", "&*", "+@all"]);
    let url = format!("redis://app:old@127.0.0.1:{}", server.port());
    let coordination = through(url, "rotated").await;
    let (router, _) = app(&coordination, FailurePolicy::FailOpen);
    let addr = serve(router).await;
    assert!(each_route(addr).await.iter().all(|r| r.status == 200));

    // Rotate, and drop the app's connections so that it must authenticate again.
    let () = server.cmd(&["ACL", "SETUSER", "app", "resetpass", ">new"]);
    let killed: i64 = server.cmd(&["CLIENT", "KILL", "USER", "app"]);
    assert!(killed >= 1, "the app held a connection");
    let kill = Instant::now();
    // A burst at once, every request waiting on the same reconnect: each is answered within
    // the decision timeout of the kill. A step sent on the killed connection before it was
    // found broken cannot tell it from one lost in flight, and may pass.
    let burst: Vec<_> = ALL_ROUTES
        .iter()
        .cycle()
        .take(9)
        .map(|&route| {
            tokio::spawn(async move { (route, http_get(&client(), addr, route, &[]).await) })
        })
        .collect();
    for request in burst {
        let (route, reply) = request.await.expect("the request task");
        assert!(
            kill.elapsed() < DECISION_TIMEOUT,
            "{route} answered {:?} after the kill: {reply:?}",
            kill.elapsed()
        );
        if reply.status != 200 {
            assert_503_with_retry_after(&reply, route);
        }
    }
    // Then the refusal is every request's answer, at once, on every route.
    for round in 0..4 {
        for route in ALL_ROUTES {
            let started = Instant::now();
            let reply = http_get(&client(), addr, route, &[]).await;
            let took = started.elapsed();
            assert!(
                took < FAST,
                "request {round} on {route} waited {took:?}: {reply:?}"
            );
            assert_503_with_retry_after(&reply, &format!("request {round} on {route}"));
        }
    }
    let err = coordination.server_time().await.expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::Authentication, "{err:?}");
    assert!(err.is_refused());

    // The refusal lasts until a reconnect succeeds: the old password back, the app is served.
    let () = server.cmd(&["ACL", "SETUSER", "app", ">old"]);
    support::eventually("served again", async || {
        each_route(addr).await.iter().all(|r| r.status == 200)
    })
    .await;
}

/// A memory backend filled by a flood of distinct client keys still serves a new client
/// within its limit (rate-limit state is evicted, counted) and never evicts what is held: a
/// lease taken before the flood is still held after it. Once what is held fills the store, a
/// new lease is a 503 with `Retry-After`, when space frees.
#[tokio::test]
async fn a_full_memory_backend_serves_new_clients_and_never_evicts_a_lease() {
    let backend = MemoryBackend::builder().max_keys(8).build().expect("valid");
    let coordination: Coordination = backend.clone().into();
    let held = FencedLock::named(&coordination, "job")
        .try_acquire(Duration::from_secs(60))
        .await
        .expect("acquire")
        .acquired()
        .expect("free");
    let rate = RedisRateLimitLayer::fixed_window(&coordination, "rate", 2, Duration::from_secs(60))
        .expect("valid")
        .key(KeyExtractor::header_in_clear("x-client").expect("a header name"));
    let router = Router::new()
        .route("/rate", get(|| async { "ok" }).layer(rate))
        .route(
            LEASE,
            get(|lease: Lease<EachRequest>| async move { lease.fencing_token().to_string() }),
        )
        .with_state(coordination.clone());
    let addr = serve(router).await;
    let client = client();

    // A flood of new clients: each is served, the oldest windows evicted for them.
    for flooder in 0..50 {
        let id = format!("flood-{flooder}");
        let reply = http_get(&client, addr, "/rate", &[("x-client", &id)]).await;
        assert_eq!(reply.status, 200, "{id}: {reply:?}");
    }
    assert!(
        backend.evictions() >= 40,
        "{} evictions",
        backend.evictions()
    );
    // A new client within its limit, then over it.
    let statuses: Vec<u16> = {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let reply = http_get(&client, addr, "/rate", &[("x-client", "new")]).await;
            statuses.push(reply.status.as_u16());
        }
        statuses
    };
    assert_eq!(statuses, [200, 200, 429]);
    // The lease held through the flood is still held.
    assert!(held.verify_still_held().await.expect("verify"));
    let contender = FencedLock::named(&coordination, "job")
        .try_acquire(Duration::from_secs(60))
        .await
        .expect("try");
    assert!(!contender.is_acquired(), "the lease was evicted");

    // Each lease leaves a fencing counter, which is held: they fill the store at last.
    let mut refused = None;
    for _ in 0..8 {
        let reply = http_get(&client, addr, LEASE, &[]).await;
        if reply.status != 200 {
            refused = Some(reply);
            break;
        }
    }
    let refused = refused.expect("a store full of what is held refuses a new lease");
    assert_503_with_retry_after(&refused, "full of held keys");
}

/// Held keys past three quarters of a memory backend's bound (800 lock names taken and
/// released on a store of 1,000 keys: their fencing counters stay while their tokens can
/// matter) leave every client's window in place: three interleaved clients of a limit of
/// one per window are each admitted exactly once.
#[tokio::test]
async fn released_lock_names_past_three_quarters_of_the_bound_leave_every_limit_in_force() {
    let backend = MemoryBackend::builder()
        .max_keys(1_000)
        .build()
        .expect("valid");
    let coordination: Coordination = backend.clone().into();
    for id in 0..800 {
        let mut lease = FencedLock::named(&coordination, format!("report:{id}"))
            .try_acquire(Duration::from_secs(60))
            .await
            .expect("acquire")
            .acquired()
            .expect("free");
        lease.release().await.expect("release");
    }
    assert!(backend.len() >= 800, "{} keys", backend.len());
    let rate =
        RedisRateLimitLayer::fixed_window(&coordination, "rate", 1, Duration::from_secs(600))
            .expect("valid")
            .key(KeyExtractor::header_in_clear("x-client").expect("a header name"));
    let addr = serve(Router::new().route("/rate", get(|| async { "ok" }).layer(rate))).await;
    let client = client();
    let mut admitted = [0; 3];
    for _ in 0..5 {
        for (i, count) in admitted.iter_mut().enumerate() {
            let id = format!("client-{i}");
            let reply = http_get(&client, addr, "/rate", &[("x-client", &id)]).await;
            match reply.status.as_u16() {
                200 => *count += 1,
                429 => {}
                other => panic!("{id}: {other} {reply:?}"),
            }
        }
    }
    assert_eq!(admitted, [1, 1, 1]);
    assert_eq!(backend.evictions(), 0);
}

#[tokio::test]
async fn a_huge_client_key_is_stored_hashed() {
    let server = shared(ServerKind::Redis7);
    let prefix = unique_prefix("huge-key");
    let coordination: Coordination = RedisBackend::standalone(server.url())
        .key_prefix(&prefix)
        .connect()
        .await
        .expect("connect")
        .into();
    let rate = RedisRateLimitLayer::fixed_window(&coordination, "rate", 5, Duration::from_secs(60))
        .expect("valid")
        .key(KeyExtractor::header("x-api-key").expect("a header name"));
    let addr = serve(
        Router::new()
            .route("/rate", get(|| async { "ok" }))
            .layer(rate),
    )
    .await;
    let client = client();
    let huge = "k".repeat(64 * 1024);
    for _ in 0..2 {
        let reply = http_get(&client, addr, "/rate", &[("x-api-key", &huge)]).await;
        assert_eq!(reply.status, 200);
    }
    let reply = http_get(&client, addr, "/rate", &[("x-api-key", "short")]).await;
    assert_eq!(reply.status, 200);
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut server.connection())
        .expect("KEYS");
    assert_eq!(keys.len(), 2, "one key per client");
    for key in &keys {
        assert!(key.len() < prefix.len() + 100, "{} bytes", key.len());
    }
    assert!(
        keys.iter()
            .any(|key| key.windows(7).any(|w| w == b"sha256:"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_under_load_costs_503s_for_a_while_and_nothing_hangs() {
    let setup = std::sync::Arc::new(support::SentinelSetup::start(ServerKind::Redis7));
    let backend = RedisBackend::sentinel(setup.sentinel_urls(), setup.service_name())
        .key_prefix(unique_prefix("sentinel-load"))
        .connect()
        .await
        .expect("connect through sentinel");
    let coordination: Coordination = backend.into();
    let (router, _) = app(&coordination, FailurePolicy::default());
    let addr = serve(router).await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let mut load = Vec::new();
    for worker in 0..4 {
        let stop = stop.clone();
        load.push(tokio::spawn(async move {
            let client = client();
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let sent = Instant::now();
                let reply = http_get(&client, addr, ALL_ROUTES[worker % 3], &[]).await;
                let retry_after = reply.header("retry-after").map(str::to_owned);
                seen.push((sent - started, sent.elapsed(), reply.status, retry_after));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The primary dies; the sentinels promote the replica.
    let killed_at = started.elapsed();
    setup.kill_primary().await;
    // Requests succeed again once the new primary is known: a second of them, in a row.
    let recovered = tokio::time::timeout(Duration::from_secs(15), async {
        let mut ok_since: Option<Instant> = None;
        loop {
            let all_ok = each_route(addr).await.iter().all(|r| r.status == 200);
            match (all_ok, ok_since) {
                (true, Some(since)) if since.elapsed() > Duration::from_secs(1) => return,
                (true, None) => ok_since = Some(Instant::now()),
                (false, _) => ok_since = None,
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut seen = Vec::new();
    for worker in load {
        seen.extend(worker.await.expect("a load worker"));
    }
    assert!(
        recovered.is_ok(),
        "requests never succeeded again after the failover"
    );

    let failed: Vec<_> = seen
        .iter()
        .filter(|(.., status, _)| *status != 200)
        .collect();
    for (at, took, status, retry_after) in &seen {
        assert!(
            *took < DECISION_TIMEOUT + Duration::from_millis(300),
            "a request sent at {at:?} took {took:?}"
        );
        if *status != 200 {
            assert_eq!(*status, 503, "sent at {at:?}");
            assert!(retry_after.is_some(), "a 503 without Retry-After at {at:?}");
        }
    }
    let window = match (failed.first(), failed.last()) {
        (Some(first), Some(last)) => last.0 + last.1 - first.0,
        _ => Duration::ZERO,
    };
    eprintln!(
        "sentinel failover under load: primary killed at {killed_at:?}; {} of {} requests failed \
         (all 503 with Retry-After), failures spanning {window:?}",
        failed.len(),
        seen.len()
    );
}

/// A Sentinel primary killed under load: requests are served again within 0.5 s of the
/// sentinels naming the new primary, which the handle asks for in the background from the
/// moment the old one's connection broke; a connection made is a probe, however long the
/// breaker's pause has still to run (ten seconds here, so that only that probe can serve).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_sentinel_primary_is_served_within_half_a_second_of_being_named() {
    let setup = std::sync::Arc::new(support::SentinelSetup::start(ServerKind::Redis7));
    let coordination = Coordination::from(
        RedisBackend::sentinel(setup.sentinel_urls(), setup.service_name())
            .key_prefix(unique_prefix("sentinel-named"))
            .connect()
            .await
            .expect("connect through sentinel"),
    )
    .circuit_breaker(Some(
        CircuitBreaker::new().open_for(Duration::from_secs(10)),
    ));
    let rate =
        RedisRateLimitLayer::fixed_window(&coordination, "rate", 1000, Duration::from_secs(60))
            .expect("valid");
    let addr = serve(Router::new().route("/rate", get(|| async { "ok" }).layer(rate))).await;
    assert_eq!(http_get(&client(), addr, "/rate", &[]).await.status, 200);

    // Load through the whole failover, so that the breaker has opened when the sentinels
    // switch.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let client = client();
            while !stop.load(Ordering::Relaxed) {
                let reply = http_get(&client, addr, "/rate", &[]).await;
                if reply.status != 200 {
                    assert_503_with_retry_after(&reply, "/rate during the failover");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    setup.kill_primary().await;
    let named_at = Instant::now();
    let took = served_again(addr, "/rate", named_at).await;
    stop.store(true, Ordering::Relaxed);
    load.await.expect("the load");
    assert!(
        took < Duration::from_millis(500),
        "served again {took:?} after the sentinels named the new primary"
    );
}

#[tokio::test]
async fn redis_out_of_memory_gets_503_under_fail_open_on_every_fixed_window_path() {
    // On a plain server, plain commands for one permit and Lua for more; the INCREX pipeline
    // on a server with the test module.
    let module = support::increx_module::module_path();
    let module = module.to_str().expect("utf-8 module path");
    for (what, args, permits) in [
        ("plain commands", vec![], 1),
        ("Lua", vec![], 2),
        ("INCREX", vec!["--loadmodule", module], 1),
    ] {
        let server = Server::start(ServerKind::Redis7, &args);
        let coordination = through(server.url(), "oom").await;
        let (router, _) = app(&coordination, FailurePolicy::FailOpen);
        let addr = serve(router).await;
        assert!(
            each_route(addr).await.iter().all(|r| r.status == 200),
            "{what}"
        );
        server.out_of_memory(true);
        let err = FixedWindow::new(&coordination, "rate", 1000, Duration::from_secs(60))
            .expect("valid")
            .try_acquire(b"global", permits)
            .await
            .expect_err("OOM");
        assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{what}: {err:?}");
        assert!(
            err.is_refused() && !err.is_outcome_uncertain(),
            "{what}: {err:?}"
        );
        refusals_are_503(addr, &format!("OOM on the {what} path")).await;
    }
}

#[tokio::test]
async fn a_user_denied_info_still_connects_without_the_version_check() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let url = server.acl_user(&["-info"]);
    let backend = RedisBackend::standalone(url)
        .key_prefix(unique_prefix("no-info"))
        .connect()
        .await
        .expect("INFO denied is no reason to refuse the connection");
    // The version could not be read; steps work all the same (sent as Redis 6.2 needs them).
    assert_eq!(
        backend.server_version().map(|server| server.version()),
        Some((0, 0, 0))
    );
    let coordination: Coordination = backend.into();
    let decision = FixedWindow::new(&coordination, "rate", 1, Duration::from_secs(60))
        .expect("valid")
        .try_acquire(b"k", 1)
        .await
        .expect("a decision");
    assert!(decision.is_granted());
}

/// Redis 6.2 with verbatim script replication (`lua-replicate-commands no`), where a script
/// that reads the clock and then writes must ask for effects replication first: every kind
/// of step works, whether the server's version is known or `INFO` is denied (an unknown
/// version is taken to need the call, which every later server accepts as a no-op).
#[tokio::test]
async fn redis_6_2_with_verbatim_script_replication_runs_every_step_with_or_without_info() {
    let server = Server::start(ServerKind::Redis6, &["--lua-replicate-commands", "no"]);
    let denied_info = server.acl_user(&["-info"]);
    for (what, url) in [("INFO allowed", server.url()), ("INFO denied", denied_info)] {
        let coordination = through(url, "verbatim").await;
        let window =
            FixedWindow::new(&coordination, "rate", 5, Duration::from_secs(60)).expect("valid");
        // One permit (plain commands), then two (the script).
        for permits in [1, 2] {
            assert!(
                window
                    .try_acquire(b"k", permits)
                    .await
                    .expect(what)
                    .is_granted(),
                "{what}: {permits}"
            );
        }
        // The hot-key tier's reservation, and its return (which Redis 6.2, without
        // PEXPIRETIME, never sends: the permits lapse).
        let hot = FixedWindow::new(&coordination, "hot", 100, Duration::from_secs(60))
            .expect("valid")
            .with_hot_keys(leasehold::coordination::rate_limit::HotKeys::new(5))
            .expect("valid tier");
        assert!(
            hot.try_acquire(b"k", 1).await.expect(what).is_granted(),
            "{what}"
        );
        assert_eq!(hot.return_reserved().await.expect(what), 0, "{what}");
        let lock = FencedLock::named(&coordination, "verbatim");
        let mut lease = lock
            .try_acquire(Duration::from_secs(10))
            .await
            .expect(what)
            .acquired()
            .expect("free");
        assert!(
            lease.renew(Duration::from_secs(10)).await.expect(what),
            "{what}"
        );
        assert!(lease.verify_still_held().await.expect(what), "{what}");
        lease.release().await.expect(what);
        let semaphore = Semaphore::new(&coordination, "verbatim", 1).expect("valid");
        let mut permit = semaphore
            .try_acquire(Duration::from_secs(10))
            .await
            .expect(what)
            .acquired()
            .expect("free");
        assert_eq!(semaphore.held().await.expect(what), 1, "{what}");
        permit.release().await.expect(what);
    }
}

/// Redis down at start-up: the handle is made, both layers follow their failure policy
/// (503 failing closed, served failing open), and the first request after Redis comes up
/// connects, with nothing restarted.
#[tokio::test]
async fn a_service_boots_while_redis_is_down_and_connects_once_it_is_up() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    proxy.refuse();
    let coordination = through(proxy.url(), "boot-down").await;
    let (closed, _) = app(&coordination, FailurePolicy::default());
    let (open, _) = app(&coordination, FailurePolicy::FailOpen);
    let (closed, open) = (serve(closed).await, serve(open).await);
    for reply in each_route(closed).await {
        assert_503_with_retry_after(&reply, "failing closed while Redis is down");
    }
    for (route, reply) in ALL_ROUTES.iter().zip(each_route(open).await) {
        if EXTRACTORS.contains(route) {
            // A lease never fails open.
            assert_503_with_retry_after(&reply, "a lease while Redis is down");
            continue;
        }
        assert_eq!(
            reply.status, 200,
            "failing open while Redis is down: {reply:?}"
        );
        assert!(
            reply.header("ratelimit").is_none(),
            "no decision, no fields"
        );
    }

    proxy.pass();
    support::eventually("the layers reach Redis once it is up", async || {
        let replies = each_route(closed).await;
        replies.iter().all(|reply| reply.status == 200) && replies[0].header("ratelimit").is_some()
    })
    .await;
}

/// A server that takes connections and never answers: every step waits for one shared,
/// bounded attempt (two connection timeouts and three response timeouts at most), not for
/// one attempt each, however many steps ask at once.
#[tokio::test]
async fn concurrent_steps_share_one_bounded_connection_attempt() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    proxy.blackhole();
    let backend = RedisBackend::standalone(proxy.url())
        .key_prefix(unique_prefix("one-attempt"))
        .connection_timeout(Duration::from_millis(200))
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("an unanswering server is no reason to refuse the handle");
    // Past the half second for which the start-up attempt's failure is the answer, so that
    // the steps below start a new attempt together.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let started = Instant::now();
    let steps: Vec<_> = (0..16)
        .map(|_| {
            let backend = backend.clone();
            tokio::spawn(async move { backend.server_time().await })
        })
        .collect();
    for step in steps {
        let err = step.await.expect("step").expect_err("no answer");
        assert!(err.is_unavailable() && !err.is_outcome_uncertain(), "{err}");
    }
    // 16 attempts one after another would take 16 times as long.
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "{:?}",
        started.elapsed()
    );
    proxy.pass();
}

/// No answer at all, failing open: the rate limit lets the request through and the
/// concurrency limit grants a worker-local permit, each within the decision timeout; the
/// lease, which never fails open, answers 503 as fast.
#[tokio::test]
async fn a_blackhole_under_fail_open_passes_within_the_decision_timeout() {
    let (proxy, _coordination, _concurrent, addr) =
        served_through_a_proxy("blackhole-open", FailurePolicy::FailOpen).await;

    proxy.blackhole();
    for route in ALL_ROUTES {
        let started = Instant::now();
        let reply = http_get(&client(), addr, route, &[]).await;
        let took = started.elapsed();
        assert!(
            took < DECISION_TIMEOUT + Duration::from_millis(300),
            "{route} answered after {took:?}"
        );
        if EXTRACTORS.contains(&route) {
            assert_503_with_retry_after(&reply, route);
        } else {
            assert_eq!(reply.status, 200, "{route} fails open: {reply:?}");
            assert!(
                reply.header("ratelimit").is_none(),
                "no decision, no fields"
            );
        }
    }
    // The local permit went back with its response: another request gets one.
    assert_eq!(
        http_get(&client(), addr, "/concurrent", &[]).await.status,
        200
    );
    proxy.pass();
}

/// Redis healthy but slower than the layers' timeout (its replies take 600 ms, the layers
/// wait 400 ms, its own response timeout is 1 s): the layers answer 503 at their timeout. No
/// step still awaited got an answer meanwhile (the late replies come to dropped requests),
/// so the timeout counts as silence and a breaker that opens at one failure opens: the next
/// requests are answered 503 at once, and once the backend is fast again a probe (within the
/// open time, 2 s and a fifth) closes it and everything is served.
#[tokio::test]
async fn a_backend_slower_than_the_layer_timeout_is_a_503_at_the_timeout_then_at_once_until_a_probe()
 {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = through(proxy.url(), "slow").await;
    let breaker = CircuitBreaker::new().failure_threshold(1);
    let rate =
        RedisRateLimitLayer::fixed_window(&coordination, "rate", 1000, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .timeout(DECISION_TIMEOUT)
            .circuit_breaker(breaker);
    let concurrent =
        RedisConcurrencyLimitLayer::new(&coordination, "concurrent", Capacity::global(100))
            .expect("valid")
            .timeout(DECISION_TIMEOUT)
            .circuit_breaker(breaker);
    let router = Router::new()
        .route("/rate", get(|| async { "ok" }).layer(rate.clone()))
        .route(
            "/concurrent",
            get(|| async { "ok" }).layer(concurrent.clone()),
        );
    let addr = serve(router).await;
    for route in ROUTES {
        assert_eq!(http_get(&client(), addr, route, &[]).await.status, 200);
    }
    // The warm-up permit's release answered (its answer, if slowed, would arrive during a
    // timeout below and say the server is not silent).
    support::eventually("the warm-up permit released", async || {
        concurrent.semaphore().held(b"").await.ok() == Some((None, Some(0)))
    })
    .await;

    proxy.latency(Direction::ToServer, Duration::from_millis(300));
    proxy.latency(Direction::ToClient, Duration::from_millis(300));
    for route in ROUTES {
        let started = Instant::now();
        let reply = http_get(&client(), addr, route, &[]).await;
        let took = started.elapsed();
        assert_503_with_retry_after(&reply, route);
        assert!(took >= DECISION_TIMEOUT, "{route}: {took:?}");
        assert!(
            took < DECISION_TIMEOUT + Duration::from_millis(300),
            "{route}: {took:?}"
        );
    }
    assert_eq!(rate.circuit_state(), Some(CircuitState::Open));
    assert_eq!(concurrent.circuit_state(), Some(CircuitState::Open));

    proxy.pass();
    let passed = Instant::now();
    for route in ROUTES {
        let started = Instant::now();
        let reply = http_get(&client(), addr, route, &[]).await;
        assert_503_with_retry_after(&reply, route);
        assert!(started.elapsed() < FAST, "{route}: at once while open");
    }
    for route in ROUTES {
        support::eventually("a probe closes the circuit", async || {
            http_get(&client(), addr, route, &[]).await.status == 200
        })
        .await;
    }
    assert!(
        passed.elapsed() < Duration::from_secs(3),
        "served within the open time: {:?}",
        passed.elapsed()
    );
    assert_eq!(rate.circuit_state(), Some(CircuitState::Closed));
    assert_eq!(concurrent.circuit_state(), Some(CircuitState::Closed));
}

/// A lease of its own for each request, waited for up to 2 s as the layers above wait.
struct Patient;

impl<S: Sync> LeaseSpec<S> for Patient {
    async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(each_request().timeout(Duration::from_secs(2)))
    }
}

/// Makes `server` a replica of `primary` (it answers writes with `READONLY`), and waits until
/// it says so.
fn demote(server: &Server, primary: &Server) {
    let port = primary.port().to_string();
    let () = server.cmd(&["REPLICAOF", "127.0.0.1", &port]);
    support::wait_until(
        Duration::from_secs(10),
        "the server to be a replica",
        || match server.info_field("replication", "role").as_deref() {
            Some("slave") => Ok(()),
            other => Err(format!("role {other:?}")),
        },
    );
}

/// A failover reply (`READONLY`, from a primary demoted to a replica) is sent again while the
/// transient-retry bound lasts: a demotion shorter than the bound costs a step, and a request
/// behind a layer whose timeout covers it, latency, not an error; one that outlasts the bound
/// is a `Transient` error, certainly without effect, and 503 behind a layer (a pass failing
/// open).
#[tokio::test]
async fn a_failover_reply_is_sent_again_within_the_bound_then_answered() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let other = Server::start(ServerKind::Redis7, &[]);
    let coordination = through(server.url(), "failover-reply").await;
    let window =
        FixedWindow::new(&coordination, "rate", 1000, Duration::from_secs(60)).expect("valid");
    let patient =
        RedisRateLimitLayer::fixed_window(&coordination, "rate", 1000, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .timeout(Duration::from_secs(2));
    let open =
        RedisRateLimitLayer::fixed_window(&coordination, "rate", 1000, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .timeout(Duration::from_secs(2))
            .failure_policy(FailurePolicy::FailOpen);
    let addr = serve(
        Router::new()
            .route("/patient", get(|| async { "ok" }).layer(patient))
            .route("/open", get(|| async { "ok" }).layer(open))
            .route(
                LEASE,
                get(|lease: Lease<Patient>| async move { lease.fencing_token().to_string() }),
            )
            .with_state(coordination.clone()),
    )
    .await;
    assert!(
        window
            .try_acquire(b"global", 1)
            .await
            .expect("healthy")
            .is_granted()
    );

    // Demoted for 300 ms, well within the 1 s bound: the step waits, and is granted (one
    // permit as plain commands, two through the script, and over HTTP).
    for (route, permits) in [
        (None, 1),
        (None, 2),
        (Some("/patient"), 1),
        (Some(LEASE), 1),
    ] {
        demote(&server, &other);
        let promote = std::thread::spawn({
            let url = server.url();
            move || {
                std::thread::sleep(Duration::from_millis(300));
                let mut con = redis::Client::open(url)
                    .and_then(|client| client.get_connection())
                    .expect("admin connection");
                redis::cmd("REPLICAOF")
                    .arg("NO")
                    .arg("ONE")
                    .query::<()>(&mut con)
                    .expect("promoted");
            }
        });
        let started = Instant::now();
        match route {
            None => assert!(
                window
                    .try_acquire(b"global", permits)
                    .await
                    .expect("sent again until it was taken")
                    .is_granted()
            ),
            Some(route) => assert_eq!(
                http_get(&client(), addr, route, &[]).await.status,
                200,
                "{route}"
            ),
        }
        let took = started.elapsed();
        promote.join().expect("promoted");
        assert!(
            took >= Duration::from_millis(250),
            "{route:?} {permits} waited {took:?}"
        );
        assert!(
            took < Duration::from_secs(1),
            "{route:?} {permits} took {took:?}"
        );
    }

    // Demoted for good: past the bound, the error (and the layers' answers).
    demote(&server, &other);
    let started = Instant::now();
    let err = window
        .try_acquire(b"global", 1)
        .await
        .expect_err("still a replica");
    assert_eq!(err.kind(), ErrorKind::Transient, "{err:?}");
    assert!(
        err.is_unavailable() && !err.is_outcome_uncertain(),
        "{err:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "{:?}",
        started.elapsed()
    );
    assert_503_with_retry_after(&http_get(&client(), addr, "/patient", &[]).await, "closed");
    assert_503_with_retry_after(&http_get(&client(), addr, LEASE, &[]).await, LEASE);
    assert_eq!(http_get(&client(), addr, "/open", &[]).await.status, 200);
    let () = server.cmd(&["REPLICAOF", "NO", "ONE"]);
}

/// A flood that pushes every decision past the layer's timeout (Redis answers, but slower
/// than the layer waits), failing open: requests are admitted by the fallback in this
/// process, its quota and no more, never without limit; with a share, that share. The same
/// with a circuit breaker opened by a silent Redis, which answers every request at once.
#[tokio::test]
async fn a_flood_past_the_timeout_under_fail_open_admits_no_more_than_the_fallback() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = through(proxy.url(), "flood-open").await;
    let layer = |name: &str| {
        RedisRateLimitLayer::fixed_window(&coordination, name, 4, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .timeout(Duration::from_millis(200))
            .failure_policy(FailurePolicy::FailOpen)
    };
    let router = Router::new()
        .route("/whole", get(|| async { "ok" }).layer(layer("whole")))
        .route(
            "/half",
            get(|| async { "ok" }).layer(layer("half").fail_open_share(0.5)),
        )
        .route(
            "/breaker",
            get(|| async { "ok" }).layer(
                layer("breaker").circuit_breaker(CircuitBreaker::new().failure_threshold(1)),
            ),
        );
    let addr = serve(router).await;
    assert_eq!(http_get(&client(), addr, "/whole", &[]).await.status, 200);

    proxy.latency(Direction::ToClient, Duration::from_millis(500));
    for (route, quota) in [("/whole", 4), ("/half", 2)] {
        let flood: Vec<_> = (0..12)
            .map(|_| tokio::spawn(async move { http_get(&client(), addr, route, &[]).await }))
            .collect();
        let mut admitted = 0;
        for request in flood {
            let reply = request.await.expect("the request task");
            match reply.status.as_u16() {
                200 => admitted += 1,
                429 => assert!(reply.retry_after_secs() >= 1, "{route}: {reply:?}"),
                other => panic!("{route}: {other} {reply:?}"),
            }
        }
        assert_eq!(admitted, quota, "{route}: the fallback's quota, no more");
    }

    // Silent now: the breaker opens on the first failure, and answers from the fallback at
    // once.
    proxy.latency(Direction::ToClient, Duration::ZERO);
    proxy.blackhole();
    let mut admitted = 0;
    for _ in 0..10 {
        let reply = http_get(&client(), addr, "/breaker", &[]).await;
        if reply.status == 200 {
            admitted += 1;
        } else {
            assert_eq!(reply.status, 429, "{reply:?}");
        }
    }
    assert_eq!(
        admitted, 4,
        "the fallback's quota through an open circuit too"
    );
    proxy.pass();
}

/// One step of each kind, prepared (its handles made) before the faults begin.
enum ClusterStep {
    FixedWindow(FixedWindow),
    CountDown(leasehold::coordination::latch::LatchGeneration),
    Lock(FencedLock),
    Permit(Semaphore),
    WriteLease(leasehold::coordination::rw_lease::ReadWriteLock),
}

impl ClusterStep {
    /// Runs the step once; what it takes is released before it returns.
    async fn run(&self) -> leasehold::Result<()> {
        const LEASE: Duration = Duration::from_secs(60);
        match self {
            ClusterStep::FixedWindow(limiter) => limiter.try_acquire(b"k", 1).await.map(drop),
            ClusterStep::CountDown(generation) => generation.count_down().await.map(drop),
            ClusterStep::Lock(lock) => {
                let mut lease = lock.try_acquire(LEASE).await?.acquired().expect("free");
                lease.release().await.map(drop)
            }
            ClusterStep::Permit(semaphore) => {
                let permit = semaphore.try_acquire(LEASE).await?;
                permit.acquired().expect("free").release().await.map(drop)
            }
            ClusterStep::WriteLease(lock) => {
                let mut lease = lock.try_write(LEASE).await?.acquired().expect("free");
                lease.release().await.map(drop)
            }
        }
    }
}

/// On a Cluster, a step whose connections break after its script ran and before its reply
/// came is applied once, for every kind of step: nothing below the crate sends it again
/// (the client library would, after reconnecting), and a fixed window's error says it may
/// have applied; a count-down (which carries its id) and an acquisition (which finds its
/// own token) the crate sends again: the count-down counts once, the acquisition is granted.
/// Measured from the moment the replies stop: the script runs, its reply is held, every
/// connection is cut.
#[tokio::test]
async fn a_cluster_step_cut_after_its_script_ran_is_applied_once() {
    let cluster = support::Cluster::start(ServerKind::Redis7);
    let proxies = cluster.behind_proxies();
    let coordination: Coordination = RedisBackend::cluster(proxies.iter().map(Proxy::url))
        .key_prefix(unique_prefix("cluster-once"))
        .response_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect")
        .into();
    // The scripts each node has run.
    let scripts = || -> Vec<u64> {
        cluster
            .nodes()
            .iter()
            .map(|node| {
                support::target::command_calls(node, "evalsha")
                    + support::target::command_calls(node, "eval")
            })
            .collect()
    };
    let latch = leasehold::coordination::latch::CountdownLatch::named(&coordination, "latch");
    let steps = [
        ClusterStep::FixedWindow(
            FixedWindow::new(&coordination, "rate", 1000, Duration::from_secs(60)).expect("valid"),
        ),
        ClusterStep::CountDown(latch.reset(1000, None).await.expect("reset")),
        ClusterStep::Lock(FencedLock::named(&coordination, "lock")),
        ClusterStep::Permit(Semaphore::new(&coordination, "permits", 5).expect("valid")),
        ClusterStep::WriteLease(leasehold::coordination::rw_lease::ReadWriteLock::named(
            &coordination,
            "rw",
        )),
    ];
    for (i, step) in steps.into_iter().enumerate() {
        // Once in health: the scripts are loaded, the connections made. After the last
        // step's cut, the first request on each broken connection fails (the client cannot
        // tell whether it was written), as on a standalone server.
        let warm = scripts();
        support::eventually("a step passes", async || step.run().await.is_ok()).await;
        // The node that runs the step: the one whose scripts ran.
        let before = scripts();
        let owner = (0..before.len())
            .find(|&n| before[n] > warm[n])
            .expect("a node ran the step");
        let proxy = &proxies[owner];
        let count_before = match &step {
            ClusterStep::CountDown(generation) => generation.count().await.expect("count"),
            _ => None,
        };
        let step = std::sync::Arc::new(step);
        proxy.stall_direction(Direction::ToClient);
        let task = tokio::spawn({
            let step = step.clone();
            async move { step.run().await }
        });
        support::eventually("the script ran", async || scripts()[owner] > before[owner]).await;
        // The owner's connection breaks; the other nodes' stay. Once the broken one is
        // closed (its held reply with it), replies flow again: the client's reconnection
        // works, and a step sent again would run.
        let accepted = proxy.connections_accepted();
        proxy.cut();
        support::eventually("the broken connection closed", async || {
            proxy.connections_open() <= proxy.connections_accepted() - accepted
        })
        .await;
        proxy.pass();
        let outcome = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("bounded")
            .expect("the step's task");
        if let ClusterStep::CountDown(generation) = &*step {
            // The crate sends an uncertain count-down again itself: it carries its id, and
            // counts once however often it lands.
            outcome.expect("counted");
            let count = generation.count().await.expect("count");
            assert_eq!(count, count_before.map(|count| count - 1), "counted once");
            continue;
        }
        let after = scripts();
        let ran = after.iter().sum::<u64>() - before.iter().sum::<u64>();
        if matches!(*step, ClusterStep::FixedWindow(_)) {
            assert_eq!(ran, 1, "step {i}: applied once ({before:?} -> {after:?})");
            let err = outcome.expect_err("no reply came");
            assert!(err.is_outcome_uncertain(), "step {i}: {err}");
            continue;
        }
        // The crate sends an uncertain acquisition again itself, with its token: the second
        // delivery finds it and is a grant. The acquisition, its one resend and the release:
        // three scripts, and nothing left held.
        outcome.unwrap_or_else(|err| panic!("step {i}: granted on the resend: {err}"));
        assert_eq!(
            ran, 3,
            "step {i}: sent again once ({before:?} -> {after:?})"
        );
        support::eventually("a step passes", async || step.run().await.is_ok()).await;
    }
}

/// An outage under load is told once, not once per request. For 8 s of refused connections,
/// every route (both layers failing closed, each extractor) answering 503 to request after
/// request, the crate logs at `WARN` or above one event per layer and one for the
/// extractors when the outage starts (a summary would follow every 10 s), and one `INFO`
/// each when the backend decides again; each request's own failure goes to `DEBUG`.
#[tokio::test]
async fn an_outage_under_load_is_told_once_not_once_per_request() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = through(proxy.url(), "told-once").await;
    let (router, _) = app(&coordination, FailurePolicy::default());
    let logs = support::logs::capture();
    let addr = serve(router).await;
    let client = client();
    for route in ALL_ROUTES {
        assert_eq!(
            http_get(&client, addr, route, &[]).await.status,
            200,
            "{route}"
        );
    }

    proxy.refuse();
    proxy.cut();
    let started = Instant::now();
    let mut refused = 0;
    while started.elapsed() < Duration::from_secs(8) {
        for route in ALL_ROUTES {
            let reply = http_get(&client, addr, route, &[]).await;
            assert_eq!(reply.status, 503, "{route}: {reply:?}");
            refused += 1;
        }
    }
    proxy.pass();
    for route in ALL_ROUTES {
        support::eventually("served again", async || {
            http_get(&client, addr, route, &[]).await.status == 200
        })
        .await;
    }

    assert!(refused >= 600, "under load: {refused} requests");
    // The shared server keeps nothing across a restart: told once, at the lease's first
    // acquisition, before the outage.
    assert!(logs.count("WARN", "keeps nothing across a restart") <= 1);
    let told: Vec<String> = [logs.lines("WARN", ""), logs.lines("ERROR", "")]
        .concat()
        .into_iter()
        .filter(|line| !line.contains("keeps nothing across a restart"))
        .collect();
    // While an outage lasts, each limit adds a summary every 10 s: here, one at most, for an
    // outage of 8 s and a recovery that may take a breaker's pause and a reconnection's
    // backoff more.
    let (summaries, first): (Vec<&String>, Vec<&String>) =
        told.iter().partition(|line| line.contains("failing for"));
    assert!(
        first.len() <= 3 && summaries.len() <= 3,
        "{} events at WARN or above for {refused} refused requests: {told:#?}",
        told.len()
    );
    assert_eq!(logs.count("WARN", "rate limit backend unavailable"), 1);
    assert_eq!(
        logs.count("WARN", "concurrency limit backend unavailable"),
        1
    );
    assert_eq!(logs.count("INFO", "rate limit backend decides again"), 1);
    assert_eq!(
        logs.count("INFO", "concurrency limit backend decides again"),
        1
    );
    assert!(logs.count("DEBUG", "gave no decision") >= refused / 2);
}

/// The shorter of the layer's decision timeout and the backend's response timeout bounds a
/// decision on a stalled server: a layer that waits longer than the backend waits for a
/// reply answers once the response timeout has passed (the backend leaves its timer to the
/// caller only when the caller's is no longer), and one that waits less answers at its own.
/// Timed from the stall.
#[tokio::test]
async fn a_stalled_decision_ends_at_the_shorter_of_the_two_timeouts() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination: Coordination = RedisBackend::standalone(proxy.url())
        .key_prefix(unique_prefix("shorter"))
        .response_timeout(Duration::from_millis(600))
        .connect()
        .await
        .expect("connect")
        .into();
    let route = |name: &str, timeout: Duration| {
        let layer =
            RedisRateLimitLayer::fixed_window(&coordination, name, 100, Duration::from_secs(60))
                .expect("valid")
                .key(KeyExtractor::global())
                .timeout(timeout);
        get(|| async { "ok" }).layer(layer)
    };
    let router = Router::new()
        .route("/patient", route("patient", Duration::from_secs(3)))
        .route("/hasty", route("hasty", Duration::from_millis(100)));
    let addr = serve(router).await;
    for path in ["/patient", "/hasty"] {
        assert_eq!(
            http_get(&client(), addr, path, &[]).await.status,
            200,
            "{path}"
        );
    }
    for (path, at_least, below) in [
        (
            "/patient",
            Duration::from_millis(600),
            Duration::from_millis(2_000),
        ),
        (
            "/hasty",
            Duration::from_millis(100),
            Duration::from_millis(550),
        ),
    ] {
        proxy.stall();
        let stalled = Instant::now();
        let reply = http_get(&client(), addr, path, &[]).await;
        let took = stalled.elapsed();
        proxy.pass();
        assert_503_with_retry_after(&reply, path);
        assert!(
            took >= at_least && took < below,
            "{path}: answered after {took:?}"
        );
    }
}

/// The readiness probe on the handle, without matching on the backend: ready while the
/// server answers; unavailable within the response timeout once it accepts bytes and
/// answers none (stalled), and at once once it refuses connections; ready again after.
/// Its endpoint names the deployment without the password.
#[tokio::test]
async fn the_handle_answers_a_readiness_probe() {
    let behind = support::Behind::start("ready");
    let coordination = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(300)))
        .await;
    coordination.ready().await.expect("ready");
    assert!(
        coordination.endpoint().contains(&behind.proxy.url()[8..]),
        "{}",
        coordination.endpoint()
    );
    behind.proxy.stall();
    let asked = Instant::now();
    let err = coordination.ready().await.expect_err("a stalled server");
    assert!(err.is_unavailable(), "{err}");
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "bounded: {:?}",
        asked.elapsed()
    );
    behind.proxy.pass();
    support::eventually("ready again", async || coordination.ready().await.is_ok()).await;
    let memory = Coordination::memory();
    memory.ready().await.expect("memory is ready");
    assert_eq!(memory.endpoint(), "memory");
    let password = RedisBackend::standalone("redis://:secret@127.0.0.1:1")
        .key_prefix("ready")
        .connect()
        .await
        .map(Coordination::from)
        .expect("a handle that boots during an outage");
    assert!(
        !password.endpoint().contains("secret"),
        "{}",
        password.endpoint()
    );
    assert!(
        password
            .ready()
            .await
            .expect_err("nothing there")
            .is_unavailable()
    );
}

/// Redis stopped (SIGSTOP: its connections open, nothing answering) for 6 s under load, with
/// every setting at its default (the handle's circuit breaker among them): once the first
/// requests have waited out their timeouts in silence, the circuit opens and every layer and
/// extractor answers at once, without sending; the median answer from the first second to
/// the thaw stays under a quarter of the timeout, and nothing waits past its timeout. Once Redis answers again,
/// a probe closes the circuit and requests are served. Timed from the moment of the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_costs_requests_no_timeout_after_the_first_second() {
    const STOPPED_FOR: Duration = Duration::from_secs(6);
    const CLIENTS: usize = 12;
    let server = Server::start(ServerKind::Redis7, &[]);
    let coordination = through(server.url(), "sigstop").await;
    let rate = RedisRateLimitLayer::fixed_window(
        &coordination,
        "rate",
        1_000_000,
        Duration::from_secs(60),
    )
    .expect("valid")
    .key(KeyExtractor::global());
    let queued = RedisRateLimitLayer::fixed_window(
        &coordination,
        "queued",
        1_000_000,
        Duration::from_secs(60),
    )
    .expect("valid")
    .key(KeyExtractor::global())
    .wait(Duration::from_millis(200), 100);
    let concurrent =
        RedisConcurrencyLimitLayer::new(&coordination, "concurrent", Capacity::global(1000))
            .expect("valid");
    let router = Router::new()
        .route("/rate", get(|| async { "ok" }).layer(rate))
        .route("/queued", get(|| async { "ok" }).layer(queued))
        .route("/concurrent", get(|| async { "ok" }).layer(concurrent))
        .merge(
            Router::new()
                .route(LEASE, get(|_: Lease<DefaultLease>| async { "ok" }))
                .route("/permit", get(|_: Permit<DefaultPermit>| async { "ok" }))
                .with_state(coordination.clone()),
        );
    let addr = serve(router).await;
    const ROUTES: [&str; 5] = ["/rate", "/queued", "/concurrent", LEASE, "/permit"];
    for route in ROUTES {
        assert_eq!(
            http_get(&client(), addr, route, &[]).await.status,
            200,
            "{route}"
        );
    }
    assert_eq!(coordination.circuit_state(), Some(CircuitState::Closed));

    let frozen = server.freeze();
    let stopped_at = Instant::now();
    let load: Vec<_> = (0..CLIENTS)
        .map(|i| {
            tokio::spawn(async move {
                let client = client();
                let mut answers = Vec::new();
                let mut n = i;
                while stopped_at.elapsed() < STOPPED_FOR {
                    let route = ROUTES[n % ROUTES.len()];
                    n += 1;
                    let sent = stopped_at.elapsed();
                    let reply = http_get(&client, addr, route, &[]).await;
                    answers.push((
                        route,
                        sent,
                        stopped_at.elapsed() - sent,
                        reply.status.as_u16(),
                    ));
                }
                answers
            })
        })
        .collect();
    let mut answers = Vec::new();
    for client in load {
        answers.extend(client.await.expect("a client"));
    }
    drop(frozen);
    let thawed_at = stopped_at.elapsed();

    // Nothing waited past its timeout (0.7 s for the queued route: its wait comes on top).
    let longest = answers
        .iter()
        .map(|(_, _, took, _)| *took)
        .max()
        .expect("answers");
    assert!(
        longest < Duration::from_millis(900),
        "longest answer {longest:?}"
    );
    assert!(
        answers.iter().all(|(_, _, _, status)| *status == 503),
        "every request answered 503 while Redis was stopped"
    );
    let mut after_first_second: Vec<Duration> = answers
        .iter()
        .filter(|(_, sent, _, _)| *sent >= Duration::from_secs(1))
        .map(|(_, _, took, _)| *took)
        .collect();
    after_first_second.sort();
    let median = after_first_second[after_first_second.len() / 2];
    let p99 = after_first_second[after_first_second.len() * 99 / 100];
    println!(
        "{} requests while stopped; from the first second: {} requests, median {median:?}, \
         p99 {p99:?}, longest {longest:?}",
        answers.len(),
        after_first_second.len()
    );
    // At once rather than at the timeout (0.5 s): a quarter of it leaves a loaded machine
    // room, and still tells one from the other.
    assert!(median < Duration::from_millis(125), "median {median:?}");
    assert!(
        after_first_second.len() > answers.len() / 2,
        "answered fast, so most requests came after the first second"
    );

    // Back: a probe closes the circuit within its open time (2 s, and a fifth).
    for route in ROUTES {
        support::eventually("served again", async || {
            http_get(&client(), addr, route, &[]).await.status == 200
        })
        .await;
    }
    let recovered = stopped_at.elapsed() - thawed_at;
    println!("served again {recovered:?} after the thaw");
    assert!(recovered < Duration::from_secs(4), "{recovered:?}");
    assert_eq!(coordination.circuit_state(), Some(CircuitState::Closed));
}

/// A lease of its own per request, with every setting at its default.
struct DefaultLease;

impl<S: Sync> LeaseSpec<S> for DefaultLease {
    async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(each_request())
    }
}

/// One of a thousand permits, with every setting at its default.
struct DefaultPermit;

impl<S: Sync> PermitSpec<S> for DefaultPermit {
    async fn permit(_parts: &mut Parts, _state: &S) -> Result<PermitRequest, KeyError> {
        Ok(PermitRequest::new("default-permits", 1000))
    }
}

/// An open circuit lets a probe through as soon as the server answers anything on the
/// handle, long before its open time: here, a held lease's renewal answered once a stall
/// ends. Without that answer the circuit would stay open for its minute.
#[tokio::test]
async fn an_open_circuit_probes_once_a_renewal_is_answered() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = through(proxy.url(), "early-probe")
        .await
        .circuit_breaker(Some(
            CircuitBreaker::new()
                .failure_threshold(1)
                .open_for(Duration::from_secs(60)),
        ));
    let lock = FencedLock::named(&coordination, "renewed");
    // Renewed every 1.5 s: the stall below (the first request's second of decision timeout)
    // costs it nothing, and a renewal comes soon after it.
    let options = leasehold::coordination::ManagedOptions::new().lease(Duration::from_secs(3));
    let lease = leasehold::coordination::lock::ManagedLease::try_acquire(&lock, &options)
        .await
        .expect("acquired")
        .expect("free");
    let rate =
        RedisRateLimitLayer::fixed_window(&coordination, "rate", 1000, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .timeout(Duration::from_secs(1));
    let addr = serve(Router::new().route("/rate", get(|| async { "ok" }).layer(rate))).await;
    assert_eq!(http_get(&client(), addr, "/rate", &[]).await.status, 200);

    proxy.stall();
    assert_eq!(http_get(&client(), addr, "/rate", &[]).await.status, 503);
    assert_eq!(coordination.circuit_state(), Some(CircuitState::Open));
    let started = Instant::now();
    assert_eq!(http_get(&client(), addr, "/rate", &[]).await.status, 503);
    // Well under the decision timeout it would otherwise wait.
    assert!(started.elapsed() < FAST, "open: at once");

    // The stall ends: the renewal held in it (or the next one) is answered.
    proxy.pass();
    let passed = Instant::now();
    support::eventually("a probe closes the circuit", async || {
        http_get(&client(), addr, "/rate", &[]).await.status == 200
    })
    .await;
    assert!(
        passed.elapsed() < Duration::from_secs(3),
        "within a renewal or two, not the open minute: {:?}",
        passed.elapsed()
    );
    assert_eq!(coordination.circuit_state(), Some(CircuitState::Closed));
    assert!(!lease.ownership().is_lost(), "the lease survived the stall");
    drop(lease);
}
