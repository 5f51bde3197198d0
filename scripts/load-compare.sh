#!/usr/bin/env bash
# Load comparison: the prefork example in every --accept mode against nginx, on loopback.
#
#   bash scripts/load-compare.sh            # prints one markdown table on stdout
#
# What it does:
#   * installs wrk and nginx from Debian if they are missing (apt-get update once, then
#     apt-get install -y wrk nginx);
#   * builds the example (cargo build --release --example prefork);
#   * runs nginx (2 workers, `location / { return 200 "ok"; }`) with accept_mutex on, off, and
#     off with `listen ... reuseport`, under its own temporary prefix (config, pid, logs, temp dirs in a mktemp directory, not
#     the system service), and the example in each mode: mutex, blocking, none, exclusive,
#     reuseport;
#   * loads each with wrk for DURATION seconds, twice: a new connection per request
#     (-H "Connection: close") and keep-alive;
#   * prints one markdown table: requests/s, its ratio to the best nginx of the same workload in
#     this run, latency p50/p99 (wrk --latency), the per-worker share of connections (min/max;
#     for nginx counted from an access log of $pid, buffered), and wasted wake-ups (a worker
#     woken for a listening socket whose accept found nothing) per 1000 connections (n/a for
#     nginx), and the workers' CPU time (user + system, from /proc) per request: less sensitive
#     than req/s to other load on the machine.
#
# Every server it starts is stopped when it exits (trap), also on ^C. Progress goes to stderr.
#
# Environment (defaults in brackets): DURATION [5] seconds per run, THREADS [2] and CONNS [50]
# for wrk, WORKERS [2], PORT [18480] (the example; nginx uses PORT+1), MODES [all five],
# NGINX_MODES [on off reuseport] (accept_mutex on, off, and off with `listen ... reuseport`),
# WORKLOADS [close keepalive] (either or both),
# ROUNDS [1] (repeat the whole matrix; the table keeps the median req/s run of each row, and
# the ratio is to the better nginx median), RAW [unset] (a file to keep every run's raw line),
# NGINX [nginx from PATH or /usr/sbin/nginx], PREFORK_ARGS [unset] (extra flags for every
# prefork run, e.g. "--spread-retry 2"; shown in the table's accept column).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
THREADS=${THREADS:-2}
CONNS=${CONNS:-50}
WORKERS=${WORKERS:-2}
PORT=${PORT:-18480}
NGX_PORT=$((PORT + 1))
MODES=${MODES:-"mutex blocking none exclusive reuseport"}
NGINX_MODES=${NGINX_MODES:-"on off reuseport"}
WORKLOADS=${WORKLOADS:-"close keepalive"}
ROUNDS=${ROUNDS:-1}

log() { echo "load-compare: $*" >&2; }

# --- tools -------------------------------------------------------------------------------
# shellcheck source=scripts/servers.sh
. scripts/servers.sh
need_wrk_nginx

prefork_bin

TMP=$(mktemp -d /tmp/load-compare.XXXXXX)
PIDS=()
servers_trap

for p in "$PORT" "$NGX_PORT"; do
    port_free "$p" || { log "port $p is in use (set PORT=...)"; exit 1; }
done

# CPU time (clock ticks, user + system) used so far by the children (workers) of a master.
worker_ticks() {
    local t=0 c v
    for c in $(cat "/proc/$1/task/$1/children" 2>/dev/null); do
        # fields after the ")" that ends the command name: utime and stime are the 12th and 13th
        v=$(sed 's/.*) //' "/proc/$c/stat" 2>/dev/null | awk '{print $12 + $13}')
        t=$((t + ${v:-0}))
    done
    echo "$t"
}

