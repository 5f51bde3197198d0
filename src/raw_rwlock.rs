//! [`RawRwLock`]: Go's `RWMutex` without data, for people who build their own primitives.

use crate::algo::{StateWord, LOCKED, STARVING};
use crate::clock::Monotonic;
use crate::poison;
use crate::rwalgo::{self, Counter, RwParts};
use crate::rwword::RwWord;
use crate::sema::{ParkSema, Sema};
use crate::sync::AtomicI32;
use std::time::{Duration, Instant};

/// Go's `sync.RWMutex` as a raw lock: no data, no guards, no poisoning.
///
/// Any number of readers or one writer. A writer that arrives excludes new readers at once
/// (writer preference) and waits only for the readers already inside; when it unlocks, the
/// readers that queued meanwhile are all admitted before the next writer. Writers queue on
/// Go's mutex. A read lock is one atomic add that never retries.
///
/// 32 bytes: the writers' mutex state and the reader count in one 64-bit word (so that an
/// uncontended write lock and unlock are one compare-and-swap each), the writers' wait queue
/// (8), the count of departing readers and two semaphores (4 each; the sleepers live in
/// `parking_lot_core`'s table), and the byte [`RwLock`](crate::RwLock) keeps its poison flag
/// in (padding otherwise). Like Go's lock it has no owner: one thread may lock and another unlock. Recursive read locking can
/// deadlock (a writer waiting in between excludes the second read), as in Go and std.
///
/// ```
/// use gomutex::RawRwLock;
///
/// static LOCK: RawRwLock = RawRwLock::new();
/// LOCK.read();
/// LOCK.read();
/// assert!(!LOCK.try_write());
/// // SAFETY: we hold two read locks.
/// unsafe { LOCK.unlock_read() };
/// unsafe { LOCK.unlock_read() };
/// LOCK.write();
/// assert!(!LOCK.try_read());
/// // SAFETY: we hold the write lock.
/// unsafe { LOCK.unlock_write() };
/// ```
#[derive(Debug)]
pub struct RawRwLock {
    /// The writers' mutex state and `readerCount`.
    word: RwWord,
    /// The writers' mutex wait queue.
    queue: ParkSema,
    reader_wait: AtomicI32,
    writer_sem: Sema,
    reader_sem: Sema,
    /// [`RwLock`](crate::RwLock)'s poison flag (not used by the raw lock itself).
    pub(crate) poison: poison::Flag,
}

impl RwParts for RawRwLock {
    type Word = RwWord;
    type Queue = ParkSema;
    type Clock = Monotonic;
    /// `readerCount` is a half of [`RwWord`], `readerWait` an `AtomicI32`.
    type Count = dyn Counter + 'static;
    type Sema = Sema;
    #[inline]
    fn w(&self) -> (&RwWord, &ParkSema) {
        (&self.word, &self.queue)
    }
    #[inline]
    fn reader_count(&self) -> &Self::Count {
        &self.word
    }
    #[inline]
    fn reader_wait(&self) -> &Self::Count {
        &self.reader_wait
    }
    #[inline]
    fn lock_fast(&self) -> bool {
        self.word.lock_fast()
    }
    #[inline]
    fn unlock_fast(&self) -> bool {
        self.word.unlock_fast()
    }
    #[inline]
    fn writer_sem(&self) -> &Sema {
        &self.writer_sem
    }
    #[inline]
    fn reader_sem(&self) -> &Sema {
        &self.reader_sem
    }
}

impl RawRwLock {
    const_new! {
        /// An unlocked lock.
        pub fn new() -> Self {
            Self {
                word: RwWord::new(),
                queue: ParkSema::new(),
                reader_wait: AtomicI32::new(0),
                writer_sem: Sema::new(),
                reader_sem: Sema::new(),
                poison: poison::Flag::new(),
            }
        }
    }

    /// Acquire a read lock, blocking while a writer holds the lock or waits for it.
    #[inline]
    pub fn read(&self) {
        rwalgo::rlock(self);
    }

    /// Acquire a read lock if no writer holds the lock or waits for it (Go's `TryRLock`); never
    /// blocks.
    #[inline]
    pub fn try_read(&self) -> bool {
        rwalgo::try_rlock(self)
    }

    /// Acquire a read lock, giving up after `timeout`. Returns whether it was acquired.
    ///
    /// ```
    /// use gomutex::RawRwLock;
    /// use std::time::Duration;
    ///
    /// let l = RawRwLock::new();
    /// l.write();
    /// assert!(!l.try_read_for(Duration::from_millis(1)));
    /// unsafe { l.unlock_write() };
    /// assert!(l.try_read_for(Duration::from_millis(1)));
    /// unsafe { l.unlock_read() };
    /// ```
    #[inline]
    pub fn try_read_for(&self, timeout: Duration) -> bool {
        rwalgo::rlock_until(self, crate::clock::deadline_after(timeout))
    }

