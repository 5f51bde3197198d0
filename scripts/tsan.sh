#!/usr/bin/env bash
# ThreadSanitizer on the in-process lock: std, parking_lot_core and gomutex rebuilt with
# -Zsanitizer=thread (-Zbuild-std), so every atomic and every plain access is tracked. TSAN
# checks the executions that really happen (unlike loom, which enumerates them), at full
# volume and native speed, with real futex parking.
#
# Runs: tests/stress.rs, tests/std_api.rs, tests/timed.rs, tests/queue_discipline.rs, the
# RwLock's tests/rwlock.rs and tests/rwlock_std_api.rs, and the lib
# unit tests, TSAN_REPEAT (default 3) times, all without shared memory (fork(2) of a TSAN process
# and cross-process atomics are outside what TSAN models). parking_lot_core detects TSAN itself (cfg tsan_enabled) and replaces its
# one fence, which TSAN does not model, by an acquire load.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup toolchain list | grep -q "^nightly" || rustup toolchain install nightly --profile minimal
rustup component add --toolchain nightly rust-src

target=$(rustc +nightly -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Zsanitizer=thread"
# Report every race, and fail the test binary on the first report.
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}"
t0=$(date +%s)

tests=(--test stress --test std_api --test timed --test queue_discipline --test rwlock
    --test rwlock_std_api --lib)
echo "== tsan: build ($target)"
cargo +nightly test -Zbuild-std --target "$target" --release --no-run "${tests[@]}"

# The tests take seconds under TSAN; repeat them, each run is a different set of interleavings.
for i in $(seq "${TSAN_REPEAT:-3}"); do
    echo "== tsan: run $i ($(( $(date +%s) - t0 )) s)"
    cargo +nightly test -Zbuild-std --target "$target" --release "${tests[@]}" -- --skip shm --skip dict --skip upstream
done

echo "== tsan: done ($(( $(date +%s) - t0 )) s)"
