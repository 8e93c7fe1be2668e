//! The answer every rate-limit step gives, computed on the server with its clock.

use crate::backend::redis::script_reply::{ScriptReply, unpack};
use crate::error::Result;

/// One rate-limit step's answer. Every duration comes from the backend's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateLimitReply {
    /// Whether the permits were granted (and consumed).
    pub(crate) granted: bool,
    /// Permits that a request could take right after this step.
    pub(crate) remaining: u64,
    /// Milliseconds until the quota is whole again.
    pub(crate) reset_after_ms: u64,
    /// For a rejection, milliseconds until the same request can be granted; `None` when
    /// granted, and when it never can (more permits than the limit).
    pub(crate) retry_after_ms: Option<u64>,
}

/// The parts `(granted, remaining, reset after, retry after)` of a rate-limit script's reply,
/// in the script's own unit: a packed grant (`remaining * 2^32 + reset`, or
/// `-(remaining * radix + reset) - 1` with `radix` one more than the step's bound on `reset`,
/// as the script computes it), or `{'granted' | 'denied', remaining, reset, retry (-1:
/// none)}`.
pub(crate) fn reply_parts(reply: ScriptReply, radix: u64) -> Result<(bool, u64, u64, Option<u64>)> {
    let outcome = match reply {
        ScriptReply::Packed(remaining, reset) => return Ok((true, remaining, reset, None)),
        ScriptReply::PackedBy(packed) => {
            let (remaining, reset) = unpack(packed, radix);
            return Ok((true, remaining, reset, None));
        }
        ScriptReply::Status(outcome) => outcome,
    };
    let granted = outcome.granted()?;
    if outcome.len() != 3 {
        return Err(outcome.unexpected());
    }
    Ok((
        granted,
        outcome.uint(0)?,
        outcome.uint(1)?,
        outcome.optional(2)?,
    ))
}
