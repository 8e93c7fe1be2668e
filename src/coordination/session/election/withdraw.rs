//! Taking a candidate out of an election once its campaign or its leadership ends without
//! a confirmed resign: in the background, after any campaign step still on its way can no
//! longer land.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use super::names::ElectionNames;
use crate::backend::delivery::Deadline;
use crate::backend::delivery::Delivery;
use crate::backend::steps::election::ResignStep;
use crate::backoff::Backoff;

/// How long background resigns go on.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);
/// The bound of one resign attempt.
const ATTEMPT_BOUND: Duration = Duration::from_secs(1);

/// Resigns the candidate in the background when dropped armed: a failed or cancelled
/// campaign leaves no candidate behind (a zombie that could lead later), nor does a
/// leadership dropped without a confirmed resign.
pub(super) struct Withdraw {
    names: Arc<ElectionNames>,
    id: String,
    /// The deadline of the last campaign step sent: the resign waits until it has passed.
    deadline: Mutex<Option<Deadline>>,
    armed: bool,
}

impl Withdraw {
    pub(super) fn arm(names: &Arc<ElectionNames>, id: &str) -> Self {
        Withdraw {
            names: Arc::clone(names),
            id: id.to_owned(),
            deadline: Mutex::new(None),
            armed: true,
        }
    }

    /// A campaign step is about to be sent with `deadline`.
    pub(super) fn sending(&self, deadline: Option<Deadline>) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = deadline;
    }

    /// The candidate left by a resign that was answered: nothing to do, unless a campaign
    /// step may still be on its way (one sent again when its first copy's answer was lost,
    /// whose first copy could still land before its deadline and enter the candidate
    /// anew). Then it stays armed, and withdraws the candidate again once that deadline has
    /// passed.
    pub(super) fn resigned(mut self) {
        let deadline = *self.deadline.lock().unwrap_or_else(|e| e.into_inner());
        let in_flight = deadline.is_some_and(|deadline| Instant::now() < deadline.passed_at);
        self.armed = in_flight;
    }
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = Handle::try_current() else {
            tracing::warn!(election = %self.names, "no tokio runtime to withdraw a candidate on; it stays until its session ends");
            return;
        };
        let names = Arc::clone(&self.names);
        let id = std::mem::take(&mut self.id);
        let deadline = self
            .deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        runtime.spawn(async move {
            let backend = names.backend();
            if let Some(deadline) = deadline {
                backend.until_passed(deadline).await;
            }
            let give_up_at = tokio::time::Instant::now() + GIVE_UP_AFTER;
            let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
            loop {
                let step = ResignStep {
                    keys: names.keys(),
                    id: &id,
                };
                let err = match tokio::time::timeout(ATTEMPT_BOUND, backend.run(step)).await {
                    Ok(Ok(_)) => {
                        tracing::debug!(election = %names, "candidate withdrawn in the background");
                        return;
                    }
                    Ok(Err(err)) => err.to_string(),
                    Err(_) => format!("no answer within {ATTEMPT_BOUND:?}"),
                };
                let pause = backoff.next_pause();
                if tokio::time::Instant::now() + pause >= give_up_at {
                    tracing::warn!(election = %names, error = %err, "withdrawing a candidate was given up; it stays until its session ends");
                    return;
                }
                tokio::time::sleep(pause).await;
            }
        });
    }
}
