//! The fenced lock steps on Redis: one Lua script each, sharing the helpers of
//! `fenced_lock.lua`.

use std::sync::LazyLock;

use redis::Value;

use crate::backend::redis::{RedisBackend, Script};
use crate::backend::steps::fenced_lock::{
    FencedAcquireReply, FencedAcquireStep, LeaseReleaseReply, LeaseStep,
};
use crate::error::{Error, ErrorKind, Result};

macro_rules! fenced_lock_script {
    ($name:literal, $file:literal) => {
        LazyLock::new(|| {
            Script::new(
                $name,
                concat!(include_str!("fenced_lock.lua"), include_str!($file)),
            )
        })
    };
}

static ACQUIRE: LazyLock<Script> =
    fenced_lock_script!("fenced_lock_acquire", "fenced_lock_acquire.lua");
static RENEW: LazyLock<Script> = fenced_lock_script!("fenced_lock_renew", "fenced_lock_renew.lua");
static RELEASE: LazyLock<Script> =
    fenced_lock_script!("fenced_lock_release", "fenced_lock_release.lua");
static VERIFY: LazyLock<Script> =
    fenced_lock_script!("fenced_lock_verify", "fenced_lock_verify.lua");

impl RedisBackend {
    /// Takes the lease and the next fencing token if no lease exists.
    pub(super) async fn fenced_acquire(
        &self,
        step: FencedAcquireStep<'_>,
    ) -> Result<FencedAcquireReply> {
        let script = ACQUIRE.name();
        let reply: Vec<Value> = self
            .eval(
                &ACQUIRE,
                &[step.lease_key, step.counter_key],
                (step.token, step.lease_ms, step.not_after_ms),
            )
            .await?;
        match Outcome::read(&reply, script)? {
            Outcome {
                name: b"late",
                detail: None,
            } => Ok(FencedAcquireReply::Late),
            Outcome {
                name: b"acquired",
                detail: Some(Value::BulkString(digits)),
            } => Ok(FencedAcquireReply::Acquired {
                fencing_token: fencing_token(digits, script)?,
            }),
            Outcome {
                name: b"held",
                detail: Some(&Value::Int(pttl)),
            } => Ok(FencedAcquireReply::Held {
                // -1: a lease without expiry, which only something else can have set.
                retry_after_ms: u64::try_from(pttl).ok(),
            }),
            outcome => Err(outcome.failure(script, &[step.lease_key, step.counter_key])),
        }
    }

    /// Gives the lease a new expiry if it is still held under the token.
    pub(super) async fn fenced_renew(&self, step: LeaseStep<'_>, lease_ms: u64) -> Result<bool> {
        let script = RENEW.name();
        let reply: Vec<Value> = self
            .eval(&RENEW, &[step.lease_key], (step.token, lease_ms))
            .await?;
        match Outcome::read(&reply, script)? {
            Outcome {
                name: b"renewed",
                detail: None,
            } => Ok(true),
            Outcome {
                name: b"not_owner",
                detail: None,
            } => Ok(false),
            outcome => Err(outcome.failure(script, &[step.lease_key])),
        }
    }

    /// Whether the lease is held under the token.
    pub(super) async fn fenced_verify(&self, step: LeaseStep<'_>) -> Result<bool> {
        let script = VERIFY.name();
        let reply: Vec<Value> = self.eval(&VERIFY, &[step.lease_key], step.token).await?;
        match Outcome::read(&reply, script)? {
            Outcome {
                name: b"held",
                detail: None,
            } => Ok(true),
            Outcome {
                name: b"not_held",
                detail: None,
            } => Ok(false),
            outcome => Err(outcome.failure(script, &[step.lease_key])),
        }
    }

