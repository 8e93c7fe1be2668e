//! Read-write leases on every server kind, the cluster and the memory backend; a 10 s run of
//! readers and writers on separate connections; a holder process frozen by SIGSTOP. The
//! managed write lease's stall, outage and late-delivery rules are the holdings' rules
//! (`support::holding`), expanded at the end of this file.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::coordination::ManagedOptions;
use leasehold::coordination::rw_lease::{Access, ManagedRwLease, ReadWriteLock, RwLease};
use leasehold::{Coordination, ErrorKind};
use support::process::TestProcess;
use support::target::{Target, scenario, server_ms};
use support::{ServerKind, eventually};

const MINUTE: Duration = Duration::from_secs(60);

async fn read(lock: &ReadWriteLock, lease: Duration) -> RwLease {
    lock.try_read(lease)
        .await
        .expect("try_read")
        .acquired()
        .expect("readable")
}

async fn write(lock: &ReadWriteLock, lease: Duration) -> RwLease {
    lock.try_write(lease)
        .await
        .expect("try_write")
        .acquired()
        .expect("writable")
}

async fn readable(lock: &ReadWriteLock) -> bool {
    match lock.try_read(MINUTE).await.expect("try_read").acquired() {
        Some(mut lease) => {
            assert!(lease.release().await.expect("release").was_held());
            true
        }
        None => false,
    }
}

async fn writable(lock: &ReadWriteLock) -> bool {
    match lock.try_write(MINUTE).await.expect("try_write").acquired() {
        Some(mut lease) => {
            assert!(lease.release().await.expect("release").was_held());
            true
        }
        None => false,
    }
}

/// The physical key of the lock; Redis only.
fn physical(coordination: &Coordination, lock: &ReadWriteLock) -> Vec<u8> {
    coordination.backend().physical_key(lock.key())
}

// ---------------------------------------------------------------------------------------------

scenario!(readers_share_and_a_writer_is_alone);

async fn readers_share_and_a_writer_is_alone(target: Target) {
    let coordination = target.coordination("rw-basic").await;
    let lock = ReadWriteLock::named(&coordination, "basic");
    assert_eq!(lock.key(), b"rwlease:{5:basic}");
    assert_eq!(lock.counter_key(), b"rwlease:{5:basic}:fence");

    let mut first = read(&lock, MINUTE).await;
    let mut second = read(&lock, Duration::from_secs(30)).await;
    assert_eq!(first.access(), Access::Read);
    assert_eq!(first.fencing_token(), None, "a reader takes no token");
    assert_ne!(first.owner_token(), second.owner_token());
    let busy = lock.try_write(MINUTE).await.expect("try_write");
    let wait = busy.retry_after().expect("readers hold it");
    // The longest reader decides: both must run out.
    assert!(wait > Duration::from_secs(50) && wait <= MINUTE, "{wait:?}");

    assert!(first.release().await.expect("release").was_held());
    assert!(!writable(&lock).await, "one reader is left");
    assert!(second.release().await.expect("release").was_held());
    assert!(
        !second.release().await.expect("again").was_held(),
        "nothing sent"
    );

    let mut writer = write(&lock, Duration::from_secs(20)).await;
    assert_eq!(writer.access(), Access::Write);
    let token = writer.fencing_token().expect("a writer's token");
    let busy = lock.try_read(MINUTE).await.expect("try_read");
    let wait = busy.retry_after().expect("the writer holds it");
    assert!(wait <= Duration::from_secs(20), "{wait:?}");
    assert!(!writable(&lock).await, "one writer at a time");
    assert!(writer.verify_still_held().await.expect("verify"));

    // Downgraded in one step: readers join, writers still wait.
    assert!(writer.downgrade().await.expect("downgrade"));
    assert_eq!(writer.access(), Access::Read);
    assert!(writer.downgrade().await.expect("again"), "a reader already");
    assert!(readable(&lock).await);
    assert!(!writable(&lock).await);
    assert!(writer.verify_still_held().await.expect("verify"));
    assert!(writer.renew(MINUTE).await.expect("renew"));
    assert_eq!(
        writer.fencing_token(),
        Some(token),
        "kept through a downgrade"
    );
    assert!(writer.release().await.expect("release").was_held());
    let mut next = write(&lock, Duration::from_secs(20)).await;
    assert!(next.fencing_token().expect("a writer's token") > token);
    assert!(next.release().await.expect("release").was_held());
    assert_eq!(
        target.count_keys(&coordination),
        1,
        "the set gone with its holders; the writers' counter stays"
    );
}

// ---------------------------------------------------------------------------------------------

scenario!(a_renewal_touches_only_its_own_entry redis);

