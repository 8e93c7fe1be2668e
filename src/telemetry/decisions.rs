//! A layer's decisions (a rate limit's, a concurrency limit's): one count per check, and
//! how long it took.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

/// How a rate-limit layer answered one check (see the [module](super) for the labels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decided {
    Allowed,
    Limited,
    FailedOpen,
    FailedClosed,
    ShadowLimited,
}

/// When a check began: a moment with the `metrics` feature, nothing without.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

impl Clock {
    /// Now.
    #[inline]
    pub(crate) fn start() -> Self {
        Clock {
            #[cfg(feature = "metrics")]
            started: std::time::Instant::now(),
        }
    }
}

/// A layer's decision metrics, labelled with its limit's name. The handles are taken from
/// the recorder at the first decision (not when the layer is built), so that a recorder
/// installed between the two is the one that counts.
#[derive(Debug)]
pub(crate) struct DecisionMetrics {
    #[cfg(feature = "metrics")]
    policy: std::sync::Arc<str>,
    #[cfg(feature = "metrics")]
    names: &'static Names,
    #[cfg(feature = "metrics")]
    handles: OnceLock<Handles>,
}

/// The names of one kind of layer's series, and of the label that names its limit.
#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Names {
    decisions: &'static str,
    latency: &'static str,
    label: &'static str,
}

#[cfg(feature = "metrics")]
static RATE_LIMIT: Names = Names {
    decisions: super::DECISIONS,
    latency: super::DECISION_SECONDS,
    label: "policy",
};

#[cfg(feature = "metrics")]
static CONCURRENCY_LIMIT: Names = Names {
    decisions: super::CONCURRENCY_DECISIONS,
    latency: super::CONCURRENCY_DECISION_SECONDS,
    label: "limit",
};

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Handles {
    /// By [`Decided`], in its order.
    decisions: [metrics::Counter; 5],
    latency: metrics::Histogram,
}

impl DecisionMetrics {
    /// The metrics of a rate-limit layer whose limiter is named `policy`.
    pub(crate) fn new(policy: &str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = policy;
        DecisionMetrics {
            #[cfg(feature = "metrics")]
            policy: policy.into(),
            #[cfg(feature = "metrics")]
            names: &RATE_LIMIT,
            #[cfg(feature = "metrics")]
            handles: OnceLock::new(),
        }
    }

    /// The metrics of a concurrency-limit layer named `limit`.
    pub(crate) fn concurrency(limit: &str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = limit;
        DecisionMetrics {
            #[cfg(feature = "metrics")]
            policy: limit.into(),
            #[cfg(feature = "metrics")]
            names: &CONCURRENCY_LIMIT,
            #[cfg(feature = "metrics")]
            handles: OnceLock::new(),
        }
    }

    /// Counts one check, decided as `decided`, begun at `clock`.
    #[inline]
    pub(crate) fn record(&self, decided: Decided, clock: Clock) {
        #[cfg(feature = "metrics")]
        {
            let handles = self.handles.get_or_init(|| self.register());
            handles.decisions[decided as usize].increment(1);
            handles.latency.record(clock.started.elapsed());
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (decided, clock);
    }

    #[cfg(feature = "metrics")]
    #[cold]
    fn register(&self) -> Handles {
        let names = self.names;
        let counter = |decision: &'static str| metrics::counter!(names.decisions, names.label => self.policy.clone(), "decision" => decision);
        Handles {
            decisions: [
                counter("allowed"),
                counter("limited"),
                counter("failed_open"),
                counter("failed_closed"),
                counter("shadow_limited"),
            ],
            latency: metrics::histogram!(names.latency, names.label => self.policy.clone()),
        }
    }
}

impl Clone for DecisionMetrics {
    /// A layer's clone (a setting changed) registers its handles afresh, at its own first
    /// decision: the same names and labels, so the same series.
    fn clone(&self) -> Self {
        DecisionMetrics {
            #[cfg(feature = "metrics")]
            policy: self.policy.clone(),
            #[cfg(feature = "metrics")]
            names: self.names,
            #[cfg(feature = "metrics")]
            handles: OnceLock::new(),
        }
    }
}

/// The permits now waiting in the queue of the limiter named `policy`.
#[inline]
pub(crate) fn queued_permits(policy: &std::sync::Arc<str>, permits: u64) {
    #[cfg(feature = "metrics")]
    {
        #[allow(clippy::cast_precision_loss)]
        let permits = permits as f64;
        metrics::gauge!(super::QUEUED_PERMITS, "policy" => policy.clone()).set(permits);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (policy, permits);
}
