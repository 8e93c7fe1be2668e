//! The one reply convention of the crate's scripts, and its decoder.
//!
//! Every script answers in one of three shapes:
//!
//! - **a status table** `{status, value, ...}`: `status` is a short string naming the outcome
//!   (`'granted'`, `'held'`, `'late'`, ...), followed by the outcome's values, integers or
//!   strings;
//! - **corrupt state** `{'corrupt', i, what}`: `KEYS[i]` holds something the step cannot read,
//!   `what` says what is wrong with it, and the script changed nothing. The decoder turns it
//!   into [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState) carrying the user key as
//!   [`Error::key`] (see [`Error::corrupt_state`]), so no step writes that error itself;
//! - **a packed grant**, the rate limiters' fast path, two numbers `(a, b)` in one integer,
//!   exact in a Lua number (below 2^53 in magnitude): the non-negative `a * 2^32 + b` when
//!   `a < 2^21` and `b < 2^32`, which covers most grants; else the negative
//!   `-(a * r + b) - 1`, where `b < r` and the radix `r` is one more than a bound on `b` that
//!   the script and its step both derive from the step's arguments (a token bucket's refill
//!   time, say), for the limits in the millions. Redis spends about as much on converting a
//!   reply table as on a whole command, and a table never arrives as an integer, so the two
//!   cannot be confused. A grant too large for either answers the table.

use redis::Value;

use crate::error::{Error, Result};

/// A script's reply, decoded; corrupt state has already become an error.
#[derive(Debug)]
pub(crate) enum ScriptReply {
    /// A grant packed as `a * 2^32 + b`: the two halves `(a, b)`.
    Packed(u64, u64),
    /// A grant packed as `-(a * r + b) - 1`: `a * r + b`, to [`unpack`] with the step's radix
    /// `r`.
    PackedBy(u64),
    /// A status table.
    Status(Outcome),
}

/// A status table: the outcome's name and its values.
#[derive(Debug)]
pub(crate) struct Outcome {
    script: &'static str,
    status: Vec<u8>,
    values: Vec<Value>,
}

/// Decodes the reply of `script`, run over the user `keys` (which name the key of a corrupt
/// state).
pub(crate) fn decode<K: AsRef<[u8]>>(
    reply: Value,
    script: &'static str,
    keys: &[K],
) -> Result<ScriptReply> {
    let mut values = match reply {
        Value::Int(packed) if packed >= 0 => {
            let packed = packed.cast_unsigned();
            return Ok(ScriptReply::Packed(packed >> 32, packed & 0xffff_ffff));
        }
        // -(p + 1) for a negative p is at most i64::MAX: no overflow.
        Value::Int(negated) => return Ok(ScriptReply::PackedBy((-(negated + 1)).cast_unsigned())),
        Value::Array(values) => values,
        other => return Err(unexpected(script, &other)),
    };
    let status = match values.first() {
        Some(Value::BulkString(_)) => match values.remove(0) {
            Value::BulkString(status) => status,
            _ => unreachable!("matched as a bulk string above"),
        },
        _ => return Err(unexpected(script, &Value::Array(values))),
    };
    let outcome = Outcome {
        script,
        status,
        values,
    };
    if outcome.status == b"corrupt" {
        return Err(outcome.corrupt(keys));
    }
    Ok(ScriptReply::Status(outcome))
}

impl ScriptReply {
    /// The status table of a script that never packs its answer.
    pub(crate) fn into_outcome(self, script: &'static str) -> Result<Outcome> {
        match self {
            ScriptReply::Status(outcome) => Ok(outcome),
            packed => Err(packed.unexpected(script)),
        }
    }

    /// The error for a reply `script` never gives (a packed grant from a script that never
    /// packs one, or not that way).
    pub(crate) fn unexpected(&self, script: &'static str) -> Error {
        Error::unexpected_reply(match self {
            ScriptReply::Packed(a, b) => {
                format!("{script} answered the packed integer {a} * 2^32 + {b}")
            }
            ScriptReply::PackedBy(packed) => {
                format!("{script} answered the packed integer -{packed} - 1")
            }
            ScriptReply::Status(outcome) => return outcome.unexpected(),
        })
    }
}

impl Outcome {
    /// The outcome's name.
    pub(crate) fn status(&self) -> &[u8] {
        &self.status
    }

    /// How many values follow the status.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// The integer at `index` (0 is the first value after the status).
    pub(crate) fn int(&self, index: usize) -> Result<i64> {
        match self.values.get(index) {
            Some(&Value::Int(value)) => Ok(value),
            _ => Err(self.unexpected()),
        }
    }

    /// The non-negative integer at `index`.
    pub(crate) fn uint(&self, index: usize) -> Result<u64> {
        u64::try_from(self.int(index)?).map_err(|_| self.unexpected())
    }

    /// The integer at `index` where a negative one means none (no expiry, no retry time).
    pub(crate) fn optional(&self, index: usize) -> Result<Option<u64>> {
        Ok(u64::try_from(self.int(index)?).ok())
    }

    /// The string at `index`.
    pub(crate) fn bytes(&self, index: usize) -> Result<&[u8]> {
        match self.values.get(index) {
            Some(Value::BulkString(bytes)) => Ok(bytes),
            _ => Err(self.unexpected()),
        }
    }

