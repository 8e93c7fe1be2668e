//! The read-write lease steps in process, with the same answers and the same validation as
//! the Lua scripts: one [`Value::RwLease`] per lease set, its members named as Redis names
//! them (`w:`, `r:`, `q:`, `a:` or `p:` and a token or a waiter id) with their deadlines,
//! and the entry expiring with its latest deadline.

use std::collections::HashMap;

use crate::backend::memory::clock::Moment;
use crate::backend::memory::clock::{self, millis_until};
use crate::backend::memory::{MemoryBackend, Store, Value};
use crate::backend::steps::rw_lease::{
    RwAcquireReply, RwAcquireStep, RwDowngradeReply, RwDowngradeStep, RwHeld, RwReleaseStep,
    RwRenewStep, RwStep, RwVerifyStep,
};
use crate::backend::steps::{MemoryStep, fencing_counter};
use crate::error::{Error, Result};

/// The members of one lease set and their deadlines.
type Members = HashMap<String, Moment>;

/// Takes a read or a write lease if the set lets it in; a write lease with the next fencing
/// token from the counter, validated first.
impl MemoryStep for RwAcquireStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<RwAcquireReply> {
        let counter_key = memory.physical_key(self.counter);
        let clock = memory.clock();
        with_members(memory, self.key, |members, store, now| {
            let counter = match self.write {
                true => fencing_counter::read(store, &counter_key, now, self.counter)?,
                false => None,
            };
            // This acquisition delivered twice: the lease it holds is its grant.
            if holder(members, self.token).is_some() {
                if !self.write {
                    return Ok(RwAcquireReply::Granted {
                        fencing_token: None,
                    });
                }
                return match counter {
                    Some(token) if token > 0 => Ok(RwAcquireReply::Granted {
                        fencing_token: Some(token.unsigned_abs()),
                    }),
                    _ => Err(Error::corrupt_state(
                        self.counter,
                        "the counter of a held write lease is gone",
                    )),
                };
            }
            if counter == Some(i64::MAX) {
                return Err(Error::corrupt_state(
                    self.counter,
                    "the counter has reached the largest fencing token",
                ));
            }
            let deadline = clock::after(now, self.lease_ms, "a lease")?;
            let waiting = match self.waiting {
                Some((waiter, ms)) => Some(Waiting {
                    waiter,
                    ms,
                    until: clock::after(now, ms, "a lease")?,
                    now,
                }),
                None => None,
            };
            let recorded = |members: &Members, prefix: &str| {
                waiting
                    .as_ref()
                    .and_then(|waiting| waiting.recorded(members, prefix))
            };
            let writer = latest(members, "w:");
            if !self.write {
                if let Some(until) = writer {
                    // Goes in as soon as this writer is gone, before every waiting writer.
                    if let Some(waiting) = &waiting {
                        waiting.wait_as(members, "a:");
                        members.remove(&format!("p:{}", waiting.waiter));
                    }
                    return Ok(busy(until, now));
                }
                if let Some(until) = latest(members, "q:")
                    && recorded(members, "a:").is_none()
                {
                    // A writer waits that came first: this reader waits for its turn.
                    if let Some(waiting) = &waiting {
                        waiting.wait_as(members, "p:");
                    }
                    return Ok(busy(until, now));
                }
                members.insert(format!("r:{}", self.token), deadline);
                if let Some(waiting) = &waiting {
                    waiting.stop(members, &["a:", "p:"]);
                }
                return Ok(RwAcquireReply::Granted {
                    fencing_token: None,
                });
            }
            // A writer waits for the writers ahead of it (whose waiter ids sort before its
            // own, as in the script; all of them when it has none), for the admitted readers,
            // and for every holder.
            let own = waiting
                .as_ref()
                .map(|waiting| format!("q:{}", waiting.waiter));
            let ahead = members
                .iter()
                .filter(|(member, _)| {
                    member.starts_with("q:") && own.as_ref().is_none_or(|own| *member < own)
                })
                .map(|(_, &deadline)| deadline)
                .max();
            let blocking = [writer, latest(members, "r:"), latest(members, "a:"), ahead];
            if let Some(until) = blocking.into_iter().flatten().max() {
                if let Some(waiting) = &waiting {
                    waiting.wait_as(members, "q:");
                }
                return Ok(busy(until, now));
            }
            // Room for the set and the counter, or neither: a token taken without its lease
            // would be a gap, a lease granted without its token a lie.
            let new_keys = usize::from(members.is_empty()) + usize::from(counter.is_none());
            store.ensure_room_for(new_keys, now)?;
            let token = fencing_counter::next(counter, clock, now);
            fencing_counter::store_token(store, &counter_key, token, deadline, clock, now)?;
            if let Some(waiting) = &waiting {
                waiting.stop(members, &["q:"]);
            }
            // The readers that wait for a writer's turn are admitted: they go in when it ends.
            let pending: Vec<_> = members
                .keys()
                .filter(|member| member.starts_with("p:"))
                .cloned()
                .collect();
            for member in pending {
                if let Some(until) = members.remove(&member) {
                    members.insert(format!("a:{}", &member[2..]), until);
                }
            }
            members.insert(format!("w:{}", self.token), deadline);
            Ok(RwAcquireReply::Granted {
                fencing_token: Some(token.unsigned_abs()),
            })
        })
    }
}

