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
//! its nodes by itself, and is made again only when it falls silent.
//!
//! A connection that fell silent (see [`silence`](super::silence)) gets a successor, dialled
//! in the background, which takes its place once made; until then the silent one is used.
//! Once the connection is dropped (it broke), or an attempt failed, or the connection fell
//! silent, attempts go on in the background, one at a time, every [`REDIAL_PAUSE`] at most,
//! until one succeeds: a connection made is counted among the server's answers, so that an
//! open circuit breaker probes at once (a server back from a restart, the new primary the sentinels named, a
//! server reached again after a silence), not at the end of its pause.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
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
/// The longest pause between two attempts in the background while the server cannot be
/// reached.
const REDIAL_PAUSE: Duration = Duration::from_millis(250);
/// The pause between two attempts in the background while the server refuses them.
const REFUSED_PAUSE: Duration = Duration::from_secs(2);

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
    /// The latest attempt's refusal (credentials, an ACL, TLS): every step's answer, at
    /// once, while attempts in the background meet it again, until one ends otherwise.
    refused: Mutex<Option<Arc<Error>>>,
    /// Connections made, ever.
    made: AtomicU64,
    /// Whether attempts go on in the background.
    redialing: AtomicBool,
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
                refused: Mutex::new(None),
                made: AtomicU64::new(0),
                redialing: AtomicBool::new(false),
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
            let mut outcome = match self.attempt(false)? {
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
                Some(Outcome::Failed { error, .. }) => {
                    self.redial_in_background();
                    return Err(error.clone_without_source());
                }
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

    /// A step on the connection in use was given up on unanswered (see
    /// [`silence`](super::silence)): once it is silent, a successor is dialled.
    pub(super) fn unanswered(&self) {
        if let Some(current) = self.inner.current.load_full() {
            self.missed(&current);
            if current.silence.is_silent() {
                self.dial_successor();
            }
        }
    }

    /// A step on `connected` got no answer (its response timer fired, or its caller gave up
    /// on it with nothing answered meanwhile): counted, and on a Cluster a census of the
    /// nodes taken (see [`silence`](super::silence)). The caller then dials a successor if
    /// the connection is silent.
    pub(super) fn missed(&self, connected: &Arc<Connected>) {
        if !connected.silence.missed() {
            self.census(connected);
        }
    }

    /// A step on the connection in use was given up on at its caller's timeout while the
    /// server answered others: a slow step, or on a Cluster one node silent among answering
    /// ones, which a census tells apart (see [`silence`](super::silence)).
    pub(super) fn unanswered_among_answers(&self) {
        if let Some(current) = self.inner.current.load_full() {
            self.census(&current);
        }
    }

    /// On a Cluster, asks every node for an answer in the background, one census at a time
    /// per connection; a node that gives none makes the connection silent, and a successor
    /// is dialled. Nothing elsewhere.
    fn census(&self, connected: &Arc<Connected>) {
        if !connected.connection.is_cluster() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !connected.silence.begin_census() {
            return;
        }
        // Twice the response timeout: the node's own timer fires first, this one only when
        // the cluster client holds the request elsewhere (a slot-map refresh).
        let bound = self.inner.dialer.response_timeout.saturating_mul(2);
        let (connected, inner) = (connected.clone(), Arc::downgrade(&self.inner));
        runtime.spawn(async move {
            // Two rounds in a row, as a standalone connection is given three steps: one slow
            // answer is no silence.
            let silent = connected.connection.has_silent_node(bound).await
                && connected.connection.has_silent_node(bound).await;
            connected.silence.end_census();
            if silent {
                connected.silence.node_fell_silent();
                if let Some(inner) = inner.upgrade() {
                    let link = Link { inner };
                    if link.is_current(&connected) {
                        tracing::info!("a cluster primary left two PINGs in a row unanswered: dialling a new cluster connection");
                        link.redial_in_background();
                    }
                }
            }
        });
    }

    /// The connection in use fell silent: a new one is dialled in the background, and takes
    /// its place once it is made (it has answered its handshake, `INFO` and `TIME`); until
    /// then the silent one stays in use. A host gone without a word, or a VIP moved, leaves
    /// the new connection reaching a server that answers; a server that stalls every
    /// client (a fork, a long script, `CLIENT PAUSE`) stalls the new one too, which then
    /// takes nothing from the old, whose replies still come once the stall ends.
    fn dial_successor(&self) {
        if !self.inner.redialing.load(Ordering::SeqCst) {
            tracing::info!(
                steps = super::silence::SILENT_STEPS,
                "steps in a row got no answer: dialling a new connection"
            );
        }
        self.redial_in_background();
    }

    /// How many connections were made: each one an answer of the server.
    pub(super) fn made(&self) -> u64 {
        self.inner.made.load(Ordering::Relaxed)
    }

    /// Drops `connected` when `err` says it must be replaced (see
    /// [`Connection::must_replace`]), so that a new one is made, or dials its successor when
    /// it fell silent. A connection made since is kept.
    pub(super) fn forget_if_broken(&self, connected: &Arc<Connected>, err: &RedisError) {
        if connected.connection.must_replace(err) {
            self.forget(connected, err);
        } else if connected.silence.is_silent() {
            self.dial_successor();
        }
    }

    /// Drops `connected` if it is still the one in use, and makes a new one in the
    /// background.
    fn forget(&self, connected: &Arc<Connected>, err: &RedisError) {
        {
            let _attempt = self.lock_attempt();
            if !self.is_current(connected) {
                return;
            }
            self.inner.current.store(None);
        }
        tracing::debug!(
            error = %err,
            "the connection must be replaced; connecting again in the background"
        );
        self.redial_in_background();
    }

    /// Makes attempts in the background, one at a time, until one succeeds (see the
    /// module's docs); nothing when they already go on, or outside a runtime (the next step
    /// connects).
    fn redial_in_background(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // SeqCst, as the store that ends the attempts: one of the two sees the other.
        if self.inner.redialing.swap(true, Ordering::SeqCst) {
            return;
        }
        // Made before the task, so that a task dropped before its first poll (its runtime
        // shutting down) still lets attempts start again.
        runtime.spawn(redial(Redialing(Arc::downgrade(&self.inner))));
    }

    /// The attempt to wait for: the one running, or a new one, unless the latest failed
    /// less than [`FAIL_FAST`] ago (then its failure is the answer, unless `fresh`) or made
    /// the connection since the caller looked.
    fn attempt(&self, fresh: bool) -> Result<Attempt> {
        let mut latest = self.lock_attempt();
        // A silent connection is used until its successor is made; only the attempts in the
        // background (`fresh`) dial one.
        if let Some(connected) = self.get_now()
            && !(fresh && connected.silence.is_silent())
        {
            return Ok(Attempt::Made(connected));
        }
        if !fresh && let Some(error) = self.refusal() {
            drop(latest);
            // The attempts in the background meet it until one connects; they go on.
            self.redial_in_background();
            return Err(error.clone_without_source());
        }
        if let Some(outcome) = latest.as_ref() {
            // An attempt whose task is gone (dropped with its runtime) never ends: replaced.
            let running = outcome.has_changed().is_ok();
            match &*outcome.borrow() {
                None if running => return Ok(Attempt::Wait(outcome.clone())),
                Some(Outcome::Failed { at, error })
                    if !fresh && at.elapsed() < answer_for(error) =>
                {
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
                    inner.made.fetch_add(1, Ordering::Relaxed);
                    *lock(&inner.refused) = None;
                    Outcome::Connected(connected)
                }
                Err(err) => {
                    let (at, error) = (Instant::now(), Arc::new(err));
                    // A refusal stays the answer until an attempt ends otherwise.
                    *lock(&inner.refused) = error.is_refused().then(|| error.clone());
                    Outcome::Failed { at, error }
                }
            };
            _ = tell.send(Some(ended));
        });
        *latest = Some(outcome.clone());
        Ok(Attempt::Wait(outcome))
    }

    /// The latest attempt's refusal, if it was one.
    fn refusal(&self) -> Option<Arc<Error>> {
        lock(&self.inner.refused).clone()
    }

    fn lock_attempt(&self) -> std::sync::MutexGuard<'_, Option<watch::Receiver<Option<Outcome>>>> {
        lock(&self.inner.attempt)
    }
}

