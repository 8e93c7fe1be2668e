//! What the crate logs while a test runs: every event of this thread's tasks, as text, to
//! count them.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// The events logged on this thread since [`capture`], until it is dropped.
pub struct Captured {
    lines: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
    _second: tracing::Dispatch,
}

/// Starts capturing this thread's events (a `current_thread` runtime's tasks included), at
/// `DEBUG` and above.
pub fn capture() -> Captured {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let writer = Sink(lines.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // With a single live dispatcher, `tracing-core` asks the *registering thread's* default
    // whether a callsite is wanted: a callsite another test's thread (with no subscriber)
    // reaches first is then switched off for this thread too, and its events are lost. A
    // second live dispatcher, which wants nothing, makes it ask every live dispatcher.
    let second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    Captured {
        lines,
        _guard: guard,
        _second: second,
    }
}

impl Captured {
    /// The events at `level` (`"ERROR"`, `"WARN"`, ...) whose line contains `text`.
    pub fn count(&self, level: &str, text: &str) -> usize {
        self.lines(level, text).len()
    }

    /// Those events' lines.
    pub fn lines(&self, level: &str, text: &str) -> Vec<String> {
        let lines = self.lines.lock().expect("not poisoned");
        String::from_utf8_lossy(&lines)
            .lines()
            // The level is the field after the time: a message that names a level is not
            // at it.
            .filter(|line| line.split_whitespace().nth(1) == Some(level) && line.contains(text))
            .map(str::to_owned)
            .collect()
    }
}

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
