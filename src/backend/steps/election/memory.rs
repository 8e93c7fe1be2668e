//! The election steps in process, with the same answers as the scripts: one
//! [`Value::Election`] per election beside its space's [`Value::Sessions`] (whose leases
//! say who is live), and the term counter as a fenced lock's. A candidate is its lease id
//! (its first 32 characters) and its campaign's own.

use std::collections::HashMap;

use crate::backend::memory::clock::Moment;

use super::{
    CampaignReply, CampaignStep, ElectionKeys, LeaderStep, Leading, ProclaimStep, ResignStep,
};
use crate::backend::memory::clock::millis_until;
use crate::backend::memory::{MemoryBackend, Store, Value, other_state};
use crate::backend::steps::{MemoryStep, fencing_counter};
use crate::error::{Error, Result};

/// A leader: its candidate, term and value, and its lease's deadline.
type Current = (String, u64, Vec<u8>, Moment);

/// One election, with the space's leases.
struct Election {
    leases: HashMap<String, Moment>,
    /// By arrival (ms since the epoch), then by candidate, as the sorted set orders them.
    candidates: Vec<(u64, String, Vec<u8>)>,
    leader: Option<(String, u64, Vec<u8>)>,
}

/// The deadline of candidate `id`'s lease in `leases`, when live.
fn lease_of(leases: &HashMap<String, Moment>, id: &str, now: Moment) -> Option<Moment> {
    let lease = id.get(..32).unwrap_or(id);
    leases.get(lease).copied().filter(|at| *at > now)
}

impl Election {
    /// The deadline of candidate `id`'s lease, when live.
    fn live(&self, id: &str, now: Moment) -> Option<Moment> {
        lease_of(&self.leases, id, now)
    }

    /// Removes the candidates whose lease is not live (and `gone`).
    fn remove_dead(&mut self, now: Moment, gone: Option<&str>) {
        let leases = &self.leases;
        self.candidates
            .retain(|(_, id, _)| Some(id.as_str()) != gone && lease_of(leases, id, now).is_some());
    }

    /// The leader while its lease lives (and it is not `gone`).
    fn current(&self, now: Moment, gone: Option<&str>) -> Option<Current> {
        let (id, term, value) = self.leader.as_ref()?;
        if Some(id.as_str()) == gone {
            return None;
        }
        let at = self.live(id, now)?;
        Some((id.clone(), *term, value.clone(), at))
    }
}

/// Runs `step` on the election of `keys`, and stores it back (without expiry; an empty one
/// is not stored).
fn with_election<R>(
    memory: &MemoryBackend,
    keys: ElectionKeys<'_>,
    step: impl FnOnce(&mut Election, &mut Store, Moment) -> Result<R>,
) -> Result<R> {
    let leases_key = memory.physical_key(keys.leases);
    let election_key = memory.physical_key(keys.candidates);
    memory.step(|store, now| {
        // Both keys' kinds checked before anything is taken out of them: a refusal changes
        // nothing.
        if let Some(entry) = store.get_mut(&leases_key, now)
            && !matches!(entry.value, Value::Sessions { .. })
        {
            return Err(other_state(keys.leases, "session space"));
        }
        let (candidates, leader) = match store.get_mut(&election_key, now).map(|e| &mut e.value) {
            None => (Vec::new(), None),
            Some(Value::Election { candidates, leader }) => (
                std::mem::take(&mut **candidates),
                leader.take().map(|leader| *leader),
            ),
            Some(_) => return Err(other_state(keys.candidates, "election")),
        };
        // Taken out for the step and given back after it: a step reads the leases and
        // writes the election and the terms, never the space, and a copy would cost
        // O(sessions) per step in a space that may serve thousands of instances.
        let leases = match store
            .get_mut(&leases_key, now)
            .map(|entry| &mut entry.value)
        {
            Some(Value::Sessions { leases, .. }) => std::mem::take(&mut **leases),
            _ => HashMap::new(),
        };
        let mut election = Election {
            leases,
            candidates,
            leader,
        };
        let answer = step(&mut election, store, now);
        if let Some(Value::Sessions { leases, .. }) = store
            .get_mut(&leases_key, now)
            .map(|entry| &mut entry.value)
        {
            **leases = std::mem::take(&mut election.leases);
        }
        if election.candidates.is_empty() && election.leader.is_none() {
            store.remove(&election_key);
        } else {
            store.insert(
                &election_key,
                Value::Election {
                    candidates: Box::new(election.candidates),
                    leader: election.leader.map(Box::new),
                },
                None,
                now,
            )?;
        }
        answer
    })
}

