//! The answers both layers write, driven in process with `oneshot` over the memory backend:
//! statuses, `Retry-After`, the limit fields, problem+json and key errors.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tower::{Layer, Service, ServiceExt, service_fn};

use crate::Coordination;
use crate::backend::memory::MemoryBackend;
use crate::layer::concurrency_limit::{Capacity, RedisConcurrencyLimitLayer};
use crate::layer::key::KeyExtractor;
use crate::layer::rate_limit::RedisRateLimitLayer;
use crate::layer::{Rejection, RejectionKind};

const MINUTE: Duration = Duration::from_secs(60);

type Reply = std::future::Ready<Result<Response<Full<Bytes>>, Infallible>>;
/// The inner service: `200 ok`.
type Inner = tower::util::ServiceFn<fn(Request<()>) -> Reply>;

fn inner() -> Inner {
    service_fn(|_| std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))))
}

/// The status, the headers and the body of `layer`'s answer to a request without headers.
async fn answer<L, S>(layer: &L) -> (StatusCode, http::HeaderMap, String)
where
    L: Layer<Inner, Service = S>,
    S: Service<Request<()>, Response = Response<super::ResponseBody<Full<Bytes>>>>,
    S::Error: std::fmt::Debug,
{
    let service = layer.layer(inner());
    let response = service.oneshot(Request::new(())).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("a written body").to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn rate(coordination: &Coordination) -> RedisRateLimitLayer {
    RedisRateLimitLayer::fixed_window(coordination, "api", 1, MINUTE)
        .expect("valid")
        .key(KeyExtractor::global())
}

fn concurrency(coordination: &Coordination) -> RedisConcurrencyLimitLayer {
    RedisConcurrencyLimitLayer::new(coordination, "streams", Capacity::global(1)).expect("valid")
}

#[tokio::test]
async fn a_rate_limit_rejection_is_a_429_with_retry_after_and_the_fields() {
    let layer = rate(&Coordination::memory());
    let (status, headers, _) = answer(&layer).await;
    assert_eq!(status, StatusCode::OK);
    assert!(header(&headers, "ratelimit").is_some_and(|v| v.contains("r=0")));

    let (status, headers, body) = answer(&layer).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&headers, "retry-after"), Some("60"));
    assert_eq!(
        header(&headers, "ratelimit-policy"),
        Some("\"api\";q=1;w=60")
    );
    assert!(header(&headers, "ratelimit").is_some());
    // No body: the status and the fields say it all (problem+json says it in words).
    assert_eq!(body, "");

    let (status, headers, body) = answer(&layer.clone().problem_json(true)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&headers, "content-type"),
        Some("application/problem+json")
    );
    assert!(body.contains(r#""status":429"#), "{body}");
    assert!(
        body.contains(r#"The \"api\" rate limit is exhausted."#),
        "{body}"
    );
    // The draft's problem type, naming the policy exceeded.
    assert!(
        body.contains(
            r#""type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded""#
        ),
        "{body}"
    );
    assert!(body.contains(r#""violated-policies":["api"]"#), "{body}");
}

#[tokio::test]
async fn a_full_concurrency_limit_is_a_429_with_retry_after_and_the_policy() {
    let coordination = Coordination::memory();
    let layer = concurrency(&coordination);
    // The first response's body holds the only slot while it is alive.
    let held = layer
        .layer(inner())
        .oneshot(Request::new(()))
        .await
        .expect("infallible");
    assert_eq!(held.status(), StatusCode::OK);

    let (status, headers, body) = answer(&layer).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        header(&headers, "retry-after").is_some_and(|s| s.parse::<u64>().is_ok_and(|s| s >= 1))
    );
    assert_eq!(
        header(&headers, "ratelimit-policy"),
        Some("\"streams-global\";q=1;qu=\"concurrent-requests\"")
    );
    assert_eq!(body, "");

    let (status, headers, body) = answer(&layer.clone().problem_json(true)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&headers, "content-type"),
        Some("application/problem+json")
    );
    assert!(
        body.contains(r#"Every slot of the \"streams\" concurrency limit is taken."#),
        "{body}"
    );
    assert!(body.contains("#quota-exceeded"), "{body}");
    assert!(
        body.contains(r#""violated-policies":["streams"]"#),
        "{body}"
    );
    drop(held);
}

/// A permit that takes the one key of a memory backend of one key: held, so never evicted.
async fn held_filler(
    coordination: &Coordination,
) -> crate::coordination::semaphore::SemaphorePermit {
    crate::coordination::semaphore::Semaphore::new(coordination, "filler", 1)
        .expect("valid")
        .try_acquire(MINUTE)
        .await
        .expect("the only key")
        .acquired()
        .expect("free")
}

/// A memory backend full of what is held refuses: 503 with `Retry-After` on both layers,
/// under either failure policy, and a problem when asked for.
#[tokio::test]
async fn a_refusing_backend_is_a_503_with_retry_after_on_both_layers() {
    let backend = MemoryBackend::builder().max_keys(1).build().expect("valid");
    let coordination = Coordination::new(backend);
    // Full of what is held, which is never evicted.
    let _filler = held_filler(&coordination).await;
    for policy in [
        crate::layer::FailurePolicy::default(),
        crate::layer::FailurePolicy::FailOpen,
    ] {
        let rate = rate(&coordination)
            .failure_policy(policy)
            .problem_json(true);
        let limit = concurrency(&coordination)
            .failure_policy(policy)
            .problem_json(true);
        for (status, headers, body) in [answer(&rate).await, answer(&limit).await] {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{policy:?}");
            assert!(header(&headers, "retry-after").is_some(), "{policy:?}");
            assert!(body.contains(r#""status":503"#), "{body}");
            assert!(body.contains("cannot be checked right now"), "{body}");
            assert!(
                body.contains(r#""title":"Temporary Reduced Capacity""#)
                    && body.contains("#temporary-reduced-capacity"),
                "{body}"
            );
        }
    }
}

#[tokio::test]
async fn key_errors_answer_alike_on_both_layers() {
    let coordination = Coordination::memory();
    let header_key = || KeyExtractor::header("x-api-key").expect("a header name");
    let keyed = RedisConcurrencyLimitLayer::new(&coordination, "keyed", Capacity::per_key(1))
        .expect("valid");

    // A client error: its status and reason, as text.
    for (status, headers, body) in [
        answer(&rate(&coordination).key(header_key())).await,
        answer(&keyed.clone().key(header_key())).await,
    ] {
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            header(&headers, "content-type"),
            Some("text/plain; charset=utf-8")
        );
        assert!(body.contains("x-api-key"), "{body}");
    }

    // A server error (no peer address): 500, naming the limit and what to change.
    for (layer, (status, _, body)) in [
        (
            "rate limit",
            answer(&rate(&coordination).key(KeyExtractor::peer_ip())).await,
        ),
        ("concurrency limit", answer(&keyed).await),
    ] {
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            body.starts_with(&format!("{layer} key unavailable: no peer address")),
            "{body}"
        );
        assert!(
            body.contains("into_make_service_with_connect_info"),
            "{body}"
        );
    }

    // The application's own answer, from the rejection's key error.
    let custom = |rejection: &Rejection<'_>, request: &Parts| {
        assert_eq!(request.uri.path(), "/");
        let err = rejection.key_error()?;
        Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .body(Bytes::from(format!("who are you? ({})", err.status())))
            .ok()
    };
    for (status, _, body) in [
        answer(
            &rate(&coordination)
                .key(header_key())
                .rejection_response(custom),
        )
        .await,
        answer(&keyed.clone().key(header_key()).rejection_response(custom)).await,
    ] {
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body, "who are you? (400 Bad Request)");
    }
}

/// One function words every refusal of both layers, with the request in view; the layers add
/// `Retry-After` when it sets none, and the rate limit's fields; `None` keeps a layer's own
/// answer.
#[tokio::test]
async fn one_rejection_hook_serves_both_layers() {
    fn own(rejection: &Rejection<'_>, request: &Parts) -> Option<Response<Bytes>> {
        let code = match rejection.kind() {
            RejectionKind::RateLimited => {
                let decision = rejection.rate_limit()?;
                format!("slow down: {} left", decision.remaining())
            }
            RejectionKind::ConcurrencyLimited => "one at a time".to_owned(),
            _ => return None,
        };
        Response::builder()
            .status(rejection.status())
            .header("x-own", "1")
            .header("x-path", request.uri.path())
            .body(Bytes::from(format!("{code}; {}", rejection.detail())))
            .ok()
    }
    let coordination = Coordination::memory();

    // Decided by the backend (the answer written once the request is back), then by the deny
    // cache (in `call`): the hook sees the request both times.
    let cached = rate(&Coordination::memory())
        .deny_cache(8)
        .rejection_response(own);
    assert_eq!(answer(&cached).await.0, StatusCode::OK);
    for _ in 0..2 {
        let (status, headers, _) = answer(&cached).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&headers, "x-path"), Some("/"));
    }

    let layer = rate(&coordination).rejection_response(own);
    assert_eq!(answer(&layer).await.0, StatusCode::OK);
    let (status, headers, body) = answer(&layer).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        body,
        r#"slow down: 0 left; The "api" rate limit is exhausted."#
    );
    assert_eq!(header(&headers, "x-own"), Some("1"));
    assert_eq!(header(&headers, "retry-after"), Some("60"));
    assert!(header(&headers, "ratelimit").is_some());

    let limit = concurrency(&coordination).rejection_response(own);
    let held = limit
        .layer(inner())
        .oneshot(Request::new(()))
        .await
        .expect("infallible");
    let (status, headers, body) = answer(&limit).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(body.starts_with("one at a time; Every slot"), "{body}");
    assert_eq!(header(&headers, "x-path"), Some("/"));
    assert!(header(&headers, "retry-after").is_some());
    assert!(header(&headers, "ratelimit-policy").is_some());
    drop(held);

    // A kind the hook leaves alone: the layer's own key error.
    let keyed = rate(&coordination)
        .key(KeyExtractor::header("x-api-key").expect("a header name"))
        .rejection_response(own);
    let (status, _, body) = answer(&keyed).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.ends_with('\n') && body.contains("x-api-key"), "{body}");

    // An outage, under a hook that words it, keeps the layer's Retry-After.
    let backend = MemoryBackend::builder().max_keys(1).build().expect("valid");
    let full = Coordination::new(backend);
    let _filler = held_filler(&full).await;
    let outage = rate(&full).rejection_response(|rejection: &Rejection<'_>, request: &Parts| {
        assert_eq!(request.uri.path(), "/");
        assert_eq!(rejection.kind(), RejectionKind::Unavailable);
        assert!(rejection.error().is_some_and(|err| err.is_refused()));
        Response::builder()
            .status(rejection.status())
            .body(Bytes::from_static(b"later"))
            .ok()
    });
    let (status, headers, body) = answer(&outage).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "later")
    );
    assert!(header(&headers, "retry-after").is_some());
}

