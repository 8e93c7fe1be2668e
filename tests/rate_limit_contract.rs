//! The contract every rate-limit algorithm keeps, written once and run for the five (fixed
//! and sliding windows, token bucket, GCRA, stacked windows) on every target: a limit of five
//! over a long window counts weighted permits exactly, a probe consumes nothing, a refusal
//! takes nothing, more than the limit is refused with no time to wait, keys are binary and
//! independent, and callers on several connections at once never pass the limit together.
//! What differs between the algorithms (when permits come back) is in each one's own file.

mod support;

use std::time::Duration;

use leasehold::Coordination;
use leasehold::coordination::rate_limit::{
    FixedWindow, Gcra, RateLimitPolicy, Refill, SlidingWindow, Stacked, TokenBucket,
};
use support::target::{Acquire, Target, concurrent_grants, scenario};

/// Long enough that nothing comes back while a test runs.
const HOUR: Duration = Duration::from_secs(3600);

/// An algorithm, as the contract needs it: a limiter of `limit` permits over [`HOUR`].
trait Algorithm {
    type Limiter: Acquire;

    fn limiter(coordination: &Coordination, name: &str, limit: u64) -> Self::Limiter;
}

impl Algorithm for FixedWindow {
    type Limiter = FixedWindow;

    fn limiter(coordination: &Coordination, name: &str, limit: u64) -> FixedWindow {
        FixedWindow::new(coordination, name, limit, HOUR).expect("valid")
    }
}

impl Algorithm for SlidingWindow {
    type Limiter = SlidingWindow;

    fn limiter(coordination: &Coordination, name: &str, limit: u64) -> SlidingWindow {
        SlidingWindow::new(coordination, name, limit, HOUR, 6).expect("valid")
    }
}

impl Algorithm for TokenBucket {
    type Limiter = TokenBucket;

    fn limiter(coordination: &Coordination, name: &str, limit: u64) -> TokenBucket {
        TokenBucket::new(coordination, name, limit, Refill::new(1, HOUR)).expect("valid")
    }
}

impl Algorithm for Gcra {
    type Limiter = Gcra;

    fn limiter(coordination: &Coordination, name: &str, limit: u64) -> Gcra {
        Gcra::new(coordination, name, limit, HOUR, limit).expect("valid")
    }
}

impl Algorithm for Stacked {
    type Limiter = Stacked;

    fn limiter(coordination: &Coordination, name: &str, limit: u64) -> Stacked {
        // The binding window is the shorter one's.
        Stacked::new(
            coordination,
            name,
            [
                RateLimitPolicy::new("hour", limit, HOUR),
                RateLimitPolicy::new("day", limit * 10, 24 * HOUR),
            ],
        )
        .expect("valid")
    }
}

/// Weighted permits count exactly up to the limit; a probe (zero permits) consumes nothing;
/// a refusal takes nothing and says when to try again; more than the limit is refused with
/// no time to wait and changes nothing.
async fn weighted_permits_and_the_limit_boundaries<A: Algorithm>(target: Target) {
    let coordination = target.coordination("contract-weights").await;
    let limiter = A::limiter(&coordination, "api", 5);

    for permits in [6, u64::MAX] {
        let impossible = limiter.try_acquire(b"k", permits).await.expect("acquire");
        assert!(!impossible.is_granted(), "{permits}");
        assert_eq!(impossible.retry_after(), None, "{permits}");
        assert_eq!(impossible.remaining(), 5, "{permits}");
    }
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted());
    assert_eq!(probe.remaining(), 5);

    let three = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert!(three.is_granted());
    assert_eq!(three.remaining(), 2);
    let refused = limiter.try_acquire(b"k", 3).await.expect("acquire");
    assert!(!refused.is_granted());
    assert!(refused.retry_after().is_some(), "{refused:?}");
    assert_eq!(refused.remaining(), 2, "a refusal takes nothing");
    let last = limiter.try_acquire(b"k", 2).await.expect("acquire");
    assert!(last.is_granted(), "exactly the limit");
    assert_eq!(last.remaining(), 0);
    let probe = limiter.try_acquire(b"k", 0).await.expect("probe");
    assert!(probe.is_granted(), "a probe is never refused");
    assert_eq!(probe.remaining(), 0);
    let one = limiter.try_acquire(b"k", 1).await.expect("acquire");
    assert!(!one.is_granted());
    // Within the window, and one sliding-window segment of it.
    assert!(
        one.retry_after()
            .is_some_and(|wait| wait <= HOUR + HOUR / 6),
        "{one:?}"
    );

    let all = limiter.try_acquire(b"fresh", 5).await.expect("acquire");
    assert!(all.is_granted(), "the whole limit on a fresh key");
    assert_eq!(all.remaining(), 0);
}