/// The leader, the first live candidate promoted with the next term when there is none
/// (`gone` counting as dead); dead candidates removed.
///
/// Every candidate is looked at, where the script reads at most 64 per step to bound its
/// time on the server: behind more than 64 dead candidates the script answers that nobody
/// leads while it removes the ones it read, and the campaign asks again at once, one step
/// per 64 dead. The same leader comes out, a few steps later on Redis; a memory step takes
/// the process's time, not a server's.
fn resolve(
    election: &mut Election,
    store: &mut Store,
    memory: &MemoryBackend,
    keys: ElectionKeys<'_>,
    now: Moment,
    gone: Option<&str>,
) -> Result<Option<Current>> {
    if let Some(leader) = election.current(now, gone) {
        return Ok(Some(leader));
    }
    election.remove_dead(now, gone);
    let Some((_, id, value)) = election.candidates.first().cloned() else {
        // Nobody leads: said only where someone did.
        if let Some(leader) = election.leader.as_mut() {
            leader.0.clear();
        }
        return Ok(None);
    };
    let terms_key = memory.physical_key(keys.terms);
    let counter = fencing_counter::read(store, &terms_key, now, keys.terms)?;
    if counter == Some(i64::MAX) {
        return Err(Error::corrupt_state(
            keys.terms,
            "the counter has reached the largest term",
        ));
    }
    if counter.is_none() {
        store.ensure_room_for(1, now)?;
    }
    let term = fencing_counter::next(counter, memory.clock(), now);
    let at = election.live(&id, now).unwrap_or(now);
    fencing_counter::store_token(store, &terms_key, term, at, memory.clock(), now)?;
    let term = term.unsigned_abs();
    election.leader = Some((id.clone(), term, value.clone()));
    Ok(Some((id, term, value, at)))
}

fn leading(leader: Option<Current>, id: Option<&str>, now: Moment) -> Leading {
    match leader {
        None => Leading::Nobody,
        Some((leader, term, value, at)) => {
            let ttl_ms = millis_until(at, now);
            if Some(leader.as_str()) == id {
                Leading::This {
                    term,
                    value,
                    ttl_ms,
                }
            } else {
                Leading::Other {
                    term,
                    value,
                    ttl_ms,
                }
            }
        }
    }
}

impl MemoryStep for CampaignStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<CampaignReply> {
        with_election(memory, self.keys, |election, store, now| {
            if election.live(self.id, now).is_none() {
                return Ok(CampaignReply::NoLease);
            }
            let terms_key = memory.physical_key(self.keys.terms);
            // A counter that is not one is refused before anything is written.
            fencing_counter::read(store, &terms_key, now, self.keys.terms)?;
            // The script sweeps a window per step; here the whole list is at hand.
            election.remove_dead(now, None);
            if !election.candidates.iter().any(|(_, id, _)| id == self.id) {
                let arrival =
                    u64::try_from(memory.clock().since_epoch(now).as_millis()).unwrap_or(u64::MAX);
                election
                    .candidates
                    .push((arrival, self.id.to_owned(), self.value.to_vec()));
                election.candidates.sort();
            }
            let leader = resolve(election, store, memory, self.keys, now, None)?;
            Ok(CampaignReply::Leading(leading(leader, Some(self.id), now)))
        })
    }
}

impl MemoryStep for ProclaimStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        with_election(memory, self.keys, |election, _, now| {
            match election.current(now, None) {
                Some((id, term, _, _)) if id == self.id && term == self.term => {}
                _ => return Ok(false),
            }
            if let Some(leader) = election.leader.as_mut() {
                leader.2 = self.value.to_vec();
            }
            if let Some(candidate) = election
                .candidates
                .iter_mut()
                .find(|(_, id, _)| id == self.id)
            {
                candidate.2 = self.value.to_vec();
            }
            Ok(true)
        })
    }
}

impl MemoryStep for ResignStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        with_election(memory, self.keys, |election, store, now| {
            // Led: named the leader, and its lease lives (a gone lease led nothing).
            let led = election
                .leader
                .as_ref()
                .is_some_and(|(id, _, _)| id == self.id)
                && election.live(self.id, now).is_some();
            resolve(election, store, memory, self.keys, now, Some(self.id))?;
            election.candidates.retain(|(_, id, _)| id != self.id);
            Ok(led)
        })
    }
}

impl MemoryStep for LeaderStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Leading> {
        with_election(memory, self.keys, |election, _, now| {
            Ok(leading(election.current(now, None), None, now))
        })
    }
}
