//! One route, `GET /`, served on `127.0.0.1:PORT` with `ConnectInfo<SocketAddr>` until killed,
//! behind what `MODE` names:
//!
//! | mode | in front of the route |
//! |---|---|
//! | `bare` | nothing |
//! | `governor-allowed`, `governor-rejected` | `tower_governor` (in process), every request allowed, or every one after the first rejected |
//! | `governor-headers-allowed` | `tower_governor` with its rate-limit fields on every response (`use_headers`), every request allowed |
//! | `memory-allowed`, `memory-rejected` | leasehold's GCRA layer on the memory backend, the same two ways |
//! | `floor` | one `EVALSHA` of `INCR` + `PEXPIRE` per request through redis-rs: what users write by hand |
//! | `floor-sliding`, `floor-token`, `floor-gcra`, `floor-stacked` | the same, running the least a sliding window (two windows' counts, the earlier one weighted), a token bucket (tokens and time in a hash), a GCRA (one arrival time) or two stacked fixed windows (each window's count and end in one hash) does, on the server's clock |
//! | `fixed-window` | leasehold's fixed-window layer over Redis, every request granted |
//! | `sliding-window`, `token-bucket` | leasehold's sliding-window (10 segments) and token-bucket layers over Redis, every request granted |
//! | `gcra`, `peer-gcra` | leasehold's GCRA layer over Redis, and `tower-rate-limiter`'s Redis GCRA, every request granted |
//! | `plans-fixed-window`, `plans-gcra` | the fixed-window and GCRA layers' limits as the default of two plans (`RateLimitPlans`), the plan read per request from a header wrk does not send |
//! | `stacked` | leasehold's stacked layer over Redis: two fixed windows (a minute and an hour), every request granted |
//! | `deny` | leasehold's fixed window on one exhausted key, with the deny cache: every answer a local 429 |
//! | `hot-key` | leasehold's fixed window over Redis on one hot key, every request granted, with the hot-key tier: batches of up to 1000 permits reserved, spent in process |
//! | `deny-one`, `deny-distinct` | leasehold's fixed window on the memory backend keyed by the `x-client` header, with a deny cache holding 100,000 exhausted clients (`0` to `99999`, rejected once each at start): the load sends one client (`deny-one`) or each in turn (`deny-distinct`, wrk's `benches/peers/distinct-clients.lua`); every answer a local 429 |
//!
//! The limited modes but `deny`, `hot-key` and the two `deny-*` key on the peer's IP address, as users do. Arguments: `MODE PORT`;
//! `REDIS_URL` for the Redis modes (default `redis://127.0.0.1:6379`).

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use axum::routing::get;
use leasehold::Coordination;
use leasehold::backend::memory::MemoryBackend;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::rate_limit::{
    FixedWindow, HotKeys, PlanAlgorithm, Quota, RateLimitPlans, RateLimitPolicy, Refill,
};
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::{PlanChooser, RedisRateLimitLayer};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_rate_limiter::{GcraQuota, IpKeyExtractor, RateLimitLayer, RedisGcra};

/// The hand-written floor: count and expire, the least a Redis-backed limiter does.
const FLOOR_LUA: &str = "local n = redis.call('INCR', KEYS[1])\n\
    if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end\n\
    return n";

/// The least a sliding window does: the current and the previous windows' counts in one
/// hash, the previous one weighted by how much of it still overlaps.
const FLOOR_SLIDING_LUA: &str = "local t = redis.call('TIME')\n\
    local now = t[1] * 1000 + math.floor(t[2] / 1000)\n\
    local w, limit = tonumber(ARGV[1]), tonumber(ARGV[2])\n\
    local index = math.floor(now / w)\n\
    local counts = redis.call('HMGET', KEYS[1], index, index - 1)\n\
    local current, previous = tonumber(counts[1]) or 0, tonumber(counts[2]) or 0\n\
    if previous * (1 - (now % w) / w) + current + 1 > limit then return 0 end\n\
    redis.call('HINCRBY', KEYS[1], index, 1)\n\
    redis.call('PEXPIRE', KEYS[1], 2 * w)\n\
    return 1";

/// The least a token bucket does: tokens and the time they were counted in one hash.
const FLOOR_TOKEN_LUA: &str = "local t = redis.call('TIME')\n\
    local now = t[1] * 1000 + math.floor(t[2] / 1000)\n\
    local capacity, per_ms = tonumber(ARGV[1]), tonumber(ARGV[2])\n\
    local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')\n\
    local tokens, at = tonumber(state[1]) or capacity, tonumber(state[2]) or now\n\
    tokens = math.min(capacity, tokens + (now - at) * per_ms)\n\
    if tokens < 1 then return 0 end\n\
    redis.call('HSET', KEYS[1], 'tokens', tokens - 1, 'at', now)\n\
    redis.call('PEXPIRE', KEYS[1], ARGV[3])\n\
    return 1";

