#!/usr/bin/env bash
# Rate-limit comparison: the prefork example's --limit-req against nginx's limit_req, on
# loopback, both with 2 workers.
#
#   bash scripts/limit-compare.sh           # prints one markdown table on stdout
#
# Two cases, each a run of nginx and a run of the example, alternated ROUNDS times:
#   * addr: one key (every request comes from 127.0.0.1) at 1000 r/s:
#       nginx   limit_req_zone $binary_remote_addr zone=z:10m rate=1000r/s;
#       prefork --limit-req 1000 --limit-key addr
#   * uri: 1,000 keys at 10 r/s each, wrk requesting random paths /p1 ... /p1000 (a Lua
#     script):
#       nginx   limit_req_zone $uri zone=z:10m rate=10r/s;
#       prefork --limit-req 10 --limit-key uri
# Burst 0 in both (so nginx's delaying and nodelay agree). nginx serves a small file
# (try_files): its `return` answers in the rewrite phase, before limit_req runs. Both answer
# 503 over the limit. The table: accepted (2xx) and 503 responses per second, their ratios to
# nginx's in the same round, and wrk's socket errors.
#
# Environment (defaults in brackets): DURATION [4] seconds per run, THREADS [2] and CONNS [50]
# for wrk, WORKERS [2], PORT [18490] (the example; nginx uses PORT+1), ROUNDS [1], CASES
# [addr uri], NGINX [nginx from PATH or /usr/sbin/nginx]. wrk and nginx are installed from
# Debian if missing, as scripts/load-compare.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-4}
THREADS=${THREADS:-2}
CONNS=${CONNS:-50}
WORKERS=${WORKERS:-2}
PORT=${PORT:-18490}
NGX_PORT=$((PORT + 1))
ROUNDS=${ROUNDS:-1}
CASES=${CASES:-"addr uri"}

log() { echo "limit-compare: $*" >&2; }

# shellcheck source=scripts/servers.sh
. scripts/servers.sh
need_wrk_nginx

prefork_bin

TMP=$(mktemp -d /tmp/limit-compare.XXXXXX)
chmod 755 "$TMP" # nginx's workers (user nobody when started as root) read the file
PIDS=()
servers_trap

for p in "$PORT" "$NGX_PORT"; do
    port_free "$p" || { log "port $p is in use (set PORT=...)"; exit 1; }
done

# 1,000 paths, a seed per wrk thread.
cat >"$TMP/paths.lua" <<'EOF'
local n = 0
function setup(thread)
    n = n + 1
    thread:set("id", n)
end
function init(args)
    math.randomseed(os.time() * 1000 + id)
end
function request()
    return wrk.format("GET", "/p" .. math.random(1, 1000))
end
EOF

# run_wrk URL CASE -> "ok/s 503/s socket_errors"
run_wrk() {
    local url=$1 case=$2 out
    local script=()
    [ "$case" = uri ] && script=(-s "$TMP/paths.lua")
    out=$(timeout $((DURATION + 30)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" "${script[@]}" "$url")
    echo "$out" >>"$TMP/wrk.log"
    awk '
        / requests in / { n = $1; s = $4; sub(/s,?$/, "", s) }
        /Non-2xx or 3xx responses:/ { bad = $NF }
        /Socket errors:/ { err = $4 + $6 + $8 + $10; gsub(/,/, "", err) }
        END { printf "%.0f %.0f %d\n", (n - bad) / s, bad / s, err }' <<<"$out"
}

nginx_conf() { # case
    local key rate
    if [ "$1" = addr ]; then key='$binary_remote_addr' rate=1000r/s; else key='$uri' rate=10r/s; fi
    mkdir -p "$TMP/nginx/logs" "$TMP/nginx/tmp" "$TMP/nginx/www"
    printf ok >"$TMP/nginx/www/ok"
    cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes $WORKERS;
daemon off;
master_process on;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx/tmp/body;
    proxy_temp_path $TMP/nginx/tmp/proxy;
    fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
    uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
    scgi_temp_path $TMP/nginx/tmp/scgi;
    limit_req_zone $key zone=z:10m rate=$rate;
    limit_req_log_level info;
    server {
        listen 127.0.0.1:$NGX_PORT;
        root $TMP/nginx/www;
        location / { limit_req zone=z; try_files /ok =404; }
    }
}
EOF
}

measure_nginx() { # case
    nginx_conf "$1"
    "$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" 2>>"$TMP/nginx/logs/stderr" &
    local pid=$!
    PIDS+=("$pid")
    wait_port "$NGX_PORT"
    local r
    r=$(run_wrk "http://127.0.0.1:$NGX_PORT/p1" "$1")
    stop "$pid" QUIT
    echo "nginx $1 $r"
}

measure_prefork() { # case
    local rate=10
    [ "$1" = addr ] && rate=1000
    "$BIN" --addr "127.0.0.1:$PORT" --workers "$WORKERS" --limit-req "$rate" --limit-key "$1" \
        >"$TMP/prefork.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 100); do grep -q "listening on" "$TMP/prefork.log" && break; sleep 0.05; done
    local r
    r=$(run_wrk "http://127.0.0.1:$PORT/p1" "$1")
    stop "$pid" INT
    echo "prefork $1 $r"
}

RESULTS="$TMP/results"
: >"$RESULTS"
for round in $(seq "$ROUNDS"); do
    for c in $CASES; do
        log "round $round: $c"
        n=$(measure_nginx "$c")
        p=$(measure_prefork "$c")
        echo "$round $n" >>"$RESULTS"
        echo "$round $p" >>"$RESULTS"
    done
done

echo
echo "wrk -t$THREADS -c$CONNS -d${DURATION}s, $WORKERS workers each, $(nproc) CPUs, loopback;" \
    "load before: $(cut -d' ' -f1-3 /proc/loadavg). addr: one key at 1000 r/s; uri: 1,000 keys at 10 r/s."
echo
echo "| round | server | case | accepted/s | 503/s | accepted × nginx | all responses × nginx | socket errors |"
echo "|---:|---|---|---:|---:|---:|---:|---:|"
awk '
    $2 == "nginx" { ok[$1, $3] = $4; all[$1, $3] = $4 + $5 }
    { row[NR] = $0 }
    END {
        for (i = 1; i <= NR; i++) {
            split(row[i], f, " ")
            o = ok[f[1], f[3]]; a = all[f[1], f[3]]
            printf "| %s | %s | %s | %d | %d | %s | %s | %d |\n", f[1], f[2], f[3], f[4], f[5],
                (o > 0 ? sprintf("%.2f", f[4] / o) : "n/a"),
                (a > 0 ? sprintf("%.2f", (f[4] + f[5]) / a) : "n/a"), f[6]
        }
    }' "$RESULTS"
