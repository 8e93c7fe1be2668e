//! The memory backend answers as Redis does: random sequences of steps over every primitive
//! (the five rate limiters, the lock, the semaphore, the read-write lease, the hash lease, the
//! latch and sessions), run on both, every answer compared. A seed that finds a difference is
//! printed with the step where the answers parted.
//!
//! The answers compared are what a caller sees and that do not depend on the clocks' own
//! readings: granted or not and what is left of a limit, acquired or busy, what a release
//! found, a latch's count, a session's keys, the order of fencing tokens. Every window and
//! lease is long (an hour, a minute), so that the milliseconds a sequence takes move no
//! answer; a run that crosses an hour boundary (the fixed and sliding windows start again
//! there) is run again with fresh keys.

mod support;

use std::time::Duration;

use leasehold::Coordination;
use leasehold::backend::memory::MemoryBackend;
use leasehold::coordination::Release;
use leasehold::coordination::hash_lease::{FieldLease, LeaseHash};
use leasehold::coordination::latch::{CountDown, CountdownLatch};
use leasehold::coordination::lock::{FencedLease, FencedLock};
use leasehold::coordination::rate_limit::{
    FixedWindow, Gcra, RateLimitDecision, RateLimitPolicy, Refill, SlidingWindow, Stacked,
    TokenBucket,
};
use leasehold::coordination::rw_lease::{ReadWriteLock, RwLease};
use leasehold::coordination::semaphore::{Semaphore, SemaphorePermit};
use leasehold::coordination::session::{Session, Sessions};
use support::ServerKind;

const HOUR: Duration = Duration::from_secs(3600);
const MINUTE: Duration = Duration::from_secs(60);

/// How many sequences, and how many steps each.
const SEQUENCES: u64 = 24;
const STEPS: usize = 60;

/// A small generator of its own (xorshift64*): the same seed, the same sequence.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[usize::try_from(self.below(items.len() as u64)).expect("small")]
    }
}

/// One step of a sequence.
#[derive(Debug, Clone)]
enum Op {
    /// A limiter (by index) asked for `permits` under `key`.
    Limit {
        limiter: usize,
        key: u8,
        permits: u64,
    },
    /// The lock `name` taken now.
    Lock { name: u8 },
    /// The semaphore (capacity 2) asked for a permit.
    Permit,
    /// The read-write lease asked for reading or writing.
    ReadWrite { write: bool },
    /// The field `field` of the hash lease taken now.
    Field { field: u8 },
    /// A held thing (by index among those of its kind) renewed, verified or released.
    Held { kind: u8, index: usize, action: u8 },
    /// A write lease (by index) downgraded.
    Downgrade { index: usize },
    /// The latch created with `count`, counted down, or read.
    Latch { action: u8, count: u64 },
    /// A session granted, or one (by index) putting, claiming, deleting `name`, or
    /// released; or the space read.
    Session { action: u8, index: usize, name: u8 },
}

fn sequence(seed: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    (0..STEPS)
        .map(|_| match rng.below(10) {
            0..=2 => Op::Limit {
                limiter: usize::try_from(rng.below(5)).expect("small"),
                key: *rng.pick(b"ab"),
                permits: 1 + rng.below(3),
            },
            3 => Op::Lock {
                name: *rng.pick(b"xy"),
            },
            4 => Op::Permit,
            5 => Op::ReadWrite {
                write: rng.below(2) == 0,
            },
            6 => Op::Field {
                field: *rng.pick(b"fg"),
            },
            7 => {
                if rng.below(4) == 0 {
                    Op::Downgrade {
                        index: usize::try_from(rng.below(4)).expect("small"),
                    }
                } else {
                    Op::Held {
                        kind: u8::try_from(rng.below(4)).expect("small"),
                        index: usize::try_from(rng.below(4)).expect("small"),
                        action: u8::try_from(rng.below(3)).expect("small"),
                    }
                }
            }
            8 => Op::Latch {
                action: u8::try_from(rng.below(3)).expect("small"),
                count: 1 + rng.below(3),
            },
            _ => Op::Session {
                action: u8::try_from(rng.below(6)).expect("small"),
                index: usize::try_from(rng.below(3)).expect("small"),
                name: *rng.pick(b"mn"),
            },
        })
        .collect()
}

