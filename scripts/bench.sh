#!/usr/bin/env bash
# Load figures for the fixed-window limiter and the rate-limit layer, measured in one run
# against a private Redis 7.0 and printed as a table of ratios to a baseline measured in the
# same run:
#
#   1. limiter decisions/s (examples/load_limiter.rs) at 1 and 64 concurrent callers, and
#      redis-rs' own EVALSHA of the same script, next to `redis-benchmark -c 50` running
#      EVALSHA of that script and INCR (all over the unix socket);
#   2. HTTP req/s under wrk (64 connections) of examples/load_http.rs in four modes: a bare
#      axum route; the same route with one minimal EVALSHA (INCR+PEXPIRE) per request, the
#      floor any Redis-backed limiter pays; the same with the limiter's own script instead,
#      which splits the layer's cost into the script's and the client side's; and the route
#      behind RedisRateLimitLayer (Redis on TCP loopback). Modes are interleaved for ROUNDS
#      rounds; the best round of each counts.
#
# The load generators, the servers and Redis all share this machine's cores: ratios within a
# run mean more than the absolute figures. Everything runs on loopback and stops by itself;
# the Redis server and HTTP servers started here are killed on exit.
#
# Environment: DURATION (s per wrk run, 10), LIMITER_SECONDS (s per limiter run, 4),
# ROUNDS (HTTP rounds, 2), WRK_THREADS (2), CONNECTIONS (64), LEASEHOLD_REDIS7_SERVER
# (redis-server binary, /usr/bin/redis-server). Needs redis-server, redis-cli,
# redis-benchmark (apt-get install redis-server redis-tools), wrk and curl.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

DURATION="${DURATION:-10}"
LIMITER_SECONDS="${LIMITER_SECONDS:-4}"
ROUNDS="${ROUNDS:-2}"
WRK_THREADS="${WRK_THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-64}"
REDIS_SERVER="${LEASEHOLD_REDIS7_SERVER:-/usr/bin/redis-server}"

for tool in "$REDIS_SERVER" redis-cli redis-benchmark wrk curl cargo; do
    if ! command -v "$tool" >/dev/null; then
        echo "bench.sh: $tool not found (apt-get install -y redis-server redis-tools wrk curl)" >&2
        exit 1
    fi
done

echo "==> cargo build --release (load_limiter, load_http)" >&2
cargo build --release --quiet --example load_limiter --example load_http
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples"

load="$(cut -d' ' -f1-3 /proc/loadavg)"
work="$(mktemp -d /tmp/leasehold-bench.XXXXXX)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A loopback port nothing listens on (bounded tries).
free_port() {
    local port
    for _ in $(seq 1 100); do
        port=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
    echo "bench.sh: no free port found" >&2
    exit 1
}

# Waits up to 10 s for a command to succeed.
wait_for() {
    for _ in $(seq 1 100); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    echo "bench.sh: timed out waiting for: $*" >&2
    exit 1
}

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
sha="$(redis-cli -s "$sock" script load "$(cat src/backend/redis/fixed_window.lua)")"

# --- 1. decisions per second --------------------------------------------------------------
limiter() { # concurrency mode -> decisions/s
    REDIS_URL="redis+unix://$sock" "$bin/load_limiter" "$1" "$LIMITER_SECONDS" "$2" 2>/dev/null |
        awk '/^decisions\/s/ {print $2}'
}
# redis-benchmark --csv prints: "test","rps",...; the rps of the one test run.
rb() {
    redis-benchmark -s "$sock" -c 50 -n 200000 --csv "$@" 2>/dev/null |
        awk -F'"' 'NR > 1 && $4 != "" {printf "%.0f\n", $4; exit}'
}

echo "==> decisions/s over the unix socket (${LIMITER_SECONDS}s per limiter run)" >&2
lim1="$(limiter 1 limiter)"
lim64="$(limiter 64 limiter)"
rs1="$(limiter 1 evalsha)"
rs64="$(limiter 64 evalsha)"
rb_eval="$(rb EVALSHA "$sha" 1 key 1 1000000000 60000)"
rb_incr="$(rb -t incr)"

# --- 2. HTTP ------------------------------------------------------------------------------
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
        if ((r > ${rps[$mode]:-0})); then rps[$mode]=$r; fi
        if [[ -z "${cpu[$mode]:-}" ]] || awk -v a="$c" -v b="${cpu[$mode]}" 'BEGIN {exit !(a < b)}'; then
            cpu[$mode]=$c
        fi
    done
done

# --- report -------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
row() { printf '| %-50s | %9s | %s |\n' "$1" "$2" "$3"; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN {print (r >= t) ? "met" : "MISSED"}'; }

cat <<EOF

Machine: $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)),
shared by the load generators, the servers and Redis $redis_version; loopback only.
Load average before the run: $load (anything else running skews the figures).

EOF
row "decisions (Redis unix socket)" "per second" "ratio to redis-benchmark EVALSHA -c 50"
row "---" "---:" "---:"
row "limiter, 1 caller" "$lim1" "$(ratio "$lim1" "$rb_eval")"
row "limiter, 64 callers" "$lim64" "$(ratio "$lim64" "$rb_eval")"
row "redis-rs EVALSHA, 1 caller" "$rs1" "$(ratio "$rs1" "$rb_eval")"
row "redis-rs EVALSHA, 64 callers" "$rs64" "$(ratio "$rs64" "$rb_eval")"
row "redis-benchmark -c 50 EVALSHA (same script)" "$rb_eval" "1.00"
row "redis-benchmark -c 50 INCR" "$rb_incr" "$(ratio "$rb_incr" "$rb_eval")"
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
cat <<EOF

limiter at 64 callers >= redis-benchmark -c 50 EVALSHA: $(verdict "$(ratio "$lim64" "$rb_eval")" 1) ($(ratio "$lim64" "$rb_eval")x)
layer >= 0.95x floor: $(verdict "$(ratio "${rps[layer]}" "${rps[floor]}")" 0.95) ($(ratio "${rps[layer]}" "${rps[floor]}")x in req/s, $(ratio "${cpu[floor]}" "${cpu[layer]}")x in CPU per request)
deny-cache flood >= 0.9x bare: $(verdict "$(ratio "${rps[deny]}" "${rps[bare]}")" 0.9) ($(ratio "${rps[deny]}" "${rps[bare]}")x in req/s, $(ratio "${cpu[bare]}" "${cpu[deny]}")x in CPU per request)
CPU us/req: server + Redis + wrk per request; floor/CPU: the floor's cost over the mode's,
the throughput ratio the machine would show with nothing else running.
EOF
