//! What the connected server can do, learned once and shared by every primitive built from
//! one [`RedisBackend`](super::RedisBackend).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::UnsupportedFeature;

/// How long after a server rejected `INCREX` the fast path is tried again, so that a server
/// upgraded in place regains it without restarting the application. The fixed window's plain
/// commands, refused by an ACL, are tried again after as long.
pub const INCREX_REPROBE_AFTER: Duration = Duration::from_secs(5 * 60);

/// The `INCREX` command (Redis 8.8+, Valkey 9.2+).
pub const INCREX: UnsupportedFeature = UnsupportedFeature::new("INCREX", "Redis 8.8 or Valkey 9.2");

/// Hash field expiry (`HPEXPIRE`, `HPTTL`, …; Redis 7.4+, Valkey 9.0+), which the
/// [hash-field leases](crate::coordination::hash_lease) need.
pub const HASH_FIELD_EXPIRY: UnsupportedFeature =
    UnsupportedFeature::new("hash field expiry (HPEXPIRE)", "Redis 7.4 or Valkey 9.0");

/// Server capability state shared by every primitive built from one backend handle.
///
/// - **`INCREX`**: assumed available until a server rejects it; then every user of this
///   handle takes another path directly and the fast path is probed again only after
///   [`INCREX_REPROBE_AFTER`]. The clock is tokio's, so tests can pause and advance it.
/// - **The fixed window's plain commands** (`SET`, `INCR`, `PTTL` for a step of one permit):
///   the same, for an ACL that denies one of them; the step then goes through Lua.
/// - **Read-only scripts** (`EVALSHA_RO`): used until the server refuses them once (an ACL
///   that does not allow them), then never again by this handle.
///
/// # Example
///
/// ```
/// use leasehold::backend::redis::Capabilities;
///
/// let caps = Capabilities::default();
/// assert!(caps.should_try_increx());
/// # #[cfg(feature = "test-util")]
/// # {
/// caps.record_increx_rejected();
/// assert!(!caps.should_try_increx());
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Capabilities {
    increx: Reprobed,
    native_counting: Reprobed,
    read_only_scripts_refused: AtomicBool,
}

/// A way of running a step that a server may refuse (a command it lacks, or one its ACL
/// denies): tried until refused, then skipped by every user of the handle, and tried again
/// [`INCREX_REPROBE_AFTER`] after the refusal.
#[derive(Debug, Default)]
pub(crate) struct Reprobed {
    /// Whether `refused_at` holds a time: read without the lock by every step.
    refused: AtomicBool,
    refused_at: Mutex<Option<Instant>>,
    /// Whether a refusal was logged at INFO already: a server that never takes the way is
    /// said once, not at every re-probe.
    told: AtomicBool,
}

impl Reprobed {
    /// Whether a step should take this way now: never refused, or refused at least
    /// [`INCREX_REPROBE_AFTER`] ago.
    pub(crate) fn should_try(&self) -> bool {
        if !self.refused.load(Ordering::Acquire) {
            return true;
        }
        match *self.lock() {
            None => true,
            Some(refused_at) => refused_at.elapsed() >= INCREX_REPROBE_AFTER,
        }
    }

    /// Records that the server refused this way.
    pub(crate) fn refused(&self) {
        *self.lock() = Some(Instant::now());
        self.refused.store(true, Ordering::Release);
    }

    /// Whether this refusal is the first this handle tells (at INFO; the re-probes that meet
    /// it again are told at DEBUG).
    pub(crate) fn first_refusal(&self) -> bool {
        !self.told.swap(true, Ordering::Relaxed)
    }

    /// Records that the server took this way.
    pub(crate) fn accepted(&self) {
        if self.refused.load(Ordering::Acquire) {
            *self.lock() = None;
            self.refused.store(false, Ordering::Release);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // The guarded value is a plain timestamp: a panic elsewhere cannot leave it torn.
        self.refused_at
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Capabilities {
    /// Whether a step should send `INCREX` now: never rejected, or rejected at least
    /// [`INCREX_REPROBE_AFTER`] ago.
    pub fn should_try_increx(&self) -> bool {
        self.increx.should_try()
    }

    /// Records that the server answered `INCREX` with "unknown command" (or an ACL denied
    /// it). Public as a test hook (feature `test-util`): the fixed window then skips `INCREX`,
    /// sending a step of one permit as `SET`, `INCR` and `PTTL` (not on a Cluster) and any
    /// other through Lua.
    #[cfg(feature = "test-util")]
    pub fn record_increx_rejected(&self) {
        self.increx.refused();
    }

    /// The `INCREX` fast path of the fixed window (Redis 8.8+, Valkey 9.2+).
    pub(crate) fn increx(&self) -> &Reprobed {
        &self.increx
    }

    /// The fixed window's step of one permit as plain commands (`SET`, `INCR`, `PTTL`), which
    /// only an ACL refuses.
    pub(crate) fn native_counting(&self) -> &Reprobed {
        &self.native_counting
    }

    /// Whether read-only scripts may go as `EVALSHA_RO`: until the server refused it once (an
    /// ACL allow-list written without it), for the life of the handle.
    pub(crate) fn read_only_scripts(&self) -> bool {
        !self.read_only_scripts_refused.load(Ordering::Relaxed)
    }

    /// Records that the server refused `EVALSHA_RO`.
    pub(crate) fn record_read_only_scripts_refused(&self) {
        self.read_only_scripts_refused
            .store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn increx_is_reprobed_after_five_minutes() {
        let caps = Capabilities::default();
        for way in [caps.increx(), caps.native_counting()] {
            assert!(way.should_try());
            way.refused();
            assert!(!way.should_try());
            tokio::time::advance(INCREX_REPROBE_AFTER - Duration::from_millis(1)).await;
            assert!(!way.should_try());
            tokio::time::advance(Duration::from_millis(1)).await;
            assert!(way.should_try());
            way.accepted();
            assert!(way.should_try());
            // Refused again on the re-probe: skipped for another period.
            way.refused();
            assert!(!way.should_try());
            way.accepted();
        }
        assert!(caps.should_try_increx());
    }
}
