//! Plans from a configuration file, changed at runtime: `/api` is limited per API key
//! (`x-api-key`) under the caller's plan (`x-plan`, as a gateway or an authentication layer
//! would set it), with the limits of `examples/plans.toml`; `PUT /admin/plans/<name>` with a
//! quota as its body (`200/min`) changes a plan in every replica that follows the same
//! Redis.
//!
//! ```sh
//! cargo run --example plans --features serde                                   # in process
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example plans --features serde  # through Redis
//! ```
//!
//! It listens on `PORT` (default 3000) and reads `PLANS_FILE` (default
//! `examples/plans.toml`). Try:
//!
//! ```sh
//! curl -si -H 'x-api-key: k1' -H 'x-plan: free' http://127.0.0.1:3000/api   # RateLimit-Policy: "free";q=5;w=60
//! curl -s -X PUT --data '8/min' http://127.0.0.1:3000/admin/plans/free
//! curl -si -H 'x-api-key: k1' -H 'x-plan: free' http://127.0.0.1:3000/api   # "free";q=8;w=60
//! ```
//!
//! The admin route is open here to keep the example short: put yours behind your own
//! authentication.

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, put};
use leasehold::Coordination;
use leasehold::coordination::rate_limit::{Quota, RateLimitPlans, RateLimitPlansConfig};
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::{PlanChooser, RedisRateLimitLayer};

/// The configuration file: one table of plans per limit.
#[derive(serde::Deserialize)]
struct Config {
    limits: BTreeMap<String, RateLimitPlansConfig>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = std::env::var("PLANS_FILE").unwrap_or_else(|_| "examples/plans.toml".to_owned());
    let config: Config =
        toml::from_str(&std::fs::read_to_string(&file)?).map_err(|err| format!("{file}: {err}"))?;
    let api = config.limits.get("api").ok_or("no [limits.api] table")?;

    let coordination = match std::env::var("REDIS_URL") {
        Ok(url) => Coordination::connect(url, "plans-example:").await?,
        Err(_) => Coordination::memory(),
    };
    // Stored: the plans already in Redis win over the file, which seeds an empty store.
    let plans = api.builder(&coordination, "api").build_stored().await?;

    let limited = RedisRateLimitLayer::plans(plans.clone())
        .key(KeyExtractor::header("x-api-key")?)
        .choose_plan(PlanChooser::header("x-plan"))
        .problem_json(true);
    let app = Router::new()
        .route("/api", get(|| async { "ok\n" }).layer(limited))
        .route("/admin/plans/{name}", put(set_plan))
        .with_state(plans);

    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port.parse()?,
        Err(_) => 3000,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("try:     curl -si -H 'x-api-key: k1' -H 'x-plan: free' http://{addr}/api");
    println!("listening on http://{addr}");
    axum::serve(listener, app).await?;
    Ok(())
}

/// `PUT /admin/plans/<name>` with a quota (`200/min`): the plan's new quota, everywhere.
async fn set_plan(
    State(plans): State<RateLimitPlans>,
    Path(name): Path<String>,
    body: String,
) -> (StatusCode, String) {
    let quota = match body.trim().parse::<Quota>() {
        Ok(quota) => quota,
        Err(err) => return (StatusCode::BAD_REQUEST, format!("{err}\n")),
    };
    match plans.set_plan(&name, quota).await {
        Ok(()) => (StatusCode::OK, format!("{name} = {quota}\n")),
        Err(err) if err.kind() == leasehold::ErrorKind::InvalidArgument => {
            (StatusCode::BAD_REQUEST, format!("{err}\n"))
        }
        Err(err) => (StatusCode::SERVICE_UNAVAILABLE, format!("{err}\n")),
    }
}
