//! A bounded map of keys with expiry, reclaimed as time passes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use crate::backend::memory::clock::Moment;
use crate::error::{Error, ErrorKind, Result};

/// A session space's attached keys: each name with its lease id and value.
pub(crate) type AttachedKeys = std::collections::HashMap<Vec<u8>, (String, Vec<u8>)>;

/// A stored value. Each primitive's step keeps its state in one of these.
///
/// Every key's entry is as large as the largest variant, and rate-limit state, a word or
/// two, is most of the keys: the larger states of the rarer primitives are boxed, and lists
/// are kept as boxed slices (a pointer and a length), so that a value stays within three
/// words (a test holds it there).
// Boxing a collection is the point: inline, its size would be paid by every key.
#[allow(clippy::box_collection)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// An integer counter: a fixed window's.
    Int(i64),
    /// A fencing counter: the last token handed out, kept until the clock has passed it (see
    /// `fencing_counter`). Held, never evicted: a counter lost before then could hand out a
    /// token that went back.
    FencingCounter(i64),
    /// Sliding-window segments: (segment end, permits counted in it), oldest first. A
    /// boxed slice, no larger than the segments: a new one, or one dropped, is a new slice,
    /// at most once per segment and key.
    Segments(Box<[(Moment, u64)]>),
    /// A token bucket: tokens left, and when they were last refilled.
    Bucket { tokens: u64, refilled_at: Moment },
    /// GCRA's theoretical arrival time.
    Tat(Moment),
    /// Stacked fixed windows, one per policy in policy order: (count, window end). A window
    /// whose end has passed counts nothing.
    Windows(Box<[(u64, Moment)]>),
    /// A semaphore: the capacity its permits were taken under, and each permit's owner token
    /// with its deadline (`None`: no expiry).
    Permits {
        capacity: u32,
        holders: Box<std::collections::HashMap<String, Option<Moment>>>,
    },
    /// A fenced lock's lease: its owner token (the entry's expiry is the lease's).
    LeaseOwner(Box<str>),
    /// A fenced value: the highest fencing token a write carried, and what it stored.
    Fenced { token: u64, value: Box<Vec<u8>> },
    /// A countdown latch's current generation.
    Latch(Box<LatchGeneration>),
    /// A latch's completed generations, oldest first: each one's id, the id of the
    /// count-down that completed it (`None`: it started complete), and when.
    LatchCompletions(Box<std::collections::VecDeque<(String, Option<String>, Moment)>>),
    /// A read-write lease set: each member (`w:`, `r:`, `q:`, `a:` or `p:` and a token or a
    /// waiter id, as Redis names them) with its deadline; the entry expires with the latest.
    RwLease(Box<std::collections::HashMap<String, Moment>>),
    /// A lease hash: each field with its owner token and its deadline; the entry expires with
    /// the latest.
    FieldLeases(Box<std::collections::HashMap<Vec<u8>, (String, Moment)>>),
    /// A rate limit's stored plan set: each field with its value, `version` among them;
    /// without expiry, held (it is configuration).
    PlanSet(Box<std::collections::BTreeMap<Vec<u8>, Vec<u8>>>),
    /// A session space: each lease id with its deadline, and each attached name with its
    /// lease id and value (live while its lease is); the entry expires with the latest lease.
    Sessions {
        leases: Box<std::collections::HashMap<String, Moment>>,
        entries: Box<AttachedKeys>,
    },
    /// An election: its candidates (each with its arrival, ms since the epoch, and value),
    /// in the order they lead, and its leader (candidate, term, value); without expiry.
    Election {
        candidates: Box<Vec<(u64, String, Vec<u8>)>>,
        leader: Option<Box<(String, u64, Vec<u8>)>>,
    },
}

/// A countdown latch's current generation: its id and count, and the count each of its
/// count-downs left, by the count-down's id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LatchGeneration {
    pub(crate) generation: Box<str>,
    pub(crate) count: u64,
    pub(crate) counted: std::collections::HashMap<String, u64>,
}

impl Value {
    /// Whether an entry holding this may be evicted when the store is full: rate-limit state
    /// (a window, a bucket, GCRA's arrival time), which always expires and whose loss costs
    /// a bounded over-admission. Never what is held (a lease, permits) nor a fencing counter,
    /// whose loss would be unsafe.
    fn is_evictable(&self, expires_at: Option<Moment>) -> bool {
        match self {
            Value::Segments(_)
            | Value::Bucket { .. }
            | Value::Tat(_)
            | Value::Windows(_)
            | Value::Int(_) => expires_at.is_some(),
            Value::FencingCounter(_)
            | Value::Permits { .. }
            | Value::LeaseOwner(_)
            | Value::Fenced { .. }
            | Value::Latch(_)
            | Value::LatchCompletions(_)
            | Value::RwLease(_)
            | Value::FieldLeases(_)
            | Value::PlanSet(_)
            | Value::Sessions { .. }
            | Value::Election { .. } => false,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) value: Value,
    /// When the entry expires, in the 8 bytes of [`Moment::encode`] (an `Option` would take
    /// 16 in every key's entry).
    expiry: u64,
    /// Identifies the expiry scheduled for this entry, so a stale schedule is ignored, and
    /// names the heap that holds it. Its deadline there is never later than `expires_at`,
    /// so that nothing is reclaimed late nor evicted out of its order.
    schedule: Schedule,
}

/// An entry's schedule: a number of its own, whose lowest bit says which heap holds its
/// deadline (set: the evictable entries'). One word, where a number and a flag took two in
/// every key's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Schedule(u64);

impl Schedule {
    fn is_evictable(self) -> bool {
        self.0 & 1 == 1
    }
}

impl Entry {
    /// When the entry expires; `None` when it does not.
    pub(crate) fn expires_at(&self) -> Option<Moment> {
        Moment::decode(self.expiry)
    }

