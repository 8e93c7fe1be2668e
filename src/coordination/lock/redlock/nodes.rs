//! The group's nodes and what every step asks of them: the same fenced-lock keys on each,
//! each step sent to all of them at once, each answer bounded by the node timeout, and a
//! quorum counted of what came back.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::group::check_lease;
use crate::backend::Backend;
use crate::backend::delivery::Delivery;
use crate::backend::steps::lease_release::LeaseReleaseReply;
use crate::coordination::lock::LockKeys;
use crate::coordination::owner::{HoldingKeys, Renewed};
use crate::coordination::ownership::Primitive;
use crate::error::{Error, ErrorKind, Result};

/// The lock's keys on each node, and how long a node may take to answer.
pub struct GroupKeys {
    pub(super) nodes: Vec<Arc<LockKeys>>,
    pub(crate) node_timeout: Duration,
}

impl GroupKeys {
    /// A majority of the nodes.
    pub(super) fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Runs `step` (given each node's index) on every node at once, each cut off after the
    /// node timeout (then [`ErrorKind::Timeout`], uncertain), until `enough` says the
    /// answers so far decide (or all are in): the answers in the nodes' order, `None` for
    /// a node not waited for, whose step is dropped (what it sent may still run). Dropping
    /// the future does the same to every node's.
    pub(super) async fn on_every_node<T, F>(
        &self,
        step: impl Fn(usize, Arc<LockKeys>) -> F,
        enough: impl Fn(&[Option<Result<T>>]) -> bool,
    ) -> Vec<Option<Result<T>>>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let mut asked = JoinSet::new();
        for (index, node) in self.nodes.iter().enumerate() {
            // Named by its address in the error, so that a slow node can be told apart.
            let endpoint = HoldingKeys::backend(&**node).endpoint().to_owned();
            let answer = step(index, Arc::clone(node));
            let timeout = self.node_timeout;
            asked.spawn(async move {
                let answer = tokio::time::timeout(timeout, answer)
                    .await
                    .unwrap_or_else(|_| {
                        Err(Error::new(
                            ErrorKind::Timeout,
                            format!("the node at {endpoint} did not answer within {timeout:?}"),
                        )
                        .uncertain(true))
                    });
                (index, answer)
            });
        }
        let mut answers: Vec<Option<Result<T>>> = (0..self.nodes.len()).map(|_| None).collect();
        while let Some(joined) = asked.join_next().await {
            if let Ok((index, answer)) = joined {
                answers[index] = Some(answer);
            }
            if enough(&answers) {
                break;
            }
        }
        answers
    }

    /// How many of `answers` are `Ok(true)`.
    fn yes(answers: &[Option<Result<bool>>]) -> usize {
        answers
            .iter()
            .filter(|answer| matches!(answer, Some(Ok(true))))
            .count()
    }

    /// Whether `answers` decide a quorum's yes or no: a quorum said yes, or too many said
    /// otherwise for one to.
    fn decided(&self, answers: &[Option<Result<bool>>]) -> bool {
        let yes = Self::yes(answers);
        let no = answers
            .iter()
            .filter(|answer| matches!(answer, Some(answer) if !matches!(answer, Ok(true))))
            .count();
        yes >= self.quorum() || no > self.nodes.len() - self.quorum()
    }
}

/// What a Redlock lease's holding does on the nodes: every step on all of them, a quorum
/// deciding.
impl HoldingKeys for GroupKeys {
    type Released = LeaseReleaseReply;
    const PRIMITIVE: Primitive = Primitive::RedlockLease;
    const LEFT_HELD: &'static str = "the nodes it reached keep it until it expires";
    const RELEASE_WHEN_LOST: bool = true;

    /// A lease must outlast three node timeouts (see [`check_lease`]).
    fn check_expiry(&self, expiry: Duration) -> Result<()> {
        check_lease(expiry, self.node_timeout)
    }

    /// The token goes from the nodes that renewed it, as after a handle's lost renewal.
    fn after_lost_renewal(&self, token: &str) {
        release_everywhere(self, token);
    }

    /// The first node's: the kit asks a holding's backend only for acquisitions it sends
    /// itself, and a group sends its own.
    fn backend(&self) -> &Backend {
        self.nodes[0].backend()
    }

    /// Compare-and-extend on every node, each for the lease plus the drift allowance (the
    /// holder counts on the lease alone); renewed when a quorum renewed. Otherwise the lease
    /// ends here, whatever the nodes that renewed say: the holding is lost, and its token is
    /// to be removed from every node (by the lease's handle, or by its keeper once it has
    /// told the holder: [`RELEASE_WHEN_LOST`](HoldingKeys::RELEASE_WHEN_LOST)). A node's
    /// error counts as a no.
    async fn renew(&self, token: &str, expiry_ms: Option<u64>) -> Result<bool> {
        Ok(self.renew_settled(token, expiry_ms).await? != Renewed::Gone)
    }

    /// A quorum's renewal with a node whose answer was lost (a timeout, a connection lost
    /// mid-flight) is renewed with a part unanswered: that node may still apply it later,
    /// at any time, and end its copy at the renewal's expiry from then.
    async fn renew_settled(&self, token: &str, expiry_ms: Option<u64>) -> Result<Renewed> {
        let lease_ms = expiry_ms
            .ok_or_else(|| Error::invalid_argument("a Redlock lease always has an expiry"))?;
        let node_ms = with_drift(lease_ms);
        let owned = token.to_owned();
        let answers = self
            .on_every_node(
                move |index, node| {
                    let token = node_token(&owned, index);
                    async move { node.renew(&token, Some(node_ms)).await }
                },
                // Every node waited for, so that each renews what it holds.
                |_| false,
            )
            .await;
        let renewed = Self::yes(&answers);
        if renewed >= self.quorum() {
            let unanswered = answers
                .iter()
                .any(|answer| matches!(answer, Some(Err(err)) if err.may_have_applied()));
            return Ok(if unanswered {
                Renewed::WithPartUnanswered
            } else {
                Renewed::Fully
            });
        }
        tracing::debug!(keys = %self, renewed, "a Redlock renewal missed its quorum; the lease ends");
        Ok(Renewed::Gone)
    }

