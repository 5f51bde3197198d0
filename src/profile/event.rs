//! The part of the profile that runs inside the lock: a sleeper's start time, the release that
//! charges it, the 1-in-`rate` sampling and the table of sampled stacks.
//!
//! Go 1.19's `semacquire1` stamps a sleeper's `sudog.acquiretime` only while the rate is not
//! 0; `semrelease1` charges `now - acquiretime` of the sleeper it dequeues (`mutexevent`),
//! and `dequeue` sets the next sleeper's `acquiretime` to `now`, so each release is charged
//! the time the lock had a sleeper since the previous release (a LIFO re-queued sleeper
//! inherits the head's `acquiretime` for the same reason). Here the sleeper's stamp is a
//! [`Waiter`] on its stack, whose address rides in its `parking_lot_core` park token; a
//! release reads and resets stamps through the tokens its filter sees ([`Charge`]), while the
//! queue is locked.

use super::RATE;
use crate::park::FilterOp;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

/// Frames kept per sample (Go keeps 32; Rust stacks run deeper).
const MAX_DEPTH: usize = 64;

/// Nanoseconds since the profile's epoch, never 0 (0 means "not stamped").
#[inline]
pub(crate) fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let ns = EPOCH.get_or_init(Instant::now).elapsed().as_nanos();
    u64::try_from(ns).unwrap_or(u64::MAX).max(1)
}

/// A sleeper's start time, on its stack for as long as it is parked (Go's
/// `sudog.acquiretime`). Aligned to 8, so bit 0 of its address is free for the queue's own
/// flag in the park token.
#[derive(Debug)]
#[repr(align(8))]
pub(crate) struct Waiter {
    since: AtomicU64,
    /// Whether `since` was stamped (a plain copy: `token` reads no atomic).
    stamped: bool,
}

impl Waiter {
    /// Stamped with the current time if profiling is on: the slow path's one relaxed load.
    #[inline]
    pub(crate) fn new() -> Self {
        let since = if RATE.load(Relaxed) != 0 { now_ns() } else { 0 };
        Waiter {
            since: AtomicU64::new(since),
            stamped: since != 0,
        }
    }

    /// The bits this sleeper adds to its park token: its address if stamped, else 0 (the token
    /// is then the queue's flag alone, as without the feature).
    #[inline]
    pub(crate) fn token(&self) -> usize {
        if self.stamped {
            self as *const Waiter as usize
        } else {
            0
        }
    }
}

/// One release's accounting, fed every verdict of the queue's unpark filter in queue order
/// (oldest sleeper first) while the queue is locked.
#[derive(Debug, Default)]
pub(crate) struct Charge {
    /// The first sleeper has been seen.
    seen_first: bool,
    /// The next head has been reset (or there was nothing to reset).
    reset_done: bool,
    /// A sleeper was woken.
    picked: bool,
    /// When this release took its stamp (0: the head was not stamped).
    now: u64,
    /// The head's stamp: the time since which the lock has had a sleeper.
    base: u64,
}

impl Charge {
    /// `filter`, with every verdict accounted for (see [`see`](Self::see)).
    ///
    /// # Safety
    /// The result may only be passed to `park::unpark_filter` on a key whose sleepers park
    /// with tokens made of `flags` bits and their [`Waiter::token`] (or 0).
    #[inline]
    pub(crate) unsafe fn watch<'a>(
        &'a mut self,
        mut filter: impl FnMut(usize) -> FilterOp + 'a,
        flags: usize,
    ) -> impl FnMut(usize) -> FilterOp + 'a {
        move |t| {
            let op = filter(t);
            // SAFETY: per the contract, `t` is the token of a thread parked on the key being
            // unparked, whose queue is locked while the filter runs.
            unsafe { self.see(t, flags, op == FilterOp::Unpark) };
            op
        }
    }

    /// Account for the filter's verdict on the sleeper whose park token is `token` (the
    /// queue's own flag bits `flags` masked off): `woken`, or left queued.
    ///
    /// # Safety
    /// `token` must be the park token of a thread parked on the queue whose filter calls this,
    /// with that queue locked (so the thread is still inside `park` and its [`Waiter`] alive).
    #[inline]
    pub(crate) unsafe fn see(&mut self, token: usize, flags: usize, woken: bool) {
        let waiter = (token & !flags) as *const Waiter;
        if !self.seen_first {
            self.seen_first = true;
            if !waiter.is_null() {
                // SAFETY: per the contract, the sleeper is parked and its `Waiter` alive.
                self.base = unsafe { &*waiter }.since.load(Relaxed);
                self.now = now_ns();
            }
        }
        if woken {
            self.picked = true;
        } else if !self.reset_done {
            // The first sleeper left queued is the new head: from now on the lock's delay is
            // the next release's to answer for (Go's `dequeue`: `t.acquiretime = now`).
            self.reset_done = true;
            if self.now != 0 && !waiter.is_null() {
                // SAFETY: as above.
                unsafe { &*waiter }.since.store(self.now, Relaxed);
            }
        }
    }

    /// After the unpark: record the delay if a stamped sleeper was woken and this release is
    /// sampled (Go's `mutexevent`, outside the queue's lock).
    #[inline]
    pub(crate) fn finish(self) {
        if self.picked && self.now != 0 {
            contended_release(self.now.saturating_sub(self.base));
        }
    }
}

