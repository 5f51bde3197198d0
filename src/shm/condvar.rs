//! A condition variable in a [`ShmMutex`]'s region: std's `Condvar` API across processes.
//!
//! The futex-based sequence counter of std's Linux condvar (`library/std/src/sys/sync/condvar/
//! futex.rs`), on a word of the mutex's region header and without `FUTEX_PRIVATE_FLAG`:
//!
//! * `wait` reads the counter while it still holds the lock, unlocks, sleeps on the counter
//!   while it keeps that value, and locks again through [`ShmMutex::lock`] (so it reports
//!   [`LockError::OwnerDied`] / [`LockError::Poisoned`] exactly as `lock` does);
//! * `notify_one` bumps the counter and wakes one sleeper; `notify_all` bumps it, records the
//!   new value in `cv_all`, and also wakes only one: each waiter woken that started waiting
//!   before that broadcast wakes the next one once it holds the mutex again (**wake one and
//!   chain**), so the waiters join the mutex's queue one at a time instead of all running at
//!   once for a lock only one of them can take. (The kernel's `FUTEX_CMP_REQUEUE` cannot move
//!   them onto the mutex: its waiters sleep on per-slot words, each with its own queue
//!   position and accounting.)
//!
//! **Deaths.** A waiter keeps no state in the region while it sleeps but its count in the
//! `cv_sleepers` hint (kept per participant too, so recovery takes a dead process's share back
//! when it frees its slot; a count left too high only costs a `futex` call per notify, one
//! too low a sleeper's 10 ms re-check). A notifier's bump *is* the notification; if it dies
//! between the bump and its `futex` wake, or a chained waiter dies before passing its wake-up
//! on, the sleepers still see the new counter value: they sleep at most one [`TICK`] (10 ms)
//! at a time and then compare it again. So no notification is lost, at worst it is 10 ms late;
//! the price is that a sleeper that saw the counter move at such a check returns even if
//! another waiter took the wake-up (a spurious wake-up, which the condvar contract allows and
//! `wait_while` absorbs). At each tick a sleeper also runs the mutex's rate-limited probe, so
//! dead processes are found even when every survivor sleeps here, and the recovery of a dead
//! participant notifies all (`Region::cv_after_death`): a process that made the condition true
//! and died before its notify leaves nobody asleep.

use super::error::{LockError, LockResult};
use super::layout::Header;
use super::queue::TICK;
use super::region::{Ctx, Region};
use super::{sys, ShmMutex, ShmMutexGuard, ShmSafe};
use crate::WaitTimeoutResult;
use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// A condition variable shared between processes, living in the region of the [`ShmMutex`] it
/// belongs to: std's `Condvar` API over [`ShmMutexGuard`]. Get it with [`ShmMutex::condvar`].
///
/// Every region holds one condition variable (every `condvar()` handle of it, in every
/// process, is the same one). To wait for several conditions on one mutex, use
/// [`notify_all`](Self::notify_all) and let each waiter re-check its own predicate
/// ([`wait_while`](Self::wait_while)); a `notify_one` may wake a waiter of the other condition.
///
/// Robust to process death: a waiter that dies leaves nothing behind, and a notification whose
/// notifier died before its wake-up reached a sleeper is seen by that sleeper at most 10 ms
/// later (sleepers re-check every 10 ms). The death of any process using the mutex, once
/// recovered (sleepers look for dead processes as the mutex's waiters do), notifies all: one
/// that changed the data and died before notifying leaves nobody asleep. Spurious wake-ups
/// happen, as with std's `Condvar`: wait in a loop or with [`wait_while`](Self::wait_while).
///
/// ```
/// use gomutex::shm::ShmMutex;
///
/// let m = ShmMutex::anonymous(0u32)?; // inherited by children made with fork()
/// let cv = m.condvar();
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         *m.lock().unwrap() = 1; // a flag
///         cv.notify_all();
///     });
///     let g = cv.wait_while(m.lock().unwrap(), |flag| *flag == 0).unwrap();
///     assert_eq!(*g, 1);
/// });
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
pub struct ShmCondvar<'a, T: ShmSafe> {
    m: &'a ShmMutex<T>,
}

impl<T: ShmSafe> Clone for ShmCondvar<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ShmSafe> Copy for ShmCondvar<'_, T> {}

impl<T: ShmSafe> fmt::Debug for ShmCondvar<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = self.m.region.hdr();
        f.debug_struct("ShmCondvar")
            .field("seq", &h.cv_seq.load(SeqCst))
            .field("sleepers", &h.cv_sleepers.load(SeqCst))
            .finish()
    }
}

