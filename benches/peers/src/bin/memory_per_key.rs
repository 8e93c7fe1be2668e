//! Bytes per live key of each rate limiter, one contender per process:
//!
//! | contender | what is measured |
//! |---|---|
//! | `governor` | `tower_governor`'s keyed limiter (governor's `RateLimiter::keyed`, keyed on `IpAddr` as its peer-IP extractor is) |
//! | `memory-fixed-window`, `memory-sliding-window`, `memory-token-bucket`, `memory-gcra` | leasehold's limiter on the memory backend, keyed on the address's text as its peer-IP extractor is |
//! | `redis-fixed-window`, `redis-sliding-window`, `redis-token-bucket`, `redis-gcra` | the same limiters on Redis (`REDIS_URL`): the server's `used_memory` per key |
//!
//! Each takes one permit for `KEYS` distinct client addresses (10.0.0.0 onwards), with limits
//! of 100 an hour so that every key stays live, and prints the resident set (after giving
//! freed memory back, `malloc_trim`) or Redis's `used_memory` before and after, and the
//! difference per key. It stops, with no figure, when a key was evicted (the memory backend)
//! or is missing (Redis). Arguments: `CONTENDER KEYS`. Run by scripts/bench-memory.sh.

use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::time::Duration;

use governor::{Quota, RateLimiter};
use leasehold::Coordination;
use leasehold::backend::memory::MemoryBackend;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::rate_limit::{FixedWindow, Gcra, RateLimiter as Limiter, Refill};
use leasehold::coordination::rate_limit::{SlidingWindow, TokenBucket};

type Error = Box<dyn std::error::Error>;

const LIMIT: u64 = 100;
const HOUR: Duration = Duration::from_secs(3600);

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let contender = args.next().ok_or("CONTENDER KEYS")?;
    let keys: u32 = args.next().ok_or("CONTENDER KEYS")?.parse()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let address = |i: u32| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));

    let (before, after) = if contender == "governor" {
        let quota = Quota::per_hour(NonZeroU32::new(LIMIT as u32).ok_or("limit")?);
        let limiter = RateLimiter::keyed(quota);
        // As the other contenders: what every key shares is made before the count.
        if limiter.check_key(&IpAddr::V4(Ipv4Addr::LOCALHOST)).is_err() {
            return Err("governor rejected a first request".into());
        }
        let before = resident_bytes()?;
        for i in 0..keys {
            if limiter.check_key(&address(i)).is_err() {
                return Err("governor rejected a first request".into());
            }
        }
        let after = resident_bytes()?;
        std::hint::black_box(&limiter);
        (before, after)
    } else if let Some(algorithm) = contender.strip_prefix("memory-") {
        // Rate-limit state may take three quarters of the bound (the rest is kept for what
        // is held): twice the keys keeps every one of them live, none evicted.
        let backend = MemoryBackend::builder()
            .max_keys(2 * keys as usize + 2)
            .build()?;
        let limiter = limiter(&backend.clone().into(), algorithm)?;
        // The first call builds what every key shares (the script cache, the store's map).
        runtime.block_on(limiter.try_acquire(b"warm", 1))?;
        let before = resident_bytes()?;
        fill(&runtime, &limiter, keys, address)?;
        let after = resident_bytes()?;
        if backend.evictions() > 0 {
            return Err(format!("{} keys were evicted", backend.evictions()).into());
        }
        (before, after)
    } else if let Some(algorithm) = contender.strip_prefix("redis-") {
        let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        let coordination: Coordination = runtime
            .block_on(RedisBackend::standalone(&url).key_prefix("m:").connect())?
            .into();
        let limiter = limiter(&coordination, algorithm)?;
        runtime.block_on(limiter.try_acquire(b"warm", 1))?;
        let mut connection = redis::Client::open(url.as_str())?.get_connection()?;
        let before = used_memory(&mut connection)?;
        fill(&runtime, &limiter, keys, address)?;
        let after = used_memory(&mut connection)?;
        let stored: u64 = redis::cmd("DBSIZE").query(&mut connection)?;
        if stored != u64::from(keys) + 1 {
            return Err(format!("Redis holds {stored} keys, not {}", keys + 1).into());
        }
        (before, after)
    } else {
        return Err(format!("unknown CONTENDER {contender:?}").into());
    };
    let per_key = after.saturating_sub(before) as f64 / f64::from(keys);
    println!("{contender} keys {keys} before {before} after {after} per_key {per_key:.1}");
    Ok(())
}

fn limiter(coordination: &Coordination, algorithm: &str) -> Result<Limiter, Error> {
    Ok(match algorithm {
        "fixed-window" => FixedWindow::new(coordination, "m", LIMIT, HOUR)?.into(),
        "sliding-window" => SlidingWindow::new(coordination, "m", LIMIT, HOUR, 10)?.into(),
        "token-bucket" => {
            TokenBucket::new(coordination, "m", LIMIT, Refill::new(LIMIT, HOUR))?.into()
        }
        "gcra" => Gcra::new(coordination, "m", LIMIT, HOUR, LIMIT)?.into(),
        other => return Err(format!("unknown algorithm {other:?}").into()),
    })
}

/// One permit for each of `keys` addresses, keyed on the address's text.
fn fill(
    runtime: &tokio::runtime::Runtime,
    limiter: &Limiter,
    keys: u32,
    address: impl Fn(u32) -> IpAddr,
) -> Result<(), Error> {
    runtime.block_on(async {
        for i in 0..keys {
            let key = address(i).to_string();
            if !limiter.try_acquire(key.as_bytes(), 1).await?.is_granted() {
                return Err::<(), Error>("a first request was rejected".into());
            }
        }
        Ok(())
    })
}

/// This process's resident set, from `/proc/self/status`, once the allocator has given back
/// what it holds free.
fn resident_bytes() -> Result<u64, Error> {
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe { libc::malloc_trim(0) };
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .ok_or("no VmRSS in /proc/self/status")?;
    Ok(kb * 1024)
}

/// Redis's `used_memory`, from `INFO memory`.
fn used_memory(connection: &mut redis::Connection) -> Result<u64, Error> {
    let info: String = redis::cmd("INFO").arg("memory").query(connection)?;
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| "no used_memory in INFO memory".into())
}
