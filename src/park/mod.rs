//! The parking primitive: a thin, safe-to-mock subset of `parking_lot_core`.
//!
//! The in-process waiter queue ([`crate::sema::ParkSema`]) and the [`crate::Condvar`] only use
//! these four calls. A normal build forwards them to `parking_lot_core`; under
//! `--cfg gomutex_loom` they are a loom mock (a queue behind a loom `Mutex`, one loom `Notify`
//! per parked thread) with the same contract: `validate`, `timed_out`, `filter` and `callback`
//! run while the queue for `key` is locked, so no unpark can slip between a successful
//! `validate` and the thread being queued.

use std::time::Instant;

/// What [`imp::park`] returned.
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

#[cfg(not(gomutex_loom))]
pub(crate) mod imp {
    //! The real thing: `parking_lot_core`.
    use super::{FilterOp, ParkResult, UnparkResult};
    use std::time::Instant;

    /// Queue the calling thread on `key` if `validate` returns true, and sleep until unparked
    /// or until `deadline`.
    ///
    /// # Safety
    /// `key` must be an address the caller owns (so no other primitive parks on it), and the
    /// closures must not panic nor call back into this module.
    #[inline]
    pub(crate) unsafe fn park(
        key: usize,
        validate: impl FnOnce() -> bool,
        timed_out: impl FnOnce(),
        park_token: usize,
        deadline: Option<Instant>,
    ) -> ParkResult {
        // SAFETY: forwarded contract (own key, closures that neither panic nor re-enter).
        let r = unsafe {
            parking_lot_core::park(
                key,
                validate,
                || {},
                |_, _| timed_out(),
                parking_lot_core::ParkToken(park_token),
                deadline,
            )
        };
        match r {
            parking_lot_core::ParkResult::Unparked(t) => ParkResult::Unparked(t.0),
            parking_lot_core::ParkResult::Invalid => ParkResult::Invalid,
            parking_lot_core::ParkResult::TimedOut => ParkResult::TimedOut,
        }
    }

    /// Walk the threads queued on `key` oldest first and wake those `filter` picks; then run
    /// `callback` (queue still locked) whose return value is the token every woken thread gets.
    ///
    /// # Safety
    /// As for [`park`].
    #[inline]
    pub(crate) unsafe fn unpark_filter(
        key: usize,
        mut filter: impl FnMut(usize) -> FilterOp,
        callback: impl FnOnce(UnparkResult) -> usize,
    ) -> UnparkResult {
        // SAFETY: forwarded contract.
        let r = unsafe {
            parking_lot_core::unpark_filter(
                key,
                |t| match filter(t.0) {
                    FilterOp::Unpark => parking_lot_core::FilterOp::Unpark,
                    FilterOp::Skip => parking_lot_core::FilterOp::Skip,
                    FilterOp::Stop => parking_lot_core::FilterOp::Stop,
                },
                |r| {
                    parking_lot_core::UnparkToken(callback(UnparkResult {
                        unparked_threads: r.unparked_threads,
                    }))
                },
            )
        };
        UnparkResult {
            unparked_threads: r.unparked_threads,
        }
    }

    /// Wake every thread queued on `key`.
    ///
    /// # Safety
    /// As for [`park`].
    #[inline]
    pub(crate) unsafe fn unpark_all(key: usize) -> usize {
        // SAFETY: forwarded contract.
        unsafe { parking_lot_core::unpark_all(key, parking_lot_core::DEFAULT_UNPARK_TOKEN) }
    }
}

#[cfg(gomutex_loom)]
pub(crate) mod imp {
    //! The loom mock. One global queue (reset by loom for every execution), in arrival order.
    //! Deadlines are ignored: loom has no time, a timed wait simply never times out.
    use super::{FilterOp, ParkResult, UnparkResult};
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::{Arc, Mutex, Notify};
    use std::time::Instant;

    struct Slot {
        /// 0 while parked, `token + 1` once unparked.
        woken: AtomicUsize,
        notify: Notify,
    }

    struct Waiter {
        key: usize,
        token: usize,
        slot: Arc<Slot>,
    }

    loom::lazy_static! {
        static ref QUEUE: Mutex<Vec<Waiter>> = Mutex::new(Vec::new());
    }

    /// Number of threads parked on `key` right now (for quiescence checks in models).
    pub(crate) fn parked(key: usize) -> usize {
        QUEUE
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.key == key)
            .count()
    }

    pub(crate) unsafe fn park(
        key: usize,
        validate: impl FnOnce() -> bool,
        _timed_out: impl FnOnce(),
        park_token: usize,
        _deadline: Option<Instant>,
    ) -> ParkResult {
        let mut q = QUEUE.lock().unwrap();
        if !validate() {
            return ParkResult::Invalid;
        }
        let slot = Arc::new(Slot {
            woken: AtomicUsize::new(0),
            notify: Notify::new(),
        });
        q.push(Waiter {
            key,
            token: park_token,
            slot: slot.clone(),
        });
        drop(q);
        loop {
            slot.notify.wait();
            let w = slot.woken.load(Ordering::SeqCst);
            if w != 0 {
                return ParkResult::Unparked(w - 1);
            }
        }
    }

    pub(crate) unsafe fn unpark_filter(
        key: usize,
        mut filter: impl FnMut(usize) -> FilterOp,
        callback: impl FnOnce(UnparkResult) -> usize,
    ) -> UnparkResult {
        let mut q = QUEUE.lock().unwrap();
        let mut woken = Vec::new();
        let mut i = 0;
        while i < q.len() {
            if q[i].key != key {
                i += 1;
                continue;
            }
            match filter(q[i].token) {
                FilterOp::Unpark => woken.push(q.remove(i).slot),
                FilterOp::Skip => i += 1,
                FilterOp::Stop => break,
            }
        }
        let r = UnparkResult {
            unparked_threads: woken.len(),
        };
        let token = callback(r);
        for s in &woken {
            s.woken.store(token + 1, Ordering::SeqCst);
        }
        drop(q);
        for s in woken {
            s.notify.notify();
        }
        r
    }

    pub(crate) unsafe fn unpark_all(key: usize) -> usize {
        // SAFETY: forwarded contract.
        unsafe { unpark_filter(key, |_| FilterOp::Unpark, |_| 0) }.unparked_threads
    }
}

#[allow(unused_imports)]
pub(crate) use imp::*;

/// A deadline `timeout` from now, or `None` (wait forever) if that overflows `Instant`.
pub(crate) fn deadline_after(timeout: core::time::Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}
