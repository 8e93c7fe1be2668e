#!/usr/bin/env bash
# Load figures for the rate limiters and the rate-limit layer, measured in one run against a
# private Redis 7.0 and printed as tables of ratios to baselines measured in the same run:
#
#   1. for each algorithm (fixed window, sliding window with 10 segments, token bucket, GCRA,
#      stacked fixed windows with 2 policies; settings in benches/micro/benches/algorithms/mod.rs, every
#      call granted): limiter decisions/s (examples/load_limiter.rs) at 1 and 64 concurrent
#      callers, and redis-rs' own EVALSHA of the same script at 1 and 64 (the fixed window's
#      limiter sends its script for larger steps only: one permit goes as plain commands), next to
#      `redis-benchmark -c 50` running EVALSHA of that script with the same key and
#      arguments (all over the unix socket, each run on an emptied server), the algorithms
#      interleaved for ROUNDS rounds, the best round of each figure counting;
#   2. what each script costs inside Redis: usec_per_call of EVALSHA in INFO commandstats
#      (reset before each run) over the redis-benchmark run above, one hot key on the grant
#      path, next to a no-op script (`return 1`), the minimal INCR+PEXPIRE script of the HTTP
#      floor below, and a bare INCR, measured the same way;
#   3. HTTP req/s under wrk (64 connections) of examples/load_http.rs in five modes: a bare
#      axum route; the same route with one minimal EVALSHA (INCR+PEXPIRE) per request, the
#      floor any Redis-backed limiter pays; the same with the fixed window's own script
#      instead, which splits the layer's cost into the script's and the client side's; the
#      route behind RedisRateLimitLayer::fixed_window; and a flood of one exhausted key with
#      the deny cache on (Redis on TCP loopback). Modes are interleaved for ROUNDS rounds;
#      the best round of each counts.
#
# The load generators, the servers and Redis all share this machine's cores: ratios within a
# run mean more than the absolute figures, which move by up to about 20% between runs here.
# scripts/bench-instructions.sh counts instructions instead, which repeat. Everything runs on
# loopback and stops by itself; the Redis server and HTTP servers started here are killed on
# exit.
#
# Environment: DURATION (s per wrk run, 10), LIMITER_SECONDS (s per limiter run, 3),
# RB_REQUESTS (calls per redis-benchmark run, 100000), ROUNDS (rounds of parts 1-2 and of
# part 3, 2), WRK_THREADS
# (2), CONNECTIONS (64), LEASEHOLD_REDIS7_SERVER (redis-server binary, /usr/bin/redis-server).
# Needs redis-server, redis-cli, redis-benchmark (apt-get install redis-server redis-tools),
# wrk and curl. Takes about 6 minutes.
set -euo pipefail
# A measurement that fails inside $(...) must stop the script, not print an empty figure.
shopt -s inherit_errexit

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

DURATION="${DURATION:-10}"
LIMITER_SECONDS="${LIMITER_SECONDS:-3}"
RB_REQUESTS="${RB_REQUESTS:-100000}"
ROUNDS="${ROUNDS:-2}"
WRK_THREADS="${WRK_THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-64}"
REDIS_SERVER="${LEASEHOLD_REDIS7_SERVER:-/usr/bin/redis-server}"

work="$(mktemp -d /tmp/leasehold-bench.XXXXXX)"
# Process cleanup on exit, free_port and require_tools, shared with the other bench scripts.
# shellcheck source=scripts/bench-lib.sh
source "$root/scripts/bench-lib.sh"
require_tools "apt-get install -y redis-server redis-tools wrk curl" \
    "$REDIS_SERVER" redis-cli redis-benchmark wrk curl cargo

echo "==> cargo build --release (load_limiter, load_http)" >&2
cargo build --release --quiet --example load_limiter --example load_http
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples"
load="$(cut -d' ' -f1-3 /proc/loadavg)"


# --- Redis ------------------------------------------------------------------------------
sock="$work/redis.sock"
redis_port="$(free_port)"
"$REDIS_SERVER" --bind 127.0.0.1 --port "$redis_port" --unixsocket "$sock" \
    --unixsocketperm 700 --save '' --appendonly no --protected-mode no --dir "$work" \
    >"$work/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
