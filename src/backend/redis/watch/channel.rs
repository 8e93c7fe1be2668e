//! One tracking connection and the dispatcher task that owns it.
//!
//! The dispatcher opens the connection, turns tracking on, and only then publishes it as
//! [`Link::Ready`]: a watch never reads through a connection whose tracking is off. It then
//! turns invalidation pushes into wake-ups. When the connection is lost it stops publishing
//! it, wakes every watch read through it (the server forgot what that connection tracked), and
//! either opens a new one with a bounded backoff or, for a cluster node, retires so that the
//! next watch looks the slot's owner up again.

use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, RedisError, Value};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::Tracker;
use super::endpoint::{Endpoint, Opened, Timeouts};
use crate::backend::redis::error_map;
use crate::backoff::Backoff;
use crate::error::{Error, ErrorKind, Result};

/// The shortest wait between two connection attempts, also after a watch asked for one.
const MIN_RETRY_DELAY: Duration = Duration::from_millis(50);
/// The longest wait between two connection attempts.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);
/// How long a connection must have lived for the backoff to start over.
const HEALTHY_AFTER: Duration = Duration::from_secs(5);
/// How long a tracking connection may go without a word, while watches are pending, before
/// it is asked whether it still answers: one that fell silent (a host gone without a FIN or
/// a RST, a VIP moved) delivers no invalidation, and its waiters would sleep until their
/// keys' expiries while the kernel takes minutes to give up on the socket.
const QUIET_BEFORE_PING: Duration = Duration::from_secs(1);

/// What a dispatcher does once its connection is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AfterLoss {
    /// Open a new one (standalone, Sentinel).
    Reconnect,
    /// Close, so that the next watch looks up which node serves its key (cluster).
    Retire,
}

/// The state of a tracking connection, as its dispatcher publishes it.
#[derive(Clone)]
pub(super) enum Link {
    /// No usable connection. `started` counts the connection attempts begun so far;
    /// `last_failed` is the number of the latest attempt that failed (0 for none).
    Connecting {
        started: u64,
        last_failed: u64,
        last_error: Option<RedisError>,
    },
    /// Tracking is on; `generation` numbers the connections of this channel.
    Ready {
        generation: u64,
        connection: MultiplexedConnection,
    },
    /// The dispatcher has stopped; the channel will not connect again.
    Closed { last_error: Option<RedisError> },
}

/// One tracking connection, shared by every watch whose key it serves.
pub(super) struct Channel {
    id: u64,
    name: String,
    link: watch::Sender<Link>,
    /// Asks a dispatcher waiting out its backoff to try again now.
    retry_now: Notify,
}

impl Channel {
    pub(super) fn new(id: u64, name: String) -> Channel {
        let (link, _) = watch::channel(Link::Connecting {
            started: 0,
            last_failed: 0,
            last_error: None,
        });
        Channel {
            id,
            name,
            link,
            retry_now: Notify::new(),
        }
    }

    pub(super) fn id(&self) -> u64 {
        self.id
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn is_closed(&self) -> bool {
        matches!(*self.link.borrow(), Link::Closed { .. })
    }

    /// Whether connection `generation` is still the published one: no loss since.
    pub(super) fn is_current(&self, generation: u64) -> bool {
        matches!(*self.link.borrow(), Link::Ready { generation: g, .. } if g == generation)
    }

    /// The connection with tracking on. When there is none, asks the dispatcher to try now
    /// and waits for that attempt (at most `wait`); fails with its error.
    pub(super) async fn ready(&self, wait: Duration) -> Result<(u64, MultiplexedConnection)> {
        let mut link = self.link.subscribe();
        let seen = match &*link.borrow_and_update() {
            Link::Ready {
                generation,
                connection,
            } => return Ok((*generation, connection.clone())),
            Link::Closed { last_error } => return Err(self.unavailable(last_error.as_ref())),
            Link::Connecting { started, .. } => *started,
        };
        self.retry_now.notify_one();
        // Done when connected, closed, or an attempt begun after we looked has failed.
        let outcome = tokio::time::timeout(
            wait,
            link.wait_for(|link| match link {
                Link::Connecting { last_failed, .. } => *last_failed > seen,
                Link::Ready { .. } | Link::Closed { .. } => true,
            }),
        )
        .await;
        let Ok(Ok(link)) = outcome else {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!("no tracking connection to {} within {wait:?}", self.name),
            ));
        };
        match &*link {
            Link::Ready {
                generation,
                connection,
            } => Ok((*generation, connection.clone())),
            Link::Connecting { last_error, .. } | Link::Closed { last_error } => {
                Err(self.unavailable(last_error.as_ref()))
            }
        }
    }

    fn unavailable(&self, cause: Option<&RedisError>) -> Error {
        let Some(cause) = cause else {
            return Error::new(
                ErrorKind::Io,
                format!("the tracking connection to {} is closed", self.name),
            );
        };
        if error_map::is_unknown_command(cause) {
            return Error::unsupported(super::CLIENT_TRACKING).with_source(cause.clone());
        }
        let mapped = error_map::from_redis(cause.clone());
        // Opening a connection changes nothing on the server: never an uncertain outcome.
        Error::new(
            mapped.kind(),
            format!("no tracking connection to {}: {mapped}", self.name),
        )
        .with_source(mapped)
    }
}

