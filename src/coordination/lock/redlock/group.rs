//! The group: its nodes, its settings, and the acquisition round.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::RedlockLease;
use super::nodes::release_everywhere;
use super::nodes::{GroupKeys, node_token, with_drift};
use crate::Coordination;
use crate::backend::Backend;
use crate::backend::delivery::Delivery;
use crate::backend::steps::redlock::RedlockRaiseStep;
use crate::coordination::Held;
use crate::coordination::lock::LockKeys;
use crate::coordination::name;
use crate::coordination::owner::{
    Acquire, Acquisition, Holding, HoldingKeys, ReleaseOnDrop, ReleaseStage, expiry_ms, jittered,
    new_token, register, wait_for_change,
};
use crate::coordination::{Attempt, ByOwner, DEFAULT_POLL_INTERVAL, OwnerToken};
use crate::error::{Error, ErrorKind, Result};

/// How long a node has to answer each step by default.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// The random pause, from the first to the second, before a waiter tries again after a round
/// that found every node free and missed its quorum all the same: other waiters took part of
/// the nodes at the same time, and all give them back.
const SPLIT_BACKOFF: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(5));

/// A quorum lease over an odd number (at least three) of independent Redis deployments: the
/// Redlock algorithm, with a fencing token of its own. See the [module
/// documentation](super) for what it gives, what it does not, and its failures.
///
/// Each node is a [`Coordination`] of its own, which the group shares and does not own
/// (clones of the same handles serve other primitives meanwhile). On each node, a lease
/// named `name` lives under `redlock:{<name length>:<name>}:lease`, beside its fencing
/// counter `redlock:{<name length>:<name>}:fence`, as a fenced lock's pair.
///
/// Cheap to clone.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::redlock::RedlockGroup;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// // Three independent deployments (in-process here; Redis servers in production).
/// let nodes = [Coordination::memory(), Coordination::memory(), Coordination::memory()];
/// let group = RedlockGroup::new(nodes)?.node_timeout(Duration::from_millis(50))?;
///
/// let Some(mut lease) = group.try_acquire("invoice:42", Duration::from_secs(10)).await?.acquired()
/// else {
///     return Ok(()); // another process holds it
/// };
/// // Complete the protected work within lease.remaining_estimate(), sending
/// // lease.fencing_token() with every write.
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedlockGroup {
    nodes: Arc<[Coordination]>,
    node_timeout: Duration,
}

