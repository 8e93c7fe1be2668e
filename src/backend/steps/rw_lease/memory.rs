//! The read-write lease steps in process, with the same answers and the same validation as
//! the Lua scripts: one [`Value::RwLease`] per lease set, its members named as Redis names
//! them (`w:`, `r:` or `q:` and a token) with their deadlines, and the entry expiring with
//! its latest deadline.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::memory::clock::millis_until;
use crate::backend::memory::{MemoryBackend, Store, Value};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::rw_lease::{
    RwAcquireReply, RwAcquireStep, RwDowngradeReply, RwDowngradeStep, RwHeld, RwReleaseStep,
    RwRenewStep, RwStep, RwVerifyStep,
};
use crate::error::{Error, Result};

/// The members of one lease set and their deadlines.
type Members = HashMap<String, Instant>;

/// Takes a read or a write lease if the set lets it in.
impl MemoryStep for RwAcquireStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<RwAcquireReply> {
        let key = memory.physical_key(self.key);
        memory.step(|store, now| {
            let deadline = after(now, self.lease_ms)?;
            let waiting = match self.waiting.filter(|_| self.write) {
                Some((waiter, ms)) => Some((format!("q:{waiter}"), ms, after(now, ms)?)),
                None => None,
            };
            let mut members = take(store, &key, now, self.key)?;
            let latest = |prefix: &str, members: &Members| {
                members
                    .iter()
                    .filter(|(member, _)| member.starts_with(prefix))
                    .map(|(_, &deadline)| deadline)
                    .max()
            };
            let writer = latest("w:", &members);
            let busy = if self.write {
                writer.max(latest("r:", &members))
            } else {
                writer.max(latest("q:", &members))
            };
            if let Some(until) = busy {
                // Written when missing or past a quarter of its life, as in the script.
                if let Some((member, ms, until)) = waiting {
                    let fresh = members.get(&member).is_some_and(|&recorded| {
                        u128::from(millis_until(recorded, now)) * 4 >= u128::from(ms) * 3
                    });
                    if !fresh {
                        members.insert(member, until);
                    }
                }
                put(store, &key, members, now)?;
                return Ok(RwAcquireReply::Busy {
                    retry_after_ms: millis_until(until, now),
                });
            }
            if self.write {
                // Every waiting record goes with a writer's grant, as in the script.
                members.retain(|member, _| !member.starts_with("q:"));
                members.insert(format!("w:{}", self.token), deadline);
            } else {
                members.insert(format!("r:{}", self.token), deadline);
            }
            put(store, &key, members, now)?;
            Ok(RwAcquireReply::Granted)
        })
    }
}

/// Gives the token's lease a new deadline if it still holds one.
impl MemoryStep for RwRenewStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let RwStep {
            key: user_key,
            token,
        } = self.lease;
        let key = memory.physical_key(user_key);
        memory.step(|store, now| {
            let deadline = after(now, self.lease_ms)?;
            let mut members = take(store, &key, now, user_key)?;
            let renewed = match holder(&members, token) {
                Some((member, _)) => {
                    members.insert(member, deadline);
                    true
                }
                None => false,
            };
            put(store, &key, members, now)?;
            Ok(renewed)
        })
    }
}

/// What the token holds now.
impl MemoryStep for RwVerifyStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<RwHeld> {
        let RwVerifyStep(RwStep {
            key: user_key,
            token,
        }) = *self;
        let key = memory.physical_key(user_key);
        memory.step(|store, now| {
            let members = take(store, &key, now, user_key)?;
            let held = match holder(&members, token) {
                Some((member, _)) if member.starts_with("w:") => RwHeld::Write,
                Some(_) => RwHeld::Read,
                None => RwHeld::Nothing,
            };
            put(store, &key, members, now)?;
            Ok(held)
        })
    }
}

/// Removes the token's lease.
impl MemoryStep for RwReleaseStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let RwReleaseStep(RwStep {
            key: user_key,
            token,
        }) = *self;
        let key = memory.physical_key(user_key);
        memory.step(|store, now| {
            let mut members = take(store, &key, now, user_key)?;
            let removed = match holder(&members, token) {
                Some((member, _)) => members.remove(&member).is_some(),
                None => false,
            };
            put(store, &key, members, now)?;
            Ok(removed)
        })
    }
}

/// Turns the token's write lease into a read lease with the same deadline.
impl MemoryStep for RwDowngradeStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<RwDowngradeReply> {
        let RwDowngradeStep(RwStep {
            key: user_key,
            token,
        }) = *self;
        let key = memory.physical_key(user_key);
        memory.step(|store, now| {
            let mut members = take(store, &key, now, user_key)?;
            let reply = match holder(&members, token) {
                None => RwDowngradeReply::NotHeld,
                Some((member, _)) if member.starts_with("r:") => RwDowngradeReply::AlreadyRead,
                Some((member, deadline)) => {
                    members.remove(&member);
                    members.insert(format!("r:{token}"), deadline);
                    RwDowngradeReply::Downgraded
                }
            };
            put(store, &key, members, now)?;
            Ok(reply)
        })
    }
}

/// `now` plus `ms`, or an invalid argument beyond the clock's range.
fn after(now: Instant, ms: u64) -> Result<Instant> {
    now.checked_add(Duration::from_millis(ms))
        .ok_or_else(|| Error::invalid_argument(format!("a lease of {ms} ms is too long")))
}

/// The live members of the set at `key`, none when it does not exist; corrupt state when the
/// key holds something else. They are taken out of the store: every step puts them back with
/// [`put`], which cannot fail for a key that exists, so nothing taken is lost.
fn take(store: &mut Store, key: &[u8], now: Instant, user_key: &[u8]) -> Result<Members> {
    let mut members = match store.get_mut(key, now).map(|entry| &mut entry.value) {
        None => return Ok(Members::new()),
        Some(Value::RwLease(members)) => std::mem::take(members),
        Some(_) => {
            return Err(crate::backend::memory::other_state(
                user_key,
                "read-write lease",
            ));
        }
    };
    members.retain(|_, deadline| *deadline > now);
    Ok(members)
}

/// Stores `members` at `key`, expiring with its latest deadline; removes the key when there
/// is none.
fn put(store: &mut Store, key: &[u8], members: Members, now: Instant) -> Result<()> {
    let Some(latest) = members.values().max().copied() else {
        store.remove(key);
        return Ok(());
    };
    store.insert(key, Value::RwLease(members), Some(latest), now)
}

/// The token's live holder entry, write or read, and its deadline.
fn holder(members: &Members, token: &str) -> Option<(String, Instant)> {
    ["w:", "r:"].into_iter().find_map(|kind| {
        let member = format!("{kind}{token}");
        members.get(&member).map(|&deadline| (member, deadline))
    })
}