/// Why [`serve`] returned.
enum Ended {
    Lost,
    Shutdown,
}

/// The dispatcher of `channel`: runs until the tracker is dropped, or, with
/// [`AfterLoss::Retire`], until its first connection is lost or fails to open.
pub(super) async fn run(
    channel: Arc<Channel>,
    mut endpoint: Endpoint,
    tracker: Weak<Tracker>,
    mut shutdown: watch::Receiver<()>,
    timeouts: Timeouts,
    after_loss: AfterLoss,
) {
    let mut started = 0u64;
    let mut last_failed = 0u64;
    let mut generation = 0u64;
    let mut last_error: Option<RedisError> = None;
    let mut backoff = backoff();
    // When the next attempt may begin: at once for the first one.
    let mut not_before: Option<(Instant, Instant)> = None;
    loop {
        if let Some((retry_at, earliest)) = not_before.take() {
            let retry_now = async {
                channel.retry_now.notified().await;
                tokio::time::sleep_until(earliest).await;
            };
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                () = tokio::time::sleep_until(retry_at) => {}
                () = retry_now => {}
            }
        }
        started += 1;
        channel.link.send_replace(Link::Connecting {
            started,
            last_failed,
            last_error: last_error.clone(),
        });
        let attempt_began = Instant::now();
        let attempt = tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            attempt = tokio::time::timeout(timeouts.attempt(), endpoint.open(timeouts)) => attempt,
        };
        let attempt = attempt.unwrap_or_else(|_| {
            Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "opening the connection took longer than {:?}",
                    timeouts.attempt()
                ),
            )))
        });
        match attempt {
            Ok(Opened {
                connection,
                mut pushes,
            }) => {
                generation += 1;
                last_error = None;
                let mut pinged = connection.clone();
                channel.link.send_replace(Link::Ready {
                    generation,
                    connection,
                });
                tracing::debug!(
                    channel = channel.name(),
                    generation,
                    "client tracking enabled"
                );
                let connected_at = Instant::now();
                let ended = serve(
                    &channel,
                    &tracker,
                    &mut pushes,
                    &mut shutdown,
                    (&mut pinged, timeouts.response),
                )
                .await;
                // Unpublish before waking: a watch that registers after the wake sees that
                // its connection is no longer current.
                channel.link.send_replace(Link::Connecting {
                    started,
                    last_failed,
                    last_error: None,
                });
                let woken = tracker
                    .upgrade()
                    .map_or(0, |tracker| tracker.connection_lost(&channel));
                if let Ended::Shutdown = ended {
                    break;
                }
                tracing::debug!(
                    channel = channel.name(),
                    generation,
                    woken,
                    "tracking connection lost; its watches were woken"
                );
                if after_loss == AfterLoss::Retire {
                    break;
                }
                if connected_at.elapsed() >= HEALTHY_AFTER {
                    backoff.reset();
                }
                let now = Instant::now();
                not_before = Some((now + backoff.next_pause(), now + MIN_RETRY_DELAY));
            }
            Err(err) => {
                last_failed = started;
                tracing::debug!(
                    channel = channel.name(),
                    error = %err,
                    attempt = started,
                    "could not enable client tracking"
                );
                channel.link.send_replace(Link::Connecting {
                    started,
                    last_failed,
                    last_error: Some(err.clone()),
                });
                last_error = Some(err);
                if after_loss == AfterLoss::Retire {
                    break;
                }
                not_before = Some((
                    attempt_began + backoff.next_pause(),
                    attempt_began + MIN_RETRY_DELAY,
                ));
            }
        }
    }
    channel.link.send_replace(Link::Closed { last_error });
    if let Some(tracker) = tracker.upgrade() {
        tracker.forget_channel(&channel);
    }
}

