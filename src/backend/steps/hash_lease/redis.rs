//! The hash-field lease steps on Redis: one Lua script each over one hash, sharing the
//! helpers of `hash_lease.lua`, each sent only once the server is known to have hash field
//! expiry.
//!
//! `HSETEX` (Redis 8.0+) would set a value and its expiry in one native command, but no
//! native command also checks the owner token and the hash's own expiry; the scripts do
//! both, and set the value and its absolute expiry in one atomic step on every server with
//! field expiry.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::hash_lease::{
    FieldAcquireReply, FieldAcquireStep, FieldReleaseStep, FieldRenewStep, FieldStep,
    FieldVerifyStep, LeaseReleaseReply,
};
use crate::error::Result;

static ACQUIRE: LazyLock<Script> = script!(
    writes,
    "hash_lease_acquire",
    "../key_kinds.lua",
    "../clock.lua",
    "hash_lease.lua",
    "../first_checks.lua",
    "hash_lease_acquire.lua"
);
static RENEW: LazyLock<Script> = script!(
    writes,
    "hash_lease_renew",
    "../key_kinds.lua",
    "../clock.lua",
    "hash_lease.lua",
    "hash_lease_renew.lua"
);
static VERIFY: LazyLock<Script> = script!(
    read_only,
    "hash_lease_verify",
    "../key_kinds.lua",
    "../clock.lua",
    "hash_lease.lua",
    "hash_lease_verify.lua"
);
static RELEASE: LazyLock<Script> = script!(
    writes,
    "hash_lease_release",
    "../key_kinds.lua",
    "../clock.lua",
    "hash_lease.lua",
    "hash_lease_release.lua"
);

/// Takes the field if no live lease holds it.
impl RedisStep for FieldAcquireStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<FieldAcquireReply> {
        redis.require_hash_field_expiry().await?;
        let FieldStep { key, field, token } = self.lease;
        let args = (field, token, self.lease_ms, self.not_after_ms);
        let outcome = redis.script_outcome(&ACQUIRE, &[key], args).await?;
        match (outcome.status(), outcome.len()) {
            (b"late", 0) => Ok(FieldAcquireReply::Late),
            (b"granted", 0) => Ok(FieldAcquireReply::Granted),
            (b"held", 1) => Ok(FieldAcquireReply::Held {
                retry_after_ms: outcome.optional(0)?,
            }),
            _ => Err(outcome.unexpected()),
        }
    }
}

/// Gives the field a new expiry if the token holds it.
impl RedisStep for FieldRenewStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        redis.require_hash_field_expiry().await?;
        let FieldStep { key, field, token } = self.lease;
        redis
            .script_outcome(&RENEW, &[key], (field, token, self.lease_ms))
            .await?
            .flag(b"renewed", b"not_owner")
    }
}

/// Whether the token holds the field.
impl RedisStep for FieldVerifyStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        redis.require_hash_field_expiry().await?;
        let FieldVerifyStep(FieldStep { key, field, token }) = *self;
        redis
            .script_outcome(&VERIFY, &[key], (field, token))
            .await?
            .flag(b"held", b"not_held")
    }
}

/// Deletes the field if the token holds it.
impl RedisStep for FieldReleaseStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<LeaseReleaseReply> {
        redis.require_hash_field_expiry().await?;
        let FieldReleaseStep(FieldStep { key, field, token }) = *self;
        let outcome = redis
            .script_outcome(&RELEASE, &[key], (field, token))
            .await?;
        match (outcome.status(), outcome.len()) {
            (b"released", 0) => Ok(LeaseReleaseReply::Released),
            (b"no_lease", 0) => Ok(LeaseReleaseReply::NoLease),
            (b"other_owner", 0) => Ok(LeaseReleaseReply::OtherOwner),
            _ => Err(outcome.unexpected()),
        }
    }
}
