//! The fixed window's hot-key tier: batches reserved in the deciding step, spent locally,
//! returned only to their own window, and never an admission over the limit: across
//! instances, with a reservation's answer lost, with the server unreachable, with an
//! instance killed while it holds a batch, over HTTP, and while the key's slot moves.

mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leasehold::Coordination;
use leasehold::ErrorKind;
use leasehold::backend::key_slot;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::rate_limit::{FixedWindow, HotKeyStatistics, HotKeys, RateLimiter};
use support::proxy::Direction;
use support::target::{Target, is_granted, scenario};
use support::{Behind, Cluster, ServerKind, unique_prefix};

const MINUTE: Duration = Duration::from_secs(60);

/// A limiter with the tier, on `coordination`.
fn tiered(coordination: &Coordination, limit: u64, window: Duration, batch: u64) -> RateLimiter {
    let window = FixedWindow::new(coordination, "hot", limit, window)
        .expect("valid")
        .with_hot_keys(HotKeys::new(batch))
        .expect("valid tier");
    RateLimiter::from(window)
}

/// A server behind the fault proxy, and a fixed window of 1,000 a minute through it, with
/// batches of `batch` (a reply given up after 300 ms).
async fn tier_behind_proxy(test: &str, batch: u64) -> (Behind, FixedWindow) {
    let behind = Behind::start(test);
    let coordination = behind
        .through_proxy(|b| b.response_timeout(Duration::from_millis(300)))
        .await;
    let window = FixedWindow::new(&coordination, "hot", 1_000, MINUTE)
        .expect("valid")
        .with_hot_keys(HotKeys::new(batch))
        .expect("valid tier");
    (behind, window)
}

/// Every reserved permit is spent, returned, lapsed or held: none appears or vanishes.
#[track_caller]
fn assert_accounted(stats: HotKeyStatistics) {
    assert_eq!(
        stats.reserved(),
        stats.spent() + stats.returned() + stats.lapsed() + stats.held(),
        "{stats:?}"
    );
}

