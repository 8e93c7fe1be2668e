//! The `Lease` extractor over real HTTP against real Redis: handlers for one name never run
//! at once across app instances, and rejections are HTTP answers.

#![cfg(feature = "axum")]

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use http::StatusCode;
use http::request::Parts;
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::ManagedOptions;
use leasehold::coordination::lock::FencedLock;
use leasehold::coordination::rw_lease::ReadWriteLock;
use leasehold::extract::{
    DEFAULT_LEASE_TIMEOUT, Lease, LeaseRequest, LeaseSpec, Permit, PermitRequest, PermitSpec,
    ReadLease, WriteLease,
};
use leasehold::layer::key::KeyError;
use leasehold::layer::{Rejection, RejectionKind};
use support::http::{client, get as http_get, serve};
use support::process::TestProcess;
use support::proxy::Proxy;
use support::target::Target;
use support::{Server, ServerKind, shared, unique_prefix};

async fn redis(url: String, prefix: &str) -> Coordination {
    RedisBackend::standalone(url)
        .key_prefix(prefix)
        .connect()
        .await
        .expect("connect")
        .into()
}

/// The lease named by the path's segment after `/jobs/`.
struct JobName;

/// The path's segment after `/jobs/`.
fn job_name(parts: &Parts) -> Result<Vec<u8>, KeyError> {
    parts
        .uri
        .path()
        .rsplit_once("/jobs/")
        .map(|(_, name)| name)
        .filter(|name| !name.is_empty())
        .map(|name| name.as_bytes().to_vec())
        .ok_or_else(|| KeyError::new("a job name is needed: /jobs/{name}"))
}

impl<S: Sync> LeaseSpec<S> for JobName {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named(job_name(parts)?))
    }
}

/// The same lease, waiting up to 5 s for it.
struct WaitForJob;

impl<S: Sync> LeaseSpec<S> for WaitForJob {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named(job_name(parts)?).max_wait(Duration::from_secs(5)))
    }
}

/// What the protected handler saw: when it ran, and with which token.
type RunLog = Arc<Mutex<Vec<(Instant, Instant, u64)>>>;

#[derive(Clone)]
struct AppState {
    coordination: Coordination,
    log: RunLog,
}

impl axum::extract::FromRef<AppState> for Coordination {
    fn from_ref(state: &AppState) -> Coordination {
        state.coordination.clone()
    }
}

async fn run_job(State(state): State<AppState>, lease: Lease<WaitForJob>) -> String {
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let end = Instant::now();
    state
        .log
        .lock()
        .unwrap()
        .push((start, end, lease.fencing_token()));
    lease.fencing_token().to_string()
}

fn app(coordination: Coordination, log: RunLog) -> Router {
    Router::new()
        .route("/jobs/{name}", get(run_job))
        .route(
            "/try/jobs/{name}",
            get(|lease: Lease<JobName>| async move { lease.fencing_token().to_string() }),
        )
        // The same extractor with no name in the path: its spec refuses the request.
        .route(
            "/try/jobs/",
            get(|lease: Lease<JobName>| async move { lease.fencing_token().to_string() }),
        )
        .route(
            "/hold/jobs/{name}",
            get(|lease: Lease<JobName>| async move {
                tokio::time::sleep(Duration::from_millis(600)).await;
                lease.fencing_token().to_string()
            }),
        )
        .with_state(AppState { coordination, log })
}

async fn two_instances(url: &str, prefix: &str) -> (SocketAddr, SocketAddr, RunLog) {
    let log = RunLog::default();
    let first = serve(app(redis(url.to_owned(), prefix).await, log.clone())).await;
    let second = serve(app(redis(url.to_owned(), prefix).await, log.clone())).await;
    (first, second, log)
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn two_instances_never_run_one_job_at_once_and_tokens_increase() {
    let prefix = unique_prefix("lease-two");
    let (first, second, log) = two_instances(&shared(ServerKind::Redis7).url(), &prefix).await;
    let client = client();

    let mut requests = Vec::new();
    for i in 0..16 {
        let client = client.clone();
        let addr = if i % 2 == 0 { first } else { second };
        requests.push(tokio::spawn(async move {
            http_get(&client, addr, "/jobs/nightly", &[]).await
        }));
    }
    for request in requests {
        let reply = request.await.expect("request");
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    }

    let mut runs = log.lock().unwrap().clone();
    assert_eq!(runs.len(), 16);
    runs.sort_by_key(|(start, _, _)| *start);
    for pair in runs.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "two handlers ran the same job at once"
        );
        assert!(
            pair[1].2 > pair[0].2,
            "tokens increase from one run to the next"
        );
    }
}

