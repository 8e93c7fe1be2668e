//! `RedisConcurrencyLimitLayer` over real HTTP against real Redis: streams hold their slot
//! for the life of the body, and give it back on completion, disconnect, crash or loss.

#![cfg(feature = "axum")]

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body as AxumBody;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::semaphore::{Capacity, KeyedSemaphore};
use leasehold::layer::concurrency_limit::RedisConcurrencyLimitLayer;
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::{CircuitBreaker, CircuitState, FailurePolicy};
use support::http::{client, get as http_get, serve};
use support::{Server, ServerKind, shared, unique_prefix};

/// Waits for slots to be freed or taken: far below any lease used here.
const PROMPTLY: Duration = Duration::from_secs(2);

async fn redis(url: String, prefix: &str) -> Coordination {
    RedisBackend::standalone(url)
        .key_prefix(prefix)
        .connect()
        .await
        .expect("connect")
        .into()
}

/// A body that sends `tick\n` every 20 ms, `ticks` times (forever without a count).
struct Ticks {
    interval: tokio::time::Interval,
    left: Option<u32>,
}

impl Body for Ticks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.left == Some(0) {
            return Poll::Ready(None);
        }
        std::task::ready!(self.interval.poll_tick(cx));
        if let Some(left) = &mut self.left {
            *left -= 1;
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"tick\n")))))
    }
}

/// A body that sends one chunk and then nothing more, its client still connected.
struct Stalls {
    sent: bool,
}

impl Body for Stalls {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if std::mem::replace(&mut self.sent, true) {
            Poll::Pending
        } else {
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"tick\n")))))
        }
    }
}

/// A body that sends 64 KiB chunks as fast as it is polled, forever.
struct Flood;

impl Body for Flood {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        static CHUNK: [u8; 64 * 1024] = [b'x'; 64 * 1024];
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&CHUNK)))))
    }
}

