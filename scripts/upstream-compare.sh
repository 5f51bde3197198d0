#!/usr/bin/env bash
# Upstream comparison: the prefork example as a reverse proxy (--upstream, an UpstreamZone
# shared by its workers) against nginx's `upstream` with `zone`, on loopback, both with 2
# workers, in front of the same three backends, wrk as the client. A measuring tool, not a
# test: it is not run by CI.
#
#   bash scripts/upstream-compare.sh [--quick] [SECTION...]   # one markdown table on stdout
#
# Sections (default: all, in this order):
#   throughput  wrk with keep-alive to the proxy, the proxy with keep-alive to the backends
#               (nginx: `keepalive 64`), weights 1:1:1; nginx and the example alternated
#               ROUNDS times (the one started first alternates), median requests/s;
#   shares      weights 5:3:1: each backend's share of the requests, counted in its access
#               log, over all workers together;
#   kill        max_fails=MAX_FAILS fail_timeout=FAIL_TIMEOUT (ms, whole seconds: nginx's unit)
#               on every peer, weights 5:3:1; the weight-3 backend b2 is killed (SIGKILL)
#               KILL_AT seconds into the run. What still goes to it is what tcpdump sees to
#               its port afterwards: connection attempts (SYN) and requests written on
#               connections kept from before (data), grouped into bursts (packets less than
#               fail_timeout/2 apart): the first burst is what the proxy sends before it skips
#               the peer, each later one a probe after fail_timeout;
#   maxconns    max_conns=10 on one backend, a slow one (MC_DELAY ms per answer, a small
#               Python server that counts the requests it is answering and the connections
#               open to it at once), the other two fast; with 2 workers and with each count
#               in MC_WORKERS;
#   reload      RELOADS reloads during RELOAD_DURATION seconds (SIGHUP to the master; for
#               nginx that is what `nginx -s reload` sends), each swapping the upstream list
#               between {b1, b2} and {b2, b3}; per reload, how long after the signal the
#               peer just removed still answers and how long until the peer just added does
#               (from the backends' access logs, $msec), and the client's errors. The example
#               reads its list from `--config FILE` (lines `upstream HOST:PORT[,opts]`, `#`
#               comments) and re-reads it on SIGHUP; when `prefork --help` does not mention
#               `--config` its side is skipped (n/a).
#
# Backends: three nginx processes (`master_process off`, one process each, so that a SIGKILL
# closes the port), `return 200 "ok\n"`, keep-alive, an access log of `$msec` per request in
# the sections that count. Each run starts its own backends, proxy and wrk; every process the
# script starts is stopped when it exits (trap), also on ^C. Progress goes to stderr.
#
# The table: one row per figure, the example's value, nginx's, their ratio where it means
# something, the issue's target, and the 1-minute load average when the section started (the
# figures are only as good as the machine is quiet).
#
# --quick: short runs (the whole thing in well under a minute once the example is built), to
# see that the script works, not to measure.
#
# Environment (defaults in brackets; --quick in parentheses): THREADS [2] and CONNS [50] for
# wrk, WORKERS [2], PORT [18590] (the example; nginx PORT+1, backends PORT+10..12),
# DURATION [5] (2) and ROUNDS [5] (1) for throughput, SHARE_DURATION [10] (2),
# KILL_DURATION [12] (4), KILL_AT [3] (1), MAX_FAILS [3], FAIL_TIMEOUT [3000] (1000) ms,
# MC_DURATION [6] (2), MC_DELAY [20] ms, MC_WORKERS ["2 16"] ("2"), RELOAD_DURATION [20] (4),
# RELOADS [10] (3), PREFORK_ARGS [unset] (extra flags for every prefork run), PREFORK_BIN
# [unset] (a prefork binary built elsewhere, instead of building this tree's), KEEP [unset] (a
# directory to copy the logs to), NGINX [nginx from PATH or /usr/sbin/nginx]. wrk, nginx and
# tcpdump are installed from Debian if missing; python3 must be there (the maxconns backend).
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0
SECTIONS=()
for a in "$@"; do
    case $a in
        --quick) QUICK=1 ;;
        throughput | shares | kill | maxconns | reload) SECTIONS+=("$a") ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "upstream-compare: unknown argument $a (see --help)" >&2; exit 2 ;;
    esac