    /// Replaces the value and expiry of `entry` (a key's live entry, if it has one) in place,
    /// as [`Store::insert`] would, when its schedule still holds for them: a step that has
    /// the entry at hand then looks its key up once, not twice. Gives `value` back,
    /// unchanged, when there is no entry or it must be scheduled again: for `insert`.
    pub(crate) fn replace_in_schedule(
        entry: Option<&mut Entry>,
        value: Value,
        expires_at: Option<Moment>,
    ) -> std::result::Result<(), Value> {
        let Some(entry) = entry else {
            return Err(value);
        };
        if !entry.keeps_schedule(value.is_evictable(expires_at), expires_at) {
            return Err(value);
        }
        entry.value = value;
        entry.expiry = Moment::encode(expires_at);
        Ok(())
    }

    /// Whether the entry's schedule still holds for a new expiry: the same heap, and an
    /// expiry no earlier than the current one, which its deadline is at or before. Such an
    /// expiry pushes nothing: the heap finds the entry's own expiry when
    /// it reaches the old deadline, and puts it back there.
    fn keeps_schedule(&self, evictable: bool, expires_at: Option<Moment>) -> bool {
        self.schedule.is_evictable() == evictable
            && matches!((self.expires_at(), expires_at), (Some(at), Some(new)) if new >= at)
    }
}

/// What became of a popped heap item: the entry it stood for is gone or scheduled again
/// since; or its expiry moved past the item's deadline, to this moment; or it was due, and
/// is removed.
enum Popped {
    Superseded,
    Moved(Moment),
    Removed,
}

/// Keys with optional expiry, holding at most `max_keys` live keys.
///
/// Each key is stored once, in its slot of the table; a deadline in a heap names its entry
/// by the key's hash and the entry's schedule, which no other entry shares. A key so costs
/// one allocation of its bytes alone, where a key shared by its entry and its deadlines
/// would carry a reference count too, and a deadline costs 24 bytes.
///
/// Expired entries are invisible at once and reclaimed through min-heaps of deadlines on
/// every access, so reclaiming costs O(log n) per expired key and a stream of new,
/// short-lived keys cannot grow the map past its bound. An entry's deadline is in one heap
/// of two: the evictable entries', which eviction takes from, or the held ones'; one heap
/// item per key, where rate-limit state is most of the keys.
///
/// The two kinds of entry are bounded apart:
/// - **Held** entries (leases, permits, fencing counters: see [`Value::is_evictable`]) take
///   up to `max_keys`; a new one evicts one rate-limit entry when the store is full, and is
///   refused with [`ErrorKind::CapacityExceeded`] only when the store is full of held
///   things.
/// - **Rate-limit** entries take what the held ones leave, less a [reserve](held_reserve)
///   kept free for held ones: at most `max_keys - max(held, reserve)`. A new one at that
///   bound evicts exactly one, the rate-limit entry nearest its expiry, and never more: a
///   client whose window is forgotten may be admitted again within it, a bounded
///   over-admission counted in [`evictions`](Self::evictions), rather than every new client
///   being refused.
///
/// So a flood of client keys can neither take the room of leases and permits nor evict
/// them, and held keys, however many, leave every remaining rate-limit entry in place.
#[derive(Debug)]
pub(crate) struct Store {
    entries: HashTable<Slot>,
    /// The keys' hashes, keyed at random per store (SipHash, as std's maps): a client
    /// cannot choose keys that collide.
    hasher: RandomState,
    /// The deadlines of the entries that are not evictable (what is held), the nearest first
    /// (superseded ones skipped).
    held: Deadlines,
    /// The deadlines of evictable entries, the nearest first (superseded ones skipped).
    evictable: Deadlines,
    max_keys: usize,
    /// The keys rate-limit state leaves free for held keys ([`held_reserve`] of `max_keys`,
    /// or none in a store for rate-limit state alone).
    held_reserve: usize,
    /// How many entries are evictable (rate-limit state); the others are held.
    evictable_len: usize,
    /// The number of the last schedule given (each is two more than the last, its lowest
    /// bit then set for an evictable entry's).
    next_schedule: u64,
    /// Rate-limit entries evicted to make room.
    evictions: u64,
}

/// A key and its entry, in the table.
#[derive(Debug)]
struct Slot {
    key: Box<[u8]>,
    entry: Entry,
}

/// A key's hash in the store's table: with a schedule, it finds the one entry a deadline
/// stands for.
type KeyHash = u64;

/// A min-heap of deadlines: each with the schedule it stands for and its key's hash.
type Deadlines = BinaryHeap<Reverse<(Moment, Schedule, KeyHash)>>;

/// The longest wait a full store's error suggests.
const FULL_RETRY_HINT: std::time::Duration = std::time::Duration::from_secs(60);

/// The share of a store's keys that rate-limit state cannot take: a quarter, at least one
/// key when the store has more than one.
fn held_reserve(max_keys: usize) -> usize {
    if max_keys > 1 {
        (max_keys / 4).max(1)
    } else {
        0
    }
}

impl Store {
    pub(crate) fn new(max_keys: usize) -> Self {
        Self::with_reserve(max_keys, held_reserve(max_keys))
    }