/// The tier's statistics once no reservation is on its way (a next batch reserved in the
/// background may be), within 5 s.
async fn settled(limiter: &RateLimiter) -> HotKeyStatistics {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = limiter.statistics().hot_keys().expect("tier");
        if stats.in_flight() == 0 {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "a reservation still on its way after 5 s: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether the target's server names a window exactly (`PEXPIRETIME`, Redis 7.0+, Valkey
/// 7.2+): on Redis 6.2 reserved permits are never returned, they lapse.
fn returns(target: Target) -> bool {
    !matches!(target, Target::Server(ServerKind::Redis6))
}

/// Whether `limiter` grants `permits` of `k` now.
async fn granted(limiter: &RateLimiter, permits: u64) -> bool {
    limiter
        .try_acquire(b"k", permits)
        .await
        .expect("decided")
        .is_granted()
}

/// Grants `limiter` gives `key` out of `requests` tries, `tasks` at a time.
async fn grants(limiter: &RateLimiter, key: &'static [u8], tasks: usize, requests: u64) -> u64 {
    let granted = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (limiter, granted) = (limiter.clone(), granted.clone());
            tokio::spawn(async move {
                for _ in 0..requests {
                    if limiter
                        .try_acquire(key, 1)
                        .await
                        .expect("decided")
                        .is_granted()
                    {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("task");
    }
    granted.load(Ordering::Relaxed)
}

/// The permits a plain limiter (no tier) on the same key still grants: what the window has
/// left once every reservation is spent or returned.
async fn left_in_window(coordination: &Coordination, limit: u64, key: &[u8]) -> u64 {
    let plain = FixedWindow::new(coordination, "hot", limit, MINUTE).expect("valid");
    plain.try_acquire(key, 0).await.expect("probe").remaining()
}

// ---------------------------------------------------------------------------------------------

scenario!(two_instances_admit_the_limit_or_under_and_returns_make_it_exact);

/// Two instances (separate connections, as two replicas) flood one key, each with its tier:
/// together they never grant more than the limit; each one's permits are all accounted for;
/// and once both return what they hold, the window's count is exactly what was granted.
async fn two_instances_admit_the_limit_or_under_and_returns_make_it_exact(target: Target) {
    const LIMIT: u64 = 1_000;
    let first = target.coordination("hot-two").await;
    let second = target.handles(&first, 1).await.remove(0);
    let (a, b) = (
        tiered(&first, LIMIT, MINUTE, 40),
        tiered(&second, LIMIT, MINUTE, 40),
    );
    // 4 × 150 per instance: more than the limit between them, so both meet its end.
    let (granted_a, granted_b) = tokio::join!(grants(&a, b"k", 4, 150), grants(&b, b"k", 4, 150));
    let granted = granted_a + granted_b;
    assert!(granted <= LIMIT, "{granted} grants over a limit of {LIMIT}");
    let (stats_a, stats_b) = (settled(&a).await, settled(&b).await);
    assert_accounted(stats_a);
    assert_accounted(stats_b);
    assert!(
        stats_a.spent() + stats_b.spent() > 0,
        "{stats_a:?} {stats_b:?}"
    );
    // Some request was refused, so the window's count reached the limit: every permit of it
    // is a grant or still held.
    assert_eq!(
        granted + stats_a.held() + stats_b.held(),
        LIMIT,
        "{stats_a:?} {stats_b:?}"
    );
    let returned =
        a.return_reserved().await.expect("return") + b.return_reserved().await.expect("return");
    let held = stats_a.held() + stats_b.held();
    if returns(target) {
        assert_eq!(returned, held);
        assert_eq!(left_in_window(&first, LIMIT, b"k").await, LIMIT - granted);
    } else {
        assert_eq!(returned, 0);
        assert_eq!(
            left_in_window(&first, LIMIT, b"k").await,
            LIMIT - granted - held
        );
    }
}

// ---------------------------------------------------------------------------------------------

scenario!(a_return_gives_back_exactly_what_was_held_after_rejections);

/// Rejections of one permit after the window filled up (which stay counted on Redis without
/// `INCREX`) take nothing from a return: the permits given back are the ones the window has
/// left, exactly.
async fn a_return_gives_back_exactly_what_was_held_after_rejections(target: Target) {
    let coordination = target.coordination("hot-rejections").await;
    let plain = FixedWindow::new(&coordination, "hot", 40, MINUTE).expect("valid");
    let limiter = tiered(&coordination, 40, MINUTE, 4);
    // One granted and 4 reserved beside it; the rest of the window taken by another.
    assert!(granted(&limiter, 1).await);
    assert_eq!(settled(&limiter).await.held(), 4);
    for _ in 0..35 {
        assert!(is_granted(&plain, b"k", 1).await);
    }
    for _ in 0..3 {
        assert!(!is_granted(&plain, b"k", 1).await);
    }
    if let Target::Server(_) = target {
        // The plain commands kept the rejections counted, past the limit.
        let key = support::target::storage_key(&coordination, "fw", "hot", "k");
        assert_eq!(
            target.raw(&[b"GET", &key]),
            redis::Value::BulkString(b"43".to_vec())
        );
    }
    if !returns(target) {
        // Redis 6.2 cannot name a window (no `PEXPIRETIME`): nothing is given back, and the
        // reserved permits lapse with their window.
        assert_eq!(limiter.return_reserved().await.expect("return"), 0);
        assert_eq!(left_in_window(&coordination, 40, b"k").await, 0);
        return;
    }
    assert_eq!(limiter.return_reserved().await.expect("return"), 4);
    assert_eq!(left_in_window(&coordination, 40, b"k").await, 4);
    for _ in 0..4 {
        assert!(is_granted(&plain, b"k", 1).await);
    }
    assert!(!is_granted(&plain, b"k", 1).await);
}

// ---------------------------------------------------------------------------------------------

scenario!(a_batch_is_a_share_of_what_is_left);

/// A batch takes at most the largest asked for and at most a quarter of what is left after
/// the request; near the window's end requests go one by one, and the last permit is granted.
async fn a_batch_is_a_share_of_what_is_left(target: Target) {
    let coordination = target.coordination("hot-share").await;
    let limiter = tiered(&coordination, 41, MINUTE, 100);
    let first = limiter.try_acquire(b"k", 1).await.expect("decided");
    assert!(first.is_granted());
    // (41 - 1) / 4 = 10 reserved beside the request; the client is told of them.
    let stats = settled(&limiter).await;
    assert_eq!(stats.reserved(), 10);
    assert_eq!(first.remaining(), 40);
    assert_eq!(left_in_window(&coordination, 41, b"k").await, 30);
    assert_eq!(grants(&limiter, b"k", 1, 100).await, 40);
    let stats = settled(&limiter).await;
    assert_accounted(stats);
    assert_eq!(stats.held(), 0);
    assert_eq!(left_in_window(&coordination, 41, b"k").await, 0);
}

// ---------------------------------------------------------------------------------------------

scenario!(a_hot_key_reserves_its_next_batch_before_running_out);

/// Once a fifth of a batch is left, the next one is reserved in the background: the key's
/// requests go on being granted here, none waits for the backend. A server that cannot name
/// its windows (Redis 6.2) gets no background batch.
async fn a_hot_key_reserves_its_next_batch_before_running_out(target: Target) {
    let coordination = target.coordination("hot-next").await;
    let limiter = tiered(&coordination, 10_000, MINUTE, 50);
    assert!(granted(&limiter, 1).await);
    for _ in 0..40 {
        assert!(granted(&limiter, 1).await);
    }
    let stats = settled(&limiter).await;
    assert_eq!(stats.spent(), 40);
    if !returns(target) {
        assert_eq!((stats.reserved(), stats.held()), (50, 10), "{stats:?}");
        return;
    }
    // Reserved at 10 left, and answered: 10 + 50 held, nothing asked of the backend since.
    assert_eq!((stats.reserved(), stats.held()), (100, 60), "{stats:?}");
    assert_eq!(
        left_in_window(&coordination, 10_000, b"k").await,
        10_000 - 101
    );
    assert_accounted(stats);
}

// ---------------------------------------------------------------------------------------------

scenario!(a_return_reaches_its_own_window_and_no_later_one);

/// Returned permits go back to the window they were reserved in. A return that meets another
/// window (the counter lost and started again, say) lowers nothing, since a later window's
/// count, lowered, would admit more than the limit there; one that meets no counter creates
/// none; and reserved permits whose window ended locally are not sent at all: they lapse.
async fn a_return_reaches_its_own_window_and_no_later_one(target: Target) {
    // Batches of 4: the whole batch, with the time this window leaves to spend it. A window
    // long enough that a loaded machine's pause does not carry a step into the next one.
    const WINDOW: Duration = Duration::from_millis(1200);
    let coordination = target.coordination("hot-return").await;
    let plain = FixedWindow::new(&coordination, "hot", 100, WINDOW).expect("valid");
    let probe = async || plain.try_acquire(b"k", 0).await.expect("probe").remaining();
    let limiter = tiered(&coordination, 100, WINDOW, 4);

    assert!(granted(&limiter, 1).await);
    if !returns(target) {
        assert_eq!(limiter.return_reserved().await.expect("return"), 0);
        assert_eq!(probe().await, 95);
        let stats = settled(&limiter).await;
        assert_eq!((stats.returned(), stats.lapsed(), stats.held()), (0, 4, 0));
        return;
    }
    assert_eq!(limiter.return_reserved().await.expect("return"), 4);
    assert_eq!(probe().await, 99);
    // Asked again, there is nothing left to return.
    assert_eq!(limiter.return_reserved().await.expect("return"), 0);

    // Locally past the window: not sent, lapsed.
    assert!(granted(&limiter, 1).await);
    tokio::time::sleep(WINDOW + Duration::from_millis(50)).await;
    assert!(is_granted(&plain, b"k", 5).await);
    assert_eq!(limiter.return_reserved().await.expect("late return"), 0);
    assert_eq!(probe().await, 95);
    let stats = settled(&limiter).await;
    assert_eq!((stats.returned(), stats.lapsed(), stats.held()), (4, 4, 0));

    if matches!(target, Target::Memory) {
        return;
    }
    // Each case below: a batch reserved in a new window, still live here, and the counter
    // lost on the server `after` the reservation (then, maybe, started again).
    let key = support::target::storage_key(&coordination, "fw", "hot", "k");
    let reserve_then_lose = async |after: Duration| {
        tokio::time::sleep(WINDOW + Duration::from_millis(50)).await;
        assert!(granted(&limiter, 1).await);
        tokio::time::sleep(after).await;
        let _: () = target.query(&[b"DEL", &key]);
    };
    // Started again in the same millisecond, maybe, but holding less than was reserved...
    reserve_then_lose(Duration::ZERO).await;
    assert!(is_granted(&plain, b"k", 3).await);
    assert_eq!(limiter.return_reserved().await.expect("return"), 0);
    assert_eq!(probe().await, 97);
    // ... or holding more, but ending at another millisecond...
    reserve_then_lose(Duration::from_millis(5)).await;
    assert!(is_granted(&plain, b"k", 20).await);
    assert_eq!(limiter.return_reserved().await.expect("return"), 0);
    assert_eq!(probe().await, 80);
    // ... or not started again: nothing is created.
    reserve_then_lose(Duration::ZERO).await;
    assert_eq!(limiter.return_reserved().await.expect("return"), 0);
    assert_eq!(target.pttl(&key), -2, "a return created the counter");
    let stats = settled(&limiter).await;
    assert_eq!((stats.returned(), stats.lapsed(), stats.held()), (4, 16, 0));
    assert_accounted(stats);
}

/// A return delayed on its way until its window has ended (held at the proxy) reaches a new
/// window, and lowers nothing there.
#[tokio::test]
async fn a_delayed_return_lowers_no_later_window() {
    // Long enough that the next window is still on when the late return is answered.
    const WINDOW: Duration = Duration::from_secs(1);
    let behind = Behind::start("hot-delayed-return");
    let coordination = behind
        .through_proxy(|b| b.response_timeout(Duration::from_secs(5)))
        .await;
    let limiter = tiered(&coordination, 100, WINDOW, 5);
    let direct = behind.direct().await;
    let plain = FixedWindow::new(&direct, "hot", 100, WINDOW).expect("valid");
    // Both scripts loaded on the connection, so that the return is one round trip.
    assert!(granted(&limiter, 1).await);
    assert_eq!(limiter.return_reserved().await.expect("return"), 5);
    assert!(granted(&limiter, 1).await);

    behind
        .proxy
        .latency(Direction::ToServer, WINDOW + Duration::from_millis(200));
    let returning = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.return_reserved().await }
    });
    // Meanwhile the window ends and another instance starts the next one.
    // More than the batch: only the window's name tells it from the reserved one.
    tokio::time::sleep(WINDOW + Duration::from_millis(50)).await;
    assert!(is_granted(&plain, b"k", 20).await);
    let returned = tokio::time::timeout(Duration::from_secs(5), returning)
        .await
        .expect("bounded")
        .expect("task")
        .expect("the return was answered");
    assert_eq!(returned, 0);
    assert_eq!(
        plain.try_acquire(b"k", 0).await.expect("probe").remaining(),
        80
    );
    let stats = settled(&limiter).await;
    assert_eq!((stats.returned(), stats.lapsed(), stats.held()), (5, 5, 0));
}

// ---------------------------------------------------------------------------------------------

scenario!(settings_are_checked_and_other_requests_bypass_the_tier);

/// Bad settings are refused before anything is sent; probes and impossible requests go to
/// the backend as without the tier.
async fn settings_are_checked_and_other_requests_bypass_the_tier(target: Target) {
    let coordination = target.coordination("hot-settings").await;
    let window =
        |limit, window| FixedWindow::new(&coordination, "hot", limit, window).expect("valid");
    for (limit, length, settings) in [
        (10, MINUTE, HotKeys::new(0)),
        (10, MINUTE, HotKeys::new(5).share(0)),
        (10, MINUTE, HotKeys::new(5).max_keys(0)),
        (1_000_000_000_000_001, MINUTE, HotKeys::new(5)),
    ] {
        let err = window(limit, length)
            .with_hot_keys(settings)
            .expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    }
    let limiter = tiered(&coordination, 10, MINUTE, 5);
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted());
    let impossible = limiter.try_acquire(b"k", 11).await.expect("decided");
    assert!(!impossible.is_granted());
    assert_eq!(impossible.retry_after(), None);
    assert_eq!(settled(&limiter).await.reserved(), 0);
    // Weighted requests spend several permits of a batch at once.
    assert!(granted(&limiter, 2).await);
    let stats = settled(&limiter).await;
    assert_eq!(stats.reserved(), 2, "(10 - 2) / 4");
    assert!(granted(&limiter, 2).await);
    assert_eq!(settled(&limiter).await.spent(), 2);
}

// ---------------------------------------------------------------------------------------------

/// A reservation whose answer is lost (the reply held at the proxy, the caller gone) may
/// have taken its batch: it is counted as unsettled, nothing of it is ever granted here, and
/// the key reserves anew; the two instances together still never exceed the limit.
#[tokio::test]
async fn a_lost_reservation_answer_never_over_admits() {
    const LIMIT: u64 = 200;
    let behind = Behind::start("hot-lost");
    let a = tiered(&behind.through_proxy(|b| b).await, LIMIT, MINUTE, 20);
    let direct = behind.direct().await;
    let b = tiered(&direct, LIMIT, MINUTE, 20);
    // The connection is up and the script loaded: what is held next is the reservation.
    assert!(
        a.try_acquire(b"warm", 1)
            .await
            .expect("decided")
            .is_granted()
    );

    behind.proxy.stall_direction(Direction::ToClient);
    let lost = tokio::time::timeout(Duration::from_millis(300), a.try_acquire(b"k", 1)).await;
    assert!(lost.is_err(), "the answer was held back");
    // The reservation was applied on the server: 1 + (200 - 1) / 4, capped at 20.
    assert_eq!(left_in_window(&direct, LIMIT, b"k").await, LIMIT - 21);
    let stats = settled(&a).await;
    assert_eq!(stats.unsettled(), 1);
    assert_eq!(stats.held(), 20, "the warm-up's batch only");
    behind.proxy.pass();

    let (granted_a, granted_b) = tokio::join!(grants(&a, b"k", 2, 150), grants(&b, b"k", 2, 150));
    let (stats_a, stats_b) = (settled(&a).await, settled(&b).await);
    assert!(
        granted_a > 0,
        "the instance reserves again once the server answers"
    );
    // The lost request and its batch are the shortfall, with what is still held.
    // The warm-up's batch is another key's.
    let held = stats_a.held() + stats_b.held() - 20;
    assert_eq!(
        granted_a + granted_b + 21 + held,
        LIMIT,
        "{stats_a:?} {stats_b:?}"
    );
}

/// With the server unreachable, an instance goes on granting what it holds, at once (a
/// reservation is a lease on permits already counted), and only what it holds; the request
/// after that is the failure policy's. Measured from the moment the fault starts.
#[tokio::test]
async fn held_permits_are_granted_while_the_server_is_unreachable() {
    let (behind, window) = tier_behind_proxy("hot-blackhole", 25).await;
    let limiter = RateLimiter::from(window);
    assert!(granted(&limiter, 1).await);
    assert_eq!(settled(&limiter).await.held(), 25);

    behind.proxy.blackhole();
    let fault = Instant::now();
    // Each within half the response timeout (300 ms), which a round trip to the silent
    // server would wait out.
    for _ in 0..25 {
        let decision =
            tokio::time::timeout(Duration::from_millis(150), limiter.try_acquire(b"k", 1))
                .await
                .expect("granted without a round trip")
                .expect("decided");
        assert!(decision.is_granted());
    }
    println!(
        "25 held permits granted {:?} after the fault",
        fault.elapsed()
    );
    let err = tokio::time::timeout(Duration::from_secs(5), limiter.try_acquire(b"k", 1))
        .await
        .expect("bounded by the response timeout")
        .expect_err("nothing held, the server silent");
    // Sent, and never answered: it may have taken a batch.
    assert!(err.is_outcome_uncertain(), "{err}");
    let stats = settled(&limiter).await;
    assert_eq!((stats.spent(), stats.held(), stats.unsettled()), (25, 0, 1));
}

/// A return asked while the next batch is on its way (held at the proxy) takes what is
/// held; the batch, landing after, goes back too rather than lapse, and no batch is reserved
/// in the background from then on.
#[tokio::test]
async fn a_batch_landing_after_the_return_goes_back_too() {
    let behind = Behind::start("hot-return-in-flight");
    let coordination = behind
        .through_proxy(|b| b.response_timeout(Duration::from_secs(5)))
        .await;
    let direct = behind.direct().await;
    let limiter = tiered(&coordination, 10_000, MINUTE, 50);
    // Both scripts loaded, so that each step below is one round trip.
    assert!(granted(&limiter, 1).await);
    assert_eq!(limiter.return_reserved().await.expect("return"), 50);
    let limiter = tiered(&coordination, 10_000, MINUTE, 50);
    assert!(granted(&limiter, 1).await);
    behind
        .proxy
        .latency(Direction::ToServer, Duration::from_millis(300));
    for _ in 0..40 {
        assert!(granted(&limiter, 1).await);
    }
    assert_eq!(
        limiter.statistics().hot_keys().expect("tier").in_flight(),
        1
    );
    assert_eq!(limiter.return_reserved().await.expect("return"), 10);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = limiter.statistics().hot_keys().expect("tier");
        if stats.returned() == 60 {
            assert_accounted(stats);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not returned within 5 s: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // 2 + 40 granted in all, nothing else counted.
    assert_eq!(left_in_window(&direct, 10_000, b"k").await, 10_000 - 42);
    // Closed: held permits are spent, but no next batch is reserved behind them.
    behind.proxy.pass();
    assert!(granted(&limiter, 1).await);
    for _ in 0..45 {
        assert!(granted(&limiter, 1).await);
    }
    let stats = settled(&limiter).await;
    assert_eq!(stats.in_flight(), 0);
    // 50, 50 in the background (returned), 50 for the request after the return: none
    // behind them, though 5 are left of 50.
    assert_eq!((stats.reserved(), stats.held()), (150, 5), "{stats:?}");
}

/// A return the server never answers (blackholed) fails within the response timeout,
/// measured from the fault, and its permits count as lapsed: not as returned, and never
/// granted again here.
#[tokio::test]
async fn a_return_without_an_answer_fails_in_time_and_its_permits_lapse() {
    let (behind, window) = tier_behind_proxy("hot-return-blackhole", 10).await;
    let limiter = RateLimiter::from(window);
    // Both scripts loaded, so that the return below is one round trip.
    assert!(granted(&limiter, 1).await);
    assert_eq!(limiter.return_reserved().await.expect("return"), 10);
    // A request still reserves once returns began (only background batches stop).
    assert!(granted(&limiter, 1).await);

    behind.proxy.blackhole();
    let fault = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(5), limiter.return_reserved())
        .await
        .expect("bounded by the response timeout")
        .expect_err("no answer");
    assert!(err.is_outcome_uncertain(), "{err}");
    assert!(
        fault.elapsed() < Duration::from_secs(2),
        "{:?}",
        fault.elapsed()
    );
    let stats = settled(&limiter).await;
    assert_eq!(
        (stats.returned(), stats.lapsed(), stats.held()),
        (10, 10, 0),
        "{stats:?}"
    );
    assert_accounted(stats);
}

/// Out of memory (`noeviction`), a reservation is refused (certainly without effect: not
/// unsettled) and fails closed, while the permits already held are granted.
#[tokio::test]
async fn out_of_memory_refuses_reservations_and_held_permits_are_granted() {
    let server = support::Server::start(ServerKind::Redis7, &[]);
    let coordination: Coordination = RedisBackend::standalone(server.url())
        .key_prefix(unique_prefix("hot-oom"))
        .connect()
        .await
        .expect("connect")
        .into();
    let limiter = tiered(&coordination, 1_000, MINUTE, 10);
    assert!(granted(&limiter, 1).await);
    server.out_of_memory(true);
    // Held: granted, though the next batch (asked at 2 left) is refused.
    for _ in 0..10 {
        assert!(granted(&limiter, 1).await);
    }
    let err = limiter.try_acquire(b"k", 1).await.expect_err("OOM");
    assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err:?}");
    assert!(err.is_refused() && !err.is_outcome_uncertain(), "{err:?}");
    let stats = settled(&limiter).await;
    assert_eq!(
        (stats.spent(), stats.held(), stats.unsettled()),
        (10, 0, 0),
        "{stats:?}"
    );
}

