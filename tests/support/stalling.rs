//! A private server that stalls every client with `CLIENT PAUSE`, and a handle whose response
//! timeout is shorter than the pauses: a reply that cannot come in time makes a step fail
//! with an uncertain outcome, and the stalled request runs once the pause ends. For the
//! failure rules of a held primitive.

use std::time::Duration;

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;

use super::{Server, ServerKind};

/// The handle's response timeout: at most half of every pause the tests ask for (300 ms and
/// more), and long enough that the steps before and after a pause, which must succeed on
/// this handle, ride out a scheduler's hiccup on a loaded machine.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(150);

/// The server and a handle to it with [`RESPONSE_TIMEOUT`], keys unprefixed.
pub struct Stalling {
    pub server: Server,
    pub coordination: Coordination,
}

impl Stalling {
    /// Starts a private Redis 7 server and connects the impatient handle. Warm the
    /// primitive's scripts before pausing: a `NOSCRIPT` answer during a pause would time out
    /// before the script itself is sent.
    pub async fn start() -> Stalling {
        Stalling::start_on(ServerKind::Redis7).await
    }

    /// [`start`](Self::start), with a server of `kind`.
    pub async fn start_on(kind: ServerKind) -> Stalling {
        let server = Server::start(kind, &[]);
        let coordination = Stalling::handle(&server, RESPONSE_TIMEOUT).await;
        Stalling {
            server,
            coordination,
        }
    }

    /// Another handle to the server, whose response timeout outlasts the pauses.
    pub async fn patient(&self) -> Coordination {
        Stalling::handle(&self.server, Duration::from_secs(5)).await
    }

    /// How many times the server ran `command` (lower case), scripts' own calls included.
    /// Waits for a pause to end.
    pub fn calls(&self, command: &str) -> u64 {
        super::target::command_calls(&self.server, command)
    }

    async fn handle(server: &Server, response_timeout: Duration) -> Coordination {
        RedisBackend::standalone(server.unix_url())
            .key_prefix("")
            .response_timeout(response_timeout)
            .connect()
            .await
            .expect("connect")
            .into()
    }
}
