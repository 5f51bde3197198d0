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
//!
//! # Readers through the slot table (folly's `SharedMutex`, BRAVO)
//!
//! A reader that takes a [`ReadToken`] ([`read_token`]) of a *biased* lock ([`BIAS`]) writes
//! nothing in the lock: it stores the lock's key into its thread's slot of the global table
//! ([`crate::rwtable`]), then, after a `SeqCst` fence, loads the word again; if [`BIAS`] is still set
//! and no writer is announced, it is in; otherwise it takes its slot back and reads through the
//! word. A writer announces [`PHASE`], fences, then scans the claimed slots; each one naming
//! its lock it watches for the mutex's spin rounds (BRAVO's wait: the slot is a line only its
//! reader writes), and a reader still there after them it folds (folly): it adds a reader to
//! the word *first*, then moves the slot to 0 with a compare-and-swap, taking the addition
//! back if the reader had left meanwhile. From there the table's readers are ordinary counted
//! readers: the last to leave wakes the writer, or ends a ghost's phase. A reader releases a
//! slot with a compare-and-swap; if it fails, a writer folded it, and the reader leaves
//! through the word.
//! A token reader that finds a writer announced waits for the phase to end without counting
//! itself in, and then enters through the table if the lock is still biased.
//!
//! When: a lock is biased by the fourth overlapping token read seen while it is not biased
//! ([`OVERLAPS_TO_BIAS`] counted before); it stays biased across write phases (each writer scans), and a writer
//! clears [`BIAS`] after four revocations in a row that found no reader of the lock in the
//! table (readers come rarely compared with writes: scanning is then all cost). A lock never
//! read concurrently never touches the table; neither do the token-less reads ([`read`]):
//! only a token says which slot to release, so [`crate::RawRwLock::unlock_read`] may still be
//! called from any thread.

mod revocation;
mod upgrade;

use revocation::revoke;
pub use upgrade::{
    downgrade_to_upgradable, downgrade_upgradable, read_upgradable, read_upgradable_until,
    try_read_upgradable, try_upgrade, upgradable_unlock, upgrade,
};

use crate::algo;
use crate::clock::Clock;
use crate::park::{self, FilterOp, ParkResult};
use crate::rwtable;
pub use crate::rwword::{
    readers, RwState, BIAS, GHOST, IDLE_SCANS, MAX_READERS, ONE_IDLE_SCAN, ONE_OVERLAP, ONE_READER,
    OVERLAPS, OVERLAPS_TO_BIAS, PHASE, READERS_PARKED, WRITER_PARKED, WRITE_LOCKED,
};
use crate::sema::{park_stamped, unpark_charged, WaitQueue};
use crate::spin;
use crate::sync::{fatal, fence, Ordering};
use core::marker::PhantomData;
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
    /// anything else (the word's own address fits, the word being wider than 2 bytes). It
    /// also names the lock in the slot table.
    fn key(&self) -> usize;
    /// How the slot table's protocol is broken: [`BiasFault::Sound`] but in loom's negative
    /// controls.
    const BIAS_FAULT: BiasFault = BiasFault::Sound;
}

/// A deliberately broken slot-table protocol, for loom's negative controls (the shipped locks
/// are [`BiasFault::Sound`]; the choice is a constant, so the sound code has no branch left).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BiasFault {
    /// The shipped protocol.
    Sound,
    /// A reader checks the word before publishing itself, not after.
    CheckBeforePublish,
    /// A writer scans the table before announcing [`PHASE`], not after.
    ScanBeforeAnnounce,
    /// The Dekker pair without its `SeqCst` fences, and the table's accesses `Relaxed`.
    Relaxed,
    /// A writer that watched a table reader's slot without seeing it leave goes on without
    /// folding it (as if it had left).
    ForgetWatched,
}