    /// Acquire a read lock, giving up at `deadline`. Returns whether it was acquired.
    #[inline]
    pub fn try_read_until(&self, deadline: Instant) -> bool {
        rwalgo::rlock_until(self, Some(deadline))
    }

    /// Release a read lock.
    ///
    /// # Safety
    ///
    /// A read lock must be held (by any thread: the lock has no owner). Releasing a lock that
    /// is not read-locked is, where detected, a fatal error as in Go (the process prints
    /// `fatal error: sync: RUnlock of unlocked RWMutex` and aborts).
    #[inline]
    pub unsafe fn unlock_read(&self) {
        rwalgo::runlock(self);
    }

    /// Acquire the write lock, blocking until no reader and no other writer holds it.
    #[inline]
    pub fn write(&self) {
        rwalgo::lock(self);
    }

    /// Acquire the write lock if it is free right now (Go's `TryLock`); never blocks, never
    /// waits for departing readers.
    #[inline]
    pub fn try_write(&self) -> bool {
        rwalgo::try_lock(self)
    }

    /// Acquire the write lock, giving up after `timeout`. Returns whether it was acquired.
    ///
    /// A writer that gives up while readers are inside leaves as if it had acquired and
    /// released the lock the moment they left: readers that arrived after it wait until then.
    ///
    /// ```
    /// use gomutex::RawRwLock;
    /// use std::time::Duration;
    ///
    /// let l = RawRwLock::new();
    /// l.read();
    /// assert!(!l.try_write_for(Duration::from_millis(1)));
    /// unsafe { l.unlock_read() };
    /// assert!(l.try_write_for(Duration::from_millis(1)));
    /// unsafe { l.unlock_write() };
    /// ```
    #[inline]
    pub fn try_write_for(&self, timeout: Duration) -> bool {
        rwalgo::lock_until(self, crate::clock::deadline_after(timeout))
    }

    /// Acquire the write lock, giving up at `deadline`. Returns whether it was acquired.
    #[inline]
    pub fn try_write_until(&self, deadline: Instant) -> bool {
        rwalgo::lock_until(self, Some(deadline))
    }

    /// Release the write lock.
    ///
    /// # Safety
    ///
    /// The write lock must be held (by any thread). Releasing a lock that is not write-locked
    /// is, where detected, a fatal error as in Go (`fatal error: sync: Unlock of unlocked
    /// RWMutex`).
    #[inline]
    pub unsafe fn unlock_write(&self) {
        rwalgo::unlock(self);
    }

    /// Turn the write lock into a read lock, atomically: no writer can come in between, and
    /// the readers that queued meanwhile are admitted with it.
    ///
    /// ```
    /// use gomutex::RawRwLock;
    ///
    /// let l = RawRwLock::new();
    /// l.write();
    /// // SAFETY: we hold the write lock, then a read lock.
    /// unsafe { l.downgrade() };
    /// assert!(l.try_read());
    /// assert!(!l.try_write());
    /// unsafe { l.unlock_read() };
    /// unsafe { l.unlock_read() };
    /// ```
    ///
    /// # Safety
    ///
    /// The write lock must be held; on return a read lock is held instead.
    #[inline]
    pub unsafe fn downgrade(&self) {
        rwalgo::downgrade(self);
    }

    /// Whether the lock is held or wanted by a writer, or held by a reader, right now (a
    /// snapshot).
    #[inline]
    pub fn is_locked(&self) -> bool {
        Counter::load(&self.word) != 0 || StateWord::load(&self.word) & (LOCKED | STARVING) != 0
    }

    /// Whether a writer holds the lock or waits for the readers inside to leave, right now (a
    /// snapshot; from the moment a writer announces itself, new readers wait).
    #[inline]
    pub fn is_locked_exclusive(&self) -> bool {
        Counter::load(&self.word) < 0
    }

    /// The reader count (biased by `-2^30` during a write phase), the count of departing
    /// readers, the writers' mutex state, and the two semaphores' counts (writer, reader):
    /// for tests and models. A snapshot only.
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn state(&self) -> (i32, i32, u32, i32, i32) {
        (
            Counter::load(&self.word),
            Counter::load(&self.reader_wait),
            StateWord::load(&self.word),
            self.writer_sem.count(),
            self.reader_sem.count(),
        )
    }

    /// Threads parked on this lock right now, writers' mutex and both semaphores (for tests
    /// and models: a snapshot).
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn parked(&self) -> usize {
        self.queue.parked() + self.writer_sem.parked() + self.reader_sem.parked()
    }
}

impl Default for RawRwLock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
mod lock_api_impl {
    use super::RawRwLock;
    use lock_api::GuardNoSend;
    use std::time::{Duration, Instant};

