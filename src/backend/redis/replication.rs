//! Steps confirmed by replicas: the step, then `WAIT` (or `WAITAOF`, asked for) in the same
//! write, on a connection of its own.
//!
//! `WAIT` does not block inside a script, and it covers the writes of the connection it is
//! sent on: so it follows the script on the script's connection. It blocks that connection
//! until the replicas answer or its timeout passes, so the connection is not the one every
//! other step shares: a handle made by [`RedisBackend::with_own_connection`] carries these
//! steps, and whatever else of the same holding (its renewals and releases), alone.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, ToRedisArgs, Value};

use super::script_reply::Outcome;
use super::{RedisBackend, Script, SendError, Shared, error_map};
use crate::error::{Error, ErrorKind, Result};

/// What confirms a step: how many replicas must hold it, within how long, and whether each
/// must also have written it to its AOF (and the primary to its own).
#[derive(Debug, Clone)]
pub(crate) struct Replication {
    replicas: u32,
    within: Duration,
    /// `WAITAOF 1 <replicas> <ms>` rather than `WAIT <replicas> <ms>`.
    aof: bool,
}

/// What the replicas confirmed of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Confirmation {
    /// As many as asked.
    Confirmed,
    /// Fewer: how many, or why none answered (the command refused after the probe).
    Short(String),
}

impl Replication {
    /// The command sent after the step.
    fn command(&self) -> Cmd {
        let ms = u64::try_from(self.within.as_millis()).unwrap_or(u64::MAX);
        let mut cmd = Cmd::new();
        if self.aof {
            cmd.arg("WAITAOF").arg(1).arg(self.replicas).arg(ms);
        } else {
            cmd.arg("WAIT").arg(self.replicas).arg(ms);
        }
        cmd
    }

    /// What the command's reply says.
    fn confirmation(&self, reply: &Value) -> Confirmation {
        let count = |value: &Value| match value {
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        let (local, replicas) = match (self.aof, reply) {
            (_, Value::ServerError(err)) => {
                return Confirmation::Short(format!("the server refused it: {err:?}"));
            }
            (false, reply) => (Some(1), count(reply)),
            (true, Value::Array(counts)) if counts.len() == 2 => {
                (count(&counts[0]), count(&counts[1]))
            }
            (_, other) => return Confirmation::Short(format!("an unexpected reply: {other:?}")),
        };
        match (local, replicas) {
            (Some(1..), Some(n)) if n >= u64::from(self.replicas) => Confirmation::Confirmed,
            (Some(0), _) => Confirmation::Short("the primary's own AOF did not confirm".into()),
            (_, Some(n)) => Confirmation::Short(format!("{n} of {}", self.replicas())),
            _ => Confirmation::Short(format!("an unexpected reply: {reply:?}")),
        }
    }

    /// The command and its settings, for messages.
    pub(crate) fn describe(&self) -> String {
        let command = if self.aof { "WAITAOF" } else { "WAIT" };
        format!("{command} for {} within {:?}", self.replicas(), self.within)
    }

    /// "1 replica", "2 replicas".
    fn replicas(&self) -> String {
        match self.replicas {
            1 => "1 replica".to_owned(),
            n => format!("{n} replicas"),
        }
    }
}

impl RedisBackend {
    /// A handle to the same deployment, with the same settings, on a connection of its own
    /// whose replies may take `longer` more: for steps followed by `WAIT`, which holds its
    /// connection until the replicas answer. Nothing is sent.
    pub(crate) fn with_own_connection(&self, longer: Duration) -> RedisBackend {
        let shared = &self.shared;
        let response_timeout = shared.response_timeout.saturating_add(longer);
        let mut dialer = shared.link.dialer().clone();
        dialer.response_timeout = response_timeout;
        RedisBackend {
            shared: Arc::new(Shared {
                link: super::link::Link::new(dialer.clone()),
                endpoint: shared.endpoint.clone(),
                topology: shared.topology,
                response_timeout,
                connection_timeout: shared.connection_timeout,
                transient_retry: shared.transient_retry,
                prefix: shared.prefix.clone(),
                capabilities: super::Capabilities::default(),
                outage: super::outage::Outage::new(),
                persistence_checked: std::sync::atomic::AtomicBool::new(false),
                evicts_nothing: std::sync::atomic::AtomicBool::new(false),
                watcher: super::watch::Watcher::new(
                    dialer.target.clone(),
                    dialer.tls.clone(),
                    response_timeout,
                    shared.connection_timeout,
                ),
            }),
        }
    }