    /// A store for rate-limit state alone (a layer's fail-open fallback): every key of the
    /// bound is rate-limit state's, none kept for held keys.
    pub(crate) fn for_rate_limits(max_keys: usize) -> Self {
        Self::with_reserve(max_keys, 0)
    }

    fn with_reserve(max_keys: usize, held_reserve: usize) -> Self {
        Store {
            entries: HashTable::new(),
            hasher: RandomState::new(),
            held: BinaryHeap::new(),
            evictable: BinaryHeap::new(),
            max_keys,
            held_reserve,
            evictable_len: 0,
            next_schedule: 0,
            evictions: 0,
        }
    }

    /// How many rate-limit entries were evicted to make room.
    pub(crate) fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Live keys (after reclaiming what expired by `now`).
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn len(&mut self, now: Moment) -> usize {
        self.reclaim(now);
        self.entries.len()
    }

    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The live entry for `key`, if any.
    pub(crate) fn get_mut(&mut self, key: &[u8], now: Moment) -> Option<&mut Entry> {
        self.reclaim(now);
        let hash = self.hash(key);
        self.entry_mut(hash, key)
    }

    fn hash(&self, key: &[u8]) -> KeyHash {
        self.hasher.hash_one(key)
    }

    /// The entry stored under `key`, whose hash is `hash`.
    fn entry_mut(&mut self, hash: KeyHash, key: &[u8]) -> Option<&mut Entry> {
        self.entries
            .find_mut(hash, |slot| *slot.key == *key)
            .map(|slot| &mut slot.entry)
    }

    /// Stores `value` under `key`, replacing any previous value and expiry.
    pub(crate) fn insert(
        &mut self,
        key: &[u8],
        value: Value,
        expires_at: Option<Moment>,
        now: Moment,
    ) -> Result<()> {
        let evictable = value.is_evictable(expires_at);
        self.reclaim(now);
        let hash = self.hash(key);
        if let Some(entry) = self.entry_mut(hash, key) {
            let keeps_schedule = entry.keeps_schedule(evictable, expires_at);
            entry.value = value;
            entry.expiry = Moment::encode(expires_at);
            if !keeps_schedule {
                self.reschedule(hash, key, expires_at, evictable);
            }
            return Ok(());
        }
        if evictable {
            self.make_room_for_rate_limit_state(now)?;
        } else {
            self.ensure_room_for(1, now)?;
        }
        let schedule = self.schedule(hash, expires_at, evictable);
        let slot = Slot {
            key: Box::from(key),
            entry: Entry {
                value,
                expiry: Moment::encode(expires_at),
                schedule,
            },
        };
        let hasher = &self.hasher;
        self.entries
            .insert_unique(hash, slot, |slot| hasher.hash_one(&*slot.key));
        self.evictable_len += usize::from(evictable);
        // Only once the entry carries its schedule: a heap rebuilt before would leave its
        // new deadline out, and the entry would never be reclaimed nor evicted.
        self.compact_if_sparse();
        Ok(())
    }

    /// Gives the existing entry at `key` (whose hash is `hash`) a new schedule for
    /// `expires_at`.
    fn reschedule(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        expires_at: Option<Moment>,
        evictable: bool,
    ) {
        let schedule = self.schedule(hash, expires_at, evictable);
        if let Some(entry) = self.entry_mut(hash, key) {
            let was_evictable = entry.schedule.is_evictable();
            entry.schedule = schedule;
            // A value that changed kind moves between the two bounds.
            self.evictable_len =
                self.evictable_len + usize::from(evictable) - usize::from(was_evictable);
        }
        self.compact_if_sparse();
    }

    /// The entry that the heap item `(_, schedule, hash)` stands for, if it still does: no
    /// other entry has that schedule, and this one lost it if scheduled again since.
    fn scheduled_entry(&self, hash: KeyHash, schedule: Schedule) -> Option<&Entry> {
        self.entries
            .find(hash, |slot| slot.entry.schedule == schedule)
            .map(|slot| &slot.entry)
    }

    /// Removes the entry that the heap item `(deadline, schedule, hash)`, just popped,
    /// stands for if its expiry is at or before `due`; one probe of the table finds it and
    /// removes it.
    fn remove_if_due(
        &mut self,
        deadline: Moment,
        schedule: Schedule,
        hash: KeyHash,
        due: Moment,
    ) -> Popped {
        let Ok(found) = self
            .entries
            .find_entry(hash, |slot| slot.entry.schedule == schedule)
        else {
            return Popped::Superseded;
        };
        let entry = &found.get().entry;
        let at = entry.expires_at().map_or(deadline, |at| at.max(deadline));
        if at > due {
            return Popped::Moved(at);
        }
        // A step changes a value's kind, or its expiry, only through `insert`, `set_expiry`
        // or `replace_in_schedule`, which schedule it again in the heap that fits: what is
        // held never stands in the evictable one.
        debug_assert!(
            !schedule.is_evictable() || entry.value.is_evictable(entry.expires_at()),
            "an entry in the evictable heap holds what is held"
        );
        self.evictable_len -= usize::from(schedule.is_evictable());
        found.remove();
        Popped::Removed
    }

    /// What the heap item `(deadline, schedule, hash)` stands for now: `None` when its
    /// schedule is superseded (the entry is gone, or scheduled again since); else the entry's
    /// expiry, when it moved past `deadline` (the item is then pushed again, at that expiry,
    /// by the caller), or `deadline` itself.
    fn current(&self, deadline: Moment, schedule: Schedule, hash: KeyHash) -> Option<Moment> {
        let entry = self.scheduled_entry(hash, schedule)?;
        Some(entry.expires_at().map_or(deadline, |at| at.max(deadline)))
    }

