#!/usr/bin/env bash
# Every test of the crate, in the order a failure is cheapest to find:
#   1. unit, integration (incl. multi-process and the kill torture test) and doc tests;
#   2. the benchmarks in test mode (each workload once, counters checked; benches/ is its own
#      crate, so criterion is never built for the library, its tests or examples);
#   3. the derive macros (derive/ is its own crate: positive tests with gomutex's `derive`
#      feature, and trybuild compile-fail tests of what they refuse);
#   4. every loom model (loom-tests/ is its own crate: it builds gomutex with --cfg gomutex_loom);
#   5. the coherence model's own tests (tests/coherence.rs, built with --cfg gomutex_coherence in
#      target/coherence; the full table is scripts/coherence.sh).
# This is the command README.md gives and .ci/run runs.
#
# Each part's whole output goes to target/test-all/PART.log; the terminal gets one line per
# test binary (its libtest `test result:` counts), the whole log of a part that fails, and last
# a grand total over everything that ran: `total: N passed, N failed, N skipped` (skipped =
# ignored). A binary with no libtest summary (a benchmark's own main in test mode) counts as one
# test, passed if it exited 0; a part that fails with no failed test (a build error) counts as
# one failed test. A failing part does not stop the others; the script then exits 1.
set -uo pipefail
cd "$(dirname "$0")/.."

logs=$PWD/target/test-all
mkdir -p "$logs"
passed=0 failed=0 skipped=0
failed_parts=()

# One line per test binary of a `cargo test` log, as it streams; at the end, "PASSED FAILED
# SKIPPED" into the file $counts.
# shellcheck disable=SC2016 # awk's own $fields
summary='
function report(name, p, f, s, time) {
    printf "   %-44s %5d passed, %d failed, %d skipped%s\n", name, p, f, s, time
    fflush()
    np += p; nf += f; ns += s
}
function close_binary() {
    if (binary != "" && !summed) report(binary, !crashed, crashed, 0, "  (no libtest summary)")
    binary = ""
}
/^ +Running / { close_binary(); binary = ($2 == "unittests") ? $3 : $2; summed = crashed = 0 }
/^ +Doc-tests / { close_binary(); binary = "doc-tests " $2; summed = crashed = 0 }
/^test result: / && $5 == "passed;" && $7 == "failed;" && $9 == "ignored;" {
    report(binary, $4, $6, $8, "  (" $NF ")")
    summed = 1
}
/^error: .* failed, to rerun pass / { crashed = 1 }
END { close_binary(); print np + 0, nf + 0, ns + 0 > counts }
'

# part NAME DIR ARGS...: `cargo test --no-fail-fast ARGS` inside DIR, summed into the totals.
part() {
    local name=$1 dir=$2
    shift 2
    local log=$logs/$name.log counts=$logs/$name.counts p f s
    echo "== $name: (cd $dir && cargo test --no-fail-fast $*)"
    (cd "$dir" && cargo test --no-fail-fast "$@") 2>&1 | tee "$log" | awk -v counts="$counts" "$summary"
    local rc=${PIPESTATUS[0]}
    read -r p f s <"$counts"
    if [[ $rc -ne 0 ]]; then
        echo "   FAILED: cargo exited with $rc; its whole output ($log):"
        sed 's/^/   | /' "$log"
        failed_parts+=("$name")
        [[ $f -gt 0 ]] || f=1
    fi
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}

part lib-integration-doc . --release --all-features

part benches benches --release --benches
# The mutex profile's cost bench needs gomutex's `profile` feature (off in the others).
part bench-profile benches --release --features profile --bench profile

part derive derive --release

part loom loom-tests --release

RUSTFLAGS="${RUSTFLAGS:-} --cfg gomutex_coherence" CARGO_TARGET_DIR=target/coherence \
    part coherence . --release --test coherence

[[ ${#failed_parts[@]} -eq 0 ]] || echo "failed parts: ${failed_parts[*]} (logs in $logs)"
echo "total: $passed passed, $failed failed, $skipped skipped"
[[ ${#failed_parts[@]} -eq 0 ]]
