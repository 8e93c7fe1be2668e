//! The countdown latch steps in process, with the same answers and the same validation as
//! the Lua scripts: one [`Value::Latch`] per latch, and one [`Value::LatchCompletions`]
//! beside it.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::backend::memory::clock::Moment;
use crate::backend::memory::{LatchGeneration, MemoryBackend, Store, Value, clock, other_state};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::latch::{
    COMPLETIONS_KEPT, COMPLETIONS_KEPT_FOR_MS, LatchCountDownReply, LatchCountDownStep, LatchKeys,
    LatchRead, LatchReadStep, LatchSetReply, LatchSetStep, LatchState,
};
use crate::error::Result;

/// Starts a generation, unless a latch exists and is not to be replaced.
impl MemoryStep for LatchSetStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<LatchSetReply> {
        let keys = Physical::of(memory, self.keys);
        memory.step(|store, now| {
            let exists = latch(store, &keys, self.keys, now)?.is_some();
            let remembered = completions(store, &keys, self.keys, now)?.is_some();
            if exists && !self.replace {
                return Ok(LatchSetReply::Exists);
            }
            let expires_at = match self.expiry_ms {
                None => None,
                Some(ms) => Some(clock::after(now, ms, "a latch expiry")?),
            };
            // Room for every key this step creates before anything changes: a latch
            // created complete and not remembered without its completion.
            let new_keys = usize::from(!exists) + usize::from(self.count == 0 && !remembered);
            if new_keys > 0 {
                store.ensure_room_for(new_keys, now)?;
            }
            let latch = Value::Latch(Box::new(LatchGeneration {
                generation: self.generation.into(),
                count: self.count,
                counted: HashMap::new(),
            }));
            store.insert(&keys.latch, latch, expires_at, now)?;
            if self.count == 0 {
                record_completion(store, &keys, self.keys, self.generation, None, now)?;
            }
            Ok(LatchSetReply::Set)
        })
    }
}

/// One count-down of the step's generation, counted once.
impl MemoryStep for LatchCountDownStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<LatchCountDownReply> {
        let keys = Physical::of(memory, self.keys);
        memory.step(|store, now| {
            // What the latch holds for this generation: its count, and what this count-down
            // left if it counted already.
            let found = match latch(store, &keys, self.keys, now)? {
                Some(Value::Latch(latch)) if *latch.generation == *self.generation => {
                    Some((latch.count, latch.counted.get(self.id).copied()))
                }
                _ => None,
            };
            let done = completions(store, &keys, self.keys, now)?;
            let remembered = done.is_some();
            let Some((count, counted)) = found else {
                return Ok(
                    match done.and_then(|done| completion_of(done, self.generation)) {
                        Some(Some(by)) if by == self.id => {
                            LatchCountDownReply::Counted { remaining: 0 }
                        }
                        Some(_) => LatchCountDownReply::Completed,
                        None => LatchCountDownReply::Stale,
                    },
                );
            };
            if let Some(remaining) = counted {
                return Ok(LatchCountDownReply::Counted { remaining });
            }
            if count == 0 {
                return Ok(LatchCountDownReply::Completed);
            }
            let remaining = count - 1;
            // Room for the completions' key before anything changes.
            if remaining == 0 && !remembered {
                store.ensure_room_for(1, now)?;
            }
            if let Some(Value::Latch(latch)) = latch(store, &keys, self.keys, now)? {
                latch.count = remaining;
                latch.counted.insert(self.id.to_owned(), remaining);
            }
            if remaining == 0 {
                record_completion(store, &keys, self.keys, self.generation, Some(self.id), now)?;
            }
            Ok(LatchCountDownReply::Counted { remaining })
        })
    }
}

/// The latch's current generation, or whether the one asked about completed.
impl MemoryStep for LatchReadStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<LatchRead> {
        let keys = Physical::of(memory, self.keys);
        memory.step(|store, now| {
            let current = match latch(store, &keys, self.keys, now)? {
                Some(Value::Latch(latch))
                    if self
                        .generation
                        .is_none_or(|asked| *asked == *latch.generation) =>
                {
                    Some(LatchState {
                        generation: latch.generation.to_string(),
                        count: latch.count,
                    })
                }
                _ => None,
            };
            let done = completions(store, &keys, self.keys, now)?;
            Ok(match (current, self.generation) {
                (Some(state), _) => LatchRead::Current(state),
                (None, Some(asked))
                    if done.is_some_and(|done| completion_of(done, asked).is_some()) =>
                {
                    LatchRead::Completed
                }
                (None, _) => LatchRead::None,
            })
        })
    }
}

