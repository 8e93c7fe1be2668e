#!/usr/bin/env bash
# Instructions per HTTP request of examples/load_http.rs, counted by valgrind's callgrind:
# the deterministic companion of the HTTP section of scripts/bench.sh. Wall-clock figures
# here move by up to about 20% between runs; instruction counts repeat, so a change in the
# client-side cost of the layer shows here even when req/s cannot tell it from noise.
#
# For each mode of load_http (bare, floor, script, layer, deny; see its header) this starts
# a private redis-server on a free TCP port and the server under
# `valgrind --tool=callgrind`, waits until it answers, drives it with
# `wrk -t1 -c8 -d${DURATION}s`, stops it with SIGTERM (a background job of a script starts
# with SIGINT ignored; callgrind still writes its counts on SIGTERM), and reads the total
# instructions (Ir, PROGRAM TOTALS of callgrind_annotate). The same run with no load
# (startup, the readiness probe, shutdown) is subtracted, and the rest divided by the
# requests wrk counted.
#
# Only the HTTP server process is counted there: not Redis, not wrk. The figures are the work
# the application does per request (routing, the layer, redis-rs), which is what the layer
# adds to a bare route.
#
# A second table counts what each rate-limit script costs inside Redis: redis-server runs
# under callgrind, and for each script (each algorithm's, with the arguments the limiter
# sends, as examples/load_limiter.rs prints them; a no-op script; the HTTP floor's
# INCR+PEXPIRE) SCRIPTS_CALLS EVALSHA calls from `redis-benchmark -c 1` on one hot key are
# counted between `callgrind_control --zero` and `--dump`, after 50 warm-up calls. Every
# call also pays for its request and reply (the no-op row), so the differences between rows
# are what the scripts cost; scripts/bench.sh gives the same in microseconds, which move
# with the machine's load.
#
# The last row of that table is the fixed window's step of one permit as the limiter sends it
# (plain commands, not a script), counted over STEP_SECONDS of load_limiter with one task.
#
# Environment: DURATION (s per wrk run, 8), SCRIPT_CALLS (2000), STEP_SECONDS (3), LEASEHOLD_REDIS7_SERVER
# (redis-server binary, /usr/bin/redis-server). Needs valgrind (callgrind_annotate and
# callgrind_control come with it), redis-server, redis-cli, redis-benchmark, wrk, curl and
# cargo. Takes about 3 minutes.
set -euo pipefail
shopt -s inherit_errexit

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

DURATION="${DURATION:-8}"
SCRIPT_CALLS="${SCRIPT_CALLS:-2000}"
STEP_SECONDS="${STEP_SECONDS:-3}"
REDIS_SERVER="${LEASEHOLD_REDIS7_SERVER:-/usr/bin/redis-server}"
MODES=(bare floor script layer deny)

for tool in valgrind callgrind_annotate callgrind_control "$REDIS_SERVER" redis-cli redis-benchmark \
    wrk curl cargo; do
    if ! command -v "$tool" >/dev/null; then
        echo "bench-instructions.sh: $tool not found" \
            "(apt-get install -y valgrind redis-server redis-tools wrk curl)" >&2
        exit 1
    fi
done

echo "==> cargo build --release (load_http, load_limiter)" >&2
cargo build --release --quiet --example load_http --example load_limiter
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/load_http"
limiter_bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/load_limiter"

load="$(cut -d' ' -f1-3 /proc/loadavg)"
work="$(mktemp -d /tmp/leasehold-instructions.XXXXXX)"
# Process cleanup on exit and free_port, shared with the other bench script.
# shellcheck source=scripts/bench-lib.sh
source "$root/scripts/bench-lib.sh"

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

