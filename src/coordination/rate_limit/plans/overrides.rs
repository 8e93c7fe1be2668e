//! Customers' overrides of stored plans, at scale: kept in the backend beside the plan set
//! (one hash, a quota per customer), and in each process only those its requests met, in a
//! bounded cache that every change to them empties.
//!
//! A million customers with overrides are a million fields in Redis and at most
//! [`DEFAULT_OVERRIDE_CACHE`] (or the configured bound) entries in each process; the first
//! request of a customer the cache does not hold costs one read of its field (also for a
//! customer without an override: that answer is kept too), later ones nothing. Customers
//! with the same quota share one limiter (up to 1,024 distinct quotas at once).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::table::Plan;
use crate::coordination::rate_limit::Quotas;

/// How many customers' overrides (or their absence) a process keeps by default.
pub const DEFAULT_OVERRIDE_CACHE: usize = 10_000;

/// How many distinct override quotas a process keeps a limiter for; a new one beyond them
/// takes the place of another.
const MAX_OVERRIDE_QUOTAS: usize = 1_024;

/// An override's quotas and the default plan's windows it was checked against.
type PlanKey = (Quotas, Box<[Duration]>);

/// What a process knows of the customers' overrides.
pub(crate) struct OverrideCache {
    capacity: usize,
    /// Counts the cache's emptyings: a lookup that began before one does not keep its
    /// answer, which may be older than the change that emptied it.
    generation: AtomicU64,
    entries: Mutex<HashMap<Box<[u8]>, Option<Quotas>>>,
    /// One plan per distinct override quota and default plan's windows (which a sliding
    /// window's or a stacked limiter's plans share), shared by the customers that have it.
    plans: Mutex<HashMap<PlanKey, Arc<Plan>>>,
}

impl OverrideCache {
    pub(crate) fn new(capacity: usize) -> Self {
        OverrideCache {
            capacity: capacity.max(1),
            generation: AtomicU64::new(0),
            entries: Mutex::new(HashMap::new()),
            plans: Mutex::new(HashMap::new()),
        }
    }

    /// What the cache holds of `customer`: its override, that it has none, or nothing
    /// (`None`: look it up).
    pub(crate) fn get(&self, customer: &[u8]) -> Option<Option<Quotas>> {
        lock(&self.entries).get(customer).cloned()
    }

    /// The generation a lookup starts in.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Keeps what a lookup begun in `generation` found of `customer`, unless the cache was
    /// emptied since; a full cache gives up an entry for it.
    pub(crate) fn insert(&self, customer: &[u8], generation: u64, found: Option<Quotas>) {
        let mut entries = lock(&self.entries);
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        if entries.len() >= self.capacity
            && !entries.contains_key(customer)
            && let Some(evicted) = entries.keys().next().cloned()
        {
            entries.remove(&evicted);
        }
        entries.insert(customer.into(), found);
    }

    /// Forgets every customer: the overrides changed.
    pub(crate) fn clear(&self) {
        let mut entries = lock(&self.entries);
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }

    /// The plan shared by the customers whose override is `quota` while the default plan's
    /// windows are `windows`, made by `make` the first time (which checks the override
    /// against them); a full map gives up an entry for it.
    pub(crate) fn plan<E>(
        &self,
        quota: &Quotas,
        windows: Box<[Duration]>,
        make: impl FnOnce() -> Result<Plan, E>,
    ) -> Result<Arc<Plan>, E> {
        let mut plans = lock(&self.plans);
        let key = (quota.clone(), windows);
        if let Some(plan) = plans.get(&key) {
            return Ok(plan.clone());
        }
        let plan = Arc::new(make()?);
        if plans.len() >= MAX_OVERRIDE_QUOTAS
            && let Some(evicted) = plans.keys().next().cloned()
        {
            plans.remove(&evicted);
        }
        plans.insert(key, plan.clone());
        Ok(plan)
    }

    /// How many customers it holds.
    pub(crate) fn held(&self) -> usize {
        lock(&self.entries).len()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::rate_limit::Quota;

    #[test]
    fn a_lookup_older_than_a_change_is_not_kept_and_the_bound_holds() {
        let cache = OverrideCache::new(2);
        let before = cache.generation();
        cache.clear();
        cache.insert(b"acme", before, Some(Quota::per_minute(20).into()));
        assert_eq!(cache.get(b"acme"), None, "begun before the change");
        let now = cache.generation();
        cache.insert(b"acme", now, Some(Quota::per_minute(20).into()));
        cache.insert(b"beta", now, None);
        cache.insert(b"gamma", now, None);
        assert_eq!(cache.held(), 2);
        assert_eq!(cache.get(b"gamma"), Some(None));
    }
}