/// The least a GCRA does: one theoretical arrival time, in microseconds.
const FLOOR_GCRA_LUA: &str = "local t = redis.call('TIME')\n\
    local now = t[1] * 1000000 + t[2]\n\
    local interval, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])\n\
    local tat = math.max(tonumber(redis.call('GET', KEYS[1])) or now, now)\n\
    if tat + interval - now > tolerance then return 0 end\n\
    redis.call('SET', KEYS[1], tat + interval, 'PX', math.ceil((tat + interval - now) / 1000) + 1)\n\
    return 1";

/// The least two stacked fixed windows do: each window's count and end, as
/// `"count:end"`, in one hash; both checked, both counted, the key kept until the later end.
const FLOOR_STACKED_LUA: &str = "local t = redis.call('TIME')\n\
    local now = t[1] * 1000 + math.floor(t[2] / 1000)\n\
    local state = redis.call('HMGET', KEYS[1], '0', '1')\n\
    local function window(v, w)\n\
      if v then\n\
        local c, e = string.match(v, '(%d+):(%d+)')\n\
        c, e = tonumber(c), tonumber(e)\n\
        if e > now then return c, e end\n\
      end\n\
      return 0, now + w\n\
    end\n\
    local c0, e0 = window(state[1], tonumber(ARGV[2]))\n\
    local c1, e1 = window(state[2], tonumber(ARGV[4]))\n\
    if c0 + 1 > tonumber(ARGV[1]) or c1 + 1 > tonumber(ARGV[3]) then return 0 end\n\
    redis.call('HSET', KEYS[1], '0', (c0 + 1) .. ':' .. e0, '1', (c1 + 1) .. ':' .. e1)\n\
    redis.call('PEXPIREAT', KEYS[1], math.max(e0, e1))\n\
    return 1";

/// More than any run takes in a window: every request is granted.
const LIMIT: u64 = 1_000_000_000;
const WINDOW: Duration = Duration::from_secs(60);
/// The stacked modes' second window.
const HOUR: Duration = Duration::from_secs(3600);
/// The GCRA modes, the same in every crate: a million a second (an emission interval of
/// 1 µs, the shortest leasehold takes) with a burst of a million, which no run uses up.
const GCRA_RATE: u32 = 1_000_000;
const GCRA_PERIOD: Duration = Duration::from_secs(1);