/// Keys are bytes, binary ones included, and each has a limit of its own.
async fn keys_are_binary_and_independent<A: Algorithm>(target: Target) {
    let coordination = target.coordination("contract-keys").await;
    let limiter = A::limiter(&coordination, "api", 2);
    let keys: [&[u8]; 4] = [b"a", b"\x00\xff", b"a\x00", "é".as_bytes()];
    for key in keys {
        let taken = limiter.try_acquire(key, 2).await.expect("acquire");
        assert!(taken.is_granted(), "{key:?}");
        assert_eq!(taken.remaining(), 0, "{key:?}");
    }
    for key in keys {
        let more = limiter.try_acquire(key, 1).await.expect("acquire");
        assert!(!more.is_granted(), "{key:?}");
    }
    // Another limiter's name is another limit, over the same keys.
    let other = A::limiter(&coordination, "other", 2);
    assert!(
        other
            .try_acquire(b"a", 2)
            .await
            .expect("acquire")
            .is_granted()
    );
}

/// Callers on several connections (as replicas are), all at once, never pass the limit
/// together, and reach it.
async fn concurrent_callers_never_exceed_the_limit<A: Algorithm>(target: Target) {
    const LIMIT: u64 = 50;
    const CALLERS: usize = 8;
    const ATTEMPTS: usize = 40;
    let first = target.coordination("contract-concurrent").await;
    let handles = target.handles(&first, CALLERS).await;
    let granted = concurrent_grants(handles, ATTEMPTS, |coordination| {
        A::limiter(coordination, "api", LIMIT)
    })
    .await;
    assert_eq!(
        granted, LIMIT,
        "{CALLERS}×{ATTEMPTS} attempts against a limit of {LIMIT}"
    );
    let limiter = A::limiter(&first, "api", LIMIT);
    let probe = limiter.try_acquire(b"hot", 0).await.expect("probe");
    assert_eq!(
        probe.remaining(),
        0,
        "nothing left once the limit is reached"
    );
}

/// The contract for one algorithm, in a module named for it, on every target.
macro_rules! contract {
    ($module:ident, $algorithm:ty) => {
        mod $module {
            use super::*;

            async fn weighted_permits_and_the_limit_boundaries(target: Target) {
                super::weighted_permits_and_the_limit_boundaries::<$algorithm>(target).await
            }
            scenario!(weighted_permits_and_the_limit_boundaries);

            async fn keys_are_binary_and_independent(target: Target) {
                super::keys_are_binary_and_independent::<$algorithm>(target).await
            }
            scenario!(keys_are_binary_and_independent);

            async fn concurrent_callers_never_exceed_the_limit(target: Target) {
                super::concurrent_callers_never_exceed_the_limit::<$algorithm>(target).await
            }
            scenario!(concurrent_callers_never_exceed_the_limit);
        }
    };
}

contract!(fixed_window, FixedWindow);
contract!(sliding_window, SlidingWindow);
contract!(token_bucket, TokenBucket);
contract!(gcra, Gcra);
contract!(stacked, Stacked);