/// The primitives of one run, on one backend, and what it holds.
struct World {
    coordination: Coordination,
    limiters: Vec<Limiter>,
    locks: Vec<FencedLease>,
    /// The highest fencing token seen, per lock name, to answer whether a new one is above.
    tokens: [u64; 2],
    permits: Vec<SemaphorePermit>,
    rw: Vec<RwLease>,
    fields: Vec<FieldLease>,
    latch: CountdownLatch,
    sessions: Vec<Session>,
}

enum Limiter {
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    TokenBucket(TokenBucket),
    Gcra(Gcra),
    Stacked(Stacked),
}

impl Limiter {
    async fn try_acquire(&self, key: &[u8], permits: u64) -> leasehold::Result<RateLimitDecision> {
        match self {
            Limiter::FixedWindow(limiter) => limiter.try_acquire(key, permits).await,
            Limiter::SlidingWindow(limiter) => limiter.try_acquire(key, permits).await,
            Limiter::TokenBucket(limiter) => limiter.try_acquire(key, permits).await,
            Limiter::Gcra(limiter) => limiter.try_acquire(key, permits).await,
            Limiter::Stacked(limiter) => limiter.try_acquire(key, permits).await,
        }
    }
}

impl World {
    fn new(coordination: Coordination) -> World {
        let c = &coordination;
        let limiters = vec![
            Limiter::FixedWindow(FixedWindow::new(c, "fixed", 5, HOUR).expect("valid")),
            Limiter::SlidingWindow(SlidingWindow::new(c, "sliding", 5, HOUR, 6).expect("valid")),
            Limiter::TokenBucket(
                TokenBucket::new(c, "bucket", 5, Refill::new(1, HOUR)).expect("valid"),
            ),
            Limiter::Gcra(Gcra::new(c, "gcra", 5, HOUR, 3).expect("valid")),
            Limiter::Stacked(
                Stacked::new(
                    c,
                    "stacked",
                    [
                        RateLimitPolicy::new("short", 4, HOUR),
                        RateLimitPolicy::new("long", 7, 2 * HOUR),
                    ],
                )
                .expect("valid"),
            ),
        ];
        World {
            limiters,
            locks: Vec::new(),
            tokens: [0; 2],
            permits: Vec::new(),
            rw: Vec::new(),
            fields: Vec::new(),
            latch: CountdownLatch::named(c, "latch"),
            sessions: Vec::new(),
            coordination,
        }
    }

