//! The coherence model's mock (`crate::sync::coherence`): sleepers queue on the model's
//! lock-step schedule, and a park or unpark counts the lines `parking_lot_core` would move.
//! Timed waits never time out.
use super::{FilterOp, ParkResult, UnparkResult};
use crate::sync::coherence::{self, Pick};
use std::time::Instant;

pub(crate) unsafe fn park(
    key: usize,
    validate: impl FnOnce() -> bool,
    timed_out: impl FnOnce(),
    park_token: usize,
    deadline: Option<Instant>,
) -> ParkResult {
    let _ = (timed_out, deadline);
    match coherence::park(key, validate, park_token) {
        Some(token) => ParkResult::Unparked(token),
        None => ParkResult::Invalid,
    }
}

pub(crate) unsafe fn unpark_filter(
    key: usize,
    mut filter: impl FnMut(usize) -> FilterOp,
    callback: impl FnOnce(UnparkResult) -> usize,
) -> UnparkResult {
    let pick = |token| match filter(token) {
        FilterOp::Unpark => Pick::Wake,
        FilterOp::Skip => Pick::Skip,
        FilterOp::Stop => Pick::Stop,
    };
    let unparked_threads = coherence::unpark_filter(key, pick, |n| {
        callback(UnparkResult {
            unparked_threads: n,
        })
    });
    UnparkResult { unparked_threads }
}

pub(crate) unsafe fn unpark_all(key: usize) -> usize {
    coherence::unpark_filter(key, |_| Pick::Wake, |_| 0)
}

pub(crate) fn parked(key: usize) -> usize {
    coherence::parked(key)
}
