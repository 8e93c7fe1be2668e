//! Shadow mode: a rate limit decided and recorded as if enforced, whose rejections are let
//! through, per layer (wholly or in part) and for every layer at once.

use std::sync::atomic::{AtomicBool, Ordering};

/// The switch for every rate-limit layer of the process (see [`set_shadow_mode`]).
static EVERY_LAYER: AtomicBool = AtomicBool::new(false);

/// Puts every rate-limit layer of the process in shadow mode (`true`), whatever its own
/// setting, or gives each back its own (`false`, the default): a switch to flip at run time
/// (from an admin endpoint or a configuration reload) when a new limit misbehaves.
///
/// In shadow mode a layer decides and records every request as it would enforced (the
/// backend counts it, the `RateLimit` fields and [`RateLimitInfo`](super::RateLimitInfo)
/// describe the decision, the metrics count a `shadow_limited` decision), but lets the
/// requests it would reject through; [`RateLimitInfo::is_shadow_rejection`](super::RateLimitInfo::is_shadow_rejection)
/// tells a handler. A shadow rejection consumes what an enforced one does (nothing), so the
/// limit's state is the one enforcement would leave.
///
/// # Example
///
/// ```
/// use leasehold::layer::rate_limit::{set_shadow_mode, shadow_mode};
///
/// set_shadow_mode(true);
/// assert!(shadow_mode());
/// set_shadow_mode(false);
/// ```
pub fn set_shadow_mode(on: bool) {
    EVERY_LAYER.store(on, Ordering::Relaxed);
    tracing::info!(on, "rate limits' shadow mode for every layer");
}

/// Whether every rate-limit layer is in shadow mode (see [`set_shadow_mode`]).
pub fn shadow_mode() -> bool {
    EVERY_LAYER.load(Ordering::Relaxed)
}

/// Whether a rejection of a layer that enforces `share` of its rejections (1: all, the
/// default; 0: none, shadow mode) is enforced: at random in that proportion, unless every
/// layer is in shadow mode.
#[inline]
pub(crate) fn enforces(share: f64) -> bool {
    if shadow_mode() {
        return false;
    }
    if share >= 1.0 {
        return true;
    }
    if share <= 0.0 {
        return false;
    }
    // A 53-bit fraction; randomness need not be strong (no system call per rejection).
    #[allow(clippy::cast_precision_loss)]
    let fraction = (crate::jitter::fast_u64() >> 11) as f64 / (1u64 << 53) as f64;
    fraction < share
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_enforces_about_its_proportion() {
        assert!(enforces(1.0));
        assert!(!enforces(0.0));
        let enforced = (0..10_000).filter(|_| enforces(0.25)).count();
        assert!((2_000..3_000).contains(&enforced), "{enforced}");
    }
}
