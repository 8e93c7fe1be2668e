//! Random spreads for retry and wake-up times, so that many clients failing or waiting
//! together do not act together; and the cheap random numbers they and the layers' random
//! choices draw.

use std::cell::Cell;
use std::time::Duration;

/// A random number from this thread's generator (xorshift64*, seeded once per thread from
/// the operating system): no system call per draw, which a rejection or a retry may ask
/// for on every request. Not for secrets.
pub(crate) fn fast_u64() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(getrandom::u64().unwrap_or(0x9E37_79B9_7F4A_7C15) | 1);
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// A random duration from `low` up to (not including) `high`; `low` when the range is empty.
pub(crate) fn between(low: Duration, high: Duration) -> Duration {
    let span = u64::try_from(high.saturating_sub(low).as_micros()).unwrap_or(u64::MAX);
    if span == 0 {
        return low;
    }
    // Jitter needs no strong randomness.
    low.saturating_add(Duration::from_micros(fast_u64() % span))
}

/// `base` plus or minus up to `base / parts`, at random.
pub(crate) fn around(base: Duration, parts: u32) -> Duration {
    let spread = base.checked_div(parts).unwrap_or(Duration::ZERO);
    between(base - spread, base.saturating_add(spread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_its_range() {
        let (low, high) = (Duration::from_millis(40), Duration::from_millis(60));
        for _ in 0..200 {
            let pause = between(low, high);
            assert!(pause >= low && pause < high, "{pause:?}");
        }
        assert_eq!(between(high, low), high);
        assert_eq!(between(low, low), low);
    }

    #[test]
    fn around_stays_within_its_part() {
        let base = Duration::from_millis(100);
        for _ in 0..200 {
            let pause = around(base, 5);
            assert!((80..120).contains(&pause.as_millis()), "{pause:?}");
        }
        assert_eq!(around(base, 0), base);
        assert_eq!(around(Duration::ZERO, 5), Duration::ZERO);
    }
}
