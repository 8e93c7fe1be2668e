//! The prefix every backend puts in front of user keys.

use std::sync::Arc;

/// A binary-safe prefix applied to every key a backend touches.
///
/// Cheap to clone. A prefix that contains a hash tag (`{...}`) moves every key into that
/// tag's cluster slot, which keeps multi-key steps legal but concentrates load on one node.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct KeyPrefix(Arc<[u8]>);

impl KeyPrefix {
    pub(crate) fn new(prefix: impl AsRef<[u8]>) -> Self {
        KeyPrefix(Arc::from(prefix.as_ref()))
    }

    /// The physical key for a user key.
    pub(crate) fn apply(&self, key: &[u8]) -> Vec<u8> {
        let mut physical = Vec::with_capacity(self.0.len() + key.len());
        physical.extend_from_slice(&self.0);
        physical.extend_from_slice(key);
        physical
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for KeyPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_binary_prefix() {
        let prefix = KeyPrefix::new(b"app:\x00");
        assert_eq!(prefix.apply(b"\xffk"), b"app:\x00\xffk".to_vec());
        assert_eq!(KeyPrefix::default().apply(b"k"), b"k".to_vec());
    }
}
