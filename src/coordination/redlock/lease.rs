//! A lease held on a quorum of the group's nodes, and its managed form.

use std::fmt;
use std::time::Duration;

use super::nodes::GroupKeys;
use crate::coordination::Release;
use crate::coordination::owner::{Holding, HoldingKeys, expiry_ms};
use crate::error::Result;

/// A lease held on a quorum of a [`RedlockGroup`](super::RedlockGroup)'s nodes, with the
/// group's fencing token. Made by [`RedlockGroup::try_acquire`](super::RedlockGroup::try_acquire)
/// and [`acquire`](super::RedlockGroup::acquire).
///
/// Every step goes to every node at once, each bounded by the group's node timeout, and a
/// quorum decides: [`renew`](Self::renew) is compare-and-extend on every node (renewed when
/// a quorum renewed; otherwise the lease ends, and its token is removed from every node in
/// the background); [`release`](Self::release) removes the token from every node (answered
/// when a quorum answered); [`verify_still_held`](Self::verify_still_held) asks every node.
/// Dropped unreleased, it is released in the background.
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
/// let nodes = [Coordination::memory(), Coordination::memory(), Coordination::memory()];
/// let group = RedlockGroup::new(nodes)?;
/// let mut lease = group.try_acquire("invoice:42", Duration::from_secs(10)).await?
///     .into_lease()
///     .expect("free");
/// assert!(lease.remaining_estimate() <= Duration::from_secs(10));
/// assert!(lease.release().await?.was_held());
/// # Ok(()) }
/// ```
pub struct RedlockLease {
    holding: Holding<GroupKeys>,
    fencing_token: u64,
}

impl RedlockLease {
    pub(super) fn new(holding: Holding<GroupKeys>, fencing_token: u64) -> Self {
        RedlockLease {
            holding,
            fencing_token,
        }
    }

    /// The group's fencing token: greater than every token of the group before it, while
    /// the nodes keep their counters (see the [module documentation](super#fencing-tokens)).
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The owner token: 32 lower-case hex digits, the same on every node.
    pub fn owner_token(&self) -> &str {
        self.holding.token()
    }

    /// The lease asked for at acquisition or at the last successful renewal: the time the
    /// holder counts on (each node holds it a little longer, the drift allowance).
    pub fn lease(&self) -> Duration {
        self.holding.expiry().unwrap_or_default()
    }

    /// The validity left by the local estimate, counted from before the round that set it
    /// was sent: zero once released, lost, uncertain, or past it. Complete the protected
    /// work within it.
    pub fn remaining_estimate(&self) -> Duration {
        self.holding.remaining_estimate().unwrap_or_default()
    }

    /// Whether this handle no longer holds its lease: released, or lost by a renewal that
    /// missed its quorum.
    pub fn is_released(&self) -> bool {
        self.holding.is_released()
    }

    /// Renews the lease to `lease` on every node (each node for `lease` plus the drift
    /// allowance): `Ok(true)` when a quorum renewed within the node timeout. `Ok(false)`
    /// when a quorum did not (the lease has ended: its token is removed from every node in
    /// the background, and the handle is lost; acquire again), or when nothing was sent
    /// because the handle is released, lost or uncertain, or past its estimate: a renewal
    /// never takes a lease again.
    ///
    /// A lease not longer than three node timeouts fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) before anything is
    /// sent.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropped after the renewals were sent, the handle stays as an
    /// unanswered renewal leaves it, held with the narrower estimate.
    pub async fn renew(&mut self, lease: Duration) -> Result<bool> {
        let lease_ms = expiry_ms("a lease", lease)?;
        super::group::check_lease(lease, self.holding.keys().node_timeout)?;
        let was_held = !self.holding.is_released();
        let renewed = self.holding.renew(Some(lease_ms)).await?;
        if was_held && self.holding.is_released() {
            // Lost by this renewal: the nodes that renewed still hold the token.
            release_everywhere(self.holding.keys(), self.holding.token());
        }
        Ok(renewed)
    }

    /// Whether a quorum of the nodes still holds the lease under this handle's owner token.
    /// `Ok(false)` without asking when the handle is released, lost or uncertain, or past
    /// its estimate.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the step only reads.
    pub async fn verify_still_held(&self) -> Result<bool> {
        self.holding.verify().await
    }

    /// Removes the token from every node, never another holder's. [`Release::Released`]
    /// when a quorum still held it, [`Release::AlreadyReleased`] when a quorum answered
    /// otherwise. When fewer than a quorum answer within the node timeout, it fails
    /// (unavailable, uncertain): the handle stops reporting ownership and keeps its token,
    /// so that `release` can be called again; dropping it tries once more in the
    /// background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: if the future is dropped after the release was sent, it goes
    /// on in the background and the handle counts as released.
    pub async fn release(&mut self) -> Result<Release> {
        self.holding.release().await.map(Release::from_reply)
    }

    /// How long each node has to answer each step.
    pub(crate) fn node_timeout(&self) -> Duration {
        self.holding.keys().node_timeout
    }

    /// The holding, to be kept by a [`ManagedLease`](crate::coordination::lock::ManagedLease).
    pub(crate) fn into_holding(self) -> Holding<GroupKeys> {
        self.holding
    }
}

impl fmt::Debug for RedlockLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockLease")
            .field("keys", &format_args!("{}", self.holding.keys()))
            .field("fencing_token", &self.fencing_token)
            .field("owner_token", &self.holding.token())
            .field("state", &self.holding.state())
            .finish()
    }
}

/// Removes `token` from every node in the background, one attempt each within the node
/// timeout: after a round that missed its quorum (whose guards remove it again once late
/// deliveries can no longer land), or a renewal that did (whose nodes let it expire). What
/// it misses expires with the lease. Without a runtime, nothing is sent.
pub(super) fn release_everywhere(keys: &GroupKeys, token: &str) {
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
                move |_, node| {
                    let token = token.clone();
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
