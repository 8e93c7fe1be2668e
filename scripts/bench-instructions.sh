#!/usr/bin/env bash
# Instructions per HTTP request, counted by valgrind's callgrind, of every contender in one
# table: the crate's layers, their peers (tower_governor, tower-rate-limiter) and the
# hand-written floors, all served by benches/peers (see its header for the modes). Wall-clock
# figures move by 10-40% on shared cores; instruction counts repeat, so a change in what a
# decision costs shows here even when req/s cannot tell it from noise. scripts/bench-peers.sh
# is the wall-clock check that the counts translate into requests per second.
#
# For each mode this starts the benches/peers server under `valgrind --tool=callgrind` and, for
# the modes that use Redis, a private redis-server under callgrind too. After a warm-up (one
# second of wrk: scripts loaded, connections made, the INCREX probe settled) both counters
# are zeroed (`callgrind_control --zero`), `wrk -t1 -c8 -d${DURATION}s` drives the server,
# and both are dumped (`--dump`): the process's and Redis's instructions, each divided by the
# requests wrk counted. Redis's count includes its own housekeeping (serverCron) over the
# run, as a deployment pays it; the hot-key tier's Redis work is amortised over its batches.
#
# The targets table prints each ratio with its target and whether it is met. An in-process
# layer's cost is what it adds to a bare route (the HTTP server's own work, the same for every
# mode, would otherwise hide it); a Redis mode's is the whole request, process and Redis.
#
# A second table counts what each rate-limit script costs inside Redis: redis-server runs
# under callgrind, and for each script (each algorithm's, with the arguments the limiter
# sends, as examples/load_limiter.rs prints them; a no-op script; the HTTP floor's
# INCR+PEXPIRE) SCRIPT_CALLS EVALSHA calls from `redis-benchmark -c 1` on one hot key are
# counted between `callgrind_control --zero` and `--dump`, after 50 warm-up calls. Every
# call also pays for its request and reply (the no-op row), so the differences between rows
# are what the scripts cost; scripts/bench.sh gives the same in microseconds, which move
# with the machine's load.
#
# The last row of that table is the fixed window's step of one permit as the limiter sends it
# (plain commands, not a script), counted over STEP_SECONDS of load_limiter with one task.
#
# Environment: DURATION (s per wrk run, 8), SCRIPT_CALLS (2000), STEP_SECONDS (3), MODES
# (a subset of the modes, space-separated), LEASEHOLD_REDIS7_SERVER (redis-server binary,
# /usr/bin/redis-server). Needs valgrind (callgrind_control comes with it), redis-server, redis-cli, redis-benchmark, wrk, curl and cargo. Takes about 10 minutes.
set -euo pipefail
shopt -s inherit_errexit

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

DURATION="${DURATION:-8}"
SCRIPT_CALLS="${SCRIPT_CALLS:-2000}"
STEP_SECONDS="${STEP_SECONDS:-3}"
REDIS_SERVER="${LEASEHOLD_REDIS7_SERVER:-/usr/bin/redis-server}"
ALL_MODES=(bare governor-allowed governor-headers-allowed governor-rejected memory-allowed
    memory-rejected floor fixed-window floor-sliding sliding-window floor-token token-bucket
    floor-gcra gcra peer-gcra floor-stacked stacked deny hot-key deny-one deny-distinct
    plans-fixed-window plans-gcra)
read -ra MODES <<<"${MODES:-${ALL_MODES[*]}}"

work="$(mktemp -d /tmp/leasehold-instructions.XXXXXX)"
# Process cleanup on exit, free_port and require_tools, shared with the other bench scripts.
# shellcheck source=scripts/bench-lib.sh
source "$root/scripts/bench-lib.sh"
require_tools "apt-get install -y valgrind redis-server redis-tools wrk curl" \
    valgrind callgrind_control "$REDIS_SERVER" redis-cli redis-benchmark wrk curl cargo

echo "==> cargo build --release (benches/peers, load_limiter)" >&2
cargo build --release --quiet --ignore-rust-version --manifest-path benches/peers/Cargo.toml
cargo build --release --quiet --example load_limiter
bin="${CARGO_TARGET_DIR:-$root/benches/peers/target}/release/leasehold-peers-bench"
limiter_bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/load_limiter"
load="$(cut -d' ' -f1-3 /proc/loadavg)"

