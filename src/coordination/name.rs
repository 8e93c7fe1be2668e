//! Names and keys from users, bounded in length: a name longer than [`MAX_NAME_LEN`] (a
//! request's path segment, a 64 KiB header) is stored as its digest, so that whatever a
//! client sends costs Redis the same memory and time.

use std::borrow::Cow;

/// The longest name (a client key, a lock's or a semaphore's name) stored as given. A longer
/// one is stored as [`HASHED_NAME_PREFIX`] and the hex SHA-256 of its bytes: 71 bytes,
/// whatever it was.
pub const MAX_NAME_LEN: usize = 128;

/// What a hashed name starts with (see [`MAX_NAME_LEN`]). A name given that already starts
/// with it is hashed too, so that nobody can pick a name equal to another's hash.
pub const HASHED_NAME_PREFIX: &[u8] = b"sha256:";

/// Whether `name` is stored as its digest.
pub(crate) fn needs_hashing(name: &[u8]) -> bool {
    name.len() > MAX_NAME_LEN || name.starts_with(HASHED_NAME_PREFIX)
}

/// `name` as given, or its [`digest`] when it is longer than [`MAX_NAME_LEN`] or could pass
/// for one.
pub(crate) fn bounded(name: &[u8]) -> Cow<'_, [u8]> {
    if needs_hashing(name) {
        Cow::Owned(digest(name))
    } else {
        Cow::Borrowed(name)
    }
}

/// `key` as given, or its [`digest`] when it is longer than [`MAX_NAME_LEN`]: for a key that
/// comes bounded already, such as the client key a layer extracted (a header's is a digest,
/// which a second digest would make unequal to the same client's key elsewhere). A key that
/// looks like a digest is kept: whoever chose it is not a client forging another's.
pub(crate) fn shortened(key: &[u8]) -> Cow<'_, [u8]> {
    if key.len() > MAX_NAME_LEN {
        Cow::Owned(digest(key))
    } else {
        Cow::Borrowed(key)
    }
}

/// [`HASHED_NAME_PREFIX`] and the lowercase hex SHA-256 of `name`.
pub(crate) fn digest(name: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};

    let digest = Sha256::digest(name);
    let mut hashed = Vec::with_capacity(HASHED_NAME_PREFIX.len() + 2 * digest.len());
    hashed.extend_from_slice(HASHED_NAME_PREFIX);
    for byte in digest {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        hashed.push(HEX[usize::from(byte >> 4)]);
        hashed.push(HEX[usize::from(byte & 0xf)]);
    }
    hashed
}

/// `<kind>:<length>:<name>`, `name` [bounded](bounded): a primitive's key (or the start of
/// its keys) outside any hash tag, so that its keys spread over a cluster's slots. The
/// length keeps any two names apart whatever bytes they hold (`a:b` and `a` then `b:`).
pub(crate) fn length_prefixed(kind: &[u8], name: &[u8]) -> Vec<u8> {
    framed(kind, name, b":", b"")
}

/// `<kind>:{<length>:<name>}`, `name` [bounded](bounded): the start of every key of a
/// primitive named `name`, all in the cluster slot of that hash tag, whatever bytes the name
/// holds (the length ends the tag where the name would not).
pub(crate) fn hash_tagged(kind: &[u8], name: &[u8]) -> Vec<u8> {
    framed(kind, name, b":{", b"}")
}

/// `<kind><open><length>:<name><close>`, `name` bounded: the one way a name enters a key.
fn framed(kind: &[u8], name: &[u8], open: &[u8], close: &[u8]) -> Vec<u8> {
    let name = bounded(name);
    let length = name.len().to_string();
    let mut key =
        Vec::with_capacity(kind.len() + open.len() + length.len() + 1 + name.len() + close.len());
    key.extend_from_slice(kind);
    key.extend_from_slice(open);
    key.extend_from_slice(length.as_bytes());
    key.push(b':');
    key.extend_from_slice(&name);
    key.extend_from_slice(close);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sha256() {
        let digest =
            String::from_utf8(bounded(&[b'a'; MAX_NAME_LEN + 1]).into_owned()).expect("hex");
        use sha2::{Digest, Sha256};
        let expected: String = Sha256::digest([b'a'; MAX_NAME_LEN + 1])
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest, format!("sha256:{expected}"));
    }

    #[test]
    fn a_hash_tag_holds_the_bounded_name_and_its_length() {
        assert_eq!(hash_tagged(b"lock", b"a}b"), b"lock:{3:a}b}".to_vec());
        let long = hash_tagged(b"sem", &[b'n'; 4096]);
        assert!(long.starts_with(b"sem:{71:sha256:"), "{long:?}");
        assert_eq!(long.len(), b"sem:{71:}".len() + 71);
    }

    #[test]
    fn a_length_prefix_keeps_names_apart() {
        assert_eq!(length_prefixed(b"sem", b"jobs"), b"sem:4:jobs".to_vec());
        assert_ne!(
            [length_prefixed(b"rl", b"a:b"), b":c".to_vec()].concat(),
            [length_prefixed(b"rl", b"a"), b":b:c".to_vec()].concat()
        );
        assert!(length_prefixed(b"sem", &[b'n'; 4096]).starts_with(b"sem:71:sha256:"));
    }

    #[test]
    fn a_key_is_shortened_only_when_long() {
        let hashed = digest(b"a client");
        assert_eq!(shortened(&hashed), hashed.as_slice(), "not hashed twice");
        assert_eq!(shortened(&[b'k'; 200]), digest(&[b'k'; 200]).as_slice());
    }

    #[test]
    fn short_names_are_kept_and_lookalikes_hashed() {
        let exact = vec![b'n'; MAX_NAME_LEN];
        assert_eq!(bounded(&exact), exact.as_slice());
        let hashed = digest(b"x");
        assert_ne!(
            bounded(&hashed),
            hashed.as_slice(),
            "a lookalike is hashed in turn"
        );
    }
}