# run_wrk URL WORKLOAD -> "req/s p50 p99 requests" (latencies as wrk prints them)
run_wrk() {
    local url=$1 workload=$2 out
    local hdr=()
    [ "$workload" = close ] && hdr=(-H "Connection: close")
    out=$(timeout $((DURATION + 30)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "${hdr[@]}" "$url")
    echo "$out" >>"$TMP/wrk.log"
    local rps p50 p99 requests
    rps=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' <<<"$out")
    requests=$(awk '/ requests in / {print $1}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    echo "${rps:-0} ${p50:-?} ${p99:-?} ${requests:-0}"
}

# microseconds of worker CPU per request, from tick counts before/after and the request count
cpu_per_request() {
    awk -v a="$1" -v b="$2" -v n="$3" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { if (n > 0) printf "%.0f", (b - a) * 1e6 / hz / n; else print "?" }'
}

nginx_conf() { # on|off (accept_mutex) or reuseport (accept_mutex off, listen ... reuseport)
    mkdir -p "$TMP/nginx/logs" "$TMP/nginx/tmp"
    cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes $WORKERS;
daemon off;
master_process on;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log;
events { worker_connections 1024; accept_mutex $([ "$1" = reuseport ] && echo off || echo "$1"); }
http {
    log_format pidonly '\$pid';
    access_log $TMP/nginx/logs/access.log pidonly buffer=256k flush=1s;
    client_body_temp_path $TMP/nginx/tmp/body;
    proxy_temp_path $TMP/nginx/tmp/proxy;
    fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
    uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
    scgi_temp_path $TMP/nginx/tmp/scgi;
    server {
        listen 127.0.0.1:$NGX_PORT$([ "$1" = reuseport ] && echo " reuseport");
        location / { return 200 "ok"; }
    }
}
EOF
}

# One measurement: prints "server accept workload rps p50 p99 share wasted"
measure_nginx() { # accept_mutex workload
    local am=$1 wl=$2
    nginx_conf "$am"
    : >"$TMP/nginx/logs/access.log"
    "$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" 2>>"$TMP/nginx/logs/stderr" &
    local pid=$!
    PIDS+=("$pid")
    wait_port "$NGX_PORT"
    local t0 t1 cpu
    t0=$(worker_ticks "$pid")
    read -r rps p50 p99 n < <(run_wrk "http://127.0.0.1:$NGX_PORT/" "$wl")
    t1=$(worker_ticks "$pid")
    cpu=$(cpu_per_request "$t0" "$t1" "$n")
    stop "$pid" QUIT # graceful: flushes the access log
    local share
    share=$(sort "$TMP/nginx/logs/access.log" | uniq -c | awk -v n="$WORKERS" '
        { c[NR] = $1; if (min == "" || $1 < min) min = $1; if ($1 > max) max = $1 }
        END { if (NR < n) min = 0; if (max > 0) printf "%.2f", min / max; else print "n/a" }')
    echo "nginx accept_mutex=$am $wl $rps $p50 $p99 $share n/a $cpu"
}

measure_prefork() { # mode workload
    local mode=$1 wl=$2 json="$TMP/prefork-$1-$2.json"
    # shellcheck disable=SC2086 # PREFORK_ARGS is a list of flags
    "$BIN" --addr "127.0.0.1:$PORT" --workers "$WORKERS" --accept "$mode" --stats-json "$json" \
        ${PREFORK_ARGS:-} >"$TMP/prefork.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 100); do grep -q "listening on" "$TMP/prefork.log" && break; sleep 0.05; done
    local t0 t1 cpu
    t0=$(worker_ticks "$pid")
    read -r rps p50 p99 n < <(run_wrk "http://127.0.0.1:$PORT/" "$wl")
    t1=$(worker_ticks "$pid")
    cpu=$(cpu_per_request "$t0" "$t1" "$n")
    stop "$pid" INT
    local share wasted
    share=$(sed -n 's/.*"share_min_max": \([0-9.]*\).*/\1/p' "$json")
    wasted=$(sed -n 's/.*"wasted_per_1000": \([0-9.]*\).*/\1/p' "$json")
    echo "prefork --accept=$mode${PREFORK_ARGS:+_${PREFORK_ARGS// /_}} $wl $rps $p50 $p99 ${share:-?} ${wasted:-?} $cpu"
}

RESULTS="$TMP/results"
: >"$RESULTS"
for round in $(seq "$ROUNDS"); do
    for wl in $WORKLOADS; do
        for am in $NGINX_MODES; do
            log "round $round: nginx accept_mutex $am, $wl"
            measure_nginx "$am" "$wl" >>"$RESULTS"
        done
        for mode in $MODES; do
            log "round $round: prefork --accept $mode, $wl"
            measure_prefork "$mode" "$wl" >>"$RESULTS"
        done
    done
done

[ -n "${RAW:-}" ] && cp "$RESULTS" "$RAW"

# --- the table ---------------------------------------------------------------------------
echo
echo "wrk -t$THREADS -c$CONNS -d${DURATION}s --latency, $WORKERS workers, $(nproc) CPUs, loopback;" \
    "\"close\" = -H \"Connection: close\" (a new connection per request). $ROUNDS round(s)."
echo
echo "| server | accept | workload | req/s | × best nginx | p50 | p99 | worker share min/max | wasted wake-ups / 1000 conn | worker CPU µs / request |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
awk '
    { key = $1 " " $2 " " $3; n[key]++; row[key, n[key]] = $0; rps[key, n[key]] = $4
      if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
    END {
        # the median run (by req/s) of each row
        for (i = 1; i <= k; i++) {
            key = order[i]; m = n[key]
            for (a = 1; a <= m; a++) idx[a] = a
            for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++)
                if (rps[key, idx[b]] < rps[key, idx[a]]) { t = idx[a]; idx[a] = idx[b]; idx[b] = t }
            med[key] = row[key, idx[int((m + 1) / 2)]]
            split(med[key], f, " ")
            if (f[1] == "nginx" && f[4] > best[f[3]]) best[f[3]] = f[4]
        }
        for (i = 1; i <= k; i++) {
            split(med[order[i]], f, " ")
            ratio = best[f[3]] > 0 ? sprintf("%.2f", f[4] / best[f[3]]) : "n/a"
            share = f[7] ~ /^[0-9.]+$/ ? sprintf("%.2f", f[7]) : f[7]
            wasted = f[8] ~ /^[0-9.]+$/ ? sprintf("%.1f", f[8]) : f[8]
            printf "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], ratio, f[5], f[6], share, wasted, f[9]
        }
    }' "$RESULTS"
