//! The fixed-window step on Redis: `INCREX` where the server has it, plain commands for one
//! permit, Lua otherwise.

use std::sync::LazyLock;

use redis::Value;

use crate::backend::redis::script_reply::ScriptReply;
use crate::backend::redis::{RedisBackend, Reprobed, Script, SendError, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::fixed_window::{
    FixedWindowReply, FixedWindowReservation, FixedWindowReserveStep, FixedWindowReturnStep,
    FixedWindowStep,
};
use crate::error::{Error, ErrorKind, Result};

static FIXED_WINDOW: LazyLock<Script> = script!(writes, "fixed_window", "fixed_window.lua");
static FIXED_WINDOW_RESERVE: LazyLock<Script> =
    script!(writes, "fixed_window_reserve", "fixed_window_reserve.lua");
static FIXED_WINDOW_RETURN: LazyLock<Script> =
    script!(writes, "fixed_window_return", "fixed_window_return.lua");

/// Runs one fixed-window step.
///
/// Redis 8.8+ and Valkey 9.2+ take it as one `INCREX` pipelined with `PTTL` (one round
/// trip). A step of one permit (nearly every request) goes elsewhere as plain commands in one
/// round trip: `SET key 0 NX PX window` (a window's first request creates its counter with its
/// end), `INCR`, `PTTL`; a larger one goes through Lua, the only way to take back what a
/// rejected request counted before anyone sees it. So does every step on a Cluster: while a
/// slot moves, redis-rs follows `ASK` with one `ASKING` and the whole pipeline, which lets
/// only its first command through to the importing node; the rest would go back and forth
/// until the move ends, and the pipeline be sent again, counting again. A plan's step
/// (`admitted_only`) goes through Lua too where `INCREX` is missing: `INCR` would keep a
/// rejected request in the count, which a plan with a larger limit would hold against the
/// client.
///
/// A server that answers `INCREX` with "unknown command", or an ACL that denies it or one of
/// the plain commands (`NOPERM`: an allow-list written without them), makes every user of
/// this handle skip that way for [`INCREX_REPROBE_AFTER`](crate::backend::redis::INCREX_REPROBE_AFTER),
/// and the same request goes on by the next way at once. A refused `INCREX` changed nothing.
/// Plain commands that the ACL allowed ran: if `INCR` was one of them, the request that found
/// the denial is counted twice, an under-admission of one per re-probe period. Probes
/// (0 permits) always use Lua, since `INCREX` and `INCR` would create the key.
///
/// A counting command refuses a counter it cannot count (not an integer, another type)
/// without changing it; the step then asks a probe, which checks the counter, whether
/// that was the reason, so corrupt state is named by the script's own check rather than
/// recognised in the server's error text.
impl RedisStep for FixedWindowStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<FixedWindowReply> {
        let step = *self;
        let capabilities = redis.capabilities();
        // A Cluster takes every step as one script (see above).
        let pipelines = !redis.is_cluster();
        if step.permits > 0 && pipelines && capabilities.increx().should_try() {
            match increx(redis, step).await {
                Ok(counted) => {
                    capabilities.increx().accepted();
                    return counted.reply(redis, step).await;
                }
                Err(err) if err.refuses_command() => skip(capabilities.increx(), "INCREX", &err),
                Err(err) => return Err(Box::pin(corrupt_or(redis, step, err.into_error())).await),
            }
        }
        if step.permits == 1
            && pipelines
            && !step.admitted_only
            && capabilities.native_counting().should_try()
        {
            match one_permit(redis, step).await {
                Ok(counted) => {
                    capabilities.native_counting().accepted();
                    return counted.reply(redis, step).await;
                }
                Err(err) if err.denied_by_acl() => {
                    skip(capabilities.native_counting(), "SET, INCR or PTTL", &err);
                }
                Err(err) => return Err(Box::pin(corrupt_or(redis, step, err.into_error())).await),
            }
        }
        match lua(redis, step).await {
            // Boxed: a refused step is rare, and the probe's future inline would make every
            // step's larger than the allocator's fast per-thread cache serves.
            Err(err) if step.permits > 0 => Err(Box::pin(corrupt_or(redis, step, err)).await),
            reply => reply,
        }
    }
}

