# Sourced by scripts/bench.sh, scripts/bench-peers.sh, scripts/bench-instructions.sh and
# scripts/bench-memory.sh: what they need to run servers on loopback and leave nothing behind.
# The caller sets `work` (its scratch directory) before sourcing, and adds every process it starts to `pids`; on exit, or on
# INT/TERM, those are killed and `work` is removed.

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

# Stops the script, naming what to install, unless every tool is on the PATH.
require_tools() { # install-hint tool...
    local hint="$1" tool
    shift
    for tool in "$@"; do
        if ! command -v "$tool" >/dev/null; then
            echo "${0##*/}: $tool not found ($hint)" >&2
            exit 1
        fi
    done
}

# A loopback port nothing listens on (bounded tries), below the ephemeral range: client
# sockets (curl, wrk, redis clients) take their local ports there, and one still holding the
# port, even in TIME-WAIT, would keep a server from binding it.
free_port() {
    local port low
    low="$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)"
    if ((low < 12000)); then low=32768; fi
    for _ in $(seq 1 100); do
        port=$((10000 + RANDOM % (low - 10000)))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
    echo "${0##*/}: no free port found" >&2
    exit 1
}

# Waits up to 10 s for a command to succeed; stops the script when it never does.
wait_for() {
    for _ in $(seq 1 100); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    echo "${0##*/}: timed out waiting for: $*" >&2
    exit 1
}

# The HTTP floor's script, as examples/load_http.rs sends it: INCR, and PEXPIRE on the
# window's first request.
FLOOR_LUA="local n = redis.call('INCR', KEYS[1]) \
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return n"

# Sets `evalsha` to the words of the EVALSHA a limiter sends for one permit (its script
# loaded into the server at `sock`, same key and arguments), from examples/load_limiter.rs.
limiter_evalsha() { # load_limiter-binary sock algorithm
    read -ra evalsha < <(REDIS_URL="redis+unix://$2" "$1" 1 1 command "$3") || true
    if [[ "${evalsha[0]:-}" != EVALSHA ]]; then
        echo "${0##*/}: load_limiter printed no EVALSHA for $3" >&2
        exit 1
    fi
}
