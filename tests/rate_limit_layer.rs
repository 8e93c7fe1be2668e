//! `RedisRateLimitLayer` over real HTTP against real Redis.

#![cfg(feature = "axum")]

mod support;

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::{RateLimitInfo, RedisRateLimitLayer};
use leasehold::layer::{CircuitBreaker, CircuitState, FailurePolicy};
use support::http::{client, get as http_get, serve};
use support::target::{Target, command_calls};
use support::{Server, ServerKind, shared, unique_prefix};

async fn redis(url: String, prefix: &str) -> Coordination {
    RedisBackend::standalone(url)
        .key_prefix(prefix)
        .connect()
        .await
        .expect("connect")
        .into()
}

fn app(layer: RedisRateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/info",
            get(|info: RateLimitInfo| async move {
                format!("{} {}", info.decision().remaining(), info.policy().name())
            }),
        )
        .layer(layer)
}

#[tokio::test]
async fn two_instances_sharing_redis_admit_exactly_the_limit() {
    const LIMIT: u64 = 10;
    let prefix = unique_prefix("two-instances");
    let url = shared(ServerKind::Redis7).unix_url();
    // Two app instances, each with its own connection, as two replicas would be.
    let mut addrs = Vec::new();
    for _ in 0..2 {
        let coordination = redis(url.clone(), &prefix).await;
        let layer =
            RedisRateLimitLayer::fixed_window(&coordination, "api", LIMIT, Duration::from_secs(60))
                .expect("valid")
                .key(KeyExtractor::global());
        addrs.push(serve(app(layer)).await);
    }
    let client = client();
    let mut granted = 0;
    for i in 0..30 {
        let reply = http_get(&client, addrs[i % 2], "/", &[]).await;
        match reply.status.as_u16() {
            200 => {
                granted += 1;
                assert_eq!(reply.body, "ok");
                assert!(reply.header("retry-after").is_none());
            }
            429 => {
                let retry = reply.retry_after_secs();
                // Up to one second more than the window: Redis frees it a millisecond after its
                // TTL, which rounds up to 61 for a rejection in the window's first millisecond.
                assert!((1..=61).contains(&retry), "Retry-After {retry}");
                // Consistent with the RateLimit field's reset, never earlier (draft §6).
                let ratelimit = reply.header("ratelimit").expect("RateLimit on 429");
                assert!(ratelimit.starts_with("\"api\";r=0;t="), "{ratelimit}");
                let t: u64 = ratelimit
                    .rsplit("t=")
                    .next()
                    .and_then(|t| t.parse().ok())
                    .expect("t");
                assert!(retry >= t, "Retry-After {retry} before the reset {t}");
            }
            other => panic!("unexpected status {other}"),
        }
        assert_eq!(
            reply.header("ratelimit-policy"),
            Some("\"api\";q=10;w=60"),
            "every answer advertises the policy"
        );
    }
    assert_eq!(granted, LIMIT);
}

#[tokio::test]
async fn allowed_responses_carry_the_fields_and_handlers_see_the_decision() {
    let coordination = Target::Server(ServerKind::Redis8)
        .coordination("fields")
        .await;
    let layer = RedisRateLimitLayer::fixed_window(&coordination, "api", 3, Duration::from_secs(10))
        .expect("valid")
        .legacy_headers(true);
    let addr = serve(app(layer)).await;
    let client = client();
    let reply = http_get(&client, addr, "/info", &[]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, "2 api");
    assert_eq!(reply.header("ratelimit-policy"), Some("\"api\";q=3;w=10"));
    let ratelimit = reply.header("ratelimit").expect("RateLimit");
    assert!(
        ratelimit == "\"api\";r=2;t=10" || ratelimit == "\"api\";r=2;t=9",
        "{ratelimit}"
    );
    assert_eq!(reply.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("2"));
    // Keyed by peer IP by default: the loopback client.
    let key = coordination
        .backend()
        .physical_key(b"rl:fw:3:api:ip:127.0.0.1");
    let count: Option<String> =
        shared(ServerKind::Redis8).cmd(&["GET", std::str::from_utf8(&key).expect("utf-8")]);
    assert_eq!(count.as_deref(), Some("1"));
}

