//! The held primitives, as the abandoned-release counters and the logs name them.

use std::fmt;

/// A held primitive: what [`AbandonedReleases`](super::AbandonedReleases) counts by, and
/// what the logs call it.
///
/// # Example
///
/// ```
/// use leasehold::coordination::ownership::{Primitive, abandoned_releases};
///
/// for primitive in Primitive::ALL {
///     println!("{primitive}: {} releases given up", abandoned_releases().of(primitive));
/// }
/// assert_eq!(Primitive::FencedLease.to_string(), "fenced lease");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// A [`FencedLease`](crate::coordination::lock::FencedLease) (and its managed form).
    FencedLease,
    /// A [`SemaphorePermit`](crate::coordination::semaphore::SemaphorePermit) (and its
    /// managed form, the concurrency layer's and the `Permit` extractor's).
    SemaphorePermit,
    /// An [`RwLease`](crate::coordination::rw_lease::RwLease) (and its managed form).
    ReadWriteLease,
    /// A [`FieldLease`](crate::coordination::hash_lease::FieldLease) (and its managed form).
    FieldLease,
    /// A [`RedlockLease`](crate::coordination::redlock::RedlockLease) on a
    /// [`RedlockGroup`](crate::coordination::redlock::RedlockGroup) (and its managed form):
    /// its releases on the whole group. Each node's release is counted as a
    /// [`FencedLease`](Self::FencedLease)'s.
    RedlockLease,
    /// A [`Session`](crate::coordination::session::Session) (and its managed form): a lease
    /// with attached keys, whose release revokes it.
    Session,
}

impl Primitive {
    /// Every held primitive.
    pub const ALL: [Primitive; 6] = [
        Primitive::FencedLease,
        Primitive::SemaphorePermit,
        Primitive::ReadWriteLease,
        Primitive::FieldLease,
        Primitive::RedlockLease,
        Primitive::Session,
    ];

    /// Its name in logs and messages: `"fenced lease"`, `"semaphore permit"`,
    /// `"read-write lease"`, `"hash-field lease"`, `"Redlock lease"`, `"session"`.
    pub const fn name(self) -> &'static str {
        match self {
            Primitive::FencedLease => "fenced lease",
            Primitive::SemaphorePermit => "semaphore permit",
            Primitive::ReadWriteLease => "read-write lease",
            Primitive::FieldLease => "hash-field lease",
            Primitive::RedlockLease => "Redlock lease",
            Primitive::Session => "session",
        }
    }
}

impl Primitive {
    /// Its label in the metrics: `fenced_lease`, `semaphore_permit`, `read_write_lease`,
    /// `hash_field_lease`, `redlock_lease`, `session`.
    pub(crate) const fn label(self) -> &'static str {
        match self {
            Primitive::FencedLease => "fenced_lease",
            Primitive::SemaphorePermit => "semaphore_permit",
            Primitive::ReadWriteLease => "read_write_lease",
            Primitive::FieldLease => "hash_field_lease",
            Primitive::RedlockLease => "redlock_lease",
            Primitive::Session => "session",
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