#[tokio::test]
async fn a_held_lease_is_a_409_with_retry_after_and_is_free_once_the_handler_is_done() {
    let prefix = unique_prefix("lease-409");
    let (first, second, _) = two_instances(&shared(ServerKind::Redis7).url(), &prefix).await;
    let client = client();

    let holder = tokio::spawn({
        let client = client.clone();
        async move { http_get(&client, first, "/hold/jobs/report", &[]).await }
    });
    // Wait (bounded) until the holder's handler runs, by the lease it holds.
    let coordination = redis(shared(ServerKind::Redis7).url(), &prefix).await;
    let lock = FencedLock::named(&coordination, "report");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match lock
            .try_acquire(Duration::from_secs(30))
            .await
            .expect("try")
        {
            leasehold::coordination::Attempt::Busy { .. } => break,
            leasehold::coordination::Attempt::Acquired(mut lease) => {
                lease.release().await.expect("release");
                assert!(Instant::now() < deadline, "the holder never took the lease");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    let reply = http_get(&client, second, "/try/jobs/report", &[]).await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    // No body, so no content type: the status and `Retry-After` say it.
    assert!(reply.body.is_empty());
    assert_eq!(reply.header("content-type"), None);
    // The holder's 30 s lease (the default), rounded up.
    let retry_after = reply.retry_after_secs();
    assert!((1..=30).contains(&retry_after), "{retry_after}");

    let held = holder.await.expect("holder");
    assert_eq!(held.status, StatusCode::OK);
    // Released as the handler's response was produced (in the background): free within
    // moments, not in 30 s.
    let mut reply = None;
    support::eventually("the lease is free again", async || {
        let free = http_get(&client, second, "/try/jobs/report", &[]).await;
        let done = free.status == StatusCode::OK;
        reply = Some(free);
        done
    })
    .await;
    let reply = reply.expect("a reply");
    let token: u64 = std::str::from_utf8(&reply.body).unwrap().parse().unwrap();
    let held_token: u64 = std::str::from_utf8(&held.body).unwrap().parse().unwrap();
    assert!(token > held_token);
}

#[tokio::test]
async fn no_name_is_a_400_and_a_dead_backend_a_503() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let coordination = redis(server.url(), &unique_prefix("lease-errors")).await;
    let addr = serve(app(coordination, RunLog::default())).await;
    let client = client();

    let reply = http_get(&client, addr, "/try/jobs/", &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{reply:?}");

    server.stop();
    let reply = http_get(&client, addr, "/try/jobs/x", &[]).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.retry_after_secs(), 1);
}

#[tokio::test]
async fn a_name_the_spec_refuses_is_a_400() {
    struct Refuses;
    impl<S: Sync> LeaseSpec<S> for Refuses {
        async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
            Err(KeyError::new("no lease for you"))
        }
    }
    let router = Router::new()
        .route("/", get(|_lease: Lease<Refuses>| async { "never" }))
        .with_state(Coordination::memory());
    let addr = serve(router).await;
    let reply = http_get(&client(), addr, "/", &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.body, "no lease for you\n");
}

/// The lease named by axum's own `Path` extractor, as the `Lease` docs show.
struct TenantImport;

impl<S: Sync> LeaseSpec<S> for TenantImport {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        use axum::extract::{FromRequestParts, Path};
        let Path(tenant) = Path::<String>::from_request_parts(parts, &())
            .await
            .map_err(|rejection| KeyError::new(rejection.body_text()))?;
        Ok(LeaseRequest::named(format!("import:{tenant}")))
    }
}

#[tokio::test]
async fn a_lease_can_be_named_by_axums_path_extractor() {
    let coordination = redis(
        shared(ServerKind::Redis7).url(),
        &unique_prefix("lease-path"),
    )
    .await;
    // The first handler says when it holds its lease, and holds it until told to finish.
    let (entered, finish) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Semaphore::new(0)),
    );
    let (entered_tx, finish_rx) = (entered.clone(), finish.clone());
    let app = Router::new()
        .route(
            "/tenants/{tenant}/import",
            get(move |lease: Lease<TenantImport>| async move {
                entered_tx.notify_one();
                let _finish = finish_rx.acquire().await;
                lease.fencing_token().to_string()
            }),
        )
        .with_state(coordination);
    let addr = serve(app).await;
    let client = client();
    let held = {
        let client = client.clone();
        tokio::spawn(async move { http_get(&client, addr, "/tenants/acme/import", &[]).await })
    };
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("the first import holds its lease");
    // `import:acme` is held; another tenant's import is free meanwhile.
    assert_eq!(
        http_get(&client, addr, "/tenants/acme/import", &[])
            .await
            .status,
        StatusCode::CONFLICT
    );
    let other = {
        let client = client.clone();
        tokio::spawn(async move { http_get(&client, addr, "/tenants/globex/import", &[]).await })
    };
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("the other tenant's import runs at once");
    finish.add_permits(2);
    assert_eq!(held.await.expect("request").status, StatusCode::OK);
    assert_eq!(other.await.expect("request").status, StatusCode::OK);
}

/// The answers of an application that words its own refusals, as the layers take them too.
fn own_answers(rejection: &Rejection<'_>, request: &Parts) -> Option<http::Response<bytes::Bytes>> {
    let body = match rejection.kind() {
        RejectionKind::LeaseHeld => format!("{} busy: {}", request.uri.path(), rejection.detail()),
        RejectionKind::InvalidKey => format!("bad name: {}", rejection.detail()),
        _ => return None,
    };
    http::Response::builder()
        .status(rejection.status())
        .body(body.into())
        .ok()
}

/// A lease named by its path, answered by `own_answers`.
struct OwnAnswers;

impl<S: Sync> LeaseSpec<S> for OwnAnswers {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        match parts.uri.path().strip_prefix("/own/") {
            Some(name) if !name.is_empty() => Ok(LeaseRequest::named(name)),
            _ => Err(KeyError::new("a name is needed")),
        }
    }

    fn rejection_response(
        rejection: &Rejection<'_>,
        request: &Parts,
    ) -> Option<http::Response<bytes::Bytes>> {
        own_answers(rejection, request)
    }
}