    /// Runs `op`; the answer as a caller sees it.
    async fn step(&mut self, op: &Op) -> String {
        let c = self.coordination.clone();
        match op {
            Op::Limit {
                limiter,
                key,
                permits,
            } => match self.limiters[*limiter].try_acquire(&[*key], *permits).await {
                Ok(decision) => format!(
                    "granted {} remaining {}",
                    decision.is_granted(),
                    decision.remaining()
                ),
                Err(err) => format!("error {:?}", err.kind()),
            },
            Op::Lock { name } => {
                let index = usize::from(*name - b'x');
                match FencedLock::named(&c, [*name]).try_acquire(MINUTE).await {
                    Ok(attempt) => match attempt.acquired() {
                        Some(lease) => {
                            let above = lease.fencing_token() > self.tokens[index];
                            self.tokens[index] = lease.fencing_token();
                            self.locks.push(lease);
                            format!("acquired, token above {above}")
                        }
                        None => "busy".to_owned(),
                    },
                    Err(err) => format!("error {:?}", err.kind()),
                }
            }
            Op::Permit => {
                let semaphore = Semaphore::new(&c, "semaphore", 2).expect("valid");
                match semaphore.try_acquire(MINUTE).await {
                    Ok(attempt) => match attempt.acquired() {
                        Some(permit) => {
                            self.permits.push(permit);
                            "acquired".to_owned()
                        }
                        None => "busy".to_owned(),
                    },
                    Err(err) => format!("error {:?}", err.kind()),
                }
            }
            Op::ReadWrite { write } => {
                let lock = ReadWriteLock::named(&c, "rw");
                let attempt = if *write {
                    lock.try_write(MINUTE).await
                } else {
                    lock.try_read(MINUTE).await
                };
                match attempt {
                    Ok(attempt) => match attempt.acquired() {
                        Some(lease) => {
                            let answer = format!(
                                "acquired {:?}, fenced {}",
                                lease.access(),
                                lease.fencing_token().is_some()
                            );
                            self.rw.push(lease);
                            answer
                        }
                        None => "busy".to_owned(),
                    },
                    Err(err) => format!("error {:?}", err.kind()),
                }
            }
            Op::Field { field } => {
                let hash = LeaseHash::named(&c, "hash");
                match hash.try_acquire([*field], MINUTE).await {
                    Ok(attempt) => match attempt.acquired() {
                        Some(lease) => {
                            self.fields.push(lease);
                            "acquired".to_owned()
                        }
                        None => "busy".to_owned(),
                    },
                    Err(err) => format!("error {:?}", err.kind()),
                }
            }
            Op::Held {
                kind,
                index,
                action,
            } => match kind {
                0 => on_held(&mut self.locks, *index, *action).await,
                1 => on_held(&mut self.permits, *index, *action).await,
                2 => on_held(&mut self.rw, *index, *action).await,
                _ => on_held(&mut self.fields, *index, *action).await,
            },
            Op::Downgrade { index } => {
                if self.rw.is_empty() {
                    return "none".to_owned();
                }
                let len = self.rw.len();
                let lease = &mut self.rw[index % len];
                match lease.downgrade().await {
                    Ok(downgraded) => format!("downgraded {downgraded}, {:?}", lease.access()),
                    Err(err) => format!("error {:?}", err.kind()),
                }
            }
            Op::Latch { action, count } => match action {
                0 => match self.latch.create(*count, Some(MINUTE)).await {
                    Ok(created) => format!("created {}", created.is_some()),
                    Err(err) => format!("error {:?}", err.kind()),
                },
                1 => match self.latch.join().await {
                    Ok(Some(generation)) => match generation.count_down().await {
                        Ok(CountDown::Remaining(left)) => format!("remaining {left}"),
                        Ok(other) => format!("{other:?}"),
                        Err(err) => format!("error {:?}", err.kind()),
                    },
                    Ok(None) => "no generation".to_owned(),
                    Err(err) => format!("error {:?}", err.kind()),
                },
                _ => match self.latch.join().await {
                    Ok(Some(generation)) => match generation.count().await {
                        Ok(count) => format!("count {count:?}"),
                        Err(err) => format!("error {:?}", err.kind()),
                    },
                    Ok(None) => "no generation".to_owned(),
                    Err(err) => format!("error {:?}", err.kind()),
                },
            },
            Op::Session {
                action,
                index,
                name,
            } => {
                let space = Sessions::named(&c, "space");
                if *action == 0 || self.sessions.is_empty() {
                    return match space.grant(MINUTE).await {
                        Ok(session) => {
                            self.sessions.push(session);
                            "granted".to_owned()
                        }
                        Err(err) => format!("error {:?}", err.kind()),
                    };
                }
                let len = self.sessions.len();
                let session = &mut self.sessions[index % len];
                let answer = match action {
                    1 => session
                        .put([*name], "put")
                        .await
                        .map(|put| format!("put {put}")),
                    2 => session
                        .claim([*name], "claimed")
                        .await
                        .map(|claim| format!("{claim:?}")),
                    3 => session
                        .delete([*name])
                        .await
                        .map(|deleted| format!("deleted {deleted}")),
                    4 => session
                        .release()
                        .await
                        .map(|release| format!("{release:?}")),
                    _ => space.list().await.map(|keys| format!("{keys:?}")),
                };
                answer.unwrap_or_else(|err| format!("error {:?}", err.kind()))
            }
        }
    }
}