#[tokio::test]
async fn rejections_with_problem_json_and_costs() {
    let coordination = Target::Server(ServerKind::Valkey8)
        .coordination("cost")
        .await;
    let layer = RedisRateLimitLayer::fixed_window(&coordination, "api", 5, Duration::from_secs(30))
        .expect("valid")
        .key(KeyExtractor::header("x-api-key").expect("a header name"))
        .cost(|parts| {
            parts
                .headers
                .get("x-cost")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        })
        .problem_json(true);
    let addr = serve(app(layer)).await;
    let client = client();

    // A request that costs more than the limit: 429 without Retry-After.
    let reply = http_get(&client, addr, "/", &[("x-api-key", "k1"), ("x-cost", "6")]).await;
    assert_eq!(reply.status, 429);
    assert!(reply.header("retry-after").is_none());
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    let body = std::str::from_utf8(&reply.body).expect("utf-8");
    assert!(
        body.contains("\"status\":429") && body.contains("more than"),
        "{body}"
    );

    assert_eq!(
        http_get(&client, addr, "/", &[("x-api-key", "k1"), ("x-cost", "4")])
            .await
            .status,
        200
    );
    let reply = http_get(&client, addr, "/", &[("x-api-key", "k1"), ("x-cost", "2")]).await;
    assert_eq!(reply.status, 429);
    let retry = reply.retry_after_secs();
    // Up to one second more than the window (see two_instances_sharing_redis...).
    assert!((1..=31).contains(&retry), "Retry-After {retry}");
    assert!(
        std::str::from_utf8(&reply.body)
            .expect("utf-8")
            .contains("\"retry_after\":")
    );
    // The rejected request consumed nothing: 1 permit is still there.
    assert_eq!(
        http_get(&client, addr, "/", &[("x-api-key", "k1")])
            .await
            .status,
        200
    );
    // Another key has its own budget; a missing key is a clear 400.
    assert_eq!(
        http_get(&client, addr, "/", &[("x-api-key", "k2"), ("x-cost", "5")])
            .await
            .status,
        200
    );
    let reply = http_get(&client, addr, "/", &[]).await;
    assert_eq!(reply.status, 400);
    assert!(
        std::str::from_utf8(&reply.body)
            .expect("utf-8")
            .contains("x-api-key")
    );
}

#[tokio::test]
async fn backend_failure_follows_the_policy_and_recovers_without_a_restart() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let coordination = redis(server.url(), &unique_prefix("outage")).await;
    let closed =
        RedisRateLimitLayer::fixed_window(&coordination, "api", 100, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .problem_json(true);
    let open = closed.clone().failure_policy(FailurePolicy::FailOpen);
    let closed_addr = serve(app(closed)).await;
    let open_addr = serve(app(open)).await;
    let client = client();
    assert_eq!(http_get(&client, closed_addr, "/", &[]).await.status, 200);

    server.stop();
    let started = tokio::time::Instant::now();
    let reply = http_get(&client, closed_addr, "/", &[]).await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "a bounded failure"
    );
    let reply = http_get(&client, open_addr, "/", &[]).await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.header("ratelimit").is_none(),
        "no decision, no fields"
    );
    // The handler may ask for the decision: it is absent, a 500 that tells the client
    // nothing of the limits being off (the log says why, and what to do).
    let reply = http_get(&client, open_addr, "/info", &[]).await;
    assert_eq!(reply.status, 500);
    let body = String::from_utf8_lossy(&reply.body);
    assert_eq!(body, "internal server error\n");

    server.start_again();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let reply = http_get(&client, closed_addr, "/", &[]).await;
        if reply.status == 200 {
            assert!(reply.header("ratelimit").is_some());
            break;
        }
        assert_eq!(reply.status, 503);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the layer did not recover"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_slow_backend_is_bounded_by_the_timeout() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let coordination = redis(server.unix_url(), &unique_prefix("slow")).await;
    let layer =
        RedisRateLimitLayer::fixed_window(&coordination, "api", 100, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .timeout(Duration::from_millis(150));
    let addr = serve(app(layer)).await;
    let client = client();
    assert_eq!(http_get(&client, addr, "/", &[]).await.status, 200);
    // Writes (and scripts) wait while the server is paused.
    let () = server.cmd(&["CLIENT", "PAUSE", "2000", "WRITE"]);
    let started = tokio::time::Instant::now();
    let reply = http_get(&client, addr, "/", &[]).await;
    assert_eq!(reply.status, 503);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
    let () = server.cmd(&["CLIENT", "UNPAUSE"]);
}

