//! The Redis backend: standalone, Cluster or Sentinel, through redis-rs.
//!
//! Every step is one script call (or one pipeline of native commands): decisions are taken on
//! the server with the server's clock. The backend:
//!
//! - reconnects by itself: a standalone or Sentinel connection that breaks is replaced by
//!   a new one (asking the sentinels again), one attempt at a time, whose refusal is every
//!   step's answer at once, and made again in the background until it is; one that falls
//!   silent (three steps in a row without an answer, with nothing answered meanwhile) gets
//!   a successor, dialled in the background, which takes its place once it answers; a
//!   Cluster connection heals a broken node's connection through the cluster client, and
//!   is replaced whole when it falls silent, or one of its primaries does (a step that
//!   times out asks every primary for a `PING`);
//! - applies a binary-safe key prefix to every key;
//! - sends scripts as `EVALSHA` and falls back to `EVAL` once on `NOSCRIPT`; the crate's
//!   read-only steps go as `EVALSHA_RO` where the server has it (Redis 7.0+, Valkey) and the
//!   ACL allows it;
//! - rejects a multi-key step whose keys fall in different cluster slots before sending it,
//!   whatever the topology, so what works on one server also works on a cluster;
//! - keeps the server's [`Capabilities`] (`INCREX`, `EVALSHA_RO`) for every primitive
//!   built from the same handle.
//!
//! Connection-level timeouts bound every reply ([`DEFAULT_RESPONSE_TIMEOUT`]). A timed-out
//! step may still have run on the server: such errors report
//! [`is_outcome_uncertain`](crate::Error::is_outcome_uncertain).

mod builder;
mod capabilities;
mod connection;
mod dialer;
mod endpoint;
pub(crate) mod error_map;
mod eviction;
mod link;
mod outage;
mod persistence;
mod replication;
mod script;
pub(crate) mod script_reply;
mod sentinel;
mod server_clock;
mod server_version;
mod silence;
mod target;
mod tls;
mod watch;

use crate::backend::delivery::Resends;
pub use builder::{
    DEFAULT_CONNECTION_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_TRANSIENT_RETRY,
    RedisBackendBuilder,
};
pub use capabilities::HASH_FIELD_EXPIRY;
pub(crate) use capabilities::Reprobed;
pub use capabilities::{Capabilities, INCREX, INCREX_REPROBE_AFTER};
pub(crate) use replication::{Confirmation, Replication};
pub use script::Script;
pub(crate) use script::script;
pub(crate) use server_clock::Deadline;
use server_clock::millis;
pub use server_version::{SERVER_FLOOR, ServerVersion};
pub use tls::TlsSettings;
pub use watch::{CLIENT_TRACKING, KeyTtl, KeyWatch};

use std::fmt;
use std::future::Future;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::{Cmd, FromRedisValue, Pipeline, ToRedisArgs, Value};

use self::connection::Request;
use self::link::Link;
use self::script_reply::{Outcome, ScriptReply};
use crate::backend::{KeyPrefix, ensure_same_slot};
use crate::backoff::Backoff;
use crate::error::{Error, Result};

/// A handle to a Redis or Valkey deployment. Cheap to clone; clones share the connection and
/// the [`Capabilities`].
///
/// # Example
///
/// ```no_run
/// use leasehold::backend::redis::RedisBackend;
///
/// # async fn example() -> leasehold::Result<()> {
/// let backend = RedisBackend::standalone("redis://127.0.0.1:6379")
///     .key_prefix("myapp:")
///     .connect()
///     .await?;
/// let now = backend.server_time().await?;
/// println!("server clock: {} ms since the epoch", now.as_millis());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    shared: Arc<Shared>,
}

struct Shared {
    link: Link,
    /// The deployment, passwords masked.
    endpoint: String,
    /// `"standalone"`, `"cluster"` or `"sentinel"`.
    topology: &'static str,
    response_timeout: Duration,
    connection_timeout: Duration,
    transient_retry: Duration,
    prefix: KeyPrefix,
    capabilities: Capabilities,
    watcher: watch::Watcher,
    /// Since when the backend has failed without effect (see [`RedisBackend::send`]).
    outage: outage::Outage,
    /// Whether the server's persistence was asked about (see
    /// [`RedisBackend::check_persistence_once`]).
    persistence_checked: std::sync::atomic::AtomicBool,
    /// Whether the server is known to evict nothing, or not to tell (see
    /// [`RedisBackend::eviction_policy`]).
    evicts_nothing: std::sync::atomic::AtomicBool,
}