fn app(layer: RedisConcurrencyLimitLayer) -> Router {
    Router::new()
        .route("/flood", get(|| async { AxumBody::new(Flood) }))
        .route(
            "/stuck",
            get(|| async { std::future::pending::<&'static str>().await }),
        )
        .route(
            "/stall",
            get(|| async { AxumBody::new(Stalls { sent: false }) }),
        )
        .route(
            "/stream",
            get(|uri: http::Uri| async move {
                // `?ticks=N` for a finite stream.
                let left = uri
                    .query()
                    .and_then(|query| query.strip_prefix("ticks="))
                    .and_then(|n| n.parse().ok());
                AxumBody::new(Ticks {
                    interval: tokio::time::interval(Duration::from_millis(20)),
                    left,
                })
            }),
        )
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

type HttpClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Empty<Bytes>,
>;

/// Opens `GET /stream` and waits for its status and, when 200, its first chunk.
async fn open_stream(
    client: &HttpClient,
    addr: SocketAddr,
) -> (StatusCode, Incoming, http::HeaderMap) {
    open(client, addr, "/stream").await
}

/// Opens `GET path` and waits for its status and, when 200, its first chunk.
async fn open(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
) -> (StatusCode, Incoming, http::HeaderMap) {
    open_as(client, addr, path, "").await
}

/// [`open`] for the client that `x-client` names.
async fn open_as(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
    who: &str,
) -> (StatusCode, Incoming, http::HeaderMap) {
    let request = Request::get(format!("http://{addr}{path}"))
        .header("x-client", who)
        .body(Empty::new())
        .expect("valid request");
    let response = tokio::time::timeout(PROMPTLY, client.request(request))
        .await
        .expect("a response in time")
        .expect("a response");
    let (parts, mut body) = response.into_parts();
    if parts.status == StatusCode::OK {
        let frame = tokio::time::timeout(PROMPTLY, body.frame())
            .await
            .expect("a first chunk in time");
        assert!(frame.is_some_and(|f| f.is_ok()), "a first chunk");
    }
    (parts.status, body, parts.headers)
}

/// Polls `held` until it equals `expected`, for at most `within`; returns how long it took.
async fn held_becomes(
    semaphore: &KeyedSemaphore,
    expected: (Option<u32>, Option<u32>),
    within: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        let held = semaphore.held(b"ip:127.0.0.1").await.expect("held");
        if held == expected {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "held {held:?}, expected {expected:?} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn one_stream_over_capacity_gets_a_429_and_a_disconnect_frees_its_slot() {
    let coordination = redis(shared(ServerKind::Redis7).url(), &unique_prefix("cl-cap")).await;
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "streams", Capacity::per_key(3))
        .expect("valid")
        .key(KeyExtractor::peer_ip());
    let semaphore = layer.semaphore().clone();
    let addr = serve(app(layer)).await;
    let client = client();

    let mut open = Vec::new();
    for _ in 0..3 {
        let (status, body, _) = open_stream(&client, addr).await;
        assert_eq!(status, StatusCode::OK);
        open.push(body);
    }
    assert_eq!(
        semaphore.held(b"ip:127.0.0.1").await.expect("held"),
        (Some(3), None)
    );

    let (status, _, headers) = open_stream(&client, addr).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry_after), "{retry_after}");
    assert_eq!(
        headers["ratelimit-policy"].to_str().unwrap(),
        r#""streams";q=3;qu="concurrent-requests""#
    );

    // A client that goes away mid-stream frees its slot at once, not after its lease (30 s).
    drop(open.pop());
    held_becomes(&semaphore, (Some(2), None), PROMPTLY).await;
    let (status, body, _) = open_stream(&client, addr).await;
    assert_eq!(status, StatusCode::OK);
    open.push(body);

    drop(open);
    held_becomes(&semaphore, (Some(0), None), PROMPTLY).await;
}

#[tokio::test]
async fn a_finished_stream_frees_its_slot_and_nothing_is_left() {
    let prefix = unique_prefix("cl-done");
    let server = shared(ServerKind::Redis7);
    let coordination = redis(server.url(), &prefix).await;
    let layer =
        RedisConcurrencyLimitLayer::new(&coordination, "done", Capacity::per_key(1).and_global(5))
            .expect("valid");
    let addr = serve(app(layer)).await;
    let client = client();

    for _ in 0..3 {
        let reply = http_get(&client, addr, "/stream?ticks=3", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "tick\n".repeat(3));
    }
    // Released as each body ended, so one per-key slot was enough, and no key remains.
    assert_eq!(server.count_keys(prefix.as_bytes()), 0);
}

#[tokio::test]
async fn a_stream_longer_than_its_lease_keeps_its_slot() {
    let prefix = unique_prefix("cl-renew");
    let server = shared(ServerKind::Redis7);
    let coordination = redis(server.url(), &prefix).await;
    let lease = Duration::from_millis(300);
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "renew", Capacity::global(1))
        .expect("valid")
        .lease(lease);
    let semaphore = layer.semaphore().clone();
    let addr = serve(app(layer)).await;
    let client = client();

    // 50 ticks of 20 ms: a second, over three leases.
    let reply = tokio::spawn({
        let client = client.clone();
        async move { http_get(&client, addr, "/stream?ticks=50", &[]).await }
    });
    held_becomes(&semaphore, (None, Some(1)), PROMPTLY).await;
    let global: Vec<u8> = [prefix.as_bytes(), b"|sem:{5:renew}:global"].concat();
    let mut checks = 0;
    while !reply.is_finished() {
        // Renewed every half lease: the key's expiry never runs out while the body streams.
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&global)
            .query(&mut server.connection())
            .expect("PTTL");
        if pttl <= 0 {
            // Gone: released as the body ended, while the client still reads the end (it
            // finishes at once), or lapsed mid-stream (the stream goes on for its ticks).
            let ended = tokio::time::timeout(Duration::from_millis(200), async {
                while !reply.is_finished() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .is_ok();
            assert!(ended, "the permit lapsed mid-stream ({pttl})");
            break;
        }
        checks += 1;
        assert_eq!(semaphore.held(b"").await.expect("held"), (None, Some(1)));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reply = reply.await.expect("the stream");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, "tick\n".repeat(50), "streamed whole, not cut");
    assert!(
        checks >= 10,
        "checked throughout the second ({checks} times)"
    );
    assert_eq!(server.count_keys(prefix.as_bytes()), 0);
}

#[tokio::test]
async fn a_stream_whose_permit_is_lost_is_cut() {
    let prefix = unique_prefix("cl-lost");
    let server = shared(ServerKind::Redis7);
    let coordination = redis(server.url(), &prefix).await;
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "lost", Capacity::global(5))
        .expect("valid")
        .lease(Duration::from_millis(400));
    let addr = serve(app(layer)).await;
    let client = client();

    let (status, mut body, _) = open_stream(&client, addr).await;
    assert_eq!(status, StatusCode::OK);
    // The permit disappears (as after a failover that lost it): the next renewal, due
    // within half a lease, finds it gone and the stream ends in an error.
    let global: Vec<u8> = [prefix.as_bytes(), b"|sem:{4:lost}:global"].concat();
    let deleted: i64 = redis::cmd("DEL")
        .arg(&global)
        .query(&mut server.connection())
        .expect("DEL");
    assert_eq!(deleted, 1);
    let cut = tokio::time::timeout(PROMPTLY, async {
        loop {
            match body.frame().await {
                Some(Ok(_)) => continue,
                Some(Err(_)) => return true,
                None => return false,
            }
        }
    })
    .await
    .expect("the stream ends within the renewal period");
    assert!(cut, "the stream is cut with an error, not completed");
    assert_eq!(server.count_keys(prefix.as_bytes()), 0);
}