/// Each holder's expiry lives in its own score: renewing one reader changes no other, and
/// the key outlives the longest holder, whoever came last.
async fn a_renewal_touches_only_its_own_entry(target: Target) {
    let coordination = target.coordination("rw-own-entry").await;
    let lock = ReadWriteLock::named(&coordination, "own");
    let key = physical(&coordination, &lock);
    let scores =
        || -> Vec<(Vec<u8>, f64)> { target.query(&[b"ZRANGE", &key, b"0", b"-1", b"WITHSCORES"]) };
    let pttl = || -> i64 { target.query(&[b"PTTL", &key]) };

    let long = read(&lock, MINUTE).await;
    let mut short = read(&lock, Duration::from_secs(2)).await;
    // The later, shorter reader did not shorten the key's life.
    assert!(pttl() > 55_000, "{}", pttl());
    let before = scores();
    assert_eq!(before.len(), 2);
    assert!(short.renew(Duration::from_secs(5)).await.expect("renew"));
    let after = scores();
    let entry = |entries: &[(Vec<u8>, f64)], token: &str| {
        entries
            .iter()
            .find(|(member, _)| member.as_slice() == [b"r:", token.as_bytes()].concat())
            .map(|(_, score)| *score)
            .expect("an entry per reader")
    };
    assert_eq!(
        entry(&before, long.owner_token()),
        entry(&after, long.owner_token()),
        "another reader's entry changed"
    );
    let now = server_ms(&coordination).await as f64;
    let renewed = entry(&after, short.owner_token());
    assert!(
        renewed > now + 4_000.0 && renewed <= now + 5_100.0,
        "{renewed}"
    );
    assert!(pttl() > 55_000, "{}", pttl());
}

// ---------------------------------------------------------------------------------------------

scenario!(a_stale_handle_cannot_touch_a_replacement);

async fn a_stale_handle_cannot_touch_a_replacement(target: Target) {
    let coordination = target.coordination("rw-stale").await;
    let lock = ReadWriteLock::named(&coordination, "stale");
    let mut stale = write(&lock, Duration::from_millis(150)).await;
    let mut replacement = None;
    eventually("the short write lease expires", async || {
        replacement = lock.try_write(MINUTE).await.expect("try").acquired();
        replacement.is_some()
    })
    .await;
    let Some(mut replacement) = replacement else {
        unreachable!("eventually returned")
    };
    assert!(!stale.verify_still_held().await.expect("verify"));
    assert!(
        !stale.renew(MINUTE).await.expect("renew"),
        "not sent or refused"
    );
    assert!(!stale.downgrade().await.expect("downgrade"));
    assert!(!stale.release().await.expect("release").was_held());
    assert!(replacement.verify_still_held().await.expect("verify"));
    assert!(!readable(&lock).await, "the replacement still writes");
    assert!(replacement.release().await.expect("release").was_held());
}

// ---------------------------------------------------------------------------------------------

scenario!(a_waiting_writer_keeps_new_readers_out);

async fn a_waiting_writer_keeps_new_readers_out(target: Target) {
    let coordination = target.coordination("rw-preference").await;
    let lock = ReadWriteLock::named(&coordination, "preference");
    let mut reader = read(&lock, MINUTE).await;
    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write(MINUTE).await }
    });
    eventually("the waiting writer keeps new readers out", async || {
        !readable(&lock).await
    })
    .await;
    assert!(!writer.is_finished(), "the reader still holds it");
    assert!(reader.release().await.expect("release").was_held());
    let mut writer = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer gets in once the reader leaves")
        .expect("task")
        .expect("write");
    assert_eq!(writer.access(), Access::Write);
    assert!(!readable(&lock).await);
    assert!(writer.release().await.expect("release").was_held());
    assert!(readable(&lock).await, "its record went with its grant");
}

scenario!(readers_that_came_while_a_writer_held_go_before_the_next_writer);

/// The phase-fair order: a writer holds; a second writer begins to wait, then a reader. The
/// reader goes in as soon as the first writer is gone, before the writer that waited longer,
/// which goes in when the reader leaves.
async fn readers_that_came_while_a_writer_held_go_before_the_next_writer(target: Target) {
    let coordination = target.coordination("rw-phase").await;
    let lock = ReadWriteLock::named(&coordination, "phase");
    let mut first = write(&lock, MINUTE).await;
    let second = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write(MINUTE).await }
    });
    waiters(target, &coordination, &lock, "q:", 1).await;
    let reader = tokio::spawn({
        let lock = lock.clone();
        async move { lock.read(MINUTE).await }
    });
    waiters(target, &coordination, &lock, "a:", 1).await;
    assert!(first.release().await.expect("release").was_held());
    let mut reader = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("the reader goes in when the writer is gone")
        .expect("task")
        .expect("read");
    assert!(
        !second.is_finished(),
        "the second writer waits for the reader"
    );
    assert!(
        !readable(&lock).await,
        "a new reader waits for the waiting writer"
    );
    assert!(reader.release().await.expect("release").was_held());
    let mut second = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the second writer goes in when the reader leaves")
        .expect("task")
        .expect("write");
    assert!(second.release().await.expect("release").was_held());
    assert!(readable(&lock).await, "nobody waits any more");
}

scenario!(waiting_writers_go_in_the_order_they_began);