    /// Whether `new_keys` keys that do not exist yet could be stored now.
    pub(crate) fn has_room_for(&mut self, new_keys: usize, now: Moment) -> bool {
        self.reclaim(now);
        self.entries.len().saturating_add(new_keys) <= self.max_keys
    }

    /// Makes room for `new_keys` held keys that do not exist yet, evicting rate-limit state
    /// if need be; fails with [`ErrorKind::CapacityExceeded`] when what is held fills the
    /// store. The error's [`retry_after`](Error::retry_after) is when the first key expires
    /// (`None` when no key expires: only a deletion can free space).
    pub(crate) fn ensure_room_for(&mut self, new_keys: usize, now: Moment) -> Result<()> {
        while !self.has_room_for(new_keys, now) {
            if !self.evict_one() {
                return Err(self.full(now));
            }
        }
        Ok(())
    }

    /// Makes room for one new rate-limit key: rate-limit state takes at most what the held
    /// entries leave, less the held reserve while they take less than it; at that bound the
    /// rate-limit entry nearest its expiry is evicted, one for one. Without room at all (what
    /// is held fills the store), the key is refused as a held one would be.
    fn make_room_for_rate_limit_state(&mut self, now: Moment) -> Result<()> {
        self.reclaim(now);
        let held = self.entries.len() - self.evictable_len;
        let room = self.max_keys.saturating_sub(held.max(self.held_reserve));
        while self.evictable_len >= room {
            if !self.evict_one() {
                return Err(self.full(now));
            }
        }
        Ok(())
    }

    /// Evicts the rate-limit entry nearest its expiry; `false` when there is none.
    fn evict_one(&mut self) -> bool {
        while let Some(Reverse((deadline, schedule, hash))) = self.evictable.pop() {
            match self.remove_if_due(deadline, schedule, hash, deadline) {
                Popped::Superseded => continue,
                // Its expiry moved on: it goes back in its place, which its schedule now
                // stands at.
                Popped::Moved(at) => {
                    self.push_deadline(at, schedule, hash);
                    continue;
                }
                Popped::Removed => {}
            }
            self.evictions += 1;
            tracing::debug!(
                evictions = self.evictions,
                "the memory backend is full; evicted the rate-limit state nearest its expiry"
            );
            return true;
        }
        false
    }

    /// The error of a store full of what is held. Its hint is when the first key expires,
    /// at most [`FULL_RETRY_HINT`]: a long lease's expiry (a day) is no useful
    /// `Retry-After`, and a release may free room much sooner.
    fn full(&mut self, now: Moment) -> Error {
        let frees_in = self
            .first_deadline()
            .map(|first| first.saturating_duration_since(now).min(FULL_RETRY_HINT));
        Error::new(
            ErrorKind::CapacityExceeded,
            format!(
                "the memory backend holds its maximum of {} live keys, all of them held (leases, \
                 permits, fencing counters), which are never evicted",
                self.max_keys
            ),
        )
        .with_retry_after(frees_in)
    }

    /// Deletes a key; its scheduled expiry is then ignored.
    pub(crate) fn remove(&mut self, key: &[u8]) {
        let hash = self.hash(key);
        if let Ok(found) = self.entries.find_entry(hash, |slot| *slot.key == *key) {
            self.evictable_len -= usize::from(found.get().entry.schedule.is_evictable());
            found.remove();
        }
    }

    /// Changes the expiry of a live key; returns whether the key existed.
    pub(crate) fn set_expiry(
        &mut self,
        key: &[u8],
        expires_at: Option<Moment>,
        now: Moment,
    ) -> bool {
        self.reclaim(now);
        let hash = self.hash(key);
        let Some(entry) = self.entry_mut(hash, key) else {
            return false;
        };
        let evictable = entry.value.is_evictable(expires_at);
        // A renewal that only moves the expiry later (a sliding window's, each request)
        // pushes nothing, as in `insert`.
        let keeps_schedule = entry.keeps_schedule(evictable, expires_at);
        entry.expiry = Moment::encode(expires_at);
        if !keeps_schedule {
            self.reschedule(hash, key, expires_at, evictable);
        }
        true
    }

    fn schedule(&mut self, hash: KeyHash, expires_at: Option<Moment>, evictable: bool) -> Schedule {
        self.next_schedule += 2;
        let schedule = Schedule(self.next_schedule | u64::from(evictable));
        if let Some(deadline) = expires_at {
            self.heap_mut(evictable)
                .push(Reverse((deadline, schedule, hash)));
        }
        schedule
    }

    /// The heap of evictable entries' deadlines, or of the held ones'.
    fn heap(&self, evictable: bool) -> &Deadlines {
        if evictable {
            &self.evictable
        } else {
            &self.held
        }
    }

    fn heap_mut(&mut self, evictable: bool) -> &mut Deadlines {
        if evictable {
            &mut self.evictable
        } else {
            &mut self.held
        }
    }

    /// The earliest expiry of a live key.
    fn first_deadline(&mut self) -> Option<Moment> {
        let held = self.first_deadline_in(false);
        let evictable = self.first_deadline_in(true);
        held.into_iter().chain(evictable).min()
    }

