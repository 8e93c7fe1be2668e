//! The semaphore steps in process, with the same answers as the Lua scripts: one
//! [`Value::Permits`] per set, whose key lives exactly as long as its permits.

use std::collections::HashMap;

use crate::backend::ensure_same_slot;
use crate::backend::memory::clock::Moment;
use crate::backend::memory::clock::{self, millis_until};
use crate::backend::memory::{MemoryBackend, Store, Value};
use crate::backend::steps::MemoryStep;
#[cfg(test)]
use crate::backend::steps::semaphore::PermitStep;
use crate::backend::steps::semaphore::{
    PermitReleaseStep, PermitRenewStep, PermitVerifyStep, SemaphoreAcquireReply,
    SemaphoreAcquireStep, SemaphoreHeldStep,
};
use crate::error::Result;

type Holders = HashMap<String, Option<Moment>>;

/// Acquires a permit in every set of the step, or in none.
impl MemoryStep for SemaphoreAcquireStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<SemaphoreAcquireReply> {
        let step = self;
        let keys = physical_keys(memory, step.keys)?;
        memory.step(|store, now| {
            check_all(store, &keys, step.keys, now)?;
            // This acquisition delivered twice: its permit is a grant, not a full set.
            if holds_everywhere(store, &keys, step.token, now) {
                return Ok(SemaphoreAcquireReply::Granted);
            }
            let deadline = deadline(now, step.expiry_ms)?;
            // (stored capacity, live permits, ms until expiries free a slot if full)
            let sets: Vec<(u32, usize, Option<u64>)> = keys
                .iter()
                .zip(step.capacities)
                .map(|(key, &asked)| {
                    update(store, key, now, |stored, holders| {
                        (*stored, holders.len(), frees_in(holders, asked, now))
                    })
                    .unwrap_or((0, 0, None))
                })
                .collect();

            for (key, (&(stored, live, _), &asked)) in sets.iter().zip(step.capacities).enumerate()
            {
                if live > 0 && stored != asked {
                    return Ok(SemaphoreAcquireReply::CapacityMismatch { key, stored });
                }
            }
            let full: Vec<Option<u64>> = sets
                .iter()
                .zip(step.capacities)
                .filter(|&(&(_, live, _), &asked)| live >= asked as usize)
                .map(|(&(_, _, frees_in), _)| frees_in)
                .collect();
            if !full.is_empty() {
                // Every full set must free a slot; one that never does decides.
                let retry_after_ms = full
                    .iter()
                    .try_fold(0, |latest, frees_in| frees_in.map(|ms| ms.max(latest)));
                return Ok(SemaphoreAcquireReply::Full { retry_after_ms });
            }

            let new_keys = sets.iter().filter(|&&(_, live, _)| live == 0).count();
            store.ensure_room_for(new_keys, now)?;
            for (key, &capacity) in keys.iter().zip(step.capacities) {
                let granted = update(store, key, now, |stored, holders| {
                    *stored = capacity;
                    holders.insert(step.token.to_owned(), deadline);
                });
                if granted.is_none() {
                    let holders = Holders::from([(step.token.to_owned(), deadline)]);
                    store.insert(
                        key,
                        Value::Permits {
                            capacity,
                            holders: Box::new(holders),
                        },
                        deadline,
                        now,
                    )?;
                }
            }
            Ok(SemaphoreAcquireReply::Granted)
        })
    }
}

/// Removes the permit from its sets: `true` when it was still held.
impl MemoryStep for PermitReleaseStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let PermitReleaseStep(step) = self;
        let keys = physical_keys(memory, step.keys)?;
        memory.step(|store, now| {
            check_all(store, &keys, step.keys, now)?;
            let mut released = false;
            for key in &keys {
                let removed = update(store, key, now, |_, holders| {
                    holders.remove(step.token).is_some()
                });
                released |= removed == Some(true);
            }
            Ok(released)
        })
    }
}

/// Gives a held permit a new expiry: `true` when renewed, `false` when it was lost (it is
/// then removed from every set).
impl MemoryStep for PermitRenewStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let (step, expiry_ms) = (self.permit, self.expiry_ms);
        let keys = physical_keys(memory, step.keys)?;
        memory.step(|store, now| {
            check_all(store, &keys, step.keys, now)?;
            let deadline = deadline(now, expiry_ms)?;
            let held = holds_everywhere(store, &keys, step.token, now);
            for key in &keys {
                update(store, key, now, |_, holders| {
                    if held {
                        holders.insert(step.token.to_owned(), deadline);
                    } else {
                        holders.remove(step.token);
                    }
                });
            }
            Ok(held)
        })
    }
}

