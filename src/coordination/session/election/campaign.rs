//! An election: campaigns and the leader.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::names::ElectionNames;
use super::withdraw::Withdraw;
use super::{Leader, Leadership, Observer};
use crate::backend::delivery::Delivery;
use crate::backend::steps::election::{CampaignReply, CampaignStep, LeaderStep, Leading};
use crate::coordination::owner::{acquire_waiting, new_token};
use crate::coordination::session::{MAX_VALUE_LEN, ManagedSession, Sessions};
use crate::coordination::{Attempt, DEFAULT_POLL_INTERVAL};
use crate::error::{Error, ErrorKind, Result};

/// A leader election among the sessions of one [`Sessions`] space, in the shape of etcd's
/// `Election`: [`campaign`](Self::campaign) waits until the candidate leads,
/// [`Leadership::proclaim`] sets the leader's value, [`leader`](Self::leader) reads it,
/// [`observe`](Self::observe) follows the leadership (the gaps with no leader included),
/// and [`Leadership::resign`] hands it on. Candidates lead in the order they began to
/// campaign; a leader leads while its session lives, and the next one's term (a fencing
/// token) is greater than every earlier one's. Cheap to clone; nothing is sent until a step
/// is asked.
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
/// let session = ManagedSession::grant(&sessions, &ManagedOptions::new()).await?;
/// let leadership = election.campaign(&session, "10.0.0.1").await?;
/// let mut lost = leadership.ownership();
/// tokio::select! {
///     () = async { /* lead, sending leadership.term() with every write */ } => {}
///     reason = lost.lost() => println!("no longer leading: {reason}"),
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    names: Arc<ElectionNames>,
}

impl Election {
    /// The election named `name` (any bytes, bounded as names are) among the sessions of
    /// `sessions`, whose slot it shares. Nothing is sent.
    pub fn named(sessions: &Sessions, name: impl AsRef<[u8]>) -> Self {
        Election {
            names: Arc::new(ElectionNames::new(
                Arc::clone(sessions.names()),
                name.as_ref(),
            )),
        }
    }

    /// Campaigns with `session` (a session of this election's space) and `value`, waiting
    /// until it leads. Candidates lead in the order they began; while another leads, the
    /// campaign waits for a change to the election or for the leader's lease to run out,
    /// and then promotes the first live candidate. Bound the wait with
    /// `tokio::time::timeout`.
    ///
    /// Fails with [`ErrorKind::NotHeld`] as soon as the session is lost (its signal fires),
    /// with [`ErrorKind::InvalidArgument`] for a session of another space or a value over
    /// [`MAX_VALUE_LEN`], and with the backend's error when a step fails. A campaign that
    /// fails, or is dropped, takes its candidate out in the background once any step still
    /// on its way can no longer land: it leaves nothing that could lead later.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops campaigning and withdraws the candidate in
    /// the background.
    pub async fn campaign(
        &self,
        session: &ManagedSession,
        value: impl AsRef<[u8]>,
    ) -> Result<Leadership> {
        let value = value.as_ref();
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::invalid_argument(format!(
                "an election's value is at most {MAX_VALUE_LEN} bytes, not {}",
                value.len()
            )));
        }
        if !self.names.in_space(session.names()) {
            return Err(Error::invalid_argument(
                "a campaign needs a session of its election's space",
            ));
        }
        let mut lost = session.ownership();
        if lost.is_lost() {
            return Err(not_held());
        }
        // The session's lease id and the campaign's own: a late withdrawal of this campaign
        // can never end another of the same session.
        let candidate = format!("{}{}", session.id(), new_token()?);
        let id = candidate.as_str();
        let withdraw = Withdraw::arm(&self.names, id);
        let backend = self.names.backend();
        let watched = self.names.watched();
        let won = tokio::select! {
            biased;
            _ = lost.lost() => Err(not_held()),
            won = acquire_waiting(backend, &watched, DEFAULT_POLL_INTERVAL, || {
                self.try_lead(id, value, &withdraw)
            }) => won,
        };
        let term = won?;
        if lost.is_lost() {
            return Err(not_held());
        }
        tracing::debug!(election = %self.names, term, "elected");
        Ok(Leadership::new(
            Arc::clone(&self.names),
            candidate,
            term,
            session.ownership(),
            withdraw,
        ))
    }

    /// One campaign step: the term when `id` leads, or when to try again.
    async fn try_lead(&self, id: &str, value: &[u8], withdraw: &Withdraw) -> Result<Attempt<u64>> {
        let backend = self.names.backend();
        let deadline = backend.acquire_deadline().await?;
        withdraw.sending(deadline);
        // A campaign step counts once however often it is delivered (its candidate enters
        // once, keeps its arrival, and a promotion found again is the same term): one lost
        // on the way (a failover, a connection cut) is sent again, with the same deadline.
        let reply = backend
            .run_idempotent(CampaignStep {
                keys: self.names.keys(),
                id,
                value,
                not_after_ms: deadline.map_or(0, |deadline| deadline.server_ms),
            })
            .await?;
        Ok(match reply {
            CampaignReply::Leading(Leading::This { term, .. }) => Attempt::Acquired(term),
            CampaignReply::Leading(Leading::Other { ttl_ms, .. }) => Attempt::Busy {
                retry_after: Some(Duration::from_millis(ttl_ms)),
            },
            CampaignReply::Leading(Leading::Nobody) => Attempt::Busy {
                retry_after: Some(Duration::ZERO),
            },
            CampaignReply::NoLease => return Err(not_held()),
            CampaignReply::Late => {
                // Nothing changed; the server's clock is read again meanwhile.
                backend.deadline_missed();
                Attempt::Busy {
                    retry_after: Some(DEFAULT_POLL_INTERVAL),
                }
            }
        })
    }

    /// The leader now, `None` when nobody leads (the leader's lease ran out and no
    /// candidate has stepped up yet, or no candidate is left).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let leading = self
            .names
            .backend()
            .run_idempotent(LeaderStep {
                keys: self.names.keys(),
            })
            .await?;
        Ok(Leader::from_leading(leading))
    }

    /// An observer of the leadership: each [`Observer::changed`] answers the leader (or
    /// `None`) once it differs from what the observer last answered.
    pub fn observe(&self) -> Observer {
        Observer::new(Arc::clone(&self.names))
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("leader_key", &format_args!("{}", self.names))
            .finish()
    }
}

fn not_held() -> Error {
    Error::new(
        ErrorKind::NotHeld,
        "the campaign's session is not held any more; its candidate is withdrawn",
    )
}
