//! A rate-limit layer's decisions: one count per check, and how long it took.

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

/// A layer's decision metrics, labelled with its limiter's name. The handles are taken from
/// the recorder at the first decision (not when the layer is built), so that a recorder
/// installed between the two is the one that counts.
#[derive(Debug)]
pub(crate) struct DecisionMetrics {
    #[cfg(feature = "metrics")]
    policy: std::sync::Arc<str>,
    #[cfg(feature = "metrics")]
    handles: OnceLock<Handles>,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Handles {
    /// By [`Decided`], in its order.
    decisions: [metrics::Counter; 5],
    latency: metrics::Histogram,
}

impl DecisionMetrics {
    /// The metrics of a layer whose limiter is named `policy`.
    pub(crate) fn new(policy: &str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = policy;
        DecisionMetrics {
            #[cfg(feature = "metrics")]
            policy: policy.into(),
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
        let counter = |decision: &'static str| metrics::counter!(super::DECISIONS, "policy" => self.policy.clone(), "decision" => decision);
        Handles {
            decisions: [
                counter("allowed"),
                counter("limited"),
                counter("failed_open"),
                counter("failed_closed"),
                counter("shadow_limited"),
            ],
            latency: metrics::histogram!(super::DECISION_SECONDS, "policy" => self.policy.clone()),
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
