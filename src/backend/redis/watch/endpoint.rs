//! Where a tracking connection goes, and how one is opened.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::sentinel::SentinelClient;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, PushInfo,
    RedisResult, Value,
};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use crate::backend::redis::target::PrimaryCredentials;
use crate::backend::redis::tls::TlsSettings;
use crate::error::{Error, ErrorKind, Result};

/// The builder's connection timeouts, reused for tracking connections.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeouts {
    pub(super) response: Duration,
    pub(super) connection: Duration,
}

impl Timeouts {
    /// The bound on one attempt to open a tracking connection: a Sentinel lookup (connect and
    /// ask), then connect and enable tracking.
    pub(super) fn attempt(self) -> Duration {
        (self.connection + self.response) * 2
    }
}

/// How to reach the server of one tracking connection.
pub(super) enum Endpoint {
    /// A fixed address: a standalone server or one cluster node, with the deployment's
    /// TLS settings.
    Direct(Box<ConnectionInfo>, Option<TlsSettings>),
    /// Whichever primary the sentinels name when the connection is opened.
    Sentinel(Box<SentinelClient>),
}

/// An open tracking connection and the push messages it receives.
pub(super) struct Opened {
    pub(super) connection: MultiplexedConnection,
    pub(super) pushes: UnboundedReceiver<PushInfo>,
}

impl Endpoint {
    /// A standalone server's address, from the backend's URL, over RESP3.
    pub(super) fn standalone(url: &str, tls: Option<&TlsSettings>) -> Result<Endpoint> {
        Ok(Endpoint::Direct(Box::new(resp3(parse(url)?)), tls.cloned()))
    }

    /// The primary named `service_name` by `sentinels`, with its credentials and `tls`'s
    /// certificates when given, over RESP3.
    pub(super) fn sentinel(
        sentinels: &[String],
        service_name: &str,
        primary: Option<&PrimaryCredentials>,
        tls: Option<&TlsSettings>,
    ) -> Result<Endpoint> {
        let client = crate::backend::redis::sentinel::client(
            sentinels,
            service_name,
            primary,
            tls,
            redis::ProtocolVersion::RESP3,
        )
        .map_err(crate::backend::redis::error_map::invalid_config)?;
        Ok(Endpoint::Sentinel(Box::new(client)))
    }

    /// One cluster node, with the credentials and TLS settings of the first seed URL (as the
    /// cluster client does), over RESP3.
    pub(super) fn cluster_node(
        seed: &str,
        host: &str,
        port: u16,
        tls: Option<&TlsSettings>,
    ) -> Result<Endpoint> {
        let seed = parse(seed)?;
        let addr = match seed.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        Ok(Endpoint::Direct(
            Box::new(resp3(seed.set_addr(addr))),
            tls.cloned(),
        ))
    }

    /// Opens a RESP3 connection whose pushes go to the returned receiver, and turns tracking
    /// on (default mode: the server remembers the keys this connection reads).
    ///
    /// The push channel is unbounded because redis-rs must not block on it, yet it stays
    /// small: in default mode the server sends at most one invalidation per tracked read,
    /// and this connection reads only for watches.
    pub(super) async fn open(&mut self, timeouts: Timeouts) -> RedisResult<Opened> {
        let client = match self {
            Endpoint::Direct(info, tls) => {
                crate::backend::redis::tls::client((**info).clone(), tls.as_ref())?
            }
            Endpoint::Sentinel(sentinel) => sentinel.async_get_client().await?,
        };
        let (sender, pushes) = unbounded_channel();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeouts.connection))
            .set_response_timeout(Some(timeouts.response))
            .set_push_sender(sender);
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .exec_async(&mut connection)
            .await?;
        Ok(Opened { connection, pushes })
    }
}

fn parse(url: &str) -> Result<ConnectionInfo> {
    url.into_connection_info()
        .map_err(crate::backend::redis::error_map::invalid_config)
}

fn resp3(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    info.set_redis_settings(settings)
}

/// Which node serves each slot, from `CLUSTER SLOTS`.
#[derive(Debug)]
pub(super) struct SlotMap {
    ranges: Vec<(u16, u16, String, u16)>,
}

impl SlotMap {
    /// Parses a `CLUSTER SLOTS` reply: `[[first, last, [host, port, ...], replica...], ...]`.
    pub(super) fn parse(reply: Value) -> Result<SlotMap> {
        let bad = |what: &str| Error::unexpected_reply(format!("CLUSTER SLOTS: {what}"));
        let Value::Array(entries) = reply else {
            return Err(bad("not an array"));
        };
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(fields) = entry else {
                return Err(bad("a range is not an array"));
            };
            let (Some(first), Some(last), Some(Value::Array(primary))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return Err(bad("a range lacks its bounds or its primary"));
            };
            let slot = |value: &Value| match value {
                Value::Int(n) => u16::try_from(*n).map_err(|_| bad("slot out of range")),
                _ => Err(bad("a slot is not an integer")),
            };
            let host = match primary.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => return Err(bad("a primary has no host")),
            };
            let port = match primary.get(1) {
                Some(Value::Int(port)) => {
                    u16::try_from(*port).map_err(|_| bad("port out of range"))?
                }
                _ => return Err(bad("a primary has no port")),
            };
            ranges.push((slot(first)?, slot(last)?, host, port));
        }
        Ok(SlotMap { ranges })
    }

    /// The primary that serves `slot`: its announced host and port.
    pub(super) fn owner(&self, slot: u16) -> Result<(&str, u16)> {
        let (.., host, port) = self
            .ranges
            .iter()
            .find(|(first, last, ..)| (*first..=*last).contains(&slot))
            .ok_or_else(|| {
                // A slot without an owner is a resharding or failover in progress.
                Error::new(
                    ErrorKind::Transient,
                    format!("no cluster node serves slot {slot}"),
                )
            })?;
        // An empty or `?` endpoint means the node does not announce an address clients can use.
        if host.is_empty() || host == "?" {
            return Err(Error::new(
                ErrorKind::Server,
                format!("the cluster announces no address for the node that serves slot {slot}"),
            ));
        }
        Ok((host, *port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn finds_the_owner_of_a_slot() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                bulk(host),
                Value::Int(port),
                bulk("id"),
                Value::Array(vec![]),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("10.0.0.2", 7001),
                node("10.0.0.3", 7002),
            ]),
        ]);
        let map = SlotMap::parse(reply).expect("parses");
        assert_eq!(map.owner(0).expect("served"), ("10.0.0.1", 7000));
        assert_eq!(map.owner(5461).expect("served"), ("10.0.0.2", 7001));
        assert_eq!(map.owner(16383).expect("served"), ("10.0.0.2", 7001));
    }

    #[test]
    fn rejects_unusable_replies() {
        assert!(SlotMap::parse(Value::Nil).is_err());
        let unannounced = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16383),
            Value::Array(vec![bulk("?"), Value::Int(7000)]),
        ])]);
        let map = SlotMap::parse(unannounced).expect("parses");
        assert!(map.owner(1).is_err());
        let partial = SlotMap::parse(Value::Array(vec![])).expect("parses");
        assert_eq!(
            partial.owner(1).unwrap_err().kind(),
            ErrorKind::Transient,
            "a slot without an owner is a resharding in progress"
        );
    }
}
