//! A latch by name: starting a generation, or joining the current one.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::LatchGeneration;
use crate::Coordination;
use crate::backend::Backend;
use crate::backend::steps::latch::{
    LatchKeys, LatchRead, LatchReadStep, LatchSetReply, LatchSetStep,
};
use crate::coordination::name;
use crate::coordination::owner::{expiry_ms, new_token};
use crate::error::{Error, Result};

/// The largest count a generation starts with: 2^53 - 1, which the server's scripts count
/// exactly.
pub const MAX_COUNT: u64 = crate::backend::steps::latch::MAX_COUNT;

/// How long a completed generation reads as complete after its completion, whatever
/// happened to the latch since (a reset, an expiry): ten minutes.
pub const COMPLETION_KEPT_FOR: Duration =
    Duration::from_millis(crate::backend::steps::latch::COMPLETIONS_KEPT_FOR_MS);

/// How many of its latest completed generations a latch remembers at most: 1,000.
pub const COMPLETIONS_KEPT: u64 = crate::backend::steps::latch::COMPLETIONS_KEPT;

/// How often a waiter reads the latch again without a notification, by default.
pub const DEFAULT_REREAD_INTERVAL: Duration = Duration::from_secs(2);

/// The bounds of a re-read interval.
const REREAD_BOUNDS: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(60));

/// A countdown latch shared through the backend, by name: see the
/// [module documentation](super) for its guarantees and failures.
///
/// Cheap to clone. Nothing is sent until a generation is started or joined.
///
/// # Example
///
/// ```
/// use leasehold::{Coordination, ErrorKind};
/// use leasehold::coordination::latch::{CountDown, CountdownLatch};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let latch = CountdownLatch::named(&Coordination::memory(), "deploy");
/// assert!(latch.join().await?.is_none(), "nothing started yet");
///
/// let first = latch.create(1, None).await?.expect("no latch existed");
/// assert!(latch.create(5, None).await?.is_none(), "one exists: join or reset it");
/// assert_eq!(first.count_down().await?, CountDown::Remaining(0));
/// let err = first.count_down().await.expect_err("complete");
/// assert_eq!(err.kind(), ErrorKind::AlreadyComplete);
///
/// let second = latch.reset(2, None).await?;
/// assert!(first.wait().await?, "it completed before it was replaced");
/// assert_eq!(second.count_down().await?, CountDown::Remaining(1));
/// let third = latch.reset(1, None).await?;
/// assert_eq!(second.count_down().await?, CountDown::Stale);
/// assert!(!second.wait().await?, "replaced before it completed");
/// assert_eq!(third.count().await?, Some(1));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountdownLatch {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) backend: Backend,
    pub(super) key: Vec<u8>,
    /// The key beside it that remembers the completed generations.
    pub(super) completions: Vec<u8>,
    pub(super) reread: Duration,
}

impl Inner {
    pub(super) fn keys(&self) -> LatchKeys<'_> {
        LatchKeys {
            latch: &self.key,
            completions: &self.completions,
        }
    }
}

/// The completions' key: the latch's key and this, in its hash tag's slot.
const COMPLETIONS_SUFFIX: &[u8] = b":done";

impl CountdownLatch {
    /// The latch named `name`, stored at `latch:{<name length>:<name>}`, its completed
    /// generations at `latch:{<name length>:<name>}:done` (see [Storage](super#storage)).
    /// Nothing is sent.
    pub fn named(coordination: &Coordination, name: impl AsRef<[u8]>) -> Self {
        let key = name::hash_tagged(b"latch", name.as_ref());
        let completions = [key.as_slice(), COMPLETIONS_SUFFIX].concat();
        CountdownLatch {
            inner: Arc::new(Inner {
                backend: coordination.backend().clone(),
                key,
                completions,
                reread: DEFAULT_REREAD_INTERVAL,
            }),
        }
    }