#[tokio::test]
async fn a_spec_answers_its_own_rejections_and_keeps_retry_after() {
    let coordination = Coordination::memory();
    let held = FencedLock::named(&coordination, "taken")
        .try_acquire(Duration::from_secs(30))
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let router = Router::new()
        .route(
            "/own/{*name}",
            get(|_lease: Lease<OwnAnswers>| async { "ran" }),
        )
        .route("/own/", get(|_lease: Lease<OwnAnswers>| async { "ran" }))
        .with_state(coordination);
    let addr = serve(router).await;
    let client = client();

    let reply = http_get(&client, addr, "/own/taken", &[]).await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    assert_eq!(
        reply.body,
        "/own/taken busy: The lease is held by another request."
    );
    // The extractor adds the holder's time left, which the answer did not set.
    assert!((29..=30).contains(&reply.retry_after_secs()));

    let reply = http_get(&client, addr, "/own/", &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.body, "bad name: a name is needed");

    // `None` keeps the extractor's answer: a free lease runs the handler.
    let reply = http_get(&client, addr, "/own/free", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    drop(held);
}

/// A lease named by the peer's address, on an app served without it: the server's fault.
struct ByPeer;

fn peer_name(parts: &Parts) -> Result<LeaseRequest, KeyError> {
    leasehold::layer::key::KeyExtractor::peer_ip()
        .extract(parts)
        .map(LeaseRequest::named)
}

impl<S: Sync> LeaseSpec<S> for ByPeer {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        peer_name(parts)
    }
}

/// The same, answered by the application with the rejection's sentence.
struct ByPeerOwnAnswer;

impl<S: Sync> LeaseSpec<S> for ByPeerOwnAnswer {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        peer_name(parts)
    }

    fn rejection_response(
        rejection: &Rejection<'_>,
        _request: &Parts,
    ) -> Option<http::Response<bytes::Bytes>> {
        http::Response::builder()
            .status(rejection.status())
            .body(format!("own: {}", rejection.detail()).into())
            .ok()
    }
}

#[tokio::test]
async fn a_name_the_server_cannot_derive_is_a_500_that_says_what_to_change() {
    use tower::ServiceExt;
    let router = Router::new()
        .route("/plain", get(|_lease: Lease<ByPeer>| async { "never" }))
        .route(
            "/own",
            get(|_lease: Lease<ByPeerOwnAnswer>| async { "never" }),
        )
        .with_state(Coordination::memory());
    for (path, starts) in [
        ("/plain", "lease name unavailable: no peer address"),
        ("/own", "own: lease name unavailable: no peer address"),
    ] {
        // Without `into_make_service_with_connect_info`: no peer address in the request.
        let request = http::Request::get(path)
            .body(axum::body::Body::empty())
            .expect("a request");
        let response = router.clone().oneshot(request).await.expect("infallible");
        assert_eq!(
            response.status(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "{path}"
        );
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .expect("a body")
            .to_bytes();
        let body = std::str::from_utf8(&body).expect("text");
        assert!(body.starts_with(starts), "{path}: {body}");
        assert!(
            body.contains("into_make_service_with_connect_info"),
            "{body}"
        );
    }
}

/// Options that cannot be kept (a lifetime limit on a lease released with its handle).
struct Misconfigured;

impl<S: Sync> LeaseSpec<S> for Misconfigured {
    async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named("misconfigured")
            .options(ManagedOptions::new().max_lifetime(Some(Duration::from_secs(5)))))
    }
}

/// A mistake in a lease or permit request is the application's, not the backend's: a `500`
/// without `Retry-After` (a `503` would have clients retry forever, and monitors page for
/// Redis), refused before anything is sent, and logged once however many requests meet it.
#[tokio::test]
async fn requests_that_cannot_be_kept_are_a_500_before_anything_is_sent_told_once() {
    let target = Target::Server(ServerKind::Redis7);
    let coordination = target.coordination("lease-misconfigured").await;
    let router = Router::new()
        .route(
            "/",
            get(|lease: Lease<Misconfigured>| async move { lease.fencing_token().to_string() }),
        )
        .route("/read", get(|_: ReadLease<Misconfigured>| async { "read" }))
        .route(
            "/write",
            get(|_: WriteLease<Misconfigured>| async { "written" }),
        )
        .route(
            "/permit",
            get(|_: Permit<MisconfiguredPermit>| async { "permitted" }),
        )
        .route("/no-permits", get(|_: Permit<NoPermits>| async { "never" }))
        .route("/instant", get(|_: Lease<NoTime>| async { "never" }))
        .route("/forever", get(|_: Lease<RenewsForever>| async { "never" }))
        .route(
            "/forever-permit",
            get(|_: Permit<RenewsForeverPermit>| async { "never" }),
        )
        .with_state(coordination.clone());
    let logs = support::logs::capture();
    let addr = serve(router).await;
    let paths = [
        "/",
        "/read",
        "/write",
        "/permit",
        "/no-permits",
        "/instant",
        "/forever",
        "/forever-permit",
    ];
    for path in paths {
        for _ in 0..3 {
            let reply = http_get(&client(), addr, path, &[]).await;
            assert_eq!(
                reply.status,
                StatusCode::INTERNAL_SERVER_ERROR,
                "{path}: {reply:?}"
            );
            assert_eq!(
                reply.header("retry-after"),
                None,
                "{path}: nothing to wait for"
            );
        }
    }
    // Nothing was taken: not even the fencing counter every lock acquisition leaves exists.
    assert_eq!(target.count_keys(&coordination), 0);
    // One line per mistake, not one per request: four mistakes (a lifetime limit on a
    // holding released with its handle, for the three lease extractors and the permit; no
    // permit; no time; no end).
    let told = logs.count("ERROR", "cannot be kept as configured");
    assert_eq!(told, 4, "told once per mistake");
    assert_eq!(
        logs.count("ERROR", "release_on_drop(true), or a max_lifetime"),
        1
    );
}

