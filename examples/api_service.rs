//! An API service with every limit of the crate, as each of its replicas runs it:
//!
//! - **every request**: at most 10 per second and 10,000 per day per client (stacked
//!   policies), the client being the address behind the trusted proxies (`TRUSTED_PROXIES`,
//!   comma-separated networks or addresses; default `10.0.0.0/8`);
//! - **`/api/…`**: a token bucket per API key (`X-Api-Key`, stored as its digest): bursts of
//!   5, then one more every 2 seconds; `GET /api/quota` reads the decision. A key is checked
//!   before the limit counts it (`API_KEYS`, comma-separated, stands for the application's
//!   own check; default `k-demo`): keyed by a header nobody checks, a client would take a
//!   fresh budget with each value it makes up;
//! - **`GET /events`**: server-sent events, one stream at a time per client, 100 in all;
//! - **`POST /reports/{id}/rebuild`**: one rebuild of a report at a time across every
//!   replica, under a `Lease` named by the path, whose fencing token the answer shows;
//! - **one function** answers every refusal (429, 409, 503, a missing API key) as JSON.
//!
//! When Redis is unreachable, the rate limits fail open (a flood guard and a quota should not
//! take the API down with them; `/api/quota` then says it knows nothing), the streams fail
//! closed (503 with `Retry-After`: each holds a slot for long), and a rebuild never runs
//! without its lease (503 too). Everything resumes by itself once Redis is back.
//!
//! ```sh
//! cargo run --example api_service                                   # in-process limits
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example api_service  # shared through Redis
//! ```
//!
//! It listens on `PORT` (default 3000) and prints `curl` lines to try it.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Body as AxumBody;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::header::{CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::request::Parts;
use axum::http::{Response, StatusCode};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use bytes::Bytes;
use http_body::{Body, Frame};
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::rate_limit::{RateLimitPolicy, Refill};
use leasehold::extract::{Lease, LeaseRequest, LeaseSpec, RateLimitInfo};
use leasehold::layer::concurrency_limit::{Capacity, RedisConcurrencyLimitLayer};
use leasehold::layer::key::{KeyError, KeyErrorKind, KeyExtractor, TrustedProxy};
use leasehold::layer::rate_limit::RedisRateLimitLayer;
use leasehold::layer::{FailurePolicy, Rejection, RejectionKind};

/// The API keys this service issued (`API_KEYS`): the application's own check, a database or
/// a signature in a real service.
#[derive(Clone)]
struct IssuedKeys(Arc<HashSet<String>>);

/// Refuses an API key the service did not issue, before the per-key limit counts it: a
/// header names a client only once checked. A missing key goes on to the limit, whose key
/// error the hook answers (401 too).
async fn require_issued_key(
    State(issued): State<IssuedKeys>,
    request: Request,
    next: Next,
) -> axum::response::Response {
    match request.headers().get("x-api-key") {
        Some(key) if !key.to_str().is_ok_and(|key| issued.0.contains(key)) => {
            let body = format!(
                "{{\"error\":\"api_key_unknown\",\"message\":\"This API key was not issued.\",\"path\":{}}}\n",
                json_string(request.uri().path())
            );
            (
                StatusCode::UNAUTHORIZED,
                [
                    (CONTENT_TYPE, "application/json"),
                    (WWW_AUTHENTICATE, "ApiKey header=\"x-api-key\""),
                ],
                body,
            )
                .into_response()
        }
        _ => next.run(request).await,
    }
}

/// How long a report takes to rebuild: long enough to try a second rebuild meanwhile.
const REBUILD_TIME: Duration = Duration::from_secs(1);

