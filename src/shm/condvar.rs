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

use super::cv_words::{sub_saturating, Words};
use super::error::{LockError, LockResult, ShmError};
use super::guard::ShmMutexGuard;
use super::identity;
use super::journal::Hooks as _;
use super::mapping::{Mapping, MappingLayout};
use super::region::Participant;
use super::stats;
use super::sys;
use super::timing::TICK;
use super::types::{ShmSafe, ShmShared};
use super::{repaired, ShmMutex};
use crate::WaitTimeoutResult;
use core::fmt;
use core::sync::atomic::{
    AtomicU32, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::time::{Duration, Instant};

/// A condition variable shared between processes, bound to one [`ShmMutex`]: std's `Condvar`
/// API over [`ShmMutexGuard`]. Get the one in the mutex's region with [`ShmMutex::condvar`]
/// (every `condvar()` handle of a region, in every process, is the same one), or more of them,
/// placed in a [`Mapping`] beside the mutex, with [`ShmMutex::condvar_in`] (e.g. "not full"
/// and "not empty" for a bounded queue). With a single condition variable for several
/// conditions, use [`notify_all`](Self::notify_all) and let each waiter re-check its own
/// predicate ([`wait_while`](Self::wait_while)): a `notify_one` may wake a waiter of the other
/// condition.
///
/// After an owner death, [`wait_while_or_repair`](Self::wait_while_or_repair) repairs the
/// data, marks it consistent and **waits on** while the condition holds: the short way to
/// wait that stays right when a process dies holding the lock (`wait_while` returns at once
/// with the error, the condition unchecked).
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
    w: Words<'a>,
}

/// A condition variable placed in a [`Mapping`] ([`MappingLayout::condvar`]): its words and
/// the mutex it belongs to. All zeroes is a new, unbound one; every bit pattern of the words
/// is harmless (at worst a spurious wake-up or a needless `futex` call).
#[repr(C)]
pub(crate) struct Placed {
    seq: AtomicU32,
    all: AtomicU32,
    sleepers: AtomicU32,
    _pad: AtomicU32,
    /// 0: bound to no mutex yet; else the offset in the mapping of the mutex's region, plus 1.
    mutex: AtomicU64,
}
// SAFETY: repr(C), fixed-width atomics only: any bit pattern is valid, every change atomic.
unsafe impl ShmShared for Placed {}

impl MappingLayout {
    /// The offset of a condition variable placed after everything so far (24 bytes, 8-aligned),
    /// for [`ShmMutex::condvar_in`].
    ///
    /// ```
    /// use gomutex::shm::{Config, MappingLayout};
    /// let mut plan = MappingLayout::new();
    /// let lock = plan.mutex::<u64>(Config::default())?;
    /// let (a, b) = (plan.condvar(), plan.condvar());
    /// assert!(lock < a && a + 24 == b && b + 24 == plan.len());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn condvar(&mut self) -> usize {
        self.shared::<Placed>()
    }
}

impl<T: ShmSafe> Clone for ShmCondvar<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ShmSafe> Copy for ShmCondvar<'_, T> {}

impl<T: ShmSafe> fmt::Debug for ShmCondvar<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmCondvar")
            .field("seq", &self.w.seq.load(SeqCst))
            .field("sleepers", &self.w.sleepers.load(SeqCst))
            .field("placed", &self.w.region_seq.is_some())
            .finish()
    }
}

