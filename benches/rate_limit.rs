//! Fixed-window decisions per second against a private Redis 7.0 (unix socket), next to the
//! raw ceiling of the same client library in the same run: a bare `INCR` and an `EVALSHA` of
//! the limiter's own Lua script, both through a redis-rs `ConnectionManager` (the connection
//! type the Redis backend uses).
//!
//! Each case runs with 1 caller and with 64 concurrent callers (tokio tasks sharing one
//! multiplexed connection); criterion reports decisions (elements) per second.
//!
//! ```sh
//! cargo bench --bench rate_limit
//! ```
//!
//! Redis 7.0 has no `INCREX`, so after the first call the limiter takes its Lua path: the
//! `evalsha` case is the ceiling it can reach, `incr` the ceiling of any one-command step.

#[path = "../tests/support/mod.rs"]
mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::rate_limit::FixedWindow;
use support::{Server, ServerKind};
use tokio::runtime::Runtime;

/// The limiter's Lua script, byte for byte.
const FIXED_WINDOW_LUA: &str = include_str!("../src/backend/redis/fixed_window.lua");
/// So large that every call in a bench is granted.
const LIMIT: u64 = 1_000_000_000_000;
const WINDOW: Duration = Duration::from_secs(60);
const CONCURRENCY: [usize; 2] = [1, 64];

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
                .key_prefix("bench:")
                .connect(),
        )
        .expect("connect the backend")
        .into();
    let limiter = FixedWindow::new(&coordination, "api", LIMIT, WINDOW).expect("valid limiter");
    let manager = runtime
        .block_on(async {
            redis::Client::open(url.as_str())?
                .get_connection_manager()
                .await
        })
        .expect("connect redis-rs");
    let sha: String = runtime
        .block_on(
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(FIXED_WINDOW_LUA)
                .query_async(&mut manager.clone()),
        )
        .expect("SCRIPT LOAD");
    // First call: Redis 7.0 rejects INCREX once, and the limiter settles on Lua.
    runtime
        .block_on(limiter.acquire(b"warm", 1))
        .expect("first decision");

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(700))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args();
    {
        let mut group = criterion.benchmark_group("fixed_window");
        group.throughput(Throughput::Elements(1));
        for callers in CONCURRENCY {
            let limiter = limiter.clone();
            bench(&mut group, &runtime, "acquire", callers, move || {
                let limiter = limiter.clone();
                async move {
                    let decision = limiter.acquire(b"client", 1).await.expect("acquire");
                    assert!(decision.is_granted());
                }
            });
            let m = manager.clone();
            bench(&mut group, &runtime, "raw_incr", callers, move || {
                let mut m = m.clone();
                async move {
                    let _: i64 = redis::cmd("INCR")
                        .arg("bench:raw:incr")
                        .query_async(&mut m)
                        .await
                        .expect("INCR");
                }
            });
            let (m, sha) = (manager.clone(), Arc::<str>::from(sha.as_str()));
            bench(&mut group, &runtime, "raw_evalsha", callers, move || {
                let (mut m, sha) = (m.clone(), sha.clone());
                async move {
                    let (granted, _, _): (i64, i64, i64) = redis::cmd("EVALSHA")
                        .arg(&*sha)
                        .arg(1)
                        .arg("bench:rl:fw:3:api:raw")
                        .arg(1)
                        .arg(LIMIT)
                        .arg(WINDOW.as_millis() as u64)
                        .query_async(&mut m)
                        .await
                        .expect("EVALSHA");
                    assert_eq!(granted, 1);
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
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
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