wait_for redis-cli -s "$sock" ping
redis_version="$(redis-cli -s "$sock" info server | tr -d '\r' | sed -n 's/^redis_version://p')"

# --- 1. decisions per second, and 2. cost inside Redis ----------------------------------
algorithms=(fixed_window sliding_window token_bucket gcra stacked)

# Every measured run starts on an empty server with zeroed command statistics, so that each
# one sees the same state (a fresh key) and INFO commandstats counts that run alone.
fresh() {
    redis-cli -s "$sock" flushall >/dev/null
    redis-cli -s "$sock" config resetstat >/dev/null
}
# Fails the script when a measurement came back empty (a run that failed prints nothing).
need() {
    if [[ -z "$2" ]]; then
        echo "bench.sh: no figure for $1" >&2
        exit 1
    fi
    echo "$2"
}
limiter() { # concurrency mode algorithm -> decisions/s
    local out
    fresh
    if ! out="$(REDIS_URL="redis+unix://$sock" \
        "$bin/load_limiter" "$1" "$LIMITER_SECONDS" "$2" "$3" 2>"$work/load_limiter.log")"; then
        cat "$work/load_limiter.log" >&2
    fi
    need "load_limiter $*" "$(awk '/^decisions\/s/ {print $2}' <<<"$out")"
}
# stat command... -> "req/s usec-per-call": redis-benchmark -c 50 of one command (its --csv
# prints "test","rps",...), then cmdstat_<stat>'s usec_per_call, the time Redis spent
# running the command, Lua included.
rb() {
    local stat="$1" rps usec
    shift
    fresh
    rps="$(redis-benchmark -s "$sock" -c 50 -n "$RB_REQUESTS" --csv "$@" 2>/dev/null |
        awk -F'"' 'NR > 1 && $4 != "" && !seen++ {printf "%.0f\n", $4}')"
    usec="$(redis-cli -s "$sock" info commandstats | tr -d '\r' |
        sed -n "s/^cmdstat_$stat:.*usec_per_call=\([0-9.]*\).*/\1/p")"
    rps="$(need "redis-benchmark $*" "$rps")"
    usec="$(need "cmdstat_$stat" "$usec")"
    echo "$rps $usec"
}

# Keeps the larger (keep_max) or smaller (keep_min) of a table's entry and a new figure.
keep_max() { # table key value
    local -n table="$1"
    if [[ -z "${table[$2]:-}" ]] || awk -v a="$3" -v b="${table[$2]}" 'BEGIN {exit !(a > b)}'; then
        table[$2]="$3"
    fi
}
keep_min() { # table key value
    local -n table="$1"
    if [[ -z "${table[$2]:-}" ]] || awk -v a="$3" -v b="${table[$2]}" 'BEGIN {exit !(a < b)}'; then
        table[$2]="$3"
    fi
}

echo "==> decisions/s over the unix socket (${LIMITER_SECONDS}s per limiter run," \
    "$RB_REQUESTS calls per redis-benchmark run), $ROUNDS rounds" >&2
declare -A lim1=() lim64=() rs1=() rs64=() rb_rps=() rb_usec=() evalsha_of=()
for algo in "${algorithms[@]}"; do
    limiter_evalsha "$bin/load_limiter" "$sock" "$algo"
    evalsha_of[$algo]="${evalsha[*]}"
done
# The references of the cost table: a bare command, a script that does nothing, and the
# HTTP floor's script (examples/load_http.rs), each on one hot key.
noop_sha="$(redis-cli -s "$sock" script load 'return 1')"
floor_sha="$(redis-cli -s "$sock" script load "$FLOOR_LUA")"
declare -A ref_rps=() ref_usec=()
# Rounds interleave the algorithms, and each figure is the best of its rounds (the most
# decisions, the fewest microseconds): the least disturbed by whatever else the machine runs.
for round in $(seq 1 "$ROUNDS"); do
    echo "  round $round" >&2
    for algo in "${algorithms[@]}"; do
        echo "    $algo" >&2
        keep_max lim1 "$algo" "$(limiter 1 limiter "$algo")"
        keep_max lim64 "$algo" "$(limiter 64 limiter "$algo")"
        keep_max rs1 "$algo" "$(limiter 1 evalsha "$algo")"
        keep_max rs64 "$algo" "$(limiter 64 evalsha "$algo")"
        read -ra evalsha <<<"${evalsha_of[$algo]}"
        read -r r u <<<"$(rb evalsha "${evalsha[@]}")"
        keep_max rb_rps "$algo" "$r"
        keep_min rb_usec "$algo" "$u"
    done
    for ref in incr noop floor; do
        case "$ref" in
            incr) out="$(rb incr -t incr)" ;;
            noop) out="$(rb evalsha EVALSHA "$noop_sha" 1 key)" ;;
            floor) out="$(rb evalsha EVALSHA "$floor_sha" 1 key 60000)" ;;
        esac
        read -r r u <<<"$out"
        keep_max ref_rps "$ref" "$r"
        keep_min ref_usec "$ref" "$u"
    done