#[tokio::test]
async fn missing_peer_address_is_a_server_error() {
    let coordination = Coordination::memory();
    let layer = RedisRateLimitLayer::fixed_window(&coordination, "api", 1, Duration::from_secs(1))
        .expect("valid");
    // Served without connect info: the default peer-IP key cannot be derived.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app(layer)).await });
    let reply = http_get(&client(), addr, "/", &[]).await;
    assert_eq!(reply.status, 500);
    // Whoever sets the service up meets it on the first request: it says what to change.
    let body = std::str::from_utf8(&reply.body).expect("text");
    assert!(
        body.starts_with("rate limit key unavailable: no peer address"),
        "{body}"
    );
    assert!(
        body.contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{body}"
    );
    assert!(body.ends_with('\n') && body.lines().count() == 1, "{body}");
}

#[tokio::test]
async fn works_on_a_plain_tower_service() {
    use tower::{Layer, ServiceExt, service_fn};

    let coordination = Target::Server(ServerKind::Redis7)
        .coordination("tower")
        .await;
    let layer = RedisRateLimitLayer::fixed_window(&coordination, "api", 1, Duration::from_secs(60))
        .expect("valid");
    let service = layer.layer(service_fn(|_request: http::Request<String>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
            bytes::Bytes::from_static(b"ok"),
        )))
    }));
    // A hyper or tower server inserts the peer address itself.
    let request = || {
        http::Request::builder()
            .extension(std::net::SocketAddr::from(([198, 51, 100, 7], 4000)))
            .body(String::new())
            .expect("request")
    };
    let allowed = service
        .clone()
        .oneshot(request())
        .await
        .expect("infallible");
    assert_eq!(allowed.status(), 200);
    assert!(
        allowed.extensions().get::<RateLimitInfo>().is_none(),
        "the info is on the request"
    );
    let rejected = service.oneshot(request()).await.expect("infallible");
    assert_eq!(rejected.status(), 429);
}

