//! Storage keys of rate limiters.

/// `rl:<algorithm>:<name length>:<name>:<client key>`.
///
/// The length keeps any two (name, client key) pairs apart even when names contain `:`,
/// and the client key stays last and raw, so keys remain readable in `redis-cli`. No hash
/// tag: each client key's state lives in its own slot, spreading clients over a cluster.
pub(crate) fn limiter_key(algorithm: &[u8], name: &[u8], client_key: &[u8]) -> Vec<u8> {
    let length = name.len().to_string();
    let mut key = Vec::with_capacity(
        3 + algorithm.len() + 1 + length.len() + 1 + name.len() + 1 + client_key.len(),
    );
    key.extend_from_slice(b"rl:");
    key.extend_from_slice(algorithm);
    key.push(b':');
    key.extend_from_slice(length.as_bytes());
    key.push(b':');
    key.extend_from_slice(name);
    key.push(b':');
    key.extend_from_slice(client_key);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_separators_do_not_collide() {
        assert_eq!(
            limiter_key(b"fw", b"api", b"1.2.3.4"),
            b"rl:fw:3:api:1.2.3.4"
        );
        assert_ne!(
            limiter_key(b"fw", b"a:b", b"c"),
            limiter_key(b"fw", b"a", b"b:c")
        );
    }
}