done
incr_rps="${ref_rps[incr]}" incr_usec="${ref_usec[incr]}"
noop_rps="${ref_rps[noop]}" noop_usec="${ref_usec[noop]}"
floor_rps="${ref_rps[floor]}" floor_usec="${ref_usec[floor]}"

# --- 3. HTTP ------------------------------------------------------------------------------
# CPU time of a process (utime + stime, or with "children" cutime + cstime), in clock ticks.
ticks() { awk -v c="${2:-}" '{print c ? $16 + $17 : $14 + $15}' "/proc/$1/stat"; }
tck="$(getconf CLK_TCK)"

# mode -> "req/s cpu-us-per-request" (checked: every answer a 200, or for `deny` every answer
# a 429 from the deny cache). The CPU is that of the
# HTTP server, Redis and wrk during the run: what one request costs the machine.
run_http() {
    local mode="$1" port pid out rps bad n app0 redis0 wrk0 cpu
    port="$(free_port)"
    REDIS_URL="redis://127.0.0.1:$redis_port" "$bin/load_http" "$mode" "$port" \
        2>"$work/http-$mode.log" &
    pid=$!
    # This runs in a subshell, which has none of the parent's traps: stop the server here.
    trap "kill $pid 2>/dev/null || true" EXIT
    if [[ "$mode" == deny ]]; then
        wait_for curl -s -o /dev/null "http://127.0.0.1:$port/"
    else
        wait_for curl -sf "http://127.0.0.1:$port/"
    fi
    app0="$(ticks "$pid")" redis0="$(ticks "$redis_pid")" wrk0="$(ticks "$BASHPID" children)"
    out="$(wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${DURATION}s" "http://127.0.0.1:$port/")"
    cpu=$(($(ticks "$pid") - app0 + $(ticks "$redis_pid") - redis0 + $(ticks "$BASHPID" children) - wrk0))
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    bad="$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")"
    n="$(awk '/requests in/ {print $1}' <<<"$out")"
    if [[ "$mode" == deny && "${bad:-0}" != "$n" ]] || [[ "$mode" != deny && -n "$bad" ]]; then
        echo "bench.sh: $mode answered $n requests, ${bad:-0} of them non-2xx" >&2
        echo "$out" >&2
        exit 1
    fi
    rps="$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' <<<"$out")"
    cpu="$(awk -v c="$cpu" -v t="$tck" -v n="$n" 'BEGIN {printf "%.1f", c * 1e6 / t / n}')"
    echo "    $mode: $rps req/s, $cpu us CPU per request" >&2
    echo "$rps $cpu"
}

echo "==> HTTP: wrk -t$WRK_THREADS -c$CONNECTIONS -d${DURATION}s, $ROUNDS rounds" >&2
# The best req/s and the lowest CPU per request of each mode over the rounds: the least
# disturbed by whatever else the machine runs.
declare -A rps=() cpu=()
for round in $(seq 1 "$ROUNDS"); do
    echo "  round $round" >&2
    for mode in bare floor script layer deny; do
        read -r r c < <(run_http "$mode") || true
        if [[ -z "${r:-}" || -z "${c:-}" ]]; then
            echo "bench.sh: the $mode run failed" >&2
            exit 1
        fi
        keep_max rps "$mode" "$r"
        keep_min cpu "$mode" "$c"
    done
done

# --- report -------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
row() { printf '| %-54s | %10s | %s |\n' "$1" "$2" "$3"; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN {print (r >= t) ? "met" : "MISSED"}'; }

cat <<EOF

Machine: $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)),
shared by the load generators, the servers and Redis $redis_version; loopback only.
Load average before the run: $load (anything else running skews the figures).