impl RedlockGroup {
    /// A group over `nodes`, each an independent deployment (a standalone server, or the
    /// primary one Sentinel names; not a cluster's nodes), with the
    /// [`DEFAULT_NODE_TIMEOUT`]. Nothing is sent.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// fewer than three nodes, an even number (a quorum of an even group tolerates no more
    /// failures than the odd group one smaller), or two Redis handles on the same
    /// deployment with the same key prefix (they would count one lease twice). Two handles
    /// on one server that this cannot tell apart (one by its address, one by its name) still
    /// vote once: each node holds a token of its own, so the second finds the first's.
    pub fn new(nodes: impl IntoIterator<Item = Coordination>) -> Result<Self> {
        let nodes: Arc<[Coordination]> = nodes.into_iter().collect();
        if nodes.len() < 3 || nodes.len().is_multiple_of(2) {
            return Err(Error::invalid_argument(format!(
                "a Redlock group needs an odd number of nodes, at least three, not {}",
                nodes.len()
            )));
        }
        let mut places: Vec<(String, Vec<u8>)> = nodes
            .iter()
            .filter_map(|node| node.backend().as_redis())
            .map(|redis| (redis.endpoint().to_owned(), redis.key_prefix().to_vec()))
            .collect();
        places.sort();
        if let Some(pair) = places.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(Error::invalid_argument(format!(
                "two Redlock nodes are the same deployment ({}) with the same key prefix",
                pair[0].0
            )));
        }
        Ok(RedlockGroup {
            nodes,
            node_timeout: DEFAULT_NODE_TIMEOUT,
        })
    }

    /// How long each node has to answer each step, from 1 ms to 10 s: a node slower than
    /// that counts as failed for the step (and what it may still apply is cleaned up).
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) out of
    /// that range.
    pub fn node_timeout(mut self, timeout: Duration) -> Result<Self> {
        if !(Duration::from_millis(1)..=Duration::from_secs(10)).contains(&timeout) {
            return Err(Error::invalid_argument(format!(
                "a node timeout must be between 1 ms and 10 s, not {timeout:?}"
            )));
        }
        self.node_timeout = timeout;
        Ok(self)
    }

    /// How many nodes the group has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a group has at least three nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// How many nodes make a quorum: a majority.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// One round: takes the lease named `name` on every node at once, with one random owner
    /// token, each node answering within the node timeout; then writes the group's fencing
    /// token back to the nodes that granted it. A lease when a quorum granted it and took
    /// the token back, and its validity (`lease`, counted from the start of the round) is
    /// not spent; each node holds it for `lease` plus the drift allowance (1% and 2 ms).
    /// Otherwise the token is removed from every node at once, those that did not answer
    /// included, and again once a late delivery can no longer land; the answer is
    /// [`Attempt::Busy`] when holders keep a quorum out (with when their leases run out on
    /// the quorum's nodes), an error when failed nodes leave no quorum possible (its message
    /// gives each node's).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument), before
    /// anything is sent, for a lease not longer than three node timeouts (a round, its
    /// acquisition then its write-back, could spend it) or over about 34 years; with
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when the round took the whole lease
    /// all the same (its grants released), and with
    /// [`ErrorKind::Transient`](crate::ErrorKind::Transient) when the fencing token's
    /// write-back missed its quorum.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropped mid-round, the token is removed from every node in the
    /// background once its deliveries can no longer land.
    pub async fn try_acquire(
        &self,
        name: impl AsRef<[u8]>,
        lease: Duration,
    ) -> Result<Attempt<RedlockLease>> {
        let lease_ms = expiry_ms("a lease", lease)?;
        check_lease(lease, self.node_timeout)?;
        let keys = Arc::new(self.keys(name.as_ref()));
        let token = new_token()?;
        round(&keys, token, lease_ms).await
    }

    /// Waits for the lease named `name`, woken as a [`FencedLock`]'s waiter is: it watches
    /// the lease key on every node (the servers' invalidations), each watch reading the key's
    /// time left, and runs a round only when a quorum of nodes may be free (their key gone,
    /// or a node that cannot be watched). While holders keep a quorum it waits until the key
    /// changes on one of their nodes or their leases run out. A busy round
    /// waits only on the nodes held by others (its own grants, given back, fire the others'
    /// watches), or 50 ms (with jitter); a round that found every node free and still missed
    /// its quorum (waiters that split the votes) tries again after a random 1 to 5 ms. Where
    /// a node cannot be watched, rounds are at most 50 ms apart. An error ends the wait;
    /// bound it with `tokio::time::timeout`.
    ///
    /// Fails at once, as [`try_acquire`](Self::try_acquire) does, for a lease it refuses.
    ///
    /// [`FencedLock`]: crate::coordination::lock::FencedLock
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`try_acquire`](Self::try_acquire) is.
    pub async fn acquire(&self, name: impl AsRef<[u8]>, lease: Duration) -> Result<RedlockLease> {
        let lease_ms = expiry_ms("a lease", lease)?;
        check_lease(lease, self.node_timeout)?;
        // Checked and built once for every round of the wait.
        let keys = Arc::new(self.keys(name.as_ref()));
        let watched: Vec<(&Backend, &[u8])> = keys
            .nodes
            .iter()
            .map(|node| (node.backend(), node.lease_key()))
            .collect();
        loop {
            // Registered before the round: a change during it is not missed.
            let registered = register(&watched, Some(self.node_timeout)).await;
            let unknown = registered.iter().filter(|watch| watch.is_none()).count();
            // The nodes held by another at registration: their changes are the ones to wait
            // for (a round's own grants, given back, change the others).
            let mut held: Vec<_> = registered
                .into_iter()
                .flatten()
                .filter(|watch| watch.ttl().exists())
                .collect();
            let may_be_free = self.nodes.len() - held.len();
            let mut retry_after = None;
            let mut busy_round = false;
            if may_be_free >= self.quorum() {
                match round(&keys, new_token()?, lease_ms).await? {
                    Attempt::Acquired(lease) => return Ok(lease),
                    Attempt::Busy {
                        retry_after: holders_left,
                    } => (retry_after, busy_round) = (holders_left, true),
                }
                if held.is_empty() && unknown == 0 {
                    // Every node was free: other waiters took part of them at once.
                    tokio::time::sleep(crate::jitter::between(SPLIT_BACKOFF.0, SPLIT_BACKOFF.1))
                        .await;
                    continue;
                }
            }
            let pause = (unknown > 0 || busy_round).then(|| jittered(DEFAULT_POLL_INTERVAL));
            wait_for_change(&mut held, retry_after, pause).await;
        }
    }

    /// The lease named `name` held under `owner`, from any process: renewed on every node
    /// (a quorum deciding, the lease let go everywhere when it misses one), verified by a
    /// quorum and released on every node, with the checks a [`RedlockLease`]'s own
    /// steps make (see [`ByOwner`]), for a lease whose handle was
    /// [detached](Held::detach). Nothing is sent until a step is asked. The group must
    /// list the same nodes in the same order as the one that took the lease: each node holds
    /// a token of its own, derived from `owner` and the node's place.
    pub fn by_owner(&self, name: impl AsRef<[u8]>, owner: OwnerToken) -> ByOwner {
        ByOwner::new(Arc::new(self.keys(name.as_ref())), owner)
    }

    /// The lock's keys on every node.
    fn keys(&self, name: &[u8]) -> GroupKeys {
        let tagged = name::hash_tagged(b"redlock", name);
        let lease = [tagged.as_slice(), b":lease"].concat();
        let counter = [tagged.as_slice(), b":fence"].concat();
        GroupKeys {
            nodes: self
                .nodes
                .iter()
                .map(|node| {
                    Arc::new(LockKeys::new(
                        node.backend().clone(),
                        lease.clone(),
                        counter.clone(),
                    ))
                })
                .collect(),
            node_timeout: self.node_timeout,
        }
    }
}