impl<T: ShmSafe> ShmMutex<T> {
    /// The condition variable of this mutex's region (see [`ShmCondvar`]). Cheap: a handle
    /// borrowing the mutex; every handle of the region, in every process, is the same
    /// condition variable.
    pub fn condvar(&self) -> ShmCondvar<'_, T> {
        ShmCondvar { m: self }
    }
}

/// `word -= n`, stopping at 0 (a recovered share may have been counted already).
fn sub_saturating(word: &AtomicU32, n: u32) {
    let _ = word.fetch_update(SeqCst, SeqCst, |v| Some(v.saturating_sub(n)));
}

/// `notify_all` on the words of `h` (see [`ShmCondvar::notify_all`]).
fn broadcast(h: &Header) {
    // Record the broadcast before it happens: every waiter whose counter value is below this
    // one started waiting before the bump below and passes a wake-up on.
    h.cv_all
        .store(h.cv_seq.load(SeqCst).wrapping_add(1), SeqCst);
    h.cv_seq.fetch_add(1, SeqCst);
    if h.cv_sleepers.load(SeqCst) != 0 {
        sys::futex_wake(&h.cv_seq, 1);
    }
}

impl Region {
    /// Recovery, before it frees the slot of the dead participant `d` (identity `ident`): take
    /// the condvar waits it was counted in out of the sleepers hint, and notify all waiters.
    /// The dead process may have changed the data and died before its notify (in its critical
    /// section, or between its unlock and the notify): its death wakes the waiters to re-check
    /// their predicates (a spurious wake-up if it was not about to notify).
    pub(crate) fn cv_after_death(&self, d: u32, ident: u64) {
        let p = self.proc(d);
        if p.ident.load(SeqCst) == ident {
            let n = p.cv_waiting.swap(0, SeqCst);
            if n != 0 {
                sub_saturating(&self.hdr().cv_sleepers, n);
            }
            broadcast(self.hdr());
        }
    }
}

/// Attach `x` to the guard of a lock result (both in `Ok` and in the errors).
fn with<G, X>(r: LockResult<G>, x: X) -> LockResult<(G, X)> {
    match r {
        Ok(g) => Ok((g, x)),
        Err(LockError::OwnerDied(g)) => Err(LockError::OwnerDied((g, x))),
        Err(LockError::Poisoned(g)) => Err(LockError::Poisoned((g, x))),
    }
}

impl<'a, T: ShmSafe> ShmCondvar<'a, T> {
    /// Unlock, sleep until notified (or spuriously woken), lock again. `Err` (carrying the
    /// guard: the lock is held again) exactly when [`ShmMutex::lock`] would report it: a
    /// previous owner died or panicked and nobody called
    /// [`mark_consistent`](ShmMutexGuard::mark_consistent) since.
    ///
    /// # Panics
    ///
    /// If `guard` is not a guard of the mutex this condition variable came from, or was
    /// inherited across `fork()` (it holds nothing outside the process that locked).
    pub fn wait(&self, guard: ShmMutexGuard<'a, T>) -> LockResult<ShmMutexGuard<'a, T>> {
        self.wait_until_opt(guard, None).0
    }

    /// [`wait`](Self::wait) while `condition` returns `true` for the value (checked first,
    /// with the lock held). Returns as soon as a re-acquisition reports an error, with the
    /// guard inside, without checking the condition again (as std's does on poisoning).
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait).
    pub fn wait_while<F>(
        &self,
        mut guard: ShmMutexGuard<'a, T>,
        mut condition: F,
    ) -> LockResult<ShmMutexGuard<'a, T>>
    where
        F: FnMut(&mut T) -> bool,
    {
        while condition(&mut *guard) {
            guard = self.wait(guard)?;
        }
        Ok(guard)
    }

    /// [`wait`](Self::wait) for at most `dur` (then the lock is taken again, however long that
    /// takes, as in std).
    ///
    /// ```
    /// use std::time::Duration;
    /// let m = gomutex::shm::ShmMutex::anonymous(0u8)?;
    /// let cv = m.condvar();
    /// let (_g, r) = cv.wait_timeout(m.lock().unwrap(), Duration::from_millis(2)).unwrap();
    /// assert!(r.timed_out());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait).
    pub fn wait_timeout(
        &self,
        guard: ShmMutexGuard<'a, T>,
        dur: Duration,
    ) -> LockResult<(ShmMutexGuard<'a, T>, WaitTimeoutResult)> {
        let (r, timed_out) = self.wait_until_opt(guard, crate::park::deadline_after(dur));
        with(r, WaitTimeoutResult(timed_out))
    }