// ---------------------------------------------------------------------------------------------

/// The child's setting: `url prefix`.
const KILLED_HOLDER: &str = "LEASEHOLD_TEST_HOT_KEY_HOLDER";

/// The holder process: reserves a batch, says so, and waits to be killed. A test of its own
/// only so that the test binary can run it; without the variable it does nothing.
#[tokio::test]
#[ignore = "a role process, run by its test with the setting it needs"]
async fn killed_holder_process() {
    let Ok(setting) = std::env::var(KILLED_HOLDER) else {
        return;
    };
    let (url, prefix) = setting.split_once(' ').expect("url and prefix");
    let coordination: Coordination = RedisBackend::standalone(url)
        .key_prefix(prefix)
        .connect()
        .await
        .expect("connect")
        .into();
    let limiter = tiered(&coordination, 1_000, MINUTE, 100);
    assert!(granted(&limiter, 1).await);
    let held = limiter.statistics().hot_keys().expect("tier").held();
    println!("holding {held}");
    tokio::time::sleep(MINUTE).await;
}

/// An instance killed (SIGKILL) while it holds a batch returns nothing and spent nothing
/// more: the others grant exactly what is left, never more; the dead batch is the bounded
/// under-admission the tier documents.
#[tokio::test]
async fn a_killed_instance_over_admits_nothing() {
    use std::io::{BufRead, BufReader};

    let server = support::shared(ServerKind::Redis7);
    let prefix = unique_prefix("hot-killed");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "killed_holder_process",
            "--ignored",
            "--nocapture",
        ])
        .env(KILLED_HOLDER, format!("{} {prefix}", server.url()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the holder");
    let stdout = child.stdout.take().expect("piped");
    let held = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("holding ").map(str::to_owned))
    });
    let held = tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the holder reserves within 30 s")
        .expect("reader")
        .expect("the holder said so");
    assert_eq!(held, "100");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    let coordination: Coordination = RedisBackend::standalone(server.url())
        .key_prefix(&prefix)
        .connect()
        .await
        .expect("connect")
        .into();
    let survivor = tiered(&coordination, 1_000, MINUTE, 100);
    let granted = grants(&survivor, b"k", 4, 400).await;
    // The child was granted 1 and held 100 when it died: the rest is the survivor's, to
    // the permit, granted or still held.
    let held = settled(&survivor).await.held();
    assert_eq!(granted + held, 1_000 - 1 - 100);
}

