//! The fenced lock steps on Redis: one Lua script each, sharing the helpers of
//! `fenced_lock.lua`.

use std::sync::LazyLock;

use crate::backend::redis::{Confirmation, RedisBackend, Script, script};
use crate::backend::steps::fenced_lock::{
    FencedAcquireReply, FencedAcquireStep, LeaseReleaseReply, LeaseReleaseStep, LeaseRenewStep,
    LeaseStep, LeaseVerifyStep,
};
use crate::backend::steps::{RedisStep, fencing_counter};
use crate::error::Result;

static ACQUIRE: LazyLock<Script> = script!(
    writes,
    "fenced_lock_acquire",
    "../key_kinds.lua",
    "../clock.lua",
    "fenced_lock.lua",
    "../fencing_counter.lua",
    "fenced_lock_acquire.lua"
);
static RENEW: LazyLock<Script> = script!(
    writes,
    "fenced_lock_renew",
    "../key_kinds.lua",
    "fenced_lock.lua",
    "fenced_lock_renew.lua"
);
static RELEASE: LazyLock<Script> = script!(
    writes,
    "fenced_lock_release",
    "../key_kinds.lua",
    "fenced_lock.lua",
    "fenced_lock_release.lua"
);
static VERIFY: LazyLock<Script> = script!(
    read_only,
    "fenced_lock_verify",
    "../key_kinds.lua",
    "fenced_lock.lua",
    "fenced_lock_verify.lua"
);

/// Takes the lease and the next fencing token if no lease exists.
impl RedisStep for FencedAcquireStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<FencedAcquireReply> {
        let keys = [self.lease_key, self.counter_key];
        let args = (self.token, self.lease_ms, self.not_after_ms);
        let (outcome, confirmation) = match self.replication {
            None => (
                redis.script_outcome(&ACQUIRE, &keys, args).await?,
                Confirmation::Confirmed,
            ),
            Some(replication) => {
                redis
                    .script_outcome_replicated(&ACQUIRE, &keys, args, replication)
                    .await?
            }
        };
        match (outcome.status(), outcome.len()) {
            (b"late", 0) => Ok(FencedAcquireReply::Late),
            (b"acquired", 1) => {
                let fencing_token =
                    fencing_counter::token_from_digits(outcome.bytes(0)?, ACQUIRE.name())?;
                Ok(match confirmation {
                    Confirmation::Confirmed => FencedAcquireReply::Acquired { fencing_token },
                    Confirmation::Short(short) => FencedAcquireReply::Unconfirmed {
                        fencing_token,
                        short,
                    },
                })
            }
            (b"held", 1) => Ok(FencedAcquireReply::Held {
                // -1: a lease without expiry, which only something else can have set.
                retry_after_ms: outcome.optional(0)?,
            }),
            _ => Err(outcome.unexpected()),
        }
    }
}

/// Gives the lease a new expiry if it is still held under the token.
impl RedisStep for LeaseRenewStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let LeaseStep { lease_key, token } = self.lease;
        redis
            .script_outcome(&RENEW, &[lease_key], (token, self.lease_ms))
            .await?
            .flag(b"renewed", b"not_owner")
    }
}

/// Whether the lease is held under the token.
impl RedisStep for LeaseVerifyStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let LeaseVerifyStep(LeaseStep { lease_key, token }) = *self;
        redis
            .script_outcome(&VERIFY, &[lease_key], token)
            .await?
            .flag(b"held", b"not_held")
    }
}

/// Deletes the lease if it is held under the token.
impl RedisStep for LeaseReleaseStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<LeaseReleaseReply> {
        let LeaseReleaseStep(LeaseStep { lease_key, token }) = *self;
        let outcome = redis.script_outcome(&RELEASE, &[lease_key], token).await?;
        match (outcome.status(), outcome.len()) {
            (b"released", 0) => Ok(LeaseReleaseReply::Released),
            (b"no_key", 0) => Ok(LeaseReleaseReply::NoLease),
            (b"other_owner", 0) => Ok(LeaseReleaseReply::OtherOwner),
            _ => Err(outcome.unexpected()),
        }
    }
}
