//! The in-process backend: the same steps as Redis, for one process.
//!
//! Use it when an application runs as a single instance, for local development (the
//! quickstart runs on it when no Redis URL is given) and in unit tests. Its limits are not
//! shared between processes.
//!
//! Time comes from a monotonic clock built on tokio's `Instant`, counted in whole
//! microseconds (as the Lua scripts count the server's), so tests can call
//! `tokio::time::pause()` and `advance()` to move windows and leases forward instantly.
//! Deadlines reach some 584,000 years past the backend's creation, so a fixed window on it
//! lasts at most 2^52 ms (about 142,000 years).
//!
//! # Capacity
//! The number of live keys is bounded ([`DEFAULT_MAX_KEYS`]); expired keys are reclaimed as
//! time passes. Two kinds of key share the bound, each bounded on its own terms:
//! - **What is held** (leases, permits, latches, sessions, elections, fencing counters while
//!   a token of theirs can still matter) is never evicted. It may take the whole bound: a
//!   new held key evicts one rate-limit key when the store is full, and a step that would
//!   create a held key in a store full of held things fails with
//!   [`ErrorKind::CapacityExceeded`](crate::ErrorKind::CapacityExceeded).
//! - **Rate-limit state** (windows, buckets, arrival times) takes at most what the held keys
//!   leave, less a quarter of the bound kept free for held keys while they take less than
//!   that. A new rate-limit key at that bound evicts exactly one, the rate-limit key nearest
//!   its expiry: that client may be admitted again within its window (one client per
//!   eviction, counted by [`MemoryBackend::evictions`]), rather than every new client being
//!   refused. No other client's state is touched, however many keys are held.

pub(crate) mod clock;
mod store;

use crate::backend::key_bytes::KeyBytes;

pub(crate) use store::{Entry, LatchGeneration, Store, Value};

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use self::clock::{Clock, Moment};
use crate::backend::KeyPrefix;
use crate::error::{Error, Result};

/// Default bound on the number of live keys.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// The in-process backend. Cheap to clone; clones share state.
///
/// # Example
///
/// ```
/// use leasehold::backend::memory::MemoryBackend;
///
/// let backend = MemoryBackend::builder()
///     .max_keys(10_000)
///     .key_prefix("myapp:")
///     .build()?;
/// assert_eq!(backend.max_keys(), 10_000);
/// # #[cfg(feature = "test-util")]
/// assert_eq!(backend.len(), 0);
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    shared: Arc<Shared>,
}

struct Shared {
    store: Mutex<Store>,
    clock: Clock,
    prefix: KeyPrefix,
}

impl MemoryBackend {
    /// A backend with default settings: no prefix, at most [`DEFAULT_MAX_KEYS`] keys.
    pub fn new() -> Self {
        Self::with_settings(DEFAULT_MAX_KEYS, KeyPrefix::default())
    }

    /// Starts configuring a backend.
    pub fn builder() -> MemoryBackendBuilder {
        MemoryBackendBuilder {
            max_keys: DEFAULT_MAX_KEYS,
            prefix: KeyPrefix::default(),
        }
    }

    fn with_settings(max_keys: usize, prefix: KeyPrefix) -> Self {
        Self::with_store(Store::new(max_keys), prefix)
    }

    /// A backend for rate-limit state alone, all of whose `max_keys` keys it may take (a
    /// layer's fail-open fallback, which holds nothing).
    pub(crate) fn for_rate_limits(max_keys: usize) -> Self {
        Self::with_store(Store::for_rate_limits(max_keys), KeyPrefix::default())
    }

    fn with_store(store: Store, prefix: KeyPrefix) -> Self {
        MemoryBackend {
            shared: Arc::new(Shared {
                store: Mutex::new(store),
                clock: Clock::new(),
                prefix,
            }),
        }
    }

    /// The backend's clock as a duration since the Unix epoch, in whole microseconds.
    /// Monotonic: it follows tokio's clock from the moment the backend was created.
    pub fn now(&self) -> Duration {
        self.shared.clock.since_epoch(self.shared.clock.now())
    }

