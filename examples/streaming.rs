//! Streaming: a server-sent-events route where each client may hold 2 streams at once, and
//! every replica together 100. A stream holds its slot until it ends or the client leaves,
//! for an hour at most (the layer's default `max_hold`).
//!
//! ```sh
//! cargo run --example streaming                                   # in-process limits
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example streaming  # shared through Redis
//! ```
//!
//! It listens on `PORT` (default 3000) and prints `curl` lines to try it: open two streams
//! in two terminals, and a third gets `429 Too Many Requests` until one of them is stopped.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Body as AxumBody;
use axum::response::IntoResponse;
use axum::routing::get;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http_body::{Body, Frame};
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::layer::CircuitBreaker;
use leasehold::layer::concurrency_limit::{Capacity, RedisConcurrencyLimitLayer};
use leasehold::layer::key::KeyExtractor;

/// One event per second, 30 in all: `data: <n>`.
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The crate explains what it does (a backend failing, a limit failing open) through
    // `tracing`: show it on stderr.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::stderr)
        .init();

    let (coordination, backend) = match std::env::var("REDIS_URL") {
        // Every replica connected to this Redis shares the same slots.
        Ok(url) => {
            // This service's namespace: another service on the same Redis that names a
            // limit alike keeps its own.
            let redis = RedisBackend::connect(url, "streaming:").await?;
            // Printed as logs may show it: any password masked.
            let endpoint = redis.endpoint().to_owned();
            (Coordination::from(redis), endpoint)
        }
        // One process on its own: no server needed.
        Err(_) => (
            Coordination::memory(),
            "memory (set REDIS_URL to share limits)".into(),
        ),
    };

    let streams = RedisConcurrencyLimitLayer::new(
        &coordination,
        "events",
        Capacity::per_key(2).and_global(100),
    )?
    .key(KeyExtractor::peer_ip())
    // Renewed every 5 s while a stream runs; a crashed replica's slots free within 10 s.
    .lease(Duration::from_secs(10))
    .circuit_breaker(CircuitBreaker::new());
    let app = Router::new()
        .route("/events", get(events).layer(streams))
        .route("/", get(|| async { "Try /events\n" }));

    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port.parse()?,
        Err(_) => 3000,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("backend: {backend}");
    println!("policy:  GET /events: 2 streams at once per client IP, 100 in all");
    println!("try:     curl -N http://{addr}/events        # in two terminals");
    println!("         curl -i http://{addr}/events        # a third: 429 with Retry-After");
    println!("listening on http://{addr}");

    // The peer address is what `KeyExtractor::peer_ip` keys by.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