impl RedisBackend {
    /// Configures a backend for one standalone server, for example
    /// `redis://127.0.0.1:6379/0`, `rediss://…` (with the `tls` feature) or
    /// `redis+unix:///run/redis.sock`.
    pub fn standalone(url: impl Into<String>) -> RedisBackendBuilder {
        RedisBackendBuilder::standalone(url.into())
    }

    /// Configures a backend for a Redis Cluster, given one or more node URLs.
    pub fn cluster<I, S>(urls: I) -> RedisBackendBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisBackendBuilder::cluster(urls.into_iter().map(Into::into).collect())
    }

    /// Configures a backend for the primary that the given sentinels name `service_name`.
    /// The URLs' credentials are the sentinels'; the primary's are given with
    /// [`primary_credentials`](RedisBackendBuilder::primary_credentials). With `rediss://`
    /// sentinel URLs (the `tls` feature), the primary is reached over TLS too, with the public
    /// roots or the [`tls`](RedisBackendBuilder::tls) settings.
    pub fn sentinel<I, S>(sentinel_urls: I, service_name: impl Into<String>) -> RedisBackendBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisBackendBuilder::sentinel(
            sentinel_urls.into_iter().map(Into::into).collect(),
            service_name.into(),
        )
    }

    /// Connects to a standalone server with default settings, every key prefixed with
    /// `key_prefix`, this service's namespace (see [`RedisBackendBuilder::key_prefix`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn connect(url: impl Into<String>, key_prefix: impl AsRef<[u8]>) -> Result<Self> {
        Self::standalone(url).key_prefix(key_prefix).connect().await
    }

    /// The server capability state shared by every clone of this handle.
    pub fn capabilities(&self) -> &Capabilities {
        &self.shared.capabilities
    }

    /// The deployment this handle talks to, for logs: its URL (a cluster's node URLs, a
    /// Sentinel's service name and sentinels) with any password replaced by `***`.
    pub fn endpoint(&self) -> &str {
        &self.shared.endpoint
    }

    /// The server this handle is connected to, as its `INFO server` reported it; `None`
    /// until the handle has reached it (see [`ready`](Self::ready)) and while it reconnects.
    pub fn server_version(&self) -> Option<ServerVersion> {
        self.shared
            .link
            .get_now()
            .map(|connected| connected.server.clone())
    }

    /// Connects now if the handle has not reached the deployment yet, and says whether it
    /// can: for a readiness probe, or a service that would rather not start without Redis.
    ///
    /// [`connect`](RedisBackendBuilder::connect) succeeds when the deployment is
    /// unreachable ([`Error::is_unavailable`]), so that a service whose failure policy
    /// covers an outage boots during one; every step then fails as unavailable until the
    /// first one that reaches it connects. This fails with the same error a step would,
    /// naming the deployment without its password.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped attempt leaves nothing behind, and the next caller tries again.
    pub async fn ready(&self) -> Result<()> {
        self.shared.link.get().await.map(drop)
    }

    /// The configured key prefix.
    pub fn key_prefix(&self) -> &[u8] {
        self.shared.prefix.as_bytes()
    }

    /// The key Redis stores for a user key: the prefix (a `|` in it written as `%7C`, a `%`
    /// as `%25`), then `|`, then the key. The separator keeps services whose prefixes are
    /// prefixes of one another (`a:` and `a:b:`) from ever naming one key.
    pub(crate) fn stored_key(&self, key: &[u8]) -> Vec<u8> {
        self.shared.prefix.apply(key)
    }

    /// Whether this handle reaches a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.shared.topology == "cluster"
    }

    /// A command on one user key, its name and prefixed key written, sized for `args` more
    /// arguments of `bytes` bytes in all: for steps sent as plain commands on every request,
    /// where each buffer grown on the way is an allocation more.
    pub(crate) fn keyed_command(&self, name: &str, key: &[u8], args: usize, bytes: usize) -> Cmd {
        let prefix = self.shared.prefix.written();
        let mut cmd = Cmd::with_capacity(2 + args, name.len() + prefix.len() + key.len() + bytes);
        cmd.arg(name).arg(PrefixedKey(prefix, key));
        cmd
    }

    /// The key Redis stores for a user key (see [Key prefixes](crate::manual::deploying_redis#key-prefixes)): a test hook
    /// (feature `test-util`), for tests that look at the keys themselves.
    #[cfg(feature = "test-util")]
    pub fn physical_key(&self, key: &[u8]) -> Vec<u8> {
        self.stored_key(key)
    }

    /// The server's clock (`TIME`) as a duration since the Unix epoch.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn server_time(&self) -> Result<Duration> {
        let connected = self.connected().await?;
        self.read_clock(&connected).await
    }

    /// Reads the clock of the server behind `connected` and updates its reading: on that
    /// connection, since a reconnect may reach another server.
    async fn read_clock(&self, connected: &Arc<dialer::Connected>) -> Result<Duration> {
        let sent = tokio::time::Instant::now();
        let reply = connected
            .connection
            .query(Request::Cmd(&redis::cmd("TIME")))
            .await
            .map_err(|err| {
                if err.is_timeout() {
                    self.shared.link.missed(connected);
                }
                self.shared.link.forget_if_broken(connected, &err);
                error_map::from_redis(err)
            })?;
        connected.silence.answered();
        let now = server_clock::time_reply(reply)?;
        connected
            .clock
            .update(sent, tokio::time::Instant::now(), millis(now));
        Ok(now)
    }

    /// The deadline an acquisition sent now carries: past it, on the server's clock, the
    /// step is a no-op, so that a command delayed in the network (held by a stalled link,
    /// or left on a connection the client gave up on) cannot take a lease or a permit after
    /// its uncertain outcome was cleaned up. It leaves the command the response timeout and
    /// the transient-retry bound, and the local instant it gives is when the server has
    /// certainly passed it: the cleanup waits until then.
    ///
    /// The server's clock is bounded from its latest `TIME` reading: on every new connection
    /// (so after a failover, before any acquisition uses the new primary's clock), then again
    /// by the first acquisition once it is a minute old (before it relies on it), or in the
    /// background after an acquisition arrived late. Two margins bound the reading: 1 ms per second of its age
    /// covers the local clock drifting from the server's, and 100 ms a server clock stepped
    /// back by that much, or a Cluster's nodes (the reading comes from one of them)
    /// disagreeing by that much. More would let a delayed command through, as it would any
    /// other clock-based rule: keep the servers' clocks in step (NTP keeps them within a few
    /// milliseconds). An acquisition sent again to another server within the transient-retry
    /// bound (refused by a demoted primary, then sent to the new one) keeps its deadline;
    /// [`until_passed`](Self::until_passed), which its cleanup waits for, also waits for the
    /// clock of the server connected then.
    pub(crate) async fn acquire_deadline(&self) -> Result<Deadline> {
        let connected = self.connected().await?;
        let clock = &connected.clock;
        // An old reading widens the deadline by its drift allowance (a day's is 86 s), which
        // the cleanup of an uncertain acquisition would wait out: read it again first, one
        // reading at a time (the others go on with the old one).
        if clock.is_stale() {
            self.reread_clock(&connected).await;
        }
        Ok(clock.deadline(self.deadline_bound()))
    }

    /// The server's clock now as this handle reads it (ms since the epoch; its latest
    /// possible reading, within the round trip of its last `TIME`): to order what several
    /// processes record, to about a millisecond.
    pub(crate) async fn server_now_ms(&self) -> Result<u64> {
        Ok(self
            .connected()
            .await?
            .clock
            .deadline(Duration::ZERO)
            .server_ms)
    }

    /// Reads the server's clock again in the background (one reading at a time): when an
    /// acquisition arrived after its deadline, which a clock that moved (another node after a
    /// failover) could cause.
    pub(crate) fn refresh_clock(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(connected) = self.shared.link.get_now() else {
            return;
        };
        let backend = self.clone();
        runtime.spawn(async move { backend.reread_clock(&connected).await });
    }

    /// Reads the clock behind `connected` again, unless a reading is already under way (then
    /// the old one serves meanwhile); a failure leaves the old reading.
    async fn reread_clock(&self, connected: &Arc<dialer::Connected>) {
        let Some(_refreshing) = connected.clock.start_refresh() else {
            return;
        };
        if let Err(err) = self.read_clock(connected).await {
            tracing::debug!(error = %err, "could not read the server's clock; using the old reading");
        }
    }

    /// Completes once the server's clock has certainly passed `deadline`: at its
    /// `passed_at`, and then, if the connection in use now reaches a server connected since
    /// the deadline was read (a new primary after a failover, whose clock may be behind the
    /// old one's), once that server's clock has passed it too. The release of an acquisition
    /// whose outcome is uncertain waits for this: the acquisition may have been sent again to
    /// that server within the transient-retry bound, and must not be able to land there after
    /// the release.
    ///
    /// The wait for another server's clock is bounded by the deadline's own bound: a server
    /// further behind than that (a clock stepped back by more than the margins) defeats the
    /// rule whatever the release waits, and is logged as a warning rather than holding the
    /// release for as long as the clocks disagree.
    pub(crate) fn until_passed(
        &self,
        deadline: Deadline,
    ) -> impl Future<Output = ()> + Send + 'static {
        let backend = self.clone();
        async move {
            tokio::time::sleep_until(deadline.passed_at).await;
            let latest = crate::time::after(deadline.passed_at, backend.deadline_bound());
            loop {
                // No connection now: the release that follows makes one, and waits no more.
                let Ok(connected) = backend.connected().await else {
                    return;
                };
                let passed_at = connected.clock.passed_at(deadline.server_ms);
                let now = tokio::time::Instant::now();
                if passed_at <= now {
                    return;
                }
                if passed_at > latest {
                    tracing::warn!(
                        behind = ?passed_at.saturating_duration_since(deadline.passed_at),
                        "the server connected now has a clock further behind the one an \
                         acquisition's deadline was read from than the margins allow; its \
                         cleanup waits no longer than the deadline's bound"
                    );
                    tokio::time::sleep_until(latest).await;
                    return;
                }
                tracing::debug!(wait = ?passed_at.saturating_duration_since(now), "the server connected now is behind the deadline's; the release waits");
                tokio::time::sleep_until(passed_at).await;
            }
        }
    }

    /// Runs `attempt` until it answers or fails certainly: a failure whose outcome is
    /// uncertain is sent again, within the transient-retry bound and at its pace, as
    /// [`send`](Self::send) sends again a failure that certainly changed nothing. Only for a
    /// step that only reads, or that counts once however often it is delivered (it carries
    /// an id its state records).
    pub(crate) async fn resending_uncertain<T, F>(
        &self,
        mut attempt: impl FnMut() -> F,
    ) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let mut resends = Resends::new();
        loop {
            match attempt().await {
                Err(err) if self.resend_after(&mut resends, &err).await => {}
                reply => return reply,
            }
        }
    }

    /// After `failure` of a step that counts once however often it is delivered: waits the
    /// next pause and says to send it again, when it was lost on the way (no reply in time, a
    /// connection lost mid-flight) and the transient-retry bound, counted from the start of
    /// the outage as [`send`](Self::send) counts it, allows. A failure the server answered
    /// (a script that failed part way, a refusal) is never sent again: it would fail the same.
    pub(crate) async fn resend_after(&self, resends: &mut Resends, failure: &Error) -> bool {
        if !(failure.is_outcome_uncertain() && failure.is_unavailable()) {
            return false;
        }
        // Boxed, as in `send`: a pause is rare.
        Box::pin(resends.0.again(self, failure)).await
    }

    /// How far ahead of the server's clock an acquisition's deadline is set: every send may
    /// wait for a reconnection, then for its reply, within the retry bound.
    fn deadline_bound(&self) -> Duration {
        self.shared
            .response_timeout
            .saturating_add(self.shared.connection_timeout)
            .saturating_add(self.shared.transient_retry)
            .min(MAX_DEADLINE_BOUND)
    }

    /// Runs `script` as one atomic step with the given user keys (the prefix is applied
    /// here) and arguments, and converts its reply.
    ///
    /// The keys must share one cluster slot, or the call fails with
    /// [`ErrorKind::CrossSlot`](crate::ErrorKind::CrossSlot) before anything is sent. Sends
    /// `EVALSHA`; on `NOSCRIPT` sends `EVAL` once.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: once the request is written, dropping the future does not stop the
    /// script, which may run to completion on the server.
    pub async fn eval<T, K, A>(&self, script: &Script, keys: &[K], args: A) -> Result<T>
    where
        T: FromRedisValue,
        K: AsRef<[u8]>,
        A: ToRedisArgs,
    {
        self.eval_then(script, keys, args, |reply| convert(reply, script.name()))
            .await
    }

    /// Runs one of the crate's scripts and decodes its reply in the one reply convention
    /// ([`script_reply`]): a status table, or an integer the script packed its answer into.
    pub(crate) fn script_reply<'a, K, A>(
        &'a self,
        script: &'a Script,
        keys: &'a [K],
        args: A,
    ) -> impl Future<Output = Result<ScriptReply>> + Send + 'a
    where
        K: AsRef<[u8]> + Sync,
        A: ToRedisArgs + Send + Sync + 'a,
    {
        // Returned, not awaited in a future of its own: each nested future costs a copy of
        // everything below it, on every decision.
        self.eval_then(script, keys, args, move |reply| script.decode(reply, keys))
    }

    /// [`script_reply`](Self::script_reply) for a script that always answers a status table.
    pub(crate) fn script_outcome<'a, K, A>(
        &'a self,
        script: &'a Script,
        keys: &'a [K],
        args: A,
    ) -> impl Future<Output = Result<Outcome>> + Send + 'a
    where
        K: AsRef<[u8]> + Sync,
        A: ToRedisArgs + Send + Sync + 'a,
    {
        self.eval_then(script, keys, args, move |reply| {
            script.decode(reply, keys)?.into_outcome(script.name())
        })
    }

    /// What calls a script with the given user keys (prefixed here) and arguments: given the
    /// command (`EVALSHA`, `EVAL`, or their read-only forms) and its body (the digest or the
    /// source), the command to send. Fails with
    /// [`ErrorKind::CrossSlot`](crate::ErrorKind::CrossSlot) when the keys are not in one
    /// slot, before anything is sent.
    #[inline]
    fn script_call<'a, K, A>(
        &'a self,
        keys: &'a [K],
        args: &'a A,
    ) -> Result<impl Fn(&str, &str) -> Cmd + 'a>
    where
        K: AsRef<[u8]>,
        A: ToRedisArgs,
    {
        let prefix = self.shared.prefix.written();
        // One key is always in one slot; several are checked with their prefix.
        if keys.len() > 1 {
            let physical: Vec<Vec<u8>> = keys.iter().map(|k| self.stored_key(k.as_ref())).collect();
            ensure_same_slot(&physical)?;
        }
        // Sized once and written in place, prefixed keys included: this runs for every
        // decision.
        let size = 64
            + keys
                .iter()
                .map(|k| prefix.len() + k.as_ref().len())
                .sum::<usize>();
        Ok(move |command: &str, body: &str| {
            let mut cmd = Cmd::with_capacity(8 + keys.len(), size + body.len());
            cmd.arg(command).arg(body).arg(keys.len());
            for key in keys {
                cmd.arg(PrefixedKey(prefix, key.as_ref()));
            }
            args.write_redis_args(&mut cmd);
            cmd
        })
    }

    /// Runs `script` and hands its reply as it came to `finish`. Read-only scripts go as
    /// `EVALSHA_RO` where the server has it (Redis 7.0+, Valkey), until an ACL refuses it.
    async fn eval_then<K, A, T>(
        &self,
        script: &Script,
        keys: &[K],
        args: A,
        finish: impl FnOnce(Value) -> Result<T>,
    ) -> Result<T>
    where
        K: AsRef<[u8]>,
        A: ToRedisArgs,
    {
        let call = self.script_call(keys, &args)?;
        let server = &self.connected().await?.server;
        let legacy = server.legacy_scripting();
        let (source, sha1) = script.variant(legacy);
        let mut read_only = script.is_read_only()
            && server.may_have_read_only_scripts()
            && self.shared.capabilities.read_only_scripts();
        // Written inline, not as a helper future: this runs for every decision, and each
        // nested future costs a copy of everything below it.
        loop {
            let (evalsha, eval) = if read_only {
                ("EVALSHA_RO", "EVAL_RO")
            } else {
                ("EVALSHA", "EVAL")
            };
            // Its own statement, so that its command is dropped before another is made.
            let reply = self.send(Request::Cmd(&call(evalsha, sha1))).await;
            let reply = match reply {
                Err(SendError::Reply(err)) if error_map::is_noscript(&err) => {
                    tracing::debug!(
                        script = script.name(),
                        "NOSCRIPT; sending the script with {eval}"
                    );
                    // Boxed: rare (once per script and server), and inline it would weigh on
                    // every step's future.
                    Box::pin(self.send(Request::Cmd(&call(eval, source)))).await
                }
                reply => reply,
            };
            match reply {
                Err(SendError::Reply(err)) if read_only && error_map::refuses_command(&err) => {
                    tracing::info!(
                        error = %err,
                        script = script.name(),
                        "the server refuses EVALSHA_RO; sending read-only scripts as EVALSHA"
                    );
                    self.shared.capabilities.record_read_only_scripts_refused();
                    read_only = false;
                }
                reply => return reply.map_err(SendError::into_error).and_then(finish),
            }
        }
    }

    /// Whether the server has hash field expiry (`HPEXPIRE`: Redis 7.4+, Valkey 9.0+), which
    /// the [hash-field leases](crate::coordination::hash_lease) need. Probed with `COMMAND
    /// INFO`; a yes is kept for the connection, for every clone of this handle, and a new
    /// connection (which may reach another server after a failover) probes again. A no is
    /// not kept: the next step probes again, on the connection it finds (one round trip on
    /// a path that fails anyway). A server that refuses the expiry all the same (a node of
    /// another version in a cluster, an ACL) costs an acquisition its field, and never
    /// leaves one without expiry.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn hash_field_expiry(&self) -> Result<bool> {
        let connected = self.connected().await?;
        if connected.hash_field_expiry.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("INFO").arg("HPEXPIRE");
        let reply: Value = self.query(&cmd).await?;
        // One entry per name asked: nil (or an empty entry) for an unknown command.
        let found = match reply {
            Value::Array(entries) => entries
                .first()
                .is_some_and(|e| !matches!(e, Value::Nil) && e != &Value::Array(vec![])),
            _ => false,
        };
        if found {
            connected.hash_field_expiry.store(true, Ordering::Relaxed);
        }
        Ok(found)
    }

    /// Fails with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported), naming the
    /// feature and its minimum version, unless the server has hash field expiry.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn require_hash_field_expiry(&self) -> Result<()> {
        if self.hash_field_expiry().await? {
            Ok(())
        } else {
            Err(Error::unsupported(HASH_FIELD_EXPIRY))
        }
    }

    /// A count of the server's answers on this handle (see [`Backend::answers`](crate::backend::Backend::answers)).
    pub(crate) fn answers(&self) -> u64 {
        // A connection made is an answer too: a server reached again.
        self.shared.outage.answers() + self.shared.link.made()
    }

    /// A step's caller gave up on it at its own timeout with nothing answered on the handle
    /// since it began: a step the connection in use left unanswered (see [`silence`]).
    pub(crate) fn unanswered(&self) {
        self.shared.link.unanswered();
    }

    /// A step's caller gave up on it at its own timeout while the server answered others:
    /// on a Cluster, one node may have fallen silent (see [`silence`]).
    pub(crate) fn unanswered_among_answers(&self) {
        self.shared.link.unanswered_among_answers();
    }

    /// Sends one native command and converts its reply.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        let reply = self.query_raw(cmd).await.map_err(SendError::into_error)?;
        convert(reply, "command")
    }

    /// Sends one native command and returns the client's error unmapped, for steps that must
    /// recognise a particular server answer.
    pub(crate) async fn query_raw(&self, cmd: &Cmd) -> Result<Value, SendError> {
        self.send(Request::Cmd(cmd)).await
    }

    /// Sends a pipeline in one round trip and returns its replies, or the first error.
    pub(crate) async fn query_pipeline(&self, pipe: &Pipeline) -> Result<Vec<Value>, SendError> {
        match self.send(Request::Pipeline(pipe)).await? {
            Value::Array(replies) => Ok(replies),
            other => Ok(vec![other]),
        }
    }
}