/// The latch's two keys with the backend's prefix.
struct Physical {
    latch: Vec<u8>,
    completions: Vec<u8>,
}

impl Physical {
    fn of(memory: &MemoryBackend, keys: LatchKeys<'_>) -> Self {
        Physical {
            latch: memory.physical_key(keys.latch).to_vec(),
            completions: memory.physical_key(keys.completions).to_vec(),
        }
    }
}

/// The latch's value, `None` when absent; corrupt state when the key holds another
/// primitive's.
fn latch<'a>(
    store: &'a mut Store,
    keys: &Physical,
    user: LatchKeys<'_>,
    now: Moment,
) -> Result<Option<&'a mut Value>> {
    match store
        .get_mut(&keys.latch, now)
        .map(|entry| &mut entry.value)
    {
        None => Ok(None),
        Some(latch @ Value::Latch(_)) => Ok(Some(latch)),
        Some(_) => Err(other_state(user.latch, "latch")),
    }
}

/// The latch's completed generations, `None` when none is remembered; corrupt state when
/// the key holds another primitive's.
fn completions<'a>(
    store: &'a mut Store,
    keys: &Physical,
    user: LatchKeys<'_>,
    now: Moment,
) -> Result<Option<&'a Completions>> {
    match store
        .get_mut(&keys.completions, now)
        .map(|entry| &entry.value)
    {
        None => Ok(None),
        Some(Value::LatchCompletions(done)) => Ok(Some(&**done)),
        Some(_) => Err(other_state(user.completions, "latch's completions")),
    }
}

type Completions = VecDeque<(String, Option<String>, Moment)>;

/// Whether `generation` completed: `Some` with the id of the count-down that completed it
/// (`None` when it started complete).
fn completion_of<'a>(done: &'a Completions, generation: &str) -> Option<Option<&'a str>> {
    done.iter()
        .find(|(completed, _, _)| completed == generation)
        .map(|(_, by, _)| by.as_deref())
}

