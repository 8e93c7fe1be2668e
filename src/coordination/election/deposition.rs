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
use crate::backend::steps::election::{LeaderStep, Leading};
use crate::coordination::ownership::{LossReason, OwnershipLost};

/// The longest a deposed leader goes untold where the leader key cannot be watched (the
/// memory backend, a server without client tracking, or a watch that failed).
pub const DEPOSITION_POLL: Duration = Duration::from_secs(1);

/// A leadership's signal, fed by the session's and by the leader key.
pub(super) struct Deposition {
    tell: Arc<watch::Sender<Option<LossReason>>>,
}

impl Deposition {
    /// Watches the leadership of `term` in the election `names`, held while `session`
    /// lives; in the background where there is a runtime (else the session's signal alone).
    pub(super) fn watch(names: Arc<ElectionNames>, term: u64, session: OwnershipLost) -> Self {
        let (tell, _) = watch::channel(session.reason());
        let tell = Arc::new(tell);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(watch_leader(names, term, session, Arc::downgrade(&tell)));
            }
            Err(_) => tracing::warn!(
                election = %names,
                "no tokio runtime to watch the leader key on; a deposed leader is told only \
                 when its session ends"
            ),
        }
        Deposition { tell }
    }

    /// The signal.
    pub(super) fn ownership(&self) -> OwnershipLost {
        OwnershipLost::new(self.tell.subscribe())
    }

    /// The leadership ended by its own hand (a resign, or its handle dropped).
    pub(super) fn end(&self) {
        self.tell.send_if_modified(|reason| {
            reason.is_none() && {
                *reason = Some(LossReason::Released);
                true
            }
        });
    }
}

impl Drop for Deposition {
    fn drop(&mut self) {
        // A signal whose sender is gone reads as uncertain: say how it ended first.
        self.end();
    }
}

/// Reads the leader until it is another term's or nobody's, or the session ends, or the
/// leadership does (its sender gone, or its reason set).
async fn watch_leader(
    names: Arc<ElectionNames>,
    term: u64,
    mut session: OwnershipLost,
    tell: Weak<watch::Sender<Option<LossReason>>>,
) {
    let backend = names.backend().clone();
    loop {
        // Registered before the read: a change during it is not missed.
        let watch = match backend.watch_key(names.watched()[0]).await {
            Ok(watch) => watch,
            Err(err) => {
                tracing::debug!(error = %err, "cannot watch the leader key; polling instead");
                None
            }
        };
        let read = backend
            .run_idempotent(LeaderStep { keys: names.keys() })
            .await;
        let deposed = match read {
            Ok(Leading::Other { term: leading, .. }) => leading != term,
            Ok(Leading::Nobody) => true,
            // This step names no candidate of its own: never `This`.
            Ok(Leading::This { .. }) => false,
            // Unavailable or refused: the session's keeper tells what that costs.
            Err(_) => false,
        };
        let Some(told) = tell.upgrade() else {
            return;
        };
        if told.borrow().is_some() {
            return;
        }
        if deposed {
            tracing::warn!(election = %names, term, "this leader was deposed while its session lives");
            told.send_replace(Some(LossReason::Deposed));
            return;
        }
        drop(told);
        let changed = async {
            match watch {
                Some(mut watch) => watch.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            reason = session.lost() => {
                if let Some(tell) = tell.upgrade() {
                    tell.send_if_modified(|told| {
                        told.is_none() && {
                            *told = Some(reason);
                            true
                        }
                    });
                }
                return;
            }
            () = changed => {}
            () = tokio::time::sleep(DEPOSITION_POLL) => {}
        }
    }
}
