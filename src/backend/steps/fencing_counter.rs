//! The fencing counter, shared by the primitives that hand out fencing tokens (the fenced
//! lock, a read-write lease's writers): reading a token from a script's reply, and in
//! process, the counter's validation and the next token, as `fencing_counter.lua` does on
//! Redis.
//!
//! The next token is the larger of the counter plus one and the clock in microseconds since
//! the epoch (the floor): a counter that was lost starts again above every token handed out
//! before it. So a counter is kept only while a token of its can matter: until its lease
//! ends and the clock has passed it ([`store_token`]); a name a client chooses leaves no key
//! for ever.

use crate::backend::memory::clock::{Clock, Moment};
use crate::backend::memory::{Store, Value};
use crate::error::{Error, Result};

/// The fencing token from the counter's decimal digits: exact over the whole range, from 1
/// to `i64::MAX`.
pub(crate) fn token_from_digits(digits: &[u8], script: &str) -> Result<u64> {
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

/// The counter stored at `key` (`None` when absent), or corrupt state naming `user_key`: a
/// counter is a non-negative integer.
pub(crate) fn read(
    store: &mut Store,
    key: &[u8],
    now: Moment,
    user_key: &[u8],
) -> Result<Option<i64>> {
    let Some(entry) = store.get_mut(key, now) else {
        return Ok(None);
    };
    let reason = match entry.value {
        Value::FencingCounter(value) if value < 0 => "the counter is negative",
        Value::FencingCounter(value) => return Ok(Some(value)),
        _ => "the counter key holds another primitive's state",
    };
    Err(Error::corrupt_state(user_key, reason))
}

/// The next token after `counter` (below `i64::MAX`, or `None` when absent) at `now`.
pub(crate) fn next(counter: Option<i64>, clock: Clock, now: Moment) -> i64 {
    let floor = i64::try_from(clock.since_epoch(now).as_micros()).unwrap_or(i64::MAX);
    counter.map_or(floor, |counter| (counter + 1).max(floor))
}

/// Stores `token` in the counter at `key`, kept until the later of `lasts_until` (the end of
/// the lease it was taken for) and the moment the clock passes it, and never shorter than it
/// was kept. After that the floor alone hands out a greater token: the backend's clock is
/// monotonic, so no margin is needed here (the Redis scripts add one for a server's clock
/// stepping back).
pub(crate) fn store_token(
    store: &mut Store,
    key: &[u8],
    token: i64,
    lasts_until: Moment,
    clock: Clock,
    now: Moment,
) -> Result<()> {
    let passed = clock.past(token.unsigned_abs());
    let kept = store.get_mut(key, now).and_then(|entry| entry.expires_at());
    let until = lasts_until.max(passed).max(kept.unwrap_or(now));
    store.insert(key, Value::FencingCounter(token), Some(until), now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn fencing_tokens_are_read_exactly() {
        assert_eq!(token_from_digits(b"1", "s").expect("valid"), 1);
        assert_eq!(
            token_from_digits(b"9007199254740993", "s").expect("valid"),
            9_007_199_254_740_993
        );
        assert_eq!(
            token_from_digits(b"9223372036854775807", "s").expect("valid"),
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
            let err = token_from_digits(invalid, "s").expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::UnexpectedReply);
        }
    }
}
