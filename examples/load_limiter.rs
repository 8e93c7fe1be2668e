//! Load generator for the rate limiters: `CONCURRENCY` tokio tasks share one `Coordination`
//! (one multiplexed connection) and call one limiter's `acquire` back to back for `SECONDS`
//! seconds; prints the decisions per second.
//!
//! ```sh
//! REDIS_URL=redis+unix:///tmp/redis.sock \
//!     cargo run --release --example load_limiter -- 64 5 limiter sliding_window
//! ```
//!
//! Arguments: `[CONCURRENCY=64] [SECONDS=5] [MODE=limiter] [ALGO=fixed_window]`. ALGO is one
//! of `fixed_window`, `sliding_window` (10 segments), `token_bucket`, `gcra`, `stacked`
//! (2 policies); their settings are in `benches/micro/benches/algorithms/mod.rs`, and every call is
//! granted. MODE:
//!
//! - `limiter`: the limiter's `acquire`;
//! - `evalsha`: the limiter's Lua script with `EVALSHA` through a bare redis-rs
//!   `ConnectionManager`, with the same KEYS and ARGV as the limiter (the same key, too: run
//!   one mode at a time, or the two share state): the same client's ceiling, for comparison
//!   (not the fixed window's: its limiter sends a step of one permit as plain commands);
//! - `incr`: a bare `INCR` (ALGO is ignored);
//! - `command`: loads the script and prints, on one line, the `EVALSHA` the `evalsha` mode
//!   sends, for `redis-benchmark` (no load).
//!
//! The output is one line, `decisions/s <n>`, preceded by details on stderr.
//! `scripts/bench.sh` runs every algorithm next to `redis-benchmark`.

#[path = "../benches/micro/benches/algorithms/mod.rs"]
mod algorithms;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use algorithms::{Algorithm, Limiter};
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;

const PREFIX: &str = "load:";
/// The client key of both the limiter and its raw `EVALSHA`.
const CLIENT_KEY: &str = "load";

#[derive(Clone)]
enum Step {
    Limiter(Limiter),
    EvalSha(redis::aio::ConnectionManager, Arc<redis::Cmd>, Algorithm),
    Incr(redis::aio::ConnectionManager),
}

impl Step {
    async fn run(&self) -> bool {
        match self {
            Step::Limiter(limiter) => limiter
                .acquire(CLIENT_KEY.as_bytes())
                .await
                .unwrap_or(false),
            Step::EvalSha(manager, evalsha, algorithm) => evalsha
                .query_async::<redis::Value>(&mut manager.clone())
                .await
                .is_ok_and(|reply| algorithm.is_grant(&reply)),
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
    let algo = args.next().unwrap_or_else(|| "fixed_window".into());
    if concurrency == 0 || !(seconds > 0.0 && seconds <= 600.0) {
        return Err("CONCURRENCY must be at least 1 and SECONDS in (0, 600]".into());
    }
    let algorithm = Algorithm::parse(&algo).ok_or_else(|| {
        let names: Vec<_> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        format!("unknown ALGO {algo:?}: {}", names.join(", "))
    })?;

    let step = match mode.as_str() {
        "limiter" => {
            let coordination: Coordination = RedisBackend::standalone(url.as_str())
                .key_prefix(PREFIX)
                .connect()
                .await?
                .into();
            let limiter = algorithm.limiter(&coordination)?;
            // Before measuring: load the script, and settle the fixed window's INCREX probe
            // (an older server rejects it once).
            if !algorithms::warm_up(&limiter, CLIENT_KEY.as_bytes()).await? {
                return Err(format!("the {algo} limiter denied a warm-up call").into());
            }
            // The `evalsha` mode must hit the key this limiter writes.
            let mut manager = redis::Client::open(url.as_str())?
                .get_connection_manager()
                .await?;
            algorithms::check_key(&mut manager, algorithm, PREFIX, CLIENT_KEY).await?;
            Step::Limiter(limiter)
        }
        "evalsha" | "incr" | "command" => {
            let mut manager = redis::Client::open(url.as_str())?
                .get_connection_manager()
                .await?;
            if mode == "incr" {
                Step::Incr(manager)
            } else {
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(algorithm.lua())
                    .query_async(&mut manager)
                    .await?;
                if mode == "command" {
                    // Keys and arguments hold no spaces: the line splits on whitespace.
                    let args = algorithm.evalsha_args(PREFIX, CLIENT_KEY);
                    println!("EVALSHA {sha} {}", args.join(" "));
                    return Ok(());
                }
                Step::EvalSha(
                    manager,
                    Arc::new(algorithm.evalsha(&sha, PREFIX, CLIENT_KEY)),
                    algorithm,
                )
            }
        }
        other => {
            return Err(
                format!("unknown MODE {other:?}: limiter, evalsha, incr or command").into(),
            );
        }
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
        "mode={mode} algo={algo} concurrency={concurrency} elapsed={elapsed:.2}s granted={ok} \
         failed={bad}"
    );
    if bad > 0 {
        return Err(format!("{bad} calls failed or were not granted").into());
    }
    println!("decisions/s {:.0}", ok as f64 / elapsed);
    Ok(())
}
