//! What every held thing shares with its users: the contract of its handle, the signal a
//! self-renewing holding gives when it stops holding, and the count of background releases
//! given up.
//!
//! Every held primitive (a lock's lease, a Redlock lease, a semaphore's permit, a read-write
//! lease, a field's lease, a session) has one handle, [`Held`], and one managed form,
//! [`Managed`]. This page is the contract both keep; each handle's docs link here.
//!
//! # The holding table
//!
//! A handle is in one of four states. Every step compares the owner token on the backend,
//! so a stale handle, or a late command of one, can never renew or remove another holder's
//! holding, and a renewal only extends a holding it still finds.
//!
//! | state | renew | verify | release | drop |
//! |---|---|---|---|---|
//! | **held** | `false`, not sent, past the estimate. Sent otherwise: renewed → held, the estimate counts from before this request (never for more than an earlier unanswered renewal asked, which may still arrive); gone or another's → **lost**; failed certainly without effect → as before; may have applied (no answer, cancelled) → held, the estimate the earlier of the old one and the one asked for | `false`, not sent, past the estimate; else asked, and `false` if the estimate ran out meanwhile; a failure changes nothing | sent → **released**; a failure that may pass is retried once, bounded by about a second; unconfirmed while it may have applied → **uncertain**; refused certainly without effect → as before; refused after it may have applied (a script that failed part way, an unreadable reply) → **uncertain** | released in the background |
//! | **uncertain** (a release may have run) | `false`, not sent | `false`, not sent | sent, which settles it | released in the background |
//! | **lost** | `false`, not sent | `false`, not sent | sent (owner-checked: it finds nothing of this holder's) | nothing |
//! | **released** | `false`, not sent | `false`, not sent | nothing sent: already released | nothing |
//!
//! The estimate ([`Held::remaining_estimate`]) is local and conservative: it counts from
//! before the request that set the expiry was sent, so it ends no later than the holding on
//! the backend. A background release retries with capped, jittered backoff for up to a
//! minute; what is given up is counted per primitive ([`abandoned_releases`]).
//!
//! A [`Managed`] handle's keeper renews at half the lease and rides out a stall shorter
//! than the estimate; when a renewal finds the holding gone, or the estimate runs out
//! without an answer, [`OwnershipLost`] fires (before anyone else can take the holding
//! over), and the holding is released.
//!
//! # Cancel safety
//!
//! A step on a held thing is sent to a server and may land there even when its future is
//! dropped: the request may already be on the wire. The docs of each async method say which
//! of three kinds it is:
//!
//! - **cancel safe**: dropping the future changes nothing (a step that only reads, or one
//!   that waits and has sent nothing that could take effect);
//! - **cancel safe in effect**: dropping the future after the request was sent leaves the
//!   handle in the state the table gives an unanswered step (a renewal: held with the
//!   narrower estimate; a release: released, the release going on in the background), so
//!   that whatever the server did, the handle never counts on more than it may have;
//! - **not cancel safe**: dropping the future may leave an effect the handle cannot account
//!   for (a session's put, never sent again); the method says how to settle it.
//!
//! [`Held`]: crate::coordination::Held
//! [`Held::remaining_estimate`]: crate::coordination::Held::remaining_estimate
//! [`Managed`]: crate::coordination::Managed

mod abandoned;
mod lost;
mod primitive;

pub(crate) use abandoned::{ABANDONED, AbandonedCounters};
pub use abandoned::{AbandonCause, AbandonedReleases, ReleaseStage, abandoned_releases};
pub use lost::{LossReason, OwnershipLost};
pub use primitive::Primitive;
