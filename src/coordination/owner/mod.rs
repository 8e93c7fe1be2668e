//! The kit every held primitive stands on: its public handles ([`Held`], [`Managed`]), the
//! holding under them, the keys trait a primitive implements ([`HoldingKeys`]), the
//! acquisition, the keeper, random owner tokens, and the release of what a token holds once
//! its holder can no longer wait for it (bounded attempts, background retries, and a count
//! of the releases given up).
//!
//! Every release here is owner-checked, so a late one can never remove another holder's lease
//! or permit: at worst it finds it gone or owned by someone else.

mod acquisition;
mod by_owner;
mod detached;
mod guard;
mod held;
mod holding;
mod holding_keys;
mod keeper;
mod lease;
mod managed;
mod release;
mod token;
mod wait;

pub(crate) use crate::coordination::ownership::ReleaseStage;
pub(crate) use acquisition::{Acquire, Acquisition, try_acquire};
pub use by_owner::ByOwner;
pub use detached::Detached;
pub(crate) use guard::ReleaseOnDrop;
pub(crate) use held::OwnPart;
pub(crate) use held::sealed::Sealed;
pub use held::{Held, HeldKind};
pub(crate) use holding::Holding;
pub(crate) use holding_keys::{HoldingKeys, Renewed};
pub(crate) use keeper::{KeepOptions, Keeper};
pub(crate) use lease::{expiry_ms, lease_expiry};
pub use managed::Acquirable;
pub use managed::Managed;
pub(crate) use release::{
    forget_in_background, release_bounded, release_in_background, release_in_background_after,
    worth_retrying,
};
pub use token::OwnerToken;
pub(crate) use token::{new_token, shown as shown_token};
pub(crate) use wait::{acquire_waiting, jittered, register, wait_for_change};

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
            let permit = semaphore
                .try_acquire(Duration::from_secs(60))
                .await
                .expect("try");
            (
                lease.acquired().expect("free"),
                permit.acquired().expect("free"),
            )
        });
        drop(runtime);
        let counts = || {
            use crate::coordination::ownership::{Primitive, abandoned_releases};
            let counts = abandoned_releases();
            (
                counts.of(Primitive::FencedLease),
                counts.of(Primitive::SemaphorePermit),
            )
        };
        let (leases, permits) = counts();
        drop(lease);
        assert_eq!(counts(), (leases + 1, permits));
        drop(permit);
        assert_eq!(counts(), (leases + 1, permits + 1));
    }
}
