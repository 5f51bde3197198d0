//! Go's `sync.RWMutex` algorithm, written once.
//!
//! A port of `RLock`, `TryRLock`, `RUnlock`, `rUnlockSlow`, `Lock`, `TryLock` and `Unlock` from
//! Go 1.19's `src/sync/rwmutex.go`, generic over its parts ([`RwParts`]): the writers' mutex
//! (Go's own mutex algorithm, [`crate::algo`], on a [`StateWord`] and a [`WaitQueue`]), the two
//! counters ([`Counter`]) and the two semaphores ([`Semaphore`]), and the clock of the
//! writers' mutex. [`crate::RawRwLock`] instantiates it for threads of one process.
//!
//! # Go's algorithm
//!
//! * Writers serialise on the mutex `w`, held for the whole write phase, so writer-to-writer
//!   order is the mutex's (normal mode, starvation mode after 1 ms).
//! * `readerCount` counts readers; a writer that holds `w` subtracts [`MAX_READERS`] from it,
//!   so every later `RLock` sees a negative count and sleeps on `readerSem` (writer
//!   preference). The writer then waits on `writerSem` for the `r` readers that were inside:
//!   it adds `r` to `readerWait`, and each of them, leaving (its `RUnlock` sees a negative
//!   count), subtracts one; the one that reaches 0 wakes the writer.
//! * `Unlock` adds [`MAX_READERS`] back, wakes every reader that queued meanwhile (one
//!   `readerSem` token each), and only then unlocks `w`: the batch of readers that queued
//!   behind a writer is admitted before the next writer.
//!
//! # Beyond Go: deadlines and downgrade
//!
//! A timed-out waiter has been counted (a reader in `readerCount`, a writer through
//! `readerWait`), and exactly one `release` is on its way for it; its count cannot be taken
//! back without knowing which write phase it is in. So it leaves a *debt* in its semaphore
//! instead ([`Semaphore`]): the release meant for it pays the debt, and the releaser finishes
//! the waiter's part at once:
//!
//! * a timed-out reader becomes a *ghost reader*: the writer's `Unlock` whose `readerSem` token
//!   it absorbs also does its `RUnlock` (before unlocking `w`, so no new writer sees it);
//! * a timed-out writer becomes a *ghost writer*: the last departing reader, whose `writerSem`
//!   token it absorbs, does its `Unlock`. Until then the lock behaves as if that writer were
//!   still waiting: readers that arrived after it wait for the readers before it to leave.
//!
//! A writer whose deadline passes while it waits for `w` simply fails (the mutex's deadline).
//! Parts that keep `w`'s state and `readerCount` in one word may offer
//! [`RwParts::lock_fast`] and [`RwParts::unlock_fast`]: Go's two steps in one when nobody else
//! is counted; whenever they fail, Go's code runs as written.
//! `downgrade` is `Unlock` with the writer counted as a reader in the same atomic add.

use crate::algo::{self, StateWord};
use crate::clock::Clock;
use crate::sema::{Semaphore, WaitQueue};
use crate::sync::{fatal, AtomicI32, Ordering::SeqCst};
use std::time::Instant;

/// Go's `rwmutexMaxReaders`: the bias a writer subtracts from the reader count. At most
/// `MAX_READERS - 1` readers at once.
pub const MAX_READERS: i32 = 1 << 30;

/// One of Go's two `int32` counters (`readerCount`, `readerWait`). Every operation is
/// sequentially consistent (Go's atomics are). A shared-memory lock may implement the reader
/// count on a word that also records, per participant, how many reads it holds.
pub trait Counter {
    /// Add `delta`, returning the *new* value (Go's `atomic.AddInt32`).
    fn add(&self, delta: i32) -> i32;
    /// The current value (feeds a compare-and-swap).
    fn load(&self) -> i32;
    /// Compare-and-swap (`Err` carries the current value).
    fn cas(&self, old: i32, new: i32) -> Result<i32, i32>;
}

