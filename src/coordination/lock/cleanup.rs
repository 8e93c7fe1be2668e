//! What the shared holding needs from a lock: how it renews, verifies and releases a lease,
//! and the words and the counter for the releases it gives up.

use super::abandoned::ABANDONED;
use super::keys::LockKeys;
use crate::backend::steps::fenced_lock::LeaseReleaseReply;
use crate::coordination::owner::{HoldingKeys, OwnerRelease};
use crate::coordination::ownership::AbandonedCounters;
use crate::error::{Error, Result};

impl OwnerRelease for LockKeys {
    type Reply = LeaseReleaseReply;
    const WHAT: &'static str = "fenced lease";
    const LEFT_HELD: &'static str = "it blocks the lock until it expires";

    fn abandoned(&self) -> &'static AbandonedCounters {
        &ABANDONED
    }

    fn release_owned(&self, token: &str) -> impl Future<Output = Result<LeaseReleaseReply>> + Send {
        self.release(token)
    }
}

impl HoldingKeys for LockKeys {
    async fn renew_owned(&self, token: &str, expiry_ms: Option<u64>) -> Result<bool> {
        // A lease always expires: the lock never asks for a renewal without one.
        let lease_ms =
            expiry_ms.ok_or_else(|| Error::invalid_argument("a fenced lease needs an expiry"))?;
        self.renew(token, lease_ms).await
    }

    fn verify_owned(&self, token: &str) -> impl Future<Output = Result<bool>> + Send {
        self.verify(token)
    }
}