/// Dispatches the pushes of one connection until it is lost (broken, or silent: no answer
/// to a `PING` within the response timeout after [`QUIET_BEFORE_PING`] without a word) or
/// the tracker is dropped.
async fn serve(
    channel: &Channel,
    tracker: &Weak<Tracker>,
    pushes: &mut UnboundedReceiver<PushInfo>,
    shutdown: &mut watch::Receiver<()>,
    (connection, response_timeout): (&mut MultiplexedConnection, Duration),
) -> Ended {
    let mut quiet_until = Instant::now() + QUIET_BEFORE_PING;
    loop {
        let push = tokio::select! {
            biased;
            _ = shutdown.changed() => return Ended::Shutdown,
            push = pushes.recv() => push,
            () = tokio::time::sleep_until(quiet_until) => {
                quiet_until = Instant::now() + QUIET_BEFORE_PING;
                // Asked only while someone waits on what it says.
                let Some(tracker) = tracker.upgrade() else {
                    return Ended::Shutdown;
                };
                if tracker.registry.is_empty() {
                    continue;
                }
                drop(tracker);
                let answered = tokio::select! {
                    biased;
                    _ = shutdown.changed() => return Ended::Shutdown,
                    answered = answers(connection, response_timeout) => answered,
                };
                if !answered {
                    tracing::debug!(
                        channel = channel.name(),
                        "tracking connection silent: no answer to PING within {response_timeout:?}"
                    );
                    return Ended::Lost;
                }
                continue;
            }
        };
        quiet_until = Instant::now() + QUIET_BEFORE_PING;
        // redis-rs sends `Disconnection` when the connection breaks, then drops the sender.
        let Some(PushInfo { kind, data }) = push else {
            return Ended::Lost;
        };
        match kind {
            PushKind::Invalidate => {
                let Some(tracker) = tracker.upgrade() else {
                    return Ended::Shutdown;
                };
                invalidate(channel, &tracker, data);
            }
            PushKind::Disconnection => return Ended::Lost,
            _ => {}
        }
    }
}

/// Whether `connection` answers a `PING` within `timeout`; an error reply is an answer.
async fn answers(connection: &mut MultiplexedConnection, timeout: Duration) -> bool {
    let ping = redis::cmd("PING");
    match tokio::time::timeout(timeout, ping.query_async::<Value>(connection)).await {
        Ok(Ok(_)) => true,
        Ok(Err(err)) => !(err.is_io_error() || err.is_connection_dropped() || err.is_timeout()),
        Err(_) => false,
    }
}

/// Wakes the watches an `invalidate` push names: `[[key, ...]]`, or `[nil]` when the server
/// flushed everything this connection tracked (FLUSHALL, FLUSHDB).
fn invalidate(channel: &Channel, tracker: &Tracker, data: Vec<Value>) {
    let mut keys = 0usize;
    let mut woken = 0usize;
    let mut everything = data.is_empty();
    for item in data {
        match item {
            Value::Array(items) => {
                for item in items {
                    match item {
                        Value::BulkString(key) => {
                            keys += 1;
                            woken += tracker.registry.wake_key(&key);
                        }
                        _ => everything = true,
                    }
                }
            }
            Value::BulkString(key) => {
                keys += 1;
                woken += tracker.registry.wake_key(&key);
            }
            // Nil, or a shape this code does not know: waking too much is safe.
            _ => everything = true,
        }
    }
    if everything {
        woken += tracker.registry.wake_channel(channel.id());
    }
    tracing::debug!(
        channel = channel.name(),
        keys,
        everything,
        woken,
        "invalidation"
    );
}

/// Delays between connection attempts: from [`MIN_RETRY_DELAY`] (the first drawn between it
/// and twice it) to [`MAX_RETRY_DELAY`].
fn backoff() -> Backoff {
    Backoff::new(2 * MIN_RETRY_DELAY, MAX_RETRY_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_bound() {
        let mut backoff = backoff();
        let delays: Vec<Duration> = (0..12).map(|_| backoff.next_pause()).collect();
        assert!(
            delays
                .iter()
                .all(|d| (MIN_RETRY_DELAY..=MAX_RETRY_DELAY).contains(d))
        );
        assert!(delays[11] >= MAX_RETRY_DELAY / 2);
    }
}
