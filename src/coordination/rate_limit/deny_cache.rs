//! Local memory of recent rejections, to answer a flood of a hot key without Redis.

use std::cmp::Reverse;
use std::collections::hash_map::RandomState;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::RateLimitDecision;

/// Keys rejected with a known retry time, rejected locally until then.
///
/// Bounded: at most `max_keys` entries, spread over [`SHARDS`] shards by a hash of the key,
/// each bounded by its share (rounded down). When a shard is full, its expired entries are taken from the
/// top of a min-heap of their expiries (O(log n) each, never a scan of the cache, however
/// many distinct keys flood it) and, if none expired, the new rejection is simply not
/// cached: the cache is only a shortcut and the backend still decides.
///
/// Sharded because every request of a layer asks it: with one lock, a flood answered from
/// the cache on several cores would queue every decision behind one mutex.
#[derive(Debug)]
pub(crate) struct DenyCache {
    max_keys_per_shard: usize,
    hasher: RandomState,
    shards: Box<[Mutex<State>]>,
}

/// How many locks share a cache's entries: enough that the cores of a large machine rarely
/// meet on one, few enough that a small cache keeps room in each (a cache of fewer keys
/// than this has fewer shards).
const SHARDS: usize = 16;

#[derive(Debug)]
struct State {
    entries: HashMap<Vec<u8>, Entry>,
    /// Each entry's expiry with its key, the earliest first; an item whose entry was
    /// replaced or removed since is skipped when it comes up.
    expiries: BinaryHeap<Reverse<(Instant, Vec<u8>)>>,
}

#[derive(Debug, Clone)]
struct Entry {
    /// The smallest request that was rejected: smaller ones may still fit.
    permits: u64,
    until: Instant,
    decision: RateLimitDecision,
    /// The wait the decision gave: from when it was decided until `until`.
    wait: Duration,
}

impl DenyCache {
    pub(crate) fn new(max_keys: usize) -> Self {
        Self::sharded(max_keys, SHARDS)
    }

    /// At most `max_keys` entries over at most `shards` shards, each with room for one at
    /// least (the shares round down: never more than `max_keys` in all).
    fn sharded(max_keys: usize, shards: usize) -> Self {
        let max_keys = max_keys.max(1);
        let shards = shards.clamp(1, max_keys);
        DenyCache {
            max_keys_per_shard: max_keys / shards,
            hasher: RandomState::new(),
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(State {
                        entries: HashMap::new(),
                        expiries: BinaryHeap::new(),
                    })
                })
                .collect(),
        }
    }

    /// A local rejection for `key` if a request of at most `permits` was rejected and its
    /// retry time has not come yet; the times in it are brought up to date.
    pub(crate) fn check(&self, key: &[u8], permits: u64) -> Option<RateLimitDecision> {
        let now = Instant::now();
        let mut state = self.lock(key);
        let entry = state.entries.get(key)?;
        if now >= entry.until {
            state.entries.remove(key);
            return None;
        }
        if permits < entry.permits {
            return None;
        }
        // Every policy's state is brought up to date, not only the binding one. One
        // subtraction of instants, the cost of this answer's clock arithmetic.
        let left = entry.until - now;
        Some(
            entry
                .decision
                .aged_rejection(entry.wait.saturating_sub(left), left),
        )
    }

    /// Remembers a rejection that carries a retry time.
    pub(crate) fn remember(&self, key: &[u8], permits: u64, decision: &RateLimitDecision) {
        let Some(wait) = decision.retry_after() else {
            return;
        };
        let now = Instant::now();
        let until = crate::time::after(now, wait);
        let mut state = self.lock(key);
        if !state.entries.contains_key(key) && state.entries.len() >= self.max_keys_per_shard {
            state.reclaim(now);
            if state.entries.len() >= self.max_keys_per_shard {
                return;
            }
        }
        let permits = state
            .entries
            .get(key)
            .filter(|entry| entry.until > now)
            .map_or(permits, |entry| entry.permits.min(permits));
        state.entries.insert(
            key.to_vec(),
            Entry {
                permits,
                until,
                decision: decision.clone(),
                wait,
            },
        );
        state.expiries.push(Reverse((until, key.to_vec())));
        state.compact_if_sparse();
    }

    /// The shard that holds `key`, locked.
    fn lock(&self, key: &[u8]) -> std::sync::MutexGuard<'_, State> {
        // The shard count is at most SHARDS: the hash's remainder fits a usize anywhere.
        let shard = (self.hasher.hash_one(key) % self.shards.len() as u64) as usize;
        // Entries are plain values: a panic cannot leave one half-written.
        self.shards[shard]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().map_or(0, |state| state.entries.len()))
            .sum()
    }
}

impl State {
    /// Removes the entries expired by `now`, the earliest first, from the top of the heap.
    fn reclaim(&mut self, now: Instant) {
        while let Some(Reverse((until, _))) = self.expiries.peek() {
            if *until > now {
                break;
            }
            let Some(Reverse((until, key))) = self.expiries.pop() else {
                break;
            };
            // Only the entry this item stands for: one remembered again since is kept.
            if self
                .entries
                .get(&key)
                .is_some_and(|entry| entry.until == until)
            {
                self.entries.remove(&key);
            }
        }
    }

