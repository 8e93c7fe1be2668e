//! Quickstart: an axum app whose `/hello` route allows each client 5 requests per 10 seconds.
//!
//! ```sh
//! cargo run --example quickstart                                   # in-process limits
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example quickstart  # shared through Redis
//! ```
//!
//! It listens on `PORT` (default 3000) and prints its policy and a `curl` line to try it.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::RedisRateLimitLayer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The crate explains what it does (a backend failing, a limit failing open) through
    // `tracing`: show it on stderr.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::stderr)
        .init();

    let (coordination, backend) = match std::env::var("REDIS_URL") {
        // Every replica connected to this Redis shares the same limits.
        Ok(url) => {
            // This service's namespace: another service on the same Redis that names a
            // limit alike keeps its own.
            let redis = RedisBackend::connect(url, "quickstart:").await?;
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

    let limit =
        RedisRateLimitLayer::fixed_window(&coordination, "hello", 5, Duration::from_secs(10))?
            .key(KeyExtractor::peer_ip());
    let app = Router::new()
        .route("/hello", get(|| async { "Hello!\n" }).layer(limit))
        .route("/", get(|| async { "Try /hello\n" }));

    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port.parse()?,
        Err(_) => 3000,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("backend: {backend}");
    println!("policy:  GET /hello allows 5 requests per 10 s per client IP");
    // Five requests, then the sixth's status line and fields: the block the manual's "What a client sees" shows.
    println!(
        "try:     for i in $(seq 5); do curl -s -o /dev/null http://{addr}/hello; done; curl -si http://{addr}/hello | grep -iE '^(http|ratelimit|retry-after)'"
    );
    println!("listening on http://{addr}");

    // The peer address is what `KeyExtractor::peer_ip` keys by.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