# Waits up to `tries` tenths of a second for a command to succeed while the process `pid`
# runs; when it dies first (a port it could not bind, say), shows its `log` and fails.
wait_alive() { # pid log tries command...
    local pid="$1" log="$2" tries="$3"
    shift 3
    for _ in $(seq 1 "$tries"); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "bench-instructions.sh: the process behind \"$*\" exited:" >&2
            cat "$log" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "bench-instructions.sh: timed out waiting for: $*" >&2
    exit 1
}

# Stops a process this script started, and takes it off the list the exit trap kills.
stop() { # pid signal
    kill -"$2" "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    local kept=() pid
    for pid in "${pids[@]}"; do
        if [[ "$pid" != "$1" ]]; then kept+=("$pid"); fi
    done
    pids=("${kept[@]}")
}

# The instructions in the newest dump of the callgrind output `out` (each
# `callgrind_control --dump` writes a file of its own, `out.N`), which it then removes.
last_dump() { # out
    local dump
    dump="$(find "$(dirname "$1")" -maxdepth 1 -name "$(basename "$1").*" -printf '%T@ %p\n' |
        sort -n | tail -1 | cut -d' ' -f2-)"
    awk '/^(summary|totals):/ {print $2; exit}' "${dump:-/dev/null}"
    rm -f "$dump"
}

uses_redis() {
    case "$1" in
        bare | governor-* | memory-* | deny-one | deny-distinct) return 1 ;;
        *) return 0 ;;
    esac
}

rejects() {
    case "$1" in
        governor-rejected | memory-rejected | deny | deny-one | deny-distinct) return 0 ;;
        *) return 1 ;;
    esac
}

# The wrk arguments of a mode: a script naming the client of each request for the deny-*
# modes, nothing for the others.
wrk_script() { # mode
    case "$1" in
        deny-one) echo "-s benches/peers/one-client.lua" ;;
        deny-distinct) echo "-s benches/peers/distinct-clients.lua" ;;
    esac
}

# mode -> sets requests, app_ir and redis_ir (per request; 0 for Redis in the in-process
# modes). Runs in this shell, not in $(...), so that the exit trap sees its pids.
run() {
    local mode="$1" redis_port=0 port redis_pid="" app_pid out bad errors app_total redis_total
    if uses_redis "$mode"; then
        redis_port="$(free_port)"
        valgrind --tool=callgrind --callgrind-out-file="$work/redis-$mode.out" \
            "$REDIS_SERVER" --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
            --protected-mode no --dir "$work" >"$work/redis-$mode.log" 2>&1 &
        redis_pid=$!
        pids+=("$redis_pid")
        wait_alive "$redis_pid" "$work/redis-$mode.log" 600 redis-cli -p "$redis_port" ping
    fi

    port="$(free_port)"
    REDIS_URL="redis://127.0.0.1:$redis_port" valgrind --tool=callgrind \
        --callgrind-out-file="$work/app-$mode.out" "$bin" "$mode" "$port" \
        >"$work/app-$mode.log" 2>&1 &
    app_pid=$!
    pids+=("$app_pid")
    # Under valgrind the server takes seconds to start (the deny-* modes minutes: they
    # reject 100,000 clients first): wait up to five minutes.
    wait_alive "$app_pid" "$work/app-$mode.log" 3000 curl -s -o /dev/null "http://127.0.0.1:$port/"
    local script
    read -ra script <<<"$(wrk_script "$mode")"
    wrk -t1 -c8 -d1s "${script[@]}" "http://127.0.0.1:$port/" >/dev/null

    callgrind_control --zero "$app_pid" >/dev/null 2>&1
    if [[ -n "$redis_pid" ]]; then callgrind_control --zero "$redis_pid" >/dev/null 2>&1; fi
    out="$(wrk -t1 -c8 -d"${DURATION}s" "${script[@]}" "http://127.0.0.1:$port/")"
    callgrind_control --dump "$app_pid" >/dev/null 2>&1
    if [[ -n "$redis_pid" ]]; then callgrind_control --dump "$redis_pid" >/dev/null 2>&1; fi

    requests="$(awk '/requests in/ {print $1}' <<<"$out")"
    bad="$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<<"$out")"
    errors="$(awk '/Socket errors:/' <<<"$out")"
    # Every answer a success, or in a rejecting mode a 429 (the key's one permit went to the
    # warm-up); and no socket errors or timeouts, whose requests the server would serve
    # without wrk counting them.
    if [[ -z "$requests" || "$requests" == 0 || -n "$errors" ]] ||
        { rejects "$mode" && [[ "${bad:-0}" != "$requests" ]]; } ||
        { ! rejects "$mode" && [[ -n "$bad" ]]; }; then
        echo "bench-instructions.sh: $mode answered ${requests:-no} requests," \
            "${bad:-0} with an error status" >&2
        echo "$out" >&2
        exit 1
    fi

    app_total="$(last_dump "$work/app-$mode.out")"
    redis_total=0
    if [[ -n "$redis_pid" ]]; then redis_total="$(last_dump "$work/redis-$mode.out")"; fi
    stop "$app_pid" TERM
    if [[ -n "$redis_pid" ]]; then stop "$redis_pid" TERM; fi
    if [[ -z "$app_total" || -z "$redis_total" ]]; then
        echo "bench-instructions.sh: no callgrind dump for $mode" >&2
        cat "$work/app-$mode.log" >&2
        if [[ -n "$redis_pid" ]]; then cat "$work/redis-$mode.log" >&2; fi
        exit 1
    fi
    app_ir=$((app_total / requests))
    redis_ir=$((redis_total / requests))
}

