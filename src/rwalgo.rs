//! The readers-writer lock's algorithm, written once: Go's `sync.RWMutex` policy on one state
//! word, with waiters parked in `parking_lot_core`.
//!
//! Generic over its parts ([`RwParts`]): the state word ([`RwState`],
//! [`RwWord`](crate::rwword::RwWord)), the writers' wait queue and the clock of the writers'
//! mutex. [`crate::RawRwLock`] instantiates it for threads of one process, and loom-tests/ for
//! its models (with words whose orderings a negative control weakens). Nothing shares it
//! across processes: `ShmRwLock` has a protocol of its own (per-participant read counts, so
//! that a dead reader's reads can be taken back), in `src/shm/rwlock/`.
//!
//! # Go's policy
//!
//! Kept from Go 1.19's `src/sync/rwmutex.go`:
//!
//! * writers serialise on a mutex `w` held for the whole write phase, with Go's own mutex
//!   algorithm ([`crate::algo`], on the word's low half and the writers' queue), so writer to
//!   writer order has its normal and starvation modes and its 1 ms bound;
//! * the writer holding `w` announces itself ([`PHASE`]): from then on new readers wait
//!   (writer preference), and the writer waits for the readers inside;
//! * the write phase ends before `w` is released, and ending it admits every reader that
//!   queued behind the writer: that batch goes before the next writer.
//!
//! # The mechanics (not Go's)
//!
//! Go counts readers in `readerCount` (biased during a write phase), the readers the writer
//! waits for in `readerWait`, and hands off through two semaphores: one `writerSem` release
//! per write phase, one `readerSem` release per queued reader. Here everything is one word
//! ([`crate::rwword`]): the reader count, [`PHASE`], and the waiting bits, and the waiters park
//! in `parking_lot_core`:
//!
//! * a reader is one atomic add when no writer is announced; if one is, it takes the add back
//!   (an unlock) and sleeps on the lock's address + 2 with [`READERS_PARKED`] set;
//! * the writer waiting for the readers inside sleeps on address + 1 with [`WRITER_PARKED`]
//!   set; the reader whose exit brings the count to 0 with that bit set wakes it;
//! * the end of a write phase clears [`PHASE`] and, if readers sleep, wakes all of them with
//!   one `unpark` whose callback, run while their queue is locked, counts them all in the same
//!   atomic step: the hand-off, which no writer can come in between.
//!
//! No lost wake-up: a sleeper's `validate` runs under its queue's lock and checks the bit it
//! set is still set (and, for the writer, that readers are still inside); whoever changes the
//! state it waits for takes the same queue lock afterwards to wake it. A woken writer always
//! looks again (a stale wake-up can reach it), a woken reader never needs to (it was counted).
//!
//! # Beyond Go: deadlines and downgrade
//!
//! A reader that gives up leaves nothing behind (it was never counted). A writer whose deadline
//! passes while it waits for `w` fails (the mutex's deadline); one whose deadline passes while
//! it waits for the readers inside becomes a *ghost* ([`GHOST`], set under its queue's lock):
//! the last of those readers to leave ends the write phase and releases `w` on its behalf. So
//! the lock behaves as if that writer had taken the lock when they left and released it at
//! once: readers that arrived after it wait until then. `downgrade` is the end of a write
//! phase that counts the writer in as a reader with the readers it admits.

use crate::algo;
use crate::clock::Clock;
use crate::park::{self, FilterOp, ParkResult};
pub use crate::rwword::{
    readers, RwState, GHOST, MAX_READERS, ONE_READER, PHASE, READERS_PARKED, WRITER_PARKED,
    WRITE_LOCKED,
};
use crate::sema::{park_stamped, unpark_charged, WaitQueue};
use crate::spin;
use crate::sync::fatal;
use std::cell::Cell;
use std::time::Instant;

/// The parts of a readers-writer lock the algorithm runs on.
pub trait RwParts {
    /// The state word.
    type Word: RwState;
    /// The writers' mutex wait queue.
    type Queue: WaitQueue;
    /// The writers' mutex clock (the 1 ms starvation rule).
    type Clock: Clock;
    /// The state word.
    fn word(&self) -> &Self::Word;
    /// The writers' mutex wait queue.
    fn queue(&self) -> &Self::Queue;
    /// The parking key of this lock: the writer waiting for readers parks on `key() + 1`,
    /// readers waiting for a write phase to end on `key() + 2`. Neither may be used by
    /// anything else (the word's own address fits, the word being wider than 2 bytes).
    fn key(&self) -> usize;
}

/// Writers asleep waiting for the readers inside to leave (0 or 1): for tests and models, a
/// snapshot.
pub fn parked_writer<P: RwParts>(p: &P) -> usize {
    park::parked(p.key() + 1)
}

/// Readers asleep waiting for the write phase to end: for tests and models, a snapshot.
pub fn parked_readers<P: RwParts>(p: &P) -> usize {
    park::parked(p.key() + 2)
}

