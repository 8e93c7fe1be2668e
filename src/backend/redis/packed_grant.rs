//! Grants that a rate-limit script packs into one integer.
//!
//! On the grant path the fixed-window, sliding-window, token-bucket and GCRA scripts reply
//! `a * 2^32 + b` (with `a < 2^20` and `b < 2^32`, so below 2^52 and exact in a Lua number)
//! instead of a table: Redis spends about as much on converting a reply table as on a whole
//! command. Every other reply stays a table, which never arrives as an integer.

use redis::Value;

use crate::error::Result;

/// A step's reply `(status, remaining, reset, retry)`, as the sliding-window, token-bucket
/// and GCRA scripts return it: a table, or a grant packed as `remaining * 2^32 + reset`
/// (status 1, retry -1).
pub(crate) fn four_values(reply: Value, script: &str) -> Result<(i64, u64, u64, i64)> {
    match unpack(&reply) {
        Some((remaining, reset)) => Ok((1, remaining, reset, -1)),
        None => super::convert(reply, script),
    }
}

/// The two halves `(a, b)` of a packed grant, or `None` when `reply` is not one.
pub(crate) fn unpack(reply: &Value) -> Option<(u64, u64)> {
    match *reply {
        Value::Int(packed) if packed >= 0 => {
            let packed = packed.cast_unsigned();
            Some((packed >> 32, packed & 0xffff_ffff))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_the_two_halves() {
        let packed = 1_048_575_i64 * (1 << 32) + 4_294_967_295;
        assert_eq!(
            unpack(&Value::Int(packed)),
            Some((1_048_575, 4_294_967_295))
        );
        assert_eq!(unpack(&Value::Int(7)), Some((0, 7)));
        assert_eq!(unpack(&Value::Int(-1)), None);
        assert_eq!(unpack(&Value::Array(vec![Value::Int(1)])), None);
    }

    #[test]
    fn reads_a_table_or_a_packed_grant() {
        let table = Value::Array([0, 3, 1500, 250].map(Value::Int).to_vec());
        assert_eq!(four_values(table, "t").ok(), Some((0, 3, 1500, 250)));
        let packed = Value::Int(3 * (1 << 32) + 1500);
        assert_eq!(four_values(packed, "t").ok(), Some((1, 3, 1500, -1)));
        assert!(four_values(Value::Nil, "t").is_err());
    }
}