// ---------------------------------------------------------------------------------------------

/// Over HTTP: the layer grants from the reservation in `call`, with the response fields, even
/// while the server is unreachable; once the batch is spent the failure policy answers.
#[tokio::test]
async fn the_layer_grants_from_its_reservation() {
    use axum::{Router, routing::get};
    use leasehold::layer::key::KeyExtractor;
    use leasehold::layer::rate_limit::RedisRateLimitLayer;

    let (behind, window) = tier_behind_proxy("hot-layer", 10).await;
    let layer = RedisRateLimitLayer::new(window).key(KeyExtractor::global());
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let addr = support::http::serve(app).await;
    let client = support::http::client();

    let first = support::http::get(&client, addr, "/", &[]).await;
    assert_eq!(first.status, 200);
    behind.proxy.blackhole();
    let fault = Instant::now();
    for _ in 0..10 {
        let response = tokio::time::timeout(
            Duration::from_millis(200),
            support::http::get(&client, addr, "/", &[]),
        )
        .await
        .expect("answered without a round trip");
        assert_eq!(response.status, 200);
        assert!(response.header("ratelimit").is_some(), "the IETF fields");
    }
    println!(
        "10 held permits granted over HTTP {:?} after the fault",
        fault.elapsed()
    );
    let after = tokio::time::timeout(
        Duration::from_secs(5),
        support::http::get(&client, addr, "/", &[]),
    )
    .await
    .expect("bounded by the response timeout");
    assert_eq!(
        after.status, 503,
        "fail closed: nothing held, the server silent"
    );
}