/// Each side of the Dekker pair: a `SeqCst` fence between its store (the reader's slot, the
/// writer's `PHASE`) and its loads (the word, the slots). Fences rather than `SeqCst` accesses:
/// the C11 guarantee is the same (of two `SeqCst` fences one comes first in the total order,
/// and the loads after the later one see the stores before the earlier), and it is the one
/// loom checks (loom treats `SeqCst` loads and stores as acquire/release; its `fence(SeqCst)`
/// is exact).
#[inline]
fn dekker_fence<P: RwParts>() {
    if P::BIAS_FAULT != BiasFault::Relaxed {
        fence(Ordering::SeqCst);
    }
}

/// Where a read lock is held: a slot of the table (the reader's thread's) or the word's reader
/// count. What [`read_token`] returns and [`read_unlock_token`] takes; `!Send`, like the read
/// guards that carry it (it may be released from another thread only through a raw API that
/// moves it there).
#[derive(Debug)]
#[must_use = "a read lock is held until the token is given back"]
pub struct ReadToken {
    /// The slot, or [`ReadToken::WORD`], or [`ReadToken::FIRST`].
    slot: u32,
    _not_send: PhantomData<*mut ()>,
}

impl ReadToken {
    /// Counted in the word.
    const WORD: u32 = u32::MAX;
    /// Counted in the word by the thread's first reader, which `rwtable::hold` recorded.
    const FIRST: u32 = u32::MAX - 1;

    /// A read lock counted in the word.
    #[inline]
    pub const fn word() -> Self {
        Self::at(Self::WORD)
    }

    #[inline]
    const fn at(slot: u32) -> Self {
        Self {
            slot,
            _not_send: PhantomData,
        }
    }

    /// Whether this read lock is held through the slot table.
    #[inline]
    pub fn in_table(&self) -> bool {
        self.slot < Self::FIRST
    }
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

/// Acquire a read lock, blocking while a writer is announced. Counted in the word, never in
/// the table (so it may be released from any thread by [`read_unlock`]).
#[inline]
pub fn read<P: RwParts>(p: &P) {
    if !read_fast(p, false) {
        read_slow(p, None, false);
    }
}

/// [`read`] giving up at `deadline`; `true` if read-locked.
#[inline]
pub fn read_until<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    read_fast(p, false) || read_slow(p, deadline, false).is_some()
}

/// Acquire a read lock, through the slot table if the lock is biased, blocking while a writer
/// is announced. Released by [`read_unlock_token`].
#[inline]
pub fn read_token<P: RwParts>(p: &P) -> ReadToken {
    read_token_seen(p).0
}

/// [`read_token`], and the word as the read lock was taken (whose poison flag a guard reports
/// without loading the word again).
///
/// The uncontended case, a lock nobody else reads or writes, is one load and one atomic add
/// that finds nobody inside: the thread's first reader, recorded for the biasing heuristic
/// with one thread-local store (`rwtable::hold`), and nothing else. Everything else (a biased
/// lock, readers inside, a writer announced) is out of line.
#[inline]
pub fn read_token_seen<P: RwParts>(p: &P) -> (ReadToken, u64) {
    let w = p.word();
    let v = w.load_all();
    if v & (BIAS | PHASE) == 0 {
        let prev = w.add_all(ONE_READER);
        if prev & (PHASE | READER_BITS) == 0 {
            rwtable::hold(p.key() as u64);
            return (ReadToken::at(ReadToken::FIRST), prev);
        }
        // This thread's own recursive read (Go's `Uncontended` body): no overlap to count.
        if prev & (PHASE | BIAS) == 0
            && rwtable::holds(p.key() as u64)
            && readers(prev) != MAX_READERS
        {
            return (ReadToken::word(), prev);
        }
        return read_token_added(p, prev);
    }
    read_token_other(p, v)
}

/// The reader count's bits of the word.
const READER_BITS: u64 = !(ONE_READER - 1);

