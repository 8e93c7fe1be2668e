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
}

impl Script {
    /// Creates a script from its source; `name` appears in traces and errors.
    pub fn new(name: &'static str, source: impl Into<Cow<'static, str>>) -> Self {
        let source = source.into();
        let sha1 = redis::Script::new(&source).get_hash().to_owned();
        Script { name, source, sha1 }
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