    /// [`wait_while`](Self::wait_while) for at most `dur` in total; the result says whether
    /// the time ran out with the condition still `true`.
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait).
    pub fn wait_timeout_while<F>(
        &self,
        mut guard: ShmMutexGuard<'a, T>,
        dur: Duration,
        mut condition: F,
    ) -> LockResult<(ShmMutexGuard<'a, T>, WaitTimeoutResult)>
    where
        F: FnMut(&mut T) -> bool,
    {
        let deadline = crate::park::deadline_after(dur);
        loop {
            if !condition(&mut *guard) {
                return Ok((guard, WaitTimeoutResult(false)));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok((guard, WaitTimeoutResult(true)));
            }
            match self.wait_until_opt(guard, deadline) {
                (Ok(g), _) => guard = g,
                (Err(e), timed_out) => return with(Err(e), WaitTimeoutResult(timed_out)),
            }
        }
    }

    /// Wake one thread waiting on this condition variable, in any process (if any waits).
    pub fn notify_one(&self) {
        let h = self.m.region.hdr();
        h.cv_seq.fetch_add(1, SeqCst);
        // A waiter that was counted after this load sees the new value before it sleeps (its
        // count comes after its read of the counter, both SeqCst).
        if h.cv_sleepers.load(SeqCst) != 0 {
            sys::futex_wake(&h.cv_seq, 1);
        }
    }

    /// Wake every thread waiting on this condition variable, in any process. One is woken
    /// now; each of them wakes the next once it holds the mutex again (see the type docs).
    pub fn notify_all(&self) {
        broadcast(self.m.region.hdr());
    }

    /// The wait: unlock, sleep until the counter moves or `deadline`, lock again. Returns the
    /// lock's result and whether the wait timed out (the counter did not move).
    fn wait_until_opt(
        &self,
        guard: ShmMutexGuard<'a, T>,
        deadline: Option<Instant>,
    ) -> (LockResult<ShmMutexGuard<'a, T>>, bool) {
        assert!(
            core::ptr::eq(guard.m, self.m),
            "gomutex::shm: ShmCondvar used with a guard of another mutex"
        );
        guard.check_owner();
        let h = self.m.region.hdr();
        // Read while holding the lock: a notify made after the waiter's predicate check (under
        // the lock) bumps the counter after this read.
        let seq = h.cv_seq.load(SeqCst);
        // Holding the lock, this process is a participant. Global count first, own share
        // second (and the reverse below): a death between them leaves the hint too high,
        // never too low.
        let me = self.m.registered(sys::fork_generation());
        let mine = me.map(|i| &self.m.region.proc(i).cv_waiting);
        h.cv_sleepers.fetch_add(1, SeqCst);
        if let Some(c) = mine {
            c.fetch_add(1, SeqCst);
        }
        drop(guard);
        // Probe every TICK of sleep, timed from a fixed point (as the mutex's sleepers do): a
        // process that died owning the lock, or between changing the data and notifying, is
        // found even when every other process sleeps here, and its recovery notifies.
        let mut probe_at = Instant::now() + TICK;
        let notified = loop {
            if h.cv_seq.load(SeqCst) != seq {
                break true;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break false;
            }
            if now >= probe_at {
                if let Some(me) = me {
                    Ctx::new(&self.m.region, me).until(deadline).probe();
                }
                probe_at = Instant::now() + TICK;
                continue;
            }
            // Sleep at most until the next probe: a wake-up lost to a notifier's death (or to a
            // chained waiter's) is made up for at the next comparison. EAGAIN, EINTR and
            // time-outs all come back to the comparison above.
            let until = deadline.map_or(probe_at, |d| d.min(probe_at));
            sys::futex_wait(&h.cv_seq, seq, Some(until));
        };
        if let Some(c) = mine {
            c.fetch_sub(1, SeqCst);
        }
        sub_saturating(&h.cv_sleepers, 1);
        let r = self.m.lock();
        // Wake one and chain: a broadcast made since this wait began owes the next sleeper a
        // wake-up, which this waiter passes on now that it holds the mutex (so the next one
        // queues on it rather than all of them racing for it at once).
        if notified
            && (h.cv_all.load(SeqCst).wrapping_sub(seq) as i32) > 0
            && h.cv_sleepers.load(SeqCst) != 0
        {
            sys::futex_wake(&h.cv_seq, 1);
        }
        (r, !notified)
    }
}