/// [`read_token_seen`]'s add found other threads' readers inside or a writer announced
/// (`prev`, the word before): in beside the readers (an overlap), or the add taken back and a
/// wait for the write phase to end.
#[inline(never)]
fn read_token_added<P: RwParts>(p: &P, prev: u64) -> (ReadToken, u64) {
    if read_added(p, prev, true) {
        (ReadToken::word(), prev)
    } else {
        read_wait_token(p)
    }
}

/// [`read_token_seen`] of a lock seen (`v`) biased, or with a writer announced: through the
/// table if it is biased and no writer is announced, else through the word, and with a writer
/// announced a wait for the phase to end without counting in first (an addition and its
/// taking back are two writes of the word every waiter and the writer then read again). No
/// look at the word beyond the protocol's own (each one can take the line from a writer on
/// many cores).
#[inline(never)]
fn read_token_other<P: RwParts>(p: &P, v: u64) -> (ReadToken, u64) {
    if v & (BIAS | PHASE) == BIAS {
        match enter_table(p) {
            Ok(r) => return r,
            Err(seen) if seen & PHASE != 0 => return read_wait_token(p),
            Err(_) => {}
        }
    } else if v & PHASE != 0 {
        return read_wait_token(p);
    }
    let prev = p.word().add_all(ONE_READER);
    if read_added(p, prev, true) {
        return (ReadToken::word(), prev);
    }
    read_wait_token(p)
}

/// A token read's wait for the write phase to end ([`read_slow`], which may enter through the
/// table once the phase is over), blocking.
#[inline(never)]
fn read_wait_token<P: RwParts>(p: &P) -> (ReadToken, u64) {
    match read_slow(p, None, true) {
        Some(r) => r,
        None => unreachable!("a wait without a deadline ended"),
    }
}

/// [`read_token`] giving up at `deadline`.
#[inline]
pub fn read_token_until<P: RwParts>(p: &P, deadline: Option<Instant>) -> Option<ReadToken> {
    if let Some(t) = read_biased(p) {
        return Some(t);
    }
    if read_fast(p, true) {
        return Some(ReadToken::word());
    }
    read_slow(p, deadline, true).map(|r| r.0)
}

/// [`try_read`] through the slot table if the lock is biased; never blocks.
#[inline]
pub fn try_read_token<P: RwParts>(p: &P) -> Option<ReadToken> {
    if let Some(t) = read_biased(p) {
        return Some(t);
    }
    try_read(p).then(ReadToken::word)
}

/// Release a read lock taken by [`read_token`] (or its `try_`/`_until` forms).
#[inline]
pub fn read_unlock_token<P: RwParts>(p: &P, t: ReadToken) {
    if t.in_table() {
        if rwtable::release(
            t.slot as usize,
            p.key() as u64,
            P::BIAS_FAULT == BiasFault::Relaxed,
        ) {
            return;
        }
    } else if t.slot == ReadToken::FIRST {
        rwtable::unhold(p.key() as u64);
    }
    // Counted in the word: read that way, or folded there by a writer. A token stands for a
    // read lock held, so the count cannot be 0 here: only a sleeping writer is looked for.
    let prev = p.word().sub_all(ONE_READER);
    if prev & WRITER_PARKED != 0 {
        read_unlocked_slow(p, prev);
        algo::keep_frame();
    }
}

/// The reader's side of the Dekker pair: if the lock is biased and no writer is announced,
/// publish the lock's key in this thread's slot, then look again. `None`: read through the
/// word (not biased, a writer announced, or no slot for this thread).
#[inline]
fn read_biased<P: RwParts>(p: &P) -> Option<ReadToken> {
    let w = p.word();
    if w.load_all() & (BIAS | PHASE) != BIAS {
        return None;
    }
    enter_table(p).ok().map(|r| r.0)
}

