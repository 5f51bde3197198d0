//! The parking primitive: a thin, safe-to-mock subset of `parking_lot_core`.
//!
//! The in-process waiter queue ([`crate::sema::ParkSema`]), the readers-writer lock
//! ([`crate::rwalgo`]) and the [`crate::Condvar`] only use these four calls. A normal build
//! forwards them to `parking_lot_core`; under `--cfg gomutex_coherence` a mock on the coherence
//! model's schedule (`crate::sync::coherence`); under `--cfg gomutex_loom` they are a loom mock (a queue behind a loom `Mutex`, one loom `Notify`
//! per parked thread) with the same contract: `validate`, `timed_out`, `filter` and `callback`
//! run while the queue for `key` is locked, so no unpark can slip between a successful
//! `validate` and the thread being queued.

/// What [`park`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParkResult {
    /// Woken by an unpark call, which passed this token.
    Unparked(usize),
    /// `validate` returned false: the thread never slept.
    Invalid,
    /// The deadline passed; `timed_out` has run and the thread is no longer queued.
    TimedOut,
}

/// What an unpark call did; handed to its `callback` while the queue is still locked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct UnparkResult {
    /// Threads woken.
    pub unparked_threads: usize,
}

/// A filter's verdict on one queued thread (queue order, oldest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FilterOp {
    /// Wake this thread and keep scanning.
    Unpark,
    /// Leave this thread queued and keep scanning.
    Skip,
    /// Leave this thread queued and stop scanning.
    Stop,
}

// The one switch between the real parking lot and the loom mock; both files define the same
// functions with the same contract (and `parked`, introspection for tests and models).
#[cfg_attr(not(any(gomutex_loom, gomutex_coherence)), path = "real.rs")]
#[cfg_attr(gomutex_loom, path = "loom.rs")]
#[cfg_attr(gomutex_coherence, path = "coherence.rs")]
mod imp;

#[cfg(gomutex_loom)]
pub use imp::let_deadlines_pass;
pub(crate) use imp::parked;
pub(crate) use imp::{park, unpark_all, unpark_filter};
