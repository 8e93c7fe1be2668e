//! The semaphore steps on Redis: one Lua script each over one or two sorted sets, sharing the
//! helpers of `semaphore.lua`.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::semaphore::{
    PermitReleaseStep, PermitRenewStep, PermitVerifyStep, SemaphoreAcquireReply,
    SemaphoreAcquireStep, SemaphoreHeldStep,
};
use crate::error::Result;

static ACQUIRE: LazyLock<Script> = script!(
    writes,
    "semaphore_acquire",
    "../clock.lua",
    "semaphore.lua",
    "../out_of_memory.lua",
    "semaphore_acquire.lua"
);
static RELEASE: LazyLock<Script> = script!(
    writes,
    "semaphore_release",
    "../clock.lua",
    "semaphore.lua",
    "semaphore_release.lua"
);
static RENEW: LazyLock<Script> = script!(
    writes,
    "semaphore_renew",
    "../clock.lua",
    "semaphore.lua",
    "semaphore_renew.lua"
);
// Not read-only: it prunes expired permits.
static VERIFY: LazyLock<Script> = script!(
    writes,
    "semaphore_verify",
    "../clock.lua",
    "semaphore.lua",
    "semaphore_verify.lua"
);
static HELD: LazyLock<Script> = script!(
    read_only,
    "semaphore_held",
    "../clock.lua",
    "semaphore.lua",
    "semaphore_held.lua"
);

/// For a script that takes keys only.
const NO_ARGS: &[u32] = &[];

/// Acquires a permit in every set of the step, or in none.
impl RedisStep for SemaphoreAcquireStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<SemaphoreAcquireReply> {
        let args = (
            self.token,
            self.expiry_ms.unwrap_or(0),
            self.capacities,
            self.not_after_ms,
        );
        let outcome = redis.script_outcome(&ACQUIRE, self.keys, args).await?;
        match (outcome.status(), outcome.len()) {
            (b"granted", 0) => Ok(SemaphoreAcquireReply::Granted),
            (b"late", 0) => Ok(SemaphoreAcquireReply::Late),
            (b"full", 1) => Ok(SemaphoreAcquireReply::Full {
                retry_after_ms: outcome.optional(0)?,
            }),
            (b"capacity_mismatch", 2) => {
                let key = usize::try_from(outcome.int(0)?)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .filter(|&i| i < self.keys.len())
                    .ok_or_else(|| outcome.unexpected())?;
                let stored = u32::try_from(outcome.int(1)?).map_err(|_| outcome.unexpected())?;
                Ok(SemaphoreAcquireReply::CapacityMismatch { key, stored })
            }
            _ => Err(outcome.unexpected()),
        }
    }
}

/// Removes the permit from its sets: `true` when it was still held.
impl RedisStep for PermitReleaseStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let PermitReleaseStep(step) = self;
        redis
            .script_outcome(&RELEASE, step.keys, step.token)
            .await?
            .flag(b"released", b"not_held")
    }
}

/// Gives a held permit a new expiry: `true` when renewed, `false` when it was lost.
impl RedisStep for PermitRenewStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let step = self.permit;
        redis
            .script_outcome(&RENEW, step.keys, (step.token, self.expiry_ms.unwrap_or(0)))
            .await?
            .flag(b"renewed", b"lost")
    }
}

/// Whether the permit is held in every set, after pruning.
impl RedisStep for PermitVerifyStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let PermitVerifyStep(step) = self;
        redis
            .script_outcome(&VERIFY, step.keys, step.token)
            .await?
            .flag(b"held", b"not_held")
    }
}

/// The live permits of each set.
impl RedisStep for SemaphoreHeldStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<Vec<u32>> {
        let keys = self.keys;
        let outcome = redis.script_outcome(&HELD, keys, NO_ARGS).await?;
        if outcome.status() != b"live" || outcome.len() != keys.len() {
            return Err(outcome.unexpected());
        }
        (0..keys.len())
            .map(|i| u32::try_from(outcome.int(i)?).map_err(|_| outcome.unexpected()))
            .collect()
    }
}
