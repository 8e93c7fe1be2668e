//! The fenced lock steps in process, with the same answers and the same validation as the Lua
//! scripts: a [`Value::LeaseOwner`] entry whose expiry is the lease's, and a
//! [`Value::FencingCounter`] kept while a token of its can matter.

use crate::backend::ensure_same_slot;
use crate::backend::memory::clock::Moment;
use crate::backend::memory::clock::{self, millis_until};
use crate::backend::memory::{MemoryBackend, Store, Value};
use crate::backend::steps::fenced_lock::{
    FencedAcquireReply, FencedAcquireStep, LeaseReleaseReply, LeaseReleaseStep, LeaseRenewStep,
    LeaseStep, LeaseVerifyStep,
};
use crate::backend::steps::{MemoryStep, fencing_counter};
use crate::error::{Error, Result};

/// What a lease key holds.
enum Lease<'a> {
    None,
    Owner(&'a str, Option<Moment>),
}

/// Takes the lease and the next fencing token if no lease exists.
impl MemoryStep for FencedAcquireStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<FencedAcquireReply> {
        let step = self;
        let lease_key = memory.physical_key(step.lease_key);
        let counter_key = memory.physical_key(step.counter_key);
        ensure_same_slot(&[&lease_key, &counter_key])?;
        let clock = memory.clock();
        memory.step(|store, now| {
            match lease(store, &lease_key, now, step.lease_key)? {
                // This acquisition delivered twice: no acquisition moves the counter while
                // its lease stands, so the counter is its token.
                Lease::Owner(owner, _) if owner == step.token => {
                    return match fencing_counter::read(store, &counter_key, now, step.counter_key)?
                    {
                        Some(token) if token > 0 => Ok(FencedAcquireReply::Acquired {
                            fencing_token: token.unsigned_abs(),
                        }),
                        _ => Err(Error::corrupt_state(
                            step.counter_key,
                            "the counter of a held lease is gone",
                        )),
                    };
                }
                Lease::Owner(_, expires_at) => {
                    return Ok(FencedAcquireReply::Held {
                        retry_after_ms: expires_at.map(|deadline| millis_until(deadline, now)),
                    });
                }
                Lease::None => {}
            }
            let counter = fencing_counter::read(store, &counter_key, now, step.counter_key)?;
            if counter == Some(i64::MAX) {
                return Err(Error::corrupt_state(
                    step.counter_key,
                    "the counter has reached the largest fencing token",
                ));
            }
            let deadline = clock::after(now, step.lease_ms, "a lease")?;
            // Both keys, or neither: a counter stored without its lease would be a gap, but a
            // lease refused after its counter moved must not be reported as granted.
            let new_keys = 1 + usize::from(counter.is_none());
            store.ensure_room_for(new_keys, now)?;
            // Below i64::MAX, checked above.
            let next = fencing_counter::next(counter, clock, now);
            fencing_counter::store_token(store, &counter_key, next, deadline, clock, now)?;
            store.insert(
                &lease_key,
                Value::LeaseOwner(step.token.into()),
                Some(deadline),
                now,
            )?;
            Ok(FencedAcquireReply::Acquired {
                fencing_token: next.unsigned_abs(),
            })
        })
    }
}

/// Gives the lease a new expiry if it is still held under the token.
impl MemoryStep for LeaseRenewStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let (step, lease_ms) = (self.lease, self.lease_ms);
        let lease_key = memory.physical_key(step.lease_key);
        memory.step(|store, now| {
            if !is_owner(store, &lease_key, now, step)? {
                return Ok(false);
            }
            let deadline = clock::after(now, lease_ms, "a lease")?;
            Ok(store.set_expiry(&lease_key, Some(deadline), now))
        })
    }
}

/// Whether the lease is held under the token.
impl MemoryStep for LeaseVerifyStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let LeaseVerifyStep(step) = *self;
        let lease_key = memory.physical_key(step.lease_key);
        memory.step(|store, now| is_owner(store, &lease_key, now, step))
    }
}

