//! Holders taking turns at one exclusive thing (a lock, a write lease, a permit of one, a
//! field lease) while the backend is disrupted (a slot moving, a failover): who was in and
//! when, and what each holder's release found.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::Coordination;
use tokio::time::Instant;

/// Every stay inside the exclusive thing, as its holders report them.
#[derive(Default)]
pub struct Occupancy {
    stays: Mutex<Vec<Stay>>,
}

#[derive(Clone, Copy)]
struct Stay {
    from: Instant,
    to: Instant,
    /// What the holder's release found afterwards.
    release: ReleaseFound,
}

/// What a stay's release found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseFound {
    /// Its holding, released.
    Released,
    /// Nothing of its own: the holding was lost while held (a failover lost it with the tail
    /// of what the old primary took).
    Lost,
    /// No answer: the release was lost on the way (a connection the old primary closed).
    Uncertain,
}

impl Occupancy {
    /// The holder's work: marks it in for a moment. Returns the stay's number, for
    /// [`released`](Self::released).
    pub async fn stay(&self) -> usize {
        let from = Instant::now();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let to = Instant::now();
        let mut stays = self.stays.lock().expect("not poisoned");
        stays.push(Stay {
            from,
            to,
            release: ReleaseFound::Released,
        });
        stays.len() - 1
    }

    /// Records what stay `n`'s release answered; an error other than a release lost on the
    /// way is the turn's failure.
    pub fn released(
        &self,
        n: usize,
        answer: leasehold::Result<leasehold::coordination::Release>,
    ) -> Result<(), String> {
        let release = match answer {
            Ok(leasehold::coordination::Release::Released) => ReleaseFound::Released,
            Ok(_) => ReleaseFound::Lost,
            Err(err) if err.is_unavailable() && err.is_outcome_uncertain() => {
                ReleaseFound::Uncertain
            }
            Err(err) => return Err(format!("release: {err}")),
        };
        self.stays.lock().expect("not poisoned")[n].release = release;
        Ok(())
    }

    /// The stays whose release found `release`.
    pub fn count(&self, release: ReleaseFound) -> usize {
        let stays = self.stays.lock().expect("not poisoned");
        stays.iter().filter(|stay| stay.release == release).count()
    }

    /// Pairs of stays that overlapped although neither holding was lost.
    fn held_twice(&self) -> Vec<(usize, usize)> {
        let stays = self.stays.lock().expect("not poisoned");
        let mut twice = Vec::new();
        for (i, a) in stays.iter().enumerate() {
            for (j, b) in stays.iter().enumerate().skip(i + 1) {
                let overlap = a.from < b.to && b.from < a.to;
                let lost = a.release == ReleaseFound::Lost || b.release == ReleaseFound::Lost;
                if overlap && !lost {
                    twice.push((i, j));
                }
            }
        }
        twice
    }
}

/// Each holder (a handle of its own, as a process) takes turns at one exclusive thing while
/// `disruption` runs, and for 300 ms after: `turn` takes the thing for one holder (waiting as
/// long as it takes), calls [`Occupancy::stay`] while it holds it, gives it back and reports
/// the release with [`Occupancy::released`]. Every turn must pass without error (the steps
/// that meet the disruption cost latency, not errors; each is bounded at 30 s), no two
/// holders may be in at once unless one of their holdings was lost, at least 20 turns are
/// taken, and some once the disruption is over. Returns what the stays found.
pub async fn exclusive_turns<F, Fut>(
    holders: &[Coordination],
    turn: F,
    disruption: impl Future<Output = ()>,
) -> Arc<Occupancy>
where
    F: Fn(Coordination, Arc<Occupancy>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let occupancy = Arc::new(Occupancy::default());
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = holders
        .iter()
        .map(|coordination| {
            let (coordination, turn) = (coordination.clone(), turn.clone());
            let (occupancy, stop) = (occupancy.clone(), stop.clone());
            tokio::spawn(async move {
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    // No fairness is promised: a waiter may lose many races on a busy
                    // machine. Only an error is a failure; the bound guards against a hang.
                    let taken = tokio::time::timeout(
                        Duration::from_secs(30),
                        turn(coordination.clone(), occupancy.clone()),
                    )
                    .await;
                    match taken {
                        Ok(Ok(())) => {}
                        Ok(Err(err)) => failures.push(err),
                        Err(_) => failures.push("no turn within 30 s".to_owned()),
                    }
                }
                failures
            })
        })
        .collect();
    disruption.await;
    let disrupted_until = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for task in tasks {
        failures.extend(task.await.expect("a holder's task"));
    }
    assert!(
        failures.is_empty(),
        "{} failures: {failures:?}",
        failures.len()
    );
    let twice = occupancy.held_twice();
    assert!(twice.is_empty(), "held twice: stays {twice:?}");
    let stays = occupancy.stays.lock().expect("not poisoned").clone();
    assert!(stays.len() >= 20, "{} turns", stays.len());
    assert!(
        stays.iter().any(|stay| stay.from >= disrupted_until),
        "no turn once the disruption was over"
    );
    occupancy
}

/// Four holders, each with a handle of its own (as four processes), take turns at one
/// exclusive thing on a private `kind` cluster (its slot map changes) while the slot of
/// `key` (a user key, on the first handle) moves from master to master three times, as a
/// reshard moves it: see [`Cluster::exclusive_turns_while_moving`](super::Cluster::exclusive_turns_while_moving).
/// `test` names the handles' prefix.
pub async fn while_its_slot_moves<F, Fut>(kind: super::ServerKind, test: &str, key: &[u8], turn: F)
where
    F: Fn(Coordination, Arc<Occupancy>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let cluster = Arc::new(super::Cluster::start(kind));
    let holders = cluster.handles(test, 4).await;
    let slot = leasehold::backend::key_slot(&holders[0].backend().physical_key(key));
    cluster
        .exclusive_turns_while_moving(slot, &holders, turn)
        .await;
}

/// Four holders, each with a handle of its own, take turns at one exclusive thing on a
/// private `kind` Sentinel setup while its primary is killed and its replica elected: see
/// [`SentinelSetup::exclusive_turns_across_failover`](super::SentinelSetup::exclusive_turns_across_failover).
/// `test` names the handles' prefix.
pub async fn across_a_sentinel_failover<F, Fut>(kind: super::ServerKind, test: &str, turn: F)
where
    F: Fn(Coordination, Arc<Occupancy>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let setup = Arc::new(super::SentinelSetup::start(kind));
    let holders = setup.handles(test, 4).await;
    setup.exclusive_turns_across_failover(&holders, turn).await;
}