/// [`read_biased`] once the word was seen biased with no writer announced; with the token, the
/// word as seen after publishing. `Err`: read through the word; it carries the word as seen
/// after publishing (0 if this thread has no free slot), so that a reader that found a writer
/// announced waits for its phase to end without counting itself in first.
#[inline]
fn enter_table<P: RwParts>(p: &P) -> Result<(ReadToken, u64), u64> {
    let w = p.word();
    let Some(i) = rwtable::my_slot() else {
        return Err(0);
    };
    // Our slot names a lock we still hold a read of (through a token): read through the word.
    if !rwtable::is_free(i) {
        return Err(0);
    }
    let key = p.key() as u64;
    let v = if P::BIAS_FAULT == BiasFault::CheckBeforePublish {
        let v = w.load_all();
        rwtable::publish(i, key);
        dekker_fence::<P>();
        v
    } else if P::BIAS_FAULT == BiasFault::Relaxed {
        rwtable::publish(i, key);
        w.load_all()
    } else {
        rwtable::publish_fenced(i, key);
        w.load_all_seqcst()
    };
    if v & (BIAS | PHASE) == BIAS {
        return Ok((ReadToken::at(i as u32), v));
    }
    // A writer came (or the bias went): take the slot back, unless the writer already moved
    // it into the count, which we then leave as any reader does.
    if !rwtable::release(i, key, P::BIAS_FAULT == BiasFault::Relaxed) {
        read_unlock(p);
    }
    Err(v)
}

/// One atomic add; taken back (an unlock) if a writer is announced. A token read (`note`)
/// that finds other readers inside, this thread not among them, counts an overlap towards
/// biasing the lock.
#[inline]
fn read_fast<P: RwParts>(p: &P, note: bool) -> bool {
    read_added(p, p.word().add_all(ONE_READER), note)
}

/// [`read_fast`] after its add (`prev`, the word before).
#[inline]
fn read_added<P: RwParts>(p: &P, prev: u64, note: bool) -> bool {
    if prev & PHASE == 0 {
        if readers(prev) == MAX_READERS {
            fatal("sync: too many readers of RWMutex");
        }
        if note && readers(prev) != 0 && prev & BIAS == 0 && !rwtable::holds(p.key() as u64) {
            note_overlap(p, prev + ONE_READER);
        }
        return true;
    }
    read_unlock(p);
    false
}

/// Readers overlapped: count it, and at [`OVERLAPS_TO_BIAS`] bias the lock (a few tries: a
/// lost race only delays the bias).
#[cold]
#[inline(never)]
fn note_overlap<P: RwParts>(p: &P, mut v: u64) {
    let w = p.word();
    for _ in 0..4 {
        if v & (BIAS | PHASE) != 0 {
            return;
        }
        let next = if (v & OVERLAPS) / ONE_OVERLAP >= OVERLAPS_TO_BIAS {
            (v & !(OVERLAPS | IDLE_SCANS)) | BIAS
        } else {
            v + ONE_OVERLAP
        };
        match w.cas_all(v, next) {
            Ok(_) => return,
            Err(cur) => v = cur,
        }
    }
}

/// Wait for the write phase to end: spin a few rounds, then sleep until its end admits us.
/// A token read (`note`) that finds the phase over and the lock biased enters through the
/// table, as a reader that came then would (readers that waited out a write phase would
/// otherwise all count themselves in the word, and every one of their additions and
/// subtractions is a write of the line the next writer and its waiters read). Returns the
/// read lock and the word as it was taken (its poison flag), `None` at the deadline.
#[cold]
fn read_slow<P: RwParts>(p: &P, deadline: Option<Instant>, note: bool) -> Option<(ReadToken, u64)> {
    let w = p.word();
    let mut iter = 0;
    loop {
        let v = w.load_all();
        if v & PHASE == 0 {
            if note && v & BIAS != 0 {
                match enter_table(p) {
                    Ok(r) => return Some(r),
                    // A writer again: wait for its phase too.
                    Err(seen) if seen & PHASE != 0 => continue,
                    Err(_) => {}
                }
            }
            let prev = w.add_all(ONE_READER);
            if read_added(p, prev, note) {
                return Some((ReadToken::word(), prev));
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
            ParkResult::Unparked(_) => return Some((ReadToken::word(), w.load_all())),
            ParkResult::Invalid => {}
            ParkResult::TimedOut => return None,
        }
    }
}

/// Acquire a read lock even while a writer waits, if readers are inside (lock_api 0.4's
/// recursive read: a thread that holds a read lock can take another without deadlocking
/// behind a waiting writer, which then waits longer). With no reader inside, a writer holds
/// the lock (or is about to): wait as [`read_until`] does. Only for locks whose reads are all
/// counted in the word (token-less reads): a read held in the table is not seen here.
pub fn read_recursive_until<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    try_read_recursive(p) || read_until(p, deadline)
}