impl Counter for AtomicI32 {
    #[inline]
    fn add(&self, delta: i32) -> i32 {
        self.fetch_add(delta, SeqCst).wrapping_add(delta)
    }
    #[inline]
    fn load(&self) -> i32 {
        AtomicI32::load(self, SeqCst)
    }
    #[inline]
    fn cas(&self, old: i32, new: i32) -> Result<i32, i32> {
        self.compare_exchange(old, new, SeqCst, SeqCst)
    }
}

/// The parts of a readers-writer lock the algorithm runs on (Go's `RWMutex` fields).
pub trait RwParts {
    /// The writers' mutex state word.
    type Word: StateWord;
    /// The writers' mutex wait queue.
    type Queue: WaitQueue;
    /// The writers' mutex clock (the 1 ms starvation rule).
    type Clock: Clock;
    /// `readerCount` and `readerWait` (unsized, e.g. `dyn Counter`, if the two are different
    /// types: the in-process lock keeps `readerCount` in its [`RwWord`](crate::rwword::RwWord)).
    type Count: Counter + ?Sized;
    /// `writerSem` and `readerSem`.
    type Sema: Semaphore;
    /// `w`: the writers' mutex.
    fn w(&self) -> (&Self::Word, &Self::Queue);
    /// `readerCount`: readers in or waiting, biased by `-MAX_READERS` during a write phase.
    fn reader_count(&self) -> &Self::Count;
    /// `readerWait`: readers a pending writer still waits for.
    fn reader_wait(&self) -> &Self::Count;
    /// `writerSem`: where the pending writer sleeps.
    fn writer_sem(&self) -> &Self::Sema;
    /// `readerSem`: where readers that arrived during a write phase sleep.
    fn reader_sem(&self) -> &Self::Sema;
    /// Optional: `Lock` of a lock nobody holds, wants or reads, in one atomic step (the writers'
    /// mutex from 0 to locked and `readerCount` from 0 to `-MAX_READERS` together); `false`
    /// otherwise, and then Go's `Lock` runs unchanged. For parts that keep both in one word;
    /// the default offers no fast path.
    #[inline]
    fn lock_fast(&self) -> bool {
        false
    }
    /// Optional: `Unlock`, in one atomic step, of a write phase during which nothing happened
    /// (no reader queued, no writer waiting), the reverse of [`lock_fast`](Self::lock_fast);
    /// `false` otherwise, and then Go's `Unlock` runs unchanged. The default offers none.
    #[inline]
    fn unlock_fast(&self) -> bool {
        false
    }
}

/// Go's `RLock`: one atomic add; sleep if a writer is pending or active.
#[inline]
pub fn rlock<P: RwParts>(p: &P) {
    if p.reader_count().add(1) < 0 {
        // A writer is pending: wait for it.
        p.reader_sem().acquire(None);
    }
}

/// [`rlock`] giving up at `deadline`; `true` if read-locked. A reader that gives up while
/// queued stays counted as a ghost until the writer's unlock takes it back (module docs).
#[inline]
pub fn rlock_until<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    p.reader_count().add(1) >= 0 || p.reader_sem().acquire(deadline)
}

/// Go's `TryRLock`: fails as soon as a writer is pending or active; never blocks. (The
/// compare-and-swap loop retries only while other readers change the count.)
#[inline]
pub fn try_rlock<P: RwParts>(p: &P) -> bool {
    let mut c = p.reader_count().load();
    loop {
        if c < 0 {
            return false;
        }
        match p.reader_count().cas(c, c + 1) {
            Ok(_) => return true,
            Err(cur) => c = cur,
        }
    }
}

/// Go's `RUnlock`. Unlocking a lock not read-locked aborts (Go's fatal error), if detected.
#[inline]
pub fn runlock<P: RwParts>(p: &P) {
    let r = p.reader_count().add(-1);
    if r < 0 {
        runlock_slow(p, r);
    }
}

