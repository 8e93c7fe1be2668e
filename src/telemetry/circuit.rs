//! The circuit breakers' state, as a gauge.

/// The circuit breaker named `breaker` is now in the state the gauge shows as `value` (0
/// closed, 1 half-open, 2 open).
pub(crate) fn circuit(breaker: &std::sync::Arc<str>, value: u8) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(super::CIRCUIT_STATE, "breaker" => breaker.clone()).set(f64::from(value));
    #[cfg(not(feature = "metrics"))]
    let _ = (breaker, value);
}