#[tokio::test]
async fn a_request_can_wait_for_permits_instead_of_a_429() {
    let coordination = Target::Server(ServerKind::Redis7)
        .coordination("wait")
        .await;
    let layer =
        RedisRateLimitLayer::fixed_window(&coordination, "api", 1, Duration::from_millis(400))
            .expect("valid")
            .key(KeyExtractor::global())
            .wait(Duration::from_secs(2), 10);
    let addr = serve(app(layer)).await;
    let client = client();
    assert_eq!(http_get(&client, addr, "/", &[]).await.status, 200);
    let started = tokio::time::Instant::now();
    let reply = http_get(&client, addr, "/", &[]).await;
    assert_eq!(reply.status, 200, "served once the window ended");
    assert!(started.elapsed() < Duration::from_secs(2));

    // A bound shorter than the server's wait answers 429 at once.
    let impatient =
        RedisRateLimitLayer::fixed_window(&coordination, "slow", 1, Duration::from_secs(30))
            .expect("valid")
            .key(KeyExtractor::global())
            .wait(Duration::from_millis(100), 10);
    let addr = serve(app(impatient)).await;
    assert_eq!(http_get(&client, addr, "/", &[]).await.status, 200);
    let started = tokio::time::Instant::now();
    assert_eq!(http_get(&client, addr, "/", &[]).await.status, 429);
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn stacked_policies_are_all_listed_in_the_fields() {
    use leasehold::coordination::rate_limit::RateLimitPolicy;

    let coordination = Target::Server(ServerKind::Redis7)
        .coordination("stacked")
        .await;
    let layer = RedisRateLimitLayer::stacked(
        &coordination,
        "api",
        [
            RateLimitPolicy::new("second", 10, Duration::from_secs(1)),
            RateLimitPolicy::new("day", 1000, Duration::from_secs(86_400)),
        ],
    )
    .expect("valid")
    .key(KeyExtractor::global())
    .cost(|parts| {
        parts
            .headers
            .get("x-cost")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    })
    .legacy_headers(true);
    let app = Router::new()
        .route(
            "/",
            get(|info: RateLimitInfo| async move {
                let every: Vec<String> = info
                    .policies()
                    .iter()
                    .zip(info.decision().policy_states())
                    .map(|(policy, state)| format!("{}={}", policy.name(), state.remaining()))
                    .collect();
                format!("{} binds; {}", info.policy().name(), every.join(","))
            }),
        )
        .layer(layer);
    let addr = serve(app).await;
    let client = client();
    // Named by the layer too: another stacked layer's "second" is another policy.
    const POLICY: &str = r#""api/second";q=10;w=1, "api/day";q=1000;w=86400"#;

    let reply = http_get(&client, addr, "/", &[]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, "api/second binds; api/second=9,api/day=999");
    assert_eq!(reply.header("ratelimit-policy"), Some(POLICY));
    assert_eq!(
        reply.header("ratelimit"),
        Some(r#""api/second";r=9;t=1, "api/day";r=999;t=86400"#)
    );
    assert_eq!(reply.header("x-ratelimit-limit"), Some("10"));
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("9"));

    let reply = http_get(&client, addr, "/", &[("x-cost", "9")]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("ratelimit"),
        Some(r#""api/second";r=0;t=1, "api/day";r=990;t=86400"#)
    );

    // The second is spent (within it, as three loopback requests are): 429, and the day
    // counts nothing more.
    let reply = http_get(&client, addr, "/", &[]).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert_eq!(reply.header("ratelimit-policy"), Some(POLICY));
    assert_eq!(
        reply.header("ratelimit"),
        Some(r#""api/second";r=0;t=1, "api/day";r=990;t=86400"#)
    );
    assert_eq!(reply.header("x-ratelimit-limit"), Some("10"));
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(reply.header("x-ratelimit-reset"), Some("1"));
    // One field line each: every policy is a member of the same List.
    assert_eq!(reply.headers.get_all("ratelimit").iter().count(), 1);
    assert_eq!(reply.headers.get_all("ratelimit-policy").iter().count(), 1);
}

/// The rate-limit layer's circuit breaker, as the concurrency layer's: repeated
/// unavailability opens it (each request until then answered within the decision timeout),
/// an open circuit answers at once, a failed probe opens it again, and only a probe that
/// succeeds closes it.
#[tokio::test]
async fn the_circuit_breaker_fails_fast_then_heals_after_a_probe() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let coordination = redis(server.url(), &unique_prefix("rl-breaker")).await;
    let timeout = Duration::from_secs(1);
    let layer =
        RedisRateLimitLayer::fixed_window(&coordination, "breaker", 100, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .timeout(timeout)
            .circuit_breaker(
                CircuitBreaker::new()
                    .failure_threshold(2)
                    .open_for(Duration::from_millis(300)),
            );
    assert_eq!(layer.circuit_state(), Some(CircuitState::Closed));
    let addr = serve(app(layer.clone())).await;
    let client = client();
    assert_eq!(http_get(&client, addr, "/", &[]).await.status, 200);

    server.stop();
    let stopped = Instant::now();
    for _ in 0..2 {
        assert_eq!(http_get(&client, addr, "/", &[]).await.status, 503);
        assert!(
            stopped.elapsed() < 2 * timeout + Duration::from_millis(500),
            "{:?} after the stop",
            stopped.elapsed()
        );
    }
    support::eventually("the circuit opens", async || {
        layer.circuit_state() == Some(CircuitState::Open)
    })
    .await;
    // Open: answered without waiting for the backend (a quarter of its timeout at most).
    let start = Instant::now();
    let reply = http_get(&client, addr, "/", &[]).await;
    assert_eq!(reply.status, 503);
    assert!(reply.header("retry-after").is_some());
    assert!(start.elapsed() < timeout / 4, "{:?}", start.elapsed());

    // Past the open time the next request probes; it fails, and the circuit opens again.
    support::eventually("the open time is over", async || {
        layer.circuit_state() == Some(CircuitState::HalfOpen)
    })
    .await;
    assert_eq!(http_get(&client, addr, "/", &[]).await.status, 503);
    assert_eq!(
        layer.circuit_state(),
        Some(CircuitState::Open),
        "a failed probe opens it again"
    );

    server.start_again();
    let healed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if http_get(&client, addr, "/", &[]).await.status == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        healed.is_ok(),
        "a probe closes the circuit once Redis is back"
    );
    assert_eq!(layer.circuit_state(), Some(CircuitState::Closed));
}

/// `INCREX` on a server that has it, but denied by an ACL (an allow-list written before the
/// command existed): the layer's decisions of one permit go as plain commands instead, the
/// limit holds exactly, and the handle skips `INCREX` for the re-probe period rather than
/// meeting the refusal on every request.
#[tokio::test]
async fn increx_denied_by_an_acl_falls_back_through_the_layer() {
    let module = support::increx_module::module_path();
    let module = module.to_str().expect("utf-8 module path");
    let server = Server::start(ServerKind::Redis7, &["--loadmodule", module]);
    let backend = RedisBackend::standalone(server.acl_user(&["-increx"]))
        .key_prefix(unique_prefix("increx-acl"))
        .connect()
        .await
        .expect("connect");
    let coordination = Coordination::from(backend.clone());
    let layer = RedisRateLimitLayer::fixed_window(&coordination, "api", 3, Duration::from_secs(60))
        .expect("valid")
        .key(KeyExtractor::global());
    let addr = serve(app(layer)).await;
    let client = client();
    let statuses: Vec<u16> = {
        let mut statuses = Vec::new();
        for _ in 0..5 {
            statuses.push(http_get(&client, addr, "/", &[]).await.status.as_u16());
        }
        statuses
    };
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert!(
        !backend.capabilities().should_try_increx(),
        "INCREX is skipped now"
    );
    let rejected = server
        .info_field("commandstats", "cmdstat_increx")
        .and_then(|stat| {
            stat.split(',')
                .find_map(|field| field.strip_prefix("rejected_calls=")?.parse::<u64>().ok())
        });
    assert_eq!(rejected, Some(1), "refused once, then not sent again");
    assert_eq!(support::target::command_calls(&server, "incr"), 5);
}

/// One IPv6 host sending each request from a new address of its `/64` (as any cloud VM can):
/// held to one budget, by the peer address and behind trusted proxies alike; another `/64`
/// has its own. Per address on request (`ipv6_prefix(128)`), each address is a client.
#[tokio::test]
async fn a_host_rotating_through_its_ipv6_64_is_held_to_one_budget() {
    use tower::{Layer, ServiceExt, service_fn};

    let coordination = Target::Server(ServerKind::Redis7)
        .coordination("ipv6-64")
        .await;
    let service = |name: &str, key: KeyExtractor| {
        RedisRateLimitLayer::fixed_window(&coordination, name, 3, Duration::from_secs(60))
            .expect("valid")
            .key(key)
            .layer(service_fn(|_request: http::Request<String>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                    bytes::Bytes::from_static(b"ok"),
                )))
            }))
    };
    // From the host itself, or through a trusted proxy that names it in X-Forwarded-For.
    let direct = |address: String| {
        http::Request::builder()
            .extension(
                format!("[{address}]:4000")
                    .parse::<std::net::SocketAddr>()
                    .expect("addr"),
            )
            .body(String::new())
            .expect("request")
    };
    let proxied = |address: String| {
        http::Request::builder()
            .extension(std::net::SocketAddr::from(([10, 0, 0, 2], 41_000)))
            .header("x-forwarded-for", address)
            .body(String::new())
            .expect("request")
    };
    let trusted = || KeyExtractor::client_ip(["10.0.0.0/8".parse().expect("a network")]);
    for (name, key, request) in [
        (
            "peer",
            KeyExtractor::peer_ip(),
            &direct as &dyn Fn(String) -> http::Request<String>,
        ),
        ("proxied", trusted(), &proxied),
    ] {
        let service = service(name, key);
        let mut statuses = Vec::new();
        for host in 0..8u16 {
            let address = format!("2001:db8:1:2:{host:x}:{:x}:{host:x}:1", host * 7 + 1);
            let reply = service
                .clone()
                .oneshot(request(address))
                .await
                .expect("infallible");
            statuses.push(reply.status().as_u16());
        }
        assert_eq!(statuses, [200, 200, 200, 429, 429, 429, 429, 429], "{name}");
        let neighbour = service
            .clone()
            .oneshot(request("2001:db8:1:3::1".into()))
            .await
            .expect("infallible");
        assert_eq!(
            neighbour.status(),
            200,
            "{name}: another /64 is another client"
        );
    }
    let per_address = service(
        "per-address",
        KeyExtractor::peer_ip().ipv6_prefix(128).expect("valid"),
    );
    for host in 0..5u16 {
        let reply = per_address
            .clone()
            .oneshot(direct(format!("2001:db8:1:2::{host:x}")))
            .await
            .expect("infallible");
        assert_eq!(reply.status(), 200, "per address, each its own budget");
    }
}

