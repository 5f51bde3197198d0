//! The facade through which the lock touches the machine: atomics, the spin hint, the
//! parking primitive and the fatal-error exit.
//!
//! A normal build uses `core` atomics, `std::time::Instant` and `parking_lot_core`. Built
//! with `--cfg gomutex_loom` (what `loom-tests/` does) every item here becomes its loom
//! counterpart or a loom mock, so the code that ships is the code loom checks:
//!
//! * atomics and the spin hint come from `loom`;
//! * the clock is a virtual tick counter a model advances by hand ("more than 1 ms passed"),
//!   so loom explores both normal and starvation mode without real time;
//! * parking ([`crate::park`]) is a mock of the `parking_lot_core` calls we use, built on loom's
//!   own `Mutex` and `Notify` (a real futex or `parking_lot_core::park` would hang the model).
//!
//! Built with `--cfg gomutex_coherence` (`scripts/coherence.sh`) the atomics count the
//! cache-line transfers a many-core machine would make (`coherence`, `sync/coherence.rs`):
//! threads run in lock-step, the spin hint and the yield are steps of that schedule, parking is
//! a mock on it and the starvation clock counts its rounds. Every item added here needs its
//! counterpart in `coherence` too.

#[cfg(not(any(gomutex_loom, gomutex_coherence)))]
pub(crate) use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(gomutex_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(gomutex_coherence)]
pub mod coherence;
#[cfg(gomutex_coherence)]
pub(crate) use coherence::{AtomicU32, AtomicU64};
#[cfg(gomutex_coherence)]
pub(crate) use core::sync::atomic::{fence, Ordering};

/// One CPU spin hint (`PAUSE` on x86). Under loom a yield, so loom's scheduler moves on; in
/// the coherence model a step.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(gomutex_coherence)]
    coherence::step();
    #[cfg(not(gomutex_loom))]
    core::hint::spin_loop();
    #[cfg(gomutex_loom)]
    loom::hint::spin_loop();
}

/// Let another runnable thread have this CPU (`sched_yield`). Under loom a yield to loom's
/// scheduler; in the coherence model a step.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(gomutex_coherence)]
    coherence::step();
    #[cfg(all(not(gomutex_loom), not(gomutex_coherence)))]
    std::thread::yield_now();
    #[cfg(gomutex_loom)]
    loom::thread::yield_now();
}

/// Go's `fatal` (`runtime.fatal`): print and abort; no unwinding, no recovery. Under loom a
/// panic, so a model can observe it.
#[cold]
#[inline(never)]
pub(crate) fn fatal(msg: &str) -> ! {
    #[cfg(gomutex_loom)]
    panic!("fatal error: {msg}");
    #[cfg(not(gomutex_loom))]
    {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "fatal error: {msg}");
        std::process::abort()
    }
}
