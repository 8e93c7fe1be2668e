//! The GCRA step in process, with the same arithmetic and answers as the Lua script.

use std::time::Duration;

use crate::backend::memory::clock::micros_up;
use crate::backend::memory::{MemoryBackend, Value};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::gcra::{GcraStep, reply_from_micros};
use crate::backend::steps::rate_limit_reply::RateLimitReply;
use crate::error::Result;

/// Runs one GCRA step atomically. The TAT is stored as an instant and expires when it
/// passes, so a live entry is always ahead of now, and never more than the tolerance
/// ahead: the clock is monotonic, so the Lua script's clamp of a TAT left ahead by a
/// clock that stepped back has nothing to do here.
impl MemoryStep for GcraStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<RateLimitReply> {
        let step = self;
        let key = memory.physical_key(step.key);
        memory.step(|store, now| {
            let ahead = match store.get_mut(&key, now) {
                None => 0,
                Some(entry) => match entry.value {
                    // Redis counts whole microseconds; a partial one counts as whole here,
                    // which is never in the client's favour.
                    Value::Tat(tat) => micros_up(tat.saturating_duration_since(now)),
                    _ => {
                        return Err(crate::backend::memory::other_state(step.key, "GCRA"));
                    }
                },
            };
            let tolerance = step.tolerance_us();
            let new_ahead = ahead.saturating_add(step.permits * step.interval_us);
            if new_ahead > tolerance {
                let retry = (step.permits <= step.burst).then(|| new_ahead - tolerance);
                let remaining = tolerance.saturating_sub(ahead) / step.interval_us;
                return Ok(reply_from_micros(false, remaining, ahead, retry));
            }
            if step.permits > 0 {
                let tat = now + Duration::from_micros(new_ahead);
                store.insert(&key, Value::Tat(tat), Some(tat), now)?;
            }
            let remaining = (tolerance - new_ahead) / step.interval_us;
            Ok(reply_from_micros(true, remaining, new_ahead, None))
        })
    }
}
