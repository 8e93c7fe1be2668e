//! Local memory of recent rejections, to answer a flood of a hot key without Redis.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::RateLimitDecision;

/// Keys rejected with a known retry time, rejected locally until then.
///
/// Bounded: at most `max_keys` entries. When full, expired entries are swept (at most once
/// per earliest expiry, so a full cache of live entries costs nothing per insert) and, if
/// none expired, the new rejection is simply not cached: the cache is only a shortcut and
/// the backend still decides.
#[derive(Debug)]
pub(crate) struct DenyCache {
    max_keys: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    entries: HashMap<Vec<u8>, Entry>,
    /// No entry expires before this: sweeping earlier would find nothing.
    next_sweep: Option<Instant>,
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
        DenyCache {
            max_keys,
            state: Mutex::new(State {
                entries: HashMap::new(),
                next_sweep: None,
            }),
        }
    }

    /// A local rejection for `key` if a request of at most `permits` was rejected and its
    /// retry time has not come yet; the times in it are brought up to date.
    pub(crate) fn check(&self, key: &[u8], permits: u64) -> Option<RateLimitDecision> {
        let now = Instant::now();
        let mut state = self.lock();
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
        let mut state = self.lock();
        if !state.entries.contains_key(key) && state.entries.len() >= self.max_keys {
            if state.next_sweep.is_some_and(|at| now < at) {
                return;
            }
            state.entries.retain(|_, entry| entry.until > now);
            state.next_sweep = state.entries.values().map(|entry| entry.until).min();
            if state.entries.len() >= self.max_keys {
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
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Entries are plain values: a panic cannot leave one half-written.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let cache = DenyCache::new(100);
        for i in 0..10_000u32 {
            cache.remember(&i.to_be_bytes(), 1, &rejection(50));
            tokio::time::advance(Duration::from_millis(1)).await;
            assert!(cache.lock().entries.len() <= 100);
        }
        // Expired entries made room for recent ones.
        assert!(cache.check(&9_999u32.to_be_bytes(), 1).is_some());
    }
}
