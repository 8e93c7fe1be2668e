#!/usr/bin/env bash
# Bytes per live key of each rate limiter: the memory backend's resident set per key for each
# algorithm beside tower_governor's keyed limiter under the same clients (KEYS of them, one
# request each), and Redis's used_memory per key for each algorithm (REDIS_KEYS of them, on a
# private redis-server with no persistence). Each contender runs in a process of its own
# (benches/peers' memory_per_key, see its header), and the target is printed with each row:
# the memory backend at most tower_governor's bytes per key.
#
# Environment: KEYS (1000000), REDIS_KEYS (100000), LEASEHOLD_REDIS7_SERVER (redis-server
# binary, /usr/bin/redis-server). Needs redis-server, redis-cli and cargo. Takes about a
# minute once built.
set -euo pipefail
shopt -s inherit_errexit

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

KEYS="${KEYS:-1000000}"
REDIS_KEYS="${REDIS_KEYS:-100000}"
REDIS_SERVER="${LEASEHOLD_REDIS7_SERVER:-/usr/bin/redis-server}"
ALGORITHMS=(fixed-window sliding-window token-bucket gcra)

work="$(mktemp -d /tmp/leasehold-memory.XXXXXX)"
# shellcheck source=scripts/bench-lib.sh
source "$root/scripts/bench-lib.sh"
require_tools "apt-get install -y redis-server redis-tools" "$REDIS_SERVER" redis-cli cargo

echo "==> cargo build --release (benches/peers)" >&2
cargo build --release --quiet --ignore-rust-version --manifest-path benches/peers/Cargo.toml
bin="${CARGO_TARGET_DIR:-$root/benches/peers/target}/release/memory_per_key"

# contender keys -> the bytes per key it printed.
per_key() {
    local out
    out="$("$bin" "$1" "$2")"
    awk '{for (i = 1; i < NF; i++) if ($i == "per_key") print $(i + 1)}' <<<"$out"
}

echo "==> in process, $KEYS keys each" >&2
governor="$(per_key governor "$KEYS")"
declare -A memory=() redis=()
for algorithm in "${ALGORITHMS[@]}"; do
    memory[$algorithm]="$(per_key "memory-$algorithm" "$KEYS")"
done

echo "==> Redis, $REDIS_KEYS keys each" >&2
for algorithm in "${ALGORITHMS[@]}"; do
    port="$(free_port)"
    "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
        --protected-mode no --dir "$work" >"$work/redis-$algorithm.log" 2>&1 &
    redis_pid=$!
    pids+=("$redis_pid")
    wait_for redis-cli -p "$port" ping
    redis[$algorithm]="$(REDIS_URL="redis://127.0.0.1:$port" per_key "redis-$algorithm" "$REDIS_KEYS")"
    kill "$redis_pid"
    wait "$redis_pid" 2>/dev/null || true
    # Off the list the exit trap kills: its pid may be another process's by then.
    kept=()
    for pid in "${pids[@]}"; do
        if [[ "$pid" != "$redis_pid" ]]; then kept+=("$pid"); fi
    done
    pids=("${kept[@]}")
done
if awk -v g="$governor" 'BEGIN {exit !(g <= 0)}'; then
    echo "bench-memory.sh: tower_governor measured $governor bytes per key: too few KEYS ($KEYS)?" >&2
    exit 1
fi

redis_version="$("$REDIS_SERVER" --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
cat <<EOF

Bytes per live key: the resident set of one process before and after $KEYS clients' first
requests (limits of 100 an hour, so every key stays live), and Redis $redis_version's
used_memory before and after $REDIS_KEYS.

| limiter | memory backend, B/key | / tower_governor (target <= 1.00) | met | Redis, B/key |
| --- | ---: | ---: | --- | ---: |
EOF
for algorithm in "${ALGORITHMS[@]}"; do
    ratio="$(awk -v a="${memory[$algorithm]}" -v b="$governor" 'BEGIN {printf "%.2f", a / b}')"
    met=no
    if awk -v r="$ratio" 'BEGIN {exit !(r <= 1.0)}'; then met=yes; fi
    printf '| %s | %s | %s | %s | %s |\n' "$algorithm" "${memory[$algorithm]}" "$ratio" "$met" \
        "${redis[$algorithm]}"
done
printf '| tower_governor (keyed on IpAddr) | %s | 1.00 | | |\n' "$governor"