# mode load(yes|no) -> sets ir (instructions of the whole run) and requests (wrk's count,
# 0 without load). Runs in this shell, not in $(...), so that the exit trap sees its pids.
run() {
    local mode="$1" loaded="$2" redis_port port redis_pid app_pid out bad errors
    local tag="$mode-$loaded"
    redis_port="$(free_port)"
    "$REDIS_SERVER" --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
        --protected-mode no --dir "$work" >"$work/redis-$tag.log" 2>&1 &
    redis_pid=$!
    pids+=("$redis_pid")
    wait_alive "$redis_pid" "$work/redis-$tag.log" 100 redis-cli -p "$redis_port" ping

    port="$(free_port)"
    REDIS_URL="redis://127.0.0.1:$redis_port" valgrind --tool=callgrind \
        --callgrind-out-file="$work/callgrind-$tag.out" "$bin" "$mode" "$port" \
        >"$work/valgrind-$tag.log" 2>&1 &
    app_pid=$!
    pids+=("$app_pid")
    # Under valgrind the server takes seconds to start: wait up to a minute. One probe
    # reaches it (the earlier ones find no listener), in the loaded run and the idle one alike.
    local probe=(curl -sf "http://127.0.0.1:$port/")
    if [[ "$mode" == deny ]]; then probe=(curl -s -o /dev/null "http://127.0.0.1:$port/"); fi
    wait_alive "$app_pid" "$work/valgrind-$tag.log" 600 "${probe[@]}"

    requests=0
    if [[ "$loaded" == yes ]]; then
        out="$(wrk -t1 -c8 -d"${DURATION}s" "http://127.0.0.1:$port/")"
        requests="$(awk '/requests in/ {print $1}' <<<"$out")"
        bad="$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")"
        errors="$(awk '/Socket errors:/' <<<"$out")"
        # Every answer a 200, or for `deny` a 429; and no timeouts, whose requests the
        # server would serve without wrk counting them.
        if [[ -z "$requests" || "$requests" == 0 || -n "$errors" ]] ||
            [[ "$mode" == deny && "${bad:-0}" != "$requests" ]] ||
            [[ "$mode" != deny && -n "$bad" ]]; then
            echo "bench-instructions.sh: $mode answered ${requests:-no} requests," \
                "${bad:-0} non-2xx" >&2
            echo "$out" >&2
            exit 1
        fi
    fi
    stop "$app_pid" TERM
    stop "$redis_pid" TERM

    ir="$(callgrind_annotate "$work/callgrind-$tag.out" 2>/dev/null |
        awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
    if [[ -z "$ir" ]]; then
        echo "bench-instructions.sh: no callgrind totals for $tag" >&2
        cat "$work/valgrind-$tag.log" >&2
        exit 1
    fi
}

declare -A total=() idle=() reqs=() per=()
for mode in "${MODES[@]}"; do
    echo "==> $mode: idle run, then wrk -t1 -c8 -d${DURATION}s under callgrind" >&2
    run "$mode" no
    idle[$mode]="$ir"
    run "$mode" yes
    total[$mode]="$ir"
    reqs[$mode]="$requests"
    per[$mode]="$(awk -v t="$ir" -v i="${idle[$mode]}" -v n="$requests" \
        'BEGIN {printf "%.0f", (t - i) / n}')"
    echo "    $requests requests, ${per[$mode]} instructions per request" >&2
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
row() { printf '| %-48s | %8s | %14s | %14s | %9s | %6s | %7s |\n' "$@"; }

valgrind_version="$(valgrind --version | sed 's/^valgrind-//')"
redis_version="$("$REDIS_SERVER" --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
cat <<EOF

Instructions of the load_http process per request, callgrind (valgrind $valgrind_version);
Redis $redis_version on TCP loopback, wrk -t1 -c8 -d${DURATION}s.
Load average before the run: $load (it does not change instruction counts).

EOF
row "mode" "requests" "Ir, loaded run" "Ir, idle run" "Ir/request" "x bare" "x floor"
row "---" "---:" "---:" "---:" "---:" "---:" "---:"
label() {
    case "$1" in
        bare) echo "bare axum route" ;;
        floor) echo "floor: one EVALSHA (INCR+PEXPIRE) per request" ;;
        script) echo "floor, with the limiter's fixed_window.lua" ;;
        layer) echo "RedisRateLimitLayer::fixed_window" ;;
        deny) echo "flood of one exhausted key, deny cache on (429s)" ;;
    esac
}
for mode in "${MODES[@]}"; do
    row "$(label "$mode")" "${reqs[$mode]}" "${total[$mode]}" "${idle[$mode]}" "${per[$mode]}" \
        "$(ratio "${per[$mode]}" "${per[bare]}")" "$(ratio "${per[$mode]}" "${per[floor]}")"
done
cat <<EOF

layer vs floor: $(ratio "${per[layer]}" "${per[floor]}")x the instructions per request,
    $((per[layer] - per[floor])) more (floor/layer: $(ratio "${per[floor]}" "${per[layer]}")x)
deny vs bare: $(ratio "${per[deny]}" "${per[bare]}")x the instructions per request,
    $((per[deny] - per[bare])) more (bare/deny: $(ratio "${per[bare]}" "${per[deny]}")x)
Ir/request: (loaded run - idle run) / requests; the idle run starts the server, answers the
readiness probe and stops, like the loaded one without wrk.
EOF
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
