//! Decisions per second of every rate-limit algorithm against a private Redis 7.0 (unix
//! socket), each next to the raw ceiling of the same client library in the same run: an
//! `EVALSHA` of that limiter's own Lua script, with the same KEYS and ARGV, through a bare
//! redis-rs `ConnectionManager` (the connection type the Redis backend uses).
//!
//! One group per algorithm (fixed window, sliding window with 10 segments, token bucket,
//! GCRA, stacked fixed windows with 2 policies); in each, `limiter/N` and `evalsha/N` run
//! with N = 1 and N = 64 concurrent callers (tokio tasks sharing one multiplexed
//! connection). Criterion reports decisions (elements) per second; `limiter/64` over
//! `evalsha/64` is what the limiter keeps of its ceiling. The settings of each limiter, and
//! the exact command it sends, are in `algorithms/mod.rs` beside this file: every call is
//! granted.
//!
//! ```sh
//! cargo bench -p leasehold-micro-bench --bench rate_limit             # about 2 minutes
//! cargo bench -p leasehold-micro-bench --bench rate_limit -- --quick  # under a minute, rough
//! cargo bench -p leasehold-micro-bench --bench rate_limit -- gcra/    # one algorithm
//! ```
//!
//! Redis 7.0 has no `INCREX`, so after its first call the fixed window sends a step of one
//! permit as plain commands (`SET NX PX`, `INCR`, `PTTL`), not its script: in its group,
//! `evalsha` is the script it sends for larger steps, no longer its ceiling. In the other
//! four, `evalsha` is the ceiling the limiter can reach.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod algorithms;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use algorithms::Algorithm;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput, measurement::WallTime};
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use support::{Server, ServerKind};
use tokio::runtime::Runtime;

const PREFIX: &str = "bench:";
const CALLERS: [usize; 2] = [1, 64];
/// The client keys of the two sides: apart, so neither changes the state the other sees,
/// and of one length, so both send commands of one size.
const LIMITER_KEY: &str = "limiter";
const EVALSHA_KEY: &str = "evalsha";

fn main() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let url = server.unix_url();

    let coordination: Coordination = runtime
        .block_on(
            RedisBackend::standalone(url.as_str())
                .key_prefix(PREFIX)
                .connect(),
        )
        .expect("connect the backend")
        .into();
    let manager = runtime
        .block_on(async {
            redis::Client::open(url.as_str())?
                .get_connection_manager()
                .await
        })
        .expect("connect redis-rs");

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args();
    for algorithm in Algorithm::ALL {
        let limiter = algorithm
            .limiter(&coordination)
            .expect("valid limiter settings");
        let evalsha = runtime.block_on(async {
            // The first call loads the script (NOSCRIPT, then EVAL) and, for the fixed
            // window, settles the INCREX probe (Redis 7.0 rejects it once).
            assert!(
                algorithms::warm_up(&limiter, LIMITER_KEY.as_bytes())
                    .await
                    .expect("warm-up calls")
            );
            algorithms::check_key(&mut manager.clone(), algorithm, PREFIX, LIMITER_KEY)
                .await
                .expect("the raw EVALSHA's key");
            // Loaded here: the fixed window sends steps of one as plain commands, so its
            // script may never have reached the server.
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(algorithm.lua())
                .query_async(&mut manager.clone())
                .await
                .expect("SCRIPT LOAD");
            Arc::new(algorithm.evalsha(&sha, PREFIX, EVALSHA_KEY))
        });

        let mut group = criterion.benchmark_group(algorithm.name());
        group.throughput(Throughput::Elements(1));
        for callers in CALLERS {
            let limiter = limiter.clone();
            bench(&mut group, &runtime, "limiter", callers, move || {
                let limiter = limiter.clone();
                async move {
                    let granted = limiter.acquire(LIMITER_KEY.as_bytes()).await;
                    assert!(granted.expect("acquire"), "{} denied", algorithm.name());
                }
            });
            let (manager, evalsha) = (manager.clone(), evalsha.clone());
            bench(&mut group, &runtime, "evalsha", callers, move || {
                let (mut manager, evalsha) = (manager.clone(), evalsha.clone());
                async move {
                    let reply: redis::Value =
                        evalsha.query_async(&mut manager).await.expect("EVALSHA");
                    assert!(
                        algorithm.is_grant(&reply),
                        "{}: {reply:?}",
                        algorithm.name()
                    );
                }
            });
        }
        group.finish();
    }
    criterion.final_summary();
    drop(server);
}

/// Measures `step` as `callers` tasks that each run their share of the iterations back to
/// back, all at once: the time per iteration is the wall time over all of them.
fn bench<F, Fut>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &Runtime,
    name: &str,
    callers: usize,
    step: F,
) where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    group.bench_function(BenchmarkId::new(name, callers), |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let step = step.clone();
            async move {
                let per_task = iters.div_ceil(callers as u64);
                let start = Instant::now();
                let tasks: Vec<_> = (0..callers)
                    .map(|_| {
                        let step = step.clone();
                        tokio::spawn(async move {
                            for _ in 0..per_task {
                                step().await;
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.expect("bench task");
                }
                // Count what ran: per_task * callers may exceed iters by under one round.
                start
                    .elapsed()
                    .mul_f64(iters as f64 / (per_task * callers as u64) as f64)
            }
        })
    });
}
