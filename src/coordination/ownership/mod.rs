//! What every held thing shares with its users: the signal a self-renewing holding gives
//! when it stops holding, and the count of background releases given up.

mod abandoned;
mod lost;
mod primitive;

pub(crate) use abandoned::{ABANDONED, AbandonedCounters};
pub use abandoned::{AbandonCause, AbandonedReleases, ReleaseStage, abandoned_releases};
pub use lost::{LossReason, OwnershipLost};
pub use primitive::Primitive;