    /// Held when a quorum says so.
    async fn verify(&self, token: &str) -> Result<bool> {
        let owned = token.to_owned();
        let answers = self
            .on_every_node(
                move |index, node| {
                    let token = node_token(&owned, index);
                    async move { node.verify(&token).await }
                },
                |answers| self.decided(answers),
            )
            .await;
        Ok(Self::yes(&answers) >= self.quorum())
    }

    /// Owner-checked release on every node: answered when a quorum answered,
    /// [`LeaseReleaseReply::Released`] when one of them still held it,
    /// [`OtherOwner`](LeaseReleaseReply::OtherOwner) when none did and another holder's
    /// lease stands on one. Fewer answers fail (unavailable, uncertain), so that the handle
    /// keeps its token for another release.
    async fn release(&self, token: &str) -> Result<LeaseReleaseReply> {
        let owned = token.to_owned();
        // Every node waited for: each removes what it holds.
        let answers: Vec<Result<LeaseReleaseReply>> = self
            .on_every_node(
                move |index, node| {
                    let token = node_token(&owned, index);
                    async move { node.release(&token).await }
                },
                |_| false,
            )
            .await
            .into_iter()
            .flatten()
            .collect();
        let answered: Vec<&LeaseReleaseReply> = answers.iter().flatten().collect();
        if answered.len() < self.quorum() {
            let causes: Vec<String> = answers
                .iter()
                .filter_map(|answer| answer.as_ref().err().map(ToString::to_string))
                .collect();
            return Err(Error::new(
                ErrorKind::Transient,
                format!(
                    "the release reached {} of {} nodes, short of a quorum: {}",
                    answered.len(),
                    self.nodes.len(),
                    causes.join("; ")
                ),
            )
            .uncertain(true));
        }
        // A quorum answered: released wherever it was still this holder's.
        let found = |wanted: LeaseReleaseReply| answered.iter().any(|reply| **reply == wanted);
        Ok(if found(LeaseReleaseReply::Released) {
            LeaseReleaseReply::Released
        } else if found(LeaseReleaseReply::OtherOwner) {
            LeaseReleaseReply::OtherOwner
        } else {
            LeaseReleaseReply::NoLease
        })
    }
}

/// The lease a node holds for a holder that counts on `lease_ms`: that plus the drift
/// allowance, 1% and 2 ms, for the nodes' clocks running faster than the holder's.
pub(super) fn with_drift(lease_ms: u64) -> u64 {
    lease_ms
        .saturating_add(lease_ms.div_ceil(100))
        .saturating_add(2)
}

/// The lease key on the first node, as text (lossy), for logs and messages.
impl fmt::Display for GroupKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {} nodes", self.nodes[0], self.nodes.len())
    }
}

/// Removes `token` from every node in the background, one attempt each within the node
/// timeout: after a round that missed its quorum (whose guards remove it again once late
/// deliveries can no longer land), or a renewal that did (whose nodes let it expire). What
/// it misses expires with the lease. Without a runtime, nothing is sent.
pub(crate) fn release_everywhere(keys: &GroupKeys, token: &str) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let nodes = GroupKeys {
        nodes: keys.nodes.clone(),
        node_timeout: keys.node_timeout,
    };
    let token = token.to_owned();
    runtime.spawn(async move {
        let answers = nodes
            .on_every_node(
                move |index, node| {
                    let token = node_token(&token, index);
                    async move { node.release(&token).await }
                },
                |_| false,
            )
            .await;
        let missed = answers.iter().filter(|answer| !matches!(answer, Some(Ok(_)))).count();
        if missed > 0 {
            tracing::debug!(keys = %nodes, missed, "a Redlock token was left to expire on some nodes");
        }
    });
}

/// The owner token a group's holding has on node `index`: the group's token with its last
/// two hex digits XORed with the index. Each node keeps a token of its own, so that two
/// entries of a group that reach one server (one by its address, one by its name, say) are
/// two holders there: the second finds the first's token and gives no vote, where one
/// token for both would count one server twice. Derived, never stored: any handle on the
/// same nodes, in the same order, finds them from the group's token.
pub(crate) fn node_token(token: &str, index: usize) -> String {
    let split = token.len().saturating_sub(2);
    let last = token.get(split..).map(|tail| u8::from_str_radix(tail, 16));
    match (token.get(..split), last) {
        // Groups are small: more than 256 nodes would wrap, not collide the first 256.
        #[allow(clippy::cast_possible_truncation)]
        (Some(head), Some(Ok(last))) => format!("{head}{:02x}", last ^ (index as u8)),
        _ => format!("{token}:{index}"),
    }
}

#[cfg(test)]
mod tests {
    use super::node_token;

    #[test]
    fn each_node_has_a_token_of_its_own_derived_from_the_groups() {
        let token = "0123456789abcdef0123456789abcdef";
        assert_eq!(node_token(token, 0), token);
        let tokens: std::collections::HashSet<String> =
            (0..9).map(|index| node_token(token, index)).collect();
        assert_eq!(tokens.len(), 9);
        assert!(
            tokens
                .iter()
                .all(|t| t.len() == 32 && t.starts_with("0123456789abcdef0123456789abcd"))
        );
        assert_eq!(node_token(token, 3), node_token(token, 3));
    }
}
