#!/usr/bin/env bash
# The one command that checks everything: installs what the tests need on a fresh Debian
# machine (idempotently), then runs rustfmt, clippy, the whole test suite (real servers,
# doctests included) and rustdoc. `.ci/run` calls exactly this.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

scripts/install-test-deps.sh

echo "==> cargo fmt --check"
cargo fmt --all --check

echo "==> cargo clippy"
cargo clippy --all-targets --all-features -- -D warnings

echo "==> cargo test"
cargo test --all-features

echo "==> cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features
