#!/usr/bin/env bash
# Run every multi-process and timing test binary N times and count the passes, to find tests
# that need luck. Builds once (release, all features), then runs each binary N times in a row,
# optionally beside K busy loops (`while :; do :; done`) that it starts and kills itself.
#
#   scripts/flaky.sh N [--busy K] [BINARY...]
#
# BINARY names a test target (shm_process, timed, ...; `lib` is the accept lock's unit tests);
# default: all of them. Prints "BINARY: passed X of N" per binary and keeps the output of each
# failed run in target/flaky/; exits 1 if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    echo "usage: $0 N [--busy K] [BINARY...]" >&2
    exit 2
}
[[ $# -ge 1 && $1 =~ ^[0-9]+$ ]] || usage
n=$1
shift
busy=0
bins=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --busy)
            [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || usage
            busy=$2
            shift 2
            ;;
        -*) usage ;;
        *)
            bins+=("$1")
            shift
            ;;
    esac
done
all=(shm_process shm_peers shm_condvar shm_chaos shm_torture shm_dict shm_stats shm_rwlock shm_rwlock_torture upstream timed fairness prefork accept_echo profile rwlock lib)
[[ ${#bins[@]} -gt 0 ]] || bins=("${all[@]}")

# Build once; map each target name to its executable from cargo's JSON messages.
declare -A exe
while IFS=$'\t' read -r name kind path; do
    [[ $kind == lib ]] && name=lib
    exe[$name]=$path
done < <(cargo test --release --all-features --no-run --message-format=json |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["target"]["kind"][0], m["executable"], sep="\t")
')
# Run copies, so that a rebuild meanwhile does not swap a binary between runs: the test
# binaries in $out/deps and the examples in $out/examples, as in target/release (tests/prefork
# finds its server at ../examples from its own binary).
out=target/flaky
rm -rf "$out/deps" "$out/examples"
mkdir -p "$out/deps" "$out/examples"
for b in "${bins[@]}"; do
    [[ -n ${exe[$b]:-} ]] || { echo "no test binary named $b" >&2; exit 2; }
    cp "${exe[$b]}" "$out/deps/$b"
    exe[$b]=$out/deps/$b
done
for e in target/release/examples/*; do
    [[ -f $e && -x $e && $(basename "$e") != *-* ]] && cp "$e" "$out/examples/"
done

pids=()
stop_busy() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}
trap stop_busy EXIT
for ((i = 0; i < busy; i++)); do
    bash -c 'while :; do :; done' &
    pids+=($!)
done

echo "== $n runs per binary beside $busy busy loop(s); $(uptime)"
failed=0
for b in "${bins[@]}"; do
    args=()
    # The library's unit tests: only the accept lock's (the rest are neither multi-process nor
    # timing tests).
    [[ $b == lib ]] && args=(accept::)
    pass=0
    start=$(date +%s)
    for ((r = 1; r <= n; r++)); do
        log="$out/$b.$r.log"
        if "${exe[$b]}" "${args[@]}" >"$log" 2>&1; then
            pass=$((pass + 1))
            rm -f "$log"
        else
            echo "   $b run $r failed (output in $log):"
            grep -E "FAILED|panicked|timed out" "$log" | head -5 | sed 's/^/     /'
        fi
    done
    echo "$b: passed $pass of $n ($(($(date +%s) - start)) s)"
    [[ $pass -eq $n ]] || failed=1
done
echo "== done; $(uptime)"
exit $failed
