//! The session steps in process, with the same answers as the scripts: one
//! [`Value::Sessions`] per space, the leases with their deadlines and the attached names
//! with their lease and value; a name is live while its lease is.

use std::collections::HashMap;

use crate::backend::memory::clock::Moment;

use super::{
    LeaseState, SessionDeleteReply, SessionDeleteStep, SessionGetStep, SessionGrantReply,
    SessionGrantStep, SessionKeepAliveStep, SessionLeaseStep, SessionListStep, SessionPutReply,
    SessionPutStep, SessionRevokeStep, SessionVerifyStep, SpaceKeys,
};
use crate::backend::memory::clock::{self, millis_until};
use crate::backend::memory::{MemoryBackend, Value, other_state};
use crate::backend::steps::MemoryStep;
use crate::error::Result;

/// One space: the leases by id, the attached names.
#[derive(Default)]
struct Space {
    leases: HashMap<String, Moment>,
    entries: HashMap<Vec<u8>, (String, Vec<u8>)>,
}

impl Space {
    fn live(&self, id: &str, now: Moment) -> Option<Moment> {
        self.leases.get(id).copied().filter(|at| *at > now)
    }

    /// The names attached to `id`.
    fn names_of<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a Vec<u8>> + 'a {
        self.entries
            .iter()
            .filter(move |(_, (owner, _))| owner == id)
            .map(|(name, _)| name)
    }
}

/// Runs `step` on the space of `keys`, what ran out removed first, and stores it back with
/// the latest lease's deadline (removed without a lease).
fn with_space<R>(
    memory: &MemoryBackend,
    keys: SpaceKeys<'_>,
    step: impl FnOnce(&mut Space, Moment) -> Result<R>,
) -> Result<R> {
    let key = memory.physical_key(keys.leases);
    memory.step(|store, now| {
        let mut space = match store.get_mut(&key, now).map(|entry| &mut entry.value) {
            None => Space::default(),
            Some(Value::Sessions { leases, entries }) => Space {
                leases: std::mem::take(&mut **leases),
                entries: std::mem::take(&mut **entries),
            },
            Some(_) => return Err(other_state(keys.leases, "session space")),
        };
        space.leases.retain(|_, at| *at > now);
        let leases = &space.leases;
        space
            .entries
            .retain(|_, (owner, _)| leases.contains_key(owner.as_str()));
        let answer = step(&mut space, now);
        // Storing back a key that exists cannot fail; a new key is stored only with leases.
        match space.leases.values().max().copied() {
            None => store.remove(&key),
            Some(latest) => store.insert(
                &key,
                Value::Sessions {
                    leases: Box::new(space.leases),
                    entries: Box::new(space.entries),
                },
                Some(latest),
                now,
            )?,
        }
        answer
    })
}

impl MemoryStep for SessionGrantStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<SessionGrantReply> {
        with_space(memory, self.lease.space, |space, now| {
            if space.live(self.lease.id, now).is_none() {
                let at = clock::after(now, self.lease_ms, "a lease")?;
                space.leases.insert(self.lease.id.to_owned(), at);
            }
            Ok(SessionGrantReply::Granted)
        })
    }
}

impl MemoryStep for SessionKeepAliveStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        with_space(memory, self.lease.space, |space, now| {
            let at = clock::after(now, self.lease_ms, "a lease")?;
            Ok(match space.leases.get_mut(self.lease.id) {
                Some(deadline) => {
                    *deadline = at;
                    true
                }
                None => false,
            })
        })
    }
}

impl MemoryStep for SessionRevokeStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let id = self.0.id;
        with_space(memory, self.0.space, |space, _| {
            space.entries.retain(|_, (owner, _)| owner != id);
            Ok(space.leases.remove(id).is_some())
        })
    }
}

impl MemoryStep for SessionVerifyStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        with_space(memory, self.0.space, |space, now| {
            Ok(space.live(self.0.id, now).is_some())
        })
    }
}

impl MemoryStep for SessionPutStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<SessionPutReply> {
        let id = self.lease.id;
        with_space(memory, self.lease.space, |space, now| {
            if space.live(id, now).is_none() {
                return Ok(SessionPutReply::NoLease);
            }
            let holder = space
                .entries
                .get(self.name)
                .map(|(owner, _)| owner.as_str());
            if self.only_if_free && holder.is_some_and(|owner| owner != id) {
                return Ok(SessionPutReply::Taken);
            }
            let attached = holder == Some(id);
            let held = space.names_of(id).count();
            if !attached && held >= usize::try_from(self.max_keys).unwrap_or(usize::MAX) {
                return Ok(SessionPutReply::Full);
            }
            space
                .entries
                .insert(self.name.to_vec(), (id.to_owned(), self.value.to_vec()));
            Ok(SessionPutReply::Put)
        })
    }
}

impl MemoryStep for SessionDeleteStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<SessionDeleteReply> {
        let id = self.lease.id;
        with_space(memory, self.lease.space, |space, _| {
            let attached = space
                .entries
                .get(self.name)
                .is_some_and(|(owner, _)| owner == id);
            if attached {
                space.entries.remove(self.name);
                return Ok(SessionDeleteReply::Deleted);
            }
            Ok(SessionDeleteReply::NotLive)
        })
    }
}

impl MemoryStep for SessionGetStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Option<Vec<u8>>> {
        with_space(memory, self.space, |space, _| {
            Ok(space.entries.get(self.name).map(|(_, value)| value.clone()))
        })
    }
}

impl MemoryStep for SessionListStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        with_space(memory, self.space, |space, _| {
            let mut live: Vec<(Moment, &Vec<u8>, &Vec<u8>)> = space
                .entries
                .iter()
                .filter_map(|(name, (owner, value))| {
                    space.leases.get(owner).map(|at| (*at, name, value))
                })
                .collect();
            live.sort();
            Ok(live
                .into_iter()
                .take(usize::try_from(self.limit).unwrap_or(usize::MAX))
                .map(|(_, name, value)| (name.clone(), value.clone()))
                .collect())
        })
    }
}

impl MemoryStep for SessionLeaseStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Option<LeaseState>> {
        let id = self.0.id;
        with_space(memory, self.0.space, |space, now| {
            Ok(space.live(id, now).map(|at| LeaseState {
                ttl_ms: millis_until(at, now),
                names: space.names_of(id).cloned().collect(),
            }))
        })
    }
}
