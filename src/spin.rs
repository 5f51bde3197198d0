//! The spin policy: when a contender may spin instead of sleeping, and how a round spins.
//!
//! Go's `sync.Mutex` spins through `runtime_canSpin`/`runtime_doSpin` (Go 1.19
//! `src/runtime/proc.go`, `sync_runtime_canSpin` and `procyield`): at most
//! [`ROUNDS`] rounds, only on a multi-core machine, each round [`HINTS_PER_ROUND`] `PAUSE`s.
//! Threads have no run queue to consult, so Go's "and other Ps are running" test has no
//! counterpart here. Under `--cfg gomutex_loom` a contender spins [`LOOM_ROUNDS`] round of one
//! yield, to keep the state space small.
//!
//! Every switch between the real policy and the loom one is in this file, so the algorithm
//! ([`crate::algo`]) reads without `cfg`s.

use std::time::Duration;

/// Go's `active_spin`: the most spin rounds a contender makes before it sleeps (per wake-up).
#[cfg_attr(gomutex_loom, allow(dead_code))]
pub(crate) const ROUNDS: u32 = 4;
/// Go's `active_spin_cnt`: `PAUSE` hints per round (`procyield(30)`).
#[cfg_attr(gomutex_loom, allow(dead_code))]
pub(crate) const HINTS_PER_ROUND: u32 = 30;
/// Spin rounds per wake-up under loom.
#[cfg_attr(not(gomutex_loom), allow(dead_code))]
pub(crate) const LOOM_ROUNDS: u32 = 1;
/// How often a timed-out waiter that may not leave the waiter count yet looks again whether it
/// may (it is waiting for a token that is a few instructions from being sent; see
/// `algo::wait_for_token_or_leave`).
pub(crate) const TOKEN_RECHECK: Duration = Duration::from_micros(50);

/// Should a contender spin in round `iter` (counted from 0 since it last woke)?
#[inline]
pub(crate) fn can_spin(iter: u32) -> bool {
    #[cfg(gomutex_loom)]
    {
        iter < LOOM_ROUNDS
    }
    #[cfg(not(gomutex_loom))]
    {
        iter < ROUNDS && multicore()
    }
}

/// One spin round: [`HINTS_PER_ROUND`] `PAUSE`s, blind, as Go's `procyield(30)`; one yield
/// under loom.
///
/// The round does not look at the lock word between hints. A spinner that polls the word
/// after every `PAUSE` (~31 ns on this project's machines) pulls its cache line away from the
/// holder, which then pays a transfer on its unlock and on its next lock: measured with two
/// threads in a `{lock; +1; unlock}` loop, polling made the lock ~2x slower than
/// `parking_lot` and blind rounds made it faster (see the README's figures). The caller reads
/// the word once after the round.
#[inline]
pub(crate) fn spin_round() {
    #[cfg(gomutex_loom)]
    crate::sync::spin_loop();
    #[cfg(not(gomutex_loom))]
    for _ in 0..HINTS_PER_ROUND {
        crate::sync::spin_loop();
    }
}

/// Does this machine have more than one CPU available to us? Read once and cached, like Go's
/// `ncpu` (`runtime_canSpin`'s `ncpu > 1`).
#[cfg(not(gomutex_loom))]
#[inline]
pub(crate) fn multicore() -> bool {
    use core::sync::atomic::{AtomicU8, Ordering::Relaxed};
    /// 0 = not yet known, 1 = single core, 2 = multi-core.
    static CORES: AtomicU8 = AtomicU8::new(0);
    match CORES.load(Relaxed) {
        0 => {
            let multi = std::thread::available_parallelism().map_or(1, |n| n.get()) > 1;
            CORES.store(if multi { 2 } else { 1 }, Relaxed);
            multi
        }
        c => c == 2,
    }
}
