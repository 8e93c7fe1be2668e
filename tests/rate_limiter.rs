//! `RateLimiter`'s local features: the waiting queue, the deny cache and statistics.

mod support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::rate_limit::{FixedWindow, QueueOrder, RateLimiter};
use leasehold::{Coordination, ErrorKind};
use support::target::{command_calls, is_granted};
use support::{Server, ServerKind, unique_prefix};
use tokio::time::Instant;

const SECOND: Duration = Duration::from_secs(1);

fn memory_limiter(limit: u64, window: Duration) -> RateLimiter {
    FixedWindow::new(&Coordination::memory(), "api", limit, window)
        .expect("valid")
        .into()
}

#[tokio::test(start_paused = true)]
async fn a_queued_request_waits_exactly_until_the_server_time() {
    let limiter = memory_limiter(1, 10 * SECOND).with_queue(5, QueueOrder::OldestFirst);
    assert!(is_granted(&limiter, b"k", 1).await);
    let start = Instant::now();
    let decision = limiter.acquire(b"k", 1, 20 * SECOND).await.expect("wait");
    assert!(decision.is_granted());
    assert_eq!(
        start.elapsed(),
        10 * SECOND,
        "woken at the window's end, not before or after"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_longer_than_allowed_is_rejected_at_once() {
    let limiter = memory_limiter(1, 10 * SECOND).with_queue(5, QueueOrder::OldestFirst);
    limiter.try_acquire(b"k", 1).await.expect("acquire");
    let start = Instant::now();
    let decision = limiter.acquire(b"k", 1, 5 * SECOND).await.expect("wait");
    assert!(!decision.is_granted());
    assert_eq!(decision.retry_after(), Some(10 * SECOND));
    assert_eq!(start.elapsed(), Duration::ZERO);
    // A request that can never succeed is not queued either.
    let impossible = limiter.acquire(b"k", 2, 60 * SECOND).await.expect("wait");
    assert!(!impossible.is_granted() && impossible.retry_after().is_none());
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// Spawns one waiter per id, in order, each recording when it was served.
async fn spawn_waiters(
    limiter: &RateLimiter,
    ids: &[u32],
) -> Vec<tokio::task::JoinHandle<(u32, bool, Duration)>> {
    let start = Instant::now();
    let mut handles = Vec::new();
    for &id in ids {
        let limiter = limiter.clone();
        handles.push(tokio::spawn(async move {
            let decision = limiter.acquire(b"k", 1, 60 * SECOND).await.expect("wait");
            (id, decision.is_granted(), start.elapsed())
        }));
        // Let it reach the queue before the next one arrives.
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
    }
    handles
}

#[tokio::test(start_paused = true)]
async fn oldest_first_serves_in_arrival_order_without_polling() {
    let limiter = memory_limiter(1, SECOND).with_queue(10, QueueOrder::OldestFirst);
    limiter.try_acquire(b"k", 1).await.expect("acquire");
    let handles = spawn_waiters(&limiter, &[1, 2, 3]).await;
    assert_eq!(limiter.statistics().queued_permits(), 3);
    let mut served = Vec::new();
    for handle in handles {
        served.push(handle.await.expect("task"));
    }
    assert_eq!(
        served,
        vec![
            (1, true, SECOND),
            (2, true, 2 * SECOND),
            (3, true, 3 * SECOND)
        ]
    );
    let stats = limiter.statistics();
    assert_eq!(
        (stats.granted(), stats.rejected(), stats.queued_permits()),
        (4, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn newest_first_serves_the_latest_and_evicts_the_oldest() {
    let limiter = memory_limiter(1, SECOND).with_queue(2, QueueOrder::NewestFirst);
    limiter.try_acquire(b"k", 1).await.expect("acquire");
    let handles = spawn_waiters(&limiter, &[1, 2, 3]).await;
    let mut served = Vec::new();
    for handle in handles {
        served.push(handle.await.expect("task"));
    }
    // 1 was pushed out when 3 arrived; 3 then 2 were served.
    assert_eq!(
        served,
        vec![
            (1, false, Duration::ZERO),
            (2, true, 2 * SECOND),
            (3, true, SECOND)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_rejects_and_a_cancelled_waiter_leaves_its_place() {
    let limiter = memory_limiter(1, SECOND).with_queue(1, QueueOrder::OldestFirst);
    limiter.try_acquire(b"k", 1).await.expect("acquire");
    let waiting = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire(b"k", 1, 60 * SECOND).await })
    };
    tokio::task::yield_now().await;
    assert_eq!(limiter.statistics().queued_permits(), 1);
    let full = limiter.acquire(b"k", 1, 60 * SECOND).await.expect("wait");
    assert!(!full.is_granted(), "no room in the queue");

    waiting.abort();
    assert!(waiting.await.expect_err("aborted").is_cancelled());
    assert_eq!(limiter.statistics().queued_permits(), 0);
    let start = Instant::now();
    let decision = limiter.acquire(b"k", 1, 60 * SECOND).await.expect("wait");
    assert!(decision.is_granted());
    assert_eq!(start.elapsed(), SECOND);
}

#[tokio::test(start_paused = true)]
async fn shutdown_fails_waiters_and_later_calls() {
    let limiter = memory_limiter(1, 60 * SECOND).with_queue(10, QueueOrder::OldestFirst);
    limiter.try_acquire(b"k", 1).await.expect("acquire");
    let waiting = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire(b"k", 1, 120 * SECOND).await })
    };
    tokio::task::yield_now().await;
    let start = Instant::now();
    limiter.shutdown();
    let err = waiting.await.expect("task").expect_err("shut down");
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert_eq!(start.elapsed(), Duration::ZERO, "woken at once");
    assert_eq!(
        limiter
            .try_acquire(b"k", 1)
            .await
            .expect_err("closed")
            .kind(),
        ErrorKind::Closed
    );
}

#[tokio::test(start_paused = true)]
async fn statistics_report_counts_availability_and_idleness() {
    let limiter = memory_limiter(2, SECOND);
    let fresh = limiter.statistics();
    assert_eq!(
        (fresh.granted(), fresh.rejected(), fresh.available_permits()),
        (0, 0, None)
    );
    limiter.try_acquire(b"k", 1).await.expect("acquire");
    limiter.try_acquire(b"k", 2).await.expect("acquire");
    tokio::time::advance(Duration::from_millis(750)).await;
    let stats = limiter.statistics();
    assert_eq!((stats.granted(), stats.rejected()), (1, 1));
    assert_eq!(stats.available_permits(), Some(1));
    assert_eq!(stats.idle_duration(), Duration::from_millis(750));
    // Clones share the statistics.
    limiter.clone().try_acquire(b"k", 1).await.expect("acquire");
    assert_eq!(limiter.statistics().granted(), 2);
    assert_eq!(limiter.statistics().idle_duration(), Duration::ZERO);
}

// ---------------------------------------------------------------------------------------------
// Against Redis: what reaches the server.

/// The fixed-window steps that reached the server: scripts, and the `INCR` of each step of one
/// permit sent as plain commands.
fn step_calls(server: &Server) -> u64 {
    command_calls(server, "evalsha") + command_calls(server, "eval") + command_calls(server, "incr")
}

async fn redis_limiter(server: &Server, limit: u64, window: Duration) -> RateLimiter {
    let backend = RedisBackend::standalone(server.unix_url())
        .key_prefix(unique_prefix("limiter"))
        .connect()
        .await
        .expect("connect");
    // Learn once that this server has no INCREX, so only the other ways are counted below.
    let coordination = Coordination::from(backend);
    let limiter: RateLimiter = FixedWindow::new(&coordination, "api", limit, window)
        .expect("valid")
        .into();
    limiter.try_acquire(b"warm-up", 0).await.expect("probe");
    limiter.try_acquire(b"warm-up", 1).await.expect("acquire");
    limiter
}

#[tokio::test]
async fn a_waiter_retries_once_per_server_computed_wake_up() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let limiter = redis_limiter(&server, 1, Duration::from_millis(300))
        .await
        .with_queue(10, QueueOrder::OldestFirst);
    let before = step_calls(&server);
    assert!(is_granted(&limiter, b"k", 1).await);
    let start = Instant::now();
    let decision = limiter.acquire(b"k", 1, 5 * SECOND).await.expect("wait");
    assert!(decision.is_granted());
    assert!(start.elapsed() < 2 * SECOND);
    // The grant, the rejection that queued the request, and one retry at the server's time.
    assert_eq!(step_calls(&server) - before, 3, "no polling");
}

#[tokio::test]
async fn the_deny_cache_answers_a_flood_of_a_rejected_key_locally() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let limiter = redis_limiter(&server, 2, 60 * SECOND)
        .await
        .with_deny_cache(1000);
    let before = step_calls(&server);
    let mut granted = 0;
    for _ in 0..200 {
        let decision = limiter.try_acquire(b"hot", 1).await.expect("acquire");
        if decision.is_granted() {
            granted += 1;
        } else {
            let wait = decision.retry_after().expect("retry time");
            // Redis frees the window a millisecond after its TTL.
            assert!(wait > Duration::ZERO && wait <= 60 * SECOND + Duration::from_millis(1));
        }
    }
    assert_eq!(granted, 2);
    // Two grants and one rejection reached Redis; 197 rejections were answered locally.
    assert_eq!(step_calls(&server) - before, 3);
    assert_eq!(limiter.statistics().rejected(), 198);
    // Another key still asks Redis.
    assert!(is_granted(&limiter, b"cold", 1).await);
    assert_eq!(step_calls(&server) - before, 4);
}

#[tokio::test]
async fn many_concurrent_waiters_are_all_served_within_the_limit() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let limiter = redis_limiter(&server, 5, Duration::from_millis(200))
        .await
        .with_queue(100, QueueOrder::OldestFirst);
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let start = Instant::now();
    let tasks: Vec<_> = (0..15)
        .map(|_| {
            let limiter = limiter.clone();
            let served = served.clone();
            tokio::spawn(async move {
                let decision = limiter.acquire(b"k", 1, 10 * SECOND).await.expect("wait");
                assert!(decision.is_granted());
                served.lock().expect("lock").push(start.elapsed());
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    let served = served.lock().expect("lock").clone();
    assert_eq!(served.len(), 15);
    // 5 per 200 ms window: 15 requests need three windows; no window admitted more than 5.
    let mut sorted = served;
    sorted.sort();
    assert!(sorted[5] >= Duration::from_millis(100), "{sorted:?}");
}

/// A limit refused at construction is named in the error: a service has several.
#[test]
fn an_invalid_limit_is_named_in_its_error() {
    use leasehold::coordination::rate_limit::{Gcra, SlidingWindow};
    use leasehold::layer::concurrency_limit::{Capacity, RedisConcurrencyLimitLayer};
    let coordination = leasehold::Coordination::memory();
    let minute = std::time::Duration::from_secs(60);
    let errors = [
        FixedWindow::new(&coordination, "checkout", 0, minute).map(drop),
        SlidingWindow::new(&coordination, "search", 0, minute, 6).map(drop),
        Gcra::new(&coordination, "login", 0, minute, 1).map(drop),
        RedisConcurrencyLimitLayer::new(&coordination, "exports", Capacity::global(0)).map(drop),
    ];
    for (error, name) in errors
        .into_iter()
        .zip(["checkout", "search", "login", "exports"])
    {
        let error = error.expect_err("invalid");
        assert_eq!(error.kind(), leasehold::ErrorKind::InvalidArgument);
        assert!(error.to_string().contains(&format!("{name:?}")), "{error}");
    }
}
