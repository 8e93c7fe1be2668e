//! The `api_service` example end to end, started as a user would start it, against Redis
//! behind the fault proxy: the limits' headers and JSON refusals (401, 429, 409), the
//! trusted-proxy client key, the stored digest of API keys, a stream holding its slot, then
//! an outage (fail-open where chosen, 503 elsewhere) and the recovery.

#![cfg(feature = "axum")]

mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use http_body_util::BodyExt;
use support::example::{self, Running};
use support::http::{Reply, client, get, open, send};
use support::proxy::Proxy;
use support::{Server, ServerKind, eventually};

/// The example on a server of its own behind a proxy, trusting the loopback address (where
/// the test's requests come from) as its load balancer.
fn start() -> (Server, Proxy, Running) {
    start_with(|_| {})
}

/// As [`start`], with `before` applied to the proxy before the example starts.
fn start_with(before: impl FnOnce(&Proxy)) -> (Server, Proxy, Running) {
    let server = Server::start(ServerKind::Redis7, &[]);
    let proxy = Proxy::to_port(server.port());
    before(&proxy);
    let running = example::start(
        "api_service",
        &[
            ("REDIS_URL", proxy.url()),
            ("TRUSTED_PROXIES", "127.0.0.1".to_owned()),
            ("API_KEYS", "k-0,k-1,k-2,fresh,k-outage".to_owned()),
        ],
    );
    (server, proxy, running)
}

/// Runs `attempt` (given the try's number, for fresh names) until one run fits in `window`,
/// at most three times: a limit per `window` is only checked by requests within one.
async fn within_one_window<T, F: Future<Output = T>>(
    window: Duration,
    mut attempt: impl FnMut(u32) -> F,
) -> T {
    for n in 0..3 {
        let started = Instant::now();
        let result = attempt(n).await;
        if started.elapsed() < window {
            return result;
        }
    }
    panic!("three tries each took longer than {window:?}");
}

fn text(reply: &Reply) -> &str {
    std::str::from_utf8(&reply.body).expect("utf-8")
}

/// A JSON refusal of the example's `json_rejection`, with `Retry-After`.
fn assert_json_refusal(reply: &Reply, status: StatusCode, error: &str) {
    assert_eq!(reply.status, status, "{}", text(reply));
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert!(
        text(reply).starts_with(&format!("{{\"error\":\"{error}\",\"message\":\"")),
        "{}",
        text(reply)
    );
    assert!(reply.retry_after_secs() >= 1);
}

