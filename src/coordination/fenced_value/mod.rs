//! Fencing at the resource, for a resource that lives in Redis too: a value that a holder
//! writes only with a fencing token at least as high as the highest it has seen.
//!
//! A fencing token orders holders ([`FencedLease::fencing_token`], a write lease's, a
//! Redlock group's), but only the protected resource can refuse a stale one: a holder
//! paused past its lease wakes believing it still holds, and writes. [`FencedValue`] is that
//! check done for a value kept in Redis: one atomic step compares the writer's token with
//! the highest the value has seen, and stores the write and its token, or refuses it with
//! nothing changed. Equal tokens are the same holder writing again.
//!
//! [`FencedLease::fencing_token`]: crate::coordination::lock::FencedLease::fencing_token
//!
//! # Failures
//!
//! | step | unavailable (no answer, nothing sent) | refused (the server said no) | uncertain (may have applied) |
//! |---|---|---|---|
//! | write | the error; nothing written | the error (an ACL, corrupt state); nothing written | the error, uncertain, and not sent again: a write carries a deadline on the server's clock, past which a delayed delivery changes nothing, so it cannot overwrite a later write of the same holder (an equal token passes) once that deadline has passed; write again to settle it |
//! | read | the error | the error | sent again (it only reads) |
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::fenced_value::{FencedValue, FencedWrite};
//! use leasehold::coordination::lock::FencedLock;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! let coordination = Coordination::memory();
//! let lock = FencedLock::named(&coordination, "invoice:42");
//! let invoice = FencedValue::named(&coordination, "invoice:42");
//!
//! let mut first = lock.acquire(Duration::from_secs(10)).await?;
//! first.release().await?; // as if its lease ran out while it was paused
//! let mut second = lock.acquire(Duration::from_secs(10)).await?;
//! assert_eq!(invoice.write(second.fencing_token(), b"paid").await?, FencedWrite::Written);
//!
//! // The first holder wakes and writes: refused, nothing changed.
//! let stale = invoice.write(first.fencing_token(), b"draft").await?;
//! assert_eq!(stale, FencedWrite::Stale { highest: second.fencing_token() });
//! assert_eq!(invoice.read().await?.map(|read| read.value), Some(b"paid".to_vec()));
//! second.release().await?;
//! # Ok(()) }
//! ```

use std::fmt;

use crate::Coordination;
use crate::backend::Backend;
use crate::backend::delivery::Delivery;
use crate::backend::steps::fenced_value::{FencedReadStep, FencedWriteReply, FencedWriteStep};
use crate::coordination::name;
use crate::error::{Error, Result};

/// A value in the backend that only a writer with a fencing token at least as high as the
/// highest it has seen can change (see the [module documentation](self)).
///
/// # Storage
///
/// One hash without expiry, `fenced:{<name length>:<name>}` under the backend's prefix (the
/// slot of the fenced lock of the same name): the field `token` holds the highest token a
/// write carried (decimal digits), and `value` what that write stored. A key that holds
/// another type, a hash with an expiry (it would forget its highest token), without a valid
/// token or without a value is [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState),
/// changing nothing. Only one lock's tokens order its writes: tokens of two locks are not
/// comparable. Deleting the key by hand, an eviction (give it a policy that spares keys
/// without expiry) or a failover that loses it forgets the highest token.
///
/// Cheap to clone.
///
/// # Example
///
/// ```
/// use leasehold::Coordination;
/// use leasehold::coordination::fenced_value::{FencedValue, FencedWrite};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let doc = FencedValue::named(&Coordination::memory(), "doc:7");
/// assert_eq!(doc.write(13, b"v2").await?, FencedWrite::Written);
/// assert_eq!(doc.write(12, b"v1").await?, FencedWrite::Stale { highest: 13 });
/// let read = doc.read().await?.expect("written");
/// assert_eq!((read.token, read.value), (13, b"v2".to_vec()));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedValue {
    backend: Backend,
    key: Vec<u8>,
}

/// What a [`FencedValue::write`] did.
///
/// # Example
///
/// ```
/// use leasehold::Coordination;
/// use leasehold::coordination::fenced_value::{FencedValue, FencedWrite};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let doc = FencedValue::named(&Coordination::memory(), "doc");
/// doc.write(8, b"eight").await?;
/// match doc.write(7, b"seven").await? {
///     FencedWrite::Written => unreachable!("8 came first"),
///     FencedWrite::Stale { highest } => assert_eq!(highest, 8),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedWrite {
    /// Stored, and its token is now the highest.
    Written,
    /// Refused: a write with a higher token came first. Nothing changed.
    Stale {
        /// The highest token the value has seen.
        highest: u64,
    },
}

/// A [`FencedValue`]'s content.
///
/// # Example
///
/// ```
/// use leasehold::Coordination;
/// use leasehold::coordination::fenced_value::{FencedRead, FencedValue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let doc = FencedValue::named(&Coordination::memory(), "doc");
/// doc.write(3, b"three").await?;
/// let FencedRead { token, value } = doc.read().await?.expect("written");
/// assert_eq!((token, value.as_slice()), (3, &b"three"[..]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedRead {
    /// The highest fencing token a write carried.
    pub token: u64,
    /// What that write (or a later one with the same token) stored.
    pub value: Vec<u8>,
}

impl FencedValue {
    /// The value named `name`, any bytes (a name longer than
    /// [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) is stored as its digest). Nothing
    /// is sent.
    pub fn named(coordination: &Coordination, name: impl AsRef<[u8]>) -> Self {
        FencedValue {
            backend: coordination.backend().clone(),
            key: name::hash_tagged(b"fenced", name.as_ref()),
        }
    }

    /// The key of the value, without the backend's prefix.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Stores `value` if `token` is at least the highest token the value has seen, in one
    /// atomic step, and records `token` as the highest: [`FencedWrite::Written`], or
    /// [`FencedWrite::Stale`] with the highest, nothing changed.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// token of 0 or above `i64::MAX` (no lock hands one out), before anything is sent, and
    /// with [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState) when the key holds
    /// something else.
    ///
    /// A write without an answer (no reply in time, a connection lost after sending) fails
    /// uncertain and is not sent again (see the [failures](self#failures)): write again.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after it was sent, the write may still be stored, until its
    /// deadline on the server has passed.
    pub async fn write(&self, token: u64, value: impl AsRef<[u8]>) -> Result<FencedWrite> {
        if token == 0 || i64::try_from(token).is_err() {
            return Err(Error::invalid_argument(format!(
                "a fencing token is from 1 to {}, not {token}",
                i64::MAX
            )));
        }
        let not_after_ms = self
            .backend
            .acquire_deadline()
            .await?
            .map_or(0, |deadline| deadline.server_ms);
        let reply = self
            .backend
            .run(FencedWriteStep {
                key: &self.key,
                token,
                value: value.as_ref(),
                not_after_ms,
            })
            .await?;
        Ok(match reply {
            FencedWriteReply::Written => FencedWrite::Written,
            FencedWriteReply::Stale { highest } => FencedWrite::Stale { highest },
            FencedWriteReply::Late => {
                self.backend.deadline_missed();
                return Err(Error::arrived_late("the write"));
            }
        })
    }

    /// The value and the highest token, in one step; `None` before the first write.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn read(&self) -> Result<Option<FencedRead>> {
        Ok(self
            .backend
            .run_idempotent(FencedReadStep { key: &self.key })
            .await?
            .map(|(token, value)| FencedRead { token, value }))
    }
}

impl fmt::Debug for FencedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedValue")
            .field("key", &String::from_utf8_lossy(&self.key))
            .finish_non_exhaustive()
    }
}
