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
# The peers' benchmark is a workspace of its own (its dependencies stay out of this one).
cargo fmt --manifest-path benches/peers/Cargo.toml --check

echo "==> cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings

echo "==> cargo test"
cargo test --all-features

echo "==> cargo package --list"
# The package ships the code, its Lua scripts, the user-facing examples, the docs and the
# licences; the harness, benchmarks and scripts stay in the repository.
listing="$(cargo package --list --allow-dirty --quiet)"
for needed in LICENSE-MIT LICENSE-APACHE README.md CHANGELOG.md \
    src/backend/steps/fixed_window/fixed_window.lua examples/quickstart.rs examples/api_service.rs; do
    grep -qx "$needed" <<<"$listing" || { echo "the package lacks $needed" >&2; exit 1; }
done
if grep -E '^(tests|benches|scripts|\.ci)/|^examples/load_' <<<"$listing"; then
    echo "the package ships files its users do not need (above)" >&2
    exit 1
fi

echo "==> cargo publish --dry-run"
# Builds the packaged crate on its own, as crates.io would receive it.
cargo publish --dry-run --allow-dirty --quiet

echo "==> cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features
