//! The partition key a client may be shown in the `RateLimit` field (its `pk` parameter): an
//! opaque tag of the client key, keyed by a secret, so that a client can tell which quota it
//! spends without anyone learning the key from it.

use std::sync::Arc;

use sha2::{Digest, Sha256};

/// How a layer tags client keys: HMAC-SHA-256 under the application's secret, cut to 96 bits.
#[derive(Clone)]
pub(crate) struct PartitionKeys {
    secret: Arc<[u8]>,
}

/// A client key's tag, as the `pk` Byte Sequence is written: 12 bytes in base64, 16
/// characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PartitionTag([u8; 16]);

impl PartitionTag {
    /// The tag's base64 text.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl PartitionKeys {
    pub(crate) fn new(secret: &[u8]) -> Self {
        PartitionKeys {
            secret: secret.into(),
        }
    }

    /// The tag of `key`: the same for the same key under the same secret (in every replica
    /// given it), and no way back to the key without the secret (an address, which a bare
    /// hash would give away to a search of all addresses).
    pub(crate) fn tag(&self, key: &[u8]) -> PartitionTag {
        let mac = hmac_sha256(&self.secret, key);
        let mut text = [0u8; 16];
        for (chunk, out) in mac[..12].chunks(3).zip(text.chunks_mut(4)) {
            let n = u32::from(chunk[0]) << 16 | u32::from(chunk[1]) << 8 | u32::from(chunk[2]);
            for (i, byte) in out.iter_mut().enumerate() {
                // A six-bit index: always within the alphabet.
                *byte = BASE64[((n >> (18 - 6 * i)) & 0x3f) as usize];
            }
        }
        PartitionTag(text)
    }
}

/// Base64's alphabet, as Structured Fields write a Byte Sequence.
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// HMAC-SHA-256 (RFC 2104) of `message` under `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let inner_pad = block.map(|byte| byte ^ 0x36);
    let outer_pad = block.map(|byte| byte ^ 0x5c);
    let inner = Sha256::new()
        .chain_update(inner_pad)
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(outer_pad)
        .chain_update(inner)
        .finalize()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231, test case 2.
    #[test]
    fn the_mac_is_hmac_sha256() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_tag_is_the_macs_first_twelve_bytes_in_base64() {
        let keys = PartitionKeys::new(b"Jefe");
        let tag = keys.tag(b"what do ya want for nothing?");
        // 5bdcc146bf60754e6a042426 in base64.
        assert_eq!(tag.as_bytes(), b"W9zBRr9gdU5qBCQm");
        assert_ne!(keys.tag(b"ip:10.0.0.1"), keys.tag(b"ip:10.0.0.2"));
        assert_ne!(
            keys.tag(b"ip:10.0.0.1"),
            PartitionKeys::new(b"another").tag(b"ip:10.0.0.1")
        );
    }
}
