//! Shadow mode: a rate limit decided and recorded as if enforced, whose rejections are let
//! through, per layer (wholly or in part), for the layers that share a switch, and for
//! every layer at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The switch for every rate-limit layer of the process (see [`set_shadow_mode`]).
static EVERY_LAYER: AtomicBool = AtomicBool::new(false);

/// A shadow-mode switch for the layers given it
/// ([`RedisRateLimitLayer::shadow_switch`](super::RedisRateLimitLayer::shadow_switch)), in
/// place of the process-wide [`set_shadow_mode`]: one per tenant, per router or per test,
/// flipped at run time without touching the other layers of the process. Clones share the
/// switch. Off when created.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::layer::rate_limit::{RedisRateLimitLayer, ShadowSwitch};
///
/// # fn main() -> leasehold::Result<()> {
/// let search = ShadowSwitch::new();
/// let layer = RedisRateLimitLayer::fixed_window(&Coordination::memory(), "search", 10, Duration::from_secs(1))?
///     .shadow_switch(&search);
/// search.set(true); // this layer, and any other given `search`, lets its rejections through
/// assert!(search.is_on());
/// # let _ = layer;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct ShadowSwitch {
    on: Arc<AtomicBool>,
}

impl ShadowSwitch {
    /// A new switch, off.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts the layers given this switch in shadow mode (`true`), whatever their own
    /// setting, or gives each back its own (`false`).
    pub fn set(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
        tracing::info!(on, "rate limits' shadow mode for the layers of a switch");
    }

    /// Whether the switch is on.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }
}

/// Puts every rate-limit layer of the process in shadow mode (`true`), whatever its own
/// setting, or gives each back its own (`false`, the default): a switch to flip at run time
/// (from an admin endpoint or a configuration reload) when a new limit misbehaves. A layer
/// given a [`ShadowSwitch`] follows that switch instead: tests that run side by side in one
/// process, or tenants of one process, each keep their own.
///
/// In shadow mode a layer decides and records every request as it would enforced (the
/// backend counts it, [`RateLimitInfo`](super::RateLimitInfo) describes the decision, the
/// metrics count a `shadow_limited` decision), but lets the requests it would reject
/// through, without rate-limit fields; [`RateLimitInfo::is_shadow_rejection`](super::RateLimitInfo::is_shadow_rejection)
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
/// default; 0: none, shadow mode) is enforced: at random in that proportion, unless the
/// layer's switch (its own `switch`, or the process's) is on.
#[inline]
pub(crate) fn enforces(share: f64, switch: Option<&ShadowSwitch>) -> bool {
    if switch.map_or_else(shadow_mode, ShadowSwitch::is_on) {
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
        let switch = ShadowSwitch::new();
        let switch = Some(&switch);
        assert!(enforces(1.0, switch));
        assert!(!enforces(0.0, switch));
        let enforced = (0..10_000).filter(|_| enforces(0.25, switch)).count();
        assert!((2_000..3_000).contains(&enforced), "{enforced}");
    }

    #[test]
    fn a_switch_governs_its_layers_alone() {
        let (one, other) = (ShadowSwitch::new(), ShadowSwitch::new());
        let same = one.clone();
        same.set(true);
        assert!(!enforces(1.0, Some(&one)), "a clone shares the switch");
        assert!(enforces(1.0, Some(&other)), "another switch is its own");
    }
}
