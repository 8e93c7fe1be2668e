//! Load generator for the fixed-window limiter: `CONCURRENCY` tokio tasks share one
//! `Coordination` (one multiplexed connection) and call `FixedWindow::acquire` back to back
//! for `SECONDS` seconds; prints the decisions per second.
//!
//! ```sh
//! REDIS_URL=redis+unix:///tmp/redis.sock \
//!     cargo run --release --example load_limiter -- 64 5
//! ```
//!
//! Arguments: `[CONCURRENCY=64] [SECONDS=5] [MODE=limiter]`. MODE `evalsha` sends the
//! limiter's Lua script with `EVALSHA` through a bare redis-rs `ConnectionManager` instead,
//! and `incr` a bare `INCR`: the same client's ceiling, for comparison. The limit is so large
//! that every call is granted. The output is one line, `decisions/s <n>`, preceded by details
//! on stderr. `scripts/bench.sh` runs it next to `redis-benchmark`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::rate_limit::FixedWindow;

const FIXED_WINDOW_LUA: &str = include_str!("../src/backend/redis/fixed_window.lua");
const LIMIT: u64 = 1_000_000_000_000;
const WINDOW_MS: u64 = 60_000;

#[derive(Clone)]
enum Step {
    Limiter(FixedWindow),
    EvalSha(redis::aio::ConnectionManager, Arc<str>),
    Incr(redis::aio::ConnectionManager),
}

impl Step {
    async fn run(&self) -> bool {
        match self {
            Step::Limiter(limiter) => limiter
                .acquire(b"load", 1)
                .await
                .map(|d| d.is_granted())
                .unwrap_or(false),
            Step::EvalSha(manager, sha) => redis::cmd("EVALSHA")
                .arg(&**sha)
                .arg(1)
                .arg("load:rl:fw:4:load:raw")
                .arg(1)
                .arg(LIMIT)
                .arg(WINDOW_MS)
                .query_async::<redis::Value>(&mut manager.clone())
                .await
                .is_ok_and(|reply| match reply {
                    // A grant is packed into one integer when small, else {1, count, ttl}.
                    redis::Value::Int(packed) => packed >= 0,
                    redis::Value::Array(fields) => fields.first() == Some(&redis::Value::Int(1)),
                    _ => false,
                }),
            Step::Incr(manager) => redis::cmd("INCR")
                .arg("load:raw:incr")
                .query_async::<i64>(&mut manager.clone())
                .await
                .is_ok(),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let mut args = std::env::args().skip(1);
    let concurrency: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let seconds: f64 = args.next().map_or(Ok(5.0), |a| a.parse())?;
    let mode = args.next().unwrap_or_else(|| "limiter".into());
    if concurrency == 0 || !(seconds > 0.0 && seconds <= 600.0) {
        return Err("CONCURRENCY must be at least 1 and SECONDS in (0, 600]".into());
    }

    let step = match mode.as_str() {
        "limiter" => {
            let coordination: Coordination = RedisBackend::standalone(url.as_str())
                .key_prefix("load:")
                .connect()
                .await?
                .into();
            let limiter = FixedWindow::new(
                &coordination,
                "load",
                LIMIT,
                Duration::from_millis(WINDOW_MS),
            )?;
            // Settle the INCREX probe before measuring (an older server rejects it once).
            limiter.acquire(b"warm", 1).await?;
            Step::Limiter(limiter)
        }
        "evalsha" | "incr" => {
            let mut manager = redis::Client::open(url.as_str())?
                .get_connection_manager()
                .await?;
            if mode == "incr" {
                Step::Incr(manager)
            } else {
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(FIXED_WINDOW_LUA)
                    .query_async(&mut manager)
                    .await?;
                Step::EvalSha(manager, sha.into())
            }
        }
        other => return Err(format!("unknown MODE {other:?}: limiter, evalsha or incr").into()),
    };

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (step, stop, done, failed) =
                (step.clone(), stop.clone(), done.clone(), failed.clone());
            tokio::spawn(async move {
                let (mut ok, mut bad) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    if step.run().await {
                        ok += 1;
                    } else {
                        bad += 1;
                    }
                }
                done.fetch_add(ok, Ordering::Relaxed);
                failed.fetch_add(bad, Ordering::Relaxed);
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (ok, bad) = (done.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!(
        "mode={mode} concurrency={concurrency} elapsed={elapsed:.2}s granted={ok} failed={bad}"
    );
    if bad > 0 {
        return Err(format!("{bad} calls failed or were not granted").into());
    }
    println!("decisions/s {:.0}", ok as f64 / elapsed);
    Ok(())
}