    // SAFETY: `lock_shared`/`lock_exclusive` and their `try_` forms provide readers-writer
    // exclusion (Go's algorithm); the unlocks require the matching lock held, as `lock_api`
    // guarantees. The guards are `!Send`, like std's.
    unsafe impl lock_api::RawRwLock for RawRwLock {
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: Self = RawRwLock::new();
        type SharedGuard = GuardNoSend;
        type ExclusiveGuard = GuardNoSend;

        fn lock_shared(&self) -> GuardNoSend {
            self.read();
            GuardNoSend::new()
        }
        fn try_lock_shared(&self) -> Option<GuardNoSend> {
            self.try_read().then(GuardNoSend::new)
        }
        unsafe fn unlock_shared(&self, _: GuardNoSend) {
            // SAFETY: lock_api only calls this while a read lock is held.
            unsafe { self.unlock_read() }
        }
        fn lock_exclusive(&self) -> GuardNoSend {
            self.write();
            GuardNoSend::new()
        }
        fn try_lock_exclusive(&self) -> Option<GuardNoSend> {
            self.try_write().then(GuardNoSend::new)
        }
        unsafe fn unlock_exclusive(&self, _: GuardNoSend) {
            // SAFETY: lock_api only calls this while the write lock is held.
            unsafe { self.unlock_write() }
        }
        fn is_locked(&self) -> bool {
            RawRwLock::is_locked(self)
        }
        fn is_locked_exclusive(&self) -> bool {
            RawRwLock::is_locked_exclusive(self)
        }
    }

    // SAFETY: as above; a downgrade keeps a read lock without letting a writer in between.
    unsafe impl lock_api::RawRwLockDowngrade for RawRwLock {
        unsafe fn downgrade(&self, _: GuardNoSend) -> GuardNoSend {
            // SAFETY: lock_api only calls this while the write lock is held.
            unsafe { RawRwLock::downgrade(self) };
            GuardNoSend::new()
        }
    }

    // SAFETY: as above; the timed variants only add a deadline.
    unsafe impl lock_api::RawRwLockTimed for RawRwLock {
        type Duration = Duration;
        type Instant = Instant;
        fn try_lock_shared_for(&self, timeout: Duration) -> Option<GuardNoSend> {
            self.try_read_for(timeout).then(GuardNoSend::new)
        }
        fn try_lock_shared_until(&self, deadline: Instant) -> Option<GuardNoSend> {
            self.try_read_until(deadline).then(GuardNoSend::new)
        }
        fn try_lock_exclusive_for(&self, timeout: Duration) -> Option<GuardNoSend> {
            self.try_write_for(timeout).then(GuardNoSend::new)
        }
        fn try_lock_exclusive_until(&self, deadline: Instant) -> Option<GuardNoSend> {
            self.try_write_until(deadline).then(GuardNoSend::new)
        }
    }
}

/// The same for `lock_api` 0.4 (parking_lot 0.12's), whose traits carry no guard state.
#[cfg(feature = "lock_api_04")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api_04")))]
mod lock_api_04_impl {
    use super::RawRwLock;
    use lock_api_04 as lock_api;
    use std::time::{Duration, Instant};

    // SAFETY: as for lock_api 0.5 above.
    unsafe impl lock_api::RawRwLock for RawRwLock {
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: Self = RawRwLock::new();
        type GuardMarker = lock_api::GuardNoSend;

        fn lock_shared(&self) {
            self.read()
        }
        fn try_lock_shared(&self) -> bool {
            self.try_read()
        }
        unsafe fn unlock_shared(&self) {
            // SAFETY: lock_api only calls this while a read lock is held.
            unsafe { self.unlock_read() }
        }
        fn lock_exclusive(&self) {
            self.write()
        }
        fn try_lock_exclusive(&self) -> bool {
            self.try_write()
        }
        unsafe fn unlock_exclusive(&self) {
            // SAFETY: lock_api only calls this while the write lock is held.
            unsafe { self.unlock_write() }
        }
        fn is_locked(&self) -> bool {
            RawRwLock::is_locked(self)
        }
        fn is_locked_exclusive(&self) -> bool {
            RawRwLock::is_locked_exclusive(self)
        }
    }

    // SAFETY: as above.
    unsafe impl lock_api::RawRwLockDowngrade for RawRwLock {
        unsafe fn downgrade(&self) {
            // SAFETY: lock_api only calls this while the write lock is held.
            unsafe { RawRwLock::downgrade(self) }
        }
    }

    // SAFETY: as above.
    unsafe impl lock_api::RawRwLockTimed for RawRwLock {
        type Duration = Duration;
        type Instant = Instant;
        fn try_lock_shared_for(&self, timeout: Duration) -> bool {
            self.try_read_for(timeout)
        }
        fn try_lock_shared_until(&self, deadline: Instant) -> bool {
            self.try_read_until(deadline)
        }
        fn try_lock_exclusive_for(&self, timeout: Duration) -> bool {
            self.try_write_for(timeout)
        }
        fn try_lock_exclusive_until(&self, deadline: Instant) -> bool {
            self.try_write_until(deadline)
        }
    }
}