/// Token the end of a write phase passes to the readers it admits.
const ADMITTED: usize = 1;

/// Acquire a read lock, blocking while a writer is announced.
#[inline]
pub fn read<P: RwParts>(p: &P) {
    if !read_fast(p) {
        read_slow(p, None);
    }
}

/// [`read`] giving up at `deadline`; `true` if read-locked.
#[inline]
pub fn read_until<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    read_fast(p) || read_slow(p, deadline)
}

/// One atomic add; taken back (an unlock) if a writer is announced.
#[inline]
fn read_fast<P: RwParts>(p: &P) -> bool {
    let prev = p.word().add_all(ONE_READER);
    if prev & PHASE == 0 {
        if readers(prev) == MAX_READERS {
            fatal("sync: too many readers of RWMutex");
        }
        return true;
    }
    read_unlock(p);
    false
}

/// Wait for the write phase to end: spin a few rounds, then sleep until its end admits us.
#[cold]
fn read_slow<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    let w = p.word();
    let mut iter = 0;
    loop {
        let v = w.load_all();
        if v & PHASE == 0 {
            if read_fast(p) {
                return true;
            }
            continue;
        }
        if spin::can_spin(iter, false) {
            spin::spin_round(true);
            iter += 1;
            continue;
        }
        if v & READERS_PARKED == 0 && w.cas_all(v, v | READERS_PARKED).is_err() {
            continue;
        }
        let validate = || w.load_all() & (PHASE | READERS_PARKED) == PHASE | READERS_PARKED;
        // SAFETY: a key of this lock's own (`RwParts::key`); the closures only touch its word,
        // never panic and never call back into the parking module.
        match unsafe { park_stamped(p.key() + 2, validate, || {}, 0, deadline) } {
            // The end of the write phase counted us in.
            ParkResult::Unparked(_) => return true,
            ParkResult::Invalid => {}
            ParkResult::TimedOut => return false,
        }
    }
}

/// Acquire a read lock if no writer is announced; never blocks.
#[inline]
pub fn try_read<P: RwParts>(p: &P) -> bool {
    let w = p.word();
    let mut v = w.load_all();
    loop {
        if v & PHASE != 0 {
            return false;
        }
        if readers(v) == MAX_READERS {
            fatal("sync: too many readers of RWMutex");
        }
        match w.cas_all(v, v + ONE_READER) {
            Ok(_) => return true,
            Err(cur) => v = cur,
        }
    }
}

/// Release a read lock; the reader that leaves last wakes the writer waiting for it.
/// Unlocking a lock not read-locked aborts (Go's fatal error).
#[inline]
pub fn read_unlock<P: RwParts>(p: &P) {
    let prev = p.word().sub_all(ONE_READER);
    if readers(prev) == 0 {
        fatal("sync: RUnlock of unlocked RWMutex");
    }
    if readers(prev) == 1 && prev & WRITER_PARKED != 0 {
        wake_writer(p);
    }
}

/// The readers' count reached 0 with the writer asleep: wake it, or, if it gave up (a ghost),
/// end its write phase. Runs once per such exit; a stale call (the count moved again, or the
/// writer already woke) finds nothing to do.
#[cold]
fn wake_writer<P: RwParts>(p: &P) {
    let w = p.word();
    let ghost = Cell::new(false);
    let filter = |_| {
        let v = w.load_all();
        if readers(v) == 0 && v & WRITER_PARKED != 0 {
            FilterOp::Unpark
        } else {
            FilterOp::Stop
        }
    };
    let callback = |r: park::UnparkResult| {
        let v = w.load_all();
        if r.unparked_threads != 0 {
            // It looks again; a bit left set would only make a later reader wake it again.
            w.clear_all(WRITER_PARKED);
        } else if v & GHOST != 0 && readers(v) == 0 {
            w.clear_all(WRITER_PARKED | GHOST);
            ghost.set(true);
        }
        0
    };
    // SAFETY: a key of this lock's own, whose sleepers park through `park_stamped` with token
    // 0; the closures only touch its word and never call back into the parking module.
    unsafe { unpark_charged(p.key() + 1, filter, 0, callback) };
    if ghost.get() {
        // The writer gave up waiting for us: finish its write phase.
        end_phase(p, 0);
        algo::unlock(p.word(), p.queue());
    }
}

/// Acquire the write lock.
#[inline]
pub fn write<P: RwParts>(p: &P) {
    if !write_fast(p) {
        algo::lock::<_, _, P::Clock>(p.word(), p.queue());
        announce_and_wait(p, None);
    }
}

/// [`write`] giving up at `deadline`; `true` if write-locked. A writer that gives up while
/// waiting for `w` leaves no trace; one that gives up while waiting for the readers inside
/// stays as a ghost until the last of them leaves (module docs).
#[inline]
pub fn write_until<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    write_fast(p)
        || (algo::lock_until::<_, _, P::Clock>(p.word(), p.queue(), deadline)
            && announce_and_wait(p, deadline))
}