done
[ ${#SECTIONS[@]} -gt 0 ] || SECTIONS=(throughput shares kill maxconns reload)

q() { if [ "$QUICK" = 1 ]; then echo "$2"; else echo "$1"; fi; }
THREADS=${THREADS:-2}
CONNS=${CONNS:-50}
WORKERS=${WORKERS:-2}
PORT=${PORT:-18590}
NGX_PORT=$((PORT + 1))
BPORT=(0 $((PORT + 10)) $((PORT + 11)) $((PORT + 12))) # backends 1..3
DURATION=${DURATION:-$(q 5 2)}
ROUNDS=${ROUNDS:-$(q 5 1)}
SHARE_DURATION=${SHARE_DURATION:-$(q 10 2)}
KILL_DURATION=${KILL_DURATION:-$(q 12 4)}
KILL_AT=${KILL_AT:-$(q 3 1)}
MAX_FAILS=${MAX_FAILS:-3}
FAIL_TIMEOUT=${FAIL_TIMEOUT:-$(q 3000 1000)}
MC_DURATION=${MC_DURATION:-$(q 6 2)}
MC_DELAY=${MC_DELAY:-20}
MC_WORKERS=${MC_WORKERS:-$(q "2 16" 2)}
RELOAD_DURATION=${RELOAD_DURATION:-$(q 20 4)}
RELOADS=${RELOADS:-$(q 10 3)}
read -ra PREFORK_EXTRA <<<"${PREFORK_ARGS:-}"
# nginx's fail_timeout is in whole seconds (ngx_parse_time(..., 1) in ngx_http_upstream.c).
[ $((FAIL_TIMEOUT % 1000)) = 0 ] || { echo "upstream-compare: FAIL_TIMEOUT must be whole seconds (ms)" >&2; exit 2; }

log() { echo "upstream-compare: $*" >&2; }

# shellcheck source=scripts/servers.sh
. scripts/servers.sh
need_wrk_nginx
if ! command -v tcpdump >/dev/null && [[ " ${SECTIONS[*]} " == *" kill "* ]]; then
    log "installing tcpdump from Debian"
    DEBIAN_FRONTEND=noninteractive apt-get install -y tcpdump ||
        { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y tcpdump; }
fi
command -v python3 >/dev/null || { log "python3 is needed (the maxconns backend)"; exit 1; }

prefork_bin

TMP=$(mktemp -d /tmp/upstream-compare.XXXXXX)
chmod 755 "$TMP" # nginx's workers (user nobody when started as root) read below it
PIDS=()
keep_and_clean() {
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp -r "$TMP"/. "$KEEP"/ && log "logs kept in $KEEP"; fi
    cleanup
}
trap keep_and_clean EXIT
trap 'exit 130' INT TERM

for p in "$PORT" "$NGX_PORT" "${BPORT[@]:1}"; do
    port_free "$p" || { log "port $p is in use (set PORT=...)"; exit 1; }
done

ROWS="$TMP/rows" # section <TAB> figure <TAB> prefork <TAB> nginx <TAB> target <TAB> load
: >"$ROWS"
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$SECTION" "$1" "$2" "$3" "$4" "$LOAD" >>"$ROWS"; }
load1() { cut -d' ' -f1 /proc/loadavg; }
now() { date +%s.%N; }

# --- backends ------------------------------------------------------------------------------

# start_backend N logging(log|nolog): nginx as backend N on BPORT[N], one process.
declare -A BPID
start_backend() {
    local n=$1 d="$TMP/b$1" access=off
    rm -rf "$d"
    mkdir -p "$d/tmp"
    [ "$2" = log ] && access="$d/access.log t"
    cat >"$d/nginx.conf" <<EOF
daemon off;
master_process off;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 4096; }
http {
    log_format t '\$msec';
    access_log $access;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
    server {
        listen 127.0.0.1:${BPORT[$n]};
        location / { return 200 "ok\n"; }
    }
}
EOF
    "$NGINX" -p "$d" -c "$d/nginx.conf" 2>>"$d/stderr" &
    BPID[$n]=$!
    PIDS+=("${BPID[$n]}")
    wait_port "${BPORT[$n]}"
}

# start_slow_backend N DELAY_MS: the counting Python backend (maxconns).
start_slow_backend() {
    local n=$1 d="$TMP/b$1"
    rm -rf "$d"
    mkdir -p "$d"
    python3 "$TMP/slow.py" "${BPORT[$n]}" "$2" "$d/stats" 2>>"$d/stderr" &
    BPID[$n]=$!
    PIDS+=("${BPID[$n]}")
    wait_port "${BPORT[$n]}"
}

start_backends() { # log|nolog
    local n
    for n in 1 2 3; do start_backend "$n" "$1"; done
}
stop_backends() {
    local n
    for n in 1 2 3; do
        if [ -n "${BPID[$n]:-}" ]; then stop "${BPID[$n]}" TERM; fi
        BPID[$n]=
    done
}
count() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }

