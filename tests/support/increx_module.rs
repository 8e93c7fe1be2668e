//! Builds the test-only `INCREX` Redis module (`increx/increx.c`).
//!
//! The module stands in for the real `INCREX` command (Redis 8.8+, Valkey 9.2+) on the
//! servers older than 8.8 that we run in tests, so the fast path can be exercised over a
//! real connection. It implements only the documented subset we rely on (`BYINT`,
//! `LBOUND`, `UBOUND`, `PX`/`PXAT`/`EX`/`EXAT`, `ENX`, skip-on-bound, the two-element
//! reply); see the header comment of `increx.c`. Load it with
//! `--loadmodule <module_path()>`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Path of the module's C source, relative to the crate root.
const SOURCE: &str = "tests/support/increx/increx.c";

/// Returns the path of the compiled `increx` module, building it on first use.
///
/// The build runs at most once per test binary. Its output is named after a hash of the C
/// source, so editing the source rebuilds it and an unchanged source is reused across test
/// binaries and runs. Panics with the compiler's output if the C compiler (`gcc`, or `$CC`)
/// is missing or the build fails.
pub fn module_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(build).clone()
}

/// Compiles the module unless an up-to-date build already exists, and returns its path.
fn build() -> PathBuf {
    let root = super::repo_root();
    let source = root.join(SOURCE);
    let bytes = fs::read(&source).unwrap_or_else(|e| {
        panic!(
            "cannot read the INCREX module source {}: {e}",
            source.display()
        )
    });
    let out_dir = root.join("target").join("leasehold-test-support");
    let output = out_dir.join(format!("increx-{:016x}.so", fnv1a(&bytes)));
    if output.exists() {
        return output;
    }
    fs::create_dir_all(&out_dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", out_dir.display()));

    // Build under a name private to this process, then rename: the rename is atomic, so a
    // test binary running concurrently sees either no module or a complete one.
    let tmp = out_dir.join(format!("increx-{}-{}.so.tmp", std::process::id(), unique()));
    compile(&source, &tmp);
    if let Err(e) = fs::rename(&tmp, &output) {
        let _ = fs::remove_file(&tmp);
        panic!(
            "cannot move the built INCREX module to {}: {e}",
            output.display()
        );
    }
    output
}

/// Runs the C compiler on `source`, producing the shared object `output`, or panics with an
/// actionable message.
fn compile(source: &Path, output: &Path) {
    // `CC` may carry a wrapper or flags ("ccache gcc"), as it does for make.
    let cc = std::env::var("CC").ok().filter(|cc| !cc.trim().is_empty());
    let cc = cc.as_deref().unwrap_or("gcc");
    let mut words = cc.split_whitespace();
    let program = words.next().unwrap_or("gcc");
    let result = Command::new(program)
        .args(words)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(output)
        .arg(source)
        .output();
    let out = match result {
        Ok(out) => out,
        Err(e) => panic!(
            "cannot run the C compiler `{cc}` to build the INCREX test module: {e}\n\
             install it with `apt-get install -y gcc` (or point CC at another C compiler)"
        ),
    };
    if !out.status.success() {
        let _ = fs::remove_file(output);
        panic!(
            "building the INCREX test module with `{cc}` failed ({}):\n{}{}\n\
             a working C compiler is needed: `apt-get install -y gcc` (or set CC)",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
    }
}

/// 64-bit FNV-1a hash: enough to tell source versions apart, with no dependency.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Returns a number not returned before in this process, to keep temporary names unique
/// if a build is ever retried after a panic.
fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