declare -A reqs=() app=() redis=() sum=()
for mode in "${MODES[@]}"; do
    echo "==> $mode: wrk -t1 -c8 -d${DURATION}s under callgrind" >&2
    run "$mode"
    reqs[$mode]="$requests"
    app[$mode]="$app_ir"
    redis[$mode]="$redis_ir"
    sum[$mode]=$((app_ir + redis_ir))
    echo "    $requests requests: $app_ir in the process, $redis_ir in Redis, per request" >&2
done

# --- inside Redis -----------------------------------------------------------------------
echo "==> scripts inside redis-server under callgrind, $SCRIPT_CALLS calls each" >&2
sock="$work/redis-scripts.sock"
valgrind --tool=callgrind --callgrind-out-file="$work/redis-scripts.out" \
    "$REDIS_SERVER" --port 0 --unixsocket "$sock" --unixsocketperm 700 --save '' \
    --appendonly no --dir "$work" >"$work/redis-scripts.log" 2>&1 &
scripts_pid=$!
pids+=("$scripts_pid")
wait_alive "$scripts_pid" "$work/redis-scripts.log" 600 redis-cli -s "$sock" ping

# sha numkeys key args... -> sets script_ir, the instructions per call of SCRIPT_CALLS calls.
script_cost() {
    local sha="$1" reply dump
    shift
    redis-cli -s "$sock" flushall >/dev/null
    # A call that fails (NOSCRIPT, a Lua error) would be counted as cheap: check one first.
    reply="$(redis-cli -s "$sock" evalsha "$sha" "$@" 2>&1)"
    if [[ "$reply" == *ERR* || "$reply" == *NOSCRIPT* ]]; then
        echo "bench-instructions.sh: EVALSHA $sha $* answered: $reply" >&2
        exit 1
    fi
    redis-benchmark -s "$sock" -c 1 -n 50 EVALSHA "$sha" "$@" >/dev/null
    callgrind_control --zero "$scripts_pid" >/dev/null 2>&1
    redis-benchmark -s "$sock" -c 1 -n "$SCRIPT_CALLS" EVALSHA "$sha" "$@" >/dev/null
    callgrind_control --dump "$scripts_pid" >/dev/null 2>&1
    # Each dump is a file of its own, named after the output file and numbered.
    dump="$(find "$work" -maxdepth 1 -name 'redis-scripts.out.*' -newer "$work/redis-scripts.log" \
        -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)"
    script_ir="$(awk '/^(summary|totals):/ {print $2; exit}' "${dump:-/dev/null}")"
    if [[ -z "$script_ir" ]]; then
        echo "bench-instructions.sh: no callgrind dump for EVALSHA $sha" >&2
        exit 1
    fi
    rm -f "$dump"
    script_ir=$((script_ir / SCRIPT_CALLS))
}

script_rows=(noop floor fixed_window sliding_window token_bucket gcra stacked)
declare -A script_per=()
sha="$(redis-cli -s "$sock" script load 'return 1')"
script_cost "$sha" 1 key
script_per[noop]="$script_ir"
sha="$(redis-cli -s "$sock" script load "$FLOOR_LUA")"
script_cost "$sha" 1 key 1000
script_per[floor]="$script_ir"
for algo in "${script_rows[@]:2}"; do
    limiter_evalsha "$limiter_bin" "$sock" "$algo"
    script_cost "${evalsha[@]:1}"
    script_per[$algo]="$script_ir"
