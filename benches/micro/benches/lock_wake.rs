//! How soon a waiter takes a fenced lock after its holder releases it: `FencedLock::acquire`
//! (woken by the server's invalidation of the lease key) next to the usual alternative,
//! retrying `try_acquire` every 50 ms, measured in the same run against a private Redis 7.0.
//!
//! ```sh
//! cargo bench -p leasehold-micro-bench --bench lock_wake
//! ```
//!
//! Each iteration: a holder takes the lock, a waiter starts waiting, the holder releases, and
//! the time from the release's reply to the waiter holding the lock is what is measured.
//! After criterion's figures, `HAND_OVERS` (1,000) hand-overs to a waiter woken by
//! invalidation are timed one by one, and their p50, p99 and worst are printed: a mean hides
//! the tail a waiter lives through.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod quantiles;

use std::time::{Duration, Instant};

use criterion::Criterion;
use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::lock::{FencedLease, FencedLock};
use support::{Server, ServerKind};

const LEASE: Duration = Duration::from_secs(30);
/// The polling baseline's interval, a common default for lock waiters.
const POLL: Duration = Duration::from_millis(50);
/// Time for the waiter to make its first attempt and start waiting.
const SETTLE: Duration = Duration::from_millis(20);

#[derive(Clone, Copy)]
enum Waiter {
    Invalidation,
    Polling,
}

impl Waiter {
    async fn wait(self, lock: &FencedLock) -> FencedLease {
        match self {
            Waiter::Invalidation => lock.acquire(LEASE).await.expect("acquire"),
            Waiter::Polling => loop {
                if let Some(lease) = lock.try_acquire(LEASE).await.expect("try").acquired() {
                    return lease;
                }
                tokio::time::sleep(POLL).await;
            },
        }
    }
}

/// One hand-over: how long after the release the waiter held the lock.
async fn hand_over(holder: &FencedLock, waiter_lock: &FencedLock, waiter: Waiter) -> Duration {
    let mut held = holder
        .try_acquire(LEASE)
        .await
        .expect("try")
        .acquired()
        .expect("free at the start of an iteration");
    let waiter_lock = waiter_lock.clone();
    let waiting = tokio::spawn(async move {
        let mut lease = waiter.wait(&waiter_lock).await;
        let acquired = Instant::now();
        lease.release().await.expect("release");
        acquired
    });
    tokio::time::sleep(SETTLE).await;
    held.release().await.expect("release");
    let released = Instant::now();
    let acquired = waiting.await.expect("waiter");
    acquired.saturating_duration_since(released)
}

fn main() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let connect = || async {
        let backend = RedisBackend::standalone(server.url())
            .key_prefix("bench:")
            .connect()
            .await
            .expect("connect");
        Coordination::from(backend)
    };
    let (holder, waiter) = runtime.block_on(async {
        (
            FencedLock::named(&connect().await, "wake"),
            FencedLock::named(&connect().await, "wake"),
        )
    });

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10)
        .configure_from_args();
    let mut group = criterion.benchmark_group("lock_wake");
    for (name, kind) in [
        ("invalidation", Waiter::Invalidation),
        ("polling_50ms", Waiter::Polling),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter_custom(|iterations| {
                let (holder, waiter) = (holder.clone(), waiter.clone());
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        total += hand_over(&holder, &waiter, kind).await;
                    }
                    total
                }
            });
        });
    }
    group.finish();
    criterion.final_summary();

    let hand_overs: usize = std::env::var("HAND_OVERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000);
    let times = runtime.block_on(async {
        let mut times = Vec::with_capacity(hand_overs);
        for _ in 0..hand_overs {
            times.push(hand_over(&holder, &waiter, Waiter::Invalidation).await);
        }
        times
    });
    quantiles::print("lock hand-over, woken by invalidation", times);
}