/// Two writers wait behind a holder, one after the other: the first to wait is the first in,
/// whatever their bounds and however often they renewed their records, and an immediate
/// `try_write` never jumps the line.
async fn waiting_writers_go_in_the_order_they_began(target: Target) {
    let coordination = target.coordination("rw-writers-line").await;
    let lock = ReadWriteLock::named(&coordination, "line");
    let mut holder = read(&lock, MINUTE).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    // The earlier with a long bound, the later with a short one that it renews while it
    // waits: neither the bounds nor the renewals change the order.
    let waiting = |name: &'static str| {
        let bound = match name {
            "earlier" => Duration::from_secs(3_600),
            _ => Duration::from_millis(200),
        };
        let lock = lock.clone().waiting_bound(bound).expect("valid");
        let order = Arc::clone(&order);
        tokio::spawn(async move {
            let mut lease = lock.write(MINUTE).await.expect("write");
            order.lock().expect("not poisoned").push(name);
            assert!(lease.release().await.expect("release").was_held());
        })
    };
    let earlier = waiting("earlier");
    waiters(target, &coordination, &lock, "q:", 1).await;
    // Later on the backend's clock, to the millisecond its records are scored by.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let later = waiting("later");
    waiters(target, &coordination, &lock, "q:", 2).await;
    assert!(!writable(&lock).await, "a try does not jump the line");
    // Past a quarter of the later one's bound: it has written its record anew.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(holder.release().await.expect("release").was_held());
    tokio::time::timeout(Duration::from_secs(5), async {
        earlier.await.expect("task");
        later.await.expect("task");
    })
    .await
    .expect("both writers get in");
    assert_eq!(*order.lock().expect("not poisoned"), ["earlier", "later"]);
}

/// Waits until `count` waiters of the kind `prefix` names are recorded in the set, read
/// from the set itself on either backend.
async fn waiters(
    target: Target,
    coordination: &Coordination,
    lock: &ReadWriteLock,
    prefix: &'static str,
    count: usize,
) {
    let recorded = async || {
        let members: Vec<String> = match coordination.backend().as_memory() {
            Some(memory) => memory.rw_lease_members(lock.key()),
            None => {
                let key = physical(coordination, lock);
                target.query(&[b"ZRANGE", &key, b"0", b"-1"])
            }
        };
        members.iter().filter(|m| m.starts_with(prefix)).count() >= count
    };
    eventually("the waiters are recorded", recorded).await;
}

scenario!(a_waiter_that_stops_waiting_holds_nobody_back);

/// A wait that ends without a lease (here, its task aborted) takes its record out: the
/// others go on at once, long before the record's bound.
async fn a_waiter_that_stops_waiting_holds_nobody_back(target: Target) {
    let coordination = target.coordination("rw-abandoned-wait").await;
    let lock = ReadWriteLock::named(&coordination, "abandoned")
        .waiting_bound(MINUTE)
        .expect("valid");
    let reader = read(&lock, MINUTE).await;
    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write(MINUTE).await }
    });
    eventually("the writer waits", async || !readable(&lock).await).await;
    writer.abort();
    eventually("readers go in again", async || readable(&lock).await).await;
    drop(reader);
}

scenario!(a_waiter_that_crashes_holds_the_others_back_for_its_bound_at_most);