impl fmt::Debug for RedlockGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockGroup")
            .field("nodes", &self.nodes.len())
            .field("node_timeout", &self.node_timeout)
            .finish_non_exhaustive()
    }
}

/// What one node answered to the round's acquisition.
enum Vote {
    /// Not waited for: the others had decided the round.
    Unknown,
    /// Granted, with the node's next fencing token.
    Granted(u64),
    /// Held by another; when its lease runs out there.
    Busy(Option<u64>),
    /// No vote: failed, or too slow.
    Failed(Error),
}

/// One acquisition round for `token` (see [`RedlockGroup::try_acquire`]).
async fn round(
    keys: &Arc<GroupKeys>,
    token: String,
    lease_ms: u64,
) -> Result<Attempt<RedlockLease>> {
    let started = Instant::now();
    let node_ms = with_drift(lease_ms);
    let owned = token.clone();
    let quorum = keys.quorum();
    let nodes = keys.nodes.len();
    let answers = keys
        .on_every_node(
            move |index, node| {
                let token = node_token(&owned, index);
                async move {
                    let deadline = node.backend().acquire_deadline().await?;
                    // Armed before the acquisition is sent: dropped (the node too slow, the
                    // round failed or dropped), it removes the token once a late delivery can
                    // no longer land there.
                    let late = ReleaseOnDrop::arm(&node, &token, ReleaseStage::UncertainAcquire)
                        .not_before(node.backend(), deadline);
                    let not_after_ms = deadline.map_or(0, |deadline| deadline.server_ms);
                    let answer = node.acquire(&token, &node_ms, not_after_ms).await;
                    if let Ok(Acquisition::Late) = answer {
                        // The node's clock is not the one the deadline came from.
                        node.backend().deadline_missed();
                    }
                    Ok((answer, late))
                }
            },
            // A quorum granted, or too many did not for one to: the nodes still on their way
            // are left to their guards (a grant that lands is removed after its deadline).
            move |answers| {
                let granted = answers
                    .iter()
                    .filter(|answer| matches!(answer, Some(Ok((Ok(Acquisition::Granted(_)), _)))))
                    .count();
                let not = answers.iter().flatten().count() - granted;
                granted >= quorum || not > nodes - quorum
            },
        )
        .await;
    let mut late = Vec::with_capacity(answers.len());
    let mut votes = Vec::with_capacity(answers.len());
    for answer in answers {
        let Some(answer) = answer else {
            votes.push(Vote::Unknown);
            late.push(None);
            continue;
        };
        let (vote, guard) = match answer {
            Ok((Ok(Acquisition::Granted(fencing_token)), guard)) => {
                (Vote::Granted(fencing_token), Some(guard))
            }
            Ok((Ok(Acquisition::Busy { retry_after_ms }), guard)) => {
                guard.disarm();
                (Vote::Busy(retry_after_ms), None)
            }
            Ok((Ok(Acquisition::Late), guard)) => (
                Vote::Failed(Error::new(
                    ErrorKind::Timeout,
                    "the acquisition reached the node after its deadline",
                )),
                Some(guard),
            ),
            Ok((Ok(Acquisition::Refused(err)) | Err(err), guard)) => {
                let guard = if err.may_have_applied() {
                    Some(guard)
                } else {
                    guard.disarm();
                    None
                };
                (Vote::Failed(err), guard)
            }
            Err(err) => (Vote::Failed(err), None),
        };
        votes.push(vote);
        late.push(guard);
    }
    let granted: Vec<(usize, u64)> = votes
        .iter()
        .enumerate()
        .filter_map(|(index, vote)| match vote {
            Vote::Granted(fencing_token) => Some((index, *fencing_token)),
            _ => None,
        })
        .collect();
    let outcome = if granted.len() < quorum {
        None
    } else {
        match write_back(keys, &granted).await {
            Err(err) => Some(Err(err)),
            Ok(fencing_token) => match Holding::granted(
                Arc::clone(keys),
                token.clone(),
                Some(Duration::from_millis(lease_ms)),
                started,
                None,
            ) {
                Some(holding) => Some(Ok((holding, fencing_token))),
                // Released by the holding in the background: nobody can use it.
                None => {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "the round took {:?}, the whole lease: make the lease longer, \
                             or the node timeout shorter",
                            started.elapsed()
                        ),
                    ));
                }
            },
        }
    };
    if let Some(Ok((holding, fencing_token))) = outcome {
        // The nodes that granted hold it under the holding now; the others may still
        // apply a late delivery, which their guards clean up.
        for (index, guard) in late.into_iter().enumerate() {
            if let Some(guard) = guard
                && granted.iter().any(|(granted, _)| *granted == index)
            {
                guard.disarm();
            }
        }
        return Ok(Attempt::Acquired(Held::new(holding, fencing_token)));
    }
    // No lease: the token goes from every node now, so that this process's next round is
    // not kept out by its own partial grants, and again (the guards) once late deliveries
    // can no longer land.
    release_everywhere(keys, &token);
    drop(late);
    if let Some(Err(err)) = outcome {
        return Err(err);
    }
    settle_failed_round(keys, &votes, granted.len())
}