impl RedisBackend {
    /// Sends one request on the connection, made now if there is none; a failure that
    /// certainly left the server untouched and may pass by itself (a transient reply such as
    /// `READONLY` or `LOADING`, a refused connection) is sent again with jittered backoff
    /// while the [transient retry bound](RedisBackendBuilder::transient_retry) lasts. A
    /// connection that broke is replaced first: a Sentinel connection asks the sentinels for
    /// the primary again, and a cluster client refreshes its slots, so a failover that
    /// completes within the bound costs latency, not errors. A failure that may have applied
    /// is never sent again here (see [`resending_uncertain`](Self::resending_uncertain) for
    /// the steps that are).
    ///
    /// The bound counts from the start of the outage, not of the step: once the backend has
    /// failed so for longer than the bound, a step's answer is its first failure, at once,
    /// until the server answers again. A long outage so costs each step no wait at all (a
    /// refused connection, tried again by one step at a time) rather than the bound or the
    /// layer's timeout.
    async fn send(&self, request: Request<'_>) -> Result<Value, SendError> {
        let mut retry = Retry::new();
        loop {
            // A connection that cannot be made is tried again there, from the same outage.
            let connected = self.connected().await.map_err(SendError::Connect)?;
            let err = match connected.connection.query(request).await {
                Ok(reply) => {
                    connected.silence.answered();
                    self.shared.outage.end();
                    return Ok(reply);
                }
                Err(err) => err,
            };
            let replied = error_map::is_reply(&err);
            if replied {
                connected.silence.answered();
            } else if err.is_timeout() {
                self.shared.link.missed(&connected);
            }
            self.shared.link.forget_if_broken(&connected, &err);
            if !error_map::may_pass_without_effect(&err) {
                // An answer, if the server gave one, says it is there.
                if replied {
                    self.shared.outage.end();
                }
                return Err(SendError::Reply(err));
            }
            // Boxed, as making a connection is: a pause is rare, and inline it would weigh
            // on every step's future.
            if !Box::pin(retry.again(self, &err)).await {
                return Err(SendError::Reply(err));
            }
        }
    }

