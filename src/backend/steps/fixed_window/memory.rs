//! The fixed-window step in process, with the same answers as the Lua script.

use std::time::Duration;

use crate::backend::memory::clock::millis_until;
use crate::backend::memory::{MemoryBackend, Value};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::fixed_window::{FixedWindowReply, FixedWindowStep};
use crate::error::Result;

/// Runs one fixed-window step atomically.
impl MemoryStep for FixedWindowStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<FixedWindowReply> {
        let step = self;
        let key = memory.physical_key(step.key);
        memory.step(|store, now| {
            let (count, expires_at) = match store.get_mut(&key, now) {
                None => (0, None),
                Some(entry) => match entry.value {
                    Value::Int(count) => (u64::try_from(count).unwrap_or(0), entry.expires_at()),
                    _ => {
                        return Err(crate::backend::memory::other_state(
                            step.key,
                            "fixed-window",
                        ));
                    }
                },
            };
            // A live key has time left, so this is never 0 ms, as with Redis' PTTL.
            let ttl_ms = |deadline| millis_until(deadline, now);
            if count.saturating_add(step.permits) > step.limit || step.permits == 0 {
                return Ok(FixedWindowReply {
                    granted: step.permits == 0 && count <= step.limit,
                    count,
                    ttl_ms: expires_at.map(ttl_ms),
                    free_in_ms: expires_at.map(ttl_ms),
                });
            }
            let count = count + step.permits;
            let deadline =
                expires_at.unwrap_or_else(|| now + Duration::from_millis(step.window_ms));
            let value = Value::Int(i64::try_from(count).unwrap_or(i64::MAX));
            store.insert(&key, value, Some(deadline), now)?;
            Ok(FixedWindowReply {
                granted: true,
                count,
                ttl_ms: Some(ttl_ms(deadline)),
                free_in_ms: Some(ttl_ms(deadline)),
            })
        })
    }
}
