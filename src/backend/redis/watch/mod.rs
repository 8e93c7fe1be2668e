//! Waiting for a key to change, through RESP3 client tracking: [`RedisBackend::watch_key`]
//! (whose docs describe the behaviour) and [`KeyWatch`].
//!
//! Parts: [`registry`] maps keys to pending watches; [`channel`] holds one tracking
//! connection and the dispatcher task that turns its pushes into wake-ups; [`endpoint`]
//! opens tracking connections (standalone, Sentinel primary, cluster node) and reads the
//! cluster's slot map.
//!
//! Which read tracks a key: the server tracks the keys of every read-only command a tracking
//! client runs, whatever the key's type and whether it exists, and no write. Checked on
//! Redis 7.0, Redis 8.2 and Valkey 8.1 by reading a list, a string and a missing key on a
//! tracking connection, then writing the key from another client: `PTTL`, `EXISTS`, `TYPE`,
//! `GET` (even when it fails with `WRONGTYPE`), `OBJECT ENCODING`, `DUMP` and `MEMORY USAGE`
//! were all invalidated; `PING` and `PEXPIRE` were not. `PTTL` is used: it works for every
//! type and answers what a waiter needs, whether the key exists and when it expires.

mod channel;
mod endpoint;
mod registry;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::{ErrorKind as RedisKind, RedisError, ServerErrorKind, Value};
use tokio::time::Instant;

use self::channel::{AfterLoss, Channel};
use self::endpoint::{Endpoint, SlotMap, Timeouts};
use self::registry::{Registry, Signal};
use super::target::Target;
use super::tls::TlsSettings;
use super::{RedisBackend, error_map};
use crate::backend::key_slot;
use crate::error::{Error, Result, UnsupportedFeature};

/// RESP3 client tracking (`HELLO 3`, `CLIENT TRACKING`; Redis 6.0+), which
/// [`RedisBackend::watch_key`] needs.
pub const CLIENT_TRACKING: UnsupportedFeature = UnsupportedFeature::new(
    "RESP3 client tracking (HELLO 3, CLIENT TRACKING)",
    "Redis 6.0",
);

/// How many times a cluster watch follows a redirection before giving up.
const ROUTE_ATTEMPTS: usize = 3;

/// A key's time to live, as `PTTL` reported it when a [`KeyWatch`] was set.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::backend::redis::KeyTtl;
///
/// // How long a waiter may sleep before the key's expiry frees it.
/// fn longest_sleep(ttl: KeyTtl) -> Option<Duration> {
///     match ttl {
///         KeyTtl::ExpiresIn(left) => Some(left),
///         _ => None,
///     }
/// }
/// assert_eq!(longest_sleep(KeyTtl::Missing), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyTtl {
    /// The key did not exist.
    Missing,
    /// The key existed and had no expiry.
    Persistent,
    /// The key existed and was due to expire after this long.
    ExpiresIn(Duration),
}

impl KeyTtl {
    /// Whether the key existed.
    pub fn exists(self) -> bool {
        !matches!(self, KeyTtl::Missing)
    }

    fn from_pttl(pttl: i64) -> Result<KeyTtl> {
        match pttl {
            -2 => Ok(KeyTtl::Missing),
            -1 => Ok(KeyTtl::Persistent),
            ms if ms >= 0 => Ok(KeyTtl::ExpiresIn(Duration::from_millis(ms.unsigned_abs()))),
            other => Err(Error::unexpected_reply(format!("PTTL answered {other}"))),
        }
    }
}

/// One registered interest in one key, from [`RedisBackend::watch_key`].
///
/// A watch fires once: after [`changed`](Self::changed) has completed, it completes at once
/// every time. Watch again (and check again) for the next change. Dropping a watch
/// unregisters it.
///
/// A watch does not keep the backend alive: when every handle of the backend is dropped,
/// pending watches fire and the tracking connections close.
///
/// # Example
///
/// Wait until a key is gone (deleted or expired):
///
/// ```no_run
/// use leasehold::backend::redis::{KeyTtl, RedisBackend};
///
/// # async fn example() -> leasehold::Result<()> {
/// let backend = RedisBackend::connect("redis://127.0.0.1:6379", "myapp:").await?;
/// loop {
///     // Watch first, then look: a change in between still wakes the watch.
///     let mut watch = backend.watch_key(b"job:42:lease").await?;
///     if watch.ttl() == KeyTtl::Missing {
///         break;
///     }
///     // A write, a deletion, the expiry, or a lost connection: look again.
///     watch.changed().await;
/// }
/// # Ok(()) }
/// ```
pub struct KeyWatch {
    registration: Registration,
    signal: Arc<Signal>,
    ttl: KeyTtl,
    expires_at: Option<Instant>,
}

