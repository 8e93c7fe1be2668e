//! How soon a Redlock lease passes from one holder to the next: three contenders take turns
//! at one lease of a group of five independent Redis 7.0 servers. Each releases at once what
//! it holds for `HOLD`, then stays away for `AWAY`: longer than a polling waiter's interval,
//! so that a release always goes to a contender already waiting, never back to the releaser,
//! and shorter than a holding, so that the others are waiting when it ends. The time from a
//! release being sent to the next grant is measured.
//!
//! ```sh
//! cargo bench -p leasehold-micro-bench --bench redlock_wake
//! ```
//!
//! `HAND_OVERS` (1,000 by default) hand-overs are timed one by one, and their p50, p99 and
//! worst are printed: a mean hides the tail a waiter lives through. The contenders run on
//! one multi-threaded runtime, each with a connection of its own to every server, as three
//! processes would.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod quantiles;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::redlock::RedlockGroup;

const LEASE: Duration = Duration::from_secs(30);
const CONTENDERS: usize = 3;
const NODES: usize = 5;

/// How long a contender holds the lease.
const HOLD: Duration = Duration::from_millis(60);
/// How long a contender stays away after its release: longer than a hand-over can take
/// while polling every 50 ms (with a tenth of jitter).
const AWAY: Duration = Duration::from_millis(60);
/// Turns taken before any is measured: connections, scripts and watches set up.
const WARM_UP: usize = 10;

/// What one holding was: who held it, when it was granted, and when its release was sent.
#[derive(Clone, Copy)]
struct Turn {
    contender: usize,
    granted: Instant,
    released: Instant,
}

fn main() {
    let servers = support::independent(NODES);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let hand_overs: usize = std::env::var("HAND_OVERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000);
    let times = runtime.block_on(async {
        let mut groups = Vec::with_capacity(CONTENDERS);
        for _ in 0..CONTENDERS {
            let mut nodes = Vec::with_capacity(NODES);
            for server in servers {
                let backend = RedisBackend::standalone(server.url())
                    .key_prefix("bench:")
                    .connect()
                    .await
                    .expect("connect");
                nodes.push(Coordination::from(backend));
            }
            groups.push(RedlockGroup::new(nodes).expect("a group of five"));
        }
        let wanted = WARM_UP + hand_overs + 1;
        let turns = Arc::new(Mutex::new(Vec::with_capacity(wanted + CONTENDERS)));
        let contenders: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(contender, group)| {
                let turns = Arc::clone(&turns);
                tokio::spawn(async move {
                    loop {
                        let mut lease = group.acquire("wake", LEASE).await.expect("acquire");
                        let granted = Instant::now();
                        tokio::time::sleep(HOLD).await;
                        let released = Instant::now();
                        lease.release().await.expect("release");
                        let done = {
                            let mut turns = turns.lock().expect("turns");
                            turns.push(Turn {
                                contender,
                                granted,
                                released,
                            });
                            turns.len() >= wanted
                        };
                        if done {
                            return;
                        }
                        tokio::time::sleep(AWAY).await;
                    }
                })
            })
            .collect();
        for contender in contenders {
            contender.await.expect("contender");
        }
        let mut turns = turns.lock().expect("turns").clone();
        turns.sort_by_key(|turn| turn.granted);
        // From one contender to another (the releaser is away when the next grant comes).
        turns
            .windows(2)
            .skip(WARM_UP)
            .filter(|pair| pair[0].contender != pair[1].contender)
            .map(|pair| pair[1].granted.saturating_duration_since(pair[0].released))
            .take(hand_overs)
            .collect::<Vec<Duration>>()
    });
    quantiles::print(
        &format!("redlock hand-over, {CONTENDERS} contenders over {NODES} servers"),
        times,
    );
}
