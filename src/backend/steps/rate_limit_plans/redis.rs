//! The plan set steps on Redis: one script each over the set's hash, sharing the checks of
//! `plan_set.lua`.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::rate_limit_plans::{
    PlanSetFieldReadStep, PlanSetReadStep, PlanSetWriteStep, PlanSetWritten, StoredPlanSet,
};
use crate::error::Result;

static READ: LazyLock<Script> = script!(
    read_only,
    "plan_set_read",
    "../key_kinds.lua",
    "plan_set.lua",
    "plan_set_read.lua"
);
static READ_FIELD: LazyLock<Script> = script!(
    read_only,
    "plan_set_field_read",
    "../key_kinds.lua",
    "plan_set.lua",
    "plan_set_field_read.lua"
);
static WRITE: LazyLock<Script> = script!(
    writes,
    "plan_set_write",
    "../key_kinds.lua",
    "plan_set.lua",
    "plan_set_write.lua"
);

/// Every field of the plan set.
impl RedisStep for PlanSetReadStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<StoredPlanSet> {
        let outcome = redis
            .script_outcome(&READ, &[self.key], Vec::<&[u8]>::new())
            .await?;
        match outcome.status() {
            b"none" if outcome.len() == 0 => Ok(None),
            b"set" if outcome.len() % 2 == 0 => {
                let mut fields = Vec::with_capacity(outcome.len() / 2);
                for pair in 0..outcome.len() / 2 {
                    let field = outcome.bytes(2 * pair)?.to_vec();
                    fields.push((field, outcome.bytes(2 * pair + 1)?.to_vec()));
                }
                Ok(Some(fields))
            }
            _ => Err(outcome.unexpected()),
        }
    }
}

/// The changes, as a new version of the plan set.
impl RedisStep for PlanSetWriteStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<PlanSetWritten> {
        let mut args: Vec<&[u8]> = Vec::with_capacity(1 + 3 * self.changes.len());
        args.push(if self.seed { b"1" } else { b"0" });
        for (field, value) in self.changes {
            match value {
                Some(value) => args.extend([&b"set"[..], field, value]),
                None => args.extend([&b"del"[..], field, b""]),
            }
        }
        let outcome = redis.script_outcome(&WRITE, &[self.key], args).await?;
        match (outcome.status(), outcome.len()) {
            (b"written", 1) => Ok(PlanSetWritten::Written(outcome.uint(0)?)),
            (b"exists", 1) => Ok(PlanSetWritten::Exists(outcome.uint(0)?)),
            (b"gone", 0) => Ok(PlanSetWritten::Gone),
            _ => Err(outcome.unexpected()),
        }
    }
}

/// One field of the set.
impl RedisStep for PlanSetFieldReadStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<Option<Vec<u8>>> {
        let outcome = redis
            .script_outcome(&READ_FIELD, &[self.key], self.field)
            .await?;
        match (outcome.status(), outcome.len()) {
            (b"none", 0) => Ok(None),
            (b"field", 1) => Ok(Some(outcome.bytes(0)?.to_vec())),
            _ => Err(outcome.unexpected()),
        }
    }
}