    /// How often a waiter reads the latch again when no notification came: the longest a
    /// lost notification delays it. Default [`DEFAULT_REREAD_INTERVAL`]; from 10 ms to a
    /// minute (a value outside is taken as the nearer end).
    pub fn reread_interval(self, interval: Duration) -> Self {
        let inner = Inner {
            backend: self.inner.backend.clone(),
            key: self.inner.key.clone(),
            completions: self.inner.completions.clone(),
            reread: interval.clamp(REREAD_BOUNDS.0, REREAD_BOUNDS.1),
        };
        CountdownLatch {
            inner: Arc::new(inner),
        }
    }

    /// The latch's key, without the backend's prefix.
    pub fn key(&self) -> &[u8] {
        &self.inner.key
    }

    /// Starts a generation of `count` (0: complete at once) if no latch exists: `None` when
    /// one does (then nothing changed: [`join`](Self::join) or [`reset`](Self::reset) it).
    /// The latch's key expires after `expiry` (whole milliseconds of the backend's clock;
    /// `None`: never), whatever its count; count-downs leave the expiry as it is.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// count over [`MAX_COUNT`] or an expiry under 1 ms or over about 34 years (nothing is
    /// sent), [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState) when a key holds
    /// something else, and [`ErrorKind::OutOfMemory`](crate::ErrorKind::OutOfMemory) when
    /// Redis is out of memory (nothing is changed in either case; count-downs of a running
    /// generation still count then).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after the request was sent, the generation may have been
    /// started, unknown to the caller; [`join`](Self::join) finds it.
    pub async fn create(
        &self,
        count: u64,
        expiry: Option<Duration>,
    ) -> Result<Option<LatchGeneration>> {
        self.start(count, expiry, false).await
    }

    /// Starts a generation of `count` (0: complete at once), replacing the latch's current
    /// one if it has one: the old generation's waiters return `false`, and its count-downs
    /// are [stale](super::CountDown::Stale) from now on. See [`create`](Self::create) for
    /// `expiry` and the errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after the request was sent, the reset may have happened,
    /// unknown to the caller; [`join`](Self::join) finds the generation it started.
    pub async fn reset(&self, count: u64, expiry: Option<Duration>) -> Result<LatchGeneration> {
        self.start(count, expiry, true)
            .await?
            .ok_or_else(|| Error::unexpected_reply("a reset did not start a generation"))
    }

    /// The latch's current generation, to count it down or wait for it; `None` when no latch
    /// exists (never started, expired, or deleted). A complete generation is joined too.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn join(&self) -> Result<Option<LatchGeneration>> {
        let read = self
            .inner
            .backend
            .run_idempotent(LatchReadStep {
                keys: self.inner.keys(),
                generation: None,
            })
            .await?;
        Ok(match read {
            LatchRead::Current(state) => {
                Some(LatchGeneration::new(self.clone(), state.generation.into()))
            }
            LatchRead::Completed | LatchRead::None => None,
        })
    }

    pub(super) fn inner(&self) -> &Inner {
        &self.inner
    }

    async fn start(
        &self,
        count: u64,
        expiry: Option<Duration>,
        replace: bool,
    ) -> Result<Option<LatchGeneration>> {
        if count > MAX_COUNT {
            return Err(Error::invalid_argument(format!(
                "a latch's count must be at most {MAX_COUNT}, not {count}"
            )));
        }
        let expiry_ms = expiry
            .map(|expiry| expiry_ms("a latch expiry", expiry))
            .transpose()?;
        let generation = new_token()?;
        let reply = self
            .inner
            .backend
            .run(LatchSetStep {
                keys: self.inner.keys(),
                generation: &generation,
                count,
                expiry_ms,
                replace,
            })
            .await?;
        tracing::debug!(latch = %self, count, ?reply, replace, "latch generation");
        Ok(match reply {
            LatchSetReply::Set => Some(LatchGeneration::new(self.clone(), generation.into())),
            LatchSetReply::Exists => None,
        })
    }
}

/// The key, as text (lossy), for logs.
impl fmt::Display for CountdownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.inner.key))
    }
}

impl fmt::Debug for CountdownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountdownLatch")
            .field("key", &String::from_utf8_lossy(&self.inner.key))
            .field("reread_interval", &self.inner.reread)
            .finish_non_exhaustive()
    }
}