/// [`read_recursive_until`] without waiting: `false` if a writer is announced and no reader
/// is inside.
pub fn try_read_recursive<P: RwParts>(p: &P) -> bool {
    try_read_while(p, |v| v & PHASE == 0 || readers(v) != 0)
}

/// Acquire a read lock if no writer is announced; never blocks.
#[inline]
pub fn try_read<P: RwParts>(p: &P) -> bool {
    try_read_while(p, |v| v & PHASE == 0)
}

/// One more reader counted in the word by compare-and-swap, as long as `admits` the word;
/// `false` once it does not. Never blocks.
#[inline]
fn try_read_while<P: RwParts>(p: &P, admits: impl Fn(u64) -> bool) -> bool {
    let w = p.word();
    let mut v = w.load_all();
    loop {
        if !admits(v) {
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
    if prev & WRITER_PARKED != 0 || prev & READER_BITS == 0 {
        read_unlocked_slow(p, prev);
        algo::keep_frame();
    }
}

/// [`read_unlock`] found a writer asleep or nobody counted (`prev`, the word before): wake the
/// writer if this was the last reader, or abort.
#[cold]
#[inline(never)]
fn read_unlocked_slow<P: RwParts>(p: &P, prev: u64) {
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
    write_seen(p);
}

/// [`write`], returning the word as the write lock was taken (whose poison flag a guard
/// reports without loading the word again).
#[inline]
pub fn write_seen<P: RwParts>(p: &P) -> u64 {
    match p.word().cas_all(0, WRITE_LOCKED) {
        Ok(_) => 0,
        Err(v) => write_slow(p, v),
    }
}

/// [`write`] on a lock that was not all zero: a lock nobody holds, wants or reads but with
/// bits that survive write phases (overlaps, idle scans, poison) still takes one
/// compare-and-swap; else Go's way, the writers' mutex, the announce, the wait for readers.
#[cold]
#[inline(never)]
fn write_slow<P: RwParts>(p: &P, v: u64) -> u64 {
    let w = p.word();
    // A biased lock is never 0: its writer, too, takes the writers' mutex and announces
    // itself in this one step, then revokes (one write of the word fewer for its waiters to
    // read again). Not the negative control that scans before it announces.
    let merged = if P::BIAS_FAULT == BiasFault::ScanBeforeAnnounce {
        0
    } else {
        BIAS
    };
    if v & !(OVERLAPS | IDLE_SCANS | crate::rwword::POISON | merged) == 0
        && w.cas_all(v, v | WRITE_LOCKED).is_ok()
    {
        after_announcing(p, v, PHASE, None);
        return v;
    }
    algo::lock::<_, _, P::Clock>(w, p.queue());
    announce_and_wait(p, None);
    w.load_all()
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

/// After taking `w`: announce the write phase, revoke the table's readers if the lock is
/// biased, then wait for the readers inside.
#[inline]
fn announce_and_wait<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    announce_then_wait(p, PHASE, deadline)
}

/// Add `delta` to the word (`PHASE`, less one reader for an upgrade), revoke the table's
/// readers if the lock is biased, then wait for the readers inside.
#[inline]
fn announce_then_wait<P: RwParts>(p: &P, delta: u64, deadline: Option<Instant>) -> bool {
    let w = p.word();
    if P::BIAS_FAULT == BiasFault::ScanBeforeAnnounce {
        let folded = if w.load_all() & BIAS != 0 {
            dekker_fence::<P>();
            revoke(p)
        } else {
            0
        };
        let prev = w.add_all(delta);
        return (readers(prev.wrapping_add(delta)) == 0 && folded == 0)
            || wait_for_readers(p, deadline);
    }
    let prev = w.add_all(delta);
    if prev & PHASE != 0 {
        fatal("sync: inconsistent RWMutex state");
    }
    after_announcing(p, prev, delta, deadline)
}

/// After the step that announced the write phase (`prev`, the word before it; `delta`, what it
/// added): revoke the table's readers if the lock is biased, then wait for the readers inside.
#[inline]
fn after_announcing<P: RwParts>(p: &P, prev: u64, delta: u64, deadline: Option<Instant>) -> bool {
    let folded = if prev & BIAS != 0 {
        dekker_fence::<P>();
        revoke(p)
    } else {
        0
    };
    (readers(prev.wrapping_add(delta)) == 0 && folded == 0) || wait_for_readers(p, deadline)
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
            Ok(_) => break,
            Err(cur) => v = cur,
        }
    }
    if table_reader_after_announcing(p, v) {
        // A reader in the table: we held the lock for no time at all.
        write_unlock(p);
        return false;
    }
    true
}

