//! The session steps on Redis: one script each, sharing `session.lua`.

use std::sync::LazyLock;

use super::{
    LeaseKeys, LeaseState, SessionDeleteReply, SessionDeleteStep, SessionGetStep,
    SessionGrantReply, SessionGrantStep, SessionKeepAliveStep, SessionLeaseStep, SessionListStep,
    SessionPutReply, SessionPutStep, SessionRevokeStep, SessionVerifyStep, SpaceKeys,
};
use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::error::Result;

static GRANT: LazyLock<Script> = script!(
    writes,
    "session_grant",
    "../key_kinds.lua",
    "../out_of_memory.lua",
    "../clock.lua",
    "session.lua",
    "../first_checks.lua",
    "session_grant.lua"
);
static KEEP_ALIVE: LazyLock<Script> = script!(
    writes,
    "session_keep_alive",
    "../key_kinds.lua",
    "../clock.lua",
    "session.lua",
    "../first_checks.lua",
    "session_keep_alive.lua"
);
static REVOKE: LazyLock<Script> = script!(
    writes,
    "session_revoke",
    "../key_kinds.lua",
    "../clock.lua",
    "session.lua",
    "../first_checks.lua",
    "session_revoke.lua"
);
static VERIFY: LazyLock<Script> = script!(
    read_only,
    "session_verify",
    "../key_kinds.lua",
    "../clock.lua",
    "session.lua",
    "session_verify.lua"
);
static PUT: LazyLock<Script> = script!(
    writes,
    "session_put",
    "../key_kinds.lua",
    "../out_of_memory.lua",
    "../clock.lua",
    "session.lua",
    "../first_checks.lua",
    "session_put.lua"
);
static DELETE: LazyLock<Script> = script!(
    writes,
    "session_delete",
    "../key_kinds.lua",
    "../clock.lua",
    "session.lua",
    "../first_checks.lua",
    "session_delete.lua"
);
static GET: LazyLock<Script> = script!(
    read_only,
    "session_get",
    "../key_kinds.lua",
    "../clock.lua",
    "session.lua",
    "session_get.lua"
);
static LIST: LazyLock<Script> = script!(
    read_only,
    "session_list",
    "../key_kinds.lua",
    "../clock.lua",
    "session.lua",
    "session_list.lua"
);
static LEASE: LazyLock<Script> = script!(
    read_only,
    "session_lease",
    "../key_kinds.lua",
    "../clock.lua",
    "session.lua",
    "session_lease.lua"
);

impl SpaceKeys<'_> {
    fn keys(&self) -> [&[u8]; 3] {
        [self.leases, self.expiries, self.entries]
    }
}

impl LeaseKeys<'_> {
    fn keys(&self) -> [&[u8]; 4] {
        let [leases, expiries, entries] = self.space.keys();
        [leases, expiries, entries, self.names]
    }
}

impl RedisStep for SessionGrantStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<SessionGrantReply> {
        let keys = self.lease.space.keys();
        let outcome = redis
            .script_outcome(
                &GRANT,
                &keys,
                (self.lease.id, self.lease_ms, self.not_after_ms),
            )
            .await?;
        match (outcome.status(), outcome.len()) {
            (b"granted", 0) => Ok(SessionGrantReply::Granted),
            (b"late", 0) => Ok(SessionGrantReply::Late),
            _ => Err(outcome.unexpected()),
        }
    }
}

impl RedisStep for SessionKeepAliveStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let keys = self.lease.keys();
        redis
            .script_outcome(&KEEP_ALIVE, &keys, (self.lease.id, self.lease_ms))
            .await?
            .flag(b"renewed", b"gone")
    }
}

impl RedisStep for SessionRevokeStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let keys = self.0.keys();
        redis
            .script_outcome(&REVOKE, &keys, self.0.id)
            .await?
            .flag(b"released", b"none")
    }
}

impl RedisStep for SessionVerifyStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        redis
            .script_outcome(&VERIFY, &[self.0.space.leases], self.0.id)
            .await?
            .flag(b"held", b"none")
    }
}

impl RedisStep for SessionPutStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<SessionPutReply> {
        let keys = self.lease.keys();
        let outcome = redis
            .script_outcome(
                &PUT,
                &keys,
                (
                    self.lease.id,
                    self.name,
                    self.value,
                    self.max_keys,
                    if self.only_if_free { "1" } else { "0" },
                    self.not_after_ms,
                ),
            )
            .await?;
        match (outcome.status(), outcome.len()) {
            (b"late", 0) => Ok(SessionPutReply::Late),
            (b"put", 0) => Ok(SessionPutReply::Put),
            (b"no_lease", 0) => Ok(SessionPutReply::NoLease),
            (b"full", 0) => Ok(SessionPutReply::Full),
            (b"taken", 0) => Ok(SessionPutReply::Taken),
            _ => Err(outcome.unexpected()),
        }
    }
}

impl RedisStep for SessionDeleteStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<SessionDeleteReply> {
        let keys = self.lease.keys();
        let outcome = redis
            .script_outcome(
                &DELETE,
                &keys,
                (self.lease.id, self.name, self.not_after_ms),
            )
            .await?;
        match (outcome.status(), outcome.len()) {
            (b"deleted", 0) => Ok(SessionDeleteReply::Deleted),
            (b"none", 0) => Ok(SessionDeleteReply::NotLive),
            (b"late", 0) => Ok(SessionDeleteReply::Late),
            _ => Err(outcome.unexpected()),
        }
    }
}

impl RedisStep for SessionGetStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<Option<Vec<u8>>> {
        let keys = self.space.keys();
        let outcome = redis.script_outcome(&GET, &keys, self.name).await?;
        match (outcome.status(), outcome.len()) {
            (b"value", 1) => Ok(Some(outcome.bytes(0)?.to_vec())),
            (b"none", 0) => Ok(None),
            _ => Err(outcome.unexpected()),
        }
    }
}

impl RedisStep for SessionListStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let keys = self.space.keys();
        let outcome = redis.script_outcome(&LIST, &keys, self.limit).await?;
        if outcome.status() != b"entries" || outcome.len() % 2 != 0 {
            return Err(outcome.unexpected());
        }
        (0..outcome.len() / 2)
            .map(|i| {
                Ok((
                    outcome.bytes(2 * i)?.to_vec(),
                    outcome.bytes(2 * i + 1)?.to_vec(),
                ))
            })
            .collect()
    }
}

impl RedisStep for SessionLeaseStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<Option<LeaseState>> {
        let keys = self.0.keys();
        let outcome = redis.script_outcome(&LEASE, &keys, self.0.id).await?;
        match (outcome.status(), outcome.len()) {
            (b"none", 0) => Ok(None),
            (b"lease", len) if len >= 1 => Ok(Some(LeaseState {
                ttl_ms: outcome.uint(0)?,
                names: (1..len)
                    .map(|i| outcome.bytes(i).map(<[u8]>::to_vec))
                    .collect::<Result<_>>()?,
            })),
            _ => Err(outcome.unexpected()),
        }
    }
}