/// Renews (0), verifies (1) or releases (2) the held thing at `index`.
async fn on_held<P: leasehold::coordination::HeldKind>(
    held: &mut [leasehold::coordination::Held<P>],
    index: usize,
    action: u8,
) -> String {
    if held.is_empty() {
        return "none".to_owned();
    }
    let len = held.len();
    let one = &mut held[index % len];
    let answer = match action {
        0 => one
            .renew(MINUTE)
            .await
            .map(|renewed| format!("renewed {renewed}")),
        1 => one
            .verify_still_held()
            .await
            .map(|held| format!("held {held}")),
        _ => one
            .release()
            .await
            .map(|release: Release| format!("{release:?}")),
    };
    answer.unwrap_or_else(|err| format!("error {:?}", err.kind()))
}

/// The hour a backend's clock reads now.
async fn hour(coordination: &Coordination) -> u64 {
    coordination.server_time().await.expect("time").as_secs() / 3600
}

/// Runs `ops` on both backends, fresh keys each; `None` when a run crossed an hour boundary.
async fn both(
    ops: &[Op],
    redis: &leasehold::backend::redis::RedisBackendBuilder,
    run: u64,
) -> Option<(Vec<String>, Vec<String>)> {
    let prefix = support::unique_prefix(&format!("differential-{run}"));
    let memory: Coordination = MemoryBackend::builder()
        .key_prefix(prefix.clone())
        .build()
        .expect("valid")
        .into();
    let server: Coordination = redis
        .clone()
        .key_prefix(prefix)
        .connect()
        .await
        .expect("connect")
        .into();
    let mut answers = Vec::new();
    for coordination in [memory, server] {
        let started = hour(&coordination).await;
        let mut world = World::new(coordination.clone());
        let mut seen = Vec::with_capacity(ops.len());
        for op in ops {
            seen.push(world.step(op).await);
        }
        if hour(&coordination).await != started {
            return None;
        }
        answers.push(seen);
    }
    let server = answers.pop()?;
    let memory = answers.pop()?;
    Some((memory, server))
}

/// Random sequences of steps answer the same on the memory backend as on Redis 8 (which has
/// every command the primitives use, hash field expiry included).
#[tokio::test]
async fn random_sequences_answer_the_same_in_memory_and_on_redis() {
    let redis = leasehold::backend::redis::RedisBackend::standalone(
        support::shared(ServerKind::Redis8).unix_url(),
    );
    let mut seen = std::collections::BTreeSet::new();
    for seed in 1..=SEQUENCES {
        let ops = sequence(seed);
        let mut outcome = None;
        for attempt in 0..2 {
            outcome = both(&ops, &redis, seed * 10 + attempt).await;
            if outcome.is_some() {
                break;
            }
        }
        let (memory, server) = outcome.expect("two runs within one hour each");
        seen.extend(memory.iter().cloned());
        for (at, ((op, memory), server)) in ops.iter().zip(&memory).zip(&server).enumerate() {
            assert_eq!(
                memory,
                server,
                "seed {seed}, step {at} ({op:?}): memory answered {memory:?}, Redis {server:?}; \
                 the steps before: {:?}",
                &ops[..at]
            );
        }
    }
    // The sequences reach the answers that differ most between a store and a server:
    // contention, exhaustion, loss and the end of a latch.
    for answer in [
        "busy",
        "granted false remaining 0",
        "Released",
        "AlreadyReleased",
        "NotHeld",
        "Claimed",
        "held false",
        "renewed false",
        "remaining 0",
        "downgraded false, Read",
        "error AlreadyComplete",
    ] {
        assert!(
            seen.contains(answer),
            "no sequence answered {answer:?}: {seen:?}"
        );
    }
}