/// Deletes the lease if it is held under the token.
impl MemoryStep for LeaseReleaseStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<LeaseReleaseReply> {
        let LeaseReleaseStep(step) = *self;
        let lease_key = memory.physical_key(step.lease_key);
        memory.step(|store, now| {
            let reply = match lease(store, &lease_key, now, step.lease_key)? {
                Lease::None => LeaseReleaseReply::NoLease,
                Lease::Owner(owner, _) if owner == step.token => LeaseReleaseReply::Released,
                Lease::Owner(..) => LeaseReleaseReply::OtherOwner,
            };
            if reply == LeaseReleaseReply::Released {
                store.remove(&lease_key);
            }
            Ok(reply)
        })
    }
}

/// The lease stored at `key`; corrupt state when the key holds something else.
fn lease<'a>(store: &'a mut Store, key: &[u8], now: Moment, user_key: &[u8]) -> Result<Lease<'a>> {
    match store.get_mut(key, now) {
        None => Ok(Lease::None),
        Some(entry) => {
            let expires_at = entry.expires_at();
            match &entry.value {
                Value::LeaseOwner(owner) => Ok(Lease::Owner(owner, expires_at)),
                _ => Err(Error::corrupt_state(
                    user_key,
                    "the lease key holds another primitive's state",
                )),
            }
        }
    }
}