/// Whether the permit is held in every set, after pruning.
impl MemoryStep for PermitVerifyStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let PermitVerifyStep(step) = self;
        let keys = physical_keys(memory, step.keys)?;
        memory.step(|store, now| {
            check_all(store, &keys, step.keys, now)?;
            Ok(holds_everywhere(store, &keys, step.token, now))
        })
    }
}

/// The live permits of each set; changes nothing.
impl MemoryStep for SemaphoreHeldStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Vec<u32>> {
        let user_keys = self.keys;
        let keys = physical_keys(memory, user_keys)?;
        memory.step(|store, now| {
            check_all(store, &keys, user_keys, now)?;
            Ok(keys
                .iter()
                .map(
                    |key| match store.get_mut(key, now).map(|entry| &entry.value) {
                        Some(Value::Permits { holders, .. }) => {
                            let live = holders.values().filter(|d| is_live(**d, now)).count();
                            u32::try_from(live).unwrap_or(u32::MAX)
                        }
                        _ => 0,
                    },
                )
                .collect())
        })
    }
}

/// The physical keys, which must share one cluster slot as on Redis.
fn physical_keys(memory: &MemoryBackend, keys: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    let keys: Vec<Vec<u8>> = keys
        .iter()
        .map(|key| memory.physical_key(key).to_vec())
        .collect();
    ensure_same_slot(&keys)?;
    Ok(keys)
}

/// When a permit given `expiry_ms` now expires; `None` for no expiry.
fn deadline(now: Moment, expiry_ms: Option<u64>) -> Result<Option<Moment>> {
    let Some(ms) = expiry_ms else {
        return Ok(None);
    };
    clock::after(now, ms, "a permit expiry").map(Some)
}

fn is_live(deadline: Option<Moment>, now: Moment) -> bool {
    deadline.is_none_or(|deadline| deadline > now)
}

/// Fails, before anything changes, when a key holds anything but a semaphore (named by its
/// user key, as on Redis).
fn check_all(
    store: &mut Store,
    keys: &[Vec<u8>],
    user_keys: &[Vec<u8>],
    now: Moment,
) -> Result<()> {
    for (key, user_key) in keys.iter().zip(user_keys) {
        match store.get_mut(key, now).map(|entry| &entry.value) {
            None | Some(Value::Permits { .. }) => {}
            Some(_) => return Err(crate::backend::memory::other_state(user_key, "semaphore")),
        }
    }
    Ok(())
}

/// Runs `f` on the set at `key` (capacity and holders) once its expired permits are pruned,
/// then makes the key's life follow its permits: deleted without any, kept while one has no
/// expiry, else expiring with the latest. `None` when the key holds no set.
/// Whether `token` holds a live permit in every set, after pruning.
fn holds_everywhere(store: &mut Store, keys: &[Vec<u8>], token: &str, now: Moment) -> bool {
    keys.iter()
        .all(|key| update(store, key, now, |_, holders| holders.contains_key(token)) == Some(true))
}

fn update<R>(
    store: &mut Store,
    key: &[u8],
    now: Moment,
    f: impl FnOnce(&mut u32, &mut Holders) -> R,
) -> Option<R> {
    let entry = store.get_mut(key, now)?;
    let Value::Permits { capacity, holders } = &mut entry.value else {
        return None;
    };
    holders.retain(|_, deadline| is_live(*deadline, now));
    let result = f(capacity, holders);
    if holders.is_empty() {
        store.remove(key);
    } else {
        let latest = holders
            .values()
            .try_fold(now, |latest, deadline| deadline.map(|d| d.max(latest)));
        store.set_expiry(key, latest, now);
    }
    Some(result)
}

