//! Why a release runs without its holder.

use std::fmt;

/// Why a release runs without its holder, for logs. Each primitive uses the reasons that can
/// happen to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// The handle was dropped unreleased.
    Dropped,
    /// A release was cancelled mid-flight.
    CancelledRelease,
    /// An acquisition may have been granted although no answer arrived.
    UncertainAcquire,
    /// A grant arrived after its lease had run out by the local estimate.
    LateGrant,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Why::Dropped => "dropped unreleased",
            Why::CancelledRelease => "release cancelled",
            Why::UncertainAcquire => "acquisition uncertain",
            Why::LateGrant => "grant arrived after its lease",
        })
    }
}
