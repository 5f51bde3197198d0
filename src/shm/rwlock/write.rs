//! The write side of the protocol (module docs of `rwlock`): the writers' mutex, `PENDING`,
//! the wait for every participant's read count to drain; the phase's end, a dead writer's
//! phase ended by the next, and a write guard's downgrade.

use super::*;

impl<T: ShmSafe> ShmRwLock<T> {
    /// Take the write lock, waiting as long as it takes. `Err` (still carrying the guard) if a
    /// previous writer died or panicked while holding it.
    ///
    /// ```
    /// let lock = gomutex::shm::ShmRwLock::anonymous(0u64)?;
    /// *lock.write().unwrap() += 1;
    /// assert_eq!(*lock.read().unwrap(), 1);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn write(&self) -> LockResult<ShmRwLockWriteGuard<'_, T>> {
        match self.write_by(self.m.lock().map_err(TryLockError::from), None, false) {
            Ok(w) => Ok(w),
            Err(TryLockError::OwnerDied(w)) => Err(LockError::OwnerDied(w)),
            Err(TryLockError::Poisoned(w)) => Err(LockError::Poisoned(w)),
            Err(TryLockError::WouldBlock) => unreachable!("an untimed write lock never gives up"),
        }
    }

    /// Take the write lock if nobody holds it, no reader is inside or queued, and the writers'
    /// mutex is not in starvation mode; never waits.
    ///
    /// ```
    /// use gomutex::shm::{ShmRwLock, TryLockError};
    /// let lock = ShmRwLock::anonymous(0u32)?;
    /// let r = lock.read().unwrap();
    /// assert!(matches!(lock.try_write(), Err(TryLockError::WouldBlock)));
    /// drop(r);
    /// assert!(lock.try_write().is_ok());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn try_write(&self) -> TryLockResult<ShmRwLockWriteGuard<'_, T>> {
        let r = self.m.try_lock();
        self.write_by(r, Some(Instant::now()), true)
    }

    /// Take the write lock, waiting at most `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let lock = gomutex::shm::ShmRwLock::anonymous(0u32)?;
    /// let r = lock.read().unwrap();
    /// assert!(lock.try_write_for(Duration::from_millis(5)).is_err());
    /// drop(r);
    /// assert!(lock.try_write_for(Duration::from_millis(5)).is_ok());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn try_write_for(&self, timeout: Duration) -> TryLockResult<ShmRwLockWriteGuard<'_, T>> {
        let deadline = crate::clock::deadline_after(timeout);
        let r = self.m.try_lock_until_opt(deadline);
        self.write_by(r, deadline, false)
    }

    /// Take the write lock, waiting at most until `deadline`.
    pub fn try_write_until(&self, deadline: Instant) -> TryLockResult<ShmRwLockWriteGuard<'_, T>> {
        let r = self.m.try_lock_until_opt(Some(deadline));
        self.write_by(r, Some(deadline), false)
    }

    pub(super) fn write_by<'a>(
        &'a self,
        r: TryLockResult<ShmMutexGuard<'a, RwBody<T>>>,
        deadline: Option<Instant>,
        once: bool,
    ) -> TryLockResult<ShmRwLockWriteGuard<'a, T>> {
        let (g, flag) = split(r);
        let g = g.ok_or(TryLockError::WouldBlock)?;
        match self.write_phase(g, deadline, once) {
            Some(w) => flagged(w, flag),
            None => Err(TryLockError::WouldBlock),
        }
    }

    /// With the writers' mutex held: end a dead writer's phase if one is left, let the queued
    /// readers in, announce the writer and wait for the readers inside to leave. `None` (the
    /// mutex unlocked again) if `deadline` passed first (or, if `once`, anybody is in the way).
    pub(super) fn write_phase<'a>(
        &'a self,
        g: ShmMutexGuard<'a, RwBody<T>>,
        deadline: Option<Instant>,
        once: bool,
    ) -> Option<ShmRwLockWriteGuard<'a, T>> {
        if self.state().load(SeqCst) & PENDING != 0 {
            // Live writers end their phase before unlocking the mutex: this one's writer died.
            self.end_phase();
        }
        let mut held = HeldUp::default();
        // Go's batch order: the readers that queued behind the previous writer come first.
        // (Each wait begins with one look at the counts: most phases need no more.)
        let waiting = |i| self.waiting(i);
        if self.counted(waiting) && !self.wait_counts(waiting, deadline, once, &mut held) {
            self.record_write_wait(g.me, held);
            return None; // `g` unlocks
        }
        self.state().fetch_or(PENDING, SeqCst);
        crate::crash::point(crate::crash::RW_PENDING);
        let reads = |i| self.reads(i);
        let inside = !self.counted(reads) || self.wait_counts(reads, deadline, once, &mut held);
        self.record_write_wait(g.me, held);
        if !inside {
            self.end_phase();
            return None;
        }
        self.tidy();
        Some(ShmRwLockWriteGuard {
            lock: self,
            g: ManuallyDrop::new(g),
        })
    }

    /// Wait until `count(i)` is 0 for every participant (a writer, holding the mutex);
    /// `false` if `deadline` passed first (or, if `once`, at once). Every [`TICK`], recover the
    /// participants found dead with a non-zero count (which zeroes it). `held` records, for the
    /// statistics, that a call that waits found a count non-zero, and when it first slept.
    pub(super) fn wait_counts<'a>(
        &'a self,
        count: impl Fn(u32) -> &'a AtomicU32,
        deadline: Option<Instant>,
        once: bool,
        held: &mut HeldUp,
    ) -> bool {
        let busy = || self.counted(&count);
        // Read the clock only once the writer is about to sleep: a clock read costs as much as
        // the rest of an uncontended write phase, and most phases never sleep.
        let mut next_reap: Option<Instant> = None;
        // Spin rounds since the last sleep: readers leave within nanoseconds unless preempted,
        // and a sleep costs this writer a system call and every departing reader a wake-up.
        let mut iter = 0;
        loop {
            let seq = self.ctl(WAKE).load(SeqCst);
            if !busy() {
                return true;
            }
            if once {
                self.reap_dead(&count, Some(Instant::now()));
                return !busy();
            }
            held.waited = true;
            if crate::spin::can_spin(iter, true) {
                crate::spin::spin_round(true);
                iter += 1;
                continue;
            }
            iter = 0;
            held.sleeps();
            self.state().fetch_or(WSLEEP, SeqCst);
            if !busy() {
                return true;
            }
            let reap_at = *next_reap.get_or_insert_with(|| Instant::now() + TICK);
            let until = deadline.map_or(reap_at, |d| d.min(reap_at));
            sys::futex_wait(self.ctl(WAKE), seq, Some(until));
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return !busy();
            }
            if now >= reap_at {
                self.reap_dead(&count, deadline);
                next_reap = Some(now + TICK);
            }
        }
    }

    /// Recover every participant with a non-zero `count` that is dead (its counts are zeroed
    /// with the rest of what it left). A caller with a `deadline` does not wait past it for
    /// the journal lock (a stopped process may hold it): the next look retries.
    pub(super) fn reap_dead<'a>(
        &'a self,
        count: &impl Fn(u32) -> &'a AtomicU32,
        deadline: Option<Instant>,
    ) {
        let ctx = self.m.participant().until(deadline);
        self.any_reader(|i| {
            if i != ctx.me && count(i).load(SeqCst) != 0 {
                let p = self.m.region.participant(i);
                let ident = p.ident.load(SeqCst);
                if ident != 0 && p.dead(ident) {
                    ctx.recover(i, ident);
                }
            }
            false
        });
    }

    /// End the write phase: clear the flags, bump the phase, wake the queued readers.
    pub(super) fn end_phase(&self) {
        let old = self
            .state()
            // The phase bits plus one unit, wrapping (the last phase's successor is 0).
            .fetch_update(SeqCst, SeqCst, |s| {
                Some((s & !(PHASE - 1)).wrapping_add(PHASE))
            })
            .unwrap_or_else(|s| s);
        if old & RWAIT != 0 {
            sys::futex_wake(self.state(), i32::MAX);
        }
    }

    /// A queued reader (or a failing `try_read`) that finds a phase `PENDING` while the
    /// writers' mutex is free, or held by a dead writer: recover the mutex and end the phase
    /// (the next acquirer is told that the writer died).
    /// A caller with a `deadline` does not wait past it for the journal lock.
    pub(super) fn end_orphan_phase(&self, deadline: Option<Instant>) {
        let ctx = self.m.participant().until(deadline);
        // The mutex's own owner probe (rate-limited machine-wide): releases it if its owner died.
        ctx.probe();
        let w = self.m.region.hdr().state.load(SeqCst);
        if self.state().load(SeqCst) & PENDING == 0 || low(w) & LOCKED != 0 {
            return;
        }
        let (g, _) = split(self.m.try_lock());
        if g.is_some() && self.state().load(SeqCst) & PENDING != 0 {
            self.end_phase();
        }
    }
}