/// Records that the server refused a way of running the step (`what`): it is skipped until
/// it is probed again.
fn skip(way: &Reprobed, what: &str, err: &SendError) {
    let reprobe = crate::backend::redis::INCREX_REPROBE_AFTER;
    if way.first_refusal() {
        // Without the arguments the server may quote ("unknown command 'INCREX', with args
        // beginning with: '<key>'"): a client's key is no INFO line's.
        let words = err.to_string();
        let refusal = words.split(", with args").next().unwrap_or_default();
        tracing::info!(
            error = refusal,
            "the server refuses {what}; the fixed window goes another way, and asks again every {reprobe:?}"
        );
    } else {
        tracing::debug!(error = %err, "the server still refuses {what}");
    }
    way.refused();
}

/// The step through Lua.
async fn lua(redis: &RedisBackend, step: FixedWindowStep<'_>) -> Result<FixedWindowReply> {
    let args = (step.permits, step.limit, step.window_ms);
    let reply = redis.script_reply(&FIXED_WINDOW, &[step.key], args).await?;
    let (granted, count, ttl_ms) = match reply {
        // count * 2^32 + ms until the window ends (the script packs no other way).
        ScriptReply::Packed(count, ttl) => (true, count, Some(ttl)),
        other @ ScriptReply::PackedBy(_) => return Err(other.unexpected(FIXED_WINDOW.name())),
        ScriptReply::Status(outcome) => {
            (outcome.granted()?, outcome.uint(0)?, outcome.optional(1)?)
        }
    };
    Ok(FixedWindowReply {
        granted,
        count,
        ttl_ms,
        free_in_ms: ttl_ms.map(|ttl| ttl + 1),
    })
}

/// The corrupt-state error if a probe finds the counter corrupt, else `err`: for a
/// counting step the server refused, or whose count no step writes. A refusal changed
/// nothing, and a probe only reads (and gives a lost expiry back), so the probe may run.
async fn corrupt_or(redis: &RedisBackend, step: FixedWindowStep<'_>, err: Error) -> Error {
    if !matches!(
        err.kind(),
        ErrorKind::Server | ErrorKind::Script | ErrorKind::UnexpectedReply
    ) {
        return err;
    }
    let probe = FixedWindowStep { permits: 0, ..step };
    match lua(redis, probe).await {
        Err(corrupt) if corrupt.kind() == ErrorKind::CorruptState => corrupt,
        _ => err,
    }
}

/// What a step counted by native commands saw: the count after it, and `PTTL`'s answer.
struct Counted {
    granted: bool,
    count: i64,
    ttl: i64,
}

impl Counted {
    /// The step's reply.
    ///
    /// A counter without expiry (`PTTL` -1: it lost its expiry, or it expired between `SET`
    /// and `INCR` and was counted again) would never reset: it is given its window with
    /// `PEXPIRE`, a command every supported server and an ACL without scripts take. Sent late,
    /// after the window ended and another began, `PEXPIRE` moves the new window's end later
    /// by the delay (an under-admission, never an over-admission) and creates nothing. A
    /// counter gone by `PTTL` (-2: it expired after `INCR`) is a window that has just ended.
    async fn reply(
        self,
        redis: &RedisBackend,
        step: FixedWindowStep<'_>,
    ) -> Result<FixedWindowReply> {
        let Ok(count) = u64::try_from(self.count) else {
            // A negative counter, which no step writes.
            let err = Error::unexpected_reply(format!("the fixed window counted {}", self.count));
            return Err(Box::pin(corrupt_or(redis, step, err)).await);
        };
        let ttl_ms = match self.ttl {
            -1 => {
                let mut pexpire = redis.keyed_command("PEXPIRE", step.key, 1, 20);
                pexpire.arg(step.window_ms);
                // Boxed: rare, and inline it would weigh on every step's future.
                Box::pin(redis.query_raw(&pexpire))
                    .await
                    .map_err(SendError::into_error)?;
                step.window_ms
            }
            ttl => u64::try_from(ttl).unwrap_or(0),
        };
        Ok(FixedWindowReply {
            granted: self.granted,
            count,
            ttl_ms: Some(ttl_ms),
            free_in_ms: Some(ttl_ms + 1),
        })
    }
}

/// The step as one `INCREX` pipelined with `PTTL`.
async fn increx(redis: &RedisBackend, step: FixedWindowStep<'_>) -> Result<Counted, SendError> {
    // Built as the plain commands are (see `one_permit`): sized at once, the key written in
    // place.
    let mut increx = redis.keyed_command("INCREX", step.key, 7, 72);
    increx
        .arg("BYINT")
        .arg(step.permits)
        .arg("UBOUND")
        .arg(step.limit)
        .arg("PX")
        .arg(step.window_ms)
        .arg("ENX");
    let mut pipe = redis::Pipeline::with_capacity(2);
    pipe.add_command(increx)
        .add_command(redis.keyed_command("PTTL", step.key, 0, 0));
    let reply = redis.query_pipeline(&pipe).await?;
    let ((count, applied), ttl): ((i64, i64), i64) =
        redis::from_redis_value(Value::Array(reply)).map_err(redis::RedisError::from)?;
    Ok(Counted {
        granted: applied != 0,
        count,
        ttl,
    })
}