/// Every refusal of the service as a JSON object naming the refused path, the same for both
/// layers and the lease.
fn json_rejection(rejection: &Rejection<'_>, request: &Parts) -> Option<Response<Bytes>> {
    let mut response = Response::builder().header(CONTENT_TYPE, "application/json");
    let (status, error) = match rejection.kind() {
        RejectionKind::RateLimited => (rejection.status(), "rate_limited"),
        RejectionKind::ConcurrencyLimited => (rejection.status(), "too_many_streams"),
        RejectionKind::LeaseHeld => (rejection.status(), "rebuild_in_progress"),
        RejectionKind::Unavailable => (rejection.status(), "unavailable"),
        // No API key: the client must authenticate, which says 401, not 400.
        RejectionKind::InvalidKey
            if rejection
                .key_error()
                .is_some_and(|err| err.kind() == KeyErrorKind::MissingHeader) =>
        {
            response = response.header(WWW_AUTHENTICATE, "ApiKey header=\"x-api-key\"");
            (StatusCode::UNAUTHORIZED, "api_key_required")
        }
        // An empty API key, a path that names no report; a 500 if the server is set up wrong.
        RejectionKind::InvalidKey => (rejection.status(), "invalid_request"),
        // A kind this version does not know: the crate's own answer.
        _ => return None,
    };
    let path = request.uri.path();
    let body = format!(
        "{{\"error\":\"{error}\",\"message\":{},\"path\":{}}}\n",
        json_string(&rejection.detail()),
        json_string(path)
    );
    // `Retry-After` is added by the layer or the extractor; the rate limits add their fields.
    response.status(status).body(Bytes::from(body)).ok()
}

/// A JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// What the API-key limit decided for this request; nothing while it fails open.
async fn quota(info: Option<RateLimitInfo>) -> impl IntoResponse {
    let body = match info {
        Some(info) => format!(
            "{{\"limit\":{},\"remaining\":{},\"reset_after_ms\":{}}}\n",
            info.decision().limit(),
            info.decision().remaining(),
            info.decision().reset_after().as_millis()
        ),
        // The backend is unreachable and the layer let the request through.
        None => "{\"limit\":null}\n".to_owned(),
    };
    ([(CONTENT_TYPE, "application/json")], body)
}

/// One event every second, 30 in all: `data: <n>`.
struct Events {
    interval: tokio::time::Interval,
    sent: u32,
}

impl Body for Events {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.sent == 30 {
            return Poll::Ready(None);
        }
        ready!(self.interval.poll_tick(cx));
        self.sent += 1;
        let event = format!("data: {}\n\n", self.sent);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(event)))))
    }
}

async fn events() -> impl IntoResponse {
    let body = Events {
        interval: tokio::time::interval(Duration::from_secs(1)),
        sent: 0,
    };
    ([(CONTENT_TYPE, "text/event-stream")], AxumBody::new(body))
}

/// The lease of one report's rebuild, named by the `{id}` of its path.
struct ReportRebuild;

impl<S: Sync> LeaseSpec<S> for ReportRebuild {
    async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
        let Path(id) = Path::<u64>::from_request_parts(parts, &())
            .await
            .map_err(|rejection| KeyError::new(rejection.body_text()))?;
        // A rebuild takes about a second: a refused client comes back then, not after the
        // whole 30 s lease the running one holds.
        Ok(LeaseRequest::named(format!("report:{id}")).retry_after_at_most(2 * REBUILD_TIME))
    }

    fn rejection_response(rejection: &Rejection<'_>, request: &Parts) -> Option<Response<Bytes>> {
        json_rejection(rejection, request)
    }
}

/// The lease comes first: a path that names no report is its rejection, in the service's JSON.
async fn rebuild(lease: Lease<ReportRebuild>, Path(id): Path<u64>) -> impl IntoResponse {
    // Every write of the rebuild would carry the token, so that storage refuses a late one.
    let token = lease.fencing_token();
    tokio::time::sleep(REBUILD_TIME).await;
    let body = format!("{{\"report\":{id},\"fencing_token\":{token}}}\n");
    ([(CONTENT_TYPE, "application/json")], body)
}