EOF
row "decisions (Redis unix socket)" "per second" "ratio to redis-benchmark EVALSHA -c 50"
row "---" "---:" "---:"
for algo in "${algorithms[@]}"; do
    rbe="${rb_rps[$algo]}"
    row "$algo: limiter, 1 caller" "${lim1[$algo]}" "$(ratio "${lim1[$algo]}" "$rbe")"
    row "$algo: limiter, 64 callers" "${lim64[$algo]}" "$(ratio "${lim64[$algo]}" "$rbe")"
    row "$algo: redis-rs EVALSHA, 1 caller" "${rs1[$algo]}" "$(ratio "${rs1[$algo]}" "$rbe")"
    row "$algo: redis-rs EVALSHA, 64 callers" "${rs64[$algo]}" "$(ratio "${rs64[$algo]}" "$rbe")"
    row "$algo: redis-benchmark -c 50 EVALSHA (same)" "$rbe" "1.00"
done
echo
crow() { printf '| %-44s | %9s | %7s | %26s |\n' "$@"; }
crow "cost inside Redis (INFO commandstats)" "usec/call" "x no-op" "redis-benchmark -c 50 req/s"
crow "---" "---:" "---:" "---:"
crow "INCR, no script" "$incr_usec" "$(ratio "$incr_usec" "$noop_usec")" "$incr_rps"
crow "no-op script (return 1)" "$noop_usec" "1.00" "$noop_rps"
crow "INCR+PEXPIRE script (the HTTP floor)" "$floor_usec" "$(ratio "$floor_usec" "$noop_usec")" "$floor_rps"
for algo in "${algorithms[@]}"; do
    script="$algo"
    if [[ "$algo" == stacked ]]; then script=stacked_window; fi
    crow "$script.lua" "${rb_usec[$algo]}" "$(ratio "${rb_usec[$algo]}" "$noop_usec")" "${rb_rps[$algo]}"
done
echo
hrow() { printf '| %-50s | %7s | %7s | %8s | %11s | %9s |\n' "$@"; }
hrow "HTTP, wrk -t$WRK_THREADS -c$CONNECTIONS, Redis on TCP" "req/s" "x bare" "x floor" "CPU us/req" "floor/CPU"
hrow "---" "---:" "---:" "---:" "---:" "---:"
http_row() { # label mode
    hrow "$1" "${rps[$2]}" "$(ratio "${rps[$2]}" "${rps[bare]}")" "$(ratio "${rps[$2]}" "${rps[floor]}")" \
        "${cpu[$2]}" "$(ratio "${cpu[floor]}" "${cpu[$2]}")"
}
http_row "bare axum route" bare
http_row "floor: one EVALSHA (INCR+PEXPIRE) per request" floor
http_row "floor, with the limiter's fixed_window.lua" script
http_row "RedisRateLimitLayer::fixed_window" layer
http_row "flood of one exhausted key, deny cache on (429s)" deny
echo
for algo in "${algorithms[@]}"; do
    r="$(ratio "${lim64[$algo]}" "${rb_rps[$algo]}")"
    usec="${rb_usec[$algo]}"
    # verdict compares ratios to a target: "usec <= 3" is "3 / usec >= 1".
    echo "$algo: limiter at 64 callers >= 1.0x redis-benchmark: $(verdict "$r" 1) (${r}x);" \
        "script <= 3 us inside Redis: $(verdict "$(ratio 3 "$usec")" 1) ($usec us)"
done
cat <<EOF
layer >= 0.95x floor: $(verdict "$(ratio "${rps[layer]}" "${rps[floor]}")" 0.95) ($(ratio "${rps[layer]}" "${rps[floor]}")x in req/s, $(ratio "${cpu[floor]}" "${cpu[layer]}")x in CPU per request)
deny-cache flood >= 0.9x bare: $(verdict "$(ratio "${rps[deny]}" "${rps[bare]}")" 0.9) ($(ratio "${rps[deny]}" "${rps[bare]}")x in req/s, $(ratio "${cpu[bare]}" "${cpu[deny]}")x in CPU per request)
CPU us/req: server + Redis + wrk per request; floor/CPU: the floor's cost over the mode's,
the throughput ratio the machine would show with nothing else running.
EOF