/// Whatever answers a request (the deny cache, Redis, or the memory backend in the call),
/// the layer's limiter counts it once, and a rejection the deny cache knows never reaches
/// Redis.
#[tokio::test]
async fn every_request_is_decided_and_counted_once_whoever_answers_it() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let evalsha = || command_calls(&server, "evalsha") + command_calls(&server, "eval");
    let steps = || evalsha() + command_calls(&server, "incr");
    let coordination = redis(server.unix_url(), &unique_prefix("once")).await;
    let limit = |coordination: &Coordination| {
        RedisRateLimitLayer::fixed_window(coordination, "api", 2, Duration::from_secs(60))
            .expect("valid")
            .deny_cache(10)
    };
    let layer = limit(&coordination);
    let limiter = layer.limiter().clone();
    let addr = serve(app(layer)).await;
    let client = client();
    let before = steps();
    let mut statuses = Vec::new();
    for _ in 0..20 {
        statuses.push(http_get(&client, addr, "/", &[]).await.status);
    }
    assert_eq!(statuses.iter().filter(|status| **status == 200).count(), 2);
    assert_eq!(statuses.iter().filter(|status| **status == 429).count(), 18);
    // Two grants and the first rejection reached Redis; the deny cache answered the rest.
    assert_eq!(steps() - before, 3);
    let stats = limiter.statistics();
    assert_eq!((stats.granted(), stats.rejected()), (2, 18));

    let memory = Coordination::memory();
    let layer = limit(&memory);
    let limiter = layer.limiter().clone();
    let addr = serve(app(layer)).await;
    for _ in 0..5 {
        http_get(&client, addr, "/", &[]).await;
    }
    let stats = limiter.statistics();
    assert_eq!((stats.granted(), stats.rejected()), (2, 3));
}

