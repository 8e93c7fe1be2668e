//! One route, `GET /`, served on `127.0.0.1:PORT` with `ConnectInfo<SocketAddr>` until killed,
//! behind what `MODE` names:
//!
//! | mode | in front of the route |
//! |---|---|
//! | `bare` | nothing |
//! | `governor-allowed`, `governor-rejected` | `tower_governor` (in process), every request allowed, or every one after the first rejected |
//! | `memory-allowed`, `memory-rejected` | leasehold's GCRA layer on the memory backend, the same two ways |
//! | `floor` | one `EVALSHA` of `INCR` + `PEXPIRE` per request through redis-rs: what users write by hand |
//! | `fixed-window` | leasehold's fixed-window layer over Redis, every request granted |
//! | `gcra`, `peer-gcra` | leasehold's GCRA layer over Redis, and `tower-rate-limiter`'s Redis GCRA, every request granted |
//! | `deny` | leasehold's fixed window on one exhausted key, with the deny cache: every answer a local 429 |
//! | `hot-key` | leasehold's fixed window over Redis on one hot key, every request granted, with the hot-key tier: batches of up to 1000 permits reserved, spent in process |
//!
//! The limited modes but `deny` and `hot-key` key on the peer's IP address, as users do. Arguments: `MODE PORT`;
//! `REDIS_URL` for the Redis modes (default `redis://127.0.0.1:6379`).

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use axum::routing::get;
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::rate_limit::{FixedWindow, HotKeys};
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::RedisRateLimitLayer;
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_rate_limiter::{GcraQuota, IpKeyExtractor, RateLimitLayer, RedisGcra};

/// The hand-written floor: count and expire, the least a Redis-backed limiter does.
const FLOOR_LUA: &str = "local n = redis.call('INCR', KEYS[1])\n\
    if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end\n\
    return n";

/// More than any run takes in a window: every request is granted.
const LIMIT: u64 = 1_000_000_000;
const WINDOW: Duration = Duration::from_secs(60);
/// The GCRA modes, the same in every crate: a million a second (an emission interval of
/// 1 µs, the shortest leasehold takes) with a burst of a million, which no run uses up.
const GCRA_RATE: u32 = 1_000_000;
const GCRA_PERIOD: Duration = Duration::from_secs(1);

/// The hot-key tier's largest batch: a Redis step per thousand requests at most.
const HOT_KEY_BATCH: u64 = 1_000;

type Error = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "bare".into());
    let port: u16 = args.next().map_or(Ok(8080), |a| a.parse())?;
    let route = Router::new().route("/", get(|| async { "ok" }));
    let app = match mode.as_str() {
        "bare" => route,
        "governor-allowed" | "governor-rejected" => {
            let mut config = GovernorConfigBuilder::default();
            if mode == "governor-allowed" {
                config.per_nanosecond(1).burst_size(u32::MAX);
            } else {
                config.per_second(3600).burst_size(1);
            }
            let config = config.finish().ok_or("governor configuration")?;
            route.layer(GovernorLayer::new(config))
        }
        "memory-allowed" | "memory-rejected" => {
            let coordination = Coordination::memory();
            let (limit, window, burst) = if mode == "memory-allowed" {
                (u64::from(GCRA_RATE), GCRA_PERIOD, u64::from(GCRA_RATE))
            } else {
                (1, Duration::from_secs(3600), 1)
            };
            let layer = RedisRateLimitLayer::gcra(&coordination, "api", limit, window, burst)?
                .key(KeyExtractor::peer_ip());
            route.layer(layer)
        }
        "floor" => {
            let mut manager = redis::Client::open(url.as_str())?
                .get_connection_manager()
                .await?;
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(FLOOR_LUA)
                .query_async(&mut manager)
                .await?;
            let window_ms = WINDOW.as_millis() as u64;
            Router::new().route(
                "/",
                get(move |ConnectInfo(peer): ConnectInfo<SocketAddr>| {
                    let (mut manager, sha) = (manager.clone(), sha.clone());
                    async move {
                        let key = format!("floor:ip:{}", peer.ip().to_canonical());
                        match redis::cmd("EVALSHA")
                            .arg(&sha)
                            .arg(1)
                            .arg(key)
                            .arg(window_ms)
                            .query_async::<redis::Value>(&mut manager)
                            .await
                        {
                            Ok(redis::Value::Int(_)) => Ok("ok"),
                            _ => Err(StatusCode::SERVICE_UNAVAILABLE),
                        }
                    }
                }),
            )
        }
        "fixed-window" | "gcra" => {
            let coordination = redis_coordination(&url, &mode).await?;
            let layer = if mode == "gcra" {
                let rate = u64::from(GCRA_RATE);
                RedisRateLimitLayer::gcra(&coordination, "api", rate, GCRA_PERIOD, rate)?
            } else {
                RedisRateLimitLayer::fixed_window(&coordination, "api", LIMIT, WINDOW)?
            }
            .key(KeyExtractor::peer_ip());
            // Settles the INCREX probe before the load starts.
            layer.limiter().try_acquire(b"warm", 1).await?;
            route.layer(layer)
        }
        "peer-gcra" => {
            let client = redis::Client::open(url.as_str())?;
            let connection = client.get_multiplexed_async_connection().await?;
            let quota = GcraQuota::new(GCRA_RATE, GCRA_PERIOD, GCRA_RATE)?;
            let policy = RedisGcra::new(connection, quota).with_namespace("peer-gcra");
            let layer = RateLimitLayer::builder(IpKeyExtractor::new())
                .policy_name("api")
                .with_policy(policy)
                .build()?;
            route.layer(layer)
        }
        "deny" => {
            let coordination = redis_coordination(&url, &mode).await?;
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
            route.layer(layer)
        }
        "hot-key" => {
            let coordination = redis_coordination(&url, &mode).await?;
            let window = FixedWindow::new(&coordination, "hot", LIMIT, WINDOW)?
                .with_hot_keys(HotKeys::new(HOT_KEY_BATCH))?;
            let layer = RedisRateLimitLayer::new(window).key(KeyExtractor::global());
            route.layer(layer)
        }
        other => return Err(format!("unknown MODE {other:?}").into()),
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    eprintln!("peers: {mode} on http://{}/", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

async fn redis_coordination(url: &str, mode: &str) -> Result<Coordination, Error> {
    Ok(RedisBackend::standalone(url)
        .key_prefix(format!("peers-{mode}:"))
        .connect()
        .await?
        .into())
}