/// After announcing [`PHASE`] without waiting (`try_write`, `try_upgrade`; `v` the word
/// before): whether the lock was biased and a reader is in the table (the writer's side of
/// the Dekker pair, without the fold).
fn table_reader_after_announcing<P: RwParts>(p: &P, v: u64) -> bool {
    if v & BIAS == 0 {
        return false;
    }
    dekker_fence::<P>();
    let mut inside = false;
    rwtable::scan(p.key() as u64, P::BIAS_FAULT == BiasFault::Relaxed, |_| {
        inside = true
    });
    inside
}

/// Read locks of this lock held through the table right now (a snapshot).
pub fn table_readers<P: RwParts>(p: &P) -> usize {
    rwtable::count(p.key() as u64)
}

/// Bias the lock now, if no writer is announced (for tests and models: as if readers had
/// overlapped [`OVERLAPS_TO_BIAS`] times).
pub fn bias<P: RwParts>(p: &P) -> bool {
    let w = p.word();
    let mut v = w.load_all();
    loop {
        if v & PHASE != 0 {
            return false;
        }
        match w.cas_all(v, (v & !(OVERLAPS | IDLE_SCANS)) | BIAS) {
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
        write_unlock_slow(p);
        // The releasing function stays on the mutex profile's stack (no tail call).
        algo::keep_frame();
    }
}

/// [`write_unlock`] of a lock whose word is not just [`WRITE_LOCKED`]: bits to keep, or
/// waiters.
#[cold]
#[inline(never)]
fn write_unlock_slow<P: RwParts>(p: &P) {
    if !write_unlock_quiet(p) {
        end_phase(p, 0);
        algo::unlock(p.word(), p.queue());
    }
}

/// The write unlock of a lock nobody waits for, with its bias bits (or poison) set: one
/// compare-and-swap that keeps them, as the fast path's for a plain lock.
#[inline]
fn write_unlock_quiet<P: RwParts>(p: &P) -> bool {
    let w = p.word();
    let v = w.load_all();
    let keep = v & (BIAS | OVERLAPS | IDLE_SCANS | crate::rwword::POISON);
    v == WRITE_LOCKED | keep && w.cas_all(v, keep).is_ok()
}

/// Release the write lock fairly: end the write phase (admitting the readers queued behind it,
/// as always), then hand the writers' mutex to the writer queued first, if one is
/// ([`algo::unlock_fair`]), so that the releasing thread cannot take it back in between.
#[inline]
pub fn write_unlock_fair<P: RwParts>(p: &P) {
    if p.word().cas_all(WRITE_LOCKED, 0).is_err() {
        end_phase(p, 0);
        algo::unlock_fair(p.word(), p.queue());
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
