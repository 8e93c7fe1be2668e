//! The background releases given up, counted by primitive, stage and cause.

use std::fmt;
use std::sync::Mutex;

use super::Primitive;

/// At which stage of a holding's life a release ran without its holder, for
/// [`AbandonedReleases`] and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReleaseStage {
    /// The handle was dropped unreleased.
    Dropped,
    /// A release was cancelled mid-flight.
    CancelledRelease,
    /// An acquisition may have been granted although no answer arrived.
    UncertainAcquire,
    /// A grant arrived after its expiry had run out by the local estimate.
    LateGrant,
}

impl ReleaseStage {
    const ALL: [ReleaseStage; 4] = [
        ReleaseStage::Dropped,
        ReleaseStage::CancelledRelease,
        ReleaseStage::UncertainAcquire,
        ReleaseStage::LateGrant,
    ];

    fn index(self) -> usize {
        match self {
            ReleaseStage::Dropped => 0,
            ReleaseStage::CancelledRelease => 1,
            ReleaseStage::UncertainAcquire => 2,
            ReleaseStage::LateGrant => 3,
        }
    }
}

impl ReleaseStage {
    /// Its label in the metrics.
    pub(crate) const fn label(self) -> &'static str {
        match self {
            ReleaseStage::Dropped => "dropped",
            ReleaseStage::CancelledRelease => "cancelled_release",
            ReleaseStage::UncertainAcquire => "uncertain_acquire",
            ReleaseStage::LateGrant => "late_grant",
        }
    }
}

impl AbandonCause {
    /// Its label in the metrics.
    pub(crate) const fn label(self) -> &'static str {
        match self {
            AbandonCause::NoRuntime => "no_runtime",
            AbandonCause::Unavailable => "unavailable",
            AbandonCause::Refused => "refused",
        }
    }
}

impl fmt::Display for ReleaseStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReleaseStage::Dropped => "dropped unreleased",
            ReleaseStage::CancelledRelease => "release cancelled",
            ReleaseStage::UncertainAcquire => "acquisition uncertain",
            ReleaseStage::LateGrant => "grant arrived after its expiry",
        })
    }
}

/// Why a background release was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AbandonCause {
    /// There was no tokio runtime to run it on (dropped outside a runtime).
    NoRuntime,
    /// The backend stayed unavailable for the whole minute of retries.
    Unavailable,
    /// The backend refused it (an ACL, credentials, a script error): retrying would not help.
    Refused,
}

impl AbandonCause {
    const ALL: [AbandonCause; 3] = [
        AbandonCause::NoRuntime,
        AbandonCause::Unavailable,
        AbandonCause::Refused,
    ];

    fn index(self) -> usize {
        match self {
            AbandonCause::NoRuntime => 0,
            AbandonCause::Unavailable => 1,
            AbandonCause::Refused => 2,
        }
    }
}

/// The background releases given up since the process started, by [`Primitive`], stage and
/// cause: a metric to export (see [`abandoned_releases`]).
///
/// # Example
///
/// ```
/// use leasehold::coordination::ownership::{
///     AbandonCause, Primitive, ReleaseStage, abandoned_releases,
/// };
///
/// let counts = abandoned_releases();
/// let lease = Primitive::FencedLease;
/// let refused = counts.get(lease, ReleaseStage::Dropped, AbandonCause::Refused);
/// assert!(counts.of(lease) >= refused);
/// assert!(counts.total() >= counts.of(lease) + counts.of(Primitive::SemaphorePermit));
/// for (primitive, stage, cause, count) in counts.iter() {
///     println!("{primitive}: {count} given up ({stage}; {cause:?})");
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AbandonedReleases {
    /// Each primitive that gave a release up, with its counts by stage and cause.
    counts: Vec<(Primitive, Counts)>,
}

/// Counts by stage (rows) and cause (columns).
type Counts = [[u64; 3]; 4];

impl AbandonedReleases {
    /// How many releases of `primitive` at `stage` were given up for `cause`.
    pub fn get(&self, primitive: Primitive, stage: ReleaseStage, cause: AbandonCause) -> u64 {
        self.counts_of(primitive)
            .map_or(0, |counts| counts[stage.index()][cause.index()])
    }

    /// How many releases of `primitive` were given up in all.
    pub fn of(&self, primitive: Primitive) -> u64 {
        self.counts_of(primitive)
            .map_or(0, |counts| counts.iter().flatten().sum())
    }

    /// How many releases were given up in all, of every primitive.
    pub fn total(&self) -> u64 {
        self.counts
            .iter()
            .flat_map(|(_, counts)| counts.iter().flatten())
            .sum()
    }

    /// Every non-zero count, with its primitive, stage and cause.
    pub fn iter(&self) -> impl Iterator<Item = (Primitive, ReleaseStage, AbandonCause, u64)> + '_ {
        self.counts.iter().flat_map(|&(primitive, counts)| {
            ReleaseStage::ALL.into_iter().flat_map(move |stage| {
                AbandonCause::ALL
                    .into_iter()
                    .map(move |cause| {
                        (
                            primitive,
                            stage,
                            cause,
                            counts[stage.index()][cause.index()],
                        )
                    })
                    .filter(|(.., count)| *count > 0)
            })
        })
    }

    fn counts_of(&self, primitive: Primitive) -> Option<&Counts> {
        self.counts
            .iter()
            .find(|(name, _)| *name == primitive)
            .map(|(_, counts)| counts)
    }
}

/// The background releases of every primitive given up since the process started: a
/// metric to export. Each one is a lease or a permit left held on the backend until it
/// expires; a warning is logged
/// through `tracing` for each. A release is given up when it finds no tokio runtime (the
/// handle was dropped outside one), when the backend refuses it, or after a minute of
/// failed retries; it covers dropped handles, cancelled releases, and acquisitions whose
/// answer was lost, cancelled or late.
pub fn abandoned_releases() -> AbandonedReleases {
    ABANDONED.snapshot()
}

/// Where every primitive counts its give-ups.
pub(crate) static ABANDONED: AbandonedCounters = AbandonedCounters::new();

/// The live counters behind [`AbandonedReleases`]. Give-ups are rare: one lock suffices.
#[derive(Debug)]
pub(crate) struct AbandonedCounters {
    counts: Mutex<Vec<(Primitive, Counts)>>,
}

impl AbandonedCounters {
    pub(crate) const fn new() -> Self {
        AbandonedCounters {
            counts: Mutex::new(Vec::new()),
        }
    }

    /// Counts one release of `primitive` given up at `stage` for `cause`.
    pub(crate) fn add(&self, primitive: Primitive, stage: ReleaseStage, cause: AbandonCause) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let index = match counts.iter().position(|(name, _)| *name == primitive) {
            Some(index) => index,
            None => {
                counts.push((primitive, Counts::default()));
                counts.len() - 1
            }
        };
        counts[index].1[stage.index()][cause.index()] += 1;
        drop(counts);
        crate::telemetry::abandoned(primitive.label(), stage.label(), cause.label());
    }

    pub(crate) fn snapshot(&self) -> AbandonedReleases {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        AbandonedReleases {
            counts: counts.clone(),
        }
    }
}