    /// Deletes the lease if it is held under the token.
    pub(super) async fn fenced_release(&self, step: LeaseStep<'_>) -> Result<LeaseReleaseReply> {
        let script = RELEASE.name();
        let reply: Vec<Value> = self.eval(&RELEASE, &[step.lease_key], step.token).await?;
        let outcome = Outcome::read(&reply, script)?;
        match (outcome.name, &outcome.detail) {
            (b"released", None) => Ok(LeaseReleaseReply::Released),
            (b"no_key", None) => Ok(LeaseReleaseReply::NoLease),
            (b"other_owner", None) => Ok(LeaseReleaseReply::OtherOwner),
            _ => Err(outcome.failure(script, &[step.lease_key])),
        }
    }
}

/// A script's reply: `{name}` or `{name, detail}`.
struct Outcome<'a> {
    name: &'a [u8],
    detail: Option<&'a Value>,
}

impl<'a> Outcome<'a> {
    fn read(reply: &'a [Value], script: &str) -> Result<Self> {
        match reply {
            [Value::BulkString(name)] => Ok(Outcome { name, detail: None }),
            [Value::BulkString(name), detail] => Ok(Outcome {
                name,
                detail: Some(detail),
            }),
            _ => Err(Error::unexpected_reply(format!(
                "{script} answered {reply:?}"
            ))),
        }
    }

    /// The error for an outcome that is not a success of the script: corrupt state (the
    /// script names the key's problem), or an unexpected reply.
    fn failure(&self, script: &str, keys: &[&[u8]]) -> Error {
        match (self.name, self.detail) {
            (b"corrupt", Some(Value::BulkString(reason))) => {
                let keys: Vec<_> = keys.iter().map(|k| String::from_utf8_lossy(k)).collect();
                Error::new(
                    ErrorKind::CorruptState,
                    format!(
                        "fenced lock {keys:?}: {}; nothing was changed",
                        String::from_utf8_lossy(reason)
                    ),
                )
            }
            (name, detail) => Error::unexpected_reply(format!(
                "{script} answered {:?} {detail:?}",
                String::from_utf8_lossy(name)
            )),
        }
    }
}

/// The fencing token from the counter's decimal digits: exact over the whole range, from 1
/// to `i64::MAX`.
fn fencing_token(digits: &[u8], script: &str) -> Result<u64> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|text| text.parse::<u64>().ok())
        .filter(|&token| token > 0 && i64::try_from(token).is_ok())
        .ok_or_else(|| {
            Error::unexpected_reply(format!(
                "{script} answered the fencing token {:?}",
                String::from_utf8_lossy(digits)
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_tokens_are_read_exactly() {
        assert_eq!(fencing_token(b"1", "s").expect("valid"), 1);
        assert_eq!(
            fencing_token(b"9007199254740993", "s").expect("valid"),
            9_007_199_254_740_993
        );
        assert_eq!(
            fencing_token(b"9223372036854775807", "s").expect("valid"),
            i64::MAX as u64
        );
        for invalid in [
            b"0".as_slice(),
            b"-1",
            b"9223372036854775808",
            b"",
            b"1.0",
            b"\xff",
        ] {
            let err = fencing_token(invalid, "s").expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::UnexpectedReply);
        }
    }

    #[test]
    fn outcomes_and_failures() {
        let reply = [Value::BulkString(b"held".to_vec()), Value::Int(5)];
        let outcome = Outcome::read(&reply, "s").expect("shape");
        assert_eq!(outcome.name, b"held");
        assert_eq!(outcome.detail, Some(&Value::Int(5)));

        let reply = [
            Value::BulkString(b"corrupt".to_vec()),
            Value::BulkString(b"the counter is negative".to_vec()),
        ];
        let err = Outcome::read(&reply, "s")
            .expect("shape")
            .failure("s", &[b"c"]);
        assert_eq!(err.kind(), ErrorKind::CorruptState);
        assert!(err.to_string().contains("negative"), "{err}");

        assert!(Outcome::read(&[], "s").is_err());
        assert!(Outcome::read(&[Value::Int(1)], "s").is_err());
    }
}
