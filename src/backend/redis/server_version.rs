//! Which server a backend reached, and the oldest one the crate supports.

use std::fmt;

use crate::error::{Error, Result, UnsupportedFeature};

/// The oldest servers the crate's scripts and commands are written for.
///
/// Redis 6.2 brought `SET … PXAT`, `GETEX` and `CLIENT PAUSE … WRITE`, which the steps use;
/// every Valkey release (7.2 and later) has them. A backend checks the server's version once,
/// when it connects, and refuses an older one with
/// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) naming the version it found.
pub const SERVER_FLOOR: UnsupportedFeature = UnsupportedFeature::new(
    "leasehold's steps (Redis 6.2 commands)",
    "Redis 6.2 or Valkey 7.2",
);

/// A server's name and version, from `INFO server`.
///
/// # Example
///
/// ```
/// use leasehold::backend::redis::ServerVersion;
///
/// let valkey = ServerVersion::parse("redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n")?;
/// assert_eq!(valkey.to_string(), "Valkey 8.1.8");
/// assert!(ServerVersion::parse("redis_version:6.0.16\r\n").is_err());
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    name: &'static str,
    version: (u32, u32, u32),
    /// The Redis version the server implements (Valkey reports one too).
    redis: (u32, u32, u32),
}

impl ServerVersion {
    /// Reads an `INFO server` reply, and fails with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) for a server below
    /// [`SERVER_FLOOR`], or [`ErrorKind::UnexpectedReply`](crate::ErrorKind::UnexpectedReply)
    /// without a readable `redis_version`.
    pub fn parse(info: &str) -> Result<Self> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let redis = field("redis_version")
            .and_then(parse_version)
            .ok_or_else(|| Error::unexpected_reply("INFO server has no readable redis_version"))?;
        let (name, version) = match (field("server_name"), field("valkey_version")) {
            (Some("valkey"), Some(valkey)) => (
                "Valkey",
                parse_version(valkey).ok_or_else(|| {
                    Error::unexpected_reply("INFO server has no readable valkey_version")
                })?,
            ),
            _ => ("Redis", redis),
        };
        let server = ServerVersion {
            name,
            version,
            redis,
        };
        // Valkey reports redis_version 7.2.4 or later, so one check covers both.
        if redis < (6, 2, 0) {
            return Err(Error::unsupported_found(SERVER_FLOOR, &server.to_string()));
        }
        Ok(server)
    }

    /// A server whose version could not be read (`INFO` denied by an ACL). Its scripts are
    /// sent as Redis 6.2 needs them, asking for effects replication first, which every later
    /// server takes as a no-op: on 6.2 with `lua-replicate-commands no` a script that reads
    /// the clock before it writes would fail without it. `EVALSHA_RO` is tried, and given up
    /// at the first refusal (Redis 6.2 does not know it).
    pub(crate) fn unknown() -> Self {
        ServerVersion {
            name: "Redis",
            version: (0, 0, 0),
            redis: (0, 0, 0),
        }
    }

    /// `"Redis"` or `"Valkey"`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The server's own version: major, minor, patch; `(0, 0, 0)` when `INFO` was denied.
    pub fn version(&self) -> (u32, u32, u32) {
        self.version
    }

    /// Whether scripts need what Redis before 7.0 needs (see
    /// [`Script`](super::Script)): on Redis 6.2, and on a server of unknown version.
    pub(crate) fn legacy_scripting(&self) -> bool {
        self.redis < (7, 0, 0)
    }

    /// Whether the server may have `EVALSHA_RO` (Redis 7.0+ and Valkey, and a server of
    /// unknown version, where a refusal then turns it off).
    pub(crate) fn may_have_read_only_scripts(&self) -> bool {
        self.redis >= (7, 0, 0) || self.redis == (0, 0, 0)
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor, patch) = self.version;
        write!(f, "{} {major}.{minor}.{patch}", self.name)
    }
}

fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|part| part.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn reads_redis_and_valkey() {
        let redis =
            ServerVersion::parse("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n")
                .expect("supported");
        assert_eq!((redis.name(), redis.version()), ("Redis", (7, 0, 15)));
        assert!(!redis.legacy_scripting());
        let old = ServerVersion::parse("redis_version:6.2.14\r\n").expect("the floor");
        assert!(old.legacy_scripting());
        let valkey = ServerVersion::parse(
            "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n",
        )
        .expect("supported");
        assert_eq!(valkey.to_string(), "Valkey 8.1.8");
        assert!(!valkey.legacy_scripting());
    }

    #[test]
    fn refuses_a_server_below_the_floor_naming_it() {
        for (info, found) in [
            ("redis_version:6.0.16\r\n", "Redis 6.0.16"),
            ("redis_version:5.0.14\r\n", "Redis 5.0.14"),
            ("redis_version:6.1\r\n", "Redis 6.1.0"),
        ] {
            let err = ServerVersion::parse(info).expect_err("below the floor");
            assert_eq!(err.kind(), ErrorKind::Unsupported);
            assert_eq!(err.unsupported_feature(), Some(SERVER_FLOOR));
            let text = err.to_string();
            assert!(text.contains(found), "{text}");
            assert!(text.contains("Redis 6.2 or Valkey 7.2"), "{text}");
        }
        let err = ServerVersion::parse("# Server\r\n").expect_err("no version");
        assert_eq!(err.kind(), ErrorKind::UnexpectedReply);
    }
}