/// The service's routes and limits on `coordination`, behind `trusted` proxies.
fn app(
    coordination: &Coordination,
    trusted: Vec<TrustedProxy>,
    issued: IssuedKeys,
) -> leasehold::Result<Router> {
    let per_client = RedisRateLimitLayer::stacked(
        coordination,
        "client",
        [
            RateLimitPolicy::new("second", 10, Duration::from_secs(1)),
            RateLimitPolicy::new("day", 10_000, Duration::from_secs(86_400)),
        ],
    )?
    .key(KeyExtractor::client_ip(trusted.clone()))
    .failure_policy(FailurePolicy::FailOpen)
    .rejection_response(json_rejection);

    let per_api_key = RedisRateLimitLayer::token_bucket(
        coordination,
        "api-key",
        5,
        Refill::new(1, Duration::from_secs(2)),
    )?
    .key(KeyExtractor::header("x-api-key")?)
    // Customers keep working while Redis is down; `quota` then says it knows nothing.
    .failure_policy(FailurePolicy::FailOpen)
    .rejection_response(json_rejection);

    let streams = RedisConcurrencyLimitLayer::new(
        coordination,
        "events",
        Capacity::per_key(1).and_global(100),
    )?
    .key(KeyExtractor::client_ip(trusted))
    // Failing closed is the default: a stream that cannot be counted is refused.
    .lease(Duration::from_secs(10))
    .rejection_response(json_rejection);

    // Merged rather than nested: a layer behind `nest` sees the path without its prefix.
    let api = Router::new()
        .route("/api/quota", get(quota))
        .route("/api/hello", get(|| async { "Hello, API client!\n" }))
        .layer(per_api_key)
        // Outside the limit, so it runs first: only issued keys are counted.
        .layer(from_fn_with_state(issued, require_issued_key));
    Ok(Router::new()
        .merge(api)
        .route("/events", get(events).layer(streams))
        .route("/reports/{id}/rebuild", post(rebuild))
        .route(
            "/",
            get(|| async { "Try /api/hello, /events, /reports/1/rebuild\n" }),
        )
        .layer(per_client)
        .with_state(coordination.clone()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The crate explains what it does (a backend failing, a limit failing open) through
    // `tracing`: show it on stderr.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::stderr)
        .init();

    let (coordination, backend) = match std::env::var("REDIS_URL") {
        Ok(url) => {
            // Succeeds while Redis is unreachable: the limits' failure policies answer until
            // it is back. "api-service:" is this service's namespace on a shared Redis.
            let redis = RedisBackend::connect(url, "api-service:").await?;
            // Printed as logs may show it: any password masked.
            let endpoint = redis.endpoint().to_owned();
            (Coordination::from(redis), endpoint)
        }
        Err(_) => (
            Coordination::memory(),
            "memory (set REDIS_URL to share limits)".into(),
        ),
    };
    let trusted = std::env::var("TRUSTED_PROXIES")
        .unwrap_or_else(|_| "10.0.0.0/8".to_owned())
        .split(',')
        .map(|proxy| proxy.trim().parse::<TrustedProxy>())
        .collect::<Result<Vec<_>, _>>()?;
    let issued = IssuedKeys(Arc::new(
        std::env::var("API_KEYS")
            .unwrap_or_else(|_| "k-demo".to_owned())
            .split(',')
            .map(|key| key.trim().to_owned())
            .filter(|key| !key.is_empty())
            .collect(),
    ));
    let app = app(&coordination, trusted, issued)?;

    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port.parse()?,
        Err(_) => 3000,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("backend: {backend}");
    println!("try:     curl -i -H 'x-api-key: k-demo' http://{addr}/api/quota");
    println!("         curl -N http://{addr}/events");
    println!("         curl -i -X POST http://{addr}/reports/7/rebuild   # twice at once: 409");
    println!("listening on http://{addr}");

    // The peer address is where the client-IP keys start from.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