impl KeyWatch {
    /// The key's `PTTL` read when the watch was set.
    pub fn ttl(&self) -> KeyTtl {
        self.ttl
    }

    /// Whether the watch has fired: [`changed`](Self::changed) would complete at once.
    pub fn has_changed(&self) -> bool {
        self.signal.is_fired() || self.expires_at.is_some_and(|at| at <= Instant::now())
    }

    /// Completes at the key's next invalidation (a write, a deletion, an expiry, an eviction
    /// or a flush seen by the server), when the [`ttl`](Self::ttl) read at registration has
    /// run out on the local clock (so that an expiry never depends on the notification
    /// alone; measured from the reply, so it falls after the server's expiry), when the
    /// tracking connection is lost or replaced (the server forgot the key: check again), or
    /// when the backend is dropped.
    ///
    /// Any of these may be spurious (a write that left the value as it was, a reconnect):
    /// treat a wake-up as "look again", never as an answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses nothing; a change that happens meanwhile
    /// makes the next call complete at once.
    pub async fn changed(&mut self) {
        let notified = self.signal.notify().notified();
        tokio::pin!(notified);
        // Enabled before looking at the flag, so a wake-up in between is not missed.
        notified.as_mut().enable();
        if self.signal.is_fired() {
            return;
        }
        match self.expires_at {
            Some(at) => {
                tokio::select! {
                    () = notified => {}
                    () = tokio::time::sleep_until(at) => self.signal.fire(),
                }
            }
            None => notified.await,
        }
    }
}

impl fmt::Debug for KeyWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyWatch")
            .field("key", &String::from_utf8_lossy(&self.registration.key))
            .field("ttl", &self.ttl)
            .field("changed", &self.has_changed())
            .finish()
    }
}

/// A watch's place in the registry; dropping it leaves the registry.
struct Registration {
    tracker: Weak<Tracker>,
    key: Vec<u8>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(tracker) = self.tracker.upgrade() {
            tracker.registry.unregister(&self.key, self.id);
        }
    }
}

