//! Keys built from two parts, on the stack when they are short.

use std::ops::Deref;

/// Room for a key on the stack: most keys (a prefix, a limiter's name, a client address)
/// fit, so building one per decision allocates nothing.
const INLINE: usize = 128;

/// Two byte strings one after the other: inline up to [`INLINE`] bytes, on the heap beyond.
/// Read it as `&[u8]`.
pub(crate) enum KeyBytes {
    Inline { bytes: [u8; INLINE], len: usize },
    Heap(Vec<u8>),
}

impl KeyBytes {
    /// `first` then `second`.
    pub(crate) fn concat(first: &[u8], second: &[u8]) -> Self {
        let len = first.len() + second.len();
        if len > INLINE {
            return KeyBytes::Heap([first, second].concat());
        }
        let mut bytes = [0; INLINE];
        bytes[..first.len()].copy_from_slice(first);
        bytes[first.len()..len].copy_from_slice(second);
        KeyBytes::Inline { bytes, len }
    }
}

impl Deref for KeyBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            KeyBytes::Inline { bytes, len } => &bytes[..*len],
            KeyBytes::Heap(bytes) => bytes,
        }
    }
}

impl AsRef<[u8]> for KeyBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_keys_read_the_same() {
        let short = KeyBytes::concat(b"app:|", b"k");
        assert!(matches!(short, KeyBytes::Inline { .. }));
        assert_eq!(&*short, b"app:|k");
        let long_part = vec![b'x'; INLINE];
        let long = KeyBytes::concat(b"a", &long_part);
        assert!(matches!(long, KeyBytes::Heap(_)));
        assert_eq!(long.len(), INLINE + 1);
        assert_eq!(&long[..2], b"ax");
        let exact = KeyBytes::concat(&long_part[1..], b"y");
        assert!(matches!(exact, KeyBytes::Inline { .. }));
        assert_eq!(exact.last(), Some(&b'y'));
    }
}