    /// What confirms a step on this deployment: `replicas` replicas within `within`, by
    /// `WAIT`, or with `aof` by `WAITAOF` (the primary's AOF and the replicas' too). Sends
    /// the command with nothing to wait for first (`WAIT 0 0`, `WAITAOF 1 0 0`), so that a
    /// server that forbids it (a managed service, an ACL), lacks it (`WAITAOF` before 7.2)
    /// or cannot keep it (`WAITAOF` with the AOF off) fails here, once, and not every
    /// acquisition.
    pub(crate) async fn replication(
        &self,
        replicas: u32,
        within: Duration,
        aof: bool,
    ) -> Result<Replication> {
        let mut probe = Cmd::new();
        if aof {
            probe.arg("WAITAOF").arg(1).arg(0).arg(0);
        } else {
            probe.arg("WAIT").arg(0).arg(0);
        }
        let command = if aof { "WAITAOF" } else { "WAIT" };
        self.query::<Value>(&probe).await.map_err(|err| {
            err.context(format_args!(
                "durable fencing sends {command} after each acquisition, and the server \
                 refuses it"
            ))
        })?;
        Ok(Replication {
            replicas,
            within,
            aof,
        })
    }

    /// Runs one of the crate's scripts, then `replication`'s command, written together on
    /// this handle's connection (on a cluster, to the node of the script's keys, which
    /// routes the pair): the script's outcome, and what the replicas confirmed of it. A
    /// script refused on the way (`NOSCRIPT`) is sent again as `EVAL`; a failure that
    /// certainly changed nothing and may pass is sent again as [`send`](Self::send) sends
    /// one.
    pub(crate) async fn script_outcome_replicated<K, A>(
        &self,
        script: &Script,
        keys: &[K],
        args: A,
        replication: &Replication,
    ) -> Result<(Outcome, Confirmation)>
    where
        K: AsRef<[u8]>,
        A: ToRedisArgs,
    {
        let call = self.script_call(keys, &args)?;
        let server = &self.connected().await?.server;
        let (source, sha1) = script.variant(server.legacy_scripting());
        let pair = |command: &str, body: &str| {
            let mut pipe = redis::pipe();
            pipe.add_command(call(command, body))
                .add_command(replication.command())
                .ignore_errors();
            pipe
        };
        let mut sent_source = false;
        let mut retry = super::Retry::new();
        loop {
            // The connection the pair goes on, if there is one now: replaced when its reply
            // says it must be (a demoted primary), as `send` does.
            let connected = self.shared.link.get_now();
            let pipe = if sent_source {
                pair("EVAL", source)
            } else {
                pair("EVALSHA", sha1)
            };
            let replies = self
                .query_pipeline(&pipe)
                .await
                .map_err(SendError::into_error)?;
            let [script_reply, wait_reply] =
                <[Value; 2]>::try_from(replies).map_err(|replies| {
                    Error::new(
                        ErrorKind::UnexpectedReply,
                        format!(
                            "{} answered {} replies, not 2",
                            script.name(),
                            replies.len()
                        ),
                    )
                    .uncertain(true)
                })?;
            // The script's own error reply comes inside the pipeline's answer (its errors
            // ignored, so that WAIT's reply is read too): what `send` would do with it as a
            // command's, done here.
            let script_reply = match script_reply {
                Value::ServerError(err) => {
                    let err = redis::RedisError::from(err);
                    if error_map::is_noscript(&err) && !sent_source {
                        sent_source = true;
                        continue;
                    }
                    if let Some(connected) = &connected {
                        self.shared.link.forget_if_broken(connected, &err);
                    }
                    if error_map::may_pass_without_effect(&err)
                        && Box::pin(retry.again(self, &err)).await
                    {
                        continue;
                    }
                    return Err(error_map::from_redis(err));
                }
                reply => reply,
            };
            let outcome = script
                .decode(script_reply, keys)?
                .into_outcome(script.name())?;
            return Ok((outcome, replication.confirmation(&wait_reply)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_confirms_as_many_replicas_as_asked_or_says_how_many() {
        let wait = Replication {
            replicas: 2,
            within: Duration::from_millis(100),
            aof: false,
        };
        assert_eq!(wait.confirmation(&Value::Int(2)), Confirmation::Confirmed);
        assert_eq!(wait.confirmation(&Value::Int(3)), Confirmation::Confirmed);
        assert_eq!(
            wait.confirmation(&Value::Int(1)),
            Confirmation::Short("1 of 2 replicas".into())
        );
        let aof = Replication { aof: true, ..wait };
        assert_eq!(
            aof.confirmation(&Value::Array(vec![Value::Int(1), Value::Int(2)])),
            Confirmation::Confirmed
        );
        assert_eq!(
            aof.confirmation(&Value::Array(vec![Value::Int(0), Value::Int(2)])),
            Confirmation::Short("the primary's own AOF did not confirm".into())
        );
        assert!(matches!(
            aof.confirmation(&Value::Int(2)),
            Confirmation::Short(_)
        ));
    }
}
