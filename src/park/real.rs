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

/// Number of threads parked on `key` right now (for tests: a snapshot).
pub(crate) fn parked(key: usize) -> usize {
    let mut n = 0;
    // SAFETY: the filter only counts and skips (nobody is woken), the callback does nothing,
    // and neither calls back into parking_lot_core.
    unsafe {
        parking_lot_core::unpark_filter(
            key,
            |_| {
                n += 1;
                parking_lot_core::FilterOp::Skip
            },
            |_| parking_lot_core::DEFAULT_UNPARK_TOKEN,
        )
    };
    n
}