/// While the layer's circuit breaker is open, permits held are granted, but the next batch
/// is not reserved behind them: a sick server gets no background reservations.
#[tokio::test]
async fn no_next_batch_while_the_breaker_is_open() {
    use axum::{Router, routing::get};
    use leasehold::layer::CircuitBreaker;
    use leasehold::layer::key::KeyExtractor;
    use leasehold::layer::rate_limit::RedisRateLimitLayer;

    let (behind, window) = tier_behind_proxy("hot-breaker", 10).await;
    let layer = RedisRateLimitLayer::new(window)
        .key(KeyExtractor::header_in_clear("x-key").expect("valid"))
        .circuit_breaker(CircuitBreaker::new().failure_threshold(1).open_for(MINUTE));
    let limiter = layer.limiter().clone();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let addr = support::http::serve(app).await;
    let client = support::http::client();
    let get = async |key: &str| {
        support::http::get(&client, addr, "/", &[("x-key", key)])
            .await
            .status
    };

    // 10 held of the hot key, 7 spent: 3 left.
    for _ in 0..8 {
        assert_eq!(get("hot").await, 200);
    }
    behind.proxy.blackhole();
    // A cold key's request goes unanswered: the breaker opens.
    assert_eq!(get("cold").await, 503);
    // Down to 2 held, a fifth of the batch: granted, and nothing reserved behind it.
    assert_eq!(get("hot").await, 200);
    assert_eq!(get("hot").await, 200);
    let stats = limiter.statistics().hot_keys().expect("tier");
    assert_eq!((stats.held(), stats.in_flight()), (1, 0), "{stats:?}");
}