/// Behind two rate-limit layers the handler reads the inner one's decision, and none when
/// the inner one failed open, even though the outer one decided.
#[tokio::test]
async fn the_handler_sees_the_innermost_rate_limit() {
    use crate::layer::rate_limit::RateLimitInfo;

    fn reports(request: Request<()>) -> Reply {
        let seen = request
            .extensions()
            .get::<RateLimitInfo>()
            .map_or("none".to_owned(), |info| info.policy().name().to_owned());
        std::future::ready(Ok(Response::new(Full::new(Bytes::from(seen)))))
    }
    let outer = rate(&Coordination::memory());
    let inner = RedisRateLimitLayer::fixed_window(&Coordination::memory(), "inner", 5, MINUTE)
        .expect("valid")
        .key(KeyExtractor::global());
    let service = outer.layer(inner.layer(service_fn(reports as fn(Request<()>) -> Reply)));
    let response = service.oneshot(Request::new(())).await.expect("infallible");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(body, "inner");

    // Nothing listens on port 1: the inner layer's backend is unavailable.
    let unreachable = Coordination::connect("redis://127.0.0.1:1", "test:")
        .await
        .expect("a lazy connection");
    let failing_open = RedisRateLimitLayer::fixed_window(&unreachable, "inner", 5, MINUTE)
        .expect("valid")
        .key(KeyExtractor::global())
        .failure_policy(crate::layer::FailurePolicy::FailOpen)
        .timeout(Duration::from_millis(50));
    let outer = rate(&Coordination::memory());
    let service = outer.layer(failing_open.layer(service_fn(reports as fn(Request<()>) -> Reply)));
    let response = service.oneshot(Request::new(())).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    // The outer layer's fields are still on the response.
    assert!(response.headers().contains_key("ratelimit"));
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(body, "none");
}

