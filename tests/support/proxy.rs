//! A fault-injecting TCP proxy between the crate and a server, controlled from a test while it
//! runs.
//!
//! The proxy listens on a free loopback port and forwards each accepted connection to the
//! server's address. Faults apply per direction ([`Direction::ToServer`] carries commands,
//! [`Direction::ToClient`] carries replies) and take effect at once, on open connections too:
//!
//! | fault | what the client sees |
//! |---|---|
//! | [`latency`](Proxy::latency) | every byte arrives that much later, in order |
//! | [`stall`](Proxy::stall) | nothing arrives; the bytes are **held** and delivered, in order, by [`pass`](Proxy::pass) (the "delayed command") |
//! | [`blackhole`](Proxy::blackhole) | connections are accepted and never answered; what is sent meanwhile is dropped |
//! | [`cut`](Proxy::cut) | every open connection is reset (RST); new ones are accepted |
//! | [`sever`](Proxy::sever) | the client side of every open connection is reset, while what the client sent and is still held (by a stall) goes on to the server later: a command delayed in the network, arriving after its client reconnected |
//! | [`refuse`](Proxy::refuse) | the port is closed: connecting fails with "connection refused" |
//!
//! Bytes the client sent before it closed its side are still delivered to the server when a
//! stall ends, as a delayed packet would be. The proxy runs on a thread and runtime of its
//! own, so a test's paused clock or busy runtime does not change it; dropping the [`Proxy`]
//! closes its port and every connection, and ends the thread.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Which way bytes flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the server: commands.
    ToServer,
    /// From the server to the client: replies.
    ToClient,
}

impl Direction {
    fn index(self) -> usize {
        match self {
            Direction::ToServer => 0,
            Direction::ToClient => 1,
        }
    }
}

/// The faults in force; every connection watches them.
#[derive(Clone, Debug, Default)]
struct Faults {
    latency: [Duration; 2],
    stalled: [bool; 2],
    blackhole: bool,
    refuse: bool,
    /// Bumped by every cut: connections opened before it reset themselves.
    cuts: u64,
    /// Bumped by every sever: connections opened before it reset their client side.
    severs: u64,
    /// Set to `severs` by every `deliver_held`: the connections severed by the severs up to
    /// it deliver what they hold (one severed later holds on until the next delivery).
    delivered_severs: u64,
    /// Bumped by every `silence_open`: connections opened before it drop every byte.
    silences: u64,
    /// Where new connections go instead of the upstream the proxy started with.
    upstream: Option<SocketAddr>,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    open: AtomicU64,
    /// The connections open now, by their number: a cut waits until those it found are gone.
    open_ids: std::sync::Mutex<std::collections::HashSet<u64>>,
    next_id: AtomicU64,
    /// Whether the port is closed (`refuse`): a refusal waits until it is.
    closed: std::sync::atomic::AtomicBool,
    /// Bytes read from their source (held or not).
    received: [AtomicU64; 2],
    /// Bytes written to their destination.
    bytes: [AtomicU64; 2],
    /// The bytes delivered to the server since the last `take_delivered`.
    delivered: std::sync::Mutex<Vec<u8>>,
}