/// Records that `generation` completed, by the count-down `by`; keeps the completions of
/// [`COMPLETIONS_KEPT_FOR_MS`] and at most [`COMPLETIONS_KEPT`] generations, as the scripts
/// do.
fn record_completion(
    store: &mut Store,
    keys: &Physical,
    user: LatchKeys<'_>,
    generation: &str,
    by: Option<&str>,
    now: Moment,
) -> Result<()> {
    let kept_for = Duration::from_millis(COMPLETIONS_KEPT_FOR_MS);
    let expires_at = Some(now + kept_for);
    let completion = (generation.to_owned(), by.map(str::to_owned), now);
    match store
        .get_mut(&keys.completions, now)
        .map(|entry| &mut entry.value)
    {
        Some(Value::LatchCompletions(done)) => {
            done.push_back(completion);
            while done.len() as u64 > COMPLETIONS_KEPT
                || done
                    .front()
                    .is_some_and(|(_, _, at)| now.saturating_duration_since(*at) > kept_for)
            {
                done.pop_front();
            }
            store.set_expiry(&keys.completions, expires_at, now);
            Ok(())
        }
        Some(_) => Err(other_state(user.completions, "latch's completions")),
        None => {
            store.ensure_room_for(1, now)?;
            let done = Value::LatchCompletions(Box::new(VecDeque::from([completion])));
            store.insert(&keys.completions, done, expires_at, now)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::ErrorKind;

    const KEYS: LatchKeys<'static> = LatchKeys {
        latch: b"l",
        completions: b"l:done",
    };

    fn set(generation: &str, count: u64, replace: bool) -> LatchSetStep<'_> {
        LatchSetStep {
            keys: KEYS,
            generation,
            count,
            expiry_ms: Some(60_000),
            replace,
        }
    }

    fn count_down<'a>(generation: &'a str, id: &'a str) -> LatchCountDownStep<'a> {
        LatchCountDownStep {
            keys: KEYS,
            generation,
            id,
        }
    }

    fn read(generation: Option<&str>) -> LatchReadStep<'_> {
        LatchReadStep {
            keys: KEYS,
            generation,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_generation_counts_down_to_zero_and_no_further() {
        let backend = MemoryBackend::new();
        assert_eq!(
            backend.run(set("a", 2, false)).expect("set"),
            LatchSetReply::Set
        );
        assert_eq!(
            backend.run(set("b", 5, false)).expect("set"),
            LatchSetReply::Exists
        );
        assert_eq!(
            backend.run(count_down("a", "1")).expect("count down"),
            LatchCountDownReply::Counted { remaining: 1 }
        );
        assert_eq!(
            backend.run(count_down("a", "2")).expect("count down"),
            LatchCountDownReply::Counted { remaining: 0 }
        );
        assert_eq!(
            backend.run(count_down("a", "3")).expect("count down"),
            LatchCountDownReply::Completed
        );
        assert_eq!(
            backend.run(count_down("b", "4")).expect("count down"),
            LatchCountDownReply::Stale
        );
        assert_eq!(
            backend.run(set("b", 1, true)).expect("reset"),
            LatchSetReply::Set
        );
        assert_eq!(
            backend.run(count_down("a", "5")).expect("count down"),
            LatchCountDownReply::Completed,
            "the old generation completed, and changes no more"
        );
        assert_eq!(
            backend.run(read(None)).expect("read"),
            LatchRead::Current(LatchState {
                generation: "b".to_owned(),
                count: 1
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_latch_created_complete_without_room_for_its_completion_is_not_created() {
        let backend = MemoryBackend::builder().max_keys(1).build().expect("valid");
        let err = backend
            .run(set("a", 0, false))
            .expect_err("two keys, room for one");
        assert_eq!(err.kind(), crate::ErrorKind::CapacityExceeded);
        assert_eq!(backend.run(read(None)).expect("read"), LatchRead::None);
        assert_eq!(
            backend.run(set("a", 1, false)).expect("one key"),
            LatchSetReply::Set
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_down_delivered_twice_counts_once_and_answers_the_same() {
        let backend = MemoryBackend::new();
        backend.run(set("a", 2, false)).expect("set");
        for _ in 0..2 {
            assert_eq!(
                backend.run(count_down("a", "1")).expect("count down"),
                LatchCountDownReply::Counted { remaining: 1 }
            );
        }
        assert_eq!(
            backend.run(count_down("a", "2")).expect("count down"),
            LatchCountDownReply::Counted { remaining: 0 }
        );
        // Replaced, it still knows its last count-down.
        backend.run(set("b", 1, true)).expect("reset");
        assert_eq!(
            backend.run(count_down("a", "2")).expect("again"),
            LatchCountDownReply::Counted { remaining: 0 }
        );
        assert_eq!(
            backend.run(count_down("a", "1")).expect("again"),
            LatchCountDownReply::Completed
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_completed_generation_reads_as_completed_after_a_reset_or_an_expiry() {
        let backend = MemoryBackend::new();
        backend.run(set("a", 1, false)).expect("set");
        backend.run(count_down("a", "1")).expect("count down");
        backend.run(set("b", 1, true)).expect("reset");
        assert_eq!(
            backend.run(read(Some("a"))).expect("read"),
            LatchRead::Completed
        );
        // `b` expires (a minute) without completing; `a` is remembered for ten.
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(backend.run(read(Some("b"))).expect("read"), LatchRead::None);
        assert_eq!(
            backend.run(read(Some("a"))).expect("read"),
            LatchRead::Completed
        );
        assert_eq!(backend.run(read(None)).expect("read"), LatchRead::None);
        tokio::time::advance(Duration::from_millis(COMPLETIONS_KEPT_FOR_MS)).await;
        assert_eq!(backend.run(read(Some("a"))).expect("read"), LatchRead::None);
    }

    #[tokio::test(start_paused = true)]
    async fn completions_are_kept_for_a_bounded_number_of_generations() {
        let backend = MemoryBackend::new();
        for round in 0..=COMPLETIONS_KEPT {
            backend
                .run(set(&round.to_string(), 0, true))
                .expect("a complete generation");
        }
        assert_eq!(backend.run(read(Some("0"))).expect("read"), LatchRead::None);
        assert_eq!(
            backend.run(read(Some("1"))).expect("read"),
            LatchRead::Completed
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_latch_is_gone_and_another_primitives_state_is_refused() {
        let backend = MemoryBackend::new();
        backend.run(set("a", 1, false)).expect("set");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(backend.run(read(None)).expect("read"), LatchRead::None);
        assert_eq!(
            backend.run(count_down("a", "1")).expect("count down"),
            LatchCountDownReply::Stale
        );
        for key in [KEYS.latch, KEYS.completions] {
            backend
                .step(|store, now| {
                    store.insert(&backend.physical_key(key), Value::Int(3), None, now)
                })
                .expect("insert");
            for err in [
                backend.run(set("b", 1, true)).map(drop),
                backend.run(count_down("a", "1")).map(drop),
                backend.run(read(None)).map(drop),
            ] {
                assert_eq!(err.expect_err("corrupt").kind(), ErrorKind::CorruptState);
            }
            backend.step(|store, _| store.remove(&backend.physical_key(key)));
        }
    }
}
