#!/usr/bin/env bash
# The peers in the project's own benchmark: HTTP req/s under wrk of one route behind
# leasehold's layers, next to the crates a user would compare them with and the hand-written
# floor, all served by benches/peers (its own crate, so that the peers are dependencies of this
# bench alone) against one private Redis on loopback TCP, and printed as the ratios issue 22
# asks for, each against its baseline from the same round:
#
#   memory GCRA layer, every request allowed     vs tower_governor, the same     (to reach >= 1.05)
#     and its ceiling: a bare route, no limiter at all, vs tower_governor allowed
#   memory GCRA layer, every request rejected    vs tower_governor, the same     (keep >= 2)
#   Redis fixed-window layer, every one granted  vs the floor: one EVALSHA of INCR + PEXPIRE (>= 0.95)
#   Redis sliding-window, token-bucket and GCRA layers, each vs its own floor: one EVALSHA of
#     the least that algorithm does on the server's clock                      (>= 0.95)
#   Redis GCRA layer, every one granted          vs tower-rate-limiter's Redis GCRA          (>= 1.3)
#   one exhausted key flooded, deny cache on     vs a bare route                             (>= 0.95)
#   one hot key over Redis, hot-key tier on      vs a bare route                             (>= 0.9)
#
# Every mode is served by its own process, started once; rounds run every mode once in turn.
# Each mode runs next to the baseline it is compared with, and every other round runs them in
# the opposite order, so that neither side of a ratio always goes first nor waits a minute
# for the other while the machine's load drifts. Each ratio is the median, over the pairs of
# rounds (one in each order), of the geometric mean of the pair's two ratios: what running
# second costs (or first gains) cancels within a pair. The load generator, the servers and Redis share this
# machine's cores: ratios mean more than the figures, which move by 10-40% between runs on
# 2 shared cores.
#
# Environment: DURATION (s per wrk run, 5), ROUNDS (4; even), CONNECTIONS (64), WRK_THREADS (1),
# LEASEHOLD_REDIS7_SERVER (redis-server binary, /usr/bin/redis-server). Needs redis-server,
# redis-cli, wrk and curl. tower-rate-limiter declares Rust 1.96; it is built with
# --ignore-rust-version where the toolchain is older. Takes about 7 minutes with the defaults.
set -euo pipefail
shopt -s inherit_errexit

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

DURATION="${DURATION:-5}"
ROUNDS="${ROUNDS:-4}"
CONNECTIONS="${CONNECTIONS:-64}"
WRK_THREADS="${WRK_THREADS:-1}"
REDIS_SERVER="${LEASEHOLD_REDIS7_SERVER:-/usr/bin/redis-server}"

if ((ROUNDS < 2 || ROUNDS % 2)); then
    echo "bench-peers.sh: ROUNDS must be even (a round in each order per pair), not $ROUNDS" >&2
    exit 1
fi

work="$(mktemp -d /tmp/leasehold-peers.XXXXXX)"
# shellcheck source=scripts/bench-lib.sh
source "$root/scripts/bench-lib.sh"
require_tools "apt-get install -y redis-server redis-tools wrk curl" "$REDIS_SERVER" redis-cli wrk curl cargo

echo "==> cargo build --release (benches/peers)" >&2
cargo build --release --quiet --ignore-rust-version --manifest-path benches/peers/Cargo.toml
bin="${CARGO_TARGET_DIR:-$root/benches/peers/target}/release/leasehold-peers-bench"


redis_port="$(free_port)"
"$REDIS_SERVER" --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no --loglevel warning >"$work/redis.log" 2>&1 &
pids+=("$!")
wait_for redis-cli -p "$redis_port" ping

# In the order they run: each contender beside its baseline (the deny cache one apart), and
# the bare route beside tower_governor for the ceiling.
modes=(floor fixed-window floor-sliding sliding-window floor-token token-bucket
    floor-gcra gcra peer-gcra deny hot-key bare governor-allowed memory-allowed
    governor-headers-allowed governor-rejected memory-rejected)
declare -A port
for mode in "${modes[@]}"; do
    port[$mode]="$(free_port)"
    REDIS_URL="redis://127.0.0.1:$redis_port" "$bin" "$mode" "${port[$mode]}" \
        2>"$work/$mode.log" &
    pids+=("$!")
    wait_for curl -s -o /dev/null "http://127.0.0.1:${port[$mode]}/"
done

