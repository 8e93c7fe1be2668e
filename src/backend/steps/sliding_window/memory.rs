//! The sliding-window step in process, with the same answers as the Lua script.

use std::time::Duration;

use crate::backend::memory::clock::Moment;
use crate::backend::memory::clock::millis_until;
use crate::backend::memory::{MemoryBackend, Value};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::rate_limit_reply::RateLimitReply;
use crate::backend::steps::sliding_window::SlidingWindowStep;
use crate::error::Result;

/// Runs one sliding-window step atomically.
impl MemoryStep for SlidingWindowStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<RateLimitReply> {
        let step = self;
        let key = memory.physical_key(step.key);
        let clock = memory.clock();
        memory.step(|store, now| {
            let window = Duration::from_millis(step.window_ms);
            let live = |end: Moment| end + window > now;
            let segments = match store.get_mut(&key, now) {
                None => None,
                Some(entry) => match &mut entry.value {
                    Value::Segments(segments) => Some(segments),
                    _ => {
                        return Err(crate::backend::memory::other_state(
                            step.key,
                            "sliding-window",
                        ));
                    }
                },
            };
            let count = segments
                .iter()
                .flat_map(|segments| segments.iter())
                .filter(|(end, _)| live(*end))
                .fold(0u64, |sum, (_, counted)| sum.saturating_add(*counted));

            if step.permits > 0 && count.saturating_add(step.permits) <= step.limit {
                // Segments are aligned on the epoch in whole milliseconds, as on Redis; the
                // current one ends strictly after now, so no permit is ever freed early.
                let since_epoch = clock.since_epoch(now);
                let now_ms = u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
                let end_ms = now_ms - now_ms % step.segment_ms + step.segment_ms;
                let current = now + (Duration::from_millis(end_ms) - since_epoch);
                let newest = match segments {
                    Some(segments) => {
                        // Oldest first: when the oldest is live, every one is. The usual
                        // step counts in the current segment in place; a new segment, or
                        // one that left the window, makes a new slice.
                        let at = segments.partition_point(|(end, _)| *end < current);
                        let all_live = segments.first().is_none_or(|(end, _)| live(*end));
                        match segments.get_mut(at) {
                            Some((end, counted)) if all_live && *end == current => {
                                *counted += step.permits;
                            }
                            _ => {
                                // Sized at once, for the live segments and a new one.
                                let mut kept = Vec::with_capacity(segments.len() + 1);
                                kept.extend(segments.iter().copied().filter(|(end, _)| live(*end)));
                                let at = kept.partition_point(|(end, _)| *end < current);
                                match kept.get_mut(at) {
                                    Some((end, counted)) if *end == current => {
                                        *counted += step.permits;
                                    }
                                    _ => kept.insert(at, (current, step.permits)),
                                }
                                *segments = kept.into_boxed_slice();
                            }
                        }
                        let newest = segments.last().map_or(current, |(end, _)| *end);
                        store.set_expiry(&key, Some(newest + window), now);
                        newest
                    }
                    None => {
                        let value = Value::Segments(Box::new([(current, step.permits)]));
                        store.insert(&key, value, Some(current + window), now)?;
                        current
                    }
                };
                return Ok(RateLimitReply {
                    granted: true,
                    remaining: step.limit - count - step.permits,
                    reset_after_ms: millis_until(newest + window, now),
                    retry_after_ms: None,
                });
            }

            // Oldest first, so the newest is last; a live key always has a live newest one.
            let live_segments = || {
                segments
                    .iter()
                    .flat_map(|segments| segments.iter())
                    .filter(|(end, _)| live(*end))
            };
            let reset_after_ms = live_segments()
                .next_back()
                .map_or(0, |(end, _)| millis_until(*end + window, now));
            let remaining = step.limit.saturating_sub(count);
            if count.saturating_add(step.permits) <= step.limit {
                return Ok(RateLimitReply {
                    granted: true,
                    remaining,
                    reset_after_ms,
                    retry_after_ms: None,
                });
            }
            // Free the oldest segments until the request fits; one above the limit never does.
            let mut retry_after_ms = None;
            if step.permits <= step.limit {
                let mut needed = count + step.permits - step.limit;
                for (end, counted) in live_segments() {
                    needed = needed.saturating_sub(*counted);
                    if needed == 0 {
                        retry_after_ms = Some(millis_until(*end + window, now));
                        break;
                    }
                }
            }
            Ok(RateLimitReply {
                granted: false,
                remaining,
                reset_after_ms,
                retry_after_ms,
            })
        })
    }
}
