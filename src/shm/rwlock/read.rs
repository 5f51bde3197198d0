//! The read side of the protocol (module docs of `rwlock`): a read lock is this process's
//! count raised, then `rw_state` loaded; behind a `PENDING` writer, queue until the phase ends.

use super::*;

impl<T: ShmSafe> ShmRwLock<T> {
    /// Take a read lock, waiting as long as it takes.
    ///
    /// `Err` (still carrying the guard: the read lock is held) if a writer died or panicked
    /// while holding the lock and no writer has called
    /// [`mark_consistent`](ShmRwLockWriteGuard::mark_consistent) since.
    ///
    /// ```
    /// let lock = gomutex::shm::ShmRwLock::anonymous(1u32)?;
    /// let r = lock.read().unwrap();
    /// assert!(lock.try_write().is_err()); // a reader is inside
    /// assert_eq!(*r, 1);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn read(&self) -> LockResult<ShmRwLockReadGuard<'_, T>> {
        let generation = identity::fork_generation();
        let me = self.m.participant_of(generation).me;
        match self.read_as(generation, me, None, false) {
            Some(r) => r,
            None => unreachable!("an untimed read lock never gives up"),
        }
    }

    /// Take a read lock if no writer holds or wants the lock right now; never waits.
    ///
    /// ```
    /// use gomutex::shm::{ShmRwLock, TryLockError};
    /// let lock = ShmRwLock::anonymous(0u32)?;
    /// let w = lock.write().unwrap();
    /// assert!(matches!(lock.try_read(), Err(TryLockError::WouldBlock)));
    /// drop(w);
    /// assert!(lock.try_read().is_ok());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn try_read(&self) -> TryLockResult<ShmRwLockReadGuard<'_, T>> {
        self.try_read_by(Some(Instant::now()), true)
    }

    /// Take a read lock, waiting at most `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let lock = gomutex::shm::ShmRwLock::anonymous(0u32)?;
    /// let w = lock.write().unwrap();
    /// assert!(lock.try_read_for(Duration::from_millis(5)).is_err());
    /// drop(w);
    /// assert!(lock.try_read_for(Duration::from_millis(5)).is_ok());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn try_read_for(&self, timeout: Duration) -> TryLockResult<ShmRwLockReadGuard<'_, T>> {
        self.try_read_by(crate::clock::deadline_after(timeout), false)
    }

    /// Take a read lock, waiting at most until `deadline`.
    pub fn try_read_until(&self, deadline: Instant) -> TryLockResult<ShmRwLockReadGuard<'_, T>> {
        self.try_read_by(Some(deadline), false)
    }

    pub(super) fn try_read_by(
        &self,
        deadline: Option<Instant>,
        once: bool,
    ) -> TryLockResult<ShmRwLockReadGuard<'_, T>> {
        let Some(ctx) = self.m.participant_by(deadline) else {
            return Err(TryLockError::WouldBlock);
        };
        match self.read_as(identity::fork_generation(), ctx.me, deadline, once) {
            Some(r) => Ok(r?),
            None => Err(TryLockError::WouldBlock),
        }
    }

    /// The read lock for participant `me`; `None` if `deadline` passed (or, if `once`, a
    /// writer holds or wants the lock).
    #[inline]
    pub(super) fn read_as(
        &self,
        generation: u32,
        me: u32,
        deadline: Option<Instant>,
        once: bool,
    ) -> Option<LockResult<ShmRwLockReadGuard<'_, T>>> {
        self.publish(generation, me);
        let (reads, waiting) = (self.reads(me), self.waiting(me));
        let mut spun = false;
        let mut held = HeldUp::default();
        loop {
            reads.fetch_add(1, SeqCst);
            crate::crash::point(crate::crash::RW_READ_COUNTED);
            if self.state().load(SeqCst) & PENDING == 0 {
                self.record_read_wait(me, held);
                return Some(self.read_guard(generation, me));
            }
            // A writer holds or wants the lock: take the count back, and wake it if it waits.
            reads.fetch_sub(1, SeqCst);
            self.notify_writer();
            if once {
                self.end_orphan_phase(deadline);
                return None;
            }
            held.waited = true;
            // A write phase is short: spin a few rounds (the mutex's policy) for it to end
            // before queuing, which costs a sleep and the writer a wake-up call. Not counted
            // while spinning, so the writer does not wait for us; when the phase ends, start
            // again. Once per call: a reader that found the lock pending again queues, so a
            // stream of short write phases cannot keep it out (Go's batch order).
            if !spun {
                spun = true;
                let mut iter = 0;
                while crate::spin::can_spin(iter, true) {
                    crate::spin::spin_round(false);
                    iter += 1;
                    if self.state().load(SeqCst) & PENDING == 0 {
                        break;
                    }
                }
                if self.state().load(SeqCst) & PENDING == 0 {
                    continue;
                }
            }
            // Queue. Counted before `RWAIT` is set: if that finds the phase still `PENDING`,
            // the next writer sees the count and lets us in first.
            held.sleeps();
            waiting.fetch_add(1, SeqCst);
            let s = self.state().fetch_or(RWAIT, SeqCst) | RWAIT;
            if s & PENDING == 0 {
                // The phase ended meanwhile: not admitted by anybody; start again.
                waiting.fetch_sub(1, SeqCst);
                self.notify_writer();
                continue;
            }
            crate::crash::point(crate::crash::RW_QUEUED);
            // Leaves the queue however this call ends (a panic in the wait included): a count
            // left behind by a live process would hold up every writer.
            let queued = Queued(self, waiting);
            let admitted = self.wait_phase_end(s, deadline);
            if admitted {
                // In before we leave the queue: the writer that waits for the queue to empty
                // then sees our count.
                reads.fetch_add(1, SeqCst);
            }
            drop(queued);
            self.record_read_wait(me, held);
            return admitted.then(|| self.read_guard(generation, me));
        }
    }

    /// Sleep until the phase of `s` (with `PENDING`, as the sleeper saw it) ends; `false` if
    /// `deadline` passed first. Every [`TICK`], look for a dead writer that left it.
    pub(super) fn wait_phase_end(&self, s: u32, deadline: Option<Instant>) -> bool {
        let ended = |cur: u32| cur & PENDING == 0 || cur / PHASE != s / PHASE;
        // The word as last seen: the writer's `WSLEEP` changes it within the phase, and a
        // sleep on a stale value would return at once, again and again.
        let mut cur = s;
        // Fixed ticks, not "10 ms after the last wake-up": signals interrupting the sleep more
        // often than that must not keep the look for a dead writer from happening.
        let mut tick = Instant::now() + TICK;
        loop {
            let until = deadline.map_or(tick, |d| d.min(tick));
            sys::futex_wait(self.state(), cur, Some(until));
            cur = self.state().load(SeqCst);
            if ended(cur) {
                return true;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return false;
            }
            if now >= tick {
                self.end_orphan_phase(deadline);
                tick = now + TICK;
            }
        }
    }

    pub(super) fn read_guard(
        &self,
        generation: u32,
        me: u32,
    ) -> LockResult<ShmRwLockReadGuard<'_, T>> {
        let h = self.m.region.hdr();
        let g = ShmRwLockReadGuard {
            lock: self,
            generation,
            me,
            _not_send: PhantomData,
        };
        if h.owner_died.load(Acquire) != 0 {
            Err(LockError::OwnerDied(g))
        } else if h.poisoned.load(Acquire) != 0 {
            Err(LockError::Poisoned(g))
        } else {
            Ok(g)
        }
    }

    pub(super) fn read_unlock(&self, me: u32) {
        self.reads(me).fetch_sub(1, SeqCst);
        if self.state().load(SeqCst) & PENDING != 0 {
            self.notify_writer();
        }
    }
}
