//! [`RawRwLock`]: Go's `RWMutex` without data, for people who build their own primitives.

use crate::algo::{StateWord, LOCKED, STARVING};
use crate::clock::Monotonic;
use crate::rwalgo::{self, ReadToken, RwParts};
use crate::rwword::{readers, RwState, RwWord, BIAS, IDLE_SCANS, OVERLAPS, PHASE, POISON};
use crate::sema::ParkSema;
use std::time::{Duration, Instant};

/// Go's `sync.RWMutex` as a raw lock: no data, no guards, no poisoning.
///
/// Any number of readers or one writer. A writer that arrives excludes new readers at once
/// (writer preference) and waits only for the readers already inside; when it unlocks, the
/// readers that queued meanwhile are all admitted before the next writer. Writers queue on
/// Go's mutex. A read lock is one atomic add (the guards of [`RwLock`](crate::RwLock) and
/// `lock_api` move overlapping readers to a global slot table; these token-less reads never).
///
/// 16 bytes: one 64-bit word with the writers' mutex state, the write phase, the waiting bits,
/// the reader count and [`RwLock`](crate::RwLock)'s poison flag, and the writers' wait queue
/// (8; sleepers live in `parking_lot_core`'s table). Like Go's lock it has no owner: one thread
/// may lock and another unlock. Recursive read locking can deadlock (a writer waiting in
/// between excludes the second read), as in Go and std.
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
    /// Everything but the writers' sleepers (`crate::rwword`).
    word: RwWord,
    /// The writers' mutex wait queue.
    queue: ParkSema,
}

impl RwParts for RawRwLock {
    type Word = RwWord;
    type Queue = ParkSema;
    type Clock = Monotonic;
    #[inline]
    fn word(&self) -> &RwWord {
        &self.word
    }
    #[inline]
    fn queue(&self) -> &ParkSema {
        &self.queue
    }
    #[inline]
    fn key(&self) -> usize {
        &self.word as *const RwWord as usize
    }
}

impl RawRwLock {
    const_new! {
        /// An unlocked lock.
        pub fn new() -> Self {
            Self {
                word: RwWord::new(),
                queue: ParkSema::new(),
            }
        }
    }

    /// Acquire a read lock, blocking while a writer holds the lock or waits for it.
    #[inline]
    pub fn read(&self) {
        rwalgo::read(self);
    }

    /// Acquire a read lock if no writer holds the lock or waits for it (Go's `TryRLock`); never
    /// blocks.
    #[inline]
    pub fn try_read(&self) -> bool {
        rwalgo::try_read(self)
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
        rwalgo::read_until(self, crate::clock::deadline_after(timeout))
    }

    /// Acquire a read lock, giving up at `deadline`. Returns whether it was acquired.
    #[inline]
    pub fn try_read_until(&self, deadline: Instant) -> bool {
        rwalgo::read_until(self, Some(deadline))
    }

    /// Acquire a read lock, through the global slot table if readers of this lock overlap
    /// (the lock is biased), blocking while a writer holds the lock or waits for it. What
    /// [`RwLock`](crate::RwLock)'s read guards and `lock_api`'s do; the token says where the
    /// read lock is held, for [`unlock_read_token`](Self::unlock_read_token).
    #[doc(hidden)] // the guards' path; not part of the API
    #[inline]
    pub fn read_token(&self) -> ReadToken {
        rwalgo::read_token(self)
    }

    /// [`read_token`](Self::read_token), and whether the lock was poisoned as it was taken
    /// (`RwLock::read`'s guard: no second look at the word).
    #[inline]
    pub(crate) fn read_token_poisoned(&self) -> (ReadToken, bool) {
        let (t, v) = rwalgo::read_token_seen(self);
        (t, v & POISON != 0)
    }

    /// [`try_read`](Self::try_read) with a token.
    #[doc(hidden)] // the guards' path; not part of the API
    #[inline]
    pub fn try_read_token(&self) -> Option<ReadToken> {
        rwalgo::try_read_token(self)
    }

    /// [`try_read_until`](Self::try_read_until) with a token (`None`: forever).
    #[doc(hidden)] // the guards' path; not part of the API
    #[inline]
    pub fn try_read_token_until(&self, deadline: Option<Instant>) -> Option<ReadToken> {
        rwalgo::read_token_until(self, deadline)
    }

