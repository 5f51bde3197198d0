#!/usr/bin/env bash
# Portability, proven without the machines:
#   1. cargo check + clippy -D warnings of the library, its tests and examples for macOS,
#      Windows, FreeBSD and aarch64 Linux (cross-compiling std's metadata only; nothing links);
#   2. the MSRV: cargo check with the toolchain Cargo.toml's rust-version names;
#   3. the in-process tests under Miri *for* macOS and Windows (Miri interprets the target's
#      std and parking_lot_core's code for that OS, on Miri's shims of its APIs): on macOS the
#      subset of scripts/miri.sh plus tests/lock_api.rs; on Windows, where Miri cannot run
#      parking_lot_core's parking, the tests that never park.
# Installs what it needs (rustup targets, the MSRV toolchain, nightly + miri).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(x86_64-apple-darwin x86_64-pc-windows-gnu x86_64-unknown-freebsd aarch64-unknown-linux-gnu)
MSRV=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)

t0=$(date +%s)
step() { echo "== $* ($(( $(date +%s) - t0 )) s)"; }

rustup target add "${TARGETS[@]}"
for t in "${TARGETS[@]}"; do
    step "cross: check + clippy for $t (default features, then all targets and features)"
    cargo check --target "$t"
    cargo clippy --target "$t" -- -D warnings
    cargo clippy --target "$t" --all-targets --all-features -- -D warnings
done

# rust-version "1.95" means toolchain 1.95.0.
[[ $MSRV =~ ^[0-9]+\.[0-9]+$ ]] && MSRV="$MSRV.0"
step "MSRV: cargo +$MSRV check"
rustup toolchain list | grep -q "^$MSRV-" || rustup toolchain install "$MSRV" --profile minimal
cargo "+$MSRV" check --all-features --lib --tests --examples

rustup toolchain list | grep -q "^nightly" || rustup toolchain install nightly --profile minimal
rustup component add --toolchain nightly miri rust-src
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-permissive-provenance}"
# macOS: Miri shims the OS calls parking_lot_core parks with, so the whole in-process subset.
t=x86_64-apple-darwin
step "miri --target $t"
MIRI_TARGET="$t" bash scripts/miri.sh
step "miri --target $t: tests/lock_api.rs"
cargo +nightly miri test --target "$t" --features lock_api --test lock_api

# Windows: parking_lot_core looks its parking API up with GetModuleHandleA, which Miri does not
# shim, so only what never parks: the algorithm's unit tests (scripted queues, and many threads
# over a std Mutex+Condvar queue, which Miri shims on Windows) and the uncontended API tests.
t=x86_64-pc-windows-gnu
step "miri --target $t: algo and accept unit tests that never park"
cargo +nightly miri test --target "$t" --lib -- algo:: accept:: --skip shm --skip real_lock
step "miri --target $t: tests/std_api.rs, uncontended API subset"
cargo +nightly miri test --target "$t" --test std_api -- --exact \
    auto_traits_identical_to_std condvar_debug_matches_std \
    debug_output_matches_std_unlocked_locked_poisoned guard_display_and_debug_match_std \
    into_inner_get_mut_default_from size_is_small try_lock_would_block_like_std \
    mapped_guards_hold_the_lock_and_poison
step "cross: done"
