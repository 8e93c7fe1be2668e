//! The election steps on Redis: one script each, sharing `election.lua` and the fencing
//! counter's helpers.

use std::sync::LazyLock;

use super::{
    CampaignReply, CampaignStep, ElectionKeys, LeaderStep, Leading, ProclaimStep, ResignStep,
};
use crate::backend::redis::script_reply::Outcome;
use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::{RedisStep, fencing_counter};
use crate::error::Result;

static CAMPAIGN: LazyLock<Script> = script!(
    writes,
    "election_campaign",
    "../key_kinds.lua",
    "../out_of_memory.lua",
    "../fencing_counter.lua",
    "../clock.lua",
    "election.lua",
    "../first_checks.lua",
    "election_campaign.lua"
);
static PROCLAIM: LazyLock<Script> = script!(
    writes,
    "election_proclaim",
    "../key_kinds.lua",
    "../fencing_counter.lua",
    "../clock.lua",
    "election.lua",
    "../first_checks.lua",
    "election_proclaim.lua"
);
static RESIGN: LazyLock<Script> = script!(
    writes,
    "election_resign",
    "../key_kinds.lua",
    "../fencing_counter.lua",
    "../clock.lua",
    "election.lua",
    "../first_checks.lua",
    "election_resign.lua"
);
static LEADER: LazyLock<Script> = script!(
    read_only,
    "election_leader",
    "../key_kinds.lua",
    "../fencing_counter.lua",
    "../clock.lua",
    "election.lua",
    "election_leader.lua"
);

impl ElectionKeys<'_> {
    fn all(&self) -> [&[u8]; 5] {
        [
            self.leases,
            self.candidates,
            self.values,
            self.leader,
            self.terms,
        ]
    }
}

/// `{'leader' | 'other', term, value, ttl_ms}` or `{'none'}`.
fn leading(outcome: &Outcome, script: &Script) -> Result<Option<Leading>> {
    let known = |this: bool| -> Result<Leading> {
        let term = fencing_counter::token_from_digits(outcome.bytes(0)?, script.name())?;
        let value = outcome.bytes(1)?.to_vec();
        let ttl_ms = outcome.uint(2)?;
        Ok(if this {
            Leading::This {
                term,
                value,
                ttl_ms,
            }
        } else {
            Leading::Other {
                term,
                value,
                ttl_ms,
            }
        })
    };
    Ok(match (outcome.status(), outcome.len()) {
        (b"leader", 3) => Some(known(true)?),
        (b"other", 3) => Some(known(false)?),
        (b"none", 0) => Some(Leading::Nobody),
        _ => None,
    })
}

impl RedisStep for CampaignStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<CampaignReply> {
        let keys = self.keys.all();
        let outcome = redis
            .script_outcome(&CAMPAIGN, &keys, (self.id, self.value, self.not_after_ms))
            .await?;
        if let Some(leading) = leading(&outcome, &CAMPAIGN)? {
            return Ok(CampaignReply::Leading(leading));
        }
        match (outcome.status(), outcome.len()) {
            (b"no_lease", 0) => Ok(CampaignReply::NoLease),
            (b"late", 0) => Ok(CampaignReply::Late),
            _ => Err(outcome.unexpected()),
        }
    }
}

impl RedisStep for ProclaimStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let keys = &self.keys.all()[..4];
        redis
            .script_outcome(
                &PROCLAIM,
                keys,
                (self.id, self.term.to_string(), self.value),
            )
            .await?
            .flag(b"proclaimed", b"not_leader")
    }
}

impl RedisStep for ResignStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<bool> {
        let keys = self.keys.all();
        redis
            .script_outcome(&RESIGN, &keys, self.id)
            .await?
            .flag(b"resigned", b"left")
    }
}

impl RedisStep for LeaderStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<Leading> {
        let keys = &self.keys.all()[..4];
        let outcome = redis.script_outcome(&LEADER, keys, &[] as &[&str]).await?;
        match leading(&outcome, &LEADER)? {
            Some(leading @ (Leading::Other { .. } | Leading::Nobody)) => Ok(leading),
            _ => Err(outcome.unexpected()),
        }
    }
}
