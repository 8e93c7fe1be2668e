//! The circuit breakers' state, as a gauge.

use crate::layer::CircuitState;

/// The circuit breaker named `breaker` is now `state`.
pub(crate) fn circuit(breaker: &std::sync::Arc<str>, state: CircuitState) {
    #[cfg(feature = "metrics")]
    {
        let value = match state {
            CircuitState::Closed => 0.0,
            CircuitState::HalfOpen => 1.0,
            CircuitState::Open => 2.0,
        };
        metrics::gauge!(super::CIRCUIT_STATE, "breaker" => breaker.clone()).set(value);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (breaker, state);
}