/// With `fields_when_remaining_at_most(2)`, allowed responses carry the fields only once two
/// permits or fewer are left; the 429 carries them always. Through Redis.
#[tokio::test]
async fn the_fields_can_be_sent_only_when_little_quota_is_left() {
    let coordination = redis(
        shared(ServerKind::Redis7).url(),
        &unique_prefix("fields-low"),
    )
    .await;
    let layer = RedisRateLimitLayer::fixed_window(&coordination, "low", 5, Duration::from_secs(60))
        .expect("valid")
        .key(KeyExtractor::global())
        .fields_when_remaining_at_most(2);
    let addr = serve(app(layer)).await;
    let client = client();
    let mut seen = Vec::new();
    for _ in 0..6 {
        let reply = http_get(&client, addr, "/", &[]).await;
        seen.push((
            reply.status.as_u16(),
            reply.header("ratelimit").map(str::to_owned),
        ));
    }
    // `t` (seconds until the window ends, rounded up) is 60, or 59 under a slow run.
    let remaining: Vec<Option<String>> = seen
        .iter()
        .map(|(_, field)| {
            field.as_deref().map(|field| {
                let (member, t) = field.rsplit_once(";t=").expect("a t parameter");
                assert!(matches!(t, "59" | "60"), "{field}");
                member.to_owned()
            })
        })
        .collect();
    let expected = [
        None,
        None,
        Some("r=2"),
        Some("r=1"),
        Some("r=0"),
        Some("r=0"),
    ];
    for (got, want) in remaining.iter().zip(expected) {
        assert_eq!(
            got.as_deref(),
            want.map(|r| format!("\"low\";{r}")).as_deref(),
            "{seen:?}"
        );
    }
    assert_eq!(seen[5].0, 429);
}

