//! Following an election's leadership.

use std::fmt;
use std::sync::Arc;

use super::Leader;
use super::names::ElectionNames;
use crate::backend::steps::election::LeaderStep;
use crate::coordination::owner::acquire_waiting;
use crate::coordination::{Attempt, DEFAULT_POLL_INTERVAL};
use crate::error::Result;

/// Follows an election's leadership (see
/// [`Election::observe`](super::Election::observe)): a change of leader, term or value,
/// or a gap with no leader, answered once, whenever what it reads differs from what it
/// last answered (changes that follow each other between two reads are answered as the
/// last of them).
///
/// It re-reads the leadership on every change Redis tells of (client tracking on the
/// leader's key), when the leader's lease would run out, and after any error (a reconnect
/// included), so it never goes quiet while the leadership moves; without notifications
/// (the memory backend) it reads every 50 ms.
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
/// let sessions = Sessions::named(&Coordination::memory(), "cluster");
/// let election = Election::named(&sessions, "primary");
/// let mut observer = election.observe();
/// assert_eq!(observer.changed().await?, None); // nobody leads yet
///
/// let session = ManagedSession::grant(&sessions, &ManagedOptions::new()).await?;
/// let leadership = election.campaign(&session, "10.0.0.1").await?;
/// let leader = observer.changed().await?.expect("a leader");
/// assert_eq!(leader.value(), b"10.0.0.1");
/// leadership.resign().await?;
/// assert_eq!(observer.changed().await?, None);
/// # Ok(()) }
/// ```
pub struct Observer {
    names: Arc<ElectionNames>,
    /// What the last `changed` answered; `None` before the first.
    seen: Option<Option<Leader>>,
}

impl Observer {
    pub(super) fn new(names: Arc<ElectionNames>) -> Self {
        Observer { names, seen: None }
    }

    /// The leadership, once it differs from what this observer last answered (at once, the
    /// first time): `Some` leader, or `None` when nobody leads. An error leaves the
    /// observer as it was: call again to go on.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, it has answered nothing and the next call goes on from the
    /// same point.
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        let backend = self.names.backend();
        let watched = self.names.watched();
        let (names, seen) = (&self.names, &self.seen);
        let now = acquire_waiting(backend, &watched, DEFAULT_POLL_INTERVAL, || async move {
            let leading = backend
                .run_idempotent(LeaderStep { keys: names.keys() })
                .await?;
            let now = Leader::from_leading(leading);
            let same = match (seen, &now) {
                (Some(Some(before)), Some(now)) => before.same(now),
                (Some(None), None) => true,
                _ => false,
            };
            Ok(if same {
                // Read again when the leader's lease would run out.
                Attempt::Busy {
                    retry_after: now.as_ref().map(Leader::time_to_live),
                }
            } else {
                Attempt::Acquired(now)
            })
        })
        .await?;
        self.seen = Some(now.clone());
        Ok(now)
    }
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("election", &format_args!("{}", self.names))
            .field("seen", &self.seen)
            .finish()
    }
}