    /// The connection, made now if there is none; a failed attempt that may pass (a refused
    /// connection) is tried again as [`send`](Self::send) sends a step again, within the
    /// same bound, from the same outage.
    async fn connected(&self) -> Result<Arc<dialer::Connected>> {
        if let Some(connected) = self.shared.link.get_now() {
            return Ok(connected);
        }
        // Boxed: making a connection is rare, and its future (a wait for another step's
        // attempt, or a pause before the next) would otherwise sit inline in every step's,
        // making each several hundred bytes larger, to be allocated and moved per step.
        Box::pin(self.make_connection()).await
    }

    /// [`connected`](Self::connected) when there is no connection at hand.
    async fn make_connection(&self) -> Result<Arc<dialer::Connected>> {
        let mut retry = Retry::new();
        loop {
            match self.shared.link.get().await {
                Ok(connected) => return Ok(connected),
                Err(err) if error_map::may_pass(&err) => {
                    if !retry.again(self, &err).await {
                        return Err(err);
                    }
                }
                Err(err) => return Err(err),
            }
        }
    }
}

/// The pace of sending again what failed without effect (see [`RedisBackend::send`]): from
/// the start of the outage, within the transient-retry bound, with jittered pauses doubling
/// from [`TRANSIENT_RETRY_FIRST_PAUSE`] to [`TRANSIENT_RETRY_MAX_PAUSE`].
pub(crate) struct Retry {
    /// The end of the bound, and the pauses; set at the first failure.
    state: Option<(tokio::time::Instant, Backoff)>,
}