impl RedisBackend {
    /// Watches `key` (a user key: the backend's prefix is applied) for its next change, then
    /// reads its `PTTL` through the tracking connection, in that order, so that a change
    /// racing with the read still fires the watch.
    ///
    /// The read goes through a *tracking connection*: a RESP3 connection with `CLIENT
    /// TRACKING ON` (default mode), on which the server remembers every key read and pushes
    /// an `invalidate` message when one of them is written, deleted, expired, evicted or
    /// flushed. A dispatcher task turns those pushes into wake-ups of the watches of those
    /// keys. No `notify-keyspace-events` setting is needed on the server. Registering before
    /// reading means that either the read sees a racing change, or the invalidation that
    /// follows the read finds the watch registered. Wake-ups are hints, never decisions: a
    /// woken caller checks again with the atomic step it is waiting to perform. See
    /// [`KeyWatch`] for an example.
    ///
    /// # Connections
    ///
    /// One tracking connection per backend handle (shared by its clones; per node on a
    /// cluster), opened on the first watch with the builder's URL, credentials, TLS settings
    /// and timeouts:
    ///
    /// - **standalone**: to the configured server;
    /// - **Sentinel**: to the primary the sentinels name, asked again each time the
    ///   connection is opened (in a failover the sentinels kill the clients of the demoted
    ///   primary, which wakes the watches and reconnects to the new one);
    /// - **Cluster**: to the node that serves the key's slot, found with `CLUSTER SLOTS`
    ///   through the backend's connection. A `MOVED` or `ASK` answer wakes every watch and
    ///   looks the owner up again; a lost node connection wakes its watches and is opened
    ///   again only when a watch needs that node.
    ///
    /// A reconnected connection starts with tracking off and the server forgets what the old
    /// one tracked: a new connection is used only once `CLIENT TRACKING ON` succeeded, and a
    /// lost one wakes every watch read through it. A connection that says nothing for a
    /// second while watches are pending is asked a `PING`, and one that does not answer
    /// within the response timeout counts as lost: a connection that fell silent (a host
    /// gone without a FIN or a RST, a VIP moved) delivers no invalidation, and its waiters
    /// would otherwise sleep until their keys' expiries. A server stalled for as long looks
    /// the same: its waiters are woken and ask again, and a wait whose server still does not
    /// answer ends with the step's error (unavailable) rather than sleeping through. A standalone or Sentinel connection is reopened in the
    /// background with a backoff from 50 ms to 2 s; a watch that finds no connection asks
    /// for an attempt at once and waits for that one attempt.
    ///
    /// # Errors
    ///
    /// An [unavailable](crate::Error::is_unavailable) error when no tracking connection can
    /// be had (the attempt is bounded by the builder's timeouts) or the read fails; a
    /// [refusal](crate::Error::is_refused) such as
    /// [`ErrorKind::Authentication`](crate::ErrorKind::Authentication) or
    /// [`ErrorKind::Permission`](crate::ErrorKind::Permission) when the server turns the
    /// tracking connection or its read down;
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) ([`CLIENT_TRACKING`]) on a
    /// server without RESP3. Nothing is written.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the watch it was setting. A tracking
    /// connection it opened stays for later watches, and a key it read stays tracked until
    /// the next change (the server then sends one invalidation that wakes nothing).
    pub async fn watch_key(&self, key: &[u8]) -> Result<KeyWatch> {
        let key = self.stored_key(key);
        let tracker = &self.shared.watcher.tracker;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let channel = match &tracker.target {
                Target::Cluster(_) => {
                    let (host, port) = tracker.owner(self, &key).await?;
                    tracker.cluster_channel(&host, port)?
                }
                _ => tracker.single_channel()?,
            };
            let (generation, mut connection) = match channel.ready(tracker.ready_wait()).await {
                Ok(ready) => ready,
                Err(err) => {
                    if let Target::Cluster(_) = tracker.target {
                        // The node may be gone for good: find the slot's owner again next time.
                        tracker.forget_slots();
                    }
                    return Err(err);
                }
            };
            let (id, signal) = tracker.registry.register(&key, channel.id());
            let registration = Registration {
                tracker: Arc::downgrade(tracker),
                key: key.clone(),
                id,
            };
            let reply: Result<i64, RedisError> = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut connection)
                .await;
            match reply {
                Ok(pttl) => {
                    let ttl = KeyTtl::from_pttl(pttl)?;
                    let expires_at = match ttl {
                        // PTTL rounds down and the server expires a key once its clock has
                        // passed the deadline: a millisecond more wakes after the expiry. A TTL
                        // too far away to represent is as good as none.
                        KeyTtl::ExpiresIn(left) => Instant::now()
                            .checked_add(left)
                            .and_then(|at| at.checked_add(Duration::from_millis(1))),
                        KeyTtl::Missing | KeyTtl::Persistent => None,
                    };
                    // Lost since we took it: the dispatcher may have woken this channel's
                    // watches before this one registered.
                    if !channel.is_current(generation) {
                        signal.fire();
                    }
                    return Ok(KeyWatch {
                        registration,
                        signal,
                        ttl,
                        expires_at,
                    });
                }
                Err(err)
                    if matches!(tracker.target, Target::Cluster(_))
                        && is_redirection(&err)
                        && attempt < ROUTE_ATTEMPTS =>
                {
                    drop(registration);
                    tracing::debug!(
                        key = ?String::from_utf8_lossy(&key),
                        error = %err,
                        "slot moved; waking every watch"
                    );
                    tracker.topology_changed();
                }
                // A read: whatever happened to it, nothing changed on the server.
                Err(err) => return Err(error_map::from_redis(err).uncertain(false)),
            }
        }
    }

    /// How many [`KeyWatch`]es of this backend (and its clones) are pending: alive and not
    /// woken yet. A test hook (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn watch_count(&self) -> usize {
        self.shared.watcher.tracker.registry.len()
    }
}

fn is_redirection(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        RedisKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
    )
}

/// The watch machinery of one backend handle: created with it, connected on first use.
pub(crate) struct Watcher {
    tracker: Arc<Tracker>,
}

impl Watcher {
    pub(crate) fn new(
        target: Target,
        tls: Option<TlsSettings>,
        response_timeout: Duration,
        connection_timeout: Duration,
    ) -> Watcher {
        let (shutdown, _) = tokio::sync::watch::channel(());
        Watcher {
            tracker: Arc::new(Tracker {
                target,
                tls,
                timeouts: Timeouts {
                    response: response_timeout,
                    connection: connection_timeout,
                },
                registry: Registry::default(),
                channels: Mutex::new(HashMap::new()),
                slots: Mutex::new(None),
                next_channel: AtomicU64::new(0),
                shutdown,
            }),
        }
    }
}