/// Writes the group's token (the largest of the tokens the granting nodes just took, each
/// above its own counter) back to those nodes, whose counters only move up: the token when
/// a quorum took it, an error naming each node's failure otherwise.
async fn write_back(keys: &GroupKeys, granted: &[(usize, u64)]) -> Result<u64> {
    let token = granted
        .iter()
        .map(|(_, token)| *token)
        .max()
        .unwrap_or_default();
    let at: Vec<usize> = granted.iter().map(|(index, _)| *index).collect();
    let answers = keys
        .on_every_node(
            move |index, node| {
                let asked = at.contains(&index);
                async move {
                    if !asked {
                        return Ok(false);
                    }
                    node.backend()
                        .run(RedlockRaiseStep {
                            counter_key: node.counter_key(),
                            token,
                        })
                        .await
                        .map(|()| true)
                }
            },
            // Every granting node raised, or as many as answer in time.
            |_| false,
        )
        .await;
    let raised = answers
        .iter()
        .filter(|answer| matches!(answer, Some(Ok(true))))
        .count();
    if raised >= keys.quorum() {
        return Ok(token);
    }
    let causes: Vec<String> = answers
        .iter()
        .enumerate()
        .filter_map(|(index, answer)| match answer {
            Some(Err(err)) => Some(format!("node {index}: {err}")),
            _ => None,
        })
        .collect();
    Err(Error::new(
        ErrorKind::Transient,
        format!(
            "the group's fencing token reached {raised} of the {} nodes that granted the \
             lease, short of a quorum: {}",
            granted.len(),
            causes.join("; ")
        ),
    ))
}