impl<T: ShmSafe> ShmMutex<T> {
    /// The condition variable of this mutex's region (see [`ShmCondvar`]). Cheap: a handle
    /// borrowing the mutex; every handle of the region, in every process, is the same
    /// condition variable.
    pub fn condvar(&self) -> ShmCondvar<'_, T> {
        let w = Words::own(self.region.hdr());
        ShmCondvar { m: self, w }
    }

    /// A condition variable for this mutex placed at `offset` in `map` (from
    /// [`MappingLayout::condvar`]), where this mutex's region must be too: as many as a mutex
    /// needs, e.g. "not full" and "not empty" for a bounded queue. The first call for a
    /// zero-filled place binds it to this mutex, for every process; a call for a place
    /// bound to another mutex is an error ([`ShmError::InvalidConfig`]), as is a mutex that
    /// does not lie in `map`, or an offset out of bounds or misaligned.
    ///
    /// Like the region's own condition variable, it survives deaths: its sleepers re-check
    /// every 10 ms, probe the mutex for dead processes, and return when the mutex's recovery
    /// of a dead participant notifies (through the region's own condition variable, so a
    /// `notify` on that one is a spurious wake-up here, seen at the next re-check). Unlike it,
    /// its sleepers hint is not taken back from a process that dies sleeping (a hint too high
    /// only costs a `futex` call per notify).
    ///
    /// ```
    /// use gomutex::shm::{Config, Mapping, MappingLayout, ShmMutex};
    ///
    /// let cfg = Config::default();
    /// let mut plan = MappingLayout::new();
    /// let (lock, spare) = (plan.mutex::<[u32; 2]>(cfg)?, plan.mutex::<[u32; 2]>(cfg)?);
    /// let (full_at, empty_at) = (plan.condvar(), plan.condvar());
    /// let map = Mapping::anonymous(plan.len())?; // inherited across fork()
    /// let m = ShmMutex::init_in(&map, lock, [0u32; 2], cfg)?;
    /// let not_full = m.condvar_in(&map, full_at)?;
    /// let not_empty = m.condvar_in(&map, empty_at)?;
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         let g = m.lock_or_repair(|_| {});
    ///         let mut g = not_full.wait_while_or_repair(g, |q| q[0] != 0, |_| {});
    ///         g[0] = 42; // an item
    ///         drop(g);
    ///         not_empty.notify_one();
    ///     });
    ///     let g = m.lock_or_repair(|_| {});
    ///     let mut g = not_empty.wait_while_or_repair(g, |q| q[0] == 0, |_| {});
    ///     assert_eq!(std::mem::take(&mut g[0]), 42);
    ///     drop(g);
    ///     not_full.notify_one();
    /// });
    /// // Bound to `m` (in every process): another mutex cannot use it.
    /// let other = ShmMutex::init_in(&map, spare, [0u32; 2], cfg)?;
    /// assert!(other.condvar_in(&map, empty_at).is_err());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn condvar_in<'a>(
        &'a self,
        map: &'a Mapping,
        offset: usize,
    ) -> Result<ShmCondvar<'a, T>, ShmError> {
        let base = self.region.base() as usize;
        let start = map.as_ptr() as usize;
        if !(start..start + map.len()).contains(&base) {
            return Err(ShmError::InvalidConfig(
                "the mutex of a condition variable must lie in the same mapping",
            ));
        }
        let p: &Placed = map.shared(offset)?;
        let mutex_id = (base - start) as u64 + 1;
        match p.mutex.compare_exchange(0, mutex_id, SeqCst, SeqCst) {
            Ok(_) => {}
            Err(bound) if bound == mutex_id => {}
            Err(_) => {
                return Err(ShmError::InvalidConfig(
                    "the condition variable belongs to another mutex",
                ))
            }
        }
        let w = Words {
            seq: &p.seq,
            all: &p.all,
            sleepers: &p.sleepers,
            region_seq: Some(&self.region.hdr().cv_seq),
        };
        Ok(ShmCondvar { m: self, w })
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

