//! How the memory backend's decisions scale across threads, beside `governor`'s keyed limiter
//! in the same run: GCRA decisions per second at 1 and 2 threads, on distinct keys (each
//! thread its own 1,000 keys) and on one hot key shared by every thread.
//!
//! ```sh
//! cargo bench -p leasehold-micro-bench --bench memory_scaling
//! ```
//!
//! Criterion reports decisions (elements) per second for each `side/keys/threads`; what
//! matters is each side's 2-thread over 1-thread throughput, which a lock that every
//! decision takes keeps near (or below) 1. Every limit is large enough that every call is
//! granted. Each thread of our side runs its decisions in a current-thread runtime of its
//! own (a memory step completes in its first poll).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use governor::{Quota, RateLimiter};
use leasehold::Coordination;
use leasehold::coordination::rate_limit::Gcra;

const THREADS: [usize; 2] = [1, 2];
const KEYS_PER_THREAD: usize = 1_000;
/// A limit no benchmark reaches: every decision is a grant (per 1,000 s for ours, whose
/// emission interval is at least 1 µs; per second for governor's).
const LIMIT: u32 = 1_000_000_000;

#[derive(Clone, Copy)]
enum Keys {
    /// Each thread its own keys.
    Distinct,
    /// One key for every thread.
    Hot,
}

impl Keys {
    fn name(self) -> &'static str {
        match self {
            Keys::Distinct => "distinct",
            Keys::Hot => "hot",
        }
    }

    /// The keys thread `thread` cycles through.
    fn of(self, thread: usize) -> Vec<Vec<u8>> {
        match self {
            Keys::Distinct => (0..KEYS_PER_THREAD)
                .map(|i| format!("client-{thread}-{i}").into_bytes())
                .collect(),
            Keys::Hot => vec![b"hot".to_vec()],
        }
    }
}

/// Runs `iterations` decisions split over `threads` threads, each thread's share run by
/// `decide` over its own keys; returns the wall time from the first decision to the last.
fn timed<F>(threads: usize, iterations: u64, keys: Keys, decide: F) -> Duration
where
    F: Fn(&[Vec<u8>], u64) + Send + Sync + 'static,
{
    let decide = Arc::new(decide);
    let per_thread = iterations.div_ceil(threads as u64);
    let start = Arc::new(std::sync::Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|thread| {
            let (decide, start) = (Arc::clone(&decide), Arc::clone(&start));
            let keys = keys.of(thread);
            std::thread::spawn(move || {
                start.wait();
                decide(&keys, per_thread);
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    for worker in workers {
        worker.join().expect("worker");
    }
    began.elapsed()
}

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
        .configure_from_args();
    for keys in [Keys::Distinct, Keys::Hot] {
        let mut group = criterion.benchmark_group(format!("memory_scaling/{}", keys.name()));
        for threads in THREADS {
            group.throughput(Throughput::Elements(1));
            group.bench_function(BenchmarkId::new("leasehold_gcra", threads), |b| {
                b.iter_custom(|iterations| {
                    let limiter = Gcra::new(
                        &Coordination::memory(),
                        "scaling",
                        u64::from(LIMIT),
                        // An emission interval of 1 µs, the shortest GCRA takes.
                        Duration::from_secs(1_000),
                        u64::from(LIMIT),
                    )
                    .expect("a limiter");
                    timed(threads, iterations, keys, move |keys, decisions| {
                        let runtime = tokio::runtime::Builder::new_current_thread()
                            .build()
                            .expect("runtime");
                        runtime.block_on(async {
                            for i in 0..decisions {
                                let key = &keys[i as usize % keys.len()];
                                let _ = limiter.try_acquire(key, 1).await;
                            }
                        });
                    })
                })
            });
            group.bench_function(BenchmarkId::new("governor_keyed", threads), |b| {
                b.iter_custom(|iterations| {
                    let per_second = NonZeroU32::new(LIMIT).expect("not zero");
                    let limiter =
                        RateLimiter::<Vec<u8>, _, _>::keyed(Quota::per_second(per_second));
                    timed(threads, iterations, keys, move |keys, decisions| {
                        for i in 0..decisions {
                            let _ = limiter.check_key(&keys[i as usize % keys.len()]);
                        }
                    })
                })
            });
        }
        group.finish();
    }
    criterion.final_summary();
}