/// With `partition_keys_in_fields(secret)`, each member of the `RateLimit` field carries a
/// `pk` Byte Sequence: the same for one client's requests (and for another layer with the
/// same secret, as in another replica), different for another client or another secret, and
/// never the key itself. On the 429 too.
#[tokio::test]
async fn the_partition_key_is_an_opaque_tag_of_the_client_key() {
    let coordination = redis(shared(ServerKind::Redis7).url(), &unique_prefix("pk")).await;
    let layer = |secret: &str| {
        RedisRateLimitLayer::fixed_window(&coordination, "pk", 2, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::header_in_clear("x-api-key").expect("valid"))
            .partition_keys_in_fields(secret)
            .expect("a long enough secret")
    };
    // A secret too short to keep an address from being found again is refused.
    for short in ["", "fifteen bytes.."] {
        let refused =
            RedisRateLimitLayer::fixed_window(&coordination, "pk", 2, Duration::from_secs(60))
                .expect("valid")
                .partition_keys_in_fields(short)
                .expect_err("too short");
        assert_eq!(refused.kind(), leasehold::ErrorKind::InvalidArgument);
    }
    let replica = serve(app(layer("a shared secret, 16+ bytes"))).await;
    let other_replica = serve(app(layer("a shared secret, 16+ bytes"))).await;
    let rotated = serve(app(layer("another secret, 16+ bytes"))).await;
    let client = client();
    let pk = |reply: &support::http::Reply| {
        let field = reply
            .header("ratelimit")
            .expect("the RateLimit field")
            .to_owned();
        let (_, tag) = field
            .split_once(";pk=:")
            .unwrap_or_else(|| panic!("no pk: {field}"));
        let tag = tag.strip_suffix(':').expect("a Byte Sequence").to_owned();
        assert_eq!(tag.len(), 16, "96 bits in base64: {field}");
        tag
    };
    let alice = pk(&http_get(&client, replica, "/", &[("x-api-key", "alice")]).await);
    let again = pk(&http_get(&client, other_replica, "/", &[("x-api-key", "alice")]).await);
    assert_eq!(alice, again, "one tag per client, in every replica");
    let bob = pk(&http_get(&client, replica, "/", &[("x-api-key", "bob")]).await);
    assert_ne!(alice, bob);
    let other_secret = pk(&http_get(&client, rotated, "/", &[("x-api-key", "bob")]).await);
    assert_ne!(bob, other_secret, "another secret, another tag");
    // Alice's third request: 429, with her tag.
    let refused = http_get(&client, replica, "/", &[("x-api-key", "alice")]).await;
    assert_eq!(refused.status, 429);
    assert_eq!(pk(&refused), alice);
}

