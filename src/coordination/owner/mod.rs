//! What the semaphore and the fenced lock share about owners: random owner tokens, and the
//! release of what a token holds once its holder can no longer wait for it (bounded attempts,
//! background retries, and a count of the releases given up).
//!
//! Every release here is owner-checked, so a late one can never remove another holder's lease
//! or permit: at worst it finds it gone or owned by someone else.

mod acquisition;
mod backoff;
mod guard;
mod holding;
mod keeper;
mod outcome;
mod release;
mod token;

use std::fmt;

pub(crate) use crate::coordination::ownership::ReleaseStage;
pub(crate) use acquisition::{Sent, arrived_after_its_deadline, send_acquisition};
pub(crate) use guard::ReleaseOnDrop;
pub(crate) use holding::{Holding, HoldingKeys};
pub(crate) use keeper::{KeepOptions, Keeper, Renewable};
pub(crate) use outcome::{arrived_late, had_no_effect};
pub(crate) use release::{
    release_bounded, release_in_background, release_in_background_after, worth_retrying,
};
pub(crate) use token::new_token;

use crate::coordination::ownership::AbandonedCounters;
use crate::error::Result;

/// Where owner-checked holdings live on a backend (a lock's keys, a semaphore's sets), with
/// what the shared release needs to know about them. Its `Display` names them in logs.
pub(crate) trait OwnerRelease: fmt::Display + Send + Sync + 'static {
    /// What a release found, logged when a background release succeeds.
    type Reply: fmt::Debug + Send;
    /// What a token holds, in log and error messages ("a {WHAT}").
    const WHAT: &'static str;
    /// What a release given up leaves behind, for its warning.
    const LEFT_HELD: &'static str;

    /// The counters of releases given up, which the primitive exports as its own metric.
    /// Asked of a value rather than of the type so that a test double can count on its own.
    fn abandoned(&self) -> &'static AbandonedCounters;

    /// Releases what `token` holds, and nothing another token holds.
    fn release_owned(&self, token: &str) -> impl Future<Output = Result<Self::Reply>> + Send;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Coordination;
    use crate::coordination::{lock, semaphore};

    /// A lease and a permit dropped outside any runtime cannot be released: each give-up
    /// counts for its own primitive alone.
    #[test]
    fn each_primitive_counts_its_own_give_ups() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let coordination = Coordination::memory();
        let lock = lock::FencedLock::named(&coordination, "lock");
        let semaphore = semaphore::Semaphore::new(&coordination, "semaphore", 1).expect("valid");
        let (lease, permit) = runtime.block_on(async {
            let lease = lock
                .try_acquire(Duration::from_secs(60))
                .await
                .expect("try");
            let permit = semaphore.try_acquire(None).await.expect("try");
            (
                lease.into_lease().expect("free"),
                permit.into_permit().expect("free"),
            )
        });
        drop(runtime);
        let counts = || (lock::abandoned_releases(), semaphore::abandoned_releases());
        let (leases, permits) = counts();
        drop(lease);
        assert_eq!(counts(), (leases + 1, permits));
        drop(permit);
        assert_eq!(counts(), (leases + 1, permits + 1));
    }
}
