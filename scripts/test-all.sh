#!/usr/bin/env bash
# Every test of the crate, in the order a failure is cheapest to find:
#   1. unit, integration (incl. multi-process and the kill torture test) and doc tests;
#   2. the benchmarks in test mode (each workload once, counters checked; benches/ is its own
#      crate, so criterion is never built for the library, its tests or examples);
#   3. the derive macros (derive/ is its own crate: positive tests with gomutex's `derive`
#      feature, and trybuild compile-fail tests of what they refuse);
#   4. every loom model (loom-tests/ is its own crate: it builds gomutex with --cfg gomutex_loom).
# This is the command README.md gives and .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test (all features, release)"
cargo test --release --all-features

echo "== benchmarks in test mode"
(cd benches && cargo test --release --benches)
# The mutex profile's cost bench needs gomutex's `profile` feature (off in the others).
(cd benches && cargo test --release --features profile --bench profile)

echo "== derive macros (positive and compile-fail tests)"
(cd derive && cargo test --release)

echo "== loom models"
(cd loom-tests && cargo test --release)
