//! Metrics: a rate-limited `/hello` route, and `/metrics` serving what the crate counts in
//! the Prometheus text format (through `metrics-exporter-prometheus`; any `metrics` recorder
//! will do).
//!
//! ```sh
//! cargo run --example metrics --features metrics                                   # in process
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example metrics --features metrics  # through Redis
//! ```
//!
//! It listens on `PORT` (default 3000). Try a few requests to `/hello`, then `/metrics`:
//! `leasehold_rate_limit_decisions_total{policy="hello",decision="allowed"}` counts them.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use leasehold::Coordination;
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::RedisRateLimitLayer;
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // First: what the crate records before a recorder is installed is not kept.
    let prometheus = PrometheusBuilder::new().install_recorder()?;

    let coordination = match std::env::var("REDIS_URL") {
        Ok(url) => Coordination::connect(url, "metrics-example:").await?,
        Err(_) => Coordination::memory(),
    };
    let limit =
        RedisRateLimitLayer::fixed_window(&coordination, "hello", 5, Duration::from_secs(10))?
            .key(KeyExtractor::global());
    let app = Router::new()
        .route("/hello", get(|| async { "Hello!\n" }).layer(limit))
        .route(
            "/metrics",
            get(move || {
                let prometheus = prometheus.clone();
                async move {
                    // The exporter keeps its histograms' windows by upkeep: run it on scrape.
                    prometheus.run_upkeep();
                    prometheus.render()
                }
            }),
        );

    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port.parse()?,
        Err(_) => 3000,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!(
        "try:     curl -s http://{addr}/hello; curl -s http://{addr}/metrics | grep leasehold_"
    );
    println!("listening on http://{addr}");
    axum::serve(listener, app).await?;
    Ok(())
}