fn is_owner(store: &mut Store, key: &[u8], now: Moment, step: LeaseStep<'_>) -> Result<bool> {
    Ok(matches!(
        lease(store, key, now, step.lease_key)?,
        Lease::Owner(owner, _) if owner == step.token
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::ErrorKind;

    const LEASE: &[u8] = b"{l}:lease";
    const COUNTER: &[u8] = b"{l}:fence";

    fn acquire(backend: &MemoryBackend, token: &str) -> Result<FencedAcquireReply> {
        backend.run(FencedAcquireStep {
            lease_key: LEASE,
            counter_key: COUNTER,
            token,
            lease_ms: 1_000,
            not_after_ms: 0,
            replication: None,
        })
    }

    /// The token floor now: the backend's clock in microseconds since the epoch.
    fn floor(backend: &MemoryBackend) -> u64 {
        u64::try_from(backend.now().as_micros()).expect("before the year 2255")
    }

    fn counter(token: u64) -> Value {
        Value::FencingCounter(i64::try_from(token).expect("a token below i64::MAX"))
    }

    /// Tokens follow the clock, and the counter where it is ahead of the clock: each is
    /// greater than the one before, and a counter that was lost starts again above them.
    #[tokio::test(start_paused = true)]
    async fn tokens_follow_the_clock_and_never_go_back() {
        let backend = MemoryBackend::new();
        let mut last = 0;
        for round in 0..3 {
            let token = match acquire(&backend, "a").expect("acquire") {
                FencedAcquireReply::Acquired { fencing_token } => fencing_token,
                other => panic!("{other:?}"),
            };
            assert!(token > last, "round {round}: {token} after {last}");
            assert_eq!(token, floor(&backend).max(last + 1));
            last = token;
            assert_eq!(release(&backend, "a"), LeaseReleaseReply::Released);
            if round == 1 {
                // Lost, as a restart without persistence loses it.
                backend.step(|store, _| store.remove(&backend.physical_key(COUNTER)));
            }
            tokio::time::advance(Duration::from_micros(1)).await;
        }
        // A counter ahead of the clock goes on from itself, and is kept until the clock has
        // passed it, though its lease ended long before.
        let ahead = floor(&backend) + 10_000_000;
        put(&backend, COUNTER, counter(ahead), None);
        assert_eq!(
            acquire(&backend, "b").expect("acquire"),
            FencedAcquireReply::Acquired {
                fencing_token: ahead + 1
            }
        );
        assert_eq!(release(&backend, "b"), LeaseReleaseReply::Released);
        tokio::time::advance(Duration::from_secs(9)).await;
        let passed = backend.clock().past(ahead + 1);
        assert_eq!(
            stored(&backend, COUNTER),
            Some((counter(ahead + 1), Some(passed)))
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            stored(&backend, COUNTER),
            None,
            "gone once the clock passed it"
        );
        let FencedAcquireReply::Acquired { fencing_token } =
            acquire(&backend, "c").expect("acquire")
        else {
            panic!("free")
        };
        assert!(fencing_token > ahead + 1);
    }

    fn stored(backend: &MemoryBackend, key: &[u8]) -> Option<(Value, Option<Moment>)> {
        backend.step(|store, now| {
            store
                .get_mut(&backend.physical_key(key), now)
                .map(|entry| (entry.value.clone(), entry.expires_at()))
        })
    }

    fn put(backend: &MemoryBackend, key: &[u8], value: Value, expires_in: Option<Duration>) {
        backend
            .step(|store, now| {
                let key = backend.physical_key(key);
                store.insert(&key, value, expires_in.map(|d| now + d), now)
            })
            .expect("insert");
    }

    fn release(backend: &MemoryBackend, token: &str) -> LeaseReleaseReply {
        backend
            .run(LeaseReleaseStep(LeaseStep {
                lease_key: LEASE,
                token,
            }))
            .expect("release")
    }

    #[tokio::test(start_paused = true)]
    async fn an_acquisition_delivered_twice_is_granted_its_token_again() {
        let backend = MemoryBackend::new();
        let first = acquire(&backend, "a").expect("acquire");
        let token = floor(&backend);
        assert_eq!(
            first,
            FencedAcquireReply::Acquired {
                fencing_token: token
            }
        );
        let lease_end = backend.clock().now() + Duration::from_secs(1);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(acquire(&backend, "a").expect("again"), first);
        assert!(matches!(
            acquire(&backend, "b").expect("another"),
            FencedAcquireReply::Held { .. }
        ));
        // Kept as long as its lease at least.
        assert_eq!(
            stored(&backend, COUNTER),
            Some((counter(token), Some(lease_end)))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_duplicate_of_the_largest_token_is_granted_and_a_bad_counter_is_corrupt() {
        let backend = MemoryBackend::new();
        put(
            &backend,
            COUNTER,
            counter(i64::MAX.unsigned_abs() - 1),
            None,
        );
        let largest = FencedAcquireReply::Acquired {
            fencing_token: i64::MAX.unsigned_abs(),
        };
        assert_eq!(acquire(&backend, "a").expect("acquire"), largest);
        assert_eq!(acquire(&backend, "a").expect("again"), largest);
        for (value, expiry) in [
            (counter(0), None),
            // A fixed window's counter.
            (Value::Int(5), Some(Duration::from_secs(60))),
        ] {
            put(&backend, COUNTER, value, expiry);
            let err = acquire(&backend, "a").expect_err("corrupt");
            assert_eq!(err.kind(), ErrorKind::CorruptState);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_up_to_the_largest_then_corrupt() {
        let backend = MemoryBackend::new();
        put(
            &backend,
            COUNTER,
            counter(i64::MAX.unsigned_abs() - 2),
            None,
        );
        assert_eq!(
            acquire(&backend, "a").expect("acquire"),
            FencedAcquireReply::Acquired {
                fencing_token: (i64::MAX - 1).unsigned_abs()
            }
        );
        assert_eq!(release(&backend, "a"), LeaseReleaseReply::Released);
        assert_eq!(
            acquire(&backend, "b").expect("acquire"),
            FencedAcquireReply::Acquired {
                fencing_token: i64::MAX.unsigned_abs()
            }
        );
        assert_eq!(release(&backend, "b"), LeaseReleaseReply::Released);
        let err = acquire(&backend, "c").expect_err("overflow");
        assert_eq!(err.kind(), ErrorKind::CorruptState);
        assert!(err.to_string().contains("largest"), "{err}");
        assert_eq!(stored(&backend, LEASE), None);
        assert_eq!(
            stored(&backend, COUNTER).map(|(value, _)| value),
            Some(counter(i64::MAX.unsigned_abs()))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn corrupt_counters_and_leases_fail_without_change() {
        let backend = MemoryBackend::new();
        let minute = Some(Duration::from_secs(60));
        for (value, expiry, reason) in [
            (Value::FencingCounter(-1), None, "negative"),
            (Value::Int(5), minute, "another primitive"),
            (Value::Tat(backend.clock().now()), None, "another primitive"),
        ] {
            put(&backend, COUNTER, value.clone(), expiry);
            let before = stored(&backend, COUNTER);
            let err = acquire(&backend, "t").expect_err("corrupt");
            assert_eq!(err.kind(), ErrorKind::CorruptState);
            assert!(err.to_string().contains(reason), "{err}");
            assert_eq!(stored(&backend, COUNTER), before);
            assert_eq!(stored(&backend, LEASE), None);
        }

        backend.step(|store, _| store.remove(&backend.physical_key(COUNTER)));
        put(&backend, LEASE, Value::Int(7), None);
        let step = LeaseStep {
            lease_key: LEASE,
            token: "t",
        };
        let errors = [
            acquire(&backend, "t").map(drop),
            backend
                .run(LeaseRenewStep {
                    lease: step,
                    lease_ms: 1_000,
                })
                .map(drop),
            backend.run(LeaseVerifyStep(step)).map(drop),
            backend.run(LeaseReleaseStep(step)).map(drop),
        ];
        for result in errors {
            assert_eq!(result.expect_err("corrupt").kind(), ErrorKind::CorruptState);
        }
        assert_eq!(stored(&backend, LEASE), Some((Value::Int(7), None)));
        assert_eq!(stored(&backend, COUNTER), None);
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_owner_renews_verifies_and_releases() {
        let backend = MemoryBackend::new();
        let token = floor(&backend);
        assert_eq!(
            acquire(&backend, "a").expect("acquire"),
            FencedAcquireReply::Acquired {
                fencing_token: token
            }
        );
        assert_eq!(
            acquire(&backend, "b").expect("acquire"),
            FencedAcquireReply::Held {
                retry_after_ms: Some(1_000)
            }
        );
        let owner = LeaseStep {
            lease_key: LEASE,
            token: "a",
        };
        let other = LeaseStep {
            token: "b",
            ..owner
        };
        assert!(
            !backend
                .run(LeaseRenewStep {
                    lease: other,
                    lease_ms: 60_000
                })
                .expect("renew")
        );
        assert!(!backend.run(LeaseVerifyStep(other)).expect("verify"));
        assert_eq!(release(&backend, "b"), LeaseReleaseReply::OtherOwner);

        tokio::time::advance(Duration::from_millis(400)).await;
        assert!(
            backend
                .run(LeaseRenewStep {
                    lease: owner,
                    lease_ms: 5_000
                })
                .expect("renew")
        );
        let expires_at = stored(&backend, LEASE).and_then(|(_, at)| at);
        assert_eq!(
            expires_at,
            Some(backend.clock().now() + Duration::from_secs(5))
        );
        assert!(backend.run(LeaseVerifyStep(owner)).expect("verify"));

        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!backend.run(LeaseVerifyStep(owner)).expect("verify"));
        assert!(
            !backend
                .run(LeaseRenewStep {
                    lease: owner,
                    lease_ms: 5_000
                })
                .expect("renew")
        );
        assert_eq!(release(&backend, "a"), LeaseReleaseReply::NoLease);
        // The counter went when its first lease would have ended and the clock passed its
        // token: the renewal left it alone, and the next token is above it all the same.
        assert_eq!(stored(&backend, COUNTER), None);
        let FencedAcquireReply::Acquired { fencing_token } =
            acquire(&backend, "c").expect("acquire")
        else {
            panic!("free")
        };
        assert!(fencing_token > token);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_store_takes_both_keys_or_neither() {
        let backend = MemoryBackend::builder().max_keys(2).build().expect("valid");
        put(&backend, b"other", Value::Int(1), None);
        let err = acquire(&backend, "a").expect_err("no room for two keys");
        assert_eq!(err.kind(), ErrorKind::CapacityExceeded);
        assert_eq!(backend.len(), 1);
    }
}