/// What one call stack has been charged.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    /// Sampled events.
    pub(crate) events: u64,
    /// Their delay, nanoseconds.
    pub(crate) delay: u64,
    /// Events scaled by the rate each was sampled at (an estimate of all events).
    pub(crate) contentions: u64,
    /// Delay scaled likewise, nanoseconds.
    pub(crate) scaled_delay: u64,
}

/// Sampled stacks (return addresses, innermost first) and what each was charged. A std lock:
/// the profile must never wait on a lock it profiles.
pub(crate) static TABLE: Mutex<BTreeMap<Box<[usize]>, Counts>> = Mutex::new(BTreeMap::new());

thread_local! {
    /// Set while this thread records (an allocator built on our locks must not recurse).
    static RECORDING: Cell<bool> = const { Cell::new(false) };
    /// xorshift32 state for the sampling draw (Go's `fastrand`); 0 until seeded.
    static RNG: Cell<u32> = const { Cell::new(0) };
}

/// A release woke a sleeper that the lock had kept waiting `delay` ns: sample it 1 in `rate`
/// (Go 1.19's `mutexevent`: `fastrand() % rate == 0`) and charge it to the caller's stack.
#[cold]
#[inline(never)]
fn contended_release(delay: u64) {
    let rate = RATE.load(Relaxed);
    if rate == 0 || (rate > 1 && !draw().is_multiple_of(rate)) {
        return;
    }
    if RECORDING.with(|r| r.replace(true)) {
        return;
    }
    let mut ips = [0usize; MAX_DEPTH];
    let mut n = 0;
    backtrace::trace(|frame| {
        let ip = frame.ip() as usize;
        if ip != 0 {
            ips[n] = ip;
            n += 1;
        }
        n < MAX_DEPTH
    });
    record(&ips[..n], delay, rate);
    RECORDING.with(|r| r.set(false));
}

/// Add one sampled event to `stack`'s counts.
pub(crate) fn record(stack: &[usize], delay: u64, rate: u32) {
    let mut table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    let c = table.entry(stack.into()).or_default();
    c.events += 1;
    c.delay = c.delay.saturating_add(delay);
    c.contentions = c.contentions.saturating_add(rate.into());
    c.scaled_delay = c
        .scaled_delay
        .saturating_add(delay.saturating_mul(rate.into()));
}

/// The next number of this thread's xorshift32 sequence (seeded from the clock and the thread).
fn draw() -> u32 {
    RNG.with(|s| {
        let mut x = s.get();
        if x == 0 {
            let here = s as *const Cell<u32> as usize as u64;
            let seed = now_ns() ^ here.rotate_left(29);
            x = (seed ^ (seed >> 32)) as u32 | 1;
        }
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s.set(x);
        x
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens as the in-process queue builds them: a flag in bit 0, the `Waiter` above it.
    const FLAG: usize = 1;

    fn stamped(since: u64) -> Waiter {
        Waiter {
            since: AtomicU64::new(since),
            stamped: since != 0,
        }
    }

    #[test]
    fn the_release_charges_the_heads_time_and_resets_the_next_head() {
        let (a, b) = (stamped(5), stamped(7));
        let mut c = Charge::default();
        // SAFETY: the waiters outlive the calls (no real queue involved).
        unsafe {
            c.see(a.token(), FLAG, true);
            c.see(b.token() | FLAG, FLAG, false);
        }
        assert!(c.picked);
        assert_eq!(c.base, 5);
        assert!(c.now >= 1);
        assert_eq!(
            b.since.load(Relaxed),
            c.now,
            "the next head now waits from this release"
        );
        assert_eq!(a.since.load(Relaxed), 5, "the woken sleeper is left alone");
    }

    #[test]
    fn a_front_sleeper_is_charged_from_the_oldest_sleepers_time() {
        // [back b (stamp 3), front f (stamp 9)]: the release skips b and wakes f, and charges
        // the time since b's stamp, as Go's LIFO sleeper inherits the head's `acquiretime`.
        let (b, f) = (stamped(3), stamped(9));
        let mut c = Charge::default();
        // SAFETY: as above.
        unsafe {
            c.see(b.token(), FLAG, false);
            c.see(f.token() | FLAG, FLAG, true);
        }
        assert_eq!(c.base, 3);
        assert_eq!(b.since.load(Relaxed), c.now);
    }

    #[test]
    fn unstamped_sleepers_charge_nothing() {
        let (a, b) = (stamped(0), stamped(0));
        assert_eq!(a.token(), 0);
        let mut c = Charge::default();
        // SAFETY: as above.
        unsafe {
            c.see(a.token(), FLAG, true);
            c.see(b.token(), FLAG, false);
        }
        assert_eq!(c.now, 0, "no clock read at rate 0");
        assert_eq!(b.since.load(Relaxed), 0);
    }

    #[test]
    fn the_draw_is_spread() {
        let n = 40_000;
        let hits = (0..n).filter(|_| draw().is_multiple_of(4)).count();
        assert!(
            (9_000..11_000).contains(&hits),
            "{hits} of {n} draws hit 1 in 4"
        );
    }
}
