//! Lua scripts, identified by their SHA-1 and sent as `EVALSHA` with one `EVAL` fallback, and
//! [`script!`], the one way the crate's own steps declare theirs.

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
    /// Whether the script only reads, so that it may go as `EVALSHA_RO`.
    read_only: bool,
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
            read_only: false,
        }
    }

    /// Marks the script as one that only reads: it is sent as `EVALSHA_RO` (and `EVAL_RO`)
    /// where the server has them (Redis 7.0+, Valkey), which refuses any write it tries and
    /// lets a replica answer it.
    pub(crate) fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Whether the script was marked as one that only reads.
    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Decodes the reply of one of the crate's scripts, run over the user `keys`, in the one
    /// reply convention ([`script_reply`](super::script_reply)).
    pub(crate) fn decode<K: AsRef<[u8]>>(
        &self,
        reply: redis::Value,
        keys: &[K],
    ) -> crate::Result<super::script_reply::ScriptReply> {
        super::script_reply::decode(reply, self.name, keys)
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

/// Declares one of the crate's scripts as a `LazyLock<Script>`: whether it only reads
/// (`read_only`) or `writes`, its name (shown in traces and errors), and its files in the
/// primitive's folder, joined in order (a primitive's shared helpers first).
///
/// ```ignore
/// static VERIFY: LazyLock<Script> =
///     script!(read_only, "fenced_lock_verify", "fenced_lock.lua", "fenced_lock_verify.lua");
/// ```
macro_rules! script {
    (writes, $name:literal, $($file:literal),+ $(,)?) => {
        ::std::sync::LazyLock::new(|| {
            $crate::backend::redis::Script::new($name, concat!($(include_str!($file)),+))
        })
    };
    (read_only, $name:literal, $($file:literal),+ $(,)?) => {
        ::std::sync::LazyLock::new(|| {
            $crate::backend::redis::Script::new($name, concat!($(include_str!($file)),+))
                .read_only()
        })
    };
}
pub(crate) use script;

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
