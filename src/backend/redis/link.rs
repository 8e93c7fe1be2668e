//! The connection to the deployment, made at start-up when it answers and on first use when
//! it does not: a service whose failure policy covers an unreachable Redis still boots.

use tokio::sync::OnceCell;

use super::builder::RedisBackendBuilder;
use super::connection::Connection;
use super::server_clock::ServerClock;
use super::server_version::ServerVersion;
use crate::error::Result;

/// What connecting learned, kept for the handle's life: the connection (which reconnects by
/// itself from then on), the server's version and its clock.
pub(super) struct Connected {
    pub(super) connection: Connection,
    pub(super) server: ServerVersion,
    pub(super) clock: ServerClock,
}

/// The connection, once made.
pub(super) struct Link {
    builder: RedisBackendBuilder,
    connected: OnceCell<Connected>,
}

impl Link {
    pub(super) fn new(builder: RedisBackendBuilder) -> Self {
        Link {
            builder,
            connected: OnceCell::new(),
        }
    }

    /// The connection, made now if it was not yet. One attempt at a time: concurrent callers
    /// wait for it, and a failed attempt leaves the next caller to try again.
    ///
    /// Cancel safe: a dropped attempt leaves nothing behind, and the next caller tries again.
    pub(super) async fn get(&self) -> Result<&Connected> {
        if let Some(connected) = self.connected.get() {
            return Ok(connected);
        }
        self.connected.get_or_try_init(|| self.builder.open()).await
    }

    /// The connection if it was made.
    pub(super) fn get_now(&self) -> Option<&Connected> {
        self.connected.get()
    }
}