/// `release_on_drop(false)` without a lifetime limit: every request would leave a lease
/// renewed forever.
struct RenewsForever;

impl<S: Sync> LeaseSpec<S> for RenewsForever {
    async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named("forever").options(ManagedOptions::new().release_on_drop(false)))
    }
}

/// The same, for a permit.
struct RenewsForeverPermit;

impl<S: Sync> PermitSpec<S> for RenewsForeverPermit {
    async fn permit(_parts: &mut Parts, _state: &S) -> Result<PermitRequest, KeyError> {
        Ok(PermitRequest::new("forever", 1).options(ManagedOptions::new().release_on_drop(false)))
    }
}

/// A semaphore of no permit.
struct NoPermits;

impl<S: Sync> PermitSpec<S> for NoPermits {
    async fn permit(_parts: &mut Parts, _state: &S) -> Result<PermitRequest, KeyError> {
        Ok(PermitRequest::new("none", 0))
    }
}

/// The lease and the permit named by the `x-name` header, as a client sends it.
struct HeaderNamed;

fn header_name(parts: &Parts) -> Vec<u8> {
    parts
        .headers
        .get("x-name")
        .map(|value| value.as_bytes().to_vec())
        .unwrap_or_default()
}

impl<S: Sync> LeaseSpec<S> for HeaderNamed {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named(header_name(parts)))
    }
}

impl<S: Sync> PermitSpec<S> for HeaderNamed {
    async fn permit(parts: &mut Parts, _state: &S) -> Result<PermitRequest, KeyError> {
        Ok(PermitRequest::new(header_name(parts), 2))
    }
}

/// A name a client sends picks no cluster slot: its braces are escaped as a client key's
/// are, in the keys of a lease, a read-write lease and a permit alike. An empty name is a
/// `400`, and takes nothing.
#[tokio::test]
async fn names_from_requests_pick_no_slot_and_an_empty_one_is_refused() {
    let target = Target::Server(ServerKind::Redis7);
    let coordination = target.coordination("lease-braces").await;
    let router = Router::new()
        .route("/lease", get(|_: Lease<HeaderNamed>| async { "held" }))
        .route("/read", get(|_: ReadLease<HeaderNamed>| async { "read" }))
        .route(
            "/permit",
            get(|_: Permit<HeaderNamed>| async { "permitted" }),
        )
        .with_state(coordination.clone());
    let addr = serve(router).await;
    for path in ["/lease", "/read", "/permit"] {
        let reply = http_get(&client(), addr, path, &[("x-name", "")]).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path}: {reply:?}");
    }
    assert_eq!(target.count_keys(&coordination), 0, "nothing taken");
    for path in ["/lease", "/read", "/permit"] {
        let reply = http_get(&client(), addr, path, &[("x-name", "}{slot}")]).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {reply:?}");
    }
    // The lease's fencing counter stays: its name, as stored, has no brace of the client's.
    let lock = FencedLock::named(&coordination, "%7D%7Bslot%7D");
    let counter = coordination.backend().physical_key(lock.counter_key());
    assert_eq!(
        target.raw(&[b"EXISTS", &counter]),
        redis::Value::Int(1),
        "the same counter as the request's lease"
    );
    let lease = lock
        .try_acquire(Duration::from_secs(5))
        .await
        .expect("try")
        .acquired()
        .expect("free");
    assert!(lease.fencing_token() > 0);
}

/// Options that cannot be kept, for a permit.
struct MisconfiguredPermit;

impl<S: Sync> PermitSpec<S> for MisconfiguredPermit {
    async fn permit(_parts: &mut Parts, _state: &S) -> Result<PermitRequest, KeyError> {
        Ok(PermitRequest::new("misconfigured", 1)
            .options(ManagedOptions::new().max_lifetime(Some(Duration::from_secs(5)))))
    }
}

/// No time at all for the backend's answer.
struct NoTime;

impl<S: Sync> LeaseSpec<S> for NoTime {
    async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named("no-time").timeout(Duration::ZERO))
    }
}

/// The job lease, answered within 200 ms.
struct Quick;

impl<S: Sync> LeaseSpec<S> for Quick {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named(job_name(parts)?).timeout(Duration::from_millis(200)))
    }
}

/// The job lease, waiting up to 300 ms, answered within 200 ms more.
struct QuickWait;

impl<S: Sync> LeaseSpec<S> for QuickWait {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named(job_name(parts)?)
            .max_wait(Duration::from_millis(300))
            .timeout(Duration::from_millis(200)))
    }
}

