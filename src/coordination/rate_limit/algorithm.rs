//! The algorithms a [`RateLimiter`](super::RateLimiter) can run.

use super::policy::Policies;
use super::{
    FixedWindow, Gcra, RateLimitDecision, RateLimitPolicy, SlidingWindow, Stacked, TokenBucket,
};
use crate::backend::delivery::Delivery;
use crate::error::Result;

/// One of the crate's rate-limit algorithms, each decided by one atomic backend step.
#[derive(Clone, Debug)]
pub(crate) enum Algorithm {
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    TokenBucket(TokenBucket),
    Gcra(Gcra),
    Stacked(Stacked),
}

impl Algorithm {
    /// The policy of a single-policy algorithm, the first one of [`Stacked`].
    pub(crate) fn policy(&self) -> &RateLimitPolicy {
        match self {
            Algorithm::FixedWindow(limiter) => limiter.policy(),
            Algorithm::SlidingWindow(limiter) => limiter.policy(),
            Algorithm::TokenBucket(limiter) => limiter.policy(),
            Algorithm::Gcra(limiter) => limiter.policy(),
            Algorithm::Stacked(limiter) => limiter.policy(),
        }
    }

    /// The same limiter, its policy shown under `name` (a plan's; a stacked limiter's policies
    /// as `<name>/<policy>`): its keys stay the limiter's.
    pub(crate) fn shown_as(mut self, name: std::sync::Arc<str>) -> Self {
        let policy = match &mut self {
            Algorithm::FixedWindow(limiter) => &mut limiter.policy,
            Algorithm::SlidingWindow(limiter) => &mut limiter.policy,
            Algorithm::TokenBucket(limiter) => &mut limiter.policy,
            Algorithm::Gcra(limiter) => &mut limiter.policy,
            Algorithm::Stacked(limiter) => {
                return Algorithm::Stacked(limiter.clone().shown_as(name));
            }
        };
        *policy = policy.clone().renamed(name);
        self
    }

    /// Its name: a single policy's, or a stacked limiter's own.
    pub(crate) fn name(&self) -> &str {
        match self {
            Algorithm::Stacked(limiter) => limiter.name(),
            single => single.policy().name(),
        }
    }

    /// Every policy, in the order of the decisions' policy states.
    pub(crate) fn policies(&self) -> &[RateLimitPolicy] {
        match self {
            Algorithm::Stacked(limiter) => limiter.policies(),
            single => std::slice::from_ref(single.policy()),
        }
    }

    /// The policies, cheap to clone into each request's information.
    pub(crate) fn shared_policies(&self) -> Policies {
        match self {
            Algorithm::Stacked(limiter) => limiter.shared_policies(),
            single => Policies::One(single.policy().clone()),
        }
    }

    /// The handle it decides on.
    pub(crate) fn coordination(&self) -> &crate::Coordination {
        match self {
            Algorithm::FixedWindow(limiter) => limiter.coordination(),
            Algorithm::SlidingWindow(limiter) => limiter.coordination(),
            Algorithm::TokenBucket(limiter) => limiter.coordination(),
            Algorithm::Gcra(limiter) => limiter.coordination(),
            Algorithm::Stacked(limiter) => limiter.coordination(),
        }
    }

    /// Whether its backend decides in process (see
    /// [`Backend::decides_in_process`](crate::backend::Backend::decides_in_process)).
    pub(crate) fn decides_in_process(&self) -> bool {
        self.coordination().backend().decides_in_process()
    }

    /// A grant from a hot-key tier's reservation, without a round trip (reserving the next
    /// batch in the background, if `refill`); `None` when the backend must decide.
    pub(crate) fn granted_locally(
        &self,
        key: &[u8],
        permits: u64,
        refill: bool,
    ) -> Option<RateLimitDecision> {
        match self {
            Algorithm::FixedWindow(limiter) => limiter.granted_locally(key, permits, refill),
            _ => None,
        }
    }

    /// What the hot-key tier has done; `None` without one.
    pub(crate) fn hot_key_statistics(&self) -> Option<super::HotKeyStatistics> {
        match self {
            Algorithm::FixedWindow(limiter) => limiter.hot_key_statistics(),
            _ => None,
        }
    }

    /// Gives the hot-key tier's unspent reservations back (0 without one).
    pub(crate) async fn return_reserved(&self) -> Result<u64> {
        match self {
            Algorithm::FixedWindow(limiter) => limiter.return_reserved().await,
            _ => Ok(0),
        }
    }

    pub(crate) async fn try_acquire(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        match self {
            Algorithm::FixedWindow(limiter) => limiter.try_acquire(key, permits).await,
            Algorithm::SlidingWindow(limiter) => limiter.try_acquire(key, permits).await,
            Algorithm::TokenBucket(limiter) => limiter.try_acquire(key, permits).await,
            Algorithm::Gcra(limiter) => limiter.try_acquire(key, permits).await,
            Algorithm::Stacked(limiter) => limiter.try_acquire(key, permits).await,
        }
    }
}

macro_rules! from_algorithm {
    ($($variant:ident),+) => {
        $(
            impl From<$variant> for Algorithm {
                fn from(limiter: $variant) -> Self {
                    Algorithm::$variant(limiter)
                }
            }

            impl From<$variant> for super::RateLimiter {
                fn from(limiter: $variant) -> Self {
                    super::RateLimiter::new(Algorithm::$variant(limiter))
                }
            }
        )+
    };
}

from_algorithm!(FixedWindow, SlidingWindow, TokenBucket, Gcra, Stacked);