// --- downgrade ---

impl<'a, T: ShmSafe> ShmRwLockWriteGuard<'a, T> {
    /// Turn the write lock into a read lock, with no writer let in between (std's
    /// `RwLockWriteGuard::downgrade`): the readers queued behind this writer come in now,
    /// the next writer waits until the returned guard (and every other reader) is gone.
    ///
    /// Two existing steps: the writer counts itself as a reader of its process (while it
    /// still holds the writers' mutex and has announced the write phase, so no writer can be
    /// scanning the counts), then unlocks as dropping the write guard does. A process killed
    /// between them is a dead writer holding the writers' mutex (recovered as any, the next
    /// acquirer told [`LockError::OwnerDied`]) and a dead reader's count (zeroed by the same
    /// recovery); killed after, a dead reader. A copy inherited across `fork()` holds nothing
    /// and gives a read guard that holds nothing.
    ///
    /// ```
    /// use gomutex::shm::{ShmRwLock, ShmRwLockWriteGuard, TryLockError};
    /// let lock = ShmRwLock::anonymous(0u32)?;
    /// let mut w = lock.write().unwrap();
    /// *w = 7;
    /// let r = ShmRwLockWriteGuard::downgrade(w);
    /// assert_eq!(*r, 7); // nobody wrote in between
    /// assert_eq!(*lock.try_read().unwrap(), 7); // readers come in
    /// assert!(matches!(lock.try_write(), Err(TryLockError::WouldBlock))); // writers wait
    /// drop(r);
    /// assert!(lock.try_write().is_ok());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn downgrade(this: Self) -> ShmRwLockReadGuard<'a, T> {
        let (lock, generation, me) = (this.lock, this.g.generation, this.g.me);
        if this.is_owner() {
            // The writer excludes every other writer and reader until the phase ends: it may
            // count itself without looking at `PENDING` (which is its own). Published first,
            // as every reader's slot (`publish`).
            lock.publish(generation, me);
            lock.reads(me).fetch_add(1, SeqCst);
            crate::crash::point(crate::crash::RW_DOWNGRADING);
        }
        drop(this); // ends the phase (queued readers come in), unlocks the writers' mutex
        ShmRwLockReadGuard {
            lock,
            generation,
            me,
            _not_send: PhantomData,
        }
    }
}