#[tokio::test]
async fn a_body_that_stalls_is_cut_at_the_longest_hold_and_frees_its_slot() {
    let coordination = redis(shared(ServerKind::Redis7).url(), &unique_prefix("cl-hold")).await;
    let max_hold = Duration::from_millis(400);
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "hold", Capacity::global(1))
        .expect("valid")
        .max_hold(max_hold);
    let semaphore = layer.semaphore().clone();
    let addr = serve(app(layer)).await;
    let client = client();

    // A stream that ends within the hold ends as it should.
    let (status, mut body, _) = open(&client, addr, "/stream?ticks=3").await;
    assert_eq!(status, StatusCode::OK);
    assert!(stream_until_the_end(&mut body, PROMPTLY).await.is_ok());
    held_becomes(&semaphore, (None, Some(0)), PROMPTLY).await;

    // A body that stalls while its client stays connected holds the only slot...
    let opened = Instant::now();
    let (status, mut body, _) = open(&client, addr, "/stall").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(http_get(&client, addr, "/", &[]).await.status, 429);
    // ...until the longest hold, when it is cut and its slot comes back.
    let cut = stream_until_the_end(&mut body, PROMPTLY)
        .await
        .expect_err("cut with an error");
    let held_for = cut.duration_since(opened);
    assert!(held_for >= max_hold, "cut after {held_for:?}");
    assert!(
        held_for < max_hold + Duration::from_millis(500),
        "cut after {held_for:?}"
    );
    held_becomes(&semaphore, (None, Some(0)), PROMPTLY).await;
    assert_eq!(http_get(&client, addr, "/", &[]).await.status, 200);
}

