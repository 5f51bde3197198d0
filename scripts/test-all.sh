#!/usr/bin/env bash
# Every test of the crate, in the order a failure is cheapest to find:
#   1. unit, integration (incl. multi-process and the kill torture test) and doc tests;
#   2. the benchmarks in test mode (each workload once, counters checked; benches/ is its own
#      crate, so criterion is never built for the library, its tests or examples);
#   3. every loom model (loom-tests/ is its own crate: it builds gomutex with --cfg gomutex_loom).
# This is the command README.md gives and .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test (all features, release)"
cargo test --release --all-features

echo "== benchmarks in test mode"
(cd benches && cargo test --release --benches)

echo "== loom models"
(cd loom-tests && cargo test --release)