done

# The fixed window's step of one permit, as the limiter sends it where the server has no
# INCREX: SET NX PX, INCR and PTTL in one pipeline, from load_limiter with one task for
# STEP_SECONDS. The steps are counted by the server (INCR's calls); the limiter's connection
# and warm-up run inside the count, a few hundred thousand instructions against millions.
incr_calls() {
    redis-cli -s "$sock" info commandstats |
        awk -F'[=,:]' '/^cmdstat_incr:/ {print $3; exit}' | tr -d '\r'
}
redis-cli -s "$sock" flushall >/dev/null
before="$(incr_calls)"
callgrind_control --zero "$scripts_pid" >/dev/null 2>&1
REDIS_URL="redis+unix://$sock" "$limiter_bin" 1 "$STEP_SECONDS" limiter fixed_window >/dev/null
callgrind_control --dump "$scripts_pid" >/dev/null 2>&1
steps=$(($(incr_calls) - ${before:-0}))
dump="$(find "$work" -maxdepth 1 -name 'redis-scripts.out.*' -newer "$work/redis-scripts.log" \
    -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)"
step_ir="$(awk '/^(summary|totals):/ {print $2; exit}' "${dump:-/dev/null}")"
if ((steps < 100)) || [[ -z "$step_ir" ]]; then
    echo "bench-instructions.sh: $steps fixed-window steps counted (no INCR: no plain path?)" >&2
    exit 1
fi
script_per[fixed_window_one]=$((step_ir / steps))
script_rows+=(fixed_window_one)
stop "$scripts_pid" TERM

# --- report -------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
row() { printf '| %-58s | %8s | %9s | %9s | %9s |\n' "$@"; }

valgrind_version="$(valgrind --version | sed 's/^valgrind-//')"
redis_version="$("$REDIS_SERVER" --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
cat <<EOF

Instructions per HTTP request, callgrind (valgrind $valgrind_version): the benches/peers
process and Redis $redis_version (TCP loopback), wrk -t1 -c8 -d${DURATION}s after 1 s of warm-up.
Load average before the run: $load (it does not change instruction counts).

EOF
row "mode" "requests" "process" "Redis" "sum"
row "---" "---:" "---:" "---:" "---:"
label() {
    case "$1" in
        bare) echo "bare axum route" ;;
        governor-allowed) echo "tower_governor, allowed" ;;
        governor-headers-allowed) echo "tower_governor with its headers, allowed" ;;
        governor-rejected) echo "tower_governor, rejected" ;;
        memory-allowed) echo "memory GCRA layer, allowed" ;;
        memory-rejected) echo "memory GCRA layer, rejected" ;;
        floor) echo "floor: fixed window (INCR+PEXPIRE)" ;;
        fixed-window) echo "Redis fixed window layer" ;;
        floor-sliding) echo "floor: sliding window" ;;
        sliding-window) echo "Redis sliding window layer (10 segments)" ;;
        floor-token) echo "floor: token bucket" ;;
        token-bucket) echo "Redis token bucket layer" ;;
        floor-gcra) echo "floor: GCRA" ;;
        gcra) echo "Redis GCRA layer" ;;
        peer-gcra) echo "tower-rate-limiter's Redis GCRA" ;;
        floor-stacked) echo "floor: two stacked fixed windows" ;;
        stacked) echo "Redis stacked layer (two fixed windows)" ;;
        deny) echo "deny cache: flood of one exhausted key (429s)" ;;
        hot-key) echo "hot-key tier: one hot key, batches of 1000" ;;
        deny-one) echo "deny cache of 100k clients: flood of one (429s)" ;;
        deny-distinct) echo "deny cache of 100k clients: each in turn (429s)" ;;
        plans-fixed-window) echo "Redis fixed window, the default of two plans" ;;
        plans-gcra) echo "Redis GCRA, the default of two plans" ;;
    esac
}
for mode in "${MODES[@]}"; do
    row "$(label "$mode")" "${reqs[$mode]}" "${app[$mode]}" "${redis[$mode]}" "${sum[$mode]}"
done