// ---------------------------------------------------------------------------------------------

/// Two instances flood one key while its slot moves from master to master twice: no error,
/// never over the limit, and once both return what they hold the count on the slot's new
/// node is exactly what they granted. A private cluster: its slot map changes.
#[tokio::test]
async fn reservations_ride_out_a_slot_move() {
    const LIMIT: u64 = 1_000_000;
    let cluster = Arc::new(Cluster::start(ServerKind::Redis7));
    let limiters: Vec<_> = cluster
        .handles("hot-slot-move", 2)
        .await
        .into_iter()
        .map(|coordination| (tiered(&coordination, LIMIT, MINUTE, 20), coordination))
        .collect();
    let storage = support::target::storage_key(&limiters[0].1, "fw", "hot", "k");
    let slot = key_slot(&storage);
    let tiers: Vec<_> = limiters
        .iter()
        .map(|(limiter, _)| limiter.clone())
        .collect();
    let granted = cluster.grants_while_moving(slot, &tiers, b"k").await;
    for (limiter, _) in &limiters {
        settled(limiter).await;
        limiter.return_reserved().await.expect("return");
        assert_accounted(settled(limiter).await);
    }
    let count: u64 = redis::cmd("GET")
        .arg(&storage)
        .query(&mut cluster.owner_of(slot).connection())
        .expect("GET");
    println!("{granted} grants while the slot moved twice, {count} counted");
    // Every grant is counted. What is counted beyond the grants is what lapsed: a key
    // migrated keeps its expiry only to the millisecond its TTL was read at, so a return
    // may find the window renamed and refuse, which under-admits only.
    let lapsed: u64 = limiters
        .iter()
        .map(|(limiter, _)| limiter.statistics().hot_keys().expect("tier").lapsed())
        .sum();
    assert!(count >= granted, "{count} counted for {granted} grants");
    assert!(
        count - granted <= lapsed,
        "{count} counted, {granted} granted, {lapsed} lapsed"
    );
    assert!(granted > 100, "{granted}");
}

