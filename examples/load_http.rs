//! An HTTP server for load tests with `wrk`: one axum route, `GET /`, answering `ok`, in one of
//! three modes, served with `ConnectInfo<SocketAddr>` on `127.0.0.1:PORT` until killed.
//!
//! - `bare`: the route alone.
//! - `floor`: the handler first runs one `EVALSHA` of a minimal `INCR` + `PEXPIRE` script
//!   for the peer IP through a redis-rs `ConnectionManager`: the least any Redis-backed rate
//!   limiter pays per request.
//! - `script`: like `floor`, but the script is the limiter's own (`fixed_window.lua`, which
//!   also checks the limit and reads the window's expiry): the floor for that script.
//! - `layer`: the route behind `RedisRateLimitLayer::fixed_window` keyed by peer IP, with a
//!   limit so large that every request is granted.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example load_http -- layer 8080
//! wrk -t2 -c64 -d10s http://127.0.0.1:8080/
//! ```
//!
//! Arguments: `MODE PORT`. `scripts/bench.sh` runs every mode and reports the ratios.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use axum::routing::get;
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::RedisRateLimitLayer;

/// The floor: one counter per client and window, one round trip.
const FLOOR_LUA: &str = "local n = redis.call('INCR', KEYS[1]) \
                         if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end \
                         return n";
/// The limiter's own script, byte for byte.
const FIXED_WINDOW_LUA: &str = include_str!("../src/backend/steps/fixed_window/fixed_window.lua");
const LIMIT: u64 = 1_000_000_000_000;
const WINDOW: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "bare".into());
    let port: u16 = args.next().map_or(Ok(8080), |a| a.parse())?;

    let route = Router::new();
    let app = match mode.as_str() {
        "bare" => route.route("/", get(|| async { "ok" })),
        "floor" | "script" => {
            let mut manager = redis::Client::open(url.as_str())?
                .get_connection_manager()
                .await?;
            let (source, args) = if mode == "floor" {
                (FLOOR_LUA, vec![WINDOW.as_millis() as u64])
            } else {
                (FIXED_WINDOW_LUA, vec![1, LIMIT, WINDOW.as_millis() as u64])
            };
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query_async(&mut manager)
                .await?;
            route.route(
                "/",
                get(move |ConnectInfo(peer): ConnectInfo<SocketAddr>| {
                    let (mut manager, sha, args) = (manager.clone(), sha.clone(), args.clone());
                    async move {
                        let key = format!("floor:ip:{}", peer.ip().to_canonical());
                        match redis::cmd("EVALSHA")
                            .arg(&sha)
                            .arg(1)
                            .arg(key)
                            .arg(args)
                            .query_async::<redis::Value>(&mut manager)
                            .await
                        {
                            Ok(redis::Value::Int(_) | redis::Value::Array(_)) => Ok("ok"),
                            _ => Err(StatusCode::SERVICE_UNAVAILABLE),
                        }
                    }
                }),
            )
        }
        "layer" => {
            let coordination: Coordination = RedisBackend::standalone(url.as_str())
                .key_prefix("http:")
                .connect()
                .await?
                .into();
            let layer = RedisRateLimitLayer::fixed_window(&coordination, "api", LIMIT, WINDOW)?
                .key(KeyExtractor::peer_ip());
            // Settle the INCREX probe before the load starts (an older server rejects it once).
            layer.limiter().try_acquire(b"warm", 1).await?;
            route.route("/", get(|| async { "ok" })).layer(layer)
        }
        "deny" => {
            // A flood of one hot, exhausted key: with the deny cache, rejections are answered
            // locally until the retry time instead of costing a round trip each.
            let coordination: Coordination = RedisBackend::standalone(url.as_str())
                .key_prefix("http-deny:")
                .connect()
                .await?
                .into();
            let layer = RedisRateLimitLayer::fixed_window(
                &coordination,
                "hot",
                1,
                Duration::from_secs(3600),
            )?
            .key(KeyExtractor::global())
            .deny_cache(1024);
            layer.limiter().try_acquire(b"global", 1).await?;
            layer.limiter().try_acquire(b"global", 1).await?;
            route.route("/", get(|| async { "ok" })).layer(layer)
        }
        other => {
            return Err(
                format!("unknown MODE {other:?}: bare, floor, script, layer or deny").into(),
            );
        }
    };

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    eprintln!("load_http: {mode} on http://{}/", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