/// By default a response holds its slot for at most [`DEFAULT_MAX_HOLD`] (an hour): a body
/// that stalls while its client stays connected is cut then, and its slot comes back. On
/// the memory backend with the clock paused, so the hour passes at once.
#[tokio::test(start_paused = true)]
async fn a_stalled_body_is_cut_at_the_default_longest_hold() {
    use leasehold::layer::concurrency_limit::{DEFAULT_MAX_HOLD, HoldLimitReached};
    use tower::{Layer, ServiceExt};
    let coordination = Coordination::memory();
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "default-hold", Capacity::global(1))
        .expect("valid");
    let semaphore = layer.semaphore().clone();
    let service = layer.layer(tower::service_fn(|_: Request<AxumBody>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Stalls { sent: false }))
    }));
    let opened = tokio::time::Instant::now();
    let response = service
        .oneshot(Request::new(AxumBody::empty()))
        .await
        .expect("served");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(semaphore.held(b"").await.expect("held"), (None, Some(1)));
    let mut body = response.into_body();
    let cut = loop {
        match body.frame().await {
            Some(Ok(_)) => continue,
            Some(Err(err)) => break err,
            None => panic!("a stalled body completed"),
        }
    };
    assert!(cut.is::<HoldLimitReached>(), "{cut}");
    let held = opened.elapsed();
    assert!(
        held >= DEFAULT_MAX_HOLD && held < DEFAULT_MAX_HOLD + Duration::from_secs(1),
        "cut after {held:?}"
    );
    assert_eq!(semaphore.held(b"").await.expect("held"), (None, Some(0)));
}

/// The longest hold frees a slot whatever the response is doing: a handler that never
/// returns, and a body the client stops reading (its socket buffers fill, and the server
/// stops polling the body), each with its client connected. Timed from the request.
#[tokio::test]
async fn the_longest_hold_frees_the_slot_of_a_stuck_handler_and_of_an_unread_body() {
    let coordination = redis(shared(ServerKind::Redis7).url(), &unique_prefix("cl-stuck")).await;
    let max_hold = Duration::from_millis(400);
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "stuck", Capacity::global(1))
        .expect("valid")
        .max_hold(max_hold);
    let semaphore = layer.semaphore().clone();
    let addr = serve(app(layer)).await;

    for path in ["/stuck", "/flood"] {
        // A raw client that sends its request and never reads.
        let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let sent = Instant::now();
        tokio::io::AsyncWriteExt::write_all(
            &mut socket,
            format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").as_bytes(),
        )
        .await
        .expect("request sent");
        held_becomes(&semaphore, (None, Some(1)), PROMPTLY).await;
        let freed = held_becomes(&semaphore, (None, Some(0)), PROMPTLY).await;
        let held_for = sent.elapsed();
        assert!(held_for >= max_hold, "{path}: freed after {held_for:?}");
        assert!(
            held_for < max_hold + Duration::from_millis(700),
            "{path}: freed after {held_for:?} ({freed:?} of polling)"
        );
        drop(socket);
    }
}

/// Reads `body` until it ends: `Ok(())` when it completed, `Err(at)` when it failed.
async fn stream_until_the_end(body: &mut Incoming, within: Duration) -> Result<(), Instant> {
    tokio::time::timeout(within, async {
        loop {
            match body.frame().await {
                Some(Ok(_)) => continue,
                Some(Err(_)) => return Err(Instant::now()),
                None => return Ok(()),
            }
        }
    })
    .await
    .expect("the stream ends in time")
}

/// An app whose streams hold permits with a 2 s lease, reaching Redis through a fault proxy.
async fn streams_through_a_proxy(test: &str) -> (support::proxy::Proxy, SocketAddr, HttpClient) {
    streams_through_a_proxy_with_prefix(&unique_prefix(test)).await
}

async fn streams_through_a_proxy_with_prefix(
    prefix: &str,
) -> (support::proxy::Proxy, SocketAddr, HttpClient) {
    let proxy = support::proxy::Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = redis(proxy.url(), prefix).await;
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "stall", Capacity::global(5))
        .expect("valid")
        .lease(Duration::from_secs(2));
    let addr = serve(app(layer)).await;
    (proxy, addr, client())
}