    /// The earliest expiry of a live key in one heap. The heap also holds the superseded
    /// deadlines of keys renewed or deleted since; those are dropped from its top on the way,
    /// so a full store refusing request after request does not scan its keys each time.
    fn first_deadline_in(&mut self, evictable: bool) -> Option<Moment> {
        while let Some(&Reverse((deadline, schedule, hash))) = self.heap(evictable).peek() {
            match self.current(deadline, schedule, hash) {
                Some(at) if at == deadline => return Some(deadline),
                current => {
                    self.heap_mut(evictable).pop();
                    if let Some(at) = current {
                        self.push_deadline(at, schedule, hash);
                    }
                }
            }
        }
        None
    }

    /// Puts an entry's schedule back in its heap at `at`, its expiry now.
    fn push_deadline(&mut self, at: Moment, schedule: Schedule, hash: KeyHash) {
        self.heap_mut(schedule.is_evictable())
            .push(Reverse((at, schedule, hash)));
    }

    /// Removes every entry whose deadline has passed.
    fn reclaim(&mut self, now: Moment) {
        self.reclaim_in(false, now);
        self.reclaim_in(true, now);
    }

    /// Removes every entry of one heap whose deadline has passed.
    fn reclaim_in(&mut self, evictable: bool, now: Moment) {
        while let Some(Reverse((deadline, _, _))) = self.heap(evictable).peek() {
            if *deadline > now {
                break;
            }
            let Some(Reverse((deadline, schedule, hash))) = self.heap_mut(evictable).pop() else {
                break;
            };
            // Renewed since it was scheduled: scheduled again, at its expiry.
            if let Popped::Moved(at) = self.remove_if_due(deadline, schedule, hash, now) {
                self.push_deadline(at, schedule, hash);
            }
        }
    }

    /// The deadlines both heaps hold, superseded ones included.
    #[cfg(test)]
    fn scheduled(&self) -> usize {
        self.held.len() + self.evictable.len()
    }