    /// A reply that is one of two statuses without values: `true` for `yes`, `false` for
    /// `no` (`{'renewed'}` or `{'not_owner'}`, say).
    pub(crate) fn flag(&self, yes: &[u8], no: &[u8]) -> Result<bool> {
        match (self.status(), self.len()) {
            (status, 0) if status == yes => Ok(true),
            (status, 0) if status == no => Ok(false),
            _ => Err(self.unexpected()),
        }
    }

    /// A rate limiter's `'granted'` or `'denied'`, whatever values follow.
    pub(crate) fn granted(&self) -> Result<bool> {
        match self.status() {
            b"granted" => Ok(true),
            b"denied" => Ok(false),
            _ => Err(self.unexpected()),
        }
    }

    /// The error for a status, or values, the step does not know.
    pub(crate) fn unexpected(&self) -> Error {
        Error::unexpected_reply(format!(
            "{} answered {:?} {:?}",
            self.script,
            String::from_utf8_lossy(&self.status),
            self.values
        ))
    }

    /// `{'corrupt', i, what}` as the error naming `KEYS[i]`.
    fn corrupt<K: AsRef<[u8]>>(&self, keys: &[K]) -> Error {
        let key = self
            .int(0)
            .ok()
            .and_then(|index| usize::try_from(index).ok())
            .and_then(|index| index.checked_sub(1))
            .and_then(|index| keys.get(index));
        match (key, self.bytes(1)) {
            (Some(key), Ok(what)) => {
                Error::corrupt_state(key.as_ref(), String::from_utf8_lossy(what))
            }
            _ => self.unexpected(),
        }
    }
}

/// The two halves `(a, b)` of a grant packed as `a * radix + b` ([`ScriptReply::PackedBy`]).
pub(crate) fn unpack(packed: u64, radix: u64) -> (u64, u64) {
    let radix = radix.max(1);
    (packed / radix, packed % radix)
}

fn unexpected(script: &str, reply: &Value) -> Error {
    Error::unexpected_reply(format!("{script} answered {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn table(values: Vec<Value>) -> Result<ScriptReply> {
        decode(Value::Array(values), "s", &[b"a".as_slice(), b"b"])
    }

    #[test]
    fn a_packed_grant_splits_in_two_halves() {
        let packed = ((1_i64 << 21) - 1) * (1 << 32) + 4_294_967_295;
        let keys: &[&[u8]] = &[];
        assert!(matches!(
            decode(Value::Int(packed), "s", keys),
            Ok(ScriptReply::Packed(2_097_151, 4_294_967_295))
        ));
        assert!(matches!(
            decode(Value::Int(7), "s", keys),
            Ok(ScriptReply::Packed(0, 7))
        ));
        assert!(decode(Value::Nil, "s", keys).is_err());
    }

    #[test]
    fn a_grant_packed_by_its_radix_is_negated() {
        let keys: &[&[u8]] = &[];
        let radix = 60_001;
        let largest = (1_u64 << 53) - 1;
        // The largest `a` whose packing with the largest `b` stays below 2^53.
        let a = (largest - (radix - 1)) / radix;
        let packed = a * radix + (radix - 1);
        assert!(packed <= largest && packed + radix > largest);
        let reply = decode(Value::Int(-packed.cast_signed() - 1), "s", keys);
        assert!(matches!(reply, Ok(ScriptReply::PackedBy(p)) if p == packed));
        assert_eq!(unpack(packed, radix), (a, radix - 1));
        assert!(matches!(
            decode(Value::Int(-1), "s", keys),
            Ok(ScriptReply::PackedBy(0))
        ));
        assert!(matches!(
            decode(Value::Int(i64::MIN), "s", keys),
            Ok(ScriptReply::PackedBy(p)) if p == i64::MAX.cast_unsigned()
        ));
        assert_eq!(unpack(999_999_999 * radix + 7, radix), (999_999_999, 7));
        assert_eq!(unpack(7, 0), (7, 0), "a radix of 0 reads as 1");
    }

    #[test]
    fn a_status_table_is_read_by_position() {
        let Ok(ScriptReply::Status(outcome)) = table(vec![
            text("held"),
            Value::Int(5),
            Value::Int(-1),
            text("42"),
        ]) else {
            panic!("a status table");
        };
        assert_eq!(outcome.status(), b"held");
        assert_eq!(outcome.len(), 3);
        assert_eq!(outcome.uint(0).ok(), Some(5));
        assert_eq!(outcome.optional(1).ok(), Some(None));
        assert!(outcome.uint(1).is_err());
        assert_eq!(outcome.bytes(2).ok(), Some(b"42".as_slice()));
        assert!(outcome.int(2).is_err());
        assert!(outcome.int(3).is_err());
        assert!(table(vec![]).is_err());
        assert!(table(vec![Value::Int(1)]).is_err());
    }

    #[test]
    fn corrupt_state_names_the_key_and_what_is_wrong() {
        let err =
            table(vec![text("corrupt"), Value::Int(2), text("holds a hash")]).expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState);
        assert_eq!(
            err.to_string(),
            "corrupt state: holds a hash; nothing was changed"
        );
        assert_eq!(err.key(), Some(&b"b"[..]));
        for index in [0, 3, -1] {
            let err = table(vec![text("corrupt"), Value::Int(index), text("x")])
                .expect_err("no such key");
            assert_eq!(err.kind(), ErrorKind::UnexpectedReply);
        }
    }
}
