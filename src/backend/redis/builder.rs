//! Configuration and connection of a [`RedisBackend`].

use std::sync::Arc;
use std::time::Duration;

use super::dialer::Dialer;
use super::link::Link;
use super::target::{PrimaryCredentials, Target};
use super::tls::TlsSettings;
use super::watch::Watcher;
use super::{Capabilities, RedisBackend, Shared, endpoint};
use crate::backend::KeyPrefix;
use crate::error::{Error, Result};

/// Default bound on the wait for one reply.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Default bound on establishing a connection.
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// Default bound on sending a step again after a transient failure (see
/// [`RedisBackendBuilder::transient_retry`]).
pub const DEFAULT_TRANSIENT_RETRY: Duration = Duration::from_secs(1);

/// Builds a [`RedisBackend`]: the deployment to reach, a key prefix and timeouts.
///
/// Start from [`RedisBackend::standalone`], [`RedisBackend::cluster`] or
/// [`RedisBackend::sentinel`].
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use leasehold::backend::redis::RedisBackend;
///
/// # async fn example() -> leasehold::Result<()> {
/// let backend = RedisBackend::standalone("redis://127.0.0.1:6379")
///     .key_prefix("myapp:")
///     .response_timeout(Duration::from_millis(250))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct RedisBackendBuilder {
    target: Target,
    /// Required: see [`key_prefix`](Self::key_prefix).
    prefix: Option<KeyPrefix>,
    response_timeout: Duration,
    connection_timeout: Duration,
    transient_retry: Duration,
    tls: Option<TlsSettings>,
    primary: Option<PrimaryCredentials>,
}

impl RedisBackendBuilder {
    fn new(target: Target) -> Self {
        RedisBackendBuilder {
            target,
            prefix: None,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            transient_retry: DEFAULT_TRANSIENT_RETRY,
            tls: None,
            primary: None,
        }
    }

    pub(super) fn standalone(url: String) -> Self {
        Self::new(Target::Standalone(url))
    }

    pub(super) fn cluster(urls: Vec<String>) -> Self {
        Self::new(Target::Cluster(urls))
    }

    pub(super) fn sentinel(sentinels: Vec<String>, service_name: String) -> Self {
        Self::new(Target::Sentinel {
            sentinels,
            service_name,
            primary: None,
        })
    }