/// For a set that `capacity` leaves full: ms until expiries alone free a slot, `None` when
/// that takes a permit that never expires. `None` too for a set with room.
fn frees_in(holders: &Holders, capacity: u32, now: Moment) -> Option<u64> {
    let capacity = capacity as usize;
    if holders.len() < capacity {
        return None;
    }
    let mut deadlines: Vec<Moment> = holders.values().filter_map(|d| *d).collect();
    deadlines.sort_unstable();
    // The (live - capacity + 1)-th earliest expiry frees the first slot.
    deadlines
        .get(holders.len() - capacity)
        .map(|&deadline| millis_until(deadline, now))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::ErrorKind;

    fn acquire<'a>(
        keys: &'a [Vec<u8>],
        capacities: &'a [u32],
        token: &'a str,
    ) -> SemaphoreAcquireStep<'a> {
        SemaphoreAcquireStep {
            keys,
            capacities,
            token,
            expiry_ms: Some(1_000),
            not_after_ms: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn another_primitives_state_is_corrupt_and_left_alone() {
        let backend = MemoryBackend::new();
        backend
            .step(|store, now| {
                store.insert(&backend.physical_key(b"{s}:b"), Value::Int(7), None, now)
            })
            .expect("insert");
        let keys = [b"{s}:a".to_vec(), b"{s}:b".to_vec()];
        let step = PermitStep {
            keys: &keys,
            token: "t",
        };
        let errors = [
            backend.run(acquire(&keys, &[1, 1], "t")).map(drop),
            backend.run(PermitReleaseStep(step)).map(drop),
            backend
                .run(PermitRenewStep {
                    permit: step,
                    expiry_ms: None,
                })
                .map(drop),
            backend.run(PermitVerifyStep(step)).map(drop),
            backend.run(SemaphoreHeldStep { keys: &keys }).map(drop),
        ];
        for result in errors {
            assert_eq!(result.expect_err("corrupt").kind(), ErrorKind::CorruptState);
        }
        // Nothing was created beside it, and it is unchanged.
        assert_eq!(backend.len(), 1);
        let value = backend.step(|store, now| {
            store
                .get_mut(&backend.physical_key(b"{s}:b"), now)
                .map(|e| e.value.clone())
        });
        assert_eq!(value, Some(Value::Int(7)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_key_lives_as_long_as_its_permits() {
        let backend = MemoryBackend::new();
        let keys = [b"s".to_vec()];
        let expires = |backend: &MemoryBackend| {
            backend.step(|store, now| {
                store
                    .get_mut(&backend.physical_key(b"s"), now)
                    .map(|e| e.expires_at())
            })
        };
        let granted = backend.run(acquire(&keys, &[2], "a"));
        assert_eq!(granted.expect("acquire"), SemaphoreAcquireReply::Granted);
        let first = expires(&backend).flatten().expect("an expiry");
        let step = PermitStep {
            keys: &keys,
            token: "b",
        };
        backend
            .run(SemaphoreAcquireStep {
                expiry_ms: None,
                ..acquire(&keys, &[2], "b")
            })
            .expect("acquire");
        assert_eq!(
            expires(&backend),
            Some(None),
            "persistent with a permit without expiry"
        );
        assert!(backend.run(PermitReleaseStep(step)).expect("release"));
        assert_eq!(expires(&backend), Some(Some(first)));
        tokio::time::advance(Duration::from_millis(1_000)).await;
        assert_eq!(expires(&backend), None, "gone with its last permit");
        assert!(backend.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_acquisition_delivered_twice_is_granted_not_full() {
        let backend = MemoryBackend::new();
        let keys = [b"{s}:a".to_vec(), b"{s}:b".to_vec()];
        for _ in 0..2 {
            let granted = backend.run(acquire(&keys, &[1, 1], "t"));
            assert_eq!(granted.expect("acquire"), SemaphoreAcquireReply::Granted);
        }
        let other = backend.run(acquire(&keys, &[1, 1], "u")).expect("acquire");
        assert!(
            matches!(other, SemaphoreAcquireReply::Full { .. }),
            "{other:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_store_refuses_both_keys_or_neither() {
        let backend = MemoryBackend::builder().max_keys(2).build().expect("valid");
        backend
            .step(|store, now| store.insert(b"other", Value::Int(1), None, now))
            .expect("insert");
        let keys = [b"{s}:a".to_vec(), b"{s}:b".to_vec()];
        let err = backend
            .run(acquire(&keys, &[1, 1], "t"))
            .expect_err("no room for two keys");
        assert_eq!(err.kind(), ErrorKind::CapacityExceeded);
        assert_eq!(backend.len(), 1);
    }
}