# The targets: a ratio of two counts, its target, and whether it is met (the quotient itself
# at most the target, not its rounding). A ratio whose modes did not run is left out.
trow() { printf '| %-74s | %6s | %7s | %4s |\n' "$@"; }
target() { # label numerator denominator target
    local met=no
    if awk -v a="$2" -v b="$3" -v t="$4" 'BEGIN {exit !(a / b <= t)}'; then met=yes; fi
    trow "$1" "$(ratio "$2" "$3")" "<= $4" "$met"
}
ran() { local m; for m in "$@"; do [[ -n "${app[$m]:-}" ]] || return 1; done; }
echo
trow "ratio (instructions per request)" "value" "target" "met"
trow "---" "---:" "---:" "---"
if ran bare memory-allowed governor-headers-allowed; then
    target "memory GCRA allowed, above bare / tower_governor with headers, above bare" \
        $((${app[memory-allowed]} - ${app[bare]})) $((${app[governor-headers-allowed]} - ${app[bare]})) 1.0
fi
if ran bare memory-rejected governor-rejected; then
    target "memory GCRA rejected, above bare / tower_governor rejected, above bare" \
        $((${app[memory-rejected]} - ${app[bare]})) $((${app[governor-rejected]} - ${app[bare]})) 0.5
fi
if ran fixed-window floor; then
    target "Redis fixed window: process / the floor's process" \
        "${app[fixed-window]}" "${app[floor]}" 1.10
    target "Redis fixed window: Redis / the floor's Redis" \
        "${redis[fixed-window]}" "${redis[floor]}" 1.0
fi
for pair in sliding-window:floor-sliding token-bucket:floor-token gcra:floor-gcra \
    stacked:floor-stacked; do
    if ran "${pair%%:*}" "${pair##*:}"; then
        target "$(label "${pair%%:*}"): process + Redis / its floor's" \
            "${sum[${pair%%:*}]}" "${sum[${pair##*:}]}" 1.05
    fi
done
if ran gcra peer-gcra; then
    target "Redis GCRA layer: process + Redis / tower-rate-limiter's" \
        "${sum[gcra]}" "${sum[peer-gcra]}" 0.77
fi
if ran deny bare; then
    # The process alone: Redis's share here is its housekeeping over the run, which no
    # request of the flood causes.
    target "deny cache flood, process / bare route" "${app[deny]}" "${app[bare]}" 1.10
fi
if ran deny-distinct deny-one; then
    # The same server and cache, only the clients the flood names differ: what a flood of
    # distinct keys costs beyond one key's (a scan or a global lock would show here).
    target "deny cache, 100k distinct clients / one client" \
        "${app[deny-distinct]}" "${app[deny-one]}" 1.10
fi
for pair in plans-fixed-window:fixed-window plans-gcra:gcra; do
    if ran "${pair%%:*}" "${pair##*:}"; then
        # The process: what choosing a plan per request adds to the same limit.
        target "$(label "${pair%%:*}"): process / $(label "${pair##*:}")'s" \
            "${app[${pair%%:*}]}" "${app[${pair##*:}]}" 1.03
    fi
done
if ran hot-key bare; then
    target "hot-key tier: process + Redis, amortised / bare route" \
        "${sum[hot-key]}" "${app[bare]}" 1.15
fi

cat <<EOF

Instructions of redis-server per EVALSHA (callgrind, redis-benchmark -c 1, one hot key, the
limiters' own arguments, every call granted). "over no-op" is what a script adds to a call of
\`return 1\`, which pays for the request and the reply alone.

EOF
srow() { printf '| %-40s | %10s | %10s | %13s |\n' "$@"; }
srow "script" "Ir/call" "over no-op" "x the floor's"
srow "---" "---:" "---:" "---:"
slabel() {
    case "$1" in
        noop) echo "no-op (return 1)" ;;
        floor) echo "INCR+PEXPIRE (the HTTP floor)" ;;
        stacked) echo "stacked_window.lua (2 policies)" ;;
        sliding_window) echo "sliding_window.lua (10 segments)" ;;
        fixed_window_one) echo "fixed window, one permit: SET NX PX, INCR, PTTL" ;;
        *) echo "$1.lua" ;;
    esac
}
floor_over=$((script_per[floor] - script_per[noop]))
for row in "${script_rows[@]}"; do
    over=$((script_per[$row] - script_per[noop]))
    srow "$(slabel "$row")" "${script_per[$row]}" "$over" "$(ratio "$over" "$floor_over")"
done