/// Owned by the backend only: watches and dispatchers hold it weakly, so dropping the
/// backend drops it, which wakes every watch and stops every dispatcher.
struct Tracker {
    target: Target,
    /// The deployment's TLS settings, for its tracking connections too.
    tls: Option<TlsSettings>,
    timeouts: Timeouts,
    registry: Registry,
    /// Tracking connections by node: one entry for standalone and Sentinel.
    channels: Mutex<HashMap<String, Arc<Channel>>>,
    /// The cluster's slot owners, looked up on first use and after a topology change.
    slots: Mutex<Option<Arc<SlotMap>>>,
    next_channel: AtomicU64,
    /// Never sent on: dispatchers stop when it is dropped with the tracker.
    shutdown: tokio::sync::watch::Sender<()>,
}

impl Tracker {
    /// How long a watch waits for a tracking connection: one attempt, started at once.
    fn ready_wait(&self) -> Duration {
        self.timeouts.attempt() + Duration::from_millis(100)
    }

    /// The tracking connection of a standalone or Sentinel backend.
    fn single_channel(self: &Arc<Self>) -> Result<Arc<Channel>> {
        self.channel(String::new(), AfterLoss::Reconnect, || match &self.target {
            Target::Standalone(url) => Ok((
                "standalone".to_owned(),
                Endpoint::standalone(url, self.tls.as_ref())?,
            )),
            Target::Sentinel {
                sentinels,
                service_name,
                primary,
            } => Ok((
                format!("sentinel primary {service_name}"),
                Endpoint::sentinel(sentinels, service_name, primary.as_ref(), self.tls.as_ref())?,
            )),
            Target::Cluster(_) => Err(Error::invalid_argument(
                "a cluster has a tracking connection per node",
            )),
        })
    }

    /// The tracking connection to cluster node `host:port`.
    fn cluster_channel(self: &Arc<Self>, host: &str, port: u16) -> Result<Arc<Channel>> {
        let name = format!("{host}:{port}");
        self.channel(name.clone(), AfterLoss::Retire, || match &self.target {
            Target::Cluster(seeds) => {
                let seed = seeds.first().ok_or_else(|| {
                    Error::invalid_argument("a cluster needs at least one node address")
                })?;
                Ok((
                    name,
                    Endpoint::cluster_node(seed, host, port, self.tls.as_ref())?,
                ))
            }
            _ => Err(Error::invalid_argument("not a cluster")),
        })
    }

    /// The open (or opening) channel under `node`, or a new one with its dispatcher.
    fn channel(
        self: &Arc<Self>,
        node: String,
        after_loss: AfterLoss,
        endpoint: impl FnOnce() -> Result<(String, Endpoint)>,
    ) -> Result<Arc<Channel>> {
        let mut channels = lock(&self.channels);
        if let Some(channel) = channels.get(&node)
            && !channel.is_closed()
        {
            return Ok(Arc::clone(channel));
        }
        let (name, endpoint) = endpoint()?;
        let id = self.next_channel.fetch_add(1, Ordering::Relaxed) + 1;
        let channel = Arc::new(Channel::new(id, name));
        channels.insert(node, Arc::clone(&channel));
        tokio::spawn(channel::run(
            Arc::clone(&channel),
            endpoint,
            Arc::downgrade(self),
            self.shutdown.subscribe(),
            self.timeouts,
            after_loss,
        ));
        Ok(channel)
    }

    /// Called by a dispatcher whose connection broke: wakes the watches read through it.
    fn connection_lost(&self, channel: &Channel) -> usize {
        if let Target::Cluster(_) = self.target {
            self.forget_slots();
        }
        self.registry.wake_channel(channel.id())
    }

    /// Called by a dispatcher that stopped.
    fn forget_channel(&self, channel: &Channel) {
        let mut channels = lock(&self.channels);
        channels.retain(|_, c| c.id() != channel.id());
    }

    /// A redirection: the slot map is stale, and any watch may sit on a node that no longer
    /// serves its key.
    fn topology_changed(&self) {
        self.forget_slots();
        self.registry.wake_all();
    }

    fn forget_slots(&self) {
        *lock(&self.slots) = None;
    }

    /// The primary that serves `key`'s slot.
    async fn owner(&self, backend: &RedisBackend, key: &[u8]) -> Result<(String, u16)> {
        let cached = lock(&self.slots).clone();
        let map = match cached {
            Some(map) => map,
            None => {
                let reply: Value = backend.query(redis::cmd("CLUSTER").arg("SLOTS")).await?;
                let map = Arc::new(SlotMap::parse(reply)?);
                *lock(&self.slots) = Some(Arc::clone(&map));
                map
            }
        };
        let (host, port) = map.owner(key_slot(key))?;
        Ok((host.to_owned(), port))
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        let woken = self.registry.wake_all();
        tracing::debug!(woken, "key watcher shut down; its watches were woken");
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each guarded value is replaced whole: a panic elsewhere cannot leave it half-written.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