/// Two nested layers with the legacy fields: the outer one, which has more left, does not
/// overwrite the inner one's fields, so the inner layer's 429 says `X-RateLimit-Remaining: 0`
/// of its own limit; where the outer one binds, its fields are shown.
#[tokio::test]
async fn nested_layers_show_the_legacy_fields_of_the_limit_that_binds() {
    use tower::ServiceExt;
    let coordination = Coordination::memory();
    let minute = Duration::from_secs(60);
    let layer = |name: &str, limit: u64| {
        RedisRateLimitLayer::fixed_window(&coordination, name, limit, minute)
            .expect("valid")
            .key(KeyExtractor::global())
            .legacy_headers(true)
    };
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer("inner", 1))
        .layer(layer("outer", 100));
    let send = async || {
        router
            .clone()
            .oneshot(axum::http::Request::new(axum::body::Body::empty()))
            .await
            .expect("infallible")
    };
    let field = |response: &axum::response::Response, name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let first = send().await;
    assert_eq!(first.status(), 200);
    assert_eq!(field(&first, "x-ratelimit-limit").as_deref(), Some("1"));
    assert_eq!(field(&first, "x-ratelimit-remaining").as_deref(), Some("0"));
    let second = send().await;
    assert_eq!(second.status(), 429);
    assert_eq!(field(&second, "x-ratelimit-limit").as_deref(), Some("1"));
    assert_eq!(
        field(&second, "x-ratelimit-remaining").as_deref(),
        Some("0")
    );

    // The outer layer binds: its fields replace the inner one's.
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer("inner-wide", 100))
        .layer(layer("outer-narrow", 2));
    let reply = router
        .oneshot(axum::http::Request::new(axum::body::Body::empty()))
        .await
        .expect("infallible");
    assert_eq!(field(&reply, "x-ratelimit-limit").as_deref(), Some("2"));
    assert_eq!(field(&reply, "x-ratelimit-remaining").as_deref(), Some("1"));
}

/// The fallback of a layer failing open counts `fallback_keys` clients at once: each is
/// admitted its quota and no more while Redis cannot be reached; one client beyond them
/// takes the place of the client whose window ends first, which may then be admitted
/// again, as the bound's docs say.
#[tokio::test]
async fn the_fail_open_fallback_counts_its_bound_of_clients_apart() {
    // Nothing listens on this port: every step fails at once, unavailable.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let coordination = redis(
        format!("redis://127.0.0.1:{port}"),
        &unique_prefix("fallback"),
    )
    .await;
    let router = |keys: usize| {
        Router::new().route("/", get(|| async { "ok" })).layer(
            RedisRateLimitLayer::fixed_window(&coordination, "outage", 1, Duration::from_secs(60))
                .expect("valid")
                .key(KeyExtractor::header_in_clear("x-client").expect("a header name"))
                .failure_policy(FailurePolicy::FailOpen)
                .fallback_keys(keys),
        )
    };
    let status = async |router: &Router, client: &str| {
        support::http::status_with(router, &[("x-client", client)])
            .await
            .as_u16()
    };
    for (keys, forgotten) in [(4, 429), (3, 200)] {
        let router = router(keys);
        for client in ["a", "b", "c"] {
            assert_eq!(status(&router, client).await, 200, "{client}, bound {keys}");
            assert_eq!(status(&router, client).await, 429, "{client}, bound {keys}");
        }
        assert_eq!(status(&router, "d").await, 200, "bound {keys}");
        assert_eq!(
            status(&router, "a").await,
            forgotten,
            "a, whose window ends first, with a bound of {keys}"
        );
    }
}
