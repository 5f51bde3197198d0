//! Go's spin gate: spin only on a multi-core machine (`runtime_canSpin`'s `ncpu > 1`).

#[cfg(not(gomutex_loom))]
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// 0 = not yet known, 1 = single core, 2 = multi-core.
#[cfg(not(gomutex_loom))]
static CORES: AtomicU8 = AtomicU8::new(0);

/// Does this machine have more than one CPU available to us? Read once and cached, like Go's
/// `ncpu`.
#[cfg(not(gomutex_loom))]
#[inline]
pub(crate) fn multicore() -> bool {
    match CORES.load(Relaxed) {
        0 => {
            let multi = std::thread::available_parallelism().map_or(1, |n| n.get()) > 1;
            CORES.store(if multi { 2 } else { 1 }, Relaxed);
            multi
        }
        c => c == 2,
    }
}
