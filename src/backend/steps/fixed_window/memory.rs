//! The fixed-window step in process, with the same answers as the Lua script.

use std::time::Duration;

use crate::backend::memory::clock::Moment;
use crate::backend::memory::clock::{after, millis_until};
use crate::backend::memory::{Entry, MemoryBackend, Value};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::fixed_window::{
    FixedWindowReply, FixedWindowReservation, FixedWindowReserveStep, FixedWindowReturnStep,
    FixedWindowStep,
};
use crate::error::Result;

/// Runs one fixed-window step atomically.
impl MemoryStep for FixedWindowStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<FixedWindowReply> {
        let step = self;
        let key = memory.physical_key(step.key);
        memory.step(|store, now| {
            let entry = store.get_mut(&key, now);
            let (count, expires_at) = counter(entry.as_deref(), step.key)?;
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
            // Within the clock's range: `FixedWindow` bounds the window on this backend.
            let deadline = match expires_at {
                Some(deadline) => deadline,
                None => after(now, step.window_ms, "a fixed window")?,
            };
            let value = Value::Int(i64::try_from(count).unwrap_or(i64::MAX));
            // In place when the window exists (its expiry does not move): one lookup of the
            // key per step.
            if let Err(value) = Entry::replace_in_schedule(entry, value, Some(deadline)) {
                store.insert(&key, value, Some(deadline), now)?;
            }
            Ok(FixedWindowReply {
                granted: true,
                count,
                ttl_ms: Some(ttl_ms(deadline)),
                free_in_ms: Some(ttl_ms(deadline)),
            })
        })
    }
}

/// The count and expiry of a fixed-window counter (its live entry, if any), or the
/// corrupt-state error naming `user_key`.
fn counter(entry: Option<&Entry>, user_key: &[u8]) -> Result<(u64, Option<Moment>)> {
    match entry {
        None => Ok((0, None)),
        Some(entry) => match entry.value {
            Value::Int(count) => Ok((u64::try_from(count).unwrap_or(0), entry.expires_at())),
            _ => Err(crate::backend::memory::other_state(
                user_key,
                "fixed-window",
            )),
        },
    }
}

/// Runs one reservation of the hot-key tier atomically, as `fixed_window_reserve.lua` does.
impl MemoryStep for FixedWindowReserveStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<FixedWindowReservation> {
        let step = self;
        let key = memory.physical_key(step.key);
        let clock = memory.clock();
        memory.step(|store, now| {
            let (count, expires_at) = counter(store.get_mut(&key, now).as_deref(), step.key)?;
            let ttl_ms = |deadline| millis_until(deadline, now);
            let left = step.limit.saturating_sub(count);
            // As the script: a count over the limit (a limit lowered under the same name)
            // denies even a batch alone.
            if count.saturating_add(step.permits) > step.limit {
                return Ok(FixedWindowReservation {
                    decided: FixedWindowReply {
                        granted: false,
                        count: count.min(step.limit),
                        ttl_ms: expires_at.map(ttl_ms),
                        free_in_ms: expires_at.map(ttl_ms),
                    },
                    batch: 0,
                    window: 0,
                });
            }
            let deadline = match expires_at {
                Some(deadline) => deadline,
                None => after(now, step.window_ms, "a fixed window")?,
            };
            // As fixed_window_reserve.lua sizes it.
            let window = u128::from(step.window_ms.max(1));
            let spendable =
                u128::from(millis_until(deadline, now).saturating_sub(step.stop_before_ms))
                    .min(window);
            let by_time = (u128::from(step.max_batch) * spendable).div_ceil(window);
            let batch = step
                .max_batch
                .min((left - step.permits) / step.share.max(1))
                .min(u64::try_from(by_time).unwrap_or(u64::MAX));
            // As the script: a batch alone never starts a window, and nothing to count
            // writes nothing.
            let batch = if expires_at.is_none() && step.permits == 0 {
                0
            } else {
                batch
            };
            if step.permits + batch == 0 {
                return Ok(FixedWindowReservation {
                    decided: FixedWindowReply {
                        granted: true,
                        count,
                        ttl_ms: expires_at.map(ttl_ms),
                        free_in_ms: expires_at.map(ttl_ms),
                    },
                    batch: 0,
                    window: expires_at.map_or(0, |at| window_name(clock.since_epoch(at))),
                });
            }
            let count = count + step.permits + batch;
            let value = Value::Int(i64::try_from(count).unwrap_or(i64::MAX));
            store.insert(&key, value, Some(deadline), now)?;
            Ok(FixedWindowReservation {
                decided: FixedWindowReply {
                    granted: true,
                    count,
                    ttl_ms: Some(ttl_ms(deadline)),
                    free_in_ms: Some(ttl_ms(deadline)),
                },
                batch,
                window: window_name(clock.since_epoch(deadline)),
            })
        })
    }
}

/// Runs one return of reserved permits atomically, as `fixed_window_return.lua` does: only
/// to the window that ends when the reservation said.
impl MemoryStep for FixedWindowReturnStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<u64> {
        let step = self;
        let key = memory.physical_key(step.key);
        let clock = memory.clock();
        memory.step(|store, now| {
            let (count, expires_at) = counter(store.get_mut(&key, now).as_deref(), step.key)?;
            let Some(deadline) = expires_at else {
                return Ok(0);
            };
            if window_name(clock.since_epoch(deadline)) != step.window {
                return Ok(0);
            }
            // A count beyond the limit is the limit, as on Redis (this backend's steps never
            // count past it). The window counted the reserved permits: one that holds fewer
            // is another.
            let count = count.min(step.limit);
            if count < step.permits {
                return Ok(0);
            }
            let value = Value::Int(i64::try_from(count - step.permits).unwrap_or(i64::MAX));
            store.insert(&key, value, Some(deadline), now)?;
            Ok(step.permits)
        })
    }
}

/// What names a window: its end in nanoseconds on the backend's clock (whole microseconds
/// of it, as the clock counts), so that a counter evicted and started again a microsecond or
/// more later is another window.
fn window_name(since_epoch: Duration) -> u64 {
    u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX)
}