/// Go's `rUnlockSlow`: a writer is pending; the last reader it waits for wakes it (or, if it
/// gave up, unlocks on its behalf).
#[cold]
pub fn runlock_slow<P: RwParts>(p: &P, r: i32) {
    if r + 1 == 0 || r + 1 == -MAX_READERS {
        fatal("sync: RUnlock of unlocked RWMutex");
    }
    if p.reader_wait().add(-1) == 0 && !p.writer_sem().release() {
        // The writer gave up waiting for us (a ghost writer): finish its write phase.
        unlock_write(p, 0);
    }
}

/// Go's `Lock`.
#[inline]
pub fn lock<P: RwParts>(p: &P) {
    if p.lock_fast() {
        return;
    }
    let (word, queue) = p.w();
    // First, resolve competition with other writers.
    algo::lock::<_, _, P::Clock>(word, queue);
    announce_and_wait(p, None);
}

/// [`lock`] giving up at `deadline`; `true` if write-locked. A writer that gives up while
/// waiting for `w` leaves no trace; one that gives up while waiting for the readers inside
/// stays as a ghost until the last of them leaves (module docs).
#[inline]
pub fn lock_until<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    if p.lock_fast() {
        return true;
    }
    let (word, queue) = p.w();
    algo::lock_until::<_, _, P::Clock>(word, queue, deadline) && announce_and_wait(p, deadline)
}

/// `Lock` after `w.Lock()`: announce the writer to readers, then wait for the active ones.
#[inline]
fn announce_and_wait<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    let r = p.reader_count().add(-MAX_READERS).wrapping_add(MAX_READERS);
    // Wait for active readers.
    r == 0 || p.reader_wait().add(r) == 0 || p.writer_sem().acquire(deadline)
}

/// Go's `TryLock`: the writers' mutex's `try_lock`, then the reader count from 0 to biased in
/// one compare-and-swap; never waits for departing readers.
#[inline]
pub fn try_lock<P: RwParts>(p: &P) -> bool {
    if p.lock_fast() {
        return true;
    }
    let (word, queue) = p.w();
    if !algo::try_lock(word) {
        return false;
    }
    if p.reader_count().cas(0, -MAX_READERS).is_err() {
        algo::unlock(word, queue);
        return false;
    }
    true
}

/// Go's `Unlock`.
#[inline]
pub fn unlock<P: RwParts>(p: &P) {
    if !p.unlock_fast() {
        unlock_write(p, 0);
    }
}

/// Turn the write lock into a read lock (not in Go; std's `RwLockWriteGuard::downgrade`):
/// `Unlock` with the writer counted as a reader in the same atomic add, so no writer can come
/// in between, and the readers that queued during the write phase are admitted with it.
#[inline]
pub fn downgrade<P: RwParts>(p: &P) {
    unlock_write(p, 1);
}

/// Go's `Unlock`, keeping `readers` read locks (0, or 1 for a downgrade). Also run by the last
/// departing reader on behalf of a ghost writer.
fn unlock_write<P: RwParts>(p: &P, readers: i32) {
    // Announce to readers there is no active writer.
    let r = p.reader_count().add(MAX_READERS + readers) - readers;
    if r >= MAX_READERS {
        fatal("sync: Unlock of unlocked RWMutex");
    }
    // Unblock the readers that queued meanwhile; a token a ghost reader absorbs is its
    // withdrawal, and we do its `RUnlock` (no writer can bias the count: we still hold `w`).
    let mut ghosts = 0;
    for _ in 0..r {
        if !p.reader_sem().release() {
            ghosts += 1;
        }
    }
    if ghosts != 0 {
        p.reader_count().add(-ghosts);
    }
    // Allow other writers to proceed.
    let (word, queue) = p.w();
    algo::unlock(word, queue);
}
