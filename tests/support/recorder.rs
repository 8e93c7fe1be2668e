//! A metrics recorder for one test's thread (a current-thread runtime), and readers of what
//! it recorded: tests running side by side do not count each other.

use leasehold::telemetry;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// One value recorded: its name, its labels, and the value.
pub type Taken = (String, Vec<(String, String)>, DebugValue);

/// A recorder for this test's thread, and what it recorded.
pub struct Recorded {
    snapshotter: Snapshotter,
    _local: metrics::LocalRecorderGuard<'static>,
}

impl Recorded {
    pub fn start() -> Recorded {
        // Leaked: the guard borrows it for the test's life.
        let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
        Recorded {
            snapshotter: recorder.snapshotter(),
            _local: metrics::set_default_local_recorder(recorder),
        }
    }

    /// Every value recorded since the last look (counters and gauges since then, as the
    /// debugging recorder hands them over), by name and labels.
    pub fn take(&self) -> Vec<Taken> {
        self.snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let labels = key
                    .labels()
                    .map(|label| (label.key().to_owned(), label.value().to_owned()))
                    .collect();
                (key.name().to_owned(), labels, value)
            })
            .collect()
    }
}

/// The value of `name` with every one of `labels` in `taken`.
pub fn value<'a>(
    taken: &'a [Taken],
    name: &str,
    labels: &[(&str, &str)],
) -> Option<&'a DebugValue> {
    taken
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, _, value)| value)
}

pub fn counter(taken: &[Taken], name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(taken, name, labels) {
        Some(DebugValue::Counter(count)) => *count,
        None => 0,
        Some(other) => panic!("{name} is no counter: {other:?}"),
    }
}

pub fn gauge(taken: &[Taken], name: &str, labels: &[(&str, &str)]) -> f64 {
    match value(taken, name, labels) {
        Some(DebugValue::Gauge(value)) => value.into_inner(),
        None => 0.0,
        Some(other) => panic!("{name} is no gauge: {other:?}"),
    }
}

pub fn decisions(taken: &[Taken], policy: &str, decision: &str) -> u64 {
    counter(
        taken,
        telemetry::DECISIONS,
        &[("policy", policy), ("decision", decision)],
    )
}

pub fn latencies(taken: &[Taken], policy: &str) -> usize {
    match value(taken, telemetry::DECISION_SECONDS, &[("policy", policy)]) {
        Some(DebugValue::Histogram(values)) => values.len(),
        None => 0,
        Some(other) => panic!("no histogram: {other:?}"),
    }
}
