#!/usr/bin/env bash
# How fast a plan changed in one process is in force in the others (examples/plans_propagation.rs):
# three replicas follow one stored plan set, CHANGES changes (100) are made by each in turn, and
# the time from a change's return to its being in force in both other replicas is reported
# (p50, p99, max), on a standalone redis-server and on a 3-node cluster, both private and on
# loopback. Environment: CHANGES, LEASEHOLD_REDIS7_SERVER (redis-server binary,
# /usr/bin/redis-server). Needs redis-server, redis-cli and cargo. Takes about a minute.
set -euo pipefail
shopt -s inherit_errexit

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
REDIS_SERVER="${LEASEHOLD_REDIS7_SERVER:-/usr/bin/redis-server}"
work="$(mktemp -d /tmp/leasehold-plans.XXXXXX)"
# shellcheck source=scripts/bench-lib.sh
source "$root/scripts/bench-lib.sh"
require_tools "apt-get install -y redis-server redis-tools" "$REDIS_SERVER" redis-cli cargo

echo "==> cargo build --release --example plans_propagation" >&2
cargo build --release --quiet --example plans_propagation
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/plans_propagation"

start_server() { # port extra-args...
    local port="$1"
    shift
    mkdir -p "$work/$port"
    "$REDIS_SERVER" --port "$port" --save '' --appendonly no --dir "$work/$port" "$@" \
        >"$work/$port.log" 2>&1 &
    pids+=("$!")
    wait_for redis-cli -p "$port" ping
}

standalone="$(free_port)"
start_server "$standalone"
standalone_result="$(REDIS_URL="redis://127.0.0.1:$standalone" "$bin")"

ports=()
for _ in 1 2 3; do
    port="$(free_port)"
    start_server "$port" --cluster-enabled yes --cluster-config-file "$work/nodes-$port.conf"
    ports+=("$port")
done
redis-cli --cluster create "127.0.0.1:${ports[0]}" "127.0.0.1:${ports[1]}" \
    "127.0.0.1:${ports[2]}" --cluster-yes >"$work/cluster.log" 2>&1
wait_for bash -c "redis-cli -p ${ports[0]} cluster info | grep -q cluster_state:ok"
urls="redis://127.0.0.1:${ports[0]},redis://127.0.0.1:${ports[1]},redis://127.0.0.1:${ports[2]}"
cluster_result="$(CLUSTER_URLS="$urls" "$bin")"

field() { sed -E "s/.*$1=([0-9]+).*/\1/" <<<"$2"; }
ms() { awk -v us="$1" 'BEGIN { printf "%.1f", us / 1000 }'; }
cat <<EOF
Plan changes in force in two other replicas, from the change's return (ms), $(field changes "$standalone_result") changes each
($("$REDIS_SERVER" --version | awk '{print $3}'), loopback; load average $(cut -d' ' -f1-3 /proc/loadavg)):

| deployment | p50 | p99 | max |
|---|---:|---:|---:|
| standalone | $(ms "$(field p50_us "$standalone_result")") | $(ms "$(field p99_us "$standalone_result")") | $(ms "$(field max_us "$standalone_result")") |
| cluster (3 nodes) | $(ms "$(field p50_us "$cluster_result")") | $(ms "$(field p99_us "$cluster_result")") | $(ms "$(field max_us "$cluster_result")") |
EOF
