//! What the shared release of owner tokens needs from a lock: how it releases a lease, and
//! the words and the counter for the releases it gives up.

use std::sync::atomic::AtomicU64;

use super::abandoned::ABANDONED;
use super::keys::LockKeys;
use crate::backend::fenced_lock::LeaseReleaseReply;
use crate::coordination::owner::OwnerRelease;
use crate::error::Result;

impl OwnerRelease for LockKeys {
    type Reply = LeaseReleaseReply;
    const WHAT: &'static str = "fenced lease";
    const LEFT_HELD: &'static str = "it blocks the lock until it expires";

    fn abandoned(&self) -> &'static AtomicU64 {
        &ABANDONED
    }

    fn release_owned(&self, token: &str) -> impl Future<Output = Result<LeaseReleaseReply>> + Send {
        self.release(token)
    }
}
