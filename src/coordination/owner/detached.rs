//! A holding its handle let go of without releasing it: what another owner needs to go on.

use std::time::Duration;

use super::OwnerToken;

/// A lease or permit whose handle let go of it without releasing it (every handle's
/// `detach`): it stays held on the backend until it expires or is released by its owner
/// token, from this process or any other, through
/// [`ByOwner`](crate::coordination::ByOwner). Nothing renews it any more.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::Release;
/// use leasehold::coordination::hash_lease::LeaseHash;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let coordination = Coordination::memory();
/// let sessions = LeaseHash::named(&coordination, "user:7:sessions");
/// let lease = sessions.try_acquire("phone", Duration::from_secs(30)).await?;
/// let lease = lease.acquired().expect("free");
///
/// // The request ends; the session goes on, and its token goes to the client.
/// let detached = lease.detach().await.expect("still held");
/// assert!(detached.remaining_estimate() <= Duration::from_secs(30));
/// let token = detached.owner_token().to_string();
///
/// // A later request, on any replica: the token renews and ends the session.
/// let session = sessions.by_owner("phone", token.parse()?);
/// assert!(session.renew(Duration::from_secs(30)).await?);
/// assert_eq!(session.release().await?, Release::Released);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Detached {
    owner_token: OwnerToken,
    expiry: Option<Duration>,
    remaining: Option<Duration>,
    renewal_cap: Option<Duration>,
    fencing_token: Option<u64>,
}

impl Detached {
    pub(crate) fn new(
        owner_token: OwnerToken,
        expiry: Option<Duration>,
        remaining: Option<Duration>,
        renewal_cap: Option<Duration>,
    ) -> Detached {
        Detached {
            owner_token,
            expiry,
            remaining,
            renewal_cap,
            fencing_token: None,
        }
    }

    /// The same, with the fencing token of what it holds.
    pub(crate) fn with_fencing_token(mut self, fencing_token: Option<u64>) -> Detached {
        self.fencing_token = fencing_token;
        self
    }

    /// The owner token that renews, verifies and releases it.
    pub fn owner_token(&self) -> &OwnerToken {
        &self.owner_token
    }

    /// The owner token, by value.
    pub fn into_owner_token(self) -> OwnerToken {
        self.owner_token
    }

    /// The expiry asked at acquisition or at the last renewal the handle saw answered.
    pub fn expiry(&self) -> Duration {
        self.expiry.unwrap_or_default()
    }

    /// The fencing token of what it holds (a lock's lease, a Redlock lease, a write lease),
    /// unchanged by renewals: send it with every protected write, as the handle's holder
    /// did. `None` for what has none.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// The shortest expiry a renewal sent by the handle asked for without an answer, if one
    /// was: it may still arrive, at any time, and set the expiry to its arrival plus this.
    /// Whoever goes on with the holding should count on no more than this after any renewal
    /// of its own. `None`: every renewal the handle sent was answered.
    pub fn renewal_cap(&self) -> Option<Duration> {
        self.renewal_cap
    }

    /// The handle's conservative estimate of what the holding had left when it let go of
    /// it (measured from before the request that set its expiry was sent, so never later
    /// than the backend's expiry). Count from the
    /// moment `detach` returned.
    pub fn remaining_estimate(&self) -> Duration {
        self.remaining.unwrap_or_default()
    }
}
