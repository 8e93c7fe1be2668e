//! The GCRA step in process, with the same arithmetic and answers as the Lua script.

use std::time::Duration;

use crate::backend::memory::clock::micros_up;
use crate::backend::memory::{Entry, MemoryBackend, Value};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::gcra::{GcraStep, reply_from_micros};
use crate::backend::steps::rate_limit_reply::RateLimitReply;
use crate::error::Result;

/// Runs one GCRA step atomically. The TAT is stored as an instant and expires by the end of
/// the millisecond it passes in, so a live entry is never more than the tolerance ahead
/// (one that has passed counts as none): the clock is monotonic, so the Lua script's clamp
/// of a TAT left ahead by a clock that stepped back has nothing to do here.
impl MemoryStep for GcraStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<RateLimitReply> {
        let step = self;
        let key = memory.physical_key(step.key);
        memory.step(|store, now| {
            let entry = store.get_mut(&key, now);
            let ahead = match entry.as_deref() {
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
                // Kept until the TAT's millisecond ends, as the script's `PX` rounds up: a
                // TAT that has passed reads as none, and a key busier than one request per
                // millisecond is updated in place rather than dropped and made again.
                let expires = Some(now + Duration::from_millis(new_ahead.div_ceil(1000)));
                // In place when the key's schedule allows (a busy key's expiry only moves
                // on): one lookup of the key per step.
                if let Err(value) = Entry::replace_in_schedule(entry, Value::Tat(tat), expires) {
                    store.insert(&key, value, expires, now)?;
                }
            }
            let remaining = (tolerance - new_ahead) / step.interval_us;
            Ok(reply_from_micros(true, remaining, new_ahead, None))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::backend::memory::MemoryBackend;
    use crate::backend::steps::MemoryStep;
    use crate::backend::steps::gcra::GcraStep;
    use crate::backend::steps::rate_limit_reply::RateLimitReply;

    /// 2,000 a second, a burst of 2: a TAT 500 µs ahead per permit.
    fn step(memory: &MemoryBackend, permits: u64) -> RateLimitReply {
        GcraStep {
            key: b"k",
            permits,
            interval_us: 500,
            burst: 2,
        }
        .in_memory(memory)
        .expect("decided")
    }

    /// A TAT lives to the end of its millisecond, as Redis keeps it: a key asked more often
    /// than that is updated in place, and a TAT that has passed still reads as none.
    #[tokio::test(start_paused = true)]
    async fn a_tat_is_kept_to_the_end_of_its_millisecond_and_reads_as_none_once_passed() {
        let memory = MemoryBackend::new();
        assert!(step(&memory, 1).granted);
        tokio::time::advance(Duration::from_micros(700)).await;
        // The TAT passed 200 µs ago; the key is still there, and counts for nothing.
        assert_eq!(memory.len(), 1);
        assert_eq!(step(&memory, 0).remaining, 2);
        // Updated in place, to the end of the new TAT's millisecond.
        assert!(step(&memory, 1).granted);
        tokio::time::advance(Duration::from_micros(999)).await;
        assert_eq!(memory.len(), 1);
        tokio::time::advance(Duration::from_micros(1)).await;
        assert_eq!(memory.len(), 0);
    }
}