/// Redis silent (a blackhole, so every reply waits for the backend's 1 s response timeout):
/// each route answers 503 within its bound, timed from the moment the silence starts.
#[tokio::test]
async fn a_silent_backend_is_a_503_within_the_lease_timeout() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = redis(proxy.url(), &unique_prefix("lease-silent")).await;
    let router = Router::new()
        .route(
            "/default/jobs/{name}",
            get(|lease: Lease<JobName>| async move { lease.fencing_token().to_string() }),
        )
        .route(
            "/quick/jobs/{name}",
            get(|lease: Lease<Quick>| async move { lease.fencing_token().to_string() }),
        )
        .route(
            "/wait/jobs/{name}",
            get(|lease: Lease<QuickWait>| async move { lease.fencing_token().to_string() }),
        )
        .with_state(coordination);
    let addr = serve(router).await;
    assert_eq!(
        http_get(&client(), addr, "/default/jobs/a", &[])
            .await
            .status,
        StatusCode::OK
    );

    proxy.blackhole();
    let slack = Duration::from_millis(250);
    for (route, bound) in [
        ("/default/jobs/a", DEFAULT_LEASE_TIMEOUT),
        ("/quick/jobs/a", Duration::from_millis(200)),
        ("/wait/jobs/a", Duration::from_millis(500)),
    ] {
        let started = Instant::now();
        let reply = http_get(&client(), addr, route, &[]).await;
        let took = started.elapsed();
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{route}: {reply:?}"
        );
        assert!(reply.retry_after_secs() >= 1, "{route}: {reply:?}");
        assert!(
            took >= bound.min(Duration::from_millis(200)),
            "{route}: {took:?}"
        );
        assert!(
            took < bound + slack,
            "{route} took {took:?}, bound {bound:?}"
        );
    }
    proxy.pass();
}

// ---------------------------------------------------------------------------------------------

/// The read-write lease named by the path's segment after `/jobs/`, whose refusals say to
/// come back within 2 s (the default lease is 30 s).
struct CatalogLease;

impl<S: Sync> LeaseSpec<S> for CatalogLease {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named(job_name(parts)?).retry_after_at_most(Duration::from_secs(2)))
    }
}

/// One permit in all, named by the application's configuration (the router's state).
struct OnePermit;

#[derive(Clone)]
struct PermitConfig {
    semaphore: String,
}

#[derive(Clone)]
struct ConfiguredState {
    coordination: Coordination,
    permits: PermitConfig,
}

impl axum::extract::FromRef<ConfiguredState> for Coordination {
    fn from_ref(state: &ConfiguredState) -> Coordination {
        state.coordination.clone()
    }
}

impl axum::extract::FromRef<ConfiguredState> for PermitConfig {
    fn from_ref(state: &ConfiguredState) -> PermitConfig {
        state.permits.clone()
    }
}

impl<S: Sync> PermitSpec<S> for OnePermit
where
    PermitConfig: axum::extract::FromRef<S>,
{
    async fn permit(_parts: &mut Parts, state: &S) -> Result<PermitRequest, KeyError> {
        let config = <PermitConfig as axum::extract::FromRef<S>>::from_ref(state);
        Ok(PermitRequest::new(config.semaphore, 1).retry_after_at_most(Duration::from_secs(2)))
    }
}