/// A waiter of an acquisition that records itself when refused.
struct Waiting<'a> {
    waiter: &'a str,
    /// How long its record lasts.
    ms: u64,
    /// Its record's deadline if written now.
    until: Moment,
    now: Moment,
}

impl Waiting<'_> {
    /// The deadline of its record of the kind `prefix` names, if it has one.
    fn recorded(&self, members: &Members, prefix: &str) -> Option<Moment> {
        members.get(&format!("{prefix}{}", self.waiter)).copied()
    }

    /// Records that it waits, as the kind `prefix` names: written when missing or past a
    /// quarter of its life, as in the script.
    fn wait_as(&self, members: &mut Members, prefix: &str) {
        let fresh = self.recorded(members, prefix).is_some_and(|recorded| {
            u128::from(millis_until(recorded, self.now)) * 4 >= u128::from(self.ms) * 3
        });
        if !fresh {
            members.insert(format!("{prefix}{}", self.waiter), self.until);
        }
    }

    /// Takes its records of the kinds given out (its grant).
    fn stop(&self, members: &mut Members, prefixes: &[&str]) {
        for prefix in prefixes {
            members.remove(&format!("{prefix}{}", self.waiter));
        }
    }
}

/// The latest deadline among the members of the kind `prefix` names.
fn latest(members: &Members, prefix: &str) -> Option<Moment> {
    members
        .iter()
        .filter(|(member, _)| member.starts_with(prefix))
        .map(|(_, &deadline)| deadline)
        .max()
}

/// Refused until `until`, as far as expiries alone go.
fn busy(until: Moment, now: Moment) -> RwAcquireReply {
    RwAcquireReply::Busy {
        retry_after_ms: millis_until(until, now),
    }
}

/// Gives the token's lease a new deadline if it still holds one.
impl MemoryStep for RwRenewStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let RwStep { key, token } = self.lease;
        with_members(memory, key, |members, _, now| {
            let deadline = clock::after(now, self.lease_ms, "a lease")?;
            Ok(match holder(members, token) {
                Some((member, _)) => {
                    members.insert(member, deadline);
                    true
                }
                None => false,
            })
        })
    }
}

/// What the token holds now.
impl MemoryStep for RwVerifyStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<RwHeld> {
        let RwVerifyStep(RwStep { key, token }) = *self;
        with_members(memory, key, |members, _, _| {
            Ok(match holder(members, token) {
                Some((member, _)) if member.starts_with("w:") => RwHeld::Write,
                Some(_) => RwHeld::Read,
                None => RwHeld::Nothing,
            })
        })
    }
}

/// Removes the token's lease.
impl MemoryStep for RwReleaseStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let RwReleaseStep(RwStep { key, token }) = *self;
        // A waiter id instead of a token: its waiting records go, as in the script.
        with_members(memory, key, |members, _, _| {
            let mut removed = false;
            for kind in ["w:", "r:", "q:", "a:", "p:"] {
                removed |= members.remove(&format!("{kind}{token}")).is_some();
            }
            Ok(removed)
        })
    }
}

/// Turns the token's write lease into a read lease with the same deadline.
impl MemoryStep for RwDowngradeStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<RwDowngradeReply> {
        let RwDowngradeStep(RwStep { key, token }) = *self;
        with_members(memory, key, |members, _, _| {
            Ok(match holder(members, token) {
                None => RwDowngradeReply::NotHeld,
                Some((member, _)) if member.starts_with("r:") => RwDowngradeReply::AlreadyRead,
                Some((member, deadline)) => {
                    members.remove(&member);
                    members.insert(format!("r:{token}"), deadline);
                    RwDowngradeReply::Downgraded
                }
            })
        })
    }
}