    /// The binary-safe prefix put in front of every key this handle touches: this service's
    /// namespace, such as `"billing:"`. Required: two services on one Redis that both name a
    /// limit `"api"` would otherwise share its counters, and their locks and semaphores
    /// alike. Give the same prefix to every replica of one service, and `""` only to share
    /// keys with another service on purpose.
    ///
    /// Every key is stored as the prefix, `|`, then the key, so that services whose prefixes
    /// are prefixes of one another (`a:` and `a:b:`) never share one; a `|` or `%` inside
    /// the prefix is written `%7C` or `%25`, which moves a hash tag that holds one to
    /// another slot.
    pub fn key_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = Some(KeyPrefix::new(prefix));
        self
    }

    /// How long to wait for one reply before failing with
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout). Default
    /// [`DEFAULT_RESPONSE_TIMEOUT`]. A timed-out step may still have run on the server.
    /// Under a layer or an extractor whose decision timeout is no longer, that timeout ends
    /// the wait first, and a standalone server's step arms no timer of its own for it.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long to wait for a connection to be established. Default
    /// [`DEFAULT_CONNECTION_TIMEOUT`].
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long a step that failed without effect is sent again (default
    /// [`DEFAULT_TRANSIENT_RETRY`]; zero sends once). It covers what a failover or a restart
    /// answers: `READONLY` from a demoted primary, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`,
    /// `LOADING`, `BUSY`, and refused connections. Each attempt waits with jittered backoff
    /// (20 ms doubling to 100 ms) and the last failure is returned when the bound would be
    /// passed. A step whose outcome is uncertain (a timeout, a connection lost after
    /// sending) is sent again within the same bound only when it is harmless twice: a latch
    /// count-down (it carries an id and counts once), an acquisition (it carries its owner
    /// token, and finding it is a grant) and a step that only reads.
    /// Layers bound the whole step with their own timeout too.
    pub fn transient_retry(mut self, bound: Duration) -> Self {
        self.transient_retry = bound;
        self
    }

    /// The certificates to trust and present over `rediss://` (see [`TlsSettings`]): a
    /// private certificate authority, a client certificate for mutual TLS. The URL must then
    /// be `rediss://` (a plain one is refused at [`connect`](Self::connect), never connected
    /// in plain text; every node's for a cluster, every sentinel's for Sentinel), and the
    /// `tls` feature on. Tracking connections use them too. Through Sentinel, the sentinels
    /// and the primary are both reached over TLS with these certificates, and every sentinel
    /// URL must carry the same credentials.
    pub fn tls(mut self, settings: TlsSettings) -> Self {
        self.tls = Some(settings);
        self
    }

    /// The credentials the primary asks for, through Sentinel: its password, as an ACL
    /// user's when `username` is given (the default user's otherwise). A sentinel URL's
    /// credentials are the sentinels' own and never reach the primary; without these, the
    /// primary is reached without any. Refused at [`connect`](Self::connect) for a standalone
    /// server or a cluster, whose URLs carry their credentials.
    ///
    /// ```no_run
    /// # async fn run() -> leasehold::Result<()> {
    /// use leasehold::backend::redis::RedisBackend;
    ///
    /// let redis = RedisBackend::sentinel(["redis://:sentinel-secret@10.0.0.5:26379"], "cache")
    ///     .primary_credentials(Some("billing"), "primary-secret")
    ///     .key_prefix("billing:")
    ///     .connect()
    ///     .await?;
    /// # let _ = redis;
    /// # Ok(()) }
    /// ```
    pub fn primary_credentials(mut self, username: Option<&str>, password: &str) -> Self {
        self.primary = Some(PrimaryCredentials {
            username: username.map(str::to_owned),
            password: password.to_owned(),
        });
        self
    }

    /// Connects and returns the backend.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// malformed URL, an empty address list or a zero timeout, and with the server's refusal
    /// (credentials, an ACL, a server below [`SERVER_FLOOR`](super::SERVER_FLOOR)) when it
    /// answers. A deployment that cannot be reached now
    /// ([unavailable](crate::Error::is_unavailable)) is no failure: the backend is returned
    /// with a `tracing` warning, and every step fails as unavailable (which the layers'
    /// failure policy covers) until one reaches it and connects. Steps share one connection
    /// attempt at a time, run in the background and bounded by two connection timeouts and
    /// three response timeouts; a failed attempt is every step's answer for half a second
    /// more (a refused connection, 50 ms). A service that must not start without Redis awaits
    /// [`RedisBackend::ready`] after this. Every error names the deployment, passwords
    /// masked. Once connected, the backend reconnects by itself, the same way: a command
    /// that meets a broken connection fails, or the third in a row that gets no answer
    /// (its response timeout, or its caller's timeout with nothing answered meanwhile),
    /// and later ones make a new connection (one attempt at a time, its failure the answer
    /// for half a second, a refused connection's for 50 ms), so a server that refuses the
    /// credentials is every step's answer at once. Meanwhile attempts go on in the
    /// background, every 250 ms at most (every 2 s while the server refuses them), until
    /// one connects: a server that is back is used again within that time, and an open
    /// circuit breaker probes it at once. A refused
    /// connection is tried again within
    /// [`transient_retry`](Self::transient_retry), so a restart shorter than that costs
    /// latency, not errors. Every new connection reads the server's version and clock
    /// again: after a failover, the first acquisition carries a deadline on the new
    /// primary's clock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made connection.
    pub async fn connect(mut self) -> Result<RedisBackend> {
        if let Some(credentials) = self.primary.take() {
            match &mut self.target {
                Target::Sentinel { primary, .. } => *primary = Some(credentials),
                Target::Standalone(_) | Target::Cluster(_) => {
                    return Err(Error::invalid_argument(
                        "primary credentials are for a Sentinel deployment: a standalone \
                         server's or a cluster's go in its URLs (redis://user:password@host)",
                    ));
                }
            }
        }
        if self.response_timeout.is_zero() || self.connection_timeout.is_zero() {
            return Err(Error::invalid_argument(
                "timeouts must be greater than zero",
            ));
        }
        let Some(prefix) = self.prefix.clone() else {
            return Err(Error::invalid_argument(
                "no key prefix: name this service's keys with `.key_prefix(\"myapp:\")`, so \
                 that another service on the same Redis cannot share its limits and locks by \
                 naming them alike (`.key_prefix(\"\")` shares keys on purpose)",
            ));
        };
        if let Some(tls) = &self.tls {
            match &self.target {
                Target::Standalone(url) => tls.check([url.as_str()])?,
                Target::Cluster(urls) => tls.check(urls.iter().map(String::as_str))?,
                Target::Sentinel { sentinels, .. } => {
                    tls.check(sentinels.iter().map(String::as_str))?;
                }
            }
        }
        let endpoint = endpoint::describe(&self.target);
        let topology = self.target.topology();
        let backend = RedisBackend {
            shared: Arc::new(Shared {
                link: Link::new(Dialer {
                    target: self.target.clone(),
                    prefix: prefix.clone(),
                    response_timeout: self.response_timeout,
                    connection_timeout: self.connection_timeout,
                    tls: self.tls.clone(),
                }),
                endpoint,
                topology,
                response_timeout: self.response_timeout,
                connection_timeout: self.connection_timeout,
                transient_retry: self.transient_retry,
                prefix,
                capabilities: Capabilities::default(),
                outage: super::outage::Outage::new(),
                persistence_checked: std::sync::atomic::AtomicBool::new(false),
                evicts_nothing: std::sync::atomic::AtomicBool::new(false),
                watcher: Watcher::new(
                    self.target,
                    self.tls,
                    self.response_timeout,
                    self.connection_timeout,
                ),
            }),
        };
        match backend.ready().await {
            Ok(()) => {}
            // Not reachable now: every step fails as unavailable, which the layers' failure
            // policy covers, until it is; the first step that reaches it connects.
            Err(err) if err.is_unavailable() => tracing::warn!(
                error = %err,
                "Redis is not reachable at start-up; steps fail as unavailable until it is"
            ),
            // Refused (credentials, ACL, a server below the floor) or misconfigured: waiting
            // would not help.
            Err(err) => return Err(err),
        }
        Ok(backend)
    }
}

/// The deployment with its passwords masked, never the URLs as given.
impl std::fmt::Debug for RedisBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackendBuilder")
            .field("endpoint", &endpoint::describe(&self.target))
            .field("prefix", &self.prefix)
            .field("response_timeout", &self.response_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("transient_retry", &self.transient_retry)
            .field("tls", &self.tls)
            .field("primary_credentials", &self.primary.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::super::RedisBackend;

    #[test]
    fn debug_never_shows_a_password() {
        let shown = format!(
            "{:?}",
            RedisBackend::standalone("redis://app:s3cret@10.0.0.1:6379").key_prefix("p:")
        );
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("redis://app:***@10.0.0.1:6379"), "{shown}");
        let shown = format!(
            "{:?}",
            RedisBackend::sentinel(["redis://:s3cret@s:26379"], "mymaster")
        );
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