    /// Entries remembered again, or removed, leave their old items in the heap: rebuilt
    /// when those dominate, so that it stays proportional to the entries.
    fn compact_if_sparse(&mut self) {
        if self.expiries.len() > 2 * self.entries.len() + 64 {
            self.expiries = self
                .entries
                .iter()
                .map(|(key, entry)| Reverse((entry.until, key.clone())))
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rejection(wait_ms: u64) -> RateLimitDecision {
        let wait = Duration::from_millis(wait_ms);
        RateLimitDecision::new(false, 10, 0, wait, Some(wait))
    }

    #[tokio::test(start_paused = true)]
    async fn rejects_locally_until_the_retry_time() {
        let cache = DenyCache::new(10);
        cache.remember(b"k", 1, &rejection(1000));
        tokio::time::advance(Duration::from_millis(400)).await;
        let cached = cache.check(b"k", 1).expect("cached");
        assert_eq!(cached.retry_after(), Some(Duration::from_millis(600)));
        assert_eq!(cached.reset_after(), Duration::from_millis(600));
        assert!(cache.check(b"other", 1).is_none());
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(cache.check(b"k", 1).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn smaller_requests_still_ask_the_backend() {
        let cache = DenyCache::new(10);
        cache.remember(b"k", 5, &rejection(1000));
        assert!(cache.check(b"k", 4).is_none());
        assert!(cache.check(b"k", 5).is_some());
        // A grant carries no retry time: nothing to cache.
        cache.remember(
            b"g",
            1,
            &RateLimitDecision::new(true, 10, 9, Duration::ZERO, None),
        );
        assert!(cache.check(b"g", 1).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn stays_bounded_under_a_flood_of_keys() {
        // One shard: with several, the last key's share may be full of live entries by
        // chance (the hash is seeded at random), and it would not be remembered.
        let cache = DenyCache::sharded(100, 1);
        for i in 0..10_000u32 {
            cache.remember(&i.to_be_bytes(), 1, &rejection(50));
            tokio::time::advance(Duration::from_millis(1)).await;
            assert!(cache.len() <= 100);
        }
        // Expired entries made room for recent ones.
        assert!(cache.check(&9_999u32.to_be_bytes(), 1).is_some());
    }

    /// Full of live entries, a new key is not cached and nothing is scanned; an entry
    /// remembered again keeps its place however its old expiry comes up; the heap stays
    /// proportional to the entries.
    #[tokio::test(start_paused = true)]
    async fn expiries_come_off_the_heap_in_order_and_stay_proportional() {
        // One shard: which entries share one decides what a full one does.
        let cache = DenyCache::sharded(3, 1);
        cache.remember(b"a", 1, &rejection(100));
        cache.remember(b"b", 1, &rejection(200));
        cache.remember(b"c", 1, &rejection(300));
        cache.remember(b"d", 1, &rejection(300));
        assert!(cache.check(b"d", 1).is_none(), "full of live entries");
        // a again, for longer: its first expiry comes up first, and must not remove it.
        cache.remember(b"a", 1, &rejection(1_000));
        tokio::time::advance(Duration::from_millis(150)).await;
        cache.remember(b"e", 1, &rejection(300));
        assert!(cache.check(b"a", 1).is_some(), "remembered again, kept");
        assert!(cache.check(b"e", 1).is_none(), "nothing had expired");
        tokio::time::advance(Duration::from_millis(100)).await;
        cache.remember(b"e", 1, &rejection(300));
        assert!(cache.check(b"e", 1).is_some(), "b's room");
        for _ in 0..1_000 {
            cache.remember(b"a", 1, &rejection(1_000));
        }
        let state = cache.lock(b"a");
        assert!(state.expiries.len() <= 2 * state.entries.len() + 64);
    }

    /// A decision held up in one shard (a long remember, a preempted thread) holds up no
    /// decision on a key of another: with one lock for the cache, this check would wait.
    #[test]
    fn a_key_of_another_shard_is_decided_while_one_is_locked() {
        // Rejections of a minute: on the real clock, however slow the machine.
        let cache = std::sync::Arc::new(DenyCache::new(1_000));
        cache.remember(b"held", 1, &rejection(60_000));
        let shard_of = |key: &[u8]| cache.hasher.hash_one(key) % cache.shards.len() as u64;
        let other = (0u32..)
            .map(|i| i.to_be_bytes())
            .find(|key| shard_of(key) != shard_of(b"held"))
            .expect("16 shards: a key of another one comes up");
        cache.remember(&other, 1, &rejection(60_000));
        let held = cache.lock(b"held");
        let (answered, answer) = std::sync::mpsc::channel();
        let checker = std::sync::Arc::clone(&cache);
        let thread = std::thread::spawn(move || {
            let _ = answered.send(checker.check(&other, 1).is_some());
        });
        let cached = answer.recv_timeout(Duration::from_secs(10));
        drop(held);
        let _ = thread.join();
        assert_eq!(cached, Ok(true), "decided while another shard was locked");
    }
}
