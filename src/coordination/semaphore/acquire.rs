//! The acquisition both semaphores share: one atomic step over their sets, and cleanup of a
//! permit that may have been granted without an answer.

use std::sync::Arc;
use std::time::Duration;

use super::permit::expiry_ms;
use super::sets::PermitSets;
use super::{Attempt, SemaphorePermit};
use crate::backend::steps::semaphore::SemaphoreAcquireReply;
use crate::coordination::owner::{
    Holding, Sent, arrived_after_its_deadline, new_token, send_acquisition,
};
use crate::error::{Error, ErrorKind, Result};

/// Takes a permit in every set of `sets` (with `capacities` in the order of its keys), or
/// in none.
///
/// When the step may have applied (a timeout or a connection lost after sending, a server
/// error or a reply of an unexpected shape, or the future dropped mid-flight), a release of
/// the token that was sent is spawned before the error is returned, so a lost answer cannot
/// leave a permit that nobody holds; the permit's expiry is the fallback if that release
/// fails too. The step carries a deadline on the server's clock (Redis), and the release
/// waits until it has passed: a request delayed in the network past the release is then a
/// no-op, so it cannot leave a permit nobody holds either.
pub(super) async fn try_acquire(
    sets: Arc<PermitSets>,
    capacities: &[u32],
    expiry: Option<Duration>,
) -> Result<Attempt> {
    let expiry_ms = expiry_ms(expiry)?;
    let token = new_token()?;
    let Sent {
        reply,
        in_flight,
        sent_at,
    } = send_acquisition(&sets, &token, sets.backend(), |not_after_ms| {
        Box::pin(sets.acquire(&token, capacities, expiry_ms, not_after_ms))
    })
    .await?;
    match reply {
        SemaphoreAcquireReply::Granted => {
            let expiry = expiry_ms.map(Duration::from_millis);
            match Holding::granted(Arc::clone(&sets), token, expiry, sent_at, in_flight) {
                Some(holding) => {
                    tracing::debug!(keys = %sets, expiry_ms, "semaphore permit acquired");
                    Ok(Attempt::Acquired(SemaphorePermit::new(holding)))
                }
                // Granted too late to be of use: released, and answered as a full semaphore.
                None => Ok(Attempt::Busy { retry_after: None }),
            }
        }
        SemaphoreAcquireReply::Full { retry_after_ms } => {
            in_flight.disarm();
            tracing::debug!(keys = %sets, retry_after_ms, "semaphore full");
            Ok(Attempt::Busy {
                retry_after: retry_after_ms.map(Duration::from_millis),
            })
        }
        SemaphoreAcquireReply::Late => {
            tracing::debug!(keys = %sets, "semaphore acquisition arrived after its deadline; nothing changed");
            Err(arrived_after_its_deadline(in_flight, sets.backend()))
        }
        SemaphoreAcquireReply::CapacityMismatch { key, stored } => {
            in_flight.disarm();
            let asked = capacities.get(key).copied().unwrap_or_default();
            let name = sets
                .keys()
                .get(key)
                .map(|key| String::from_utf8_lossy(key).into_owned())
                .unwrap_or_default();
            tracing::debug!(keys = %sets, stored, asked, "semaphore capacity mismatch");
            Err(Error::new(
                ErrorKind::CapacityMismatch,
                format!(
                    "the semaphore {name:?} has permits held under a capacity of {stored}, \
                     not {asked}; a new capacity applies once every permit is released or expired"
                ),
            ))
        }
    }
}