/// Locks a mutex that holds a plain value: a panic elsewhere cannot leave it inconsistent.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The attempts in the background, while they go on: ends them however their task ends (its
/// runtime dropped, too), so that the next failure starts them again.
struct Redialing(Weak<Inner>);

impl Drop for Redialing {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.redialing.store(false, Ordering::SeqCst);
        }
    }
}

/// Attempts in the background until one succeeds or the handle is gone, each after a pause
/// that doubles from [`FAIL_FAST_REFUSED`] to [`REDIAL_PAUSE`] while the server cannot be
/// reached, and of [`REFUSED_PAUSE`] once it refuses the connection (credentials, an ACL):
/// each waits for the attempt running, or starts one, whatever failure a step still answers
/// with.
async fn redial(redialing: Redialing) {
    let mut pause = FAIL_FAST_REFUSED;
    loop {
        tokio::time::sleep(pause).await;
        // The handle is held only while an attempt runs: dropped, it ends this.
        let Some(inner) = redialing.0.upgrade() else {
            return;
        };
        let link = Link { inner };
        let failed = match link.attempt(true) {
            Ok(Attempt::Made(_)) => None,
            Ok(Attempt::Wait(mut outcome)) => {
                let ended = outcome.wait_for(Option::is_some).await;
                match ended.as_deref() {
                    Ok(Some(Outcome::Failed { error, .. })) => Some(error.kind()),
                    Ok(_) => None,
                    // Its task dropped with its runtime: so is this one, soon.
                    Err(_) => return,
                }
            }
            Err(error) => Some(error.kind()),
        };
        pause = match failed {
            None => {
                drop(redialing);
                // Dropped again since it was made, or silent already, while these still went
                // on: start again.
                if link
                    .get_now()
                    .is_none_or(|current| current.silence.is_silent())
                {
                    link.redial_in_background();
                }
                return;
            }
            Some(ErrorKind::Io | ErrorKind::Timeout | ErrorKind::Transient) => {
                (pause * 2).min(REDIAL_PAUSE)
            }
            Some(_) => REFUSED_PAUSE,
        };
    }
}
