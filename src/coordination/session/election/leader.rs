//! Who leads, as observers see it.

use std::time::Duration;

use crate::backend::steps::election::Leading;

/// The leader of an election as it stands: its term and the value it proclaimed (never its
/// lease id, which is its credential).
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
/// let sessions = Sessions::named(&Coordination::memory(), "scheduler");
/// let election = Election::named(&sessions, "leader");
/// let options = ManagedOptions::new().lease(Duration::from_secs(5));
/// let session = ManagedSession::grant(&sessions, &options).await?;
/// let leadership = election.campaign(&session, "node-a").await?;
/// let leader = election.leader().await?.expect("led");
/// assert_eq!(leader.value(), b"node-a");
/// assert_eq!(leader.term(), leadership.term());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    term: u64,
    value: Vec<u8>,
    time_to_live: Duration,
}

impl Leader {
    pub(super) fn from_leading(leading: Leading) -> Option<Leader> {
        match leading {
            Leading::This {
                term,
                value,
                ttl_ms,
            }
            | Leading::Other {
                term,
                value,
                ttl_ms,
            } => Some(Leader {
                term,
                value,
                time_to_live: Duration::from_millis(ttl_ms),
            }),
            Leading::Nobody => None,
        }
    }

    /// The term: a fencing token, greater than every earlier term's (see
    /// [`Leadership::term`](super::Leadership::term)).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The value the leader campaigned with, or proclaimed since.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// What the leader's lease had left when this was read: the longest it leads unless it
    /// keeps its session alive.
    pub fn time_to_live(&self) -> Duration {
        self.time_to_live
    }

    /// Whether `other` is the same leadership (term and value), whatever time each had left.
    pub(super) fn same(&self, other: &Leader) -> bool {
        self.term == other.term && self.value == other.value
    }
}
