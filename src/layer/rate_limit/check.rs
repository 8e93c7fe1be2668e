//! What one check carries from its request to its answer.

use super::partition::PartitionTag;
use crate::telemetry::Clock;

/// When the check began (for its latency) and, where the layer shows partition keys, the
/// client key's tag.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Check {
    pub(crate) clock: Clock,
    pub(crate) partition: Option<PartitionTag>,
}
