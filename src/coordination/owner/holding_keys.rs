//! The one trait a held primitive implements: where its holdings live, and the owner-checked
//! steps on them.

use std::fmt;
use std::future::Future;

use crate::backend::Backend;
use crate::coordination::ownership::{ABANDONED, AbandonedCounters, Primitive};
use crate::error::Result;

/// Where one kind of holding lives on a backend (a lock's lease key, a semaphore's sets) and
/// the three steps a holder takes on it, each checked against its owner token on the backend.
/// Everything else about a holding (its states, its estimate, its background release, its
/// keeper) is written once on top of these. Its `Display` names the keys in logs.
pub(crate) trait HoldingKeys: fmt::Display + Send + Sync + 'static {
    /// What a release found, logged when a background release succeeds.
    type Released: fmt::Debug + Send + 'static;
    /// The primitive: what its give-ups are counted under.
    const PRIMITIVE: Primitive;
    /// What a token holds, in log and error messages ("a {WHAT}"): the primitive's name.
    const WHAT: &'static str = Self::PRIMITIVE.name();
    /// What a release given up leaves behind, for its warning.
    const LEFT_HELD: &'static str;
    /// Whether a holding found lost still leaves something to remove: a quorum lease's
    /// token on the nodes that renewed it. A keeper then releases it once it has told the
    /// holder.
    const RELEASE_WHEN_LOST: bool = false;

    /// Refuses, before anything is sent, an expiry this kind of holding cannot count on (a
    /// quorum lease's, too short for its nodes' timeouts). Any by default.
    fn check_expiry(&self, _expiry: std::time::Duration) -> Result<()> {
        Ok(())
    }

    /// After a renewal by owner token found the holding lost: lets go of what is left of it
    /// (a quorum lease's token on the nodes that renewed it), as a handle does. Nothing by
    /// default.
    fn after_lost_renewal(&self, _token: &str) {}

    /// The backend the holdings live on.
    fn backend(&self) -> &Backend;

    /// Where the releases given up are counted, under [`WHAT`](Self::WHAT): the crate's one
    /// table. Asked of a value so that a test double can count on its own.
    fn abandoned(&self) -> &'static AbandonedCounters {
        &ABANDONED
    }

    /// Gives the holding of `token` a new expiry (`None`: none): `Ok(false)` when it is gone
    /// or another holder's. Never extends a holding it does not find under `token`.
    fn renew(
        &self,
        token: &str,
        expiry_ms: Option<u64>,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Renews as [`renew`](Self::renew) does, and says whether a part of the renewal may
    /// still land later although its answer is in: a node of a quorum whose answer was
    /// lost, while the others renewed. The holder counts on no more than that renewal's
    /// expiry from then on, since it may arrive at any time and shorten what the node
    /// keeps. Where one answer decides (one key), no part can land later.
    fn renew_settled(
        &self,
        token: &str,
        expiry_ms: Option<u64>,
    ) -> impl Future<Output = Result<Renewed>> + Send {
        let renewed = self.renew(token, expiry_ms);
        async move {
            Ok(if renewed.await? {
                Renewed::Fully
            } else {
                Renewed::Gone
            })
        }
    }

    /// Whether `token` still holds it.
    fn verify(&self, token: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Releases what `token` holds, and nothing another token holds.
    fn release(&self, token: &str) -> impl Future<Output = Result<Self::Released>> + Send;
}

/// What a renewal found (see [`HoldingKeys::renew_settled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Renewed, every part of it answered.
    Fully,
    /// Renewed, but a part of it was not answered and may still land later.
    WithPartUnanswered,
    /// Gone, or another holder's: nothing renewed.
    Gone,
}