/// Over HTTP against Redis, on two app instances: readers share a read lease while a writer
/// is refused with a capped `Retry-After`; a writer is alone; one permit admits one request
/// and refuses the next with `429`; all free once the handlers are done.
#[tokio::test]
async fn read_and_write_leases_and_permits_over_http() {
    const HOLD: Duration = Duration::from_millis(400);
    // The handlers running now (each holds its lease or permit), and the most at once.
    static HOLDING: AtomicUsize = AtomicUsize::new(0);
    static PEAK: AtomicUsize = AtomicUsize::new(0);
    async fn hold() {
        let now = HOLDING.fetch_add(1, Ordering::SeqCst) + 1;
        PEAK.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(HOLD).await;
        HOLDING.fetch_sub(1, Ordering::SeqCst);
    }
    let prefix = unique_prefix("rw-extractors");
    let app = async || {
        let coordination = redis(shared(ServerKind::Redis7).url(), &prefix).await;
        let router = Router::new()
            .route(
                "/read/jobs/{name}",
                get(|lease: ReadLease<CatalogLease>| async move {
                    hold().await;
                    // Held until here: a closure's argument unused in its future is dropped
                    // before the future runs.
                    drop(lease);
                    "read"
                }),
            )
            .route(
                "/write/jobs/{name}",
                get(|lease: WriteLease<CatalogLease>| async move {
                    hold().await;
                    // Held until here: a closure's argument unused in its future is dropped
                    // before the future runs.
                    drop(lease);
                    "written"
                }),
            )
            .route(
                "/permit",
                get(|permit: Permit<OnePermit>| async move {
                    hold().await;
                    // Held until here: a closure's argument unused in its future is dropped
                    // before the future runs.
                    drop(permit);
                    "permitted"
                }),
            )
            .with_state(ConfiguredState {
                coordination,
                permits: PermitConfig {
                    semaphore: "exports".to_owned(),
                },
            });
        serve(router).await
    };
    let (first, second) = (app().await, app().await);
    let client = client();
    // A request sent once a first one's handler holds its lease.
    let later = async |addr, path: &'static str| {
        support::eventually("a first request holds its lease", async || {
            HOLDING.load(Ordering::SeqCst) > 0
        })
        .await;
        http_get(&client, addr, path, &[]).await
    };

    // Two readers at once, on two instances; a writer meanwhile is refused.
    let (a, b, writer) = tokio::join!(
        http_get(&client, first, "/read/jobs/catalog", &[]),
        http_get(&client, second, "/read/jobs/catalog", &[]),
        later(second, "/write/jobs/catalog"),
    );
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));
    assert_eq!(PEAK.load(Ordering::SeqCst), 2, "the readers overlapped");
    assert_eq!(writer.status, StatusCode::CONFLICT, "{writer:?}");
    assert!(
        (1..=2).contains(&writer.retry_after_secs()),
        "capped: {writer:?}"
    );

    // The readers' leases are released in the background as their handlers end.
    let observer = redis(shared(ServerKind::Redis7).url(), &prefix).await;
    let catalog = ReadWriteLock::named(&observer, "catalog");
    support::eventually("the readers are gone", async || {
        match catalog
            .try_write(Duration::from_secs(5))
            .await
            .expect("try")
            .acquired()
        {
            Some(mut lease) => lease.release().await.expect("release").was_held(),
            None => false,
        }
    })
    .await;

    // A writer alone: a reader and another writer meanwhile are refused.
    let (written, reader, other) = tokio::join!(
        http_get(&client, first, "/write/jobs/catalog", &[]),
        later(second, "/read/jobs/catalog"),
        later(first, "/write/jobs/catalog"),
    );
    assert_eq!(written.status, StatusCode::OK);
    assert_eq!(reader.status, StatusCode::CONFLICT, "{reader:?}");
    assert_eq!(other.status, StatusCode::CONFLICT, "{other:?}");

    support::eventually("the writer is gone", async || {
        match catalog
            .try_write(Duration::from_secs(5))
            .await
            .expect("try")
            .acquired()
        {
            Some(mut lease) => lease.release().await.expect("release").was_held(),
            None => false,
        }
    })
    .await;

    // One permit across both instances, named by the state's configuration.
    let (permitted, refused) = tokio::join!(
        http_get(&client, first, "/permit", &[]),
        later(second, "/permit"),
    );
    assert_eq!(permitted.status, StatusCode::OK);
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{refused:?}");
    assert!(
        (1..=2).contains(&refused.retry_after_secs()),
        "capped: {refused:?}"
    );

    // Released with their handlers (in the background): free again.
    support::eventually("everything is free again", async || {
        let (w, p) = tokio::join!(
            http_get(&client, second, "/write/jobs/catalog", &[]),
            http_get(&client, first, "/permit", &[]),
        );
        w.status == StatusCode::OK && p.status == StatusCode::OK
    })
    .await;
}

// ---------------------------------------------------------------------------------------------

/// Every extractor's lease or permit, kept 3 s at a time (renewed at 1.5 s), one name per
/// test run.
struct KeptThreeSeconds;

const KEPT: Duration = Duration::from_secs(3);

fn kept_options() -> ManagedOptions {
    ManagedOptions::new().lease(KEPT)
}

impl<S: Sync> LeaseSpec<S> for KeptThreeSeconds {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named(job_name(parts)?).options(kept_options()))
    }
}

impl<S: Sync> PermitSpec<S> for KeptThreeSeconds {
    async fn permit(parts: &mut Parts, _state: &S) -> Result<PermitRequest, KeyError> {
        Ok(PermitRequest::new(job_name(parts)?, 1).options(kept_options()))
    }
}

/// The handlers' work running now (each handler holds its lease or permit).
static WORKING: AtomicUsize = AtomicUsize::new(0);

/// A handler's work: `hold` of it, run with `while_held`, counted in [`WORKING`] while it
/// runs (also when it is stopped).
async fn work(hold: Duration) -> &'static str {
    struct Working;
    impl Drop for Working {
        fn drop(&mut self) {
            WORKING.fetch_sub(1, Ordering::SeqCst);
        }
    }
    WORKING.fetch_add(1, Ordering::SeqCst);
    let _working = Working;
    tokio::time::sleep(hold).await;
    "kept"
}