/// A step of one permit as plain commands in one round trip: `SET key 0 NX PX window`, `INCR`,
/// `PTTL`. The request is granted when the count it made is within the limit.
///
/// A rejected request stays counted, unlike in Lua: with one permit a request is rejected
/// only once the window's count has reached the limit, so the count beyond the limit turns no
/// later decision (every request of the window is rejected until it ends), and a hot-key
/// return reads it as the limit (`fixed_window_return.lua`). The count a rejection reports is
/// beyond the limit; what is left is 0 either way.
async fn one_permit(redis: &RedisBackend, step: FixedWindowStep<'_>) -> Result<Counted, SendError> {
    // Every buffer sized at once: this runs for nearly every request.
    let mut set = redis.keyed_command("SET", step.key, 4, 26);
    set.arg(0).arg("NX").arg("PX").arg(step.window_ms);
    let mut pipe = redis::Pipeline::with_capacity(3);
    pipe.add_command(set)
        .add_command(redis.keyed_command("INCR", step.key, 0, 0))
        .add_command(redis.keyed_command("PTTL", step.key, 0, 0));
    let reply = redis.query_pipeline(&pipe).await?;
    match reply.as_slice() {
        [_, Value::Int(count), Value::Int(ttl)] => Ok(Counted {
            granted: u64::try_from(*count).is_ok_and(|count| count <= step.limit),
            count: *count,
            ttl: *ttl,
        }),
        other => Err(SendError::Reply(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "the fixed window's SET, INCR and PTTL",
            format!("{other:?}"),
        )))),
    }
}

/// Runs one reservation of the hot-key tier, always in Lua: `INCREX` grants what fits but
/// cannot size a batch by what is left, and a reservation runs once per batch, not once per
/// request.
impl RedisStep for FixedWindowReserveStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<FixedWindowReservation> {
        let step = *self;
        let args = (
            step.permits,
            step.limit,
            step.window_ms,
            step.max_batch,
            step.share,
            step.stop_before_ms,
        );
        let outcome = redis
            .script_outcome(&FIXED_WINDOW_RESERVE, &[step.key], args)
            .await?;
        let ttl_ms = outcome.optional(1)?;
        Ok(FixedWindowReservation {
            decided: FixedWindowReply {
                granted: outcome.granted()?,
                count: outcome.uint(0)?,
                ttl_ms,
                free_in_ms: ttl_ms.map(|ttl| ttl + 1),
            },
            batch: outcome.uint(2)?,
            window: outcome.uint(3)?,
        })
    }
}

/// Runs one return of reserved permits.
impl RedisStep for FixedWindowReturnStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<u64> {
        let step = *self;
        let outcome = redis
            .script_outcome(
                &FIXED_WINDOW_RETURN,
                &[step.key],
                (step.permits, step.window, step.limit),
            )
            .await?;
        if outcome.status() != b"returned" {
            return Err(outcome.unexpected());
        }
        outcome.uint(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::steps::tests::unreachable_redis;

    fn step() -> FixedWindowStep<'static> {
        FixedWindowStep {
            key: b"k",
            permits: 1,
            limit: 5,
            window_ms: 60_000,
            admitted_only: false,
        }
    }

    /// A counter that `PTTL` found gone (it expired after `INCR`) is a window that has just
    /// ended: free in a millisecond, not a whole window away, so that a rejection is neither
    /// told to wait nor kept in a deny cache for a window already over. Nothing is sent.
    #[tokio::test]
    async fn a_counter_gone_by_pttl_is_a_window_just_ended() {
        let redis = unreachable_redis().await;
        let rejected = Counted {
            granted: false,
            count: 6,
            ttl: -2,
        };
        let reply = rejected.reply(&redis, step()).await.expect("nothing sent");
        assert_eq!(
            reply,
            FixedWindowReply {
                granted: false,
                count: 6,
                ttl_ms: Some(0),
                free_in_ms: Some(1),
            }
        );
        let granted = Counted {
            granted: true,
            count: 3,
            ttl: 41_000,
        };
        let reply = granted.reply(&redis, step()).await.expect("nothing sent");
        assert_eq!(
            (reply.ttl_ms, reply.free_in_ms),
            (Some(41_000), Some(41_001))
        );
    }
}
