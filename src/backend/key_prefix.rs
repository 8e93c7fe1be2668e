//! The prefix every backend puts in front of user keys.
//!
//! Two services whose prefixes are prefixes of one another (`a:` and `a:b:`) must never
//! name one key, whatever their user keys hold (a client chooses part of them). So a key is
//! written as the prefix, escaped to hold no [`SEPARATOR`], then the separator, then the user
//! key: the first separator of any stored key ends its prefix, and two different prefixes
//! differ before it.

use std::sync::Arc;

/// What ends the prefix in every stored key: `myapp:` names `myapp:|rl:fw:…`.
pub(crate) const SEPARATOR: u8 = b'|';

/// What a [`SEPARATOR`] in a configured prefix is written as, percent-encoded.
const ESCAPED_SEPARATOR: &[u8] = b"%7C";

/// What a `%` in a configured prefix is written as, so that the escape cannot be forged.
const ESCAPED_PERCENT: &[u8] = b"%25";

/// A binary-safe prefix applied to every key a backend touches.
///
/// Cheap to clone. A prefix that contains a hash tag (`{...}`) moves every key into that
/// tag's cluster slot, which keeps multi-key steps legal but concentrates load on one node.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct KeyPrefix {
    /// As configured.
    given: Arc<[u8]>,
    /// As written in front of each user key: escaped, separator included.
    written: Arc<[u8]>,
}

impl KeyPrefix {
    pub(crate) fn new(prefix: impl AsRef<[u8]>) -> Self {
        let given = prefix.as_ref();
        let mut written = Vec::with_capacity(given.len() + 1);
        for &byte in given {
            match byte {
                SEPARATOR => written.extend_from_slice(ESCAPED_SEPARATOR),
                b'%' => written.extend_from_slice(ESCAPED_PERCENT),
                _ => written.push(byte),
            }
        }
        written.push(SEPARATOR);
        KeyPrefix {
            given: Arc::from(given),
            written: Arc::from(written),
        }
    }

    /// The physical key for a user key.
    pub(crate) fn apply(&self, key: &[u8]) -> Vec<u8> {
        let mut physical = Vec::with_capacity(self.written.len() + key.len());
        physical.extend_from_slice(&self.written);
        physical.extend_from_slice(key);
        physical
    }

    /// The prefix as configured.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.given
    }

    /// What every physical key starts with: the prefix, escaped, and the separator.
    pub(crate) fn written(&self) -> &[u8] {
        &self.written
    }
}

impl Default for KeyPrefix {
    fn default() -> Self {
        KeyPrefix::new(b"")
    }
}

impl std::fmt::Debug for KeyPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.given))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_binary_prefix() {
        let prefix = KeyPrefix::new(b"app:\x00");
        assert_eq!(prefix.apply(b"\xffk"), b"app:\x00|\xffk".to_vec());
        assert_eq!(prefix.as_bytes(), b"app:\x00");
        assert_eq!(KeyPrefix::default().apply(b"k"), b"|k".to_vec());
    }

    #[test]
    fn nested_prefixes_never_name_one_key() {
        // Without the separator, `a:` with the user key `b:k` and `a:b:` with `k` were one
        // key.
        assert_ne!(
            KeyPrefix::new("a:").apply(b"b:k"),
            KeyPrefix::new("a:b:").apply(b"k")
        );
        // Nor can a user key holding the separator stand in for a longer prefix.
        assert_ne!(
            KeyPrefix::new("a").apply(b"|b|k"),
            KeyPrefix::new("a|b").apply(b"k")
        );
        assert_ne!(
            KeyPrefix::new("a").apply(b"").as_slice(),
            KeyPrefix::new("").apply(b"a").as_slice()
        );
    }

    #[test]
    fn escaped_prefixes_stay_distinct() {
        let written = |p: &str| KeyPrefix::new(p).written().to_vec();
        assert_eq!(written("a|b"), b"a%7Cb|".to_vec());
        assert_eq!(written("%7C"), b"%257C|".to_vec());
        assert_ne!(written("a|b"), written("a%7Cb"));
    }

    /// Every pair of prefixes drawn from bytes that matter, with every pair of short user
    /// keys: equal physical keys only for equal prefixes and keys.
    #[test]
    fn no_two_prefixes_share_a_key() {
        let alphabet: &[u8] = b"a|%7C";
        let mut words: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..3 {
            let longer: Vec<Vec<u8>> = words
                .iter()
                .flat_map(|w| {
                    alphabet.iter().map(move |&b| {
                        let mut w = w.clone();
                        w.push(b);
                        w
                    })
                })
                .collect();
            words.extend(longer);
            words.sort();
            words.dedup();
        }
        let mut seen = std::collections::HashMap::new();
        for prefix in &words {
            let prefix = KeyPrefix::new(prefix);
            for key in &words {
                let physical = prefix.apply(key);
                if let Some((other, other_key)) =
                    seen.insert(physical, (prefix.as_bytes().to_vec(), key.clone()))
                {
                    panic!(
                        "{:?}+{:?} and {:?}+{:?} alias",
                        prefix,
                        String::from_utf8_lossy(key),
                        String::from_utf8_lossy(&other),
                        String::from_utf8_lossy(&other_key)
                    );
                }
            }
        }
    }
}
