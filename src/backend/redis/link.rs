//! The connection to the deployment, made at start-up when it answers and on first use when
//! it does not: a service whose failure policy covers an unreachable Redis still boots.
//!
//! One attempt runs at a time, in a task of its own, and every step that needs the
//! connection waits for that attempt's outcome: a step that gives up (its layer's timeout)
//! does not cancel it, so a slow handshake still completes, and steps queue behind no more
//! than one attempt. A failed attempt is the answer for [`FAIL_FAST`] more, so that an
//! outage costs each step at most one bounded attempt, not one each.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::builder::RedisBackendBuilder;
use super::connection::Connection;
use super::server_clock::ServerClock;
use super::server_version::ServerVersion;
use crate::error::{Error, ErrorKind, Result};

/// How long a failed attempt stays the answer before the next step tries again.
const FAIL_FAST: Duration = Duration::from_millis(500);

/// What connecting learned, kept for the handle's life: the connection (which reconnects by
/// itself from then on), the server's version and its clock.
pub(super) struct Connected {
    pub(super) connection: Connection,
    pub(super) server: ServerVersion,
    pub(super) clock: ServerClock,
}

/// The connection, once made.
pub(super) struct Link {
    inner: Arc<Inner>,
}

struct Inner {
    builder: RedisBackendBuilder,
    connected: OnceLock<Connected>,
    /// The latest attempt: `None` in the channel while it runs.
    attempt: Mutex<Option<watch::Receiver<Option<Outcome>>>>,
}

/// How an attempt ended.
#[derive(Clone)]
enum Outcome {
    Connected,
    Failed { at: Instant, error: Arc<Error> },
}

impl Link {
    pub(super) fn new(builder: RedisBackendBuilder) -> Self {
        Link {
            inner: Arc::new(Inner {
                builder,
                connected: OnceLock::new(),
                attempt: Mutex::new(None),
            }),
        }
    }

    /// The connection, made now if it was not yet (see the module's docs).
    ///
    /// Cancel safe: the attempt goes on without the caller.
    pub(super) async fn get(&self) -> Result<&Connected> {
        if let Some(connected) = self.inner.connected.get() {
            return Ok(connected);
        }
        let mut outcome = self.attempt()?;
        let ended = outcome
            .wait_for(Option::is_some)
            .await
            .map(|ended| ended.clone())
            .ok()
            .flatten();
        match ended {
            Some(Outcome::Failed { error, .. }) => Err(error.clone_without_source()),
            // Connected, or an attempt that ended without a word (its task was dropped with
            // the runtime): what the cell holds decides.
            _ => {
                self.inner.connected.get().ok_or_else(|| {
                    Error::new(ErrorKind::Io, "the connection attempt was abandoned")
                })
            }
        }
    }

    /// The connection if it was made.
    pub(super) fn get_now(&self) -> Option<&Connected> {
        self.inner.connected.get()
    }

    /// The attempt to wait for: the one running, or a new one, unless the latest failed
    /// less than [`FAIL_FAST`] ago (then its failure is the answer).
    fn attempt(&self) -> Result<watch::Receiver<Option<Outcome>>> {
        let mut latest = self
            .inner
            .attempt
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(outcome) = latest.as_ref() {
            match &*outcome.borrow() {
                None => return Ok(outcome.clone()),
                Some(Outcome::Failed { at, error }) if at.elapsed() < FAIL_FAST => {
                    return Err(error.clone_without_source());
                }
                Some(_) => {}
            }
        }
        let (tell, outcome) = watch::channel(None);
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let ended = match inner.builder.open().await {
                Ok(connected) => {
                    // The only writer: one attempt runs at a time.
                    _ = inner.connected.set(connected);
                    Outcome::Connected
                }
                Err(err) => Outcome::Failed {
                    at: Instant::now(),
                    error: Arc::new(err),
                },
            };
            _ = tell.send(Some(ended));
        });
        *latest = Some(outcome.clone());
        Ok(outcome)
    }
}
