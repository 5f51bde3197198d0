//! The clock behind Go's 1 ms starvation rule.
//!
//! Go reads the monotonic clock only on the blocking path: once before a waiter's first sleep
//! and once after every wake-up, never on the fast path or while spinning. [`Clock`] is that
//! seam. [`Monotonic`] is the real one; under `--cfg gomutex_loom` it is a virtual clock whose
//! ticks a model advances by hand, each tick meaning "more than the threshold has passed".

/// Go's `starvationThresholdNs`: a waiter that has waited longer than this (strictly) since its
/// first sleep switches the lock to starvation mode.
pub const STARVATION_THRESHOLD: core::time::Duration = core::time::Duration::from_millis(1);

/// A deadline `timeout` from now, or `None` (wait forever) if that overflows `Instant`: how
/// every timed call (`try_lock_for`, `wait_timeout`, `open_timeout`, …) turns its timeout into
/// the deadline it waits until.
pub(crate) fn deadline_after(timeout: core::time::Duration) -> Option<std::time::Instant> {
    std::time::Instant::now().checked_add(timeout)
}

/// A source of time for the starvation rule.
pub trait Clock {
    /// A point in time.
    type Instant: Copy;
    /// Now.
    fn now() -> Self::Instant;
    /// Has strictly more than [`STARVATION_THRESHOLD`] passed since `since`?
    fn starving_since(since: Self::Instant) -> bool;
    /// [`starving_since`](Self::starving_since) and, from the same clock read, the nanoseconds
    /// since `since` (0 from a clock that does not measure them, such as a model's): a waiter's
    /// sleep, for a lock's statistics, at no extra clock read.
    #[inline]
    fn starving_since_ns(since: Self::Instant) -> (bool, u64) {
        (Self::starving_since(since), 0)
    }
}

/// The system's monotonic clock (`CLOCK_MONOTONIC` on Linux, via `std::time::Instant`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Monotonic;

#[cfg(not(any(gomutex_loom, gomutex_coherence)))]
impl Clock for Monotonic {
    type Instant = std::time::Instant;
    #[inline]
    fn now() -> Self::Instant {
        std::time::Instant::now()
    }
    #[inline]
    fn starving_since(since: Self::Instant) -> bool {
        since.elapsed() > STARVATION_THRESHOLD
    }
    #[inline]
    fn starving_since_ns(since: Self::Instant) -> (bool, u64) {
        let waited = since.elapsed();
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        (waited > STARVATION_THRESHOLD, ns)
    }
}

/// In the coherence model: the rounds of its schedule, each standing for
/// `crate::sync::coherence::NS_PER_ROUND` ns.
#[cfg(gomutex_coherence)]
impl Clock for Monotonic {
    type Instant = u64;
    fn now() -> u64 {
        crate::sync::coherence::rounds()
    }
    fn starving_since(since: u64) -> bool {
        let threshold =
            STARVATION_THRESHOLD.as_nanos() as u64 / crate::sync::coherence::NS_PER_ROUND;
        crate::sync::coherence::rounds().saturating_sub(since) > threshold
    }
}

#[cfg(gomutex_loom)]
loom::lazy_static! {
    static ref TICKS: loom::sync::atomic::AtomicU64 = loom::sync::atomic::AtomicU64::new(0);
}

#[cfg(gomutex_loom)]
impl Clock for Monotonic {
    type Instant = u64;
    fn now() -> u64 {
        TICKS.load(crate::sync::Ordering::SeqCst)
    }
    fn starving_since(since: u64) -> bool {
        TICKS.load(crate::sync::Ordering::SeqCst) > since
    }
}

/// Advance the virtual clock by one tick: every waiter that went to sleep before this call
/// counts as having waited more than [`STARVATION_THRESHOLD`]. Only under `--cfg gomutex_loom`.
#[cfg(gomutex_loom)]
pub fn advance_virtual_clock() {
    TICKS.fetch_add(1, crate::sync::Ordering::SeqCst);
}
