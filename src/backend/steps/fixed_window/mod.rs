//! The fixed-window step, shared by both backends: count permits in a window that the
//! first request of the window starts.

mod memory;
mod redis;

use super::Step;
/// One fixed-window acquisition, on a physical key chosen by the limiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FixedWindowStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// Permits asked for; 0 probes without consuming or creating anything.
    pub(crate) permits: u64,
    /// Permits per window, at least 1.
    pub(crate) limit: u64,
    /// The window in whole milliseconds, at least 1.
    pub(crate) window_ms: u64,
    /// Whether the count must hold only what was admitted: the plain commands' `INCR`
    /// counts a rejected request too (past the limit, where it turns no decision of this
    /// limit), which a plan with a larger limit would then hold against the client.
    pub(crate) admitted_only: bool,
}

/// The step's answer, from the backend's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedWindowReply {
    /// Whether the permits were counted.
    pub(crate) granted: bool,
    /// The window's count after the step.
    pub(crate) count: u64,
    /// Milliseconds until the window ends; `None` when no window is active.
    pub(crate) ttl_ms: Option<u64>,
    /// Milliseconds until the window's permits are free again; `None` when no window is
    /// active. Redis keeps a key until strictly after its expiry time, one millisecond past
    /// its TTL; the memory backend frees it at the deadline itself.
    pub(crate) free_in_ms: Option<u64>,
}

impl Step for FixedWindowStep<'_> {
    const PRIMITIVE: &'static str = "fixed_window";
    const NAME: &'static str = "fixed_window";
    type Reply = FixedWindowReply;
}

/// A fixed-window acquisition of the hot-key tier: the request's permits and, when they
/// fit, a batch beside them, counted in the window in one atomic step (see
/// [`HotKeys`](crate::coordination::rate_limit::HotKeys)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FixedWindowReserveStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// Permits asked for, at most `limit`; 0 reserves a batch alone, in a window that
    /// exists (it never starts one).
    pub(crate) permits: u64,
    /// Permits per window, 1 to [`HOT_KEY_MAX_LIMIT`].
    pub(crate) limit: u64,
    /// The window in whole milliseconds, at least 1.
    pub(crate) window_ms: u64,
    /// The largest batch to reserve, at least 1.
    pub(crate) max_batch: u64,
    /// A batch takes at most `1 / share` of what is left after the request; at least 1.
    pub(crate) share: u64,
    /// How long before the window's end the instance stops spending: a batch takes at most
    /// the part of `max_batch` that the window's time left, less this, is of the window.
    pub(crate) stop_before_ms: u64,
}

/// The largest limit the hot-key tier takes: counts stay exact in a Lua number (below 2^53).
pub(crate) const HOT_KEY_MAX_LIMIT: u64 = 1_000_000_000_000_000;

/// A reservation step's answer, from the backend's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedWindowReservation {
    /// The request's own decision, as the plain step gives it.
    pub(crate) decided: FixedWindowReply,
    /// Permits reserved beside a granted request (0 when denied).
    pub(crate) batch: u64,
    /// What names the window for a [`FixedWindowReturnStep`]: its end on the backend's clock
    /// (in ms on Redis, from `PEXPIRETIME`; in ns in memory). 0 when denied, or when the
    /// server cannot tell (before Redis 7.0 and Valkey 7.2): then nothing is returned.
    pub(crate) window: u64,
}

impl Step for FixedWindowReserveStep<'_> {
    const PRIMITIVE: &'static str = "fixed_window";
    const NAME: &'static str = "fixed_window_reserve";
    type Reply = FixedWindowReservation;
}

/// Gives reserved permits back to the window they were reserved in, and to no other.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FixedWindowReturnStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// Permits to give back, at least 1.
    pub(crate) permits: u64,
    /// The window as its reservation named it (not 0).
    pub(crate) window: u64,
    /// Permits per window: a count beyond it counts as it (rejections that stayed counted).
    pub(crate) limit: u64,
}

impl Step for FixedWindowReturnStep<'_> {
    const PRIMITIVE: &'static str = "fixed_window";
    const NAME: &'static str = "fixed_window_return";
    /// Permits given back: 0 when the window ended.
    type Reply = u64;
}