impl Retry {
    pub(crate) fn new() -> Self {
        Retry { state: None }
    }

    /// After `failure`: waits the next pause and says to send again, or says not to when
    /// the bound would be passed.
    async fn again(&mut self, backend: &RedisBackend, failure: &(dyn fmt::Display + Sync)) -> bool {
        let shared = &backend.shared;
        let now = tokio::time::Instant::now();
        // Every failure is recorded, so that the outage is remembered while it lasts.
        let since = shared.outage.failure(now);
        let (deadline, backoff) = self.state.get_or_insert_with(|| {
            let deadline = crate::time::after(since, shared.transient_retry);
            let backoff = Backoff::new(TRANSIENT_RETRY_FIRST_PAUSE, TRANSIENT_RETRY_MAX_PAUSE);
            (deadline, backoff)
        });
        let wait = backoff.next_pause();
        if now + wait >= *deadline {
            return false;
        }
        tracing::debug!(error = %failure, retry_in = ?wait, "transient failure; sending again");
        tokio::time::sleep(wait).await;
        true
    }
}

/// Why a request got no reply.
#[derive(Debug)]
pub(crate) enum SendError {
    /// No connection could be made: the attempt's error, naming the deployment.
    Connect(Error),
    /// The server, or the connection, failed the request.
    Reply(redis::RedisError),
}

