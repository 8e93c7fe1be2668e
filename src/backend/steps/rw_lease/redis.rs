//! The read-write lease steps on Redis: one Lua script each over one sorted set, sharing the
//! helpers of `rw_lease.lua`.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::rw_lease::{
    RwAcquireReply, RwAcquireStep, RwDowngradeReply, RwDowngradeStep, RwHeld, RwReleaseStep,
    RwRenewStep, RwStep, RwVerifyStep,
};
use crate::backend::steps::{RedisStep, fencing_counter};
use crate::error::Result;

static ACQUIRE: LazyLock<Script> = script!(
    writes,
    "rw_lease_acquire",
    "../key_kinds.lua",
    "../clock.lua",
    "rw_lease.lua",
    "../out_of_memory.lua",
    "../fencing_counter.lua",
    "../first_checks.lua",
    "rw_lease_acquire.lua"
);
static RENEW: LazyLock<Script> = script!(
    writes,
    "rw_lease_renew",
    "../clock.lua",
    "rw_lease.lua",
    "rw_lease_renew.lua"
);
static VERIFY: LazyLock<Script> = script!(
    read_only,
    "rw_lease_verify",
    "../clock.lua",
    "rw_lease.lua",
    "rw_lease_verify.lua"
);
static RELEASE: LazyLock<Script> = script!(
    writes,
    "rw_lease_release",
    "../clock.lua",
    "rw_lease.lua",
    "rw_lease_release.lua"
);
static DOWNGRADE: LazyLock<Script> = script!(
    writes,
    "rw_lease_downgrade",
    "../clock.lua",
    "rw_lease.lua",
    "rw_lease_downgrade.lua"
);

/// Takes a read or a write lease if the set lets it in.
impl RedisStep for RwAcquireStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<RwAcquireReply> {
        let mode = if self.write { "w" } else { "r" };
        let (waiter, waiting_ms) = self.waiting.unwrap_or(("", 1));
        let args = (
            mode,
            self.token,
            self.lease_ms,
            self.not_after_ms,
            waiter,
            waiting_ms,
        );
        // A reader names the set alone: the writers' counter may not exist yet, and a slot
        // that moves answers TRYAGAIN to a step whose keys are not all on one node.
        let both = [self.key, self.counter];
        let keys = if self.write { &both[..] } else { &both[..1] };
        let outcome = redis.script_outcome(&ACQUIRE, keys, args).await?;
        match (outcome.status(), outcome.len()) {
            (b"late", 0) => Ok(RwAcquireReply::Late),
            (b"granted", 0) if !self.write => Ok(RwAcquireReply::Granted {
                fencing_token: None,
            }),
            (b"granted", 1) if self.write => Ok(RwAcquireReply::Granted {
                fencing_token: Some(fencing_counter::token_from_digits(
                    outcome.bytes(0)?,
                    ACQUIRE.name(),
                )?),
            }),
            (b"busy", 1) => Ok(RwAcquireReply::Busy {
                retry_after_ms: outcome.uint(0)?,
            }),
            _ => Err(outcome.unexpected()),
        }
    }
}

/// Gives the token's lease a new deadline if it still holds one.
impl RedisStep for RwRenewStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let RwStep { key, token } = self.lease;
        redis
            .script_outcome(&RENEW, &[key], (token, self.lease_ms))
            .await?
            .flag(b"renewed", b"not_owner")
    }
}

/// What the token holds now.
impl RedisStep for RwVerifyStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<RwHeld> {
        let RwVerifyStep(RwStep { key, token }) = *self;
        let outcome = redis.script_outcome(&VERIFY, &[key], token).await?;
        match (outcome.status(), outcome.len()) {
            (b"not_held", 0) => Ok(RwHeld::Nothing),
            (b"held", 1) => match outcome.bytes(0)? {
                b"r" => Ok(RwHeld::Read),
                b"w" => Ok(RwHeld::Write),
                _ => Err(outcome.unexpected()),
            },
            _ => Err(outcome.unexpected()),
        }
    }
}

/// Removes the token's lease.
impl RedisStep for RwReleaseStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let RwReleaseStep(RwStep { key, token }) = *self;
        redis
            .script_outcome(&RELEASE, &[key], token)
            .await?
            .flag(b"released", b"no_lease")
    }
}

/// Turns the token's write lease into a read lease.
impl RedisStep for RwDowngradeStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<RwDowngradeReply> {
        let RwDowngradeStep(RwStep { key, token }) = *self;
        let outcome = redis.script_outcome(&DOWNGRADE, &[key], token).await?;
        match (outcome.status(), outcome.len()) {
            (b"downgraded", 0) => Ok(RwDowngradeReply::Downgraded),
            (b"already_read", 0) => Ok(RwDowngradeReply::AlreadyRead),
            (b"not_owner", 0) => Ok(RwDowngradeReply::NotHeld),
            _ => Err(outcome.unexpected()),
        }
    }
}
