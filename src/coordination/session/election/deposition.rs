//! Telling a leader it was deposed while its session lives: a failover that lost the step
//! that promoted it (the new primary then promotes another candidate, with a greater term),
//! or the election's keys lost (an eviction, a `DEL`). The session's signal never fires then,
//! since the session is fine; only the leader key says so.
//!
//! A task per leadership reads the leader key whenever it changes (on Redis, through the
//! client tracking that waits use) and at least every [`DEPOSITION_POLL`], and fires the
//! leadership's signal with [`LossReason::Deposed`] once the key names another term, or
//! nobody. The session's own end is forwarded as it comes. Unavailability says nothing: the
//! session's keeper tells that, when its estimate runs out.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::names::ElectionNames;
use crate::backend::delivery::Delivery;
use crate::backend::steps::election::{LeaderStep, Leading};
use crate::coordination::ownership::{LossReason, OwnershipLost};

/// The longest a deposed leader goes untold where the leader key cannot be watched (the
/// memory backend, a server without client tracking, or a watch that failed).
pub const DEPOSITION_POLL: Duration = Duration::from_secs(1);

/// A leadership's signal, fed by the session's and by the leader key.
pub(super) struct Deposition {
    tell: Arc<watch::Sender<Option<LossReason>>>,
    /// The session's signal, read first: the task forwards it, but may be busy reading.
    session: OwnershipLost,
    /// Whether a task watches the leader key (not without a runtime).
    watched: bool,
}

impl Deposition {
    /// Watches the leadership of `term` in the election `names`, held while `session`
    /// lives; in the background where there is a runtime (else the session's signal alone).
    pub(super) fn watch(names: Arc<ElectionNames>, term: u64, session: OwnershipLost) -> Self {
        let (tell, _) = watch::channel(session.reason());
        let tell = Arc::new(tell);
        let watched = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let task = watch_leader(names, term, session.clone(), Arc::downgrade(&tell));
                runtime.spawn(task);
                true
            }
            Err(_) => {
                tracing::warn!(
                    election = %names,
                    "no tokio runtime to watch the leader key on; a deposed leader is told \
                     only when its session ends"
                );
                false
            }
        };
        Deposition {
            tell,
            session,
            watched,
        }
    }

    /// The signal.
    pub(super) fn ownership(&self) -> OwnershipLost {
        if self.watched {
            OwnershipLost::new(self.tell.subscribe())
        } else {
            self.session.clone()
        }
    }

    /// Whether the leadership is known lost: its session's end is known at once, also while
    /// the task is busy reading.
    pub(super) fn is_lost(&self) -> bool {
        self.session.is_lost() || self.tell.borrow().is_some()
    }

    /// The leadership ended by its own hand (a resign, or its handle dropped).
    pub(super) fn end(&self) {
        tell_once(&self.tell, LossReason::Released);
    }
}

impl Drop for Deposition {
    fn drop(&mut self) {
        // A signal whose sender is gone reads as uncertain: say how it ended first.
        self.end();
    }
}

/// Sets the reason, unless one is set already.
fn tell_once(tell: &watch::Sender<Option<LossReason>>, reason: LossReason) -> bool {
    tell.send_if_modified(|told| {
        told.is_none() && {
            *told = Some(reason);
            true
        }
    })
}

/// Reads the leader until it is another term's or nobody's, or the session ends, or the
/// leadership does (its sender gone, or its reason set).
async fn watch_leader(
    names: Arc<ElectionNames>,
    term: u64,
    mut session: OwnershipLost,
    tell: Weak<watch::Sender<Option<LossReason>>>,
) {
    let ended = |tell: &Weak<watch::Sender<Option<LossReason>>>| {
        tell.upgrade().is_none_or(|told| told.borrow().is_some())
    };
    let mut lost = std::pin::pin!(async move { session.lost().await });
    loop {
        if ended(&tell) {
            return;
        }
        // The session's end is told as it comes, whatever this reads meanwhile (a read can
        // take the backend's timeouts in an outage).
        let deposed = tokio::select! {
            biased;
            reason = &mut lost => {
                if let Some(told) = tell.upgrade() {
                    tell_once(&told, reason);
                }
                return;
            }
            deposed = read_then_wait(&names, term) => deposed,
        };
        if deposed {
            if let Some(told) = tell.upgrade()
                && tell_once(&told, LossReason::Deposed)
            {
                tracing::warn!(election = %names, term, "this leader was deposed while its session lives");
                crate::telemetry::lost("election", "deposed");
            }
            return;
        }
    }
}

/// Whether the leader key names another term than `term`, or nobody; when it names
/// `term`, after waiting for the key to change (or for [`DEPOSITION_POLL`] where it cannot
/// be watched), `false`.
async fn read_then_wait(names: &ElectionNames, term: u64) -> bool {
    let backend = names.backend();
    // Registered before the read: a change during it is not missed.
    let watch = match backend.watch_key(names.watched()[0]).await {
        Ok(watch) => watch,
        Err(err) => {
            tracing::debug!(error = %err, "cannot watch the leader key; polling instead");
            None
        }
    };
    let deposed = match backend
        .run_idempotent(LeaderStep { keys: names.keys() })
        .await
    {
        Ok(Leading::Other { term: leading, .. }) => leading != term,
        Ok(Leading::Nobody) => true,
        // This step names no candidate of its own: never `This`.
        Ok(Leading::This { .. }) => false,
        // Unavailable or refused: the session's keeper tells what that costs.
        Err(_) => false,
    };
    if !deposed {
        match watch {
            Some(mut watch) => watch.changed().await,
            None => tokio::time::sleep(DEPOSITION_POLL).await,
        }
    }
    deposed
}