/// A lock nobody holds, wants or reads: `w` locked and the phase announced in one step.
#[inline]
fn write_fast<P: RwParts>(p: &P) -> bool {
    p.word().cas_all(0, WRITE_LOCKED).is_ok()
}

/// After taking `w`: announce the write phase, then wait for the readers inside.
#[inline]
fn announce_and_wait<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    let prev = p.word().or_all(PHASE);
    if prev & PHASE != 0 {
        fatal("sync: inconsistent RWMutex state");
    }
    readers(prev) == 0 || wait_for_readers(p, deadline)
}

/// Wait for the readers inside to leave: spin a few rounds, then sleep until the last wakes
/// us. `false` if the deadline passed first (we are a ghost now).
#[cold]
fn wait_for_readers<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    let w = p.word();
    let mut iter = 0;
    loop {
        let v = w.load_all();
        if readers(v) == 0 {
            if v & WRITER_PARKED != 0 {
                // Set before a sleep that did not happen: spare the next exit a wake-up call.
                w.clear_all(WRITER_PARKED);
            }
            return true;
        }
        if spin::can_spin(iter, false) {
            spin::spin_round(true);
            iter += 1;
            continue;
        }
        if v & WRITER_PARKED == 0 && w.cas_all(v, v | WRITER_PARKED).is_err() {
            continue;
        }
        let validate = || {
            let v = w.load_all();
            v & WRITER_PARKED != 0 && readers(v) != 0
        };
        // Under the queue's lock, no wake-up picked us: the readers' last one (still to come,
        // or waiting for this lock) will end the phase for us.
        let timed_out = || {
            w.or_all(GHOST);
        };
        // SAFETY: a key of this lock's own (`RwParts::key`); the closures only touch its word,
        // never panic and never call back into the parking module.
        match unsafe { park_stamped(p.key() + 1, validate, timed_out, 0, deadline) } {
            ParkResult::Unparked(_) | ParkResult::Invalid => {}
            ParkResult::TimedOut => return false,
        }
    }
}

/// Acquire the write lock if nobody holds or reads it right now; never blocks. Fails exactly
/// when the writers' mutex is held or starving (then it belongs to its queue), or a reader is
/// inside.
#[inline]
pub fn try_write<P: RwParts>(p: &P) -> bool {
    let w = p.word();
    let mut v = w.load_all();
    loop {
        if v as u32 & (algo::LOCKED | algo::STARVING) != 0 || readers(v) != 0 {
            return false;
        }
        match w.cas_all(v, v | algo::LOCKED as u64 | PHASE) {
            Ok(_) => return true,
            Err(cur) => v = cur,
        }
    }
}

/// Release the write lock: end the write phase (admitting the readers queued behind it), then
/// release `w`.
#[inline]
pub fn write_unlock<P: RwParts>(p: &P) {
    if p.word().cas_all(WRITE_LOCKED, 0).is_err() {
        end_phase(p, 0);
        algo::unlock(p.word(), p.queue());
    }
}

/// Turn the write lock into a read lock: the end of the write phase counts the writer in with
/// the readers it admits, so no writer can come in between.
#[inline]
pub fn downgrade<P: RwParts>(p: &P) {
    if p.word().cas_all(WRITE_LOCKED, ONE_READER).is_err() {
        end_phase(p, 1);
        algo::unlock(p.word(), p.queue());
    }
}

/// End the write phase, counting in `keep` readers (the writer itself for a downgrade) and
/// every reader asleep behind the phase, which are woken.
#[cold]
fn end_phase<P: RwParts>(p: &P, keep: u64) {
    let w = p.word();
    let ended = |v: u64, admitted: u64| {
        (v & !(PHASE | WRITER_PARKED | GHOST | READERS_PARKED)) + (admitted + keep) * ONE_READER
    };
    let mut v = w.load_all();
    loop {
        if v & PHASE == 0 {
            fatal("sync: Unlock of unlocked RWMutex");
        }
        if v & READERS_PARKED != 0 {
            break;
        }
        match w.cas_all(v, ended(v, 0)) {
            Ok(_) => return,
            Err(cur) => v = cur,
        }
    }
    // Readers sleep: wake them all, and count them in while their queue is locked (a reader
    // about to sleep then finds the phase over and does not).
    let callback = |r: park::UnparkResult| {
        let mut v = w.load_all();
        while let Err(cur) = w.cas_all(v, ended(v, r.unparked_threads as u64)) {
            v = cur;
        }
        ADMITTED
    };
    // SAFETY: a key of this lock's own, whose sleepers park through `park_stamped` with token
    // 0; the closures only touch its word and never call back into the parking module.
    unsafe { unpark_charged(p.key() + 2, |_| FilterOp::Unpark, 0, callback) };
}