/// A running proxy; see the [module docs](self).
pub struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    faults: watch::Sender<Faults>,
    counters: Arc<Counters>,
    thread: Option<std::thread::JoinHandle<()>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Proxy {
    /// Starts a proxy to `upstream` (a loopback address) on a free loopback port, passing
    /// everything through.
    pub fn start(upstream: SocketAddr) -> Proxy {
        assert!(
            upstream.ip().is_loopback(),
            "the fault proxy forwards to loopback addresses only, not {upstream}"
        );
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a proxy port");
        let addr = std_listener.local_addr().expect("proxy address");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let (faults, watcher) = watch::channel(Faults::default());
        let counters = Arc::new(Counters::default());
        let (shutdown, stop) = tokio::sync::oneshot::channel();
        let thread_counters = counters.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("proxy runtime");
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(std_listener).expect("proxy listener");
                    tokio::select! {
                        () = serve(listener, addr, upstream, watcher, thread_counters) => {}
                        _ = stop => {}
                    }
                });
                // Dropping the runtime cancels every connection task: sockets close.
            })
            .expect("start the proxy thread");
        Proxy {
            addr,
            upstream,
            faults,
            counters,
            thread: Some(thread),
            shutdown: Some(shutdown),
        }
    }

    /// Starts a proxy to `127.0.0.1:port`.
    pub fn to_port(port: u16) -> Proxy {
        Proxy::start(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// The proxy's own address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address it forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// `redis://127.0.0.1:<proxy port>`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Clears every fault: no latency, held bytes delivered, answers again, the port open.
    pub fn pass(&self) {
        self.faults.send_modify(|f| {
            let (cuts, severs, delivered_severs, silences, upstream) =
                (f.cuts, f.severs, f.delivered_severs, f.silences, f.upstream);
            *f = Faults {
                cuts,
                severs,
                delivered_severs,
                silences,
                upstream,
                ..Faults::default()
            };
        });
    }

    /// Delays every byte flowing `direction` by `delay` (zero removes the latency).
    pub fn latency(&self, direction: Direction, delay: Duration) {
        self.faults
            .send_modify(|f| f.latency[direction.index()] = delay);
    }

    /// Holds every byte in both directions until [`pass`](Self::pass).
    pub fn stall(&self) {
        self.faults.send_modify(|f| f.stalled = [true, true]);
    }

    /// Holds the bytes flowing `direction` until [`pass`](Self::pass).
    pub fn stall_direction(&self, direction: Direction) {
        self.faults
            .send_modify(|f| f.stalled[direction.index()] = true);
    }

    /// Accepts connections and never answers; bytes sent meanwhile are dropped.
    pub fn blackhole(&self) {
        self.faults.send_modify(|f| f.blackhole = true);
    }

    /// The connections open now fall silent for good, both ways, without a FIN or a RST (a
    /// host gone, a partition, a VIP moved): they drop every byte. New connections are
    /// forwarded as before.
    pub fn silence_open(&self) {
        self.faults.send_modify(|f| f.silences += 1);
    }

    /// Resets every open connection; later connections are accepted as usual.
    pub fn cut(&self) {
        let open: Vec<u64> = self.open_ids().into_iter().collect();
        self.faults.send_modify(|f| f.cuts += 1);
        // Returns once every connection open at the call was reset.
        self.until_applied("its connections reset", || {
            let now = self.open_ids();
            open.iter().all(|id| !now.contains(id))
        });
    }

    fn open_ids(&self) -> std::collections::HashSet<u64> {
        self.counters.open_ids.lock().expect("not poisoned").clone()
    }

    /// Resets the client side of every open connection, while the bytes it sent that a stall
    /// still holds stay held, [`pass`](Self::pass) or not, until
    /// [`deliver_held`](Self::deliver_held); later connections are accepted as usual. With
    /// [`stall`](Self::stall) first, this is a command delayed in the network that arrives
    /// after its client gave up, reconnected and went on.
    pub fn sever(&self) {
        self.faults.send_modify(|f| f.severs += 1);
    }

    /// Delivers to the server what severed connections still hold, then closes them.
    pub fn deliver_held(&self) {
        self.faults.send_modify(|f| f.delivered_severs = f.severs);
    }

    /// Sends new connections to the server on loopback `port` from now on (a failover to
    /// another server behind the same address); open ones go on.
    pub fn retarget(&self, port: u16) {
        let upstream = SocketAddr::from(([127, 0, 0, 1], port));
        self.faults.send_modify(|f| f.upstream = Some(upstream));
    }

    /// Closes the port, so that new connections are refused; open ones go on. Returns once
    /// the port is closed: a connection made after the call is refused.
    pub fn refuse(&self) {
        self.faults.send_modify(|f| f.refuse = true);
        self.until_applied("the port closed", || {
            self.counters.closed.load(Ordering::SeqCst)
        });
    }

    /// Waits (blocking: the proxy has a thread of its own) until `applied`, bounded.
    fn until_applied(&self, what: &str, applied: impl Fn() -> bool) {
        // The wall clock: a test may pause tokio's.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !applied() {
            assert!(
                std::time::Instant::now() < deadline,
                "the proxy never had {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Connections accepted so far.
    pub fn connections_accepted(&self) -> u64 {
        self.counters.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn connections_open(&self) -> u64 {
        self.counters.open.load(Ordering::SeqCst)
    }

    /// Bytes delivered so far in `direction`.
    pub fn bytes(&self, direction: Direction) -> u64 {
        self.counters.bytes[direction.index()].load(Ordering::SeqCst)
    }

    /// The bytes delivered to the server since the last call: the commands, as sent, to send
    /// again with [`replay_last_script`].
    pub fn take_delivered(&self) -> Vec<u8> {
        std::mem::take(&mut *self.counters.delivered.lock().expect("not poisoned"))
    }

    /// Bytes the proxy has taken in so far in `direction`, delivered, held or dropped.
    pub fn bytes_received(&self, direction: Direction) -> u64 {
        self.counters.received[direction.index()].load(Ordering::SeqCst)
    }

    /// Bytes the proxy has taken in from clients so far: a mark for [`until_sent`](Self::until_sent).
    pub fn sent(&self) -> u64 {
        self.bytes_received(Direction::ToServer)
    }

    /// Waits (bounded) until a client has sent the proxy more than `mark` bytes: a step
    /// reached the proxy (held there, if it stalls), `what` says which.
    pub async fn until_sent(&self, mark: u64, what: &str) {
        super::eventually(what, async || self.sent() > mark).await;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("faults", &*self.faults.borrow())
            .finish_non_exhaustive()
    }
}

/// Accepts connections while the port is open; closes and reopens it as `refuse` says.
async fn serve(
    listener: TcpListener,
    addr: SocketAddr,
    upstream: SocketAddr,
    mut faults: watch::Receiver<Faults>,
    counters: Arc<Counters>,
) {
    let mut listener = Some(listener);
    loop {
        let refuse = faults.borrow_and_update().refuse;
        if refuse {
            listener = None;
            counters.closed.store(true, Ordering::SeqCst);
        } else if listener.is_none() {
            // The port was ours a moment ago; SO_REUSEADDR lets it be bound again at once.
            match TcpListener::bind(addr).await {
                Ok(l) => {
                    listener = Some(l);
                    counters.closed.store(false, Ordering::SeqCst);
                }
                Err(e) => panic!("the fault proxy cannot reopen {addr}: {e}"),
            }
        }
        match &listener {
            None => {
                if faults.changed().await.is_err() {
                    return;
                }
            }
            Some(open) => {
                tokio::select! {
                    changed = faults.changed() => if changed.is_err() { return },
                    accepted = open.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        counters.accepted.fetch_add(1, Ordering::SeqCst);
                        tokio::spawn(connection(client, upstream, faults.clone(), counters.clone()));
                    }
                }
            }
        }
    }
}

/// One proxied connection: two pumps, until both sides closed or a cut resets them.
async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    mut faults: watch::Receiver<Faults>,
    counters: Arc<Counters>,
) {
    let (cuts, severs, upstream) = {
        let f = faults.borrow_and_update();
        (f.cuts, f.severs, f.upstream.unwrap_or(upstream))
    };
    let Ok(server) = TcpStream::connect(upstream).await else {
        // Nothing to forward to: the client sees a reset, as from a dead server.
        set_reset_on_close(client.as_raw_fd());
        return;
    };
    counters.open.fetch_add(1, Ordering::SeqCst);
    let id = counters.next_id.fetch_add(1, Ordering::SeqCst);
    counters.open_ids.lock().expect("not poisoned").insert(id);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // The sockets stay open while the pumps hold their halves, so the fds stay valid.
    let fds = [client.as_raw_fd(), server.as_raw_fd()];
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let mut pumps = tokio::task::JoinSet::new();
    pumps.spawn(pump(
        client_read,
        server_write,
        Direction::ToServer,
        faults.clone(),
        counters.clone(),
    ));
    let to_client = pumps.spawn(pump(
        server_read,
        client_write,
        Direction::ToClient,
        faults.clone(),
        counters.clone(),
    ));
    let mut severed = false;
    loop {
        tokio::select! {
            changed = faults.changed() => {
                let (cut, sever) = {
                    let f = faults.borrow_and_update();
                    (f.cuts != cuts, f.severs != severs)
                };
                if changed.is_err() || cut {
                    for fd in fds {
                        set_reset_on_close(fd);
                    }
                    // Aborting drops the halves: both sockets close with a reset.
                    pumps.shutdown().await;
                    break;
                }
                if sever && !severed {
                    severed = true;
                    // The client's write half goes with the reply pump; its read half with
                    // the command pump's reader, which stops on the same signal.
                    set_reset_on_close(fds[0]);
                    to_client.abort();
                }
            }
            done = pumps.join_next() => if done.is_none() { break },
        }
    }
    counters.open_ids.lock().expect("not poisoned").remove(&id);
    counters.open.fetch_sub(1, Ordering::SeqCst);
}

/// Moves bytes one way: a reader queues each chunk with its arrival time, a writer delivers
/// it once the latency has passed and no stall holds it. After the source closed and every
/// held byte was delivered, it closes its side of the destination.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    direction: Direction,
    mut faults: watch::Receiver<Faults>,
    counters: Arc<Counters>,
) {
    let side = direction.index();
    let (severs, silences) = {
        let f = faults.borrow_and_update();
        (f.severs, f.silences)
    };
    // `None` marks the end of the source.
    let (queue, mut queued) = mpsc::unbounded_channel::<Option<(Instant, Vec<u8>)>>();
    let mut reader_faults = faults.clone();
    let reader_counters = counters.clone();
    let reader = AbortOnDrop(tokio::spawn(async move {
        let severs = reader_faults.borrow_and_update().severs;
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let read = tokio::select! {
                biased;
                read = from.read(&mut buffer) => read,
                changed = reader_faults.changed() => {
                    if changed.is_err() || reader_faults.borrow_and_update().severs != severs {
                        // Severed: stop reading the client, but without an end marker, so
                        // that what is queued is still delivered before the server's side
                        // closes.
                        return;
                    }
                    continue;
                }
            };
            match read {
                Ok(0) | Err(_) => {
                    let _ = queue.send(None);
                    return;
                }
                Ok(n)
                    if {
                        let f = reader_faults.borrow();
                        f.blackhole || f.silences != silences
                    } =>
                {
                    reader_counters.received[side].fetch_add(n as u64, Ordering::SeqCst);
                }
                Ok(n) => {
                    reader_counters.received[side].fetch_add(n as u64, Ordering::SeqCst);
                    if queue
                        .send(Some((Instant::now(), buffer[..n].to_vec())))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    }));
    while let Some(item) = queued.recv().await {
        let Some((arrived, bytes)) = item else {
            let _ = to.shutdown().await;
            break;
        };
        loop {
            let (held, deliver_at, dropped) = {
                let f = faults.borrow_and_update();
                // Severed (by the first sever after it opened), what is held waits for a
                // `deliver_held` after that sever, whatever else changes.
                let held = if f.severs != severs {
                    f.delivered_severs <= severs
                } else {
                    f.stalled[side]
                };
                (
                    held,
                    arrived + f.latency[side],
                    f.blackhole || f.silences != silences,
                )
            };
            if dropped {
                break;
            }
            if held {
                if faults.changed().await.is_err() {
                    return;
                }
                continue;
            }
            if Instant::now() < deliver_at {
                tokio::select! {
                    () = tokio::time::sleep_until(deliver_at) => {}
                    changed = faults.changed() => if changed.is_err() { return },
                }
                continue;
            }
            // Counted before the write, so a client that got the bytes sees them counted.
            counters.bytes[side].fetch_add(bytes.len() as u64, Ordering::SeqCst);
            if direction == Direction::ToServer {
                let mut delivered = counters.delivered.lock().expect("not poisoned");
                // Bounded: a test takes what it needs after a few commands.
                if delivered.len() < 1 << 20 {
                    delivered.extend_from_slice(&bytes);
                }
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
            break;
        }
    }
    drop(reader);
}

/// Aborts the task when dropped, so a pump's reader ends with it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Makes the socket's close a reset (RST) rather than a clean end (`SO_LINGER` 0).
fn set_reset_on_close(fd: RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `fd` is an open socket owned by a live stream; the option value is a valid
    // `linger` of the size given.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Sends again, on a connection of its own, the last script call (`EVALSHA`, `EVAL` or their
/// read-only forms) found in `delivered` (bytes a proxy delivered: see
/// [`Proxy::take_delivered`]), as a network that delivers a command twice would; returns the
/// server's reply.
pub fn replay_last_script(server: &super::Server, delivered: &[u8]) -> redis::Value {
    replay_script(server, delivered, true)
}

/// As [`replay_last_script`], with the first script among `delivered`: an acquisition
/// followed by steps of its own (a session's grant, then its claim).
pub fn replay_first_script(server: &super::Server, delivered: &[u8]) -> redis::Value {
    replay_script(server, delivered, false)
}

fn replay_script(server: &super::Server, delivered: &[u8], last: bool) -> redis::Value {
    let commands = parse_commands(delivered);
    let is_script = |args: &&Vec<Vec<u8>>| {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        name.starts_with("EVAL")
    };
    let script = if last {
        commands.iter().rev().find(is_script)
    } else {
        commands.iter().find(is_script)
    }
    .unwrap_or_else(|| panic!("no script among {} commands delivered", commands.len()));
    let mut cmd = redis::cmd(&String::from_utf8_lossy(&script[0]));
    for arg in &script[1..] {
        cmd.arg(arg.as_slice());
    }
    let mut con = server.connection();
    match cmd.query::<redis::Value>(&mut con) {
        Ok(value) => value,
        Err(err) => panic!("the replayed script failed: {err}"),
    }
}

/// The commands in RESP bytes a client sent: arrays of bulk strings.
fn parse_commands(mut bytes: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line<'a>(bytes: &mut &'a [u8]) -> &'a [u8] {
        let end = bytes
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a whole RESP line");
        let (head, rest) = bytes.split_at(end);
        *bytes = &rest[2..];
        head
    }
    fn number(head: &[u8]) -> usize {
        std::str::from_utf8(head)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a RESP length: {head:?}"))
    }
    let mut commands = Vec::new();
    while !bytes.is_empty() {
        let head = line(&mut bytes);
        assert_eq!(head.first(), Some(&b'*'), "a command array");
        let count = number(&head[1..]);
        let args = (0..count)
            .map(|_| {
                let head = line(&mut bytes);
                assert_eq!(head.first(), Some(&b'$'), "a bulk string");
                let len = number(&head[1..]);
                let (arg, rest) = bytes.split_at(len);
                bytes = &rest[2..];
                arg.to_vec()
            })
            .collect();
        commands.push(args);
    }
    commands
}