impl SendError {
    /// The crate's error.
    pub(crate) fn into_error(self) -> Error {
        match self {
            SendError::Connect(err) => err,
            SendError::Reply(err) => error_map::from_redis(err),
        }
    }

    /// An ACL's denial of a command of the request (see [`error_map::denied_by_acl`]).
    pub(crate) fn denied_by_acl(&self) -> bool {
        matches!(self, SendError::Reply(err) if error_map::denied_by_acl(err))
    }

    /// The server's refusal of the command itself (see [`error_map::refuses_command`]).
    pub(crate) fn refuses_command(&self) -> bool {
        matches!(self, SendError::Reply(err) if error_map::refuses_command(err))
    }
}

impl From<redis::RedisError> for SendError {
    fn from(err: redis::RedisError) -> Self {
        SendError::Reply(err)
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Connect(err) => err.fmt(f),
            SendError::Reply(err) => f.write_str(&error_map::summary(err)),
        }
    }
}

/// The longest a command's deadline may be from now, whatever the timeouts configured.
const MAX_DEADLINE_BOUND: Duration = Duration::from_secs(3600);

/// The first pause before a transient failure is sent again (then doubled, jittered).
const TRANSIENT_RETRY_FIRST_PAUSE: Duration = Duration::from_millis(20);
/// The longest pause between two sends of a transient failure.
const TRANSIENT_RETRY_MAX_PAUSE: Duration = Duration::from_millis(100);

/// A user key with the backend's prefix, written into a command as one argument without
/// being joined into a buffer of its own first.
struct PrefixedKey<'a>(&'a [u8], &'a [u8]);

impl ToRedisArgs for PrefixedKey<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + redis::RedisWrite,
    {
        let mut arg = out.writer_for_next_arg();
        // Writing into a command's buffer cannot fail.
        _ = arg.write_all(self.0);
        _ = arg.write_all(self.1);
    }
}

fn convert<T: FromRedisValue>(reply: Value, what: &str) -> Result<T> {
    redis::from_redis_value(reply)
        .map_err(|err| Error::unexpected_reply(format!("{what}: {err}")).with_source(err))
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("topology", &self.shared.topology)
            .field("endpoint", &self.shared.endpoint)
            .field("prefix", &self.shared.prefix)
            .finish_non_exhaustive()
    }
}