#[tokio::test]
async fn the_limits_answer_with_their_fields_and_one_json_convention() {
    let (server, _proxy, running) = start();
    let (client, addr) = (client(), running.addr);
    assert!(
        running
            .lines
            .iter()
            .any(|l| l.starts_with("backend: redis://")),
        "{:?}",
        running.lines
    );

    // No API key: the hook answers 401, not the key error's 400; the client limit's fields
    // are there, since that layer let the request through.
    let reply = get(&client, addr, "/api/hello", &[]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(
        text(&reply).contains("\"api_key_required\""),
        "{}",
        text(&reply)
    );
    assert!(reply.header("ratelimit-policy").is_some());
    // A key the service did not issue: 401 before the per-key limit counts it.
    let reply = get(&client, addr, "/api/hello", &[("x-api-key", "made-up")]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(
        text(&reply).contains("\"api_key_unknown\""),
        "{}",
        text(&reply)
    );

    // Five per API key, then 429 with the bucket's wait (one token every 2 s).
    let (granted, rejected) = within_one_window(Duration::from_secs(2), |n| {
        let client = client.clone();
        async move {
            // A client of its own per try, so that retries stay within its 10 per second.
            let (key, from) = (format!("k-{n}"), format!("203.0.113.{}", 50 + n));
            let headers = [
                ("x-api-key", key.as_str()),
                ("x-forwarded-for", from.as_str()),
            ];
            let mut granted = Vec::new();
            for _ in 0..5 {
                granted.push(get(&client, addr, "/api/hello", &headers).await);
            }
            (granted, get(&client, addr, "/api/hello", &headers).await)
        }
    })
    .await;
    for reply in &granted {
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(text(reply), "Hello, API client!\n");
        // Both layers' policies, the inner one's first.
        let policies: Vec<&str> = reply
            .headers
            .get_all("ratelimit-policy")
            .iter()
            .map(|v| v.to_str().expect("text"))
            .collect();
        assert_eq!(
            policies,
            [
                "\"api-key\";q=5;w=10",
                "\"client/second\";q=10;w=1, \"client/day\";q=10000;w=86400"
            ]
        );
    }
    assert_json_refusal(&rejected, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert!(
        text(&rejected).ends_with(",\"path\":\"/api/hello\"}\n"),
        "{}",
        text(&rejected)
    );
    assert!(text(&rejected).contains(r#"The \"api-key\" rate limit is exhausted."#));
    assert!((1..=2).contains(&rejected.retry_after_secs()));

    // The handler reads the API-key limit's decision.
    let reply = get(&client, addr, "/api/quota", &[("x-api-key", "fresh")]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        text(&reply).starts_with("{\"limit\":5,\"remaining\":4,"),
        "{}",
        text(&reply)
    );

    // API keys are stored as digests; client keys are the address behind the trusted
    // proxy: the rightmost address not trusted, whatever the client wrote further left.
    let reply = get(
        &client,
        addr,
        "/",
        &[("x-forwarded-for", "198.51.100.9, 203.0.113.3")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", text(&reply));
    let keys: Vec<String> = server.cmd(&["KEYS", "api-service:*"]);
    assert!(
        keys.iter()
            .any(|k| k.starts_with("api-service:|rl:tb:7:api-key:hdr:x-api-key:sha256:")),
        "{keys:?}"
    );
    assert!(
        !keys
            .iter()
            .any(|k| k.contains("k-0") || k.contains("fresh")),
        "{keys:?}"
    );
    assert!(
        keys.contains(&"api-service:|rl:st:6:client:ip:203.0.113.3".to_owned()),
        "{keys:?}"
    );
    assert!(!keys.iter().any(|k| k.contains("198.51.100.9")), "{keys:?}");

    // Ten per second per client: of eleven at once, one is refused by the "client/second"
    // policy.
    let replies = within_one_window(Duration::from_secs(1), |n| {
        let client = client.clone();
        async move {
            let from = format!("203.0.113.{}", 100 + n);
            let requests = (0..11).map(|_| {
                let (client, from) = (client.clone(), from.clone());
                async move { get(&client, addr, "/", &[("x-forwarded-for", &from)]).await }
            });
            all_at_once(requests).await
        }
    })
    .await;
    let refused: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(refused.len(), 1, "{replies:?}");
    // Every request counted in both policies: the day's quota shows the eleven... but for the
    // refused one, which took nothing from either.
    let mut day_left: Vec<&str> = replies
        .iter()
        .filter_map(|r| r.header("ratelimit"))
        .filter_map(|field| field.split(", ").nth(1))
        .collect();
    day_left.sort_unstable();
    assert!(
        day_left
            .first()
            .is_some_and(|d| d.starts_with("\"client/day\";r=9990;")),
        "{day_left:?}"
    );
    assert_json_refusal(refused[0], StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert!(text(refused[0]).contains(r#"The \"client/second\" rate limit"#));
    assert_eq!(refused[0].retry_after_secs(), 1);
}

/// Every future at once, in order (the test needs no more of `futures`).
async fn all_at_once<F: Future + Send + 'static>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let tasks: Vec<_> = futures.map(tokio::spawn).collect();
    let mut outputs = Vec::with_capacity(tasks.len());
    for task in tasks {
        outputs.push(task.await.expect("a request task"));
    }
    outputs
}

#[tokio::test]
async fn a_stream_holds_its_slot_and_a_rebuild_its_lease() {
    let (_server, _proxy, running) = start();
    let (client, addr) = (client(), running.addr);
    let alice = [("x-forwarded-for", "203.0.113.10")];

    // A stream: its first event arrives while it holds alice's only slot.
    let stream = open(&client, Method::GET, addr, "/events", &alice).await;
    assert_eq!(stream.status(), StatusCode::OK);
    let mut body = stream.into_body();
    let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("an event within 5 s")
        .expect("a frame")
        .expect("no error");
    assert_eq!(first.data_ref().map(|d| &d[..]), Some(&b"data: 1\n\n"[..]));

    let second = get(&client, addr, "/events", &alice).await;
    assert_json_refusal(&second, StatusCode::TOO_MANY_REQUESTS, "too_many_streams");
    assert_eq!(
        second.header("ratelimit-policy"),
        Some(
            "\"events\";q=1;qu=\"concurrent-requests\", \"events-global\";q=100;qu=\"concurrent-requests\""
        )
    );
    // Another client has a slot of its own.
    let bob = open(
        &client,
        Method::GET,
        addr,
        "/events",
        &[("x-forwarded-for", "203.0.113.11")],
    )
    .await;
    assert_eq!(bob.status(), StatusCode::OK);
    drop(bob);

    // Leaving the stream frees the slot (released in the background, at once).
    drop(body);
    eventually("alice's slot is free again", async || {
        let stream = open(&client, Method::GET, addr, "/events", &alice).await;
        stream.status() == StatusCode::OK
    })
    .await;

    // Two rebuilds of one report at once: one runs, the other is told to come back.
    let (first, second) = tokio::join!(
        send(&client, Method::POST, addr, "/reports/7/rebuild", &[]),
        send(&client, Method::POST, addr, "/reports/7/rebuild", &[]),
    );
    let (ran, refused) = if first.status == StatusCode::OK {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(ran.status, StatusCode::OK, "{}", text(&ran));
    assert_eq!(ran.header("content-type"), Some("application/json"));
    assert_json_refusal(&refused, StatusCode::CONFLICT, "rebuild_in_progress");
    // The spec's cap, not the running rebuild's whole lease.
    assert!(
        (1..=2).contains(&refused.retry_after_secs()),
        "{}",
        refused.retry_after_secs()
    );
    assert!(
        text(&refused).contains("\"path\":\"/reports/7/rebuild\""),
        "{}",
        text(&refused)
    );
    let token = |reply: &Reply| -> u64 {
        let text = text(reply);
        let start = text.find("\"fencing_token\":").expect("a token") + 16;
        text[start..]
            .trim_end_matches(['}', '\n'])
            .parse()
            .expect("a number")
    };
    // The same report afterwards (once the lease's release, in the background, is done),
    // under a newer token.
    let mut again = None;
    eventually("the report can be rebuilt again", async || {
        let reply = send(&client, Method::POST, addr, "/reports/7/rebuild", &[]).await;
        let done = reply.status == StatusCode::OK;
        again = Some(reply);
        done
    })
    .await;
    let again = again.expect("a reply");
    assert!(
        token(&again) > token(&ran),
        "{} after {}",
        text(&again),
        text(&ran)
    );
    // A path that names no report: the lease's name fails, answered in the service's JSON.
    let reply = send(&client, Method::POST, addr, "/reports/x/rebuild", &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        text(&reply).contains("\"invalid_request\""),
        "{}",
        text(&reply)
    );
}

#[tokio::test]
async fn the_service_boots_while_redis_is_down_and_connects_when_it_is_back() {
    let (_server, proxy, running) = start_with(Proxy::refuse);
    let (client, addr) = (client(), running.addr);
    // Up and answering, by each limit's failure policy.
    let reply = get(&client, addr, "/", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.header("ratelimit").is_none());
    let reply = get(&client, addr, "/events", &[]).await;
    assert_json_refusal(&reply, StatusCode::SERVICE_UNAVAILABLE, "unavailable");

    proxy.pass();
    eventually("the limits decide", async || {
        get(&client, addr, "/", &[])
            .await
            .header("ratelimit")
            .is_some()
    })
    .await;
}

#[tokio::test]
async fn an_outage_fails_open_where_chosen_answers_503_elsewhere_and_recovers() {
    let (_server, proxy, running) = start();
    let (client, addr) = (client(), running.addr);
    let api_key = [("x-api-key", "k-outage")];
    assert_eq!(get(&client, addr, "/", &[]).await.status, StatusCode::OK);

    // Redis goes away: open connections reset, new ones refused.
    proxy.cut();
    proxy.refuse();

    // The rate limits fail open: served, without fields, and the handler knows.
    let reply = get(&client, addr, "/", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.header("ratelimit").is_none(), "{:?}", reply.headers);
    let reply = get(&client, addr, "/api/quota", &api_key).await;
    assert_eq!(
        (reply.status, text(&reply)),
        (StatusCode::OK, "{\"limit\":null}\n")
    );

    // A stream and a rebuild need Redis: 503, in the service's JSON, with Retry-After.
    let reply = get(&client, addr, "/events", &[]).await;
    assert_json_refusal(&reply, StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    let reply = send(&client, Method::POST, addr, "/reports/1/rebuild", &[]).await;
    assert_json_refusal(&reply, StatusCode::SERVICE_UNAVAILABLE, "unavailable");

    // Redis is back: everything works again without a restart.
    proxy.pass();
    eventually("the rate limits decide again", async || {
        let reply = get(&client, addr, "/api/quota", &api_key).await;
        reply.header("ratelimit").is_some() && text(&reply).starts_with("{\"limit\":5,")
    })
    .await;
    let stream = open(&client, Method::GET, addr, "/events", &[]).await;
    assert_eq!(stream.status(), StatusCode::OK);
    drop(stream);
    let reply = send(&client, Method::POST, addr, "/reports/1/rebuild", &[]).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", text(&reply));
}