/// Runs `step` on the live members of the set at `user_key` under the store's lock, then
/// stores what it leaves, expiring with the latest deadline (the key goes with its last
/// member), whatever `step` answered: what it took out is never lost. Another primitive's
/// state under the key is corrupt state, and nothing runs.
fn with_members<R>(
    memory: &MemoryBackend,
    user_key: &[u8],
    step: impl FnOnce(&mut Members, &mut Store, Moment) -> Result<R>,
) -> Result<R> {
    let key = memory.physical_key(user_key);
    memory.step(|store, now| {
        let mut members = match store.get_mut(&key, now).map(|entry| &mut entry.value) {
            None => Members::new(),
            Some(Value::RwLease(members)) => std::mem::take(&mut **members),
            Some(_) => {
                return Err(crate::backend::memory::other_state(
                    user_key,
                    "read-write lease",
                ));
            }
        };
        members.retain(|_, deadline| *deadline > now);
        let answer = step(&mut members, store, now);
        // Storing back a key that exists cannot fail; a new key is stored only with members.
        match members.values().max().copied() {
            None => store.remove(&key),
            Some(latest) => {
                store.insert(&key, Value::RwLease(Box::new(members)), Some(latest), now)?
            }
        }
        answer
    })
}

/// The token's live holder entry, write or read, and its deadline.
fn holder(members: &Members, token: &str) -> Option<(String, Moment)> {
    ["w:", "r:"].into_iter().find_map(|kind| {
        let member = format!("{kind}{token}");
        members.get(&member).map(|&deadline| (member, deadline))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(backend: &MemoryBackend, write: bool, token: &str) -> RwAcquireReply {
        backend
            .run(RwAcquireStep {
                key: b"{rw}",
                counter: b"{rw}:fence",
                write,
                token,
                lease_ms: 60_000,
                not_after_ms: 0,
                waiting: Some(("waiter", 60_000)),
            })
            .expect("acquire")
    }

    #[tokio::test(start_paused = true)]
    async fn an_acquisition_delivered_twice_is_granted_not_busy() {
        let backend = MemoryBackend::new();
        assert_eq!(
            acquire(&backend, false, "reader"),
            RwAcquireReply::Granted {
                fencing_token: None
            }
        );
        // A writer waits: new readers are kept out, but not the reader's own duplicate.
        assert!(matches!(
            acquire(&backend, true, "writer"),
            RwAcquireReply::Busy { .. }
        ));
        assert_eq!(
            acquire(&backend, false, "reader"),
            RwAcquireReply::Granted {
                fencing_token: None
            }
        );
        assert!(matches!(
            acquire(&backend, false, "another"),
            RwAcquireReply::Busy { .. }
        ));
    }

    /// A write lease takes the next fencing token from the clock's floor, and its duplicate
    /// finds the same; a read lease takes none; a counter that was lost starts again above.
    #[tokio::test(start_paused = true)]
    async fn a_write_lease_takes_a_fencing_token_that_never_goes_back() {
        let backend = MemoryBackend::new();
        let token = |reply| match reply {
            RwAcquireReply::Granted { fencing_token } => fencing_token,
            other => panic!("{other:?}"),
        };
        let first = token(acquire(&backend, true, "writer")).expect("a write token");
        let floor = u64::try_from(backend.now().as_micros()).expect("before 2255");
        assert_eq!(first, floor);
        tokio::time::advance(std::time::Duration::from_millis(1)).await;
        assert_eq!(token(acquire(&backend, true, "writer")), Some(first));
        backend
            .run(RwReleaseStep(RwStep {
                key: b"{rw}",
                token: "writer",
            }))
            .expect("release");
        assert_eq!(token(acquire(&backend, false, "reader")), None);
        backend
            .run(RwReleaseStep(RwStep {
                key: b"{rw}",
                token: "reader",
            }))
            .expect("release");
        backend.step(|store, _| store.remove(&backend.physical_key(b"{rw}:fence")));
        tokio::time::advance(std::time::Duration::from_micros(1)).await;
        let after = token(acquire(&backend, true, "next")).expect("a write token");
        assert!(after > first, "{after} after {first}");
    }
}
