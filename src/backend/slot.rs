//! Redis Cluster hash slots, computed locally.
//!
//! A multi-key step must keep all its keys in one slot; computing the slot here lets every
//! backend reject a cross-slot step before anything is sent, so code that works against a
//! standalone server or the in-process backend keeps working unchanged on a cluster.

use crate::error::{Error, ErrorKind, Result};

/// Number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// The cluster hash slot of a physical key (after any prefix), following the cluster
/// specification: CRC16 (XMODEM) of the key, or of the text between the first `{` and the
/// next `}` when that text is not empty, modulo 16384.
///
/// # Example
///
/// ```
/// use leasehold::backend::key_slot;
///
/// assert_eq!(key_slot(b"foo"), 12182);
/// // Keys with the same hash tag share a slot.
/// assert_eq!(key_slot(b"{invoice:42}:lease"), key_slot(b"{invoice:42}:fence"));
/// ```
pub fn key_slot(key: &[u8]) -> u16 {
    crc16_xmodem(hash_tag(key)) % SLOT_COUNT
}

/// The part of the key that is hashed: the first non-empty `{...}` section, else the key.
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&b| b == b'}')
            && close > 0
        {
            return &rest[..close];
        }
    }
    key
}

/// CRC16 (XMODEM) a byte at a time: a table lookup per byte rather than eight shifts, since
/// every multi-key step hashes its keys before it is sent.
fn crc16_xmodem(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &byte| {
        (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ byte)]
    })
}

/// The CRC16 (XMODEM, polynomial 0x1021) of every byte value.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

/// Fails with [`ErrorKind::CrossSlot`] unless every key hashes to the same slot.
pub(crate) fn ensure_same_slot<K: AsRef<[u8]>>(keys: &[K]) -> Result<()> {
    // One key is always in one slot: no need to hash it.
    let Some((first, rest)) = keys.split_first().filter(|(_, rest)| !rest.is_empty()) else {
        return Ok(());
    };
    let slot = key_slot(first.as_ref());
    if let Some(other) = rest.iter().find(|k| key_slot(k.as_ref()) != slot) {
        return Err(Error::new(
            ErrorKind::CrossSlot,
            format!(
                "keys {:?} (slot {}) and {:?} (slot {}) are in different cluster slots; \
                 give them a common hash tag such as {{name}}",
                String::from_utf8_lossy(first.as_ref()),
                slot,
                String::from_utf8_lossy(other.as_ref()),
                key_slot(other.as_ref()),
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_slots_from_the_cluster_specification() {
        // CRC16/XMODEM check value of "123456789" is 0x31C3.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tag_rules() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        // An empty tag hashes the whole key.
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        // Only the first tag counts.
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        // No closing brace: the whole key.
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        // Binary keys.
        assert_eq!(key_slot(b"\xff{\x00\x01}\xfe"), key_slot(b"\x00\x01"));
    }

    #[test]
    fn cross_slot_is_rejected() {
        assert!(ensure_same_slot(&[b"{a}x", b"{a}y"]).is_ok());
        let err = ensure_same_slot(&[b"foo".as_slice(), b"bar".as_slice()]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CrossSlot);
        assert!(ensure_same_slot::<&[u8]>(&[]).is_ok());
    }
}