cat >"$TMP/slow.py" <<'EOF'
# An HTTP/1.1 keep-alive backend answering "ok" after DELAY ms; on SIGTERM it writes the most
# requests it was answering at once, the most connections open at once, and the requests.
import asyncio, signal, sys

port, delay, out = int(sys.argv[1]), float(sys.argv[2]) / 1000.0, sys.argv[3]
st = {"conns": 0, "max_conns": 0, "busy": 0, "max_busy": 0, "requests": 0}
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n"

async def serve(r, w):
    st["conns"] += 1
    st["max_conns"] = max(st["max_conns"], st["conns"])
    busy = False
    try:
        while True:
            await r.readuntil(b"\r\n\r\n")
            busy = True
            st["busy"] += 1
            st["max_busy"] = max(st["max_busy"], st["busy"])
            st["requests"] += 1
            if delay > 0:
                await asyncio.sleep(delay)
            w.write(ANSWER)
            await w.drain()
            st["busy"] -= 1
            busy = False
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        if busy:
            st["busy"] -= 1
        st["conns"] -= 1
        w.close()

async def main():
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=1024)
    async with server:
        await stop.wait()
    with open(out, "w") as f:
        f.write("%d %d %d\n" % (st["max_busy"], st["max_conns"], st["requests"]))

asyncio.run(main())
EOF

# --- the two proxies -------------------------------------------------------------------------
# A peer is "N opt=value ...", N a backend number, options as prefork's --upstream takes them
# (fail_timeout in ms; backup, down bare).

nginx_servers() { # peers...
    local spec n opts s x
    for spec in "$@"; do
        read -ra opts <<<"$spec"
        n=${opts[0]}
        s="server 127.0.0.1:${BPORT[$n]}"
        for x in "${opts[@]:1}"; do
            case $x in
                fail_timeout=*) s+=" fail_timeout=$((${x#fail_timeout=} / 1000))s" ;; # whole seconds
                *) s+=" $x" ;;
            esac
        done
        echo "        $s;"
    done
}
prefork_upstream() { # peer -> HOST:PORT,opts
    local opts x
    read -ra opts <<<"$1"
    local s="127.0.0.1:${BPORT[${opts[0]}]}"
    for x in "${opts[@]:1}"; do s+=",$x"; done
    echo "$s"
}

