//! The fixed-window step on Redis: `INCREX` where the server has it, Lua otherwise.

use std::sync::LazyLock;

use redis::Value;

use crate::backend::redis::script_reply::ScriptReply;
use crate::backend::redis::{RedisBackend, Script, SendError, script};
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
/// trip). A server that answers "unknown command", or an ACL that denies `INCREX`
/// (`NOPERM`: an allow-list written before the command existed), makes every user of this
/// handle take the Lua path for [`INCREX_REPROBE_AFTER`](crate::backend::redis::INCREX_REPROBE_AFTER); the
/// rejected command changed nothing, so the same request goes on through Lua at once. Probes
/// (0 permits) always use Lua, since `INCREX` would create the key.
///
/// A counting command refuses a counter it cannot count (not an integer, another type)
/// without changing it; the step then asks a probe, which checks the counter, whether
/// that was the reason, so corrupt state is named by the script's own check rather than
/// recognised in the server's error text.
impl RedisStep for FixedWindowStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<FixedWindowReply> {
        let step = *self;
        if step.permits > 0 && redis.capabilities().should_try_increx() {
            match increx(redis, step).await {
                Ok(reply) => {
                    redis.capabilities().increx_accepted();
                    return Ok(reply);
                }
                Err(err) if err.refuses_command() => {
                    let reprobe = crate::backend::redis::INCREX_REPROBE_AFTER;
                    if redis.capabilities().first_increx_rejection() {
                        tracing::info!(
                            error = %err,
                            "the server does not take INCREX; using the Lua fixed window, and asking again every {reprobe:?}"
                        );
                    } else {
                        tracing::debug!(error = %err, "the server still does not take INCREX");
                    }
                    redis.capabilities().increx_rejected();
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
/// counting step the server refused. A refusal changed nothing, so the probe may run.
async fn corrupt_or(redis: &RedisBackend, step: FixedWindowStep<'_>, err: Error) -> Error {
    if !matches!(err.kind(), ErrorKind::Server | ErrorKind::Script) {
        return err;
    }
    let probe = FixedWindowStep { permits: 0, ..step };
    match lua(redis, probe).await {
        Err(corrupt) if corrupt.kind() == ErrorKind::CorruptState => corrupt,
        _ => err,
    }
}

/// The step as one `INCREX` pipelined with `PTTL`.
async fn increx(
    redis: &RedisBackend,
    step: FixedWindowStep<'_>,
) -> Result<FixedWindowReply, SendError> {
    let key = redis.stored_key(step.key);
    let mut pipe = redis::pipe();
    pipe.cmd("INCREX")
        .arg(&key)
        .arg("BYINT")
        .arg(step.permits)
        .arg("UBOUND")
        .arg(step.limit)
        .arg("PX")
        .arg(step.window_ms)
        .arg("ENX")
        .cmd("PTTL")
        .arg(&key);
    let reply = redis.query_pipeline(&pipe).await?;
    let ((count, applied), mut ttl): ((i64, i64), i64) =
        redis::from_redis_value(Value::Array(reply)).map_err(redis::RedisError::from)?;
    if ttl == -1 {
        // A counter without expiry would never reset: give it the window it lost.
        let mut pexpire = redis::cmd("PEXPIRE");
        pexpire.arg(&key).arg(step.window_ms);
        redis.query_raw(&pexpire).await?;
        ttl = i64::try_from(step.window_ms).unwrap_or(i64::MAX);
    }
    Ok(FixedWindowReply {
        granted: applied != 0,
        count: u64::try_from(count).unwrap_or(0),
        ttl_ms: u64::try_from(ttl).ok(),
        free_in_ms: u64::try_from(ttl).ok().map(|ttl| ttl + 1),
    })
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
                (step.permits, step.window),
            )
            .await?;
        if outcome.status() != b"returned" {
            return Err(outcome.unexpected());
        }
        outcome.uint(0)
    }
}
