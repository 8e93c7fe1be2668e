//! The capacities of a keyed semaphore, named so that they cannot be swapped.

/// How many permits a [`KeyedSemaphore`](super::KeyedSemaphore) (or a
/// [concurrency-limit layer](crate::layer::concurrency_limit::RedisConcurrencyLimitLayer))
/// hands out: for each client key, in all, or both.
///
/// Each side is named where it is written, so the two numbers cannot be swapped, and at
/// least one is always given. A capacity of 0 is refused when the semaphore is made.
///
/// # Example
///
/// ```
/// use leasehold::coordination::semaphore::Capacity;
///
/// // At most 2 per client and 100 in all.
/// let both = Capacity::per_key(2).and_global(100);
/// assert_eq!((both.of_each_key(), both.in_all()), (Some(2), Some(100)));
/// // Only a total: every client shares it.
/// assert_eq!(Capacity::global(8).of_each_key(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Capacity {
    per_key: Option<u32>,
    global: Option<u32>,
}

impl Capacity {
    /// `permits` for each client key, and no total.
    pub const fn per_key(permits: u32) -> Self {
        Capacity {
            per_key: Some(permits),
            global: None,
        }
    }

    /// `permits` in all, shared by every client key, and no per-key limit.
    pub const fn global(permits: u32) -> Self {
        Capacity {
            per_key: None,
            global: Some(permits),
        }
    }

    /// The same capacity with `permits` in all as well.
    pub const fn and_global(self, permits: u32) -> Self {
        Capacity {
            global: Some(permits),
            ..self
        }
    }

    /// The same capacity with `permits` for each client key as well.
    pub const fn and_per_key(self, permits: u32) -> Self {
        Capacity {
            per_key: Some(permits),
            ..self
        }
    }

    /// The permits of each client key; `None` when unlimited.
    pub const fn of_each_key(&self) -> Option<u32> {
        self.per_key
    }

    /// The permits of all client keys together; `None` when unlimited.
    pub const fn in_all(&self) -> Option<u32> {
        self.global
    }
}