nginx_conf() { # workers peers...
    local d="$TMP/nginx" w=$1
    shift
    mkdir -p "$d/logs" "$d/tmp"
    cat >"$d/nginx.conf.new" <<EOF
worker_processes $w;
daemon off;
master_process on;
pid $d/nginx.pid;
error_log $d/logs/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
    upstream backends {
        zone backends 64k;
$(nginx_servers "$@")
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$NGX_PORT;
        location / {
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
    mv "$d/nginx.conf.new" "$d/nginx.conf" # a reload reads the whole new file
}

# start_proxy nginx|prefork workers peers...: sets PROXY_PID and URL.
start_proxy() {
    local who=$1 w=$2
    shift 2
    if [ "$who" = nginx ]; then
        nginx_conf "$w" "$@"
        "$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" 2>>"$TMP/nginx/logs/stderr" &
        PROXY_PID=$!
        PIDS+=("$PROXY_PID")
        wait_port "$NGX_PORT"
        URL="http://127.0.0.1:$NGX_PORT/"
    else
        local args=() spec
        if [ "${1:-}" = --config ]; then
            args=(--config "$2")
        else
            for spec in "$@"; do args+=(--upstream "$(prefork_upstream "$spec")"); done
        fi
        "$BIN" --addr "127.0.0.1:$PORT" --workers "$w" "${PREFORK_EXTRA[@]}" "${args[@]}" \
            >"$TMP/prefork.log" 2>&1 &
        PROXY_PID=$!
        PIDS+=("$PROXY_PID")
        for _ in $(seq 100); do grep -q "listening on" "$TMP/prefork.log" && break; sleep 0.05; done
        wait_port "$PORT"
        URL="http://127.0.0.1:$PORT/"
    fi
}
stop_proxy() {
    if [ "$1" = nginx ]; then stop "$PROXY_PID" QUIT; else stop "$PROXY_PID" INT; fi
}

# wrk_run URL SECONDS OUT: wrk's output in OUT (also appended to wrk.log).
wrk_run() {
    timeout $(($2 + 30)) wrk -t"$THREADS" -c"$CONNS" -d"$2s" "$1" >"$3" 2>&1 || true
    cat "$3" >>"$TMP/wrk.log"
}
# wrk_stats OUT -> "requests requests/s errors" (errors: non-2xx answers and socket errors)
wrk_stats() {
    awk '
        / requests in / { n = $1; s = $4; sub(/s,?$/, "", s) }
        /Non-2xx or 3xx responses:/ { bad = $NF }
        /Socket errors:/ { err = $4 + $6 + $8 + $10 }
        END { printf "%d %.0f %d\n", n, (s > 0 ? n / s : 0), bad + err }' "$1"
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.0f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# --- sections --------------------------------------------------------------------------------

section_throughput() {
    local peers=("1" "2" "3") r who order s
    start_backends nolog
    : >"$TMP/tp.prefork"
    : >"$TMP/tp.nginx"
    for r in $(seq "$ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then order="nginx prefork"; else order="prefork nginx"; fi
        for who in $order; do
            log "throughput round $r: $who"
            start_proxy "$who" "$WORKERS" "${peers[@]}"
            wrk_run "$URL" "$DURATION" "$TMP/wrk.out"
            stop_proxy "$who"
            s=$(wrk_stats "$TMP/wrk.out")
            echo "$s" >>"$TMP/tp.$who"
        done
    done
    stop_backends
    local pm nm pe ne
    pm=$(cut -d' ' -f2 "$TMP/tp.prefork" | median)
    nm=$(cut -d' ' -f2 "$TMP/tp.nginx" | median)
    pe=$(awk '{ e += $3 } END { print e + 0 }' "$TMP/tp.prefork")
    ne=$(awk '{ e += $3 } END { print e + 0 }' "$TMP/tp.nginx")
    row "requests/s, keep-alive both sides, median of $ROUNDS" "$pm" "$nm" "≥ 1.0× nginx"
    row "requests/s, each round" "$(cut -d' ' -f2 "$TMP/tp.prefork" | paste -sd/)" \
        "$(cut -d' ' -f2 "$TMP/tp.nginx" | paste -sd/)" ""
    row "client errors, all rounds" "$pe" "$ne" "0"
}

section_shares() {
    local peers=("1 weight=5" "2 weight=3" "3 weight=1") who
    for who in nginx prefork; do
        log "shares: $who"
        start_backends log
        start_proxy "$who" "$WORKERS" "${peers[@]}"
        wrk_run "$URL" "$SHARE_DURATION" "$TMP/wrk.out"
        stop_proxy "$who"
        stop_backends
        echo "$(count "$TMP/b1/access.log") $(count "$TMP/b2/access.log") $(count "$TMP/b3/access.log") $(wrk_stats "$TMP/wrk.out")" >"$TMP/sh.$who"
    done
    # shares in percent, and the largest distance from 5:3:1 in percentage points
    local i w
    for i in 1 2 3; do
        w=$(((i == 1) * 5 + (i == 2) * 3 + (i == 3)))
        row "b$i (weight $w): share of requests, % (5:3:1 = $(awk -v w="$w" 'BEGIN { printf "%.1f", 100 * w / 9 }'))" \
            "$(awk -v i="$i" '{ printf "%.2f", 100 * $i / ($1 + $2 + $3) }' "$TMP/sh.prefork")" \
            "$(awk -v i="$i" '{ printf "%.2f", 100 * $i / ($1 + $2 + $3) }' "$TMP/sh.nginx")" ""
    done
    # shellcheck disable=SC2016 # an awk program
    local dev='{ t = $1 + $2 + $3; m = 0; split("5 3 1", w, " ")
        for (i = 1; i <= 3; i++) { d = 100 * $i / t - 100 * w[i] / 9; if (d < 0) d = -d; if (d > m) m = d }
        printf "%.2f", m }'
    row "largest distance from 5:3:1, percentage points" "$(awk "$dev" "$TMP/sh.prefork")" \
        "$(awk "$dev" "$TMP/sh.nginx")" "≤ 2"
    row "requests counted at the backends" "$(awk '{ print $1 + $2 + $3 }' "$TMP/sh.prefork")" \
        "$(awk '{ print $1 + $2 + $3 }' "$TMP/sh.nginx")" ""
    row "client errors" "$(awk '{ print $6 }' "$TMP/sh.prefork")" "$(awk '{ print $6 }' "$TMP/sh.nginx")" "0"
}

# kill_stats PACKETS KILL_TIME -> "connects bursts first_connects first_kept first_end_ms
# later_max_connects min_gap_ms kept_after": PACKETS is tcpdump's output (to b2, flags [S]:
# a connection attempt, [P.]: a request on a kept connection; from b2: its answers). Times
# count from b2's last answer (its death), or KILL_TIME if it sent none; bursts are packets
# less than fail_timeout/2 apart.
kill_stats() {
    awk -v k="$2" -v ft="$FAIL_TIMEOUT" -v from="127.0.0.1.${BPORT[2]}" '
        FNR == NR { if ($3 == from && $1 + 0 > death) death = $1 + 0; next }
        FNR == 1 && death > 0 { k = death }
        $3 == from { next }
        { t = $1 + 0; if (t <= k) next; ms = (t - k) * 1000; syn = ($0 ~ /Flags \[S\]/)
          if (!n++ || ms - last > ft / 2) { b++; start[b] = ms }
          if (syn) { s[b]++; conns++ } else { d[b]++; kept++ }
          end_[b] = ms; last = ms }
        END {
            later = 0; gap = "n/a"
            for (i = 2; i <= b; i++) {
                if (s[i] > later) later = s[i]
                g = start[i] - end_[i - 1]; if (gap == "n/a" || g < gap) gap = g
            }
            printf "%d %d %d %d %s %d %s %d\n", conns, b, s[1], d[1], (b ? sprintf("%.0f", end_[1]) : "n/a"),
                later, (gap == "n/a" ? gap : sprintf("%.0f", gap)), kept
        }' "$1" "$1"
}

section_kill() {
    local o="max_fails=$MAX_FAILS fail_timeout=$FAIL_TIMEOUT"
    local peers=("1 weight=5 $o" "2 weight=3 $o" "3 weight=1 $o") who k wpid
    for who in nginx prefork; do
        log "kill: $who (b2 killed after ${KILL_AT}s)"
        start_backends nolog
        start_proxy "$who" "$WORKERS" "${peers[@]}"
        wrk_run "$URL" "$KILL_DURATION" "$TMP/wrk.out" &
        wpid=$!
        sleep "$KILL_AT"
        # From just before the kill (a capture of all the traffic would slow the run down):
        # connection attempts (SYN) and requests on kept connections (data) to b2.
        # b2's own answers (to see when it died) too.
        tcpdump -i lo -n -tt -l -U "(dst port ${BPORT[2]} and (tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn or tcp[tcpflags] & tcp-push != 0)) or (src port ${BPORT[2]} and tcp[tcpflags] & tcp-push != 0)" \
            >"$TMP/syn.$who" 2>"$TMP/tcpdump.err" &
        local tpid=$!
        PIDS+=("$tpid")
        for _ in $(seq 100); do grep -q "listening on" "$TMP/tcpdump.err" && break; sleep 0.02; done
        k=$(now)
        kill -KILL "${BPID[2]}"
        wait "$wpid" || true
        stop "$tpid" INT
        stop_proxy "$who"
        stop_backends
        echo "$(kill_stats "$TMP/syn.$who" "$k") $(wrk_stats "$TMP/wrk.out")" >"$TMP/kill.$who"
    done
    f() { awk -v i="$1" '{ print $i }' "$TMP/kill.$2"; }
    row "client errors (b2 killed at ${KILL_AT}s of ${KILL_DURATION}s)" "$(f 11 prefork)" "$(f 11 nginx)" "≤ nginx"
    row "first burst to b2: connection attempts" "$(f 3 prefork)" "$(f 3 nginx)" "≤ max_fails = $MAX_FAILS"
    row "first burst to b2: requests on kept connections" "$(f 4 prefork)" "$(f 4 nginx)" ""
    row "... its last packet, ms after b2's last answer" "$(f 5 prefork)" "$(f 5 nginx)" ""
    row "later bursts (probes after fail_timeout = ${FAIL_TIMEOUT} ms)" "$(($(f 2 prefork) - 1))" "$(($(f 2 nginx) - 1))" ""
    row "... most connection attempts in one" "$(f 6 prefork)" "$(f 6 nginx)" "1"
    row "... shortest gap between bursts, ms" "$(f 7 prefork)" "$(f 7 nginx)" "≥ fail_timeout"
    row "to b2 after the kill, all: connection attempts / requests on kept connections" \
        "$(f 1 prefork) / $(f 8 prefork)" "$(f 1 nginx) / $(f 8 nginx)" ""
    row "requests/s during the run" "$(f 10 prefork)" "$(f 10 nginx)" ""
}

section_maxconns() {
    local peers=("1 max_conns=10" "2" "3") who w
    for w in $MC_WORKERS; do
        for who in nginx prefork; do
            log "maxconns: $who, $w workers"
            start_slow_backend 1 "$MC_DELAY"
            start_backend 2 nolog
            start_backend 3 nolog
            start_proxy "$who" "$w" "${peers[@]}"
            wrk_run "$URL" "$MC_DURATION" "$TMP/wrk.out"
            stop_proxy "$who"
            stop_backends
            echo "$(cat "$TMP/b1/stats") $(wrk_stats "$TMP/wrk.out")" >"$TMP/mc.$who.$w"
        done
        f() { awk -v i="$1" '{ print $i }' "$TMP/mc.$2.$w"; }
        row "$w workers: most requests in flight at b1 (max_conns=10, ${MC_DELAY} ms answers)" \
            "$(f 1 prefork)" "$(f 1 nginx)" "≤ 10"
        row "$w workers: most connections open to b1" "$(f 2 prefork)" "$(f 2 nginx)" ""
        row "$w workers: requests answered by b1 / by all, client errors" \
            "$(f 3 prefork) / $(f 4 prefork), $(f 6 prefork)" "$(f 3 nginx) / $(f 4 nginx), $(f 6 nginx)" ""
    done
}

# reload_stats WHO -> "max_removed_ms median_removed_ms max_added_ms median_added_ms" over the
# reloads in $TMP/reloads.WHO (lines: time list), from the backends' access logs.
reload_stats() {
    local who=$1
    awk '
        FILENAME ~ /reloads/ { n++; t[n] = $1; l[n] = $2; next }
        { k = split(FILENAME, p, "/"); b = substr(p[k - 1], 2); hits[b, ++c[b]] = $1 }
        END {
            for (i = 1; i <= n; i++) {
                hi = (i < n) ? t[i + 1] : 1e18
                if (l[i] == "B") { gone = 1; new = 3 } else { gone = 3; new = 1 }
                lastold = 0; firstnew = -1
                for (j = 1; j <= c[gone]; j++) {
                    h = hits[gone, j]
                    if (h >= t[i] && h < hi && (h - t[i]) * 1000 > lastold) lastold = (h - t[i]) * 1000
                }
                for (j = 1; j <= c[new]; j++) {
                    h = hits[new, j]
                    if (h >= t[i] && h < hi && (firstnew < 0 || (h - t[i]) * 1000 < firstnew)) firstnew = (h - t[i]) * 1000
                }
                print lastold, firstnew
            }
        }' "$TMP/reloads.$who" "$TMP"/b[123]/access.log >"$TMP/rl.$who"
    awk '{ if ($1 > a) a = $1; if ($2 < 0 || $2 > b) b = ($2 < 0 ? 1e9 : $2) }
        END { printf "%.0f %.0f\n", a, b }' "$TMP/rl.$who"
}

section_reload() {
    local listA=("1" "2") listB=("2" "3") who i
    local gap
    gap=$(awk -v d="$RELOAD_DURATION" -v n="$RELOADS" 'BEGIN { printf "%.3f", d / (n + 1) }')
    local has_config=1 help
    help=$("$BIN" --help 2>&1 || true) # (not a pipe into grep -q: prefork dies of the early close)
    grep -q -- --config <<<"$help" || has_config=0
    for who in nginx prefork; do
        if [ "$who" = prefork ] && [ "$has_config" = 0 ]; then
            log "reload: prefork skipped: \`prefork --help\` does not mention --config"
            continue
        fi
        log "reload: $who, $RELOADS reloads in ${RELOAD_DURATION}s"
        start_backends log
        local cfg="$TMP/prefork.conf"
        write_list() { # A|B
            local peers=("${listA[@]}") s
            [ "$1" = B ] && peers=("${listB[@]}")
            if [ "$who" = nginx ]; then
                nginx_conf "$WORKERS" "${peers[@]}"
            else
                { echo "# upstream-compare: list $1"; for s in "${peers[@]}"; do echo "upstream $(prefork_upstream "$s")"; done; } >"$cfg.new"
                mv "$cfg.new" "$cfg"
            fi
        }
        if [ "$who" = nginx ]; then
            start_proxy nginx "$WORKERS" "${listA[@]}"
        else
            write_list A
            start_proxy prefork "$WORKERS" --config "$cfg"
        fi
        : >"$TMP/reloads.$who"
        wrk_run "$URL" "$RELOAD_DURATION" "$TMP/wrk.out" &
        local wpid=$! l=A
        for i in $(seq "$RELOADS"); do
            sleep "$gap"
            if [ "$l" = A ]; then l=B; else l=A; fi
            write_list "$l"
            echo "$(now) $l" >>"$TMP/reloads.$who"
            kill -HUP "$PROXY_PID"
        done
        wait "$wpid" || true
        stop_proxy "$who"
        stop_backends
        echo "$(reload_stats "$who") $(wrk_stats "$TMP/wrk.out")" >"$TMP/reload.$who"
    done
    f() { if [ -f "$TMP/reload.$2" ]; then awk -v i="$1" '{ print $i }' "$TMP/reload.$2"; else echo n/a; fi; }
    row "client errors over $RELOADS reloads in ${RELOAD_DURATION}s" "$(f 5 prefork)" "$(f 5 nginx)" "0"
    row "removed peer still answering, ms after the signal (worst reload)" "$(f 1 prefork)" "$(f 1 nginx)" "≤ 100"
    row "added peer first answering, ms after the signal (worst reload)" "$(f 2 prefork)" "$(f 2 nginx)" "≤ 100"
    row "requests/s during the run" "$(f 4 prefork)" "$(f 4 nginx)" ""
}

for SECTION in "${SECTIONS[@]}"; do
    LOAD=$(load1)
    log "section $SECTION (load $LOAD)"
    "section_$SECTION"
done

echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'): wrk -t$THREADS -c$CONNS, $WORKERS workers each (unless said), $(nproc) CPUs," \
    "loopback, backends: 3 nginx processes (one each)$([ "$QUICK" = 1 ] && echo ', --quick: not a measurement')."
echo
echo "| section | figure | prefork | nginx | prefork ÷ nginx | target | load |"
echo "|---|---|---:|---:|---:|---|---:|"
awk -F'\t' '{
    ratio = ""
    if ($3 ~ /^[0-9.]+$/ && $4 ~ /^[0-9.]+$/ && $4 > 0 && $2 ~ /requests\/s/) ratio = sprintf("%.2f", $3 / $4)
    printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, ratio, $5, $6
}' "$ROWS"
