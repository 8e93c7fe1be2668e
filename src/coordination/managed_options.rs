//! How every managed holding is kept: one options type for every
//! [`Managed`](super::Managed) handle (a lease, a permit, a read-write or field lease, a
//! session, a Redlock lease).

use std::time::Duration;

use super::owner::KeepOptions;
use crate::error::{Error, Result};

/// How often a waiting acquisition tries again where it cannot wait for invalidations,
/// unless [`ManagedOptions::poll_interval`] says otherwise.
pub(crate) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The shortest lease a managed holding keeps (renewed every 50 ms).
///
/// Wider than the common 1 s to 5 min of peer lockers on both sides, on purpose: below a
/// second for tests and for local work whose takeover must be quick (a lease of 100 ms
/// costs 20 renewals a second per holding, which is why it goes no lower); above five
/// minutes for holders that may pause that long (see [`MAX_MANAGED_LEASE`]).
pub const MIN_MANAGED_LEASE: Duration = Duration::from_millis(100);
/// The longest lease a managed holding keeps: a crashed holder keeps its lease or its
/// permit this long. An hour, not five minutes, so that a process paused longer than five
/// minutes (a VM migration, a debugger, a full garbage collection of a neighbour) can keep
/// what it holds if its owner chose so; the price is that a crash keeps it as long.
pub const MAX_MANAGED_LEASE: Duration = Duration::from_secs(3600);

/// How a managed holding (every [`Managed`](super::Managed) handle) is kept: the lease asked of the backend
/// on each renewal (renewed at half of it), whether dropping the handle releases it, a
/// lifetime limit for work that outlives its handle, and how often a waiting acquisition
/// tries again where it cannot wait for invalidations.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::coordination::ManagedOptions;
///
/// let options = ManagedOptions::new()
///     .lease(Duration::from_secs(10))
///     // Work handed to the background keeps its holding after its handle is dropped,
///     // for at most five minutes in all.
///     .release_on_drop(false)
///     .max_lifetime(Some(Duration::from_secs(300)));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagedOptions {
    keep: KeepOptions,
    poll_interval: Duration,
}

impl ManagedOptions {
    /// A 30-second lease, renewed every 15 seconds, released when the handle is dropped, with
    /// no lifetime limit, polling every 50 ms where waiting cannot use invalidations.
    pub fn new() -> Self {
        ManagedOptions {
            keep: KeepOptions {
                lease: Duration::from_secs(30),
                release_on_drop: true,
                max_lifetime: None,
                hold_limit: None,
            },
            poll_interval: DEFAULT_POLL_INTERVAL,
        }
    }

    /// The lease asked of the backend on acquisition and on each renewal, renewed at half of
    /// it; from [`MIN_MANAGED_LEASE`] to [`MAX_MANAGED_LEASE`] (the constants say why the
    /// range is wider than the usual 1 s to 5 min). Default 30 s.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.keep.lease = lease;
        self
    }

    /// Whether dropping the handle releases the holding (the default). Without it, a dropped
    /// handle leaves the holding renewing on its own until ownership is lost or the
    /// [lifetime limit](Self::max_lifetime) is reached: for work that outlives the code that
    /// acquired it, which keeps an
    /// [`OwnershipLost`](super::ownership::OwnershipLost) to know when to stop.
    pub fn release_on_drop(mut self, release: bool) -> Self {
        self.keep.release_on_drop = release;
        self
    }

    /// The longest a holding kept after its handle is dropped is kept in all, from when the
    /// keeper took it; then
    /// [`OwnershipLost`](super::ownership::OwnershipLost) fires with
    /// [`LossReason::LifetimeLimit`](super::ownership::LossReason::LifetimeLimit) and, after
    /// that, the holding is released. At least a millisecond, and only with
    /// [`release_on_drop(false)`](Self::release_on_drop): a holding released with its handle
    /// needs no limit, and the combination is refused. Default: no limit. A holding
    /// detached from its handle (`detach`) leaves its keeper, and the limit with it.
    pub fn max_lifetime(mut self, limit: Option<Duration>) -> Self {
        self.keep.max_lifetime = limit;
        self
    }

    /// How often a waiting acquisition tries again where it cannot wait for invalidations
    /// (the memory backend), with up to a tenth of random jitter; from 1 ms to 1 s.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The longest the crate itself keeps a holding released with its handle (see
    /// `KeepOptions::hold_limit`): for the concurrency layer's longest hold.
    pub(crate) fn hold_limit(mut self, limit: Option<Duration>) -> Self {
        self.keep.hold_limit = limit;
        self
    }

    /// How the keeper keeps the holding.
    pub(crate) fn keep(&self) -> KeepOptions {
        self.keep
    }

    /// The lease asked of the backend.
    pub(crate) fn lease_duration(&self) -> Duration {
        self.keep.lease
    }

    /// Whether the holding outlives its handle with no end: not released with it, and no
    /// lifetime limit. Right for a job that stops itself when told ownership is lost; never
    /// for a holding taken per request, which would pile up renewing forever.
    pub(crate) fn renews_forever_once_dropped(&self) -> bool {
        !self.keep.release_on_drop && self.keep.max_lifetime.is_none()
    }

    /// The pause between the attempts of a waiting acquisition without invalidations.
    pub(crate) fn poll(&self) -> Duration {
        self.poll_interval
    }

    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// value out of its range, or a lifetime limit on a holding released with its handle.
    pub(crate) fn validate(&self) -> Result<()> {
        let lease = self.keep.lease;
        if !(MIN_MANAGED_LEASE..=MAX_MANAGED_LEASE).contains(&lease) {
            return Err(Error::invalid_argument(format!(
                "a managed lease must be between {MIN_MANAGED_LEASE:?} and {MAX_MANAGED_LEASE:?}, not {lease:?}"
            )));
        }
        self.keep.validate()?;
        if !(Duration::from_millis(1)..=Duration::from_secs(1)).contains(&self.poll_interval) {
            return Err(Error::invalid_argument(format!(
                "a poll interval must be between 1 ms and 1 s, not {:?}",
                self.poll_interval
            )));
        }
        Ok(())
    }
}

impl Default for ManagedOptions {
    fn default() -> Self {
        ManagedOptions::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn values_out_of_range_are_refused() {
        assert!(ManagedOptions::new().validate().is_ok());
        for bound in [MIN_MANAGED_LEASE, MAX_MANAGED_LEASE] {
            assert!(ManagedOptions::new().lease(bound).validate().is_ok());
        }
        for invalid in [
            ManagedOptions::new().lease(MIN_MANAGED_LEASE - Duration::from_millis(1)),
            ManagedOptions::new().lease(MAX_MANAGED_LEASE + Duration::from_millis(1)),
            ManagedOptions::new().poll_interval(Duration::ZERO),
            ManagedOptions::new().poll_interval(Duration::from_millis(1_001)),
        ] {
            let err = invalid.validate().expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{invalid:?}");
        }
    }
}
