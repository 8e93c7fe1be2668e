//! The connection to the deployment: made at start-up when it answers, on first use when it
//! does not (a service whose failure policy covers an unreachable Redis still boots), and
//! made again, whole, once it breaks.
//!
//! One attempt runs at a time, in a task of its own, and every step that needs the
//! connection waits for that attempt's outcome: a step that gives up (its layer's timeout)
//! does not cancel it, so a slow handshake still completes, and steps queue behind no more
//! than one attempt. A failed attempt is the answer for [`FAIL_FAST`] more, so that an
//! outage or a refusal costs each step at most one bounded attempt, not one each; a refusal
//! (a rotated password, an ACL) is so the answer from the first reconnect that meets it, at
//! once, until a reconnect succeeds. A refused connection, which costs an attempt one round
//! trip, is the answer for [`FAIL_FAST_REFUSED`] only, so that a server back from a restart
//! is found within a step's retries.
//!
//! Every attempt makes the whole [`Connected`]: the connection, then the server's version and
//! its clock. A reconnect can reach another server (the primary Sentinel names after a
//! failover, a restarted server), so its version and clock are read again: the first
//! acquisition on the new connection carries a deadline read from the new server's clock.
//! (The handle's [`Capabilities`](super::Capabilities) are kept: they are learned from
//! refusals, and a refusal on the new server is learned again.) A Cluster connection follows
//! its nodes by itself and is never made again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::RedisError;
use tokio::sync::watch;
use tokio::time::Instant;

use super::dialer::{Connected, Dialer};
use crate::error::{Error, ErrorKind, Result};

/// How long a failed attempt stays the answer before the next step tries again.
const FAIL_FAST: Duration = Duration::from_millis(500);
/// How long a refused connection (nothing listens: a server restarting, or gone) stays the
/// answer.
const FAIL_FAST_REFUSED: Duration = Duration::from_millis(50);

/// The connection in use, made again when it breaks.
pub(super) struct Link {
    inner: Arc<Inner>,
}

struct Inner {
    dialer: Dialer,
    /// The connection in use: empty until made, and once it broke. Read by every step
    /// without a lock; written only under `attempt`'s lock, or by the one attempt running.
    current: ArcSwapOption<Connected>,
    /// The latest attempt: `None` in the channel while it runs.
    attempt: Mutex<Option<watch::Receiver<Option<Outcome>>>>,
}

/// What a step that found no connection does.
enum Attempt {
    /// Uses the one made since it looked.
    Made(Arc<Connected>),
    /// Waits for the attempt running.
    Wait(watch::Receiver<Option<Outcome>>),
}

/// How an attempt ended.
#[derive(Clone)]
enum Outcome {
    Connected(Arc<Connected>),
    Failed { at: Instant, error: Arc<Error> },
}

/// How long a failed attempt stays the answer: a certain I/O failure (a refused connection)
/// briefly, anything else (no answer in time, credentials, an ACL) for [`FAIL_FAST`].
fn answer_for(error: &Error) -> Duration {
    if error.kind() == ErrorKind::Io && !error.is_outcome_uncertain() {
        FAIL_FAST_REFUSED
    } else {
        FAIL_FAST
    }
}

impl Link {
    pub(super) fn new(dialer: Dialer) -> Self {
        Link {
            inner: Arc::new(Inner {
                dialer,
                current: ArcSwapOption::empty(),
                attempt: Mutex::new(None),
            }),
        }
    }

    /// What each connection attempt dials.
    pub(super) fn dialer(&self) -> &Dialer {
        &self.inner.dialer
    }

    /// The connection, made now if there is none (see the module's docs).
    ///
    /// Cancel safe: the attempt goes on without the caller.
    pub(super) async fn get(&self) -> Result<Arc<Connected>> {
        // A connection found broken before this step could use it is made again once; one
        // found broken again is used all the same (its failure is then the step's), so that
        // a server that keeps failing its connections cannot hold a step in this loop.
        let mut tries = 0;
        loop {
            tries += 1;
            if let Some(connected) = self.get_now() {
                return Ok(connected);
            }
            let mut outcome = match self.attempt()? {
                Attempt::Made(connected) => return Ok(connected),
                Attempt::Wait(outcome) => outcome,
            };
            let ended = outcome
                .wait_for(Option::is_some)
                .await
                .map(|ended| ended.clone())
                .ok()
                .flatten();
            match ended {
                // Unless another step found it broken meanwhile: then it makes a new one.
                Some(Outcome::Connected(connected)) if tries > 1 || self.is_current(&connected) => {
                    return Ok(connected);
                }
                Some(Outcome::Connected(_)) => {}
                Some(Outcome::Failed { error, .. }) => return Err(error.clone_without_source()),
                // An attempt that ended without a word: its task was dropped with its
                // runtime. The next step starts another.
                None => {
                    return Err(Error::new(
                        ErrorKind::Io,
                        "the connection attempt was abandoned",
                    ));
                }
            }
        }
    }

    /// Whether `connected` is the connection in use.
    fn is_current(&self, connected: &Arc<Connected>) -> bool {
        self.inner
            .current
            .load()
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, connected))
    }

    /// The connection in use, if there is one.
    pub(super) fn get_now(&self) -> Option<Arc<Connected>> {
        self.inner.current.load_full()
    }

    /// Drops `connected` when `err` says it must be replaced (see
    /// [`Connection::must_replace`]), so that the next step makes a new one. A connection
    /// made since is kept.
    pub(super) fn forget_if_broken(&self, connected: &Arc<Connected>, err: &RedisError) {
        if connected.connection.must_replace(err) {
            let _attempt = self.lock_attempt();
            if self.is_current(connected) {
                tracing::debug!(error = %err, "the connection must be replaced; the next step connects again");
                self.inner.current.store(None);
            }
        }
    }

    /// The attempt to wait for: the one running, or a new one, unless the latest failed
    /// less than [`FAIL_FAST`] ago (then its failure is the answer) or made the connection
    /// since the caller looked.
    fn attempt(&self) -> Result<Attempt> {
        let mut latest = self.lock_attempt();
        if let Some(connected) = self.get_now() {
            return Ok(Attempt::Made(connected));
        }
        if let Some(outcome) = latest.as_ref() {
            // An attempt whose task is gone (dropped with its runtime) never ends: replaced.
            let running = outcome.has_changed().is_ok();
            match &*outcome.borrow() {
                None if running => return Ok(Attempt::Wait(outcome.clone())),
                Some(Outcome::Failed { at, error }) if at.elapsed() < answer_for(error) => {
                    return Err(error.clone_without_source());
                }
                _ => {}
            }
        }
        let (tell, outcome) = watch::channel(None);
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let ended = match inner.dialer.open().await {
                Ok(connected) => {
                    let connected = Arc::new(connected);
                    // Stored before the outcome is told, so that a waiter woken by it and
                    // any step after it find the connection.
                    inner.current.store(Some(connected.clone()));
                    Outcome::Connected(connected)
                }
                Err(err) => Outcome::Failed {
                    at: Instant::now(),
                    error: Arc::new(err),
                },
            };
            _ = tell.send(Some(ended));
        });
        *latest = Some(outcome.clone());
        Ok(Attempt::Wait(outcome))
    }

    fn lock_attempt(&self) -> std::sync::MutexGuard<'_, Option<watch::Receiver<Option<Outcome>>>> {
        // Holds only a receiver: a panic elsewhere cannot leave it inconsistent.
        self.inner
            .attempt
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
