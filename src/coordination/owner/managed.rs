//! What every managed holding shares, written once: the owner token, the keeper that renews
//! the holding and tells its loss, and the release asked of the keeper. The public managed
//! types wrap it and add what their primitive has (a fencing token, an access, a field).

use std::future::Future;

use super::{Detached, Holding, HoldingKeys, Keeper};
use crate::backend::steps::lease_release::LeaseReleaseReply;
use crate::coordination::ownership::OwnershipLost;
use crate::coordination::{ManagedOptions, Release};
use crate::error::Result;

/// What a primitive's release step answers, as the one [`Release`] every primitive gives.
pub(crate) trait ReleaseReply {
    /// The answer; `None` when nothing was sent (the holding was released already).
    fn into_release(found: Option<Self>) -> Release
    where
        Self: Sized;
}

/// An exclusive lease's release: released, none, or another holder's.
impl ReleaseReply for LeaseReleaseReply {
    fn into_release(found: Option<Self>) -> Release {
        Release::from_reply(found)
    }
}

/// A release that says whether it found its holder's entry.
impl ReleaseReply for bool {
    fn into_release(found: Option<Self>) -> Release {
        Release::from_found(found)
    }
}

/// A holding kept by a keeper: renewed, told lost, released on request.
pub(crate) struct Managed<K: HoldingKeys> {
    owner_token: String,
    keeper: Keeper<K>,
}

impl<K: HoldingKeys> Managed<K>
where
    K::Released: ReleaseReply,
{
    /// Keeps `holding` as `options` say. Fails for invalid options, or without a tokio
    /// runtime to run the keeper (then `holding` is dropped, which releases it).
    pub(crate) fn keep(holding: Holding<K>, options: &ManagedOptions) -> Result<Self> {
        options.validate()?;
        let owner_token = holding.token().to_owned();
        Ok(Managed {
            owner_token,
            keeper: Keeper::spawn(holding, options.keep())?,
        })
    }

    pub(crate) fn owner_token(&self) -> &str {
        &self.owner_token
    }

    pub(crate) fn ownership(&self) -> OwnershipLost {
        self.keeper.ownership()
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.keeper.ownership().is_lost()
    }

    /// Stops renewing (a renewal in flight answered first), lets go of the holding
    /// unreleased and fires the ownership signal as detached (see [`Keeper::detach`]):
    /// `None` when the keeper had already ended (lost, or released at its limit) or the
    /// holding is no longer held. Asked when first polled; dropped before it answers, what
    /// was let go of is released in the background.
    pub(crate) async fn detach(self) -> Option<Detached> {
        self.keeper.detach().await
    }

    /// Stops renewing, fires the ownership signal as released, then releases
    /// (owner-checked); asked of the keeper at once, so it goes on if the future is dropped.
    pub(crate) fn release(self) -> impl Future<Output = Result<Release>> + Send + use<K> {
        let released = self.keeper.release();
        async move {
            // The keeper ended before: the holding was lost, or released at its lifetime
            // limit.
            match released.await {
                Some(released) => released.map(K::Released::into_release),
                None => Ok(Release::AlreadyReleased),
            }
        }
    }
}
