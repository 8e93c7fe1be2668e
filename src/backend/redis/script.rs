//! Lua scripts, identified by their SHA-1 and sent as `EVALSHA` with one `EVAL` fallback.

use std::borrow::Cow;
use std::fmt;

/// A Lua script that runs as one atomic step.
///
/// The SHA-1 is computed once, at construction. [`RedisBackend::eval`](super::RedisBackend::eval)
/// sends `EVALSHA`; when the server answers `NOSCRIPT` (a restarted server, `SCRIPT FLUSH`, a
/// failover to a node that never saw it) it sends the full script once with `EVAL`, which
/// also caches it on that server. Any other failure is reported as is.
///
/// Scripts reach user data only through `KEYS` and `ARGV`: never format a key or a limit
/// into the source.
///
/// On Redis 6.2 a script is sent with `redis.replicate_commands()` first, so that it is
/// replicated by its effects whatever `lua-replicate-commands` says: scripts read `TIME`
/// before they write, which verbatim replication refuses. Redis 7.0 and Valkey always
/// replicate effects, and get the source as written.
///
/// # Example
///
/// ```
/// use leasehold::backend::redis::Script;
///
/// let script = Script::new("incr_by", "return redis.call('INCRBY', KEYS[1], ARGV[1])");
/// assert_eq!(script.name(), "incr_by");
/// assert_eq!(script.sha1().len(), 40);
/// ```
#[derive(Clone)]
pub struct Script {
    name: &'static str,
    source: Cow<'static, str>,
    sha1: String,
    /// The source for Redis 6.2, which asks for effects replication first, and its SHA-1.
    legacy: (String, String),
}

/// What Redis 6.2 needs first in a script that reads the clock (or any non-deterministic
/// command) before it writes.
const EFFECTS_REPLICATION: &str = "redis.replicate_commands()\n";

impl Script {
    /// Creates a script from its source; `name` appears in traces and errors.
    pub fn new(name: &'static str, source: impl Into<Cow<'static, str>>) -> Self {
        let source = source.into();
        let sha1 = redis::Script::new(&source).get_hash().to_owned();
        let legacy = format!("{EFFECTS_REPLICATION}{source}");
        let legacy_sha1 = redis::Script::new(&legacy).get_hash().to_owned();
        Script {
            name,
            source,
            sha1,
            legacy: (legacy, legacy_sha1),
        }
    }

    /// The source and SHA-1 to send: the legacy variant for a server before Redis 7.0.
    pub(crate) fn variant(&self, legacy: bool) -> (&str, &str) {
        if legacy {
            (&self.legacy.0, &self.legacy.1)
        } else {
            (&self.source, &self.sha1)
        }
    }

    /// The name given at construction.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Lua source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The hex SHA-1 of the source, as `EVALSHA` wants it.
    pub fn sha1(&self) -> &str {
        &self.sha1
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("name", &self.name)
            .field("sha1", &self.sha1)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legacy_variant_asks_for_effects_replication_first() {
        let script = Script::new("t", "return 1");
        assert_eq!(script.variant(false), (script.source(), script.sha1()));
        let (source, sha1) = script.variant(true);
        assert_eq!(source, "redis.replicate_commands()\nreturn 1");
        assert_eq!(sha1, redis::Script::new(source).get_hash());
        assert_ne!(sha1, script.sha1());
    }
}