    /// Renewals leave superseded deadlines in the heaps; rebuild them when they dominate so
    /// that they stay proportional to the live keys.
    fn compact_if_sparse(&mut self) {
        let bound = 2 * self.entries.len() + 64;
        if self.held.len() > bound || self.evictable.len() > bound {
            // Both at once, in one pass over the entries: each at its expiry, in the heap
            // its schedule names.
            let (mut held, mut evictable) = (Vec::new(), Vec::new());
            for Slot { key, entry } in &self.entries {
                if let Some(deadline) = entry.expires_at() {
                    let item = Reverse((deadline, entry.schedule, self.hash(key)));
                    if entry.schedule.is_evictable() {
                        evictable.push(item);
                    } else {
                        held.push(item);
                    }
                }
            }
            self.held = BinaryHeap::from(held);
            self.evictable = BinaryHeap::from(evictable);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::clock::Clock;
    use std::time::Duration;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn an_entry_stays_within_five_words() {
        // Every key's slot in the table holds one, counted about twice over (a table past
        // seven eighths full doubles).
        assert!(size_of::<Entry>() <= 40, "{} bytes", size_of::<Entry>());
    }

    #[test]
    fn a_deadline_in_a_heap_stays_within_three_words() {
        // Every key with an expiry has one.
        let size = size_of::<Reverse<(Moment, Schedule, KeyHash)>>();
        assert!(size <= 24, "{size} bytes");
    }

    #[test]
    fn a_value_stays_within_three_words() {
        // Every key pays for the largest variant: a rare primitive's larger state is boxed.
        assert!(size_of::<Value>() <= 24, "{} bytes", size_of::<Value>());
    }

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_invisible_and_reclaimed() {
        let clock = Clock::new();
        let mut store = Store::new(10);
        let now = clock.now();
        store
            .insert(b"a", Value::Int(1), Some(now + SECOND), now)
            .unwrap();
        store.insert(b"b", Value::Int(2), None, now).unwrap();
        assert_eq!(store.len(now), 2);
        tokio::time::advance(SECOND).await;
        let now = clock.now();
        assert!(store.get_mut(b"a", now).is_none());
        assert_eq!(store.len(now), 1);
        assert_eq!(
            store.get_mut(b"b", now).map(|e| e.value.clone()),
            Some(Value::Int(2))
        );
    }

    /// Each key's deadline is one heap item, in the evictable heap or the held one: a
    /// rate-limit key pays for one, not two. Both heaps reclaim on time.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_is_in_one_heap() {
        let clock = Clock::new();
        let mut store = Store::new(10);
        let now = clock.now();
        store
            .insert(b"window", Value::Int(1), Some(now + SECOND), now)
            .unwrap();
        store
            .insert(
                b"lease",
                Value::LeaseOwner("owner".into()),
                Some(now + SECOND * 2),
                now,
            )
            .unwrap();
        assert_eq!((store.evictable.len(), store.held.len()), (1, 1));
        assert_eq!(store.first_deadline(), Some(now + SECOND));
        tokio::time::advance(SECOND).await;
        assert_eq!(store.len(clock.now()), 1, "the window is reclaimed");
        assert_eq!(store.first_deadline(), Some(now + SECOND * 2));
        assert!(!store.evict_one(), "a lease is never evicted");
        tokio::time::advance(SECOND).await;
        assert_eq!(store.len(clock.now()), 0, "the lease is reclaimed");
        assert_eq!(store.scheduled(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_new_keys_is_bounded() {
        let clock = Clock::new();
        let mut store = Store::new(100);
        for i in 0..10_000u32 {
            let now = clock.now();
            let key = i.to_be_bytes();
            match store.insert(&key, Value::Int(1), Some(now + SECOND), now) {
                Ok(()) => {}
                Err(err) => assert_eq!(err.kind(), ErrorKind::CapacityExceeded),
            }
            // Rate-limit keys live 1 s and arrive every 1 ms: once they fill their share (the
            // bound less the held reserve), each new one evicts the oldest; never more.
            let expected = (i as usize + 1).min(75);
            assert_eq!(store.len(now), expected);
            assert_eq!(store.scheduled(), expected, "one deadline per live key");
            tokio::time::advance(Duration::from_millis(1)).await;
        }
    }

    /// Held keys past the held reserve leave every rate-limit entry in place: a new one takes
    /// a free key, and evicts one of its own, the nearest its expiry, only at the bound.
    #[tokio::test(start_paused = true)]
    async fn held_keys_past_the_reserve_evict_no_rate_limit_state_for_free_room() {
        let clock = Clock::new();
        let mut store = Store::new(100);
        let now = clock.now();
        for i in 0..80u32 {
            let key = [b"held:".as_slice(), &i.to_be_bytes()].concat();
            store
                .insert(&key, Value::LeaseOwner("o".into()), None, now)
                .unwrap();
        }
        for (i, client) in [b"a", b"b", b"c"].into_iter().enumerate() {
            let expiry = now + SECOND * (10 + u32::try_from(i).unwrap());
            store
                .insert(client, Value::Int(1), Some(expiry), now)
                .unwrap();
        }
        for client in [b"a", b"b", b"c"] {
            assert!(store.get_mut(client, now).is_some(), "{client:?} evicted");
        }
        assert_eq!(store.evictions(), 0);
        // Up to the bound: 20 rate-limit keys beside 80 held ones, then one for one.
        for i in 0..17u32 {
            let key = [b"rl:".as_slice(), &i.to_be_bytes()].concat();
            store
                .insert(&key, Value::Int(1), Some(now + SECOND * 60), now)
                .unwrap();
        }
        assert_eq!((store.len(now), store.evictions()), (100, 0));
        store
            .insert(b"d", Value::Int(1), Some(now + SECOND * 60), now)
            .unwrap();
        assert_eq!((store.len(now), store.evictions()), (100, 1));
        assert!(
            store.get_mut(b"a", now).is_none(),
            "the nearest expiry goes"
        );
        assert!(store.get_mut(b"b", now).is_some());
        // Held keys that fill the store leave no room for rate-limit state; the hint is the
        // first expiry, a minute at most.
        let mut store = Store::new(4);
        for key in [b"h1", b"h2", b"h3", b"h4"] {
            store
                .insert(
                    key,
                    Value::LeaseOwner("o".into()),
                    Some(now + SECOND * 86_400),
                    now,
                )
                .unwrap();
        }
        let err = store
            .insert(b"w", Value::Int(1), Some(now + SECOND), now)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CapacityExceeded);
        assert_eq!(err.retry_after(), Some(SECOND * 60));
    }

    /// An entry replaced in place keeps its schedule only for an expiry no earlier than its
    /// current one and the same heap; otherwise the value comes back untouched, for `insert`.
    #[tokio::test(start_paused = true)]
    async fn an_entry_is_replaced_in_place_only_within_its_schedule() {
        let clock = Clock::new();
        let mut store = Store::new(10);
        let now = clock.now();
        store
            .insert(b"k", Value::Int(1), Some(now + SECOND), now)
            .unwrap();
        assert_eq!(
            Entry::replace_in_schedule(None, Value::Int(5), Some(now + SECOND)),
            Err(Value::Int(5)),
            "no entry"
        );
        let entry = store.get_mut(b"k", now);
        assert_eq!(
            Entry::replace_in_schedule(entry, Value::Int(2), Some(now + SECOND / 2)),
            Err(Value::Int(2)),
            "an earlier expiry"
        );
        let entry = store.get_mut(b"k", now);
        assert_eq!(
            Entry::replace_in_schedule(entry, Value::Int(3), None),
            Err(Value::Int(3)),
            "no expiry: not evictable any more"
        );
        let entry = store.get_mut(b"k", now).unwrap();
        assert_eq!(entry.value, Value::Int(1));
        assert_eq!(entry.expires_at(), Some(now + SECOND));
        let pushed = store.scheduled();
        let entry = store.get_mut(b"k", now);
        assert_eq!(
            Entry::replace_in_schedule(entry, Value::Int(4), Some(now + SECOND * 2)),
            Ok(())
        );
        assert_eq!(store.scheduled(), pushed, "nothing pushed");
        // Alive past the first expiry, gone at the second.
        tokio::time::advance(SECOND).await;
        assert_eq!(
            store.get_mut(b"k", clock.now()).map(|e| e.value.clone()),
            Some(Value::Int(4))
        );
        tokio::time::advance(SECOND).await;
        assert!(store.get_mut(b"k", clock.now()).is_none());
        assert_eq!(store.len(clock.now()), 0);
    }

    /// An expiry that only moves later keeps its schedule (nothing pushed), and the entry
    /// still expires at its latest expiry, not at the first one; one that moves earlier is
    /// scheduled again, and expires then.
    #[tokio::test(start_paused = true)]
    async fn renewals_keep_their_schedule_and_expire_on_time() {
        let clock = Clock::new();
        let mut store = Store::new(10);
        let start = clock.now();
        store
            .insert(b"k", Value::Int(1), Some(start + SECOND), start)
            .unwrap();
        let pushed = store.scheduled();
        for i in 1..=5u32 {
            let now = clock.now();
            store
                .insert(b"k", Value::Int(1), Some(start + SECOND * (i + 1)), now)
                .unwrap();
            assert_eq!(store.scheduled(), pushed, "renewal {i} pushed nothing");
            tokio::time::advance(SECOND).await;
        }
        // Now start + 5 s; the expiry stands at start + 6 s.
        assert!(store.get_mut(b"k", clock.now()).is_some(), "renewed");
        tokio::time::advance(SECOND - Duration::from_millis(1)).await;
        assert!(store.get_mut(b"k", clock.now()).is_some());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            store.get_mut(b"k", clock.now()).is_none(),
            "expired at its last expiry"
        );

        // Moved earlier: expires at the earlier time.
        let now = clock.now();
        store
            .insert(b"e", Value::Int(1), Some(now + 10 * SECOND), now)
            .unwrap();
        store
            .insert(b"e", Value::Int(1), Some(now + SECOND), now)
            .unwrap();
        tokio::time::advance(SECOND).await;
        assert!(store.get_mut(b"e", clock.now()).is_none());
    }

    /// After a renewal that kept its schedule, an eviction that found the entry's expiry
    /// moved on, and a renewal back to an earlier time, a full store still evicts the
    /// rate-limit entry nearest its actual expiry.
    #[tokio::test(start_paused = true)]
    async fn eviction_follows_expiries_after_renewals() {
        let clock = Clock::new();
        let mut store = Store::new(8); // room for 6 rate-limit keys, 2 held in reserve
        let now = clock.now();
        let at = |s: u32| now + SECOND * s;
        let insert = |store: &mut Store, key: &[u8], s: u32| {
            store.insert(key, Value::Int(1), Some(at(s)), now).unwrap();
        };
        insert(&mut store, b"k", 10);
        insert(&mut store, b"k", 30); // kept its schedule at 10 s
        insert(&mut store, b"x", 20);
        for key in [b"a", b"b", b"c", b"d"] {
            insert(&mut store, key, 100);
        }
        // Full: the eviction meets k at 10 s, puts it back at 30 s, and evicts x (20 s).
        insert(&mut store, b"y", 27);
        assert!(store.get_mut(b"x", now).is_none());
        // Back to 25 s, before where its schedule now stands.
        insert(&mut store, b"k", 25);
        insert(&mut store, b"z", 100);
        assert!(
            store.get_mut(b"k", now).is_none(),
            "k, nearest at 25 s, evicted"
        );
        assert!(store.get_mut(b"y", now).is_some(), "y, at 27 s, kept");
    }

    fn lease(owner: &str) -> Value {
        Value::LeaseOwner(owner.into())
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_full_of_held_keys_refuses_new_keys_but_updates_existing_ones() {
        let clock = Clock::new();
        let mut store = Store::new(1);
        let now = clock.now();
        store
            .insert(b"a", lease("x"), Some(now + SECOND), now)
            .unwrap();
        let err = store.insert(b"b", lease("y"), None, now).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CapacityExceeded);
        assert!(err.is_refused());
        assert_eq!(err.retry_after(), Some(SECOND), "when \"a\" expires");
        // A held key is never evicted, not even for rate-limit state.
        let err = store
            .insert(b"c", Value::Int(1), Some(now + SECOND), now)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CapacityExceeded);
        // Renewed later: the superseded deadline is not the answer.
        store
            .insert(b"a", lease("x"), Some(now + 2 * SECOND), now)
            .unwrap();
        let err = store.insert(b"b", lease("y"), None, now).unwrap_err();
        assert_eq!(err.retry_after(), Some(2 * SECOND));
        // Without an expiry, only a deletion frees space: no time to give.
        store.insert(b"a", Value::Int(3), None, now).unwrap();
        let err = store.insert(b"b", lease("y"), None, now).unwrap_err();
        assert_eq!(err.retry_after(), None);
        store
            .insert(b"a", lease("x"), Some(now + SECOND), now)
            .unwrap();
        // Once "a" expires, there is room again.
        tokio::time::advance(SECOND).await;
        let now = clock.now();
        store.insert(b"b", Value::Int(1), None, now).unwrap();
        assert_eq!(store.len(now), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limit_state_is_evicted_nearest_its_expiry_and_held_keys_keep_their_reserve() {
        let clock = Clock::new();
        let mut store = Store::new(8);
        let now = clock.now();
        // Rate-limit state takes at most 6 of 8 keys: the seventh evicts the one nearest its
        // expiry.
        for i in 0..6u8 {
            let expiry = now + SECOND * u32::from(10 - i);
            store
                .insert(&[i], Value::Int(1), Some(expiry), now)
                .unwrap();
        }
        store
            .insert(b"new", Value::Int(1), Some(now + SECOND * 20), now)
            .unwrap();
        assert_eq!(store.evictions(), 1);
        assert!(
            store.get_mut(&[5], now).is_none(),
            "the nearest expiry went"
        );
        assert!(store.get_mut(&[4], now).is_some());
        assert_eq!(store.len(now), 6);
        // What is held has its reserve, then takes the rate-limit state's room too.
        for held in 0..8u8 {
            store
                .insert(&[b'h', held], lease("t"), Some(now + SECOND), now)
                .unwrap();
        }
        assert_eq!(store.len(now), 8);
        assert_eq!(store.evictions(), 1 + 6, "every rate-limit entry made room");
        // Full of what is held: nothing more is evicted, a new key of either kind refused.
        let err = store.insert(b"late", lease("t"), None, now).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CapacityExceeded);
        let err = store
            .insert(b"client", Value::Int(1), Some(now + SECOND), now)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CapacityExceeded);
        // A fencing counter is held, with an expiry or without.
        assert!(!Value::FencingCounter(1).is_evictable(Some(now + SECOND)));
        assert!(!Value::Int(1).is_evictable(None));
    }

    /// Whatever renewal a compaction of the heaps falls on, the entry keeps its deadline: it
    /// is reclaimed when it passes, and evictable while it lasts.
    #[tokio::test(start_paused = true)]
    async fn a_compaction_never_loses_the_deadline_it_follows() {
        let clock = Clock::new();
        for renewals in 1..200u64 {
            let mut store = Store::new(10);
            let now = clock.now();
            store
                .insert(b"a", Value::Int(1), Some(now + SECOND), now)
                .unwrap();
            for i in 0..renewals {
                let deadline = now + SECOND + Duration::from_millis(i);
                store
                    .insert(b"a", Value::Int(1), Some(deadline), now)
                    .unwrap();
            }
            let later = now + SECOND + Duration::from_millis(renewals);
            assert!(
                store.get_mut(b"a", later).is_none(),
                "reclaimed after {renewals}"
            );
            let mut store = Store::new(10);
            store
                .insert(b"a", Value::Int(1), Some(now + SECOND), now)
                .unwrap();
            // Each expiry earlier than the last: each one scheduled again.
            for i in 0..renewals {
                let deadline = now + SECOND + Duration::from_millis(renewals - i);
                assert!(store.set_expiry(b"a", Some(deadline), now));
            }
            assert!(store.evict_one(), "evictable after {renewals}");
        }
    }

    /// An expiry moved later keeps its schedule; moved back to between the two, it is
    /// scheduled again there: the entry lives until then, and no longer.
    #[tokio::test(start_paused = true)]
    async fn an_expiry_moved_back_between_two_stands() {
        let clock = Clock::new();
        let mut store = Store::new(10);
        let now = clock.now();
        store
            .insert(b"k", Value::Int(1), Some(now + SECOND), now)
            .unwrap();
        assert!(store.set_expiry(b"k", Some(now + SECOND * 3), now));
        assert_eq!(store.scheduled(), 1, "later: nothing pushed");
        assert!(store.set_expiry(b"k", Some(now + SECOND * 2), now));
        assert_eq!(store.scheduled(), 2, "earlier: scheduled again");
        tokio::time::advance(SECOND * 2 - Duration::from_millis(1)).await;
        assert!(store.get_mut(b"k", clock.now()).is_some(), "alive before");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(store.get_mut(b"k", clock.now()).is_none(), "gone at 2 s");
    }

    /// Renewals keep either heap proportional to the live keys: one that moves an expiry
    /// later pushes nothing, one that moves it earlier pushes a deadline, and the superseded
    /// ones are compacted away; the latest expiry wins.
    #[tokio::test(start_paused = true)]
    async fn renewals_do_not_grow_the_deadline_heaps() {
        let clock = Clock::new();
        for value in [Value::Int(1), Value::LeaseOwner("owner".into())] {
            let mut store = Store::new(10);
            let now = clock.now();
            store
                .insert(b"a", value.clone(), Some(now + SECOND * 20), now)
                .unwrap();
            for i in 0..10_000u64 {
                let later = now + SECOND * 20 + Duration::from_millis(i);
                assert!(store.set_expiry(b"a", Some(later), now));
            }
            assert_eq!(store.scheduled(), 1, "moved later: nothing pushed");
            for i in 0..10_000u64 {
                let earlier = now + SECOND * 20 - Duration::from_millis(i);
                assert!(store.set_expiry(b"a", Some(earlier), now));
            }
            assert!(store.scheduled() <= 2 + 64 + 1, "{value:?}");
            // The last expiry, now + 10.001 s, stands; no superseded one removes the key.
            tokio::time::advance(SECOND * 10).await;
            assert!(store.get_mut(b"a", clock.now()).is_some(), "{value:?}");
            tokio::time::advance(Duration::from_millis(1)).await;
            assert!(store.get_mut(b"a", clock.now()).is_none(), "{value:?}");
        }
    }

    /// An entry whose value moves it from one heap to the other keeps its deadline there:
    /// rate-limit state replaced by a lease is never evicted and expires with the lease; a
    /// lease replaced by rate-limit state is evictable, and outlives the lease's deadline.
    #[tokio::test(start_paused = true)]
    async fn an_entry_that_changes_heaps_keeps_its_deadline() {
        let clock = Clock::new();
        let mut store = Store::new(10);
        let now = clock.now();
        let lease = || Value::LeaseOwner("owner".into());
        store
            .insert(b"k", Value::Int(1), Some(now + SECOND), now)
            .unwrap();
        store
            .insert(b"k", lease(), Some(now + SECOND * 2), now)
            .unwrap();
        assert!(!store.evict_one(), "a lease is never evicted");
        tokio::time::advance(SECOND).await;
        assert!(store.get_mut(b"k", clock.now()).is_some());
        tokio::time::advance(SECOND).await;
        assert!(store.get_mut(b"k", clock.now()).is_none());

        let now = clock.now();
        store
            .insert(b"k", lease(), Some(now + SECOND), now)
            .unwrap();
        store
            .insert(b"k", Value::Int(1), Some(now + SECOND * 2), now)
            .unwrap();
        tokio::time::advance(SECOND).await;
        assert!(store.get_mut(b"k", clock.now()).is_some());
        assert!(store.evict_one(), "rate-limit state is evictable");
        assert_eq!(store.len(clock.now()), 0);
    }
}
