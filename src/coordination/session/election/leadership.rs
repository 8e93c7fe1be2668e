//! A won election: the leader's handle.

use std::fmt;
use std::sync::Arc;

use super::deposition::Deposition;
use super::names::ElectionNames;
use super::withdraw::Withdraw;
use crate::backend::steps::election::{LeaderStep, Leading, ProclaimStep, ResignStep};
use crate::coordination::ownership::OwnershipLost;
use crate::coordination::session::MAX_VALUE_LEN;
use crate::error::{Error, Result};

/// The leadership [`Election::campaign`](super::Election::campaign) won: held while the
/// candidate's session lives, in its term.
///
/// The [term](Self::term) is a fencing token: greater than every earlier term of the
/// election, also after the counter was lost (it starts again from the server's clock, as
/// a fenced lock's does). Send it with every write the leader makes and have the resource
/// refuse a lower one (a [`FencedValue`](crate::coordination::fenced_value::FencedValue)
/// does, for a value in Redis): a leader paused past its lease, and replaced, is then
/// refused whatever it believes.
///
/// Leadership ends when the session does, or when another term leads while the session
/// lives (a failover that lost this leader's promotion, the election's keys lost):
/// [`ownership`](Self::ownership) fires for either. For the session, when a keep-alive finds
/// it gone or its local estimate runs out, before the server lets another candidate lead
/// (as long as the primary's clock does not step forward and no failover loses a
/// keep-alive; the deposition below covers what such a failover leaves);
/// for a deposition ([`LossReason::Deposed`](crate::coordination::ownership::LossReason)),
/// as soon as the leader key names another term or nobody: at once where the server tracks
/// keys, within [`DEPOSITION_POLL`](super::DEPOSITION_POLL) elsewhere. The term fences what
/// a deposed leader writes meanwhile. [`resign`](Self::resign) hands the leadership on at
/// once; dropping the handle resigns in the background.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::ManagedOptions;
/// use leasehold::coordination::election::Election;
/// use leasehold::coordination::session::{ManagedSession, Sessions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let sessions = Sessions::named(&Coordination::memory(), "jobs");
/// let election = Election::named(&sessions, "scheduler");
/// let session = ManagedSession::grant(&sessions, &ManagedOptions::new()).await?;
/// let leadership = election.campaign(&session, "node-a").await?;
/// assert!(leadership.proclaim("node-a, draining").await?);
/// assert!(leadership.is_leader().await?);
/// assert!(leadership.resign().await?);
/// assert_eq!(election.leader().await?, None);
/// # Ok(()) }
/// ```
pub struct Leadership {
    names: Arc<ElectionNames>,
    id: String,
    term: u64,
    /// The signal: the session's, and the leader key's.
    deposition: Deposition,
    /// Resigns in the background unless a resign was answered.
    withdraw: Option<Withdraw>,
}

impl Leadership {
    pub(super) fn new(
        names: Arc<ElectionNames>,
        id: String,
        term: u64,
        session: OwnershipLost,
        withdraw: Withdraw,
    ) -> Self {
        Leadership {
            deposition: Deposition::watch(Arc::clone(&names), term, session),
            names,
            id,
            term,
            withdraw: Some(withdraw),
        }
    }

    /// The term: the fencing token of this leadership.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The signal that fires when the leadership ends: its session ended, or another term
    /// leads.
    pub fn ownership(&self) -> OwnershipLost {
        self.deposition.ownership()
    }

    /// Whether the leadership is known lost (its session, or a deposition).
    pub fn is_lost(&self) -> bool {
        self.deposition.is_lost()
    }

    /// Gives the election a new value (what [`Election::leader`](super::Election::leader)
    /// and observers read), if this term still leads: `Ok(false)` otherwise, nothing
    /// changed. A value over [`MAX_VALUE_LEN`] fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) before anything is
    /// sent.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after it was sent, the value may or may not be set.
    pub async fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<bool> {
        let value = value.as_ref();
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::invalid_argument(format!(
                "an election's value is at most {MAX_VALUE_LEN} bytes, not {}",
                value.len()
            )));
        }
        if self.is_lost() {
            return Ok(false);
        }
        self.names
            .backend()
            .run(ProclaimStep {
                keys: self.names.keys(),
                id: &self.id,
                term: self.term,
                value,
            })
            .await
    }

    /// Whether this term still leads, asked of the backend (`false` without asking once
    /// the session is known lost): a point-in-time answer; the term fences what follows.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_leader(&self) -> Result<bool> {
        if self.is_lost() {
            return Ok(false);
        }
        let leading = self
            .names
            .backend()
            .run_idempotent(LeaderStep {
                keys: self.names.keys(),
            })
            .await?;
        Ok(matches!(leading, Leading::Other { term, .. } if term == self.term) && !self.is_lost())
    }

    /// Leaves the election: the first live candidate leads at once, with the next term (or
    /// nobody). `Ok(true)` when this term still led. Repeat-safe on the backend: a resign
    /// whose answer is lost on the way (a failover, a connection cut) is sent again within
    /// the backend's `transient_retry`, and answers `Ok(false)` when the delivery that
    /// resigned was the lost one. A resign that fails goes on in the background (retried
    /// for up to a minute), and until it lands the term still fences.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropped before it was answered, the resign goes on in the
    /// background.
    pub async fn resign(mut self) -> Result<bool> {
        // Told first: the resign's own write must not read as a deposition.
        self.deposition.end();
        let led = self
            .names
            .backend()
            .run_idempotent(ResignStep {
                keys: self.names.keys(),
                id: &self.id,
            })
            .await?;
        if let Some(withdraw) = self.withdraw.take() {
            withdraw.resigned();
        }
        Ok(led)
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &format_args!("{}", self.names))
            .field("term", &self.term)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}
