#!/usr/bin/env bash
# The coherence model's table (issue 35; DESIGN: "Many cores, on paper"): cache-line transfers
# per operation of gomutex's RwLock and of a one-shared-word reader count, for Go's RWMutex loop
# (ReadOnly, Write10000, Write100, Write10) at 2, 8, 32 and 128 threads, as a many-core machine
# would make them. One line per case:
#
#   coherence <workload> threads=<n> lock=<gomutex|shared-word> transfers/op=<x>
#
# Builds the crate with `--cfg gomutex_coherence` (the counting atomics of src/sync/coherence.rs)
# in target/coherence, so the normal build's artifacts stay. Deterministic: the same tree gives
# the same table on any machine. COHERENCE_OPS: operations per case, all threads together
# (default 40 000; about a minute in all). `--counts` also prints each case's raw counts.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg gomutex_coherence"
export CARGO_TARGET_DIR=target/coherence
cargo test --release --test coherence --no-run 2>/dev/null ||
    cargo test --release --test coherence --no-run
if [[ ${1:-} == --counts ]]; then
    cargo test -q --release --test coherence -- --ignored --exact table --nocapture 2>&1 |
        grep -E '^(coherence |  Counts)'
else
    cargo test -q --release --test coherence -- --ignored --exact table --nocapture 2>/dev/null |
        grep '^coherence '
fi