/// Each extractor's handler through a fault proxy, its work run with `while_held`: a stall
/// shorter than the estimate (1.2 s at 1.3 s into a 3 s lease) costs the work nothing; one
/// longer than the estimate stops the work at the estimate, and the handler answers 503
/// while its work still had time to run.
#[tokio::test]
async fn handlers_ride_out_a_short_stall_and_are_stopped_by_a_long_one() {
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = redis(proxy.url(), &unique_prefix("extractor-stalls")).await;
    const HOLD: Duration = Duration::from_millis(4500);
    let router = Router::new()
        .route(
            "/lease/jobs/{name}",
            get(|lease: Lease<KeptThreeSeconds>| async move { lease.while_held(work(HOLD)).await }),
        )
        .route(
            "/read/jobs/{name}",
            get(|lease: ReadLease<KeptThreeSeconds>| async move {
                lease.while_held(work(HOLD)).await
            }),
        )
        .route(
            "/write/jobs/{name}",
            get(|lease: WriteLease<KeptThreeSeconds>| async move {
                lease.while_held(work(HOLD)).await
            }),
        )
        .route(
            "/permit/jobs/{name}",
            get(|permit: Permit<KeptThreeSeconds>| async move {
                permit.while_held(work(HOLD)).await
            }),
        )
        .with_state(coordination);
    let addr = serve(router).await;
    let routes = ["/lease", "/read", "/write", "/permit"];
    for (stall, kept) in [(Duration::from_millis(1200), true), (HOLD, false)] {
        let requests: Vec<_> = routes
            .iter()
            .map(|route| {
                // A name of its own per route: the read and write routes share one lock kind.
                let path = format!("{route}/jobs/{}-{kept}", &route[1..]);
                tokio::spawn(async move {
                    let started = Instant::now();
                    let reply = http_get(&client(), addr, &path, &[]).await;
                    (path, reply, started.elapsed())
                })
            })
            .collect();
        // Every handler holds its lease (granted within the moment before); the renewals due
        // 1.5 s after the grants meet a stall that begins 1.2 s after it.
        support::eventually("every handler holds its lease", async || {
            WORKING.load(Ordering::SeqCst) == routes.len()
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1200)).await;
        proxy.stall();
        tokio::time::sleep(stall).await;
        proxy.pass();
        for request in requests {
            let (path, reply, took) = request.await.expect("request task");
            if kept {
                assert_eq!(reply.status, StatusCode::OK, "{path}: {reply:?}");
                assert_eq!(reply.body, "kept", "{path}");
            } else {
                assert_eq!(
                    reply.status,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "{path}: {reply:?}"
                );
                assert_eq!(reply.header("retry-after"), Some("1"), "{path}");
                // Stopped at the estimate (3 s after the grant, 1.7 s into the stall), long
                // before the work's 4.5 s were up.
                assert!(
                    took >= KEPT - Duration::from_millis(500) && took < HOLD,
                    "{path}: stopped after {took:?}"
                );
            }
        }
    }
}

/// A permit that waits, trying again every 300 ms where the backend tells of no changes.
struct SlowPoll;

impl<S: Sync> PermitSpec<S> for SlowPoll {
    async fn permit(_parts: &mut Parts, _state: &S) -> Result<PermitRequest, KeyError> {
        Ok(PermitRequest::new("slow-poll", 1)
            .options(ManagedOptions::new().poll_interval(Duration::from_millis(300)))
            .max_wait(Duration::from_secs(5)))
    }
}

/// A waiting `Permit` tries again as often as its options' poll interval says (on a backend
/// that tells of no changes: memory), as the lease extractors do, not at the semaphore's
/// default of 50 ms.
#[tokio::test(start_paused = true)]
async fn a_waiting_permit_polls_at_its_options_interval() {
    use axum::extract::FromRequestParts;
    let coordination = Coordination::memory();
    let semaphore =
        leasehold::coordination::semaphore::Semaphore::new(&coordination, "slow-poll", 1)
            .expect("valid");
    let mut held = semaphore
        .try_acquire(Duration::from_secs(60))
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let started = tokio::time::Instant::now();
    let waiting = tokio::spawn(async move {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        let permit = Permit::<SlowPoll>::from_request_parts(&mut parts, &coordination).await;
        permit.map(|_| started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(held.release().await.expect("release").was_held());
    let waited = waiting.await.expect("the task").expect("a permit");
    assert!(
        waited >= Duration::from_millis(250),
        "{waited:?}: tried again at the options' 300 ms, not the default 50 ms"
    );
}

/// A write lease request that waits.
struct WaitingWriter;

/// A read lease of the same name, that does not wait.
struct ImpatientReader;

impl<S: Sync> LeaseSpec<S> for ImpatientReader {
    async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named("preferred"))
    }
}

impl<S: Sync> LeaseSpec<S> for WaitingWriter {
    async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named("preferred")
            .max_wait(Duration::from_secs(5))
            .waiting_bound(Duration::from_secs(2)))
    }
}

/// A `WriteLease` that waits keeps new readers out, in the phase-fair order: a reader that
/// comes after it is refused with `409`, and the writer gets in as soon as the reader before
/// it leaves, with a fencing token.
#[tokio::test]
async fn a_waiting_write_lease_keeps_new_readers_out() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let coordination = redis(server.unix_url(), &unique_prefix("rw-preference")).await;
    let router = Router::new()
        .route(
            "/read",
            get(|_: ReadLease<ImpatientReader>| async { "read" }),
        )
        .route(
            "/write",
            get(
                |lease: WriteLease<WaitingWriter>| async move { lease.fencing_token().to_string() },
            ),
        )
        .with_state(coordination.clone());
    let addr = serve(router).await;
    let lock = ReadWriteLock::named(&coordination, "preferred");
    let mut early = lock
        .try_read(Duration::from_secs(30))
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let writer = tokio::spawn(async move { http_get(&client(), addr, "/write", &[]).await });
    // The waiting writer's record is in the set.
    let key = String::from_utf8(coordination.backend().physical_key(lock.key())).expect("text");
    support::eventually("the writer waits", async || {
        let members: Vec<String> = server.cmd(&["ZRANGE", &key, "0", "-1"]);
        members.iter().any(|member| member.starts_with("q:"))
    })
    .await;
    let late = http_get(&client(), addr, "/read", &[]).await;
    assert_eq!(late.status, StatusCode::CONFLICT, "{late:?}");
    assert!(early.release().await.expect("release").was_held());
    let written = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("bounded")
        .expect("task");
    assert_eq!(written.status, StatusCode::OK, "{written:?}");
    let token: u64 = std::str::from_utf8(&written.body)
        .expect("text")
        .parse()
        .expect("a fencing token");
    assert!(token > 0);
}

// ---------------------------------------------------------------------------------------------

