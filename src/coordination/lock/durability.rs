//! Durable fencing: a fenced lock that hands out a token only once replicas hold the
//! acquisition.

use std::time::Duration;

use crate::error::{Error, Result};

/// How many replicas must hold an acquisition of a [durable](super::FencedLock::durable)
/// fenced lock before its token is handed out, and how long they have to say so.
///
/// After the acquisition's script, on the same connection, the lock sends `WAIT <replicas>
/// <ms>`, or with [`written_to_aof`](Self::written_to_aof) `WAITAOF 1 <replicas> <ms>`. When
/// fewer replicas confirm in time, the lease is released and the acquisition fails.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::coordination::lock::Durability;
///
/// let durability = Durability::replicas(1)?.within(Duration::from_millis(250))?;
/// assert_eq!(durability.replica_count(), 1);
/// assert_eq!(durability.timeout(), Duration::from_millis(250));
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    replicas: u32,
    within: Duration,
    aof: bool,
}

/// How long replicas have to confirm an acquisition by default.
pub const DEFAULT_DURABILITY_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest a durable acquisition waits for its replicas.
pub const MAX_DURABILITY_TIMEOUT: Duration = Duration::from_secs(10);

impl Durability {
    /// `replicas` replicas (at least 1) must confirm, within
    /// [`DEFAULT_DURABILITY_TIMEOUT`]. Fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for 0.
    pub fn replicas(replicas: u32) -> Result<Self> {
        if replicas == 0 {
            return Err(Error::invalid_argument(
                "durable fencing needs at least one replica to confirm",
            ));
        }
        Ok(Durability {
            replicas,
            within: DEFAULT_DURABILITY_TIMEOUT,
            aof: false,
        })
    }

    /// How long the replicas have to confirm, from 1 ms to [`MAX_DURABILITY_TIMEOUT`]; the
    /// acquisition's reply may take this much longer than the backend's response timeout.
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) out of
    /// that range.
    pub fn within(mut self, timeout: Duration) -> Result<Self> {
        if !(Duration::from_millis(1)..=MAX_DURABILITY_TIMEOUT).contains(&timeout) {
            return Err(Error::invalid_argument(format!(
                "replicas must have between 1 ms and {MAX_DURABILITY_TIMEOUT:?} to confirm, \
                 not {timeout:?}"
            )));
        }
        self.within = timeout;
        Ok(self)
    }

    /// Waits with `WAITAOF` (Redis and Valkey 7.2+, with the AOF on): the primary and the
    /// replicas must also have written the acquisition to their AOF, so that it survives a
    /// restart of all of them. A replica's AOF confirmation comes with its once-a-second
    /// acknowledgement (1.0 s on Redis 8.2 with `appendfsync always`): give it a
    /// [timeout](Self::within) of more than a second, and expect acquisitions to take that
    /// long. A server without `WAITAOF` or without its AOF on refuses the option when it is
    /// set.
    pub fn written_to_aof(mut self) -> Self {
        self.aof = true;
        self
    }

    /// Whether the replicas' AOF must confirm too (see
    /// [`written_to_aof`](Self::written_to_aof)).
    pub fn is_written_to_aof(&self) -> bool {
        self.aof
    }

    /// How many replicas must confirm.
    pub fn replica_count(&self) -> u32 {
        self.replicas
    }

    /// How long they have.
    pub fn timeout(&self) -> Duration {
        self.within
    }
}
