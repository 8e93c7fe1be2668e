//! The semaphore steps, shared by both backends: permits held by owner token in one or two
//! sets (one slot), each set with the capacity its permits were taken under.
//!
//! A permit expires at an absolute time on the backend's clock (or never); expired permits
//! are pruned by the next step that touches their set. A set disappears with its last permit,
//! capacity included, and until then its storage lives exactly as long as its permits.

use crate::backend::Backend;
use crate::error::Result;

/// One acquisition of a permit in every set of `keys`, or in none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SemaphoreAcquireStep<'a> {
    /// The user keys of the sets (the backend applies its prefix), one or two, in one slot.
    pub(crate) keys: &'a [Vec<u8>],
    /// The capacity each set must have, in the order of `keys`, each at least 1.
    pub(crate) capacities: &'a [u32],
    /// The new permit's owner token.
    pub(crate) token: &'a str,
    /// Whole milliseconds until the permit expires, at least 1; `None` for no expiry.
    pub(crate) expiry_ms: Option<u64>,
    /// The server time (ms since the epoch) after which the step is a no-op that answers
    /// [`SemaphoreAcquireReply::Late`]; 0 for none.
    pub(crate) not_after_ms: u64,
}

/// The acquisition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SemaphoreAcquireReply {
    /// The permit is held in every set.
    Granted,
    /// At least one set is full; nothing was taken. `retry_after_ms` is how long until
    /// expiries alone free a slot in every full set; `None` when a full set's permits never
    /// expire.
    Full { retry_after_ms: Option<u64> },
    /// The set at index `key` has live permits taken under capacity `stored`, which differs
    /// from the one asked for; nothing was taken.
    CapacityMismatch { key: usize, stored: u32 },
    /// The step reached the server after its deadline; nothing changed.
    Late,
}

/// A step on an existing permit: its sets and its owner token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PermitStep<'a> {
    /// The user keys of the permit's sets.
    pub(crate) keys: &'a [Vec<u8>],
    /// The permit's owner token.
    pub(crate) token: &'a str,
}

impl Backend {
    /// Acquires a permit in every set of the step, or in none.
    pub(crate) async fn semaphore_acquire(
        &self,
        step: SemaphoreAcquireStep<'_>,
    ) -> Result<SemaphoreAcquireReply> {
        match self {
            // Boxed: the redis-rs futures are deeply nested types (see `fixed_window`).
            Backend::Redis(redis) => Box::pin(redis.semaphore_acquire(step)).await,
            Backend::Memory(memory) => memory.semaphore_acquire(step),
        }
    }

    /// Removes the permit from its sets: `true` when it was still held.
    pub(crate) async fn semaphore_release(&self, step: PermitStep<'_>) -> Result<bool> {
        match self {
            Backend::Redis(redis) => Box::pin(redis.semaphore_release(step)).await,
            Backend::Memory(memory) => memory.semaphore_release(step),
        }
    }

    /// Gives a held permit a new expiry (`None`: none): `true` when renewed, `false` when
    /// it was no longer held (it is then removed from every set).
    pub(crate) async fn semaphore_renew(
        &self,
        step: PermitStep<'_>,
        expiry_ms: Option<u64>,
    ) -> Result<bool> {
        match self {
            Backend::Redis(redis) => Box::pin(redis.semaphore_renew(step, expiry_ms)).await,
            Backend::Memory(memory) => memory.semaphore_renew(step, expiry_ms),
        }
    }

    /// Whether the permit is held in every set, after pruning expired permits.
    pub(crate) async fn semaphore_verify(&self, step: PermitStep<'_>) -> Result<bool> {
        match self {
            Backend::Redis(redis) => Box::pin(redis.semaphore_verify(step)).await,
            Backend::Memory(memory) => memory.semaphore_verify(step),
        }
    }

    /// The live permits of each set, in the order of `keys`; changes nothing.
    pub(crate) async fn semaphore_held(&self, keys: &[Vec<u8>]) -> Result<Vec<u32>> {
        match self {
            Backend::Redis(redis) => Box::pin(redis.semaphore_held(keys)).await,
            Backend::Memory(memory) => memory.semaphore_held(keys),
        }
    }
}