/// Set in the replica process of [`a_paused_writer_is_refused_at_the_resource`]: the server
/// URL, the key prefix, and the address of the document store.
const PAUSED_REPLICA: &str = "LEASEHOLD_TEST_PAUSED_REPLICA";

/// One replica of a document service: `PUT /doc` takes the document's write lease (waiting up
/// to 5 s, a lease of 1 s, renewed), then writes to the store with the lease's fencing token,
/// after `pause` (the replica that stands for a writer that stalls mid-request).
#[derive(Clone)]
struct DocReplica {
    coordination: Coordination,
    store: SocketAddr,
    name: &'static str,
    pause: Duration,
}

impl axum::extract::FromRef<DocReplica> for Coordination {
    fn from_ref(replica: &DocReplica) -> Self {
        replica.coordination.clone()
    }
}

/// The document's write lease.
struct Doc;

impl<S: Sync> LeaseSpec<S> for Doc {
    async fn lease(_parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        Ok(LeaseRequest::named("doc")
            .options(ManagedOptions::new().lease(Duration::from_secs(1)))
            .max_wait(Duration::from_secs(5)))
    }
}

/// Writes the document with the write lease's token, and answers what the store answered.
async fn put_doc(lease: WriteLease<Doc>, State(replica): State<DocReplica>) -> StatusCode {
    let token = lease.fencing_token();
    println!("holding {token}");
    tokio::time::sleep(replica.pause).await;
    let path = format!("/doc/{token}/{}", replica.name);
    support::http::send(&client(), http::Method::POST, replica.store, &path, &[])
        .await
        .status
}

fn doc_replica(replica: DocReplica) -> Router {
    Router::new()
        .route("/doc", axum::routing::put(put_doc))
        .with_state(replica)
}

/// The replica process: serves [`doc_replica`] with a 1 s pause before each write, says
/// where, and serves until it is killed. A test of its own only so that the test binary can
/// run it; without the variable it does nothing.
#[tokio::test]
#[ignore = "a role process, run by its test with the setting it needs"]
async fn paused_replica_process() {
    let Ok(setting) = std::env::var(PAUSED_REPLICA) else {
        return;
    };
    let fields: Vec<&str> = setting.split(' ').collect();
    let [url, prefix, store] = fields[..] else {
        panic!("three fields: {setting}");
    };
    let addr = serve(doc_replica(DocReplica {
        coordination: redis(url.to_owned(), prefix).await,
        store: store.parse().expect("the store's address"),
        name: "paused",
        pause: Duration::from_secs(1),
    }))
    .await;
    println!("listening {addr}");
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// The fenced write with one `WriteLease`: a replica's handler holds the document's write
/// lease and is frozen (SIGSTOP) before it writes; its lease runs out, another replica's
/// `PUT` gets in with a higher token and writes; the frozen one wakes and writes with its
/// old token, and the store refuses it, keeping the newer document.
#[tokio::test]
async fn a_paused_writer_is_refused_at_the_resource() {
    // The store: the highest token it has accepted, and who wrote with it.
    let document = Arc::new(Mutex::new((0u64, String::new())));
    let store = serve(
        Router::new()
            .route(
                "/doc/{token}/{who}",
                axum::routing::post(
                    async |axum::extract::Path((token, who)): axum::extract::Path<(
                        u64,
                        String,
                    )>,
                           State(document): State<Arc<Mutex<(u64, String)>>>| {
                        let mut document = document.lock().expect("not poisoned");
                        if token < document.0 {
                            return StatusCode::CONFLICT;
                        }
                        *document = (token, who);
                        StatusCode::OK
                    },
                ),
            )
            .with_state(Arc::clone(&document)),
    )
    .await;

    let server = shared(ServerKind::Redis7);
    let prefix = unique_prefix("paused-writer");
    let mut replica = TestProcess::start(
        "paused_replica_process",
        PAUSED_REPLICA,
        &format!("{} {prefix} {store}", server.url()),
    );
    let paused: SocketAddr = replica
        .line("listening ", Duration::from_secs(30))
        .await
        .parse()
        .expect("an address");

    let stale = tokio::spawn(async move {
        support::http::send(&client(), http::Method::PUT, paused, "/doc", &[]).await
    });
    let old: u64 = replica
        .line("holding ", Duration::from_secs(30))
        .await
        .parse()
        .expect("a token");
    replica.freeze();
    let frozen = Instant::now();

    let live = serve(doc_replica(DocReplica {
        coordination: redis(server.url(), &prefix).await,
        store,
        name: "live",
        pause: Duration::ZERO,
    }))
    .await;
    let written = support::http::send(&client(), http::Method::PUT, live, "/doc", &[]).await;
    assert_eq!(written.status, StatusCode::OK, "{written:?}");
    println!(
        "the live replica wrote {:?} after the freeze",
        frozen.elapsed()
    );
    let newer = document.lock().expect("not poisoned").clone();
    assert_eq!(newer.1, "live");
    assert!(newer.0 > old, "token {} after {old}", newer.0);

    replica.thaw();
    let refused = tokio::time::timeout(Duration::from_secs(10), stale)
        .await
        .expect("the paused replica answers once resumed")
        .expect("task");
    assert_eq!(refused.status, StatusCode::CONFLICT, "{refused:?}");
    assert_eq!(*document.lock().expect("not poisoned"), newer);
    drop(replica);
}