/// The clients the `deny-*` modes hold in the deny cache.
const DENIED_CLIENTS: usize = 100_000;

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
        "governor-headers-allowed" => {
            // The like-for-like baseline: tower_governor writing its rate-limit fields
            // (`x-ratelimit-limit`, `x-ratelimit-remaining`) on every response, as the crate's
            // layer writes `RateLimit-Policy` and `RateLimit`.
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .use_headers()
                .finish()
                .ok_or("governor configuration")?;
            route.layer(GovernorLayer::new(config))
        }
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
        "floor" => floor(&url, &mode, FLOOR_LUA, vec![WINDOW.as_millis().to_string()]).await?,
        "floor-sliding" => {
            let args = vec![WINDOW.as_millis().to_string(), LIMIT.to_string()];
            floor(&url, &mode, FLOOR_SLIDING_LUA, args).await?
        }
        "floor-token" => {
            // A billion tokens, refilled at a million a second: never empty in a run.
            let args = vec![
                LIMIT.to_string(),
                "1000".into(),
                WINDOW.as_millis().to_string(),
            ];
            floor(&url, &mode, FLOOR_TOKEN_LUA, args).await?
        }
        "floor-gcra" => {
            // As the GCRA modes: 1 µs apart, a burst of a million.
            let args = vec!["1".into(), u64::from(GCRA_RATE).to_string()];
            floor(&url, &mode, FLOOR_GCRA_LUA, args).await?
        }
        "floor-stacked" => {
            // As the stacked mode: a minute and an hour, each with the limit.
            let args = vec![
                LIMIT.to_string(),
                WINDOW.as_millis().to_string(),
                LIMIT.to_string(),
                HOUR.as_millis().to_string(),
            ];
            floor(&url, &mode, FLOOR_STACKED_LUA, args).await?
        }
        "stacked" => {
            let coordination = redis_coordination(&url, &mode).await?;
            let policies = [
                RateLimitPolicy::new("minute", LIMIT, WINDOW),
                RateLimitPolicy::new("hour", LIMIT, HOUR),
            ];
            let layer = RedisRateLimitLayer::stacked(&coordination, "api", policies)?
                .key(KeyExtractor::peer_ip());
            route.layer(layer)
        }
        "sliding-window" | "token-bucket" => {
            let coordination = redis_coordination(&url, &mode).await?;
            let layer = if mode == "sliding-window" {
                RedisRateLimitLayer::sliding_window(&coordination, "api", LIMIT, WINDOW, 10)?
            } else {
                let refill = Refill::new(1_000, Duration::from_millis(1));
                RedisRateLimitLayer::token_bucket(&coordination, "api", LIMIT, refill)?
            }
            .key(KeyExtractor::peer_ip());
            route.layer(layer)
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
        "plans-fixed-window" | "plans-gcra" => {
            // The same limits as the two modes above, as the default plan of two, chosen per
            // request by a header that wrk does not send: what choosing costs.
            let coordination = redis_coordination(&url, &mode).await?;
            let (algorithm, quota, more) = if mode == "plans-gcra" {
                let rate = u64::from(GCRA_RATE);
                let quota = Quota::new(rate, GCRA_PERIOD).with_burst(rate);
                (
                    PlanAlgorithm::Gcra,
                    quota,
                    Quota::new(rate / 2, GCRA_PERIOD).with_burst(rate),
                )
            } else {
                (
                    PlanAlgorithm::FixedWindow,
                    Quota::new(LIMIT, WINDOW),
                    Quota::new(2 * LIMIT, WINDOW),
                )
            };
            let plans = RateLimitPlans::builder(&coordination, "api", algorithm)
                .plan("free", quota)
                .plan("pro", more)
                .build()?;
            let layer = RedisRateLimitLayer::plans(plans)
                .key(KeyExtractor::peer_ip())
                .choose_plan(PlanChooser::header("x-plan"));
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
        "deny-one" | "deny-distinct" => {
            let backend = MemoryBackend::builder()
                .max_keys(2 * DENIED_CLIENTS)
                .build()?;
            let coordination = Coordination::new(backend);
            let layer = RedisRateLimitLayer::fixed_window(
                &coordination,
                "clients",
                1,
                Duration::from_secs(3600),
            )?
            .key(KeyExtractor::header_in_clear("x-client")?)
            // Room to spare: the cache's shares are filled by a hash, not evenly.
            .deny_cache(2 * DENIED_CLIENTS);
            for client in 0..DENIED_CLIENTS {
                let key = format!("hdr:x-client:{client}");
                layer.limiter().try_acquire(key.as_bytes(), 1).await?;
                let rejected = layer.limiter().try_acquire(key.as_bytes(), 1).await?;
                if rejected.is_granted() {
                    return Err(format!("client {client} was not exhausted").into());
                }
            }
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

/// The hand-written floor of an algorithm: a route that runs `script` by `EVALSHA` on the
/// peer's key with `args`, through redis-rs's connection manager, as users write it. Each
/// floor has keys of its own (named after its `mode`): the floors keep different types
/// under them, and one floor's key would answer another's commands with `WRONGTYPE`.
async fn floor(
    url: &str,
    mode: &str,
    script: &'static str,
    args: Vec<String>,
) -> Result<Router, Error> {
    let mut manager = redis::Client::open(url)?.get_connection_manager().await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script)
        .query_async(&mut manager)
        .await?;
    let args = std::sync::Arc::new(args);
    let prefix = std::sync::Arc::<str>::from(format!("{mode}:ip:"));
    Ok(Router::new().route(
        "/",
        get(move |ConnectInfo(peer): ConnectInfo<SocketAddr>| {
            let (mut manager, sha, args) = (manager.clone(), sha.clone(), args.clone());
            let prefix = prefix.clone();
            async move {
                let key = format!("{prefix}{}", peer.ip().to_canonical());
                match redis::cmd("EVALSHA")
                    .arg(&sha)
                    .arg(1)
                    .arg(key)
                    .arg(&args[..])
                    .query_async::<redis::Value>(&mut manager)
                    .await
                {
                    // The fixed window's floor answers its count, the others 1 (granted)
                    // or 0: every run stays within the limits, so every answer is `ok`.
                    Ok(redis::Value::Int(n)) if (1..=LIMIT as i64).contains(&n) => Ok("ok"),
                    Ok(_) => Err(StatusCode::TOO_MANY_REQUESTS),
                    Err(_) => Err(StatusCode::SERVICE_UNAVAILABLE),
                }
            }
        }),
    ))
}

async fn redis_coordination(url: &str, mode: &str) -> Result<Coordination, Error> {
    Ok(RedisBackend::standalone(url)
        .key_prefix(format!("peers-{mode}:"))
        .connect()
        .await?
        .into())
}