/// A body that never yields a frame.
struct Stalled;

impl http_body::Body for Stalled {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        std::task::Poll::Pending
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_past_the_longest_hold_ends_with_hold_limit_reached() {
    let coordination = Coordination::memory();
    let layer = concurrency(&coordination).max_hold(Duration::from_secs(5));
    let semaphore = layer.semaphore().clone();
    let stalls = service_fn(|_: Request<()>| {
        std::future::ready(Ok::<_, Infallible>(Response::new(Stalled)))
    });
    let response = layer
        .layer(stalls)
        .oneshot(Request::new(()))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(semaphore.held(b"").await.expect("held"), (None, Some(1)));
    let mut body = response.into_body();
    let started = tokio::time::Instant::now();
    let error = match body.frame().await {
        Some(Err(error)) => error,
        Some(Ok(_)) => panic!("a frame from a stalled body"),
        None => panic!("ended without an error"),
    };
    assert!(
        error.is::<crate::layer::concurrency_limit::HoldLimitReached>(),
        "{error}"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert!(body.frame().await.is_none(), "nothing after the cut");
    // The permit is released in the background.
    for _ in 0..100 {
        if semaphore.held(b"").await.expect("held") == (None, Some(0)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the permit was not released");
}

/// A layer configured to wait forever (`wait(Duration::MAX, n)`) answers without
/// overflowing: a request waits for the next window.
#[tokio::test(start_paused = true)]
async fn a_layer_that_waits_forever_answers() {
    let coordination = Coordination::memory();
    let layer = RedisRateLimitLayer::fixed_window(&coordination, "api", 1, Duration::from_secs(1))
        .expect("valid")
        .key(KeyExtractor::global())
        .wait(Duration::MAX, 10);
    assert_eq!(answer(&layer).await.0, StatusCode::OK);
    assert_eq!(
        answer(&layer).await.0,
        StatusCode::OK,
        "after waiting for the next window"
    );
}