#[tokio::test]
async fn a_stream_survives_a_stall_of_half_its_lease() {
    let (proxy, addr, client) = streams_through_a_proxy("cl-short-stall").await;
    let opened = Instant::now();
    // 150 ticks of 20 ms: three seconds, past the first lease.
    let request = Request::get(format!("http://{addr}/stream?ticks=150"))
        .body(Empty::new())
        .expect("valid request");
    let response = client.request(request).await.expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    // The renewal at 1 s meets a stall of 1 s.
    tokio::time::sleep_until((opened + Duration::from_millis(800)).into()).await;
    proxy.stall();
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.pass();
    assert_eq!(
        stream_until_the_end(&mut body, Duration::from_secs(10)).await,
        Ok(()),
        "the stream completes"
    );
    assert!(
        opened.elapsed() > Duration::from_millis(2500),
        "past the first lease"
    );
}

#[tokio::test]
async fn a_stream_is_cut_when_a_stall_outlasts_its_lease() {
    let (proxy, addr, client) = streams_through_a_proxy("cl-long-stall").await;
    let opened = Instant::now();
    let (status, mut body, _) = open_stream(&client, addr).await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep_until((opened + Duration::from_millis(800)).into()).await;
    proxy.stall();
    let cut_at = stream_until_the_end(&mut body, Duration::from_secs(5))
        .await
        .expect_err("cut with PermitLost");
    proxy.pass();
    // When the permit's estimate ran out: its 2 s lease, counted from before it was taken.
    let at = cut_at - opened;
    assert!(
        at >= Duration::from_millis(1800) && at <= Duration::from_millis(2500),
        "cut {at:?} after the stream opened"
    );
}

#[tokio::test]
async fn a_client_gone_during_the_release_still_frees_the_slot() {
    let prefix = unique_prefix("cl-release-gone");
    let (proxy, addr, client) = streams_through_a_proxy_with_prefix(&prefix).await;
    let server = shared(ServerKind::Redis7);
    let opened = Instant::now();
    // Ten ticks: the body ends after about 200 ms, while Redis does not answer.
    let request = Request::get(format!("http://{addr}/stream?ticks=10"))
        .body(Empty::new())
        .expect("valid request");
    let response = client.request(request).await.expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    assert!(
        body.frame().await.is_some_and(|f| f.is_ok()),
        "a first chunk"
    );
    proxy.stall();
    // The body's end waits for the release, which waits for Redis: the client goes away.
    tokio::time::sleep_until((opened + Duration::from_millis(300)).into()).await;
    drop(body);
    drop(client);
    tokio::time::sleep_until((opened + Duration::from_millis(500)).into()).await;
    proxy.pass();
    // The release still lands, long before the 2 s lease would have expired.
    support::eventually("the slot is freed", async || {
        server.count_keys(prefix.as_bytes()) == 0
    })
    .await;
    assert!(
        opened.elapsed() < Duration::from_millis(1800),
        "freed by the release, not by expiry: {:?}",
        opened.elapsed()
    );
}