    /// The number of live keys. A test hook (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn len(&self) -> usize {
        let now = self.shared.clock.now();
        self.lock_store().len(now)
    }

    /// The members of the read-write lease set stored under the user key `key` (holders
    /// and waiters, as Redis names them: `w:`, `r:`, `q:`, ...), empty when there is none.
    /// A test hook (feature `test-util`), for tests that wait until a waiter is recorded.
    #[cfg(feature = "test-util")]
    pub fn rw_lease_members(&self, key: &[u8]) -> Vec<String> {
        let now = self.shared.clock.now();
        let physical = self.physical_key(key);
        match self
            .lock_store()
            .get_mut(&physical, now)
            .map(|entry| &entry.value)
        {
            Some(store::Value::RwLease(members)) => members.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Whether no key is live. A test hook (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on live keys.
    pub fn max_keys(&self) -> usize {
        self.lock_store().max_keys()
    }

    /// How many rate-limit entries were evicted so far to make room for new keys in a full
    /// backend: each one a client that may be admitted again within its window. A number
    /// that grows says the bound is too small for the keys in use (or that a flood of client
    /// keys is under way).
    pub fn evictions(&self) -> u64 {
        self.lock_store().evictions()
    }

    /// The configured key prefix.
    pub fn key_prefix(&self) -> &[u8] {
        self.shared.prefix.as_bytes()
    }

    /// Runs one atomic step on the store at the current instant with the physical keys.
    pub(crate) fn step<R>(&self, f: impl FnOnce(&mut Store, Moment) -> R) -> R {
        let now = self.shared.clock.now();
        f(&mut self.lock_store(), now)
    }

    /// Runs one step at once: for the steps' own tests.
    #[cfg(test)]
    pub(crate) fn run<S: crate::backend::steps::MemoryStep>(&self, step: S) -> Result<S::Reply> {
        step.in_memory(self)
    }

    /// The backend's clock, for steps that align on the epoch.
    pub(crate) fn clock(&self) -> Clock {
        self.shared.clock
    }

    /// The key stored for a user key: the prefix, `|`, then the key (as in Redis). Built
    /// on the stack when short, as most are: a decision then allocates nothing for its key
    /// (the store copies it only to keep a new one).
    pub(crate) fn physical_key(&self, key: &[u8]) -> KeyBytes {
        KeyBytes::concat(self.shared.prefix.written(), key)
    }

    fn lock_store(&self) -> MutexGuard<'_, Store> {
        // Steps validate before they write, so a panic cannot leave a half-applied step.
        self.shared
            .store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The error of a step that finds another primitive's state under its user key `key`.
pub(crate) fn other_state(key: &[u8], primitive: &str) -> Error {
    Error::corrupt_state(
        key,
        format_args!("the {primitive} key holds another primitive's state"),
    )
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("prefix", &self.shared.prefix)
            .field("max_keys", &self.max_keys())
            .finish_non_exhaustive()
    }
}

/// Configures a [`MemoryBackend`].
///
/// # Example
///
/// ```
/// use leasehold::backend::memory::MemoryBackend;
///
/// let backend = MemoryBackend::builder().max_keys(1_000).build()?;
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct MemoryBackendBuilder {
    max_keys: usize,
    prefix: KeyPrefix,
}

impl MemoryBackendBuilder {
    /// The most live keys the backend holds. Must be at least 1.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// A binary-safe prefix put in front of every key, as on Redis.
    pub fn key_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = KeyPrefix::new(prefix);
        self
    }

    /// Builds the backend; fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when `max_keys` is 0.
    pub fn build(self) -> Result<MemoryBackend> {
        if self.max_keys == 0 {
            return Err(Error::invalid_argument(
                "the memory backend needs room for at least one key",
            ));
        }
        Ok(MemoryBackend::with_settings(self.max_keys, self.prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::steps::MemoryStep;
    use crate::backend::steps::fixed_window::FixedWindowStep;
    use crate::backend::steps::gcra::GcraStep;
    use crate::backend::steps::hash_lease::{
        FieldAcquireStep, FieldReleaseStep, FieldRenewStep, FieldStep, FieldVerifyStep,
    };
    use crate::backend::steps::rw_lease::{
        RwAcquireStep, RwDowngradeStep, RwReleaseStep, RwRenewStep, RwStep, RwVerifyStep,
    };
    use crate::backend::steps::sliding_window::SlidingWindowStep;
    use crate::backend::steps::stacked_window::StackedWindowStep;
    use crate::backend::steps::token_bucket::TokenBucketStep;
    use crate::error::ErrorKind;

    /// Every step finds another primitive's state under its key corrupt, and leaves it.
    #[tokio::test]
    async fn steps_refuse_another_primitives_state() {
        let backend = MemoryBackend::new();
        let stored = |value: Value| {
            backend
                .step(|store, now| store.insert(&backend.physical_key(b"k"), value, None, now))
                .expect("insert");
        };
        let unchanged = |value: Value| {
            let now_value = backend.step(|store, now| {
                store
                    .get_mut(&backend.physical_key(b"k"), now)
                    .map(|e| e.value.clone())
            });
            assert_eq!(now_value, Some(value));
        };
        let (key, permits) = (b"k".as_slice(), 1);

        let tat = Value::Tat(backend.clock().now());
        stored(tat.clone());
        let errors = [
            MemoryStep::in_memory(
                &FixedWindowStep {
                    key,
                    permits,
                    limit: 5,
                    window_ms: 1_000,
                    admitted_only: false,
                },
                &backend,
            )
            .map(drop),
            MemoryStep::in_memory(
                &SlidingWindowStep {
                    key,
                    permits,
                    limit: 5,
                    window_ms: 1_000,
                    segment_ms: 100,
                },
                &backend,
            )
            .map(drop),
            MemoryStep::in_memory(
                &TokenBucketStep {
                    key,
                    permits,
                    limit: 5,
                    tokens_per_period: 1,
                    period_ms: 1_000,
                },
                &backend,
            )
            .map(drop),
            MemoryStep::in_memory(
                &StackedWindowStep {
                    key,
                    permits,
                    windows: &[(5, 1_000), (50, 60_000)],
                    shadows: 0,
                },
                &backend,
            )
            .map(drop),
        ];
        for result in errors {
            assert_eq!(result.expect_err("corrupt").kind(), ErrorKind::CorruptState);
        }
        unchanged(tat);

        stored(Value::Int(7));
        let err = MemoryStep::in_memory(
            &GcraStep {
                key,
                permits,
                interval_us: 1_000,
                burst: 5,
            },
            &backend,
        )
        .expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState);
        unchanged(Value::Int(7));

        // Every step of the read-write and hash-field leases, on a counter.
        let (token, lease_ms) = ("t", 1_000);
        let rw = RwStep { key, token };
        let field = FieldStep {
            key,
            field: b"f",
            token,
        };
        let errors = [
            MemoryStep::in_memory(
                &RwAcquireStep {
                    key,
                    counter: b"{c}:fence",
                    write: true,
                    token,
                    lease_ms,
                    not_after_ms: 0,
                    waiting: Some(("w", 1_000)),
                },
                &backend,
            )
            .map(drop),
            MemoryStep::in_memory(
                &RwRenewStep {
                    lease: rw,
                    lease_ms,
                },
                &backend,
            )
            .map(drop),
            MemoryStep::in_memory(&RwVerifyStep(rw), &backend).map(drop),
            MemoryStep::in_memory(&RwReleaseStep(rw), &backend).map(drop),
            MemoryStep::in_memory(&RwDowngradeStep(rw), &backend).map(drop),
            MemoryStep::in_memory(
                &FieldAcquireStep {
                    lease: field,
                    lease_ms,
                    not_after_ms: 0,
                },
                &backend,
            )
            .map(drop),
            MemoryStep::in_memory(
                &FieldRenewStep {
                    lease: field,
                    lease_ms,
                },
                &backend,
            )
            .map(drop),
            MemoryStep::in_memory(&FieldVerifyStep(field), &backend).map(drop),
            MemoryStep::in_memory(&FieldReleaseStep(field), &backend).map(drop),
        ];
        for result in errors {
            assert_eq!(result.expect_err("corrupt").kind(), ErrorKind::CorruptState);
        }
        unchanged(Value::Int(7));
    }

    #[tokio::test(start_paused = true)]
    async fn clock_follows_paused_time() {
        let backend = MemoryBackend::new();
        let before = backend.now();
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(backend.now() - before, Duration::from_millis(1500));
    }
}
