//! Storage keys of rate limiters.

use crate::backend::key_bytes::KeyBytes;
use crate::coordination::name;

/// Builds a limiter's storage keys: `rl:<algorithm>:<name length>:<name>:<client key>`.
///
/// The length keeps any two (name, client key) pairs apart even when names contain `:`,
/// and the client key stays last and raw, so keys remain readable in `redis-cli`. No hash
/// tag: each client key's state lives in its own slot, spreading clients over a cluster.
/// Everything before the client key is fixed per limiter, so it is built once: a request
/// only copies it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LimiterKeys {
    prefix: Box<[u8]>,
}

impl LimiterKeys {
    pub(crate) fn new(algorithm: &[u8], name: &[u8]) -> Self {
        let mut prefix = name::length_prefixed(&[b"rl:", algorithm].concat(), name);
        prefix.push(b':');
        LimiterKeys {
            prefix: prefix.into(),
        }
    }

    /// The storage key of one client key (on the stack when short).
    pub(crate) fn for_client(&self, client_key: &[u8]) -> KeyBytes {
        KeyBytes::concat(&self.prefix, client_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_separators_do_not_collide() {
        assert_eq!(
            &*LimiterKeys::new(b"fw", b"api").for_client(b"1.2.3.4"),
            b"rl:fw:3:api:1.2.3.4"
        );
        assert_ne!(
            &*LimiterKeys::new(b"fw", b"a:b").for_client(b"c"),
            &*LimiterKeys::new(b"fw", b"a").for_client(b"b:c")
        );
    }
}