/// The answer to a round without a lease: an error when the nodes that failed leave no
/// quorum possible (each node's cause in its message), busy otherwise, with when expiries
/// alone free a quorum of the nodes (the holders' time left there).
fn settle_failed_round(
    keys: &GroupKeys,
    votes: &[Vote],
    granted: usize,
) -> Result<Attempt<RedlockLease>> {
    let quorum = keys.quorum();
    let failed: Vec<String> = votes
        .iter()
        .enumerate()
        .filter_map(|(index, vote)| match vote {
            Vote::Failed(err) => Some(format!("node {index}: {err}")),
            _ => None,
        })
        .collect();
    // The nodes not waited for may still have answered either way.
    if keys.nodes.len() - failed.len() < quorum {
        return Err(Error::new(
            ErrorKind::Transient,
            format!(
                "{} of {} Redlock nodes failed, leaving no quorum of {quorum}: {}",
                failed.len(),
                keys.nodes.len(),
                failed.join("; ")
            ),
        ));
    }
    // A key without expiry (something else's, or corrupt) never frees by itself: it gives
    // no time, and a round then waits the poll interval, never spins.
    let mut busy: Vec<u64> = votes
        .iter()
        .filter_map(|vote| match vote {
            Vote::Busy(retry_after_ms) => *retry_after_ms,
            _ => None,
        })
        .collect();
    busy.sort_unstable();
    // The nodes still needed beside those that granted (and will be released): the
    // earliest moment their holders' leases have all run out.
    let needed = quorum.saturating_sub(granted).max(1);
    // Fewer than that free by expiry: no time at all.
    let retry_after = busy.get(needed - 1).map(|&ms| Duration::from_millis(ms));
    Ok(Attempt::Busy { retry_after })
}

/// Refuses a lease a round could spend: not longer than three node timeouts.
pub(super) fn check_lease(lease: Duration, node_timeout: Duration) -> Result<()> {
    if lease <= node_timeout.saturating_mul(3) {
        return Err(Error::invalid_argument(format!(
            "a Redlock lease of {lease:?} could be spent by one round, whose nodes have \
             {node_timeout:?} each to answer, twice: make it longer than three node timeouts"
        )));
    }
    Ok(())
}