/// A waiter whose process stops without a word (its wait forgotten, not dropped: nothing
/// cleans up) holds the other side back for its bound at most: a writer's record keeps
/// readers out, and an admitted reader's keeps writers out.
async fn a_waiter_that_crashes_holds_the_others_back_for_its_bound_at_most(target: Target) {
    const BOUND: Duration = Duration::from_millis(500);
    let coordination = target.coordination("rw-crashed-wait").await;
    let lock = ReadWriteLock::named(&coordination, "crashed")
        .waiting_bound(BOUND)
        .expect("valid");
    // Polled until it has recorded itself (on Redis, read from the set), then forgotten as
    // a crashed process is.
    async fn crash(
        waiting: impl std::future::Future<Output = leasehold::Result<RwLease>>,
        recorded: impl std::future::Future<Output = ()>,
    ) {
        let mut waiting = Box::pin(waiting);
        tokio::select! {
            done = &mut waiting => panic!("still waiting: {:?}", done.map(|_| ())),
            () = recorded => {}
        }
        std::mem::forget(waiting);
    }

    let mut reader = read(&lock, MINUTE).await;
    // A writer waiting behind a reader records itself in the queue (`q:`).
    crash(
        lock.write(MINUTE),
        waiters(target, &coordination, &lock, "q:", 1),
    )
    .await;
    let crashed = Instant::now();
    assert!(
        !readable(&lock).await,
        "the writer's record keeps readers out"
    );
    while !readable(&lock).await {
        assert!(
            crashed.elapsed() < BOUND + BOUND,
            "readers kept out past the bound"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(reader.release().await.expect("release").was_held());

    let mut writer = write(&lock, MINUTE).await;
    // A reader waiting behind a writer records itself as admitted next (`a:`).
    crash(
        lock.read(MINUTE),
        waiters(target, &coordination, &lock, "a:", 1),
    )
    .await;
    assert!(writer.release().await.expect("release").was_held());
    let crashed = Instant::now();
    assert!(
        !writable(&lock).await,
        "the admitted reader's record keeps writers out"
    );
    while !writable(&lock).await {
        assert!(
            crashed.elapsed() < BOUND + BOUND,
            "writers kept out past the bound"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------------

scenario!(corrupt_state_changes_nothing redis);

async fn corrupt_state_changes_nothing(target: Target) {
    let coordination = target.coordination("rw-corrupt").await;
    let lock = ReadWriteLock::named(&coordination, "corrupt");
    let key = physical(&coordination, &lock);
    target.raw(&[b"SET", &key, b"not a set"]);
    for write in [false, true] {
        let attempt = if write {
            lock.try_write(MINUTE).await
        } else {
            lock.try_read(MINUTE).await
        };
        let err = attempt.expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
        assert!(!err.is_outcome_uncertain());
    }
    let value: Vec<u8> = target.query(&[b"GET", &key]);
    assert_eq!(value, b"not a set");

    // A held lease whose key is overwritten: every step refuses, and changes nothing.
    target.raw(&[b"DEL", &key]);
    let mut lease = write(&lock, MINUTE).await;
    target.raw(&[b"DEL", &key]);
    target.raw(&[b"HSET", &key, b"f", b"v"]);
    let corrupt = |result: leasehold::Result<bool>| {
        let err = result.expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    };
    corrupt(lease.verify_still_held().await);
    corrupt(lease.renew(MINUTE).await);
    corrupt(lease.downgrade().await);
    assert_eq!(
        lease.access(),
        Access::Write,
        "refused certainly: still the writer"
    );
    let err = lease.release().await.expect_err("corrupt");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    let value: Vec<u8> = target.query(&[b"HGET", &key, b"f"]);
    assert_eq!(value, b"v");
    target.raw(&[b"DEL", &key]);
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn invalid_settings_are_refused_before_anything_is_sent() {
    let coordination = Coordination::memory();
    let lock = ReadWriteLock::named(&coordination, "invalid");
    for bound in [Duration::from_millis(99), Duration::from_secs(3_601)] {
        let err = lock.clone().waiting_bound(bound).expect_err("out of range");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }
    for lease in [Duration::ZERO, Duration::MAX] {
        let err = lock.try_read(lease).await.expect_err("invalid lease");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        let err = lock.write(lease).await.expect_err("invalid lease");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    }
    assert!(
        coordination
            .backend()
            .as_memory()
            .is_some_and(|memory| memory.is_empty())
    );
}

#[tokio::test(start_paused = true)]
async fn memory_leases_follow_the_paused_clock() {
    let coordination = Coordination::memory();
    let lock = ReadWriteLock::named(&coordination, "paused");
    let mut reader = read(&lock, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(!writable(&lock).await);
    assert!(reader.renew(Duration::from_secs(10)).await.expect("renew"));
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(!writable(&lock).await, "renewed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(writable(&lock).await, "expired");
    assert!(!reader.release().await.expect("release").was_held());
}

// ---------------------------------------------------------------------------------------------

/// One holding as its holder saw it: from the grant's answer until before its release was
/// sent, so within the time the backend held it.
#[derive(Debug, Clone, Copy)]
struct Interval {
    write: bool,
    /// When it got in and when it left, from a moment common to the run.
    from: Duration,
    to: Duration,
}

/// What a run of readers and writers recorded.
#[derive(Debug, Default)]
struct Run {
    intervals: Vec<Interval>,
    /// How long each writer waited for each of its grants.
    writer_waits: Vec<Duration>,
}

/// `readers` and `writers` on handles of their own, each acquiring (waiting), holding
/// briefly and releasing, for `length`.
async fn run(
    target: Target,
    test: &str,
    readers: usize,
    writers: usize,
    length: Duration,
    lock: impl Fn(&Coordination) -> ReadWriteLock,
) -> Run {
    let first = target.coordination(test).await;
    let handles = target.handles(&first, readers + writers).await;
    let run = Arc::new(Mutex::new(Run::default()));
    let origin = Instant::now();
    let end = origin + length;
    let tasks: Vec<_> = handles
        .into_iter()
        .enumerate()
        .map(|(i, coordination)| {
            let write = i >= readers;
            let lock = lock(&coordination);
            let run = Arc::clone(&run);
            tokio::spawn(async move {
                while Instant::now() < end {
                    let asked = Instant::now();
                    let mut lease = if write {
                        lock.write(Duration::from_secs(5)).await
                    } else {
                        lock.read(Duration::from_secs(5)).await
                    }
                    .expect("acquire");
                    let from = Instant::now();
                    // Readers hold longer than writers, and overlap one another.
                    let hold = if write { 2 } else { 15 + 5 * i as u64 };
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    let to = Instant::now();
                    assert!(
                        lease.release().await.expect("release").was_held(),
                        "held throughout"
                    );
                    if write {
                        // Writers come back after a while; readers come back at once.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    let mut run = run.lock().expect("not poisoned");
                    run.intervals.push(Interval {
                        write,
                        from: from - origin,
                        to: to - origin,
                    });
                    if write {
                        run.writer_waits.push(from - asked);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    std::mem::take(&mut *run.lock().expect("not poisoned"))
}

/// How many pairs of intervals overlap: (a writer with anyone, two readers).
fn overlaps(intervals: &[Interval]) -> (usize, usize) {
    let (mut writer, mut readers) = (0, 0);
    for (i, a) in intervals.iter().enumerate() {
        for b in &intervals[i + 1..] {
            if a.from < b.to && b.from < a.to {
                if a.write || b.write {
                    writer += 1;
                } else {
                    readers += 1;
                }
            }
        }
    }
    (writer, readers)
}

scenario!(readers_and_writers_on_separate_handles);

async fn readers_and_writers_on_separate_handles(target: Target) {
    let run = run(target, "rw-mixed", 3, 1, Duration::from_millis(1500), |c| {
        ReadWriteLock::named(c, "mixed")
    })
    .await;
    let (writer, readers) = overlaps(&run.intervals);
    assert_eq!(writer, 0, "a writer overlapped another holder");
    assert!(readers > 0, "readers never overlapped");
    assert!(!run.writer_waits.is_empty(), "the writer never got in");
}

/// Set in each process of [`four_reader_and_two_writer_processes_take_turns`]: the server
/// URL, the key prefix, `r` or `w`, how long it holds (ms), and the Unix time (ms) at which
/// it starts and the one at which it stops.
const TAKING_TURNS: &str = "LEASEHOLD_TEST_TAKING_TURNS";

/// One process of [`four_reader_and_two_writer_processes_take_turns`]: takes its lease
/// (waiting), holds it, releases it, and again, printing one line per holding: `held`, its
/// kind, and when it asked, got in and left (µs since the epoch). A test of its own only so
/// that the test binary can run it; without the variable it does nothing.
#[tokio::test]
#[ignore = "a role process, run by its test with the setting it needs"]
async fn taking_turns_process() {
    let Ok(setting) = std::env::var(TAKING_TURNS) else {
        return;
    };
    let fields: Vec<&str> = setting.split(' ').collect();
    let [url, prefix, kind, hold, start, stop] = fields[..] else {
        panic!("six fields: {setting}");
    };
    let number = |field: &str| field.parse::<u64>().expect("a number");
    let (hold, start, stop) = (number(hold), number(start), number(stop));
    let coordination: Coordination = leasehold::backend::redis::RedisBackend::standalone(url)
        .key_prefix(prefix)
        .connect()
        .await
        .expect("connect")
        .into();
    let lock = ReadWriteLock::named(&coordination, "turns");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_micros()
    };
    tokio::time::sleep(Duration::from_millis(
        start.saturating_sub((now() / 1000) as u64),
    ))
    .await;
    while now() / 1000 < u128::from(stop) {
        let asked = now();
        let mut lease = match kind {
            "w" => lock.write(Duration::from_secs(5)).await,
            _ => lock.read(Duration::from_secs(5)).await,
        }
        .expect("acquire");
        let from = now();
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let to = now();
        assert!(lease.release().await.expect("release").was_held());
        println!("held {kind} {asked} {from} {to}");
    }
}

/// How long each reader process holds (ms).
const READER_HOLD: u64 = 20;
/// How long each writer process holds (ms).
const WRITER_HOLD: u64 = 5;

/// Four reader processes (holding 20 ms) and two writer processes (holding 5 ms) loop on one
/// lock for 10 s, each on a connection of its own: no writer ever overlaps another holder,
/// readers overlap, and the waits stay within the phase-fair bound (a reader: one reader
/// hold and one writer hold; a writer with one writer ahead of it: twice that), plus what the
/// turns cost on a loaded machine (the counts and the waits are printed).
#[tokio::test]
async fn four_reader_and_two_writer_processes_take_turns() {
    let server = support::shared(ServerKind::Redis7);
    let prefix = support::unique_prefix("rw-turns");
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    // Every process connected before the run starts.
    let (start, stop) = (unix_ms + 3_000, unix_ms + 13_000);
    let children: Vec<_> = ["r", "r", "r", "r", "w", "w"]
        .into_iter()
        .map(|kind| {
            let hold = if kind == "w" {
                WRITER_HOLD
            } else {
                READER_HOLD
            };
            TestProcess::start(
                "taking_turns_process",
                TAKING_TURNS,
                &format!("{} {prefix} {kind} {hold} {start} {stop}", server.url()),
            )
        })
        .collect();
    let mut intervals = Vec::new();
    let (mut reader_waits, mut writer_waits) = (Vec::new(), Vec::new());
    for child in children {
        let lines = child.finish("held ", Duration::from_secs(60)).await;
        for line in lines {
            let fields: Vec<&str> = line.split(' ').collect();
            let write = fields[1] == "w";
            let [asked, from, to] = [2, 3, 4].map(|i| fields[i].parse::<u64>().expect("µs"));
            let waited = (from - asked) / 1000;
            if write {
                writer_waits.push(waited);
            } else {
                reader_waits.push(waited);
            }
            intervals.push(Interval {
                write,
                from: Duration::from_micros(from),
                to: Duration::from_micros(to),
            });
        }
    }
    let (writer, readers) = overlaps(&intervals);
    let reader_bound = READER_HOLD + WRITER_HOLD;
    let writer_bound = 2 * reader_bound;
    // p50, p99 and the worst.
    let waits = |waits: &mut Vec<u64>| {
        waits.sort_unstable();
        let at = |q: usize| {
            waits
                .get(waits.len() * q / 100)
                .copied()
                .unwrap_or_default()
        };
        (at(50), at(99), waits.last().copied().unwrap_or_default())
    };
    let (reads, writes) = (reader_waits.len(), writer_waits.len());
    let (reader_p50, reader_p99, reader_worst) = waits(&mut reader_waits);
    let (writer_p50, writer_p99, writer_worst) = waits(&mut writer_waits);
    println!(
        "4 reader and 2 writer processes, 10 s: {reads} reads, {writes} writes; overlapping \
         pairs: {writer} with a writer, {readers} of readers; waits (p50/p99/worst): readers \
         {reader_p50}/{reader_p99}/{reader_worst} ms (bound {reader_bound} ms), writers \
         {writer_p50}/{writer_p99}/{writer_worst} ms (bound {writer_bound} ms)"
    );
    assert_eq!(writer, 0, "a writer overlapped another holder");
    assert!(readers > 0, "readers never overlapped");
    // Each turn also costs a wake-up and a round trip (about 2 ms, 4 turns in a writer's
    // cycle), and far more on two cores shared with the other tests of this binary and
    // whatever else runs (a build: the waits doubled): 10 times the bound at p99, a second
    // for the worst, and each side in hundreds of times. A side that starves waits the whole
    // run (no write in 10 s without an order; 4 reads with writer preference).
    for (side, count, p99, worst, bound) in [
        ("reader", reads, reader_p99, reader_worst, reader_bound),
        ("writer", writes, writer_p99, writer_worst, writer_bound),
    ] {
        assert!(count >= 100, "{side}s got in {count} times");
        assert!(p99 <= 10 * bound, "a {side}'s p99 wait: {p99} ms");
        assert!(worst <= 3_000, "a {side} waited {worst} ms");
    }
}

// ---------------------------------------------------------------------------------------------

/// Set in the holder process of [`a_frozen_holder_expires_and_the_others_proceed`]: the
/// server URL and key prefix it holds the write lease under.
const FROZEN_HOLDER: &str = "LEASEHOLD_TEST_FROZEN_HOLDER";

/// The holder process: takes a managed write lease of 1 s, says so, and keeps it until it is
/// killed. A test of its own only so that the test binary can run it; without the variable
/// it does nothing.
#[tokio::test]
#[ignore = "a role process, run by its test with the setting it needs"]
async fn frozen_holder_process() {
    let Ok(setting) = std::env::var(FROZEN_HOLDER) else {
        return;
    };
    let (url, prefix) = setting.split_once(' ').expect("url and prefix");
    let coordination: Coordination = leasehold::backend::redis::RedisBackend::standalone(url)
        .key_prefix(prefix)
        .connect()
        .await
        .expect("connect")
        .into();
    let lock = ReadWriteLock::named(&coordination, "frozen");
    let options = ManagedOptions::new().lease(Duration::from_secs(1));
    let lease = ManagedRwLease::write(&lock, &options).await.expect("write");
    println!("held {}", lease.owner_token());
    tokio::time::sleep(MINUTE).await;
    drop(lease);
}

/// A holder process frozen with SIGSTOP cannot renew: its write lease runs out on the
/// server's clock, and a reader and a writer elsewhere proceed within the lease.
#[tokio::test]
async fn a_frozen_holder_expires_and_the_others_proceed() {
    let server = support::shared(ServerKind::Redis7);
    let prefix = support::unique_prefix("rw-frozen");
    let mut holder = TestProcess::start(
        "frozen_holder_process",
        FROZEN_HOLDER,
        &format!("{} {prefix}", server.url()),
    );
    holder.line("held ", Duration::from_secs(30)).await;

    let coordination: Coordination =
        leasehold::backend::redis::RedisBackend::standalone(server.url())
            .key_prefix(&prefix)
            .connect()
            .await
            .expect("connect")
            .into();
    let lock = ReadWriteLock::named(&coordination, "frozen");
    assert!(!readable(&lock).await, "the holder writes");
    holder.freeze();
    let frozen = Instant::now();
    let mut reader = tokio::time::timeout(Duration::from_secs(3), lock.read(MINUTE))
        .await
        .expect("the frozen holder's lease runs out within its second")
        .expect("read");
    let waited = frozen.elapsed();
    assert!(reader.release().await.expect("release").was_held());
    let mut writer = tokio::time::timeout(Duration::from_secs(1), lock.write(MINUTE))
        .await
        .expect("free")
        .expect("write");
    println!("a reader got in {waited:?} after the holder was frozen");
    assert!(writer.release().await.expect("release").was_held());
    drop(holder);
}

// ---------------------------------------------------------------------------------------------

/// A downgrade whose answer is lost leaves the handle a reader, and may have applied: the
/// next downgrade settles it, whichever way the first went, and readers get in.
#[tokio::test]
async fn a_downgrade_without_an_answer_leaves_a_reader_and_the_next_settles_it() {
    let behind = support::Behind::start("rw-downgrade-uncertain");
    let holder = behind
        .through_proxy(|builder| builder.response_timeout(Duration::from_millis(200)))
        .await;
    let direct = behind.direct().await;
    let lock = ReadWriteLock::named(&holder, "downgrade");
    let observer = ReadWriteLock::named(&direct, "downgrade");
    // Warm: every script the test sends is cached, so the held one runs as it lands.
    let mut warm = write(&lock, MINUTE).await;
    assert!(warm.downgrade().await.expect("downgrade"));
    assert!(warm.release().await.expect("release").was_held());

    let mut writer = write(&lock, MINUTE).await;
    behind.proxy.stall();
    let started = Instant::now();
    let err = writer.downgrade().await.expect_err("no answer in time");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "bounded by the timeout"
    );
    assert!(err.is_outcome_uncertain(), "{err}");
    assert_eq!(writer.access(), Access::Read, "readers may be in");
    assert!(
        !readable(&observer).await,
        "not delivered yet: still the writer"
    );
    behind.proxy.pass();
    // Sent again (the held one may land first): either way a reader now.
    assert!(writer.downgrade().await.expect("downgrade again"));
    assert_eq!(writer.access(), Access::Read);
    eventually("readers get in", async || readable(&observer).await).await;
    assert!(!writable(&observer).await, "it still reads");
    assert!(writer.release().await.expect("release").was_held());
}

/// Redis out of memory (`noeviction`): a new lease is refused (`OutOfMemory`, certainly
/// without effect), also where the step first prunes an expired holder (whose removal is a
/// write that would let the grant past the server's refusal), while a held lease is still
/// renewed (a renewal grows nothing) and released.
#[tokio::test]
async fn out_of_memory_refuses_new_leases_and_renews_held_ones() {
    let server = support::Server::start(ServerKind::Redis7, &[]);
    let coordination: Coordination =
        leasehold::backend::redis::RedisBackend::standalone(server.url())
            .key_prefix(support::unique_prefix("rw-oom"))
            .connect()
            .await
            .expect("connect")
            .into();
    let lock = ReadWriteLock::named(&coordination, "oom");
    let mut held = read(&lock, MINUTE).await;
    let other = ReadWriteLock::named(&coordination, "oom-new");
    let other_key = physical(&coordination, &other);
    let other_key = String::from_utf8(other_key).expect("a text key");
    server.out_of_memory(true);
    for write in [false, true] {
        // A reader whose deadline (1 ms after the epoch) has passed: the step prunes it.
        server.out_of_memory(false);
        let _: i64 = server.cmd(&["ZADD", &other_key, "1", "r:expired"]);
        server.out_of_memory(true);
        let attempt = if write {
            other.try_write(MINUTE).await
        } else {
            other.try_read(MINUTE).await
        };
        let err = attempt.expect_err("out of memory");
        assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
        assert!(err.is_refused() && !err.is_outcome_uncertain(), "{err}");
        let members: Vec<String> = server.cmd(&["ZRANGE", &other_key, "0", "-1"]);
        assert_eq!(members, ["r:expired"], "nothing changed");
    }
    let err = lock.try_read(MINUTE).await.expect_err("another reader");
    assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
    assert!(held.renew(MINUTE).await.expect("renewed out of memory"));
    assert!(
        held.release()
            .await
            .expect("released out of memory")
            .was_held()
    );
    server.out_of_memory(false);
}

/// A writer that waits is woken by changes to the key, and its own
/// waiting record is one of them: it is written again only once a quarter of its life has
/// passed, so a writer waiting behind a reader for a second tries a handful of times, not
/// once per round trip.
#[tokio::test]
async fn a_waiting_writer_does_not_wake_itself_round_after_round() {
    let behind = support::Behind::start("rw-no-spin");
    let coordination = behind.direct().await;
    let lock = ReadWriteLock::named(&coordination, "no-spin")
        .waiting_bound(Duration::from_secs(2))
        .expect("valid");
    let mut reader = read(&lock, MINUTE).await;
    let calls = || support::target::command_calls(&behind.server, "evalsha");
    let before = calls();
    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write(MINUTE).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tries = calls() - before;
    assert!(tries <= 6, "{tries} tries in a second of waiting");
    assert!(reader.release().await.expect("release").was_held());
    let mut writer = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer gets in")
        .expect("task")
        .expect("write");
    assert!(writer.release().await.expect("release").was_held());
}

/// Four writers with handles of their own take turns at one write lease while its slot
/// moves from master to master: latency, not errors, and never two writers at once.
#[tokio::test]
async fn write_leases_ride_out_a_slot_move() {
    let lock = ReadWriteLock::named(&Coordination::memory(), "moving");
    support::turns::while_its_slot_moves(
        ServerKind::Redis7,
        "rw-slot-move",
        lock.key(),
        write_turn,
    )
    .await;
}

/// Four holders, each with a handle of its own, take turns at one write lease while the
/// Sentinel primary is killed and its replica elected: latency, not errors (the failover
/// within `transient_retry`), and no two writers at once, except where a grant the old primary
/// acknowledged was lost with it, which its release tells.
#[tokio::test]
async fn write_leases_ride_out_a_sentinel_failover() {
    support::turns::across_a_sentinel_failover(ServerKind::Redis7, "rw-failover", write_turn).await;
}

/// One holder's turn at the write lease of `moving`: see [`support::turns::exclusive_turns`].
async fn write_turn(
    coordination: Coordination,
    occupancy: std::sync::Arc<support::turns::Occupancy>,
) -> Result<(), String> {
    let lock = ReadWriteLock::named(&coordination, "moving");
    let mut lease = lock
        .write(Duration::from_secs(2))
        .await
        .map_err(|err| format!("write: {err}"))?;
    let stay = occupancy.stay().await;
    let released = lease.release().await;
    occupancy.released(stay, released)
}

scenario!(binary_names);

/// A read-write lease named by any bytes (a NUL, a byte over 0x7f, braces) works end to end.
async fn binary_names(target: Target) {
    let coordination = target.coordination("rw-binary").await;
    let name = b"\x00\xff}{|\n".as_slice();
    let lock = ReadWriteLock::named(&coordination, name);
    let mut writer = lock
        .try_write(MINUTE)
        .await
        .expect("try")
        .acquired()
        .expect("free");
    let same = ReadWriteLock::named(&coordination, name);
    assert!(
        !readable(&same).await,
        "the same lock: the writer keeps readers out"
    );
    let other = ReadWriteLock::named(&coordination, b"\x00\xff}{|");
    assert!(readable(&other).await, "another name is another lock");
    assert!(writer.release().await.expect("release").was_held());
    assert!(readable(&same).await);
}

scenario!(a_dropped_lease_is_released_in_the_background);

/// Dropping a read-write lease (not managed) releases it in the background, long before its
/// minute would run out: the next writer gets in. (That a late grant takes nothing is
/// `holding_rules::a_late_acquisition_leaves_nothing_once_delivered`, below.)
async fn a_dropped_lease_is_released_in_the_background(target: Target) {
    let coordination = target.coordination("rw-dropped").await;
    let lock = ReadWriteLock::named(&coordination, "dropped");
    for access in [Access::Write, Access::Read] {
        let lease = match access {
            Access::Write => lock.try_write(MINUTE).await,
            _ => lock.try_read(MINUTE).await,
        };
        let lease = lease.expect("try").acquired().expect("free");
        assert!(!writable(&lock).await, "{access:?}: held");
        drop(lease);
        eventually("the dropped lease is released", async || {
            writable(&lock).await
        })
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// The rules every self-renewing holding keeps (`support::holding`), for the write lease.

struct WriteLease;

impl support::holding::Held for WriteLease {
    const FENCED: bool = true;
    const WHAT: &'static str = "write lease";
    type Kind = ReadWriteLock;

    async fn try_acquire(
        coordination: &Coordination,
        lease: Duration,
    ) -> leasehold::Result<
        leasehold::coordination::Attempt<leasehold::coordination::rw_lease::RwLease>,
    > {
        ReadWriteLock::named(coordination, "resource")
            .try_write(lease)
            .await
    }

    fn by_owner(
        coordination: &Coordination,
        owner: leasehold::coordination::OwnerToken,
    ) -> leasehold::coordination::ByOwner {
        ReadWriteLock::named(coordination, "resource").by_owner(owner)
    }
}

holding_rules!(WriteLease);

// ---------------------------------------------------------------------------------------------

scenario!(write_tokens_never_go_back_and_a_bad_counter_refuses_writers_alone redis);

/// A write lease's fencing token comes from the writers' counter: after the counter is lost
/// it starts again from the server's clock, above every token before it. A counter that is
/// not one refuses writers as corrupt state, with nothing written, and readers alone go on.
async fn write_tokens_never_go_back_and_a_bad_counter_refuses_writers_alone(target: Target) {
    let coordination = target.coordination("rw-fence").await;
    let lock = ReadWriteLock::named(&coordination, "fence");
    let counter = coordination.backend().physical_key(lock.counter_key());
    let mut first = write(&lock, MINUTE).await;
    let token = first.fencing_token().expect("a writer's token");
    assert!(first.release().await.expect("release").was_held());

    target.raw(&[b"DEL", &counter]);
    let mut next = write(&lock, MINUTE).await;
    assert!(next.fencing_token().expect("a writer's token") > token);
    assert!(next.release().await.expect("release").was_held());

    target.raw(&[b"SET", &counter, b"12x"]);
    let err = lock.try_write(MINUTE).await.expect_err("a corrupt counter");
    assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
    assert_eq!(
        target.raw(&[b"EXISTS", &physical(&coordination, &lock)]),
        redis::Value::Int(0),
        "no lease written"
    );
    let mut reader = read(&lock, MINUTE).await;
    assert!(reader.release().await.expect("release").was_held());
}
