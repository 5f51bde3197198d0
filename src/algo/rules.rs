//! The algorithm's pure transitions beyond Go: which state a waiter that leaves without the
//! lock (a timed-out waiter, a hand-off receiver that declines) leaves behind. Written once for
//! the algorithm and for the shared-memory lock's recovery, which applies them on a dead
//! process's behalf.

use super::{waiters, LOCKED, STARVING, WAITER};

/// The deregister rule, as a pure transition: the state after one registered waiter that holds
/// no token leaves the count, or `None` while it may not.
///
/// It may leave only while the remaining waiters can still consume every token in flight (see
/// the module docs). During a hand-off (`STARVING && !LOCKED`) its receiver stays counted, and
/// so does one more waiter, since the receiver may already have read "not the last waiter" and
/// will keep `STARVING` in its fix-up add; leaving it alone would strand the lock in starvation
/// mode with no waiter (found by loom: `loom-tests/tests/timed.rs`). Removing the last waiter
/// leaves starvation mode.
///
/// ```
/// use gomutex::algo::{deregistered, LOCKED, STARVING, WAITER};
/// assert_eq!(deregistered(LOCKED | 2 * WAITER), Some(LOCKED | WAITER));
/// assert_eq!(deregistered(LOCKED | STARVING | WAITER), Some(LOCKED));
/// // A hand-off in flight keeps its receiver and one more waiter counted.
/// assert_eq!(deregistered(STARVING | 2 * WAITER), None);
/// assert_eq!(deregistered(STARVING | 3 * WAITER), Some(STARVING | 2 * WAITER));
/// ```
#[inline]
pub const fn deregistered(state: u32) -> Option<u32> {
    match deregistered_up_to(state, 1) {
        Some((new, _)) => Some(new),
        None => None,
    }
}

/// [`deregistered`] for up to `n` waiters at once (as many single removals would do):
/// `(new state, waiters removed)`, or `None` if none may leave now. The shared-memory
/// recovery removes a dead process's registrations with it in one transaction.
///
/// ```
/// use gomutex::algo::{deregistered_up_to, LOCKED, STARVING, WAITER};
/// assert_eq!(deregistered_up_to(LOCKED | 3 * WAITER, 5), Some((LOCKED, 3)));
/// // A hand-off in flight keeps its receiver and one more waiter counted.
/// assert_eq!(deregistered_up_to(STARVING | 4 * WAITER, 5), Some((STARVING | 2 * WAITER, 2)));
/// assert_eq!(deregistered_up_to(LOCKED | WAITER, 0), None);
/// ```
#[inline]
pub const fn deregistered_up_to(state: u32, n: u32) -> Option<(u32, u32)> {
    let handoff_in_flight = state & (STARVING | LOCKED) == STARVING;
    let keep = if handoff_in_flight { 3 } else { 1 };
    if waiters(state) < keep || n == 0 {
        return None;
    }
    let left = waiters(state) - keep + 1;
    let k = if n < left { n } else { left };
    Some((without_waiters(state, k), k))
}

/// The hand-off rule, as a pure transition: the state after the receiver of a hand-off in
/// flight (`STARVING && !LOCKED`, the receiver still counted) leaves without taking ownership,
/// or `None` if no hand-off is in flight. The receiver leaves the count; if it was the last
/// waiter, starvation mode ends (a starving lock must have a waiter, as in
/// [`deregistered`]); otherwise the result is still starving and the hand-off passes to the
/// next waiter. (Go's receiver never declines; a shared-memory lock whose receiver died does
/// this on its behalf.)
///
/// ```
/// use gomutex::algo::{handoff_declined, LOCKED, STARVING, WAITER};
/// assert_eq!(handoff_declined(STARVING | 2 * WAITER), Some(STARVING | WAITER));
/// assert_eq!(handoff_declined(STARVING | WAITER), Some(0));
/// // No hand-off in flight: the lock is held, or not starving.
/// assert_eq!(handoff_declined(LOCKED | STARVING | WAITER), None);
/// assert_eq!(handoff_declined(WAITER), None);
/// ```
#[inline]
pub const fn handoff_declined(state: u32) -> Option<u32> {
    if state & (STARVING | LOCKED) != STARVING || waiters(state) == 0 {
        return None;
    }
    Some(without_waiters(state, 1))
}

/// `state` with `k` (at most its count) registered waiters less; removing the last waiter
/// leaves starvation mode (a starving lock must have a waiter: unlock hands it to one).
#[inline]
const fn without_waiters(state: u32, k: u32) -> u32 {
    let new = state - k * WAITER;
    if waiters(new) == 0 {
        new & !STARVING
    } else {
        new
    }
}
