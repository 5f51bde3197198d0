# Helpers shared by scripts/load-compare.sh, limit-compare.sh and upstream-compare.sh (sourced,
# not run): wrk and nginx from Debian if missing, and starting, waiting for and stopping servers.
# The caller defines log(), and sets TMP (a scratch directory) and PIDS (servers running)
# before calling servers_trap.

# Install wrk and nginx if either is missing; sets NGINX (unless given).
need_wrk_nginx() {
    if ! command -v wrk >/dev/null || ! { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; }; then
        log "installing wrk and nginx from Debian"
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y wrk nginx
    fi
    NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
}

# Build the prefork example (or take PREFORK_BIN, built elsewhere); sets BIN.
prefork_bin() {
    if [ -n "${PREFORK_BIN:-}" ]; then
        BIN=$PREFORK_BIN
    else
        log "building the example"
        cargo build --release --example prefork >&2
        BIN="${CARGO_TARGET_DIR:-target}/release/examples/prefork"
    fi
    [ -x "$BIN" ] || { log "no $BIN"; exit 1; }
}

# Stop every server still running and remove TMP, on exit (also on ^C).
cleanup() {
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
servers_trap() {
    trap cleanup EXIT
    trap 'exit 130' INT TERM
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Stop a server by pid (bounded), and forget it.
stop() {
    local pid=$1 sig=$2
    kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    local keep=()
    for p in "${PIDS[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    log "nothing listening on port $1"
    return 1
}