# req/s of one wrk run against `mode`. A mode that grants must answer every request with a
# success, one that rejects every request with an error status (all but the first, for the
# governor and memory modes: their key starts with one permit), and none may fail a
# connection, or its figure measures something else: the run stops.
rps() {
    local out
    out="$(wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${DURATION}s" "http://127.0.0.1:${port[$1]}/")"
    local total failed
    total="$(awk '/requests in/ {print $1}' <<<"$out")"
    failed="$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<<"$out")"
    failed="${failed:-0}"
    if grep -q "Socket errors" <<<"$out"; then
        echo "bench-peers.sh: $1: $(grep "Socket errors" <<<"$out")" >&2
        exit 1
    fi
    case "$1" in
    governor-rejected | memory-rejected | deny)
        if ((total - failed > 1)); then
            echo "bench-peers.sh: $1 granted $((total - failed)) of $total requests" >&2
            exit 1
        fi
        ;;
    *)
        if ((failed > 0)); then
            echo "bench-peers.sh: $1 answered $failed of $total requests with an error status" >&2
            exit 1
        fi
        ;;
    esac
    awk '/^Requests\/sec:/ {printf "%.0f", $2}' <<<"$out"
}

declare -A figures
for round in $(seq 1 "$ROUNDS"); do
    order=("${modes[@]}")
    if ((round % 2 == 0)); then
        order=()
        for ((i = ${#modes[@]} - 1; i >= 0; i--)); do order+=("${modes[i]}"); done
    fi
    for mode in "${order[@]}"; do
        figures[$mode,$round]="$(rps "$mode")"
    done
    echo "round $round of $ROUNDS done" >&2
done

# The median of the arguments.
median() {
    printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {
        if (NR % 2) print v[(NR + 1) / 2]; else printf "%.4f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo
echo "bench-peers: wrk -t$WRK_THREADS -c$CONNECTIONS -d${DURATION}s, $ROUNDS rounds, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| mode | req/s, each round |"
echo "| --- | --- |"
for mode in "${modes[@]}"; do
    runs=()
    for round in $(seq 1 "$ROUNDS"); do runs+=("${figures[$mode,$round]}"); done
    echo "| \`$mode\` | ${runs[*]} |"
done
echo
echo "| ratio (median over pairs of rounds) | ratio | each round's | to reach | met |"
echo "| --- | ---: | --- | ---: | --- |"
report() { # label mode baseline target
    local ratios=() pairs=() round
    for round in $(seq 1 "$ROUNDS"); do
        ratios+=("$(awk -v a="${figures[$2,$round]}" -v b="${figures[$3,$round]}" \
            'BEGIN {printf "%.3f", a / b}')")
    done
    for ((round = 0; round < ROUNDS; round += 2)); do
        pairs+=("$(awk -v a="${ratios[round]}" -v b="${ratios[round + 1]}" \
            'BEGIN {printf "%.4f", sqrt(a * b)}')")
    done
    local m
    m="$(median "${pairs[@]}")"
    local met
    met="$(awk -v m="$m" -v t="$4" 'BEGIN {print (m >= t) ? "yes" : "no"}')"
    printf '| %s | %.2f× | %s | ≥ %s× | %s |\n' "$1" "$m" "${ratios[*]}" "$4" "$met"
}
# The ceiling of the first two: a route with no limiter at all, against tower_governor. A
# layer that decides anything costs more than none, so it cannot score above this.
report "ceiling: bare route (no limiter) / tower_governor allowed" bare governor-allowed 1.05
report "memory GCRA allowed / tower_governor allowed" memory-allowed governor-allowed 1.05
report "memory GCRA allowed / tower_governor allowed, its fields on (like for like)" memory-allowed governor-headers-allowed 1.05
report "memory GCRA rejected / tower_governor rejected" memory-rejected governor-rejected 2
report "Redis fixed window / floor (EVALSHA INCR+PEXPIRE)" fixed-window floor 0.95
report "Redis sliding window / its floor (two weighted windows)" sliding-window floor-sliding 0.95
report "Redis token bucket / its floor (tokens and time in a hash)" token-bucket floor-token 0.95
report "Redis GCRA / its floor (one arrival time)" gcra floor-gcra 0.95
report "Redis GCRA / tower-rate-limiter Redis GCRA" gcra peer-gcra 1.3
report "deny cache, one exhausted key / bare route" deny bare 0.95
report "hot-key tier, one hot key granted over Redis / bare route" hot-key bare 0.9