    /// Release the read lock `token` stands for.
    ///
    /// # Safety
    ///
    /// `token` came from this lock's `read_token` (or its `try_` forms).
    #[doc(hidden)] // the guards' path; not part of the API
    #[inline]
    pub unsafe fn unlock_read_token(&self, token: ReadToken) {
        rwalgo::read_unlock_token(self, token);
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
        rwalgo::read_unlock(self);
    }

    /// Acquire the write lock, blocking until no reader and no other writer holds it.
    #[inline]
    pub fn write(&self) {
        rwalgo::write(self);
    }

    /// [`write`](Self::write), returning whether the lock was poisoned as it was taken
    /// (`RwLock::write`'s guard: no second look at the word).
    #[inline]
    pub(crate) fn write_poisoned(&self) -> bool {
        rwalgo::write_seen(self) & POISON != 0
    }

    /// Acquire the write lock if it is free right now (Go's `TryLock`); never blocks, never
    /// waits for departing readers.
    #[inline]
    pub fn try_write(&self) -> bool {
        rwalgo::try_write(self)
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
        rwalgo::write_until(self, crate::clock::deadline_after(timeout))
    }

    /// Acquire the write lock, giving up at `deadline`. Returns whether it was acquired.
    #[inline]
    pub fn try_write_until(&self, deadline: Instant) -> bool {
        rwalgo::write_until(self, Some(deadline))
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
        rwalgo::write_unlock(self);
    }

    /// Release the write lock fairly: the readers queued behind it are admitted (as always),
    /// and the writers' mutex is handed to the writer queued first, if one is, so this thread
    /// cannot take the lock back in between (`RawMutex::unlock_fair`'s hand-off).
    ///
    /// ```
    /// use gomutex::RawRwLock;
    ///
    /// let l = RawRwLock::new();
    /// l.write();
    /// // SAFETY: we hold the write lock.
    /// unsafe { l.unlock_write_fair() };
    /// assert!(l.try_write());
    /// unsafe { l.unlock_write() };
    /// ```
    ///
    /// # Safety
    ///
    /// As for [`unlock_write`](Self::unlock_write).
    #[inline]
    pub unsafe fn unlock_write_fair(&self) {
        rwalgo::write_unlock_fair(self);
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
        let v = self.word.load_all();
        readers(v) != 0
            || v as u32 & (LOCKED | STARVING) != 0
            || (v & BIAS != 0 && rwalgo::table_readers(self) != 0)
    }

    /// Whether a writer holds the lock or waits for the readers inside to leave, right now (a
    /// snapshot; from the moment a writer announces itself, new readers wait).
    #[inline]
    pub fn is_locked_exclusive(&self) -> bool {
        self.word.load_all() & PHASE != 0
    }

    /// The state word without the poison flag and the bias bits (`crate::rwword`'s layout):
    /// for tests and models. A snapshot only.
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn state(&self) -> u64 {
        self.word.load_all() & !(POISON | BIAS | OVERLAPS | IDLE_SCANS)
    }

    /// Readers inside, through the word and through the table, right now (a snapshot, for
    /// tests and models).
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn readers(&self) -> u64 {
        readers(self.word.load_all()) + rwalgo::table_readers(self) as u64
    }

    /// Whether readers enter through the slot table right now (a snapshot, for tests and
    /// models).
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn is_biased(&self) -> bool {
        self.word.load_all() & BIAS != 0
    }

    /// Bias the lock now, as if its readers had overlapped often enough; `false` if a writer
    /// is announced (for tests and models).
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn bias(&self) -> bool {
        rwalgo::bias(self)
    }

    /// The writers' mutex state (`crate::algo`'s word): for tests and models. A snapshot only.
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn writers(&self) -> u32 {
        StateWord::load(&self.word)
    }

    /// Threads parked on this lock right now: writers waiting for the writers' mutex, for
    /// readers, and readers waiting for a write phase to end (for tests and models: a
    /// snapshot).
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn parked(&self) -> usize {
        self.queue.parked() + rwalgo::parked_writer(self) + rwalgo::parked_readers(self)
    }

    /// Readers parked waiting for a write phase to end (for tests and models: a snapshot).
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn parked_readers(&self) -> usize {
        rwalgo::parked_readers(self)
    }

    /// Wake-up tokens of the writers' mutex kept while nobody slept (0 when quiescent).
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn stored_tokens(&self) -> u32 {
        self.queue.stored_tokens()
    }
}