/// Drop the attachment of a lock result made with [`with`].
fn without<G, X>(r: LockResult<(G, X)>) -> LockResult<G> {
    match r {
        Ok((g, _)) => Ok(g),
        Err(LockError::OwnerDied((g, _))) => Err(LockError::OwnerDied(g)),
        Err(LockError::Poisoned((g, _))) => Err(LockError::Poisoned(g)),
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
    /// guard inside, without checking the condition again (as std's does on poisoning): to go
    /// on waiting after a death, use [`wait_while_or_repair`](Self::wait_while_or_repair).
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait).
    pub fn wait_while<F>(
        &self,
        guard: ShmMutexGuard<'a, T>,
        condition: F,
    ) -> LockResult<ShmMutexGuard<'a, T>>
    where
        F: FnMut(&mut T) -> bool,
    {
        without(self.wait_while_until(guard, None, condition, None::<fn(&mut T)>))
    }

    /// [`wait_while`](Self::wait_while) that survives owner deaths: when a re-acquisition
    /// reports [`LockError::OwnerDied`] (or [`LockError::Poisoned`]), run `repair` on the
    /// value, [`mark_consistent`](ShmMutexGuard::mark_consistent), and check `condition`
    /// again, waiting on while it holds (as [`ShmMutex::lock_or_repair`] does for `lock`).
    /// Returns the guard once `condition` is `false`.
    ///
    /// The wait to use when any process may die holding the lock: with `wait_while`, code that
    /// takes the guard out of the error and goes on acts on a condition it never checked
    /// (a producer pushing into a full queue, overwriting an item). If `repair` panics the
    /// flags stay set (and the lock is poisoned as well), so the next owner repairs again.
    ///
    /// ```
    /// use gomutex::shm::ShmMutex;
    ///
    /// let m = ShmMutex::anonymous(0u32)?; // e.g. items queued; inherited across fork()
    /// let cv = m.condvar();
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         *m.lock_or_repair(|_| {}) += 1;
    ///         cv.notify_all();
    ///     });
    ///     let g = m.lock_or_repair(|_| {});
    ///     let g = cv.wait_while_or_repair(g, |items| *items == 0, |_| {});
    ///     assert_eq!(*g, 1);
    /// });
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait).
    pub fn wait_while_or_repair<F, R>(
        &self,
        guard: ShmMutexGuard<'a, T>,
        condition: F,
        repair: R,
    ) -> ShmMutexGuard<'a, T>
    where
        F: FnMut(&mut T) -> bool,
        R: FnMut(&mut T),
    {
        match self.wait_while_until(guard, None, condition, Some(repair)) {
            Ok((g, _)) => g,
            Err(_) => unreachable!("repaired waits return no error"),
        }
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
        let (r, timed_out) = self.wait_until_opt(guard, crate::clock::deadline_after(dur));
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
        guard: ShmMutexGuard<'a, T>,
        dur: Duration,
        condition: F,
    ) -> LockResult<(ShmMutexGuard<'a, T>, WaitTimeoutResult)>
    where
        F: FnMut(&mut T) -> bool,
    {
        let deadline = crate::clock::deadline_after(dur);
        self.wait_while_until(guard, deadline, condition, None::<fn(&mut T)>)
    }

    /// [`wait_while_or_repair`](Self::wait_while_or_repair) for at most `dur` in total; the
    /// result says whether the time ran out with the condition still `true`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let m = gomutex::shm::ShmMutex::anonymous(0u8)?;
    /// let cv = m.condvar();
    /// let g = m.lock_or_repair(|_| {});
    /// let (g, r) = cv.wait_timeout_while_or_repair(g, Duration::from_millis(2), |v| *v == 0, |_| {});
    /// assert!(r.timed_out() && *g == 0);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait).
    pub fn wait_timeout_while_or_repair<F, R>(
        &self,
        guard: ShmMutexGuard<'a, T>,
        dur: Duration,
        condition: F,
        repair: R,
    ) -> (ShmMutexGuard<'a, T>, WaitTimeoutResult)
    where
        F: FnMut(&mut T) -> bool,
        R: FnMut(&mut T),
    {
        let deadline = crate::clock::deadline_after(dur);
        match self.wait_while_until(guard, deadline, condition, Some(repair)) {
            Ok(r) => r,
            Err(_) => unreachable!("repaired waits return no error"),
        }
    }

    /// Wake one thread waiting on this condition variable, in any process (if any waits).
    pub fn notify_one(&self) {
        self.count_notify();
        self.w.notify_one();
    }

    /// Wake every thread waiting on this condition variable, in any process. One is woken
    /// now; each of them wakes the next once it holds the mutex again (see the type docs).
    pub fn notify_all(&self) {
        self.count_notify();
        self.w.broadcast();
    }

    /// Count a notify in this process's statistics row ([`ShmMutex::stats`]), if it is a
    /// participant (a process that never locked the mutex has no row).
    fn count_notify(&self) {
        if let Some(me) = self.m.registered(identity::fork_generation()) {
            let row = self.m.region.stats_row(me);
            row.cv_notifies.fetch_add(1, Relaxed);
        }
    }

    /// The loop of every `wait*_while*`: wait while `condition` holds, until `deadline`. A
    /// re-acquisition's error is returned at once (with whether the wait timed out), or with
    /// `repair` repaired, marked consistent and the condition checked again.
    fn wait_while_until<F, R>(
        &self,
        mut guard: ShmMutexGuard<'a, T>,
        deadline: Option<Instant>,
        mut condition: F,
        mut repair: Option<R>,
    ) -> LockResult<(ShmMutexGuard<'a, T>, WaitTimeoutResult)>
    where
        F: FnMut(&mut T) -> bool,
        R: FnMut(&mut T),
    {
        loop {
            if !condition(&mut *guard) {
                return Ok((guard, WaitTimeoutResult(false)));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok((guard, WaitTimeoutResult(true)));
            }
            guard = match (self.wait_until_opt(guard, deadline), repair.as_mut()) {
                ((Ok(g), _), _) => g,
                ((Err(e), _), Some(f)) => repaired(Err(e), f),
                ((Err(e), timed_out), None) => return with(Err(e), WaitTimeoutResult(timed_out)),
            };
        }
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
        let w = self.w;
        // Read while holding the lock: a notify made after the waiter's predicate check (under
        // the lock) bumps the counter after this read. (And the region's counter, which the
        // recovery of a dead participant bumps, for a condition variable placed outside it.)
        let seq = w.seq.load(SeqCst);
        let region_seq = w.region_seq.map(|r| (r, r.load(SeqCst)));
        // Holding the lock, this process is a participant. Global count first, own share
        // second (and the reverse below): a death between them leaves the hint too high,
        // never too low. (Only the region's own condition variable has per-participant
        // shares: recovery takes them back.)
        let me = self.m.registered(identity::fork_generation());
        if let Some(me) = me {
            // We hold the lock: the holder's plain add.
            stats::bump(&self.m.region.stats_row(me).cv_waits);
        }
        let mine = me
            .filter(|_| w.region_seq.is_none())
            .map(|i| &self.m.region.participant(i).cv_waiting);
        w.sleepers.fetch_add(1, SeqCst);
        if let Some(c) = mine {
            c.fetch_add(1, SeqCst);
        }
        drop(guard);
        // Probe every TICK of sleep, timed from a fixed point (as the mutex's sleepers do): a
        // process that died owning the lock, or between changing the data and notifying, is
        // found even when every other process sleeps here, and its recovery notifies.
        let mut probe_at = Instant::now() + TICK;
        let notified = loop {
            if w.seq.load(SeqCst) != seq || region_seq.is_some_and(|(r, v)| r.load(SeqCst) != v) {
                break true;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break false;
            }
            if now >= probe_at {
                if let Some(me) = me {
                    Participant::new(&self.m.region, me).until(deadline).probe();
                }
                probe_at = Instant::now() + TICK;
                continue;
            }
            // Sleep at most until the next probe: a wake-up lost to a notifier's death (or to a
            // chained waiter's) is made up for at the next comparison. EAGAIN, EINTR and
            // time-outs all come back to the comparison above.
            let until = deadline.map_or(probe_at, |d| d.min(probe_at));
            sys::futex_wait(w.seq, seq, Some(until));
        };
        if let Some(c) = mine {
            c.fetch_sub(1, SeqCst);
        }
        sub_saturating(w.sleepers, 1);
        let r = self.m.lock();
        if !notified {
            // Holding the lock again (`r` carries the guard either way).
            if let Some(me) = self.m.registered(identity::fork_generation()) {
                stats::bump(&self.m.region.stats_row(me).cv_timeouts);
            }
        }
        // Wake one and chain: a broadcast made since this wait began owes the next sleeper a
        // wake-up, which this waiter passes on now that it holds the mutex (so the next one
        // queues on it rather than all of them racing for it at once).
        if notified
            && (w.all.load(SeqCst).wrapping_sub(seq) as i32) > 0
            && w.sleepers.load(SeqCst) != 0
        {
            sys::futex_wake(w.seq, 1);
        }
        (r, !notified)
    }
}