// ---------------------------------------------------------------------------------------------

/// Across window boundaries crossed at sub-millisecond steps under a paused clock (the
/// memory backend reads tokio's), with demand far above the limit (batches run out early)
/// and below it (batches are still held when their window ends): every grant, those from
/// reservations included, is counted in the backend's window it was granted in, so no window
/// grants more than its limit.
#[tokio::test(start_paused = true)]
async fn no_window_grants_more_than_its_limit_across_boundaries() {
    // About 1,300 requests per window.
    for limit in [50, 2_000] {
        let coordination = Coordination::memory();
        let limiter = tiered(&coordination, limit, Duration::from_millis(200), 8);
        let plain = FixedWindow::new(&coordination, "hot", limit, Duration::from_millis(200))
            .expect("valid");
        let (mut seed, mut previous_count, mut in_window, mut windows) = (7u64, 0, 0, 0);
        for _ in 0..100_000 {
            // 0 to 299 µs, from a fixed sequence.
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            tokio::time::advance(Duration::from_micros((seed >> 33) % 300)).await;
            let granted = granted(&limiter, 1).await;
            let count = limit - plain.try_acquire(b"k", 0).await.expect("probe").remaining();
            if count < previous_count {
                windows += 1;
                in_window = 0;
            }
            previous_count = count;
            in_window += u64::from(granted);
            // Every grant of this window is counted in it: the backend's count holds them,
            // with whatever is still reserved.
            assert!(
                in_window <= count,
                "limit {limit}: {in_window} grants, {count} counted"
            );
        }
        let stats = settled(&limiter).await;
        assert!(windows > 50, "{windows} windows");
        assert!(stats.spent() > 1_000, "{stats:?}");
        assert_accounted(stats);
    }
}