/// [`RwLock`](crate::RwLock)'s poison flag, a bit of the word.
impl crate::poison::Poison for RawRwLock {
    #[inline]
    fn get(&self) -> bool {
        self.word.load_all() & POISON != 0
    }
    #[inline]
    fn set(&self) {
        self.word.or_all(POISON);
    }
    #[inline]
    fn clear(&self) {
        self.word.clear_all(POISON);
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
    use crate::rwalgo::{self, ReadToken};
    use lock_api::GuardNoSend;
    use std::time::{Duration, Instant};

    // SAFETY: `lock_shared`/`lock_exclusive` and their `try_` forms provide readers-writer
    // exclusion (Go's algorithm); the unlocks require the matching lock held, as `lock_api`
    // guarantees. The guards are `!Send`, like std's; a shared guard carries where its read
    // lock is held (a slot of the table, or the word).
    unsafe impl lock_api::RawRwLock for RawRwLock {
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: Self = RawRwLock::new();
        type SharedGuard = ReadToken;
        type ExclusiveGuard = GuardNoSend;

        fn lock_shared(&self) -> ReadToken {
            self.read_token()
        }
        fn try_lock_shared(&self) -> Option<ReadToken> {
            self.try_read_token()
        }
        unsafe fn unlock_shared(&self, t: ReadToken) {
            // SAFETY: lock_api gives back the token its lock_shared returned.
            unsafe { self.unlock_read_token(t) }
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

    // SAFETY: as above. A read lock's release is already fair: once a writer has announced
    // itself no reader can enter, and the last reader to leave wakes it; the fair write unlock
    // hands the writers' mutex to the writer queued first.
    unsafe impl lock_api::RawRwLockFair for RawRwLock {
        unsafe fn unlock_shared_fair(&self, t: ReadToken) {
            // SAFETY: lock_api gives back the token its lock_shared returned.
            unsafe { self.unlock_read_token(t) }
        }
        unsafe fn unlock_exclusive_fair(&self, _: GuardNoSend) {
            // SAFETY: lock_api only calls this while the write lock is held.
            unsafe { self.unlock_write_fair() }
        }
    }

    // SAFETY: as above; a downgrade keeps a read lock (counted in the word) without letting a
    // writer in between.
    unsafe impl lock_api::RawRwLockDowngrade for RawRwLock {
        unsafe fn downgrade(&self, _: GuardNoSend) -> ReadToken {
            // SAFETY: lock_api only calls this while the write lock is held.
            unsafe { RawRwLock::downgrade(self) };
            ReadToken::word()
        }
    }

    // SAFETY: an upgradable read lock holds the writers' mutex (so no writer, and no other
    // upgradable reader, gets in) and one reader counted in the word (so a writer's phase
    // waits for it); the upgrade announces the phase and stops counting itself in one step,
    // then waits for the other readers (those in the table are folded first) as any writer.
    // `try_upgrade` fails unless it was the only reader, leaving the upgradable lock held.
    unsafe impl lock_api::RawRwLockUpgrade for RawRwLock {
        type UpgradableGuard = GuardNoSend;
        fn lock_upgradable(&self) -> GuardNoSend {
            rwalgo::read_upgradable(self);
            GuardNoSend::new()
        }
        fn try_lock_upgradable(&self) -> Option<GuardNoSend> {
            rwalgo::try_read_upgradable(self).then(GuardNoSend::new)
        }
        unsafe fn unlock_upgradable(&self, _: GuardNoSend) {
            rwalgo::upgradable_unlock(self, false);
        }
        unsafe fn upgrade(&self, _: GuardNoSend) -> GuardNoSend {
            rwalgo::upgrade(self);
            GuardNoSend::new()
        }
        unsafe fn try_upgrade(&self, g: GuardNoSend) -> Result<GuardNoSend, GuardNoSend> {
            if rwalgo::try_upgrade(self) {
                Ok(g)
            } else {
                Err(g)
            }
        }
    }

    // SAFETY: as above; the fair unlock hands the writers' mutex to the writer queued first.
    unsafe impl lock_api::RawRwLockUpgradeFair for RawRwLock {
        unsafe fn unlock_upgradable_fair(&self, _: GuardNoSend) {
            rwalgo::upgradable_unlock(self, true);
        }
    }

    // SAFETY: as above. Upgradable to shared releases the writers' mutex and keeps the counted
    // reader; exclusive to upgradable ends the phase counting itself in, keeping the mutex.
    unsafe impl lock_api::RawRwLockUpgradeDowngrade for RawRwLock {
        unsafe fn downgrade_upgradable(&self, _: GuardNoSend) -> ReadToken {
            rwalgo::downgrade_upgradable(self);
            ReadToken::word()
        }
        unsafe fn downgrade_to_upgradable(&self, _: GuardNoSend) -> GuardNoSend {
            rwalgo::downgrade_to_upgradable(self);
            GuardNoSend::new()
        }
    }

    // SAFETY: as above; the timed variants only add a deadline.
    unsafe impl lock_api::RawRwLockTimed for RawRwLock {
        type Duration = Duration;
        type Instant = Instant;
        fn try_lock_shared_for(&self, timeout: Duration) -> Option<ReadToken> {
            self.try_read_token_until(crate::clock::deadline_after(timeout))
        }
        fn try_lock_shared_until(&self, deadline: Instant) -> Option<ReadToken> {
            self.try_read_token_until(Some(deadline))
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
    use crate::rwalgo;
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

    // SAFETY: as above (the fair read unlock is the read unlock; see the 0.5 impl).
    unsafe impl lock_api::RawRwLockFair for RawRwLock {
        unsafe fn unlock_shared_fair(&self) {
            // SAFETY: lock_api only calls this while a read lock is held.
            unsafe { self.unlock_read() }
        }
        unsafe fn unlock_exclusive_fair(&self) {
            // SAFETY: lock_api only calls this while the write lock is held.
            unsafe { self.unlock_write_fair() }
        }
    }

    // SAFETY: as above.
    unsafe impl lock_api::RawRwLockDowngrade for RawRwLock {
        unsafe fn downgrade(&self) {
            // SAFETY: lock_api only calls this while the write lock is held.
            unsafe { RawRwLock::downgrade(self) }
        }
    }

    // SAFETY: as for lock_api 0.5's upgradable traits above.
    unsafe impl lock_api::RawRwLockUpgrade for RawRwLock {
        fn lock_upgradable(&self) {
            rwalgo::read_upgradable(self);
        }
        fn try_lock_upgradable(&self) -> bool {
            rwalgo::try_read_upgradable(self)
        }
        unsafe fn unlock_upgradable(&self) {
            rwalgo::upgradable_unlock(self, false);
        }
        unsafe fn upgrade(&self) {
            rwalgo::upgrade(self);
        }
        unsafe fn try_upgrade(&self) -> bool {
            rwalgo::try_upgrade(self)
        }
    }

    // SAFETY: as above. A recursive read enters beside the readers inside even while a writer
    // waits for them (so a thread holding a read lock cannot deadlock on a second one): that
    // writer cannot be inside while readers are. With no reader inside it waits as any read.
    // (All of lock_api 0.4's reads are counted in the word, which is what it looks at.)
    unsafe impl lock_api::RawRwLockRecursive for RawRwLock {
        fn lock_shared_recursive(&self) {
            rwalgo::read_recursive_until(self, None);
        }
        fn try_lock_shared_recursive(&self) -> bool {
            rwalgo::try_read_recursive(self)
        }
    }

    // SAFETY: as above, with a deadline for the wait.
    unsafe impl lock_api::RawRwLockRecursiveTimed for RawRwLock {
        fn try_lock_shared_recursive_for(&self, timeout: Duration) -> bool {
            rwalgo::read_recursive_until(self, crate::clock::deadline_after(timeout))
        }
        fn try_lock_shared_recursive_until(&self, deadline: Instant) -> bool {
            rwalgo::read_recursive_until(self, Some(deadline))
        }
    }

    // SAFETY: as above.
    unsafe impl lock_api::RawRwLockUpgradeFair for RawRwLock {
        unsafe fn unlock_upgradable_fair(&self) {
            rwalgo::upgradable_unlock(self, true);
        }
    }

    // SAFETY: as above.
    unsafe impl lock_api::RawRwLockUpgradeDowngrade for RawRwLock {
        unsafe fn downgrade_upgradable(&self) {
            rwalgo::downgrade_upgradable(self);
        }
        unsafe fn downgrade_to_upgradable(&self) {
            rwalgo::downgrade_to_upgradable(self);
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