/// Seed 004's Sentinel row: a primary's death is transient for the streams in flight. A
/// permit replicated before the failover (here made sure of with `WAIT`) is renewed on the
/// new primary (the renewals that meet the dead one are retried while the estimate lasts)
/// and the stream goes on past its first lease; new streams are served once the new
/// primary is known. (A permit that did not replicate is found lost at its next renewal and
/// the stream is cut: `a_stream_whose_permit_is_lost_is_cut`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_rides_out_a_sentinel_failover() {
    // Long enough for the sentinels to agree and the renewal to find the new primary.
    const LEASE: Duration = Duration::from_secs(10);
    let setup = std::sync::Arc::new(support::SentinelSetup::start(ServerKind::Redis7));
    let coordination: Coordination =
        RedisBackend::sentinel(setup.sentinel_urls(), setup.service_name())
            .key_prefix(unique_prefix("cl-sentinel"))
            .connect()
            .await
            .expect("connect through sentinel")
            .into();
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "failover", Capacity::global(5))
        .expect("valid")
        .lease(LEASE);
    let addr = serve(app(layer)).await;
    let client = client();
    let opened = Instant::now();
    let (status, mut body, _) = open_stream(&client, addr).await;
    assert_eq!(status, StatusCode::OK);
    // The permit has reached the replica, so the failover keeps it: a write after it,
    // acknowledged by the replica on the same connection (`WAIT` counts that connection's
    // writes, and replication keeps their order).
    let mut primary = setup.current_master().connection();
    let ((), acked): ((), i64) = redis::pipe()
        .cmd("SET")
        .arg("cl-sentinel-after-the-permit")
        .arg(1)
        .cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query(&mut primary)
        .expect("SET, WAIT");
    assert_eq!(acked, 1, "the replica acknowledged the permit");

    setup.kill_primary().await;

    // Past the first lease, the stream still streams: renewed on the new primary.
    tokio::time::timeout(LEASE + Duration::from_secs(5), async {
        loop {
            match body.frame().await {
                Some(Ok(_)) if opened.elapsed() > LEASE + Duration::from_secs(1) => return,
                Some(Ok(_)) => continue,
                Some(Err(err)) => panic!("the stream was cut after {:?}: {err}", opened.elapsed()),
                None => panic!("the endless stream ended without an error"),
            }
        }
    })
    .await
    .expect("the stream goes on past its first lease");
    drop(body);
    // New streams are served by the new primary.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _body, _) = open_stream(&client, addr).await;
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            Instant::now() < deadline,
            "no stream served after the failover"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_crashed_worker_frees_its_slot_within_one_lease() {
    let prefix = unique_prefix("cl-crash");
    let server = shared(ServerKind::Redis7);
    let lease = Duration::from_millis(1500);
    let mut worker = Worker::spawn(&server.url(), &prefix, lease);
    let client = client();
    let (status, _stream, _) = open_stream(&client, worker.addr).await;
    assert_eq!(status, StatusCode::OK);

    let coordination = redis(server.url(), &prefix).await;
    let semaphore =
        KeyedSemaphore::new(&coordination, "crash", Capacity::global(2)).expect("valid");
    assert_eq!(semaphore.held(b"").await.expect("held"), (None, Some(1)));

    // Killed mid-stream: no release is sent, renewals stop, the lease runs out.
    worker.kill();
    let killed = Instant::now();
    loop {
        let (_, global) = semaphore.held(b"").await.expect("held");
        if global == Some(0) {
            break;
        }
        assert!(
            killed.elapsed() < lease + PROMPTLY,
            "the slot is still taken"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Freed by expiry (the last renewal was at most half a lease before the kill), not
    // by a release.
    assert!(
        killed.elapsed() >= lease / 2 - Duration::from_millis(100),
        "{:?}",
        killed.elapsed()
    );
    assert!(
        semaphore
            .try_acquire(b"", Duration::from_secs(60))
            .await
            .expect("acquire")
            .is_acquired()
    );
}

#[tokio::test]
async fn redis_restarted_mid_stream_fails_closed_then_recovers_with_nothing_leaked() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let prefix = unique_prefix("cl-restart");
    let coordination = redis(server.url(), &prefix).await;
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "restart", Capacity::global(2))
        .expect("valid")
        .lease(Duration::from_millis(600))
        .timeout(Duration::from_millis(300));
    let addr = serve(app(layer)).await;
    let client = client();

    let (status, mut stream, _) = open_stream(&client, addr).await;
    assert_eq!(status, StatusCode::OK);
    server.stop();
    // New requests fail closed, within the layer's timeout of the restart's start.
    let stopped = Instant::now();
    let reply = http_get(&client, addr, "/", &[]).await;
    assert!(
        stopped.elapsed() < Duration::from_secs(1),
        "{:?}",
        stopped.elapsed()
    );
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.retry_after_secs(), 1);
    // The stream in flight cannot renew: it is cut once its permit would have expired.
    let ended = tokio::time::timeout(PROMPTLY, async {
        while let Some(Ok(_)) = stream.frame().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream is cut within about one lease");

    server.start_again();
    let recovered = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if http_get(&client, addr, "/", &[]).await.status == StatusCode::OK {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(recovered.is_ok(), "serves again once Redis is back");
    // A release still in the background on a busy machine completes.
    support::eventually("nothing leaked", async || {
        server.count_keys(prefix.as_bytes()) == 0
    })
    .await;
}

/// A handle through a proxy that refuses every connection from the start (Redis gone), and a
/// layer of `capacity` failing open at once, with `x-client` as the client key.
async fn failing_open(capacity: Capacity, test: &str) -> (support::proxy::Proxy, SocketAddr) {
    let proxy = support::proxy::Proxy::to_port(support::shared(ServerKind::Redis7).port());
    let coordination = redis(proxy.url(), &unique_prefix(test)).await;
    let mut layer = RedisConcurrencyLimitLayer::new(&coordination, "open", capacity)
        .expect("valid")
        .failure_policy(FailurePolicy::FailOpen)
        .timeout(Duration::from_millis(300));
    if capacity.of_each_key().is_some() {
        layer = layer
            .key(KeyExtractor::header_in_clear("x-client").expect("a header name"))
            .fallback_keys(4);
    }
    let addr = serve(app(layer)).await;
    // Redis "down" behind a proxy that keeps its port (a stopped server's could be taken by
    // another test's server, which the handle, connecting again, would reach).
    proxy.refuse();
    proxy.cut();
    (proxy, addr)
}

#[tokio::test]
async fn failing_open_grants_local_permits_up_to_the_capacity() {
    let (_proxy, addr) = failing_open(Capacity::global(2), "cl-open").await;
    let client = client();

    let (first, _a, _) = open_stream(&client, addr).await;
    let (second, _b, _) = open_stream(&client, addr).await;
    let (third, _, _) = open_stream(&client, addr).await;
    assert_eq!(
        (first, second, third),
        (
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        )
    );
}

/// A per-key capacity failing open keeps each client's capacity in this process: a client
/// over its own is a 429, as with the backend up, but other clients are never blamed for an
/// outage (it was one process-wide semaphore of the per-key capacity: every other client a
/// 429); a client beyond the keys the fallback tracks is a 503.
#[tokio::test]
async fn a_per_key_limit_failing_open_keeps_each_clients_capacity_and_answers_no_429_for_an_outage()
{
    let (_proxy, addr) = failing_open(Capacity::per_key(2), "cl-open-key").await;
    let client = client();
    let mut held = Vec::new();
    let mut statuses = Vec::new();
    for who in ["a", "a", "a", "b", "c", "d", "e"] {
        let (status, body, _) = open_as(&client, addr, "/stream", who).await;
        statuses.push(status.as_u16());
        held.push(body);
    }
    // a: two, then over its own capacity; b, c, d: their own; e: a fifth key, beyond the
    // four the fallback tracks.
    assert_eq!(statuses, [200, 200, 429, 200, 200, 200, 503]);
    drop(held);
    support::eventually("e is served once the others' streams end", async || {
        let (status, _body, _) = open_as(&client, addr, "/stream", "e").await;
        status == StatusCode::OK
    })
    .await;
}

/// Repeated unavailability opens the breaker (each request until then answered within the
/// decision timeout, timed from the cut), an open circuit answers at once, a failed probe
/// opens it again, and only a probe that succeeds closes it.
#[tokio::test]
async fn the_circuit_breaker_fails_fast_then_heals_after_a_probe() {
    // Redis "down" behind a proxy that keeps its port: a stopped server's port could be
    // taken by another test's server meanwhile, which the handle, connecting again in the
    // background, would reach.
    let proxy = support::proxy::Proxy::to_port(support::shared(ServerKind::Redis7).port());
    let coordination = redis(proxy.url(), &unique_prefix("cl-breaker")).await;
    let timeout = Duration::from_secs(1);
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "breaker", Capacity::global(2))
        .expect("valid")
        .timeout(timeout)
        .circuit_breaker(
            CircuitBreaker::new()
                .failure_threshold(2)
                .open_for(Duration::from_millis(300)),
        );
    let addr = serve(app(layer.clone())).await;
    let client = client();
    assert_eq!(
        http_get(&client, addr, "/", &[]).await.status,
        StatusCode::OK
    );
    assert_eq!(layer.circuit_state(), Some(CircuitState::Closed));

    proxy.refuse();
    proxy.cut();
    // Requests that outlived the layer's timeout count once the backend's own verdict is
    // in, unless the server answered anything meanwhile (the last request's release, in the
    // background): each is a 503 until the circuit opens, and none waits past the timeout.
    support::eventually("the circuit opens", async || {
        let started = Instant::now();
        assert_eq!(
            http_get(&client, addr, "/", &[]).await.status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        let took = started.elapsed();
        assert!(took < timeout + Duration::from_millis(500), "{took:?}");
        layer.circuit_state() == Some(CircuitState::Open)
    })
    .await;
    // Open: answered without waiting for the backend (a quarter of its timeout at most).
    let start = Instant::now();
    assert_eq!(
        http_get(&client, addr, "/", &[]).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(start.elapsed() < timeout / 4, "{:?}", start.elapsed());

    // Past the open time the next request probes; it fails, and the circuit opens again.
    support::eventually("the open time is over", async || {
        layer.circuit_state() == Some(CircuitState::HalfOpen)
    })
    .await;
    assert_eq!(
        http_get(&client, addr, "/", &[]).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        layer.circuit_state(),
        Some(CircuitState::Open),
        "a failed probe opens it again"
    );

    proxy.pass();
    let healed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if http_get(&client, addr, "/", &[]).await.status == StatusCode::OK {
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

#[tokio::test]
async fn a_missing_key_header_is_a_client_error() {
    let coordination = Coordination::memory();
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "keyed", Capacity::per_key(1))
        .expect("valid")
        .key(KeyExtractor::header("x-api-key").expect("a header name"));
    let addr = serve(app(layer)).await;
    let client = client();
    let reply = http_get(&client, addr, "/", &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let reply = http_get(&client, addr, "/", &[("x-api-key", "k")]).await;
    assert_eq!(reply.status, StatusCode::OK);
}

// ---------------------------------------------------------------------------------------------

/// This test binary run again as a separate worker process, serving the app until killed.
struct Worker {
    child: Child,
    addr: SocketAddr,
}

const WORKER_ENV: &str = "LEASEHOLD_TEST_WORKER";

impl Worker {
    fn spawn(redis_url: &str, prefix: &str, lease: Duration) -> Worker {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = Command::new(exe);
        command
            .args(["worker_process", "--exact", "--ignored", "--nocapture"])
            .env(
                WORKER_ENV,
                format!("{redis_url} {prefix} {}", lease.as_millis()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // The worker dies with this process even if a test panics before killing it.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().expect("spawn the worker");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("worker listening on ") {
                    let _ = tx.send(addr.to_owned());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the worker reports its address")
            .parse()
            .expect("an address");
        Worker { child, addr }
    }

    fn kill(&mut self) {
        self.child.kill().expect("kill the worker");
        self.child.wait().expect("reap the worker");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The worker's entry point: run only by [`Worker::spawn`], as its own process.
#[tokio::test]
#[ignore = "a worker process for a_crashed_worker_frees_its_slot_within_one_lease"]
async fn worker_process() {
    let Ok(setting) = std::env::var(WORKER_ENV) else {
        return;
    };
    let mut fields = setting.split(' ');
    let (Some(url), Some(prefix), Some(lease)) = (fields.next(), fields.next(), fields.next())
    else {
        panic!("{WORKER_ENV} holds `<redis url> <prefix> <lease ms>`");
    };
    let lease = Duration::from_millis(lease.parse().expect("lease in ms"));
    let coordination = redis(url.to_owned(), prefix).await;
    let layer = RedisConcurrencyLimitLayer::new(&coordination, "crash", Capacity::global(2))
        .expect("valid")
        .lease(lease);
    let addr = serve(app(layer)).await;
    println!("worker listening on {addr}");
    // Killed by the test long before this.
    tokio::time::sleep(Duration::from_secs(60)).await;
}
