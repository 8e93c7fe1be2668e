//! Countdown latches on every server kind, the cluster and the memory backend, and their
//! failure rules against a private server behind the fault proxy.

mod support;

use std::time::{Duration, Instant};

use leasehold::coordination::latch::{CountDown, CountdownLatch, LatchGeneration};
use leasehold::{Coordination, ErrorKind};
use support::proxy::Direction;
use support::target::{Target, scenario};
use support::{Behind, eventually};

const MINUTE: Duration = Duration::from_secs(60);

/// The physical key of the latch; Redis only.
fn physical(coordination: &Coordination, latch: &CountdownLatch) -> Vec<u8> {
    coordination.backend().physical_key(latch.key())
}

async fn count_down(generation: &LatchGeneration) -> u64 {
    match generation.count_down().await.expect("count down") {
        CountDown::Remaining(left) => left,
        other => panic!("not counted: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------

scenario!(a_generation_counts_down_to_zero_and_refuses_more);

async fn a_generation_counts_down_to_zero_and_refuses_more(target: Target) {
    let coordination = target.coordination("latch-basic").await;
    let latch = CountdownLatch::named(&coordination, "basic");
    assert!(latch.join().await.expect("join").is_none(), "nothing yet");

    let generation = latch
        .create(2, Some(MINUTE))
        .await
        .expect("create")
        .expect("no latch existed");
    assert!(
        latch.create(5, None).await.expect("create").is_none(),
        "one exists: nothing changed"
    );
    assert_eq!(generation.count().await.expect("count"), Some(2));
    let joined = latch.join().await.expect("join").expect("started");
    assert_eq!(joined.id(), generation.id());

    assert_eq!(count_down(&joined).await, 1);
    assert_eq!(count_down(&generation).await, 0);
    let err = generation.count_down().await.expect_err("complete");
    assert_eq!(err.kind(), ErrorKind::AlreadyComplete);
    assert!(!err.is_outcome_uncertain());
    assert_eq!(
        generation.count().await.expect("count"),
        Some(0),
        "not below zero"
    );
    assert!(generation.wait().await.expect("wait"), "complete: at once");

    // A generation of 0 is complete at once.
    let empty = latch.reset(0, None).await.expect("reset");
    assert!(empty.wait().await.expect("wait"));
}

scenario!(the_latest_completions_are_remembered_and_no_more);

/// A latch remembers its latest `COMPLETIONS_KEPT` completed generations, whether a
/// count-down completed them or they started complete, and forgets the oldest beyond.
async fn the_latest_completions_are_remembered_and_no_more(target: Target) {
    let coordination = target.coordination("latch-kept").await;
    let latch = CountdownLatch::named(&coordination, "kept");
    let first = latch.reset(1, None).await.expect("reset");
    assert_eq!(count_down(&first).await, 0);
    let mut rounds = vec![first];
    for _ in 0..leasehold::coordination::latch::COMPLETIONS_KEPT {
        rounds.push(latch.reset(0, None).await.expect("reset"));
    }
    assert_eq!(rounds[0].count().await.expect("count"), None, "forgotten");
    assert_eq!(rounds[1].count().await.expect("count"), Some(0));
    assert!(rounds[1].wait().await.expect("wait"));
}

scenario!(a_reset_makes_the_old_generation_stale);

async fn a_reset_makes_the_old_generation_stale(target: Target) {
    let coordination = target.coordination("latch-reset").await;
    let handles = target.handles(&coordination, 2).await;
    let latch = CountdownLatch::named(&handles[0], "reset");
    let old = latch.reset(3, None).await.expect("reset");

    let waiter = tokio::spawn({
        let old = old.clone();
        async move { old.wait().await }
    });
    support::until_waiting(&handles[..1], 1).await;
    assert!(!waiter.is_finished(), "three count-downs to go");
    // A wait dropped midway changes nothing.
    let dropped = tokio::spawn({
        let old = old.clone();
        async move { old.wait().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    dropped.abort();
    assert!(dropped.await.expect_err("aborted").is_cancelled());
    assert_eq!(old.count().await.expect("count"), Some(3));

    let new = CountdownLatch::named(&handles[1], "reset")
        .reset(1, None)
        .await
        .expect("reset");
    assert_ne!(new.id(), old.id());
    let woken = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the reset wakes the old generation's waiter")
        .expect("the waiter");
    assert!(!woken.expect("wait"), "its generation was replaced");

    // The old generation's count-downs change nothing in the new one.
    assert_eq!(old.count_down().await.expect("stale"), CountDown::Stale);
    assert_eq!(old.count().await.expect("count"), None);
    assert_eq!(new.count().await.expect("count"), Some(1));
}

scenario!(every_waiter_on_every_connection_completes_at_the_last_count_down);

/// Three participants on their own connections count one latch down, while two waiters on
/// each of three other connections wait: every waiter completes promptly after the last
/// count-down's answer.
async fn every_waiter_on_every_connection_completes_at_the_last_count_down(target: Target) {
    let coordination = target.coordination("latch-wake").await;
    let handles = target.handles(&coordination, 6).await;
    let generation = CountdownLatch::named(&handles[0], "wake")
        .reset(3, Some(MINUTE))
        .await
        .expect("reset");

    let mut waiters = Vec::new();
    for handle in &handles[3..] {
        for _ in 0..2 {
            let joined = CountdownLatch::named(handle, "wake")
                .join()
                .await
                .expect("join")
                .expect("started");
            waiters.push(tokio::spawn(async move {
                let completed = joined.wait().await;
                (completed, Instant::now())
            }));
        }
    }
    support::until_waiting(&handles[3..], 2).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "three to go");

    // Three participants count down at once, each on its own connection.
    let participants: Vec<_> = handles[..3]
        .iter()
        .map(|handle| {
            let latch = CountdownLatch::named(handle, "wake");
            tokio::spawn(async move {
                let joined = latch.join().await.expect("join").expect("started");
                let left = count_down(&joined).await;
                (left, Instant::now())
            })
        })
        .collect();
    let mut last = None;
    for participant in participants {
        let (left, at) = participant.await.expect("the participant");
        if left == 0 {
            last = Some(at);
        }
    }
    let last = last.expect("the third count-down completed it");
    let mut latencies = Vec::new();
    for waiter in waiters {
        let (completed, at) = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("every waiter completes")
            .expect("the waiter");
        assert!(completed.expect("wait"), "completed, not replaced");
        latencies.push(at.saturating_duration_since(last));
    }
    assert_eq!(generation.count().await.expect("count"), Some(0));
    latencies.sort();
    let (p50, max) = (
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    );
    eprintln!(
        "{target:?}: waiters completed {p50:?} (p50), {max:?} (max) after the last count-down"
    );
    // 50 ms or less in quiet runs. A waiter never woken would wait for its re-read (2 s):
    // half of that is the bound, which leaves a loaded machine room and still tells a
    // wake-up from a re-read.
    assert!(
        max < leasehold::coordination::latch::DEFAULT_REREAD_INTERVAL / 2,
        "{latencies:?}"
    );
}

scenario!(an_expired_latch_ends_its_waits_and_count_downs);

async fn an_expired_latch_ends_its_waits_and_count_downs(target: Target) {
    let coordination = target.coordination("latch-expiry").await;
    let latch =
        CountdownLatch::named(&coordination, "expiry").reread_interval(Duration::from_millis(100));
    let generation = latch
        .reset(2, Some(Duration::from_millis(300)))
        .await
        .expect("reset");
    assert_eq!(count_down(&generation).await, 1);
    // Nobody counts down again: the key expires, which no notification may announce.
    let started = Instant::now();
    let completed = tokio::time::timeout(Duration::from_secs(3), generation.wait())
        .await
        .expect("the wait ends within a bounded time")
        .expect("wait");
    assert!(!completed, "gone, not complete");
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        generation.count_down().await.expect("stale"),
        CountDown::Stale
    );
    assert!(latch.join().await.expect("join").is_none());
}

scenario!(a_completion_reset_at_once_still_completes_its_waiters);

/// Barrier-style rounds: each round completes and is reset at once (the reset sent as soon as
/// the last count-down answers), 100 times. Every round's waiter, on another connection,
/// reads only after the reset, and still learns that its round completed; so does `count`.
async fn a_completion_reset_at_once_still_completes_its_waiters(target: Target) {
    let coordination = target.coordination("latch-barrier").await;
    let handles = target.handles(&coordination, 2).await;
    let latch = CountdownLatch::named(&handles[0], "barrier");
    let watcher = CountdownLatch::named(&handles[1], "barrier");
    let mut round = latch.reset(1, None).await.expect("reset");
    let mut waiters = Vec::new();
    for _ in 0..100 {
        let waiting = watcher
            .join()
            .await
            .expect("join")
            .expect("a round is under way");
        assert_eq!(waiting.id(), round.id());
        waiters.push(tokio::spawn(async move {
            let completed = waiting.wait().await;
            (completed, waiting.count().await)
        }));
        assert_eq!(count_down(&round).await, 0);
        round = latch.reset(1, None).await.expect("the next round");
    }
    for waiter in waiters {
        let (completed, count) = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("bounded")
            .expect("the waiter");
        assert!(completed.expect("wait"), "its round completed");
        assert_eq!(count.expect("count"), Some(0));
    }
}

scenario!(a_completion_outlives_the_latchs_expiry);

/// A generation that completed reads as completed after the latch's key expired, while one
/// that expired before its last count-down reads as gone.
async fn a_completion_outlives_the_latchs_expiry(target: Target) {
    let coordination = target.coordination("latch-completed-expiry").await;
    let latch = CountdownLatch::named(&coordination, "completed-expiry");
    let completed = latch
        .reset(1, Some(Duration::from_millis(100)))
        .await
        .expect("reset");
    assert_eq!(count_down(&completed).await, 0);
    let other = CountdownLatch::named(&coordination, "abandoned-expiry");
    let abandoned = other
        .reset(1, Some(Duration::from_millis(100)))
        .await
        .expect("reset");
    eventually("both keys expire", async || {
        latch.join().await.expect("join").is_none() && other.join().await.expect("join").is_none()
    })
    .await;
    assert!(completed.wait().await.expect("wait"));
    assert_eq!(completed.count().await.expect("count"), Some(0));
    let err = completed.count_down().await.expect_err("complete");
    assert_eq!(err.kind(), ErrorKind::AlreadyComplete);
    assert!(!abandoned.wait().await.expect("wait"));
    assert_eq!(abandoned.count().await.expect("count"), None);
}

scenario!(arguments_out_of_range_are_refused_before_anything_is_sent);

async fn arguments_out_of_range_are_refused_before_anything_is_sent(target: Target) {
    let coordination = target.coordination("latch-args").await;
    let latch = CountdownLatch::named(&coordination, "args");
    let max = leasehold::coordination::latch::MAX_COUNT;
    for err in [
        latch.reset(max + 1, None).await.expect_err("count"),
        latch
            .reset(1, Some(Duration::ZERO))
            .await
            .expect_err("expiry"),
        latch.create(u64::MAX, None).await.expect_err("count"),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    }
    assert!(
        latch.join().await.expect("join").is_none(),
        "nothing was written"
    );
    let largest = latch.reset(max, None).await.expect("the largest count");
    assert_eq!(largest.count().await.expect("count"), Some(max));
    assert_eq!(count_down(&largest).await, max - 1);
}

scenario!(another_primitives_state_is_corrupt_and_left_alone redis);

async fn another_primitives_state_is_corrupt_and_left_alone(target: Target) {
    let coordination = target.coordination("latch-corrupt").await;
    let latch = CountdownLatch::named(&coordination, "corrupt");
    let key = physical(&coordination, &latch);
    let completions = [key.as_slice(), b":done"].concat();
    let generation = latch.reset(1, None).await.expect("reset");
    for wrong in [
        vec![b"SET".as_slice(), &key, b"3"],
        vec![b"HSET", &key, b"gen", b"x"],
        vec![b"HSET", &key, b"gen", b"x", b"count", b"-1"],
        vec![b"HSET", &key, b"count", b"1", b"d:x", b"0"],
        vec![b"RPUSH", &key, b"x"],
        // The completions' key beside a sound latch.
        vec![b"SET", &completions, b"3"],
    ] {
        target.raw(&[b"DEL", &key, &completions]);
        if wrong[1] == completions.as_slice() {
            target.raw(&[
                b"HSET",
                &key,
                b"gen",
                generation.id().as_bytes(),
                b"count",
                b"1",
            ]);
        }
        target.raw(&wrong);
        let dumped = target.raw(&[b"DUMP", wrong[1]]);
        let errors = [
            latch.create(1, None).await.map(drop),
            latch.reset(1, None).await.map(drop),
            latch.join().await.map(drop),
            generation.count_down().await.map(drop),
            generation.count().await.map(drop),
            generation.wait().await.map(drop),
        ];
        for err in errors {
            let err = err.expect_err("corrupt");
            assert_eq!(err.kind(), ErrorKind::CorruptState, "{wrong:?}: {err}");
        }
        assert_eq!(target.raw(&[b"DUMP", wrong[1]]), dumped, "left alone");
    }
}

// ---------------------------------------------------------------------------------------------

/// A waiter's handle goes through the proxy; the participant reaches the server directly.
/// The proxy drops what the server sends while the last count-down runs, the invalidation
/// among it: the waiter still completes, at its next re-read.
#[tokio::test]
async fn a_waiter_whose_notification_is_lost_completes_at_its_reread() {
    let behind = Behind::start("latch-lost-notification");
    let waiting_side = behind.through_proxy(|builder| builder).await;
    let direct = behind.direct().await;
    let reread = Duration::from_millis(500);
    let generation = CountdownLatch::named(&direct, "lost")
        .reset(1, None)
        .await
        .expect("reset");
    let joined = CountdownLatch::named(&waiting_side, "lost")
        .reread_interval(reread)
        .join()
        .await
        .expect("join")
        .expect("started");
    let waiter = tokio::spawn(async move {
        let completed = joined.wait().await;
        (completed, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!waiter.is_finished());

    // From here on nothing reaches the waiting side until the proxy passes again.
    behind.proxy.stall_direction(Direction::ToClient);
    behind.proxy.blackhole();
    let counted_at = Instant::now();
    assert_eq!(count_down(&generation).await, 0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    behind.proxy.pass();

    let (completed, at) = tokio::time::timeout(reread * 4, waiter)
        .await
        .expect("the re-read completes it")
        .expect("the waiter");
    assert!(completed.expect("wait"));
    let latency = at - counted_at;
    // Not at the pass (100 ms), which a delivered notification would have made it: at the
    // re-read, 500 ms after the waiter's last read, which came 150 ms before the count-down.
    assert!(latency >= Duration::from_millis(250), "{latency:?}");
    assert!(
        latency <= reread + Duration::from_millis(300),
        "{latency:?}"
    );
}

/// A latch behind the proxy, with its count-down script cached first (so that a held request
/// runs when it lands: a NOSCRIPT answer would leave it undone, and nothing to show), and a
/// generation of 3 joined through the proxy with a response timeout of 200 ms.
async fn uncertain_setup(test: &str) -> (Behind, LatchGeneration, LatchGeneration) {
    let behind = Behind::start(test);
    let direct = behind.direct().await;
    let slow_side = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(200)))
        .await;
    let warm = CountdownLatch::named(&direct, "warm-up")
        .reset(1, None)
        .await
        .expect("reset");
    count_down(&warm).await;
    let observer = CountdownLatch::named(&direct, "uncertain")
        .reset(3, None)
        .await
        .expect("reset");
    let generation = CountdownLatch::named(&slow_side, "uncertain")
        .join()
        .await
        .expect("join")
        .expect("started");
    (behind, generation, observer)
}

/// The count-down scripts the server has run.
fn scripts_run(behind: &Behind) -> u64 {
    support::target::command_calls(&behind.server, "evalsha")
        + support::target::command_calls(&behind.server, "eval")
}

/// A count-down whose reply is held back past the response timeout is sent again, with its
/// id: once the first delivery and the second have both landed, the second finds the first's
/// record and answers what it counted. Counted once, known to the caller.
#[tokio::test]
async fn a_count_down_without_an_answer_is_sent_again_and_counts_once() {
    let (behind, generation, observer) = uncertain_setup("latch-resent").await;
    let before = scripts_run(&behind);
    let sent = || behind.proxy.bytes_received(Direction::ToServer);
    let at_start = sent();

    behind.proxy.stall();
    let counting = tokio::spawn(async move { generation.count_down().await });
    eventually("the count-down is sent", async || sent() > at_start).await;
    let first = sent();
    // Its reply does not come within the response timeout: it is sent again.
    eventually("the count-down is sent again", async || sent() > first).await;
    behind.proxy.pass();
    let counted = tokio::time::timeout(Duration::from_secs(5), counting)
        .await
        .expect("bounded")
        .expect("the task")
        .expect("counted");
    assert_eq!(counted, CountDown::Remaining(2));
    assert_eq!(
        observer.count().await.expect("count"),
        Some(2),
        "counted once"
    );
    assert!(scripts_run(&behind) >= before + 2, "delivered twice");
}

/// A count-down that gets no answer for the whole transient-retry bound fails as uncertain,
/// bounded in time; once every delivery it held lands, it has counted exactly once.
#[tokio::test]
async fn a_count_down_without_an_answer_for_the_bound_is_uncertain_and_counts_once() {
    let (behind, generation, observer) = uncertain_setup("latch-uncertain").await;
    let before = scripts_run(&behind);

    behind.proxy.take_delivered();
    behind.proxy.stall();
    let started = Instant::now();
    let err = generation
        .count_down()
        .await
        .expect_err("no answer in time");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by the transient-retry bound: {:?}",
        started.elapsed()
    );
    assert!(err.is_outcome_uncertain(), "{err}");
    assert!(err.is_unavailable());
    behind.proxy.pass();

    // Every delivery the client sent reaches the server, and runs, before the count is read.
    eventually("the held count-downs are delivered", async || {
        behind.proxy.bytes(Direction::ToServer) == behind.proxy.bytes_received(Direction::ToServer)
    })
    .await;
    let delivered = behind.proxy.take_delivered();
    let sent = delivered
        .windows(b"EVALSHA".len())
        .filter(|window| window.eq_ignore_ascii_case(b"EVALSHA"))
        .count() as u64;
    assert!(sent >= 2, "sent again: {sent} deliveries");
    eventually("the held count-downs run", async || {
        scripts_run(&behind) == before + sent
    })
    .await;
    assert_eq!(
        observer.count().await.expect("count"),
        Some(2),
        "counted once"
    );
}

/// A count-down dropped after it was sent (held by the network, then delivered) is not sent
/// again: it counts once, never twice.
#[tokio::test]
async fn a_cancelled_count_down_counts_at_most_once() {
    let behind = Behind::start("latch-cancelled");
    let direct = behind.direct().await;
    let dropping_side = behind.through_proxy(|builder| builder).await;
    let warm = CountdownLatch::named(&direct, "warm-up")
        .reset(1, None)
        .await
        .expect("reset");
    count_down(&warm).await;
    CountdownLatch::named(&direct, "cancelled")
        .reset(3, None)
        .await
        .expect("reset");
    let generation = CountdownLatch::named(&dropping_side, "cancelled")
        .join()
        .await
        .expect("join")
        .expect("started");

    let sent = behind.proxy.sent();
    behind.proxy.stall();
    let counting = tokio::spawn(async move { generation.count_down().await });
    behind
        .proxy
        .until_sent(sent, "the count-down is sent")
        .await;
    counting.abort();
    assert!(counting.await.expect_err("dropped").is_cancelled());
    // The held count-down reaches the server now, on its connection, which stayed open.
    behind.proxy.pass();

    let observer = CountdownLatch::named(&direct, "cancelled")
        .join()
        .await
        .expect("join")
        .expect("started");
    support::eventually("the held count-down is counted", async || {
        observer.count().await.expect("count") == Some(2)
    })
    .await;
    // A step on the dropping side's connection, answered: anything its client would have
    // sent again on it went before, and would have counted by now.
    CountdownLatch::named(&dropping_side, "cancelled")
        .join()
        .await
        .expect("join on the same connection");
    assert_eq!(
        observer.count().await.expect("count"),
        Some(2),
        "counted once, never again"
    );
}

/// The waiter's side loses Redis for longer than its re-read interval while the last
/// count-down runs elsewhere: it keeps waiting, and completes once Redis answers again.
#[tokio::test]
async fn a_wait_rides_out_an_outage() {
    let behind = Behind::start("latch-outage");
    let direct = behind.direct().await;
    let waiting_side = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(200)))
        .await;
    let reread = Duration::from_millis(200);
    let generation = CountdownLatch::named(&direct, "outage")
        .reset(1, None)
        .await
        .expect("reset");
    let joined = CountdownLatch::named(&waiting_side, "outage")
        .reread_interval(reread)
        .join()
        .await
        .expect("join")
        .expect("started");
    let waiter = tokio::spawn(async move { joined.wait().await });
    tokio::time::sleep(Duration::from_millis(100)).await;

    behind.proxy.cut();
    behind.proxy.refuse();
    assert_eq!(count_down(&generation).await, 0);
    // Several re-reads fail meanwhile: the wait goes on.
    tokio::time::sleep(reread * 4).await;
    assert!(!waiter.is_finished(), "no answer yet, no verdict");
    let back_at = Instant::now();
    behind.proxy.pass();
    let completed = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("completes once Redis answers")
        .expect("the waiter");
    assert!(completed.expect("wait"), "complete, not failed");
    assert!(
        back_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        back_at.elapsed()
    );
}

/// Redis out of memory (`noeviction`): no generation is started (`OutOfMemory`, certainly
/// without effect), while count-downs of a running one still count, to completion, so that
/// its round can finish.
#[tokio::test]
async fn out_of_memory_refuses_new_generations_and_counts_down_running_ones() {
    let server = support::Server::start(support::ServerKind::Redis7, &[]);
    let coordination: Coordination =
        leasehold::backend::redis::RedisBackend::standalone(server.url())
            .key_prefix(support::unique_prefix("latch-oom"))
            .connect()
            .await
            .expect("connect")
            .into();
    let running = CountdownLatch::named(&coordination, "running");
    let generation = running.reset(2, None).await.expect("reset");
    let fresh = CountdownLatch::named(&coordination, "fresh");
    server.out_of_memory(true);
    let refusals = [
        fresh.create(1, None).await.map(drop),
        fresh.reset(1, None).await.map(drop),
        running.reset(1, None).await.map(drop),
    ];
    for refused in refusals {
        let err = refused.expect_err("out of memory");
        assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
        assert!(err.is_refused() && !err.is_outcome_uncertain(), "{err}");
    }
    assert_eq!(count_down(&generation).await, 1);
    assert_eq!(count_down(&generation).await, 0);
    assert!(generation.wait().await.expect("wait"));
    server.out_of_memory(false);
    assert!(
        fresh.join().await.expect("join").is_none(),
        "nothing started"
    );
    assert_eq!(
        running
            .join()
            .await
            .expect("join")
            .map(|g| g.id().to_owned()),
        Some(generation.id().to_owned()),
        "not replaced"
    );
}

/// A round counted down while `disruption` runs: four participants (the first four
/// `handles`) count the generation `round` (already reset to `4 * each`) down `each` times
/// with `pause` between, while the fifth handle waits for it. Every count-down must be
/// answered (latency, not errors). Returns the waiter, to learn the completion.
async fn count_down_while(
    handles: &[Coordination],
    each: u64,
    pause: Duration,
    disruption: impl std::future::Future<Output = ()>,
) -> tokio::task::JoinHandle<leasehold::Result<bool>> {
    let waiter = CountdownLatch::named(&handles[4], "round")
        .join()
        .await
        .expect("join")
        .expect("started");
    let waiting = tokio::spawn(async move { waiter.wait().await });
    let counting: Vec<_> = handles[..4]
        .iter()
        .map(|coordination| {
            let latch = CountdownLatch::named(coordination, "round");
            tokio::spawn(async move {
                let generation = latch.join().await.expect("join").expect("started");
                for _ in 0..each {
                    generation.count_down().await.expect("counted");
                    tokio::time::sleep(pause).await;
                }
            })
        })
        .collect();
    disruption.await;
    for participant in counting {
        participant.await.expect("every count-down counted");
    }
    waiting
}

/// The waiter of [`count_down_while`] learns that its round completed.
async fn completes(waiting: tokio::task::JoinHandle<leasehold::Result<bool>>) {
    let completed = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter learns it")
        .expect("the waiter");
    assert!(completed.expect("wait"));
}

/// Four participants with handles of their own count one generation down while its slot
/// moves from master to master, and a waiter on another handle waits for it: every
/// count-down counts once (latency, not errors), the count ends exactly at zero, and the
/// waiter learns it.
#[tokio::test]
async fn count_downs_ride_out_a_slot_move() {
    const EACH: u64 = 100;
    let cluster = std::sync::Arc::new(support::Cluster::start(support::ServerKind::Redis7));
    let handles = cluster.handles("latch-slot-move", 5).await;
    let latch = CountdownLatch::named(&handles[0], "round");
    let slot = leasehold::backend::key_slot(&physical(&handles[0], &latch));
    let generation = latch.reset(4 * EACH, None).await.expect("reset");
    let moving = cluster.move_slot_around(slot, 3);
    let waiting = count_down_while(&handles, EACH, Duration::from_millis(20), moving).await;
    assert_eq!(generation.count().await.expect("count"), Some(0));
    completes(waiting).await;
}

/// Four participants, each with a handle of its own, count one generation down while the
/// Sentinel primary is killed and its replica elected, and a fifth waits: latency, not
/// errors (each count-down lost on the way is sent again with its id, within
/// `transient_retry`), and each counts once: the count left plus the count-downs recorded in
/// the generation is the count it started with. Replication is asynchronous: a count-down
/// the old primary acknowledged but had not yet sent to its replica is lost with it, record
/// and all; counting as many down again completes the round.
#[tokio::test]
async fn count_downs_ride_out_a_sentinel_failover() {
    const EACH: u64 = 50;
    let setup = std::sync::Arc::new(support::SentinelSetup::start(support::ServerKind::Redis7));
    let handles = setup.handles("latch-failover", 5).await;
    let latch = CountdownLatch::named(&handles[0], "round");
    let generation = latch.reset(4 * EACH, None).await.expect("reset");
    let key = String::from_utf8(physical(&handles[0], &latch)).expect("an ASCII name");
    // The round is on the replica before the failover promotes it.
    let replica = setup
        .data_nodes()
        .into_iter()
        .find(|node| node.port() != setup.master_port())
        .expect("a replica");
    eventually("the replica has the round", async || {
        replica.cmd::<u64>(&["EXISTS", &key]) == 1
    })
    .await;
    let failover = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        setup.kill_primary().await;
    };
    let waiting = count_down_while(&handles, EACH, Duration::from_millis(40), failover).await;
    let left = generation.count().await.expect("count").expect("running");
    let fields: Vec<String> = setup.current_master().cmd(&["HKEYS", &key]);
    let recorded = fields
        .iter()
        .filter(|field| field.starts_with("d:"))
        .count();
    assert_eq!(
        left + u64::try_from(recorded).expect("small"),
        4 * EACH,
        "each surviving count-down counted once ({left} left)"
    );
    for _ in 0..left {
        generation.count_down().await.expect("counted");
    }
    completes(waiting).await;
}

scenario!(binary_names);

/// A latch named by any bytes (a NUL, a byte over 0x7f, braces) works end to end, under the
/// key its name gives.
async fn binary_names(target: Target) {
    let coordination = target.coordination("latch-binary").await;
    let name = b"\x00\xff}{|\n".as_slice();
    let latch = CountdownLatch::named(&coordination, name);
    let generation = latch.reset(2, None).await.expect("reset");
    let joined = CountdownLatch::named(&coordination, name)
        .join()
        .await
        .expect("join")
        .expect("the same latch");
    assert_eq!(joined.id(), generation.id());
    assert_eq!(count_down(&joined).await, 1);
    assert_eq!(count_down(&generation).await, 0);
    assert!(joined.wait().await.expect("wait"));
    assert!(
        CountdownLatch::named(&coordination, b"\x00\xff}{|")
            .join()
            .await
            .expect("join")
            .is_none(),
        "another name is another latch"
    );
}
