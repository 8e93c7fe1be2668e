//! The one long-lived thread that spawns every server process.
//!
//! Each child is spawned with `PR_SET_PDEATHSIG = SIGKILL`. Linux delivers that signal when the
//! *thread* that forked the child exits, not the process, so all forks happen on a dedicated
//! thread that lives as long as the test binary: test threads come and go, this one does not.
//! When the binary ends in any way (normal exit, panic, abort, SIGKILL), the thread dies with it
//! and the kernel kills every server.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::LazyLock;
use std::sync::mpsc::{Sender, channel};

struct Request {
    command: Command,
    reply: Sender<io::Result<Child>>,
}

static SPAWNER: LazyLock<Sender<Request>> = LazyLock::new(|| {
    let (tx, rx) = channel::<Request>();
    std::thread::Builder::new()
        .name("leasehold-test-spawner".into())
        .spawn(move || {
            // The sender lives in a static that is never dropped: this loop (and so the thread)
            // runs until the process ends.
            for Request { mut command, reply } in rx {
                let _ = reply.send(command.spawn());
            }
        })
        .expect("cannot start the server spawner thread");
    tx
});

/// Spawns `command` from the long-lived spawner thread, so the child is SIGKILLed when this
/// process ends.
pub fn spawn(mut command: Command) -> io::Result<Child> {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe functions
    // (prctl, getppid, _exit); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would kill us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let (reply_tx, reply_rx) = channel();
    SPAWNER
        .send(Request {
            command,
            reply: reply_tx,
        })
        .expect("the server spawner thread is gone");
    reply_rx
        .recv()
        .expect("the server spawner thread dropped a request")
}
