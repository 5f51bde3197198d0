//! [`Condvar`]: `std::sync::Condvar`'s API for [`crate::MutexGuard`].

use crate::mutex::MutexGuard;
use crate::park;
use crate::poison;
use crate::sync::{AtomicU32, Ordering::Relaxed};
use core::fmt;
use std::sync::LockResult;
use std::time::{Duration, Instant};

/// A condition variable that works with [`crate::Mutex`]'s guard, with std's API.
///
/// It is std's futex design on `parking_lot_core`: a sequence number that every notify bumps; a
/// waiter reads it before releasing the mutex and only sleeps if it is unchanged (checked while
/// the park queue is locked), so a notify between the release and the sleep is never lost.
/// Before it sleeps, a waiter yields its CPU once (`sched_yield`) and re-reads the number: with
/// more producers and consumers than cores, the thread that will notify is often just waiting
/// for a CPU, and a wait that ends there saves a sleep and a wake-up (figures and the
/// alternatives tried: docs/benchmarks.md, "Condvar"). Spurious wake-ups are possible, as with
/// std's: wait in a loop or use [`wait_while`](Self::wait_while). For `lock_api` guards
/// (parking_lot's API), the same algorithm is `gomutex::lock_api::Condvar` (features
/// `lock_api`, `lock_api_04`).
///
/// ```
/// use gomutex::{Condvar, Mutex};
/// use std::sync::Arc;
/// use std::thread;
///
/// let pair = Arc::new((Mutex::new(false), Condvar::new()));
/// let pair2 = Arc::clone(&pair);
/// thread::spawn(move || {
///     let (lock, cvar) = &*pair2;
///     *lock.lock().unwrap() = true;
///     cvar.notify_one();
/// });
/// let (lock, cvar) = &*pair;
/// let started = cvar.wait_while(lock.lock().unwrap(), |started| !*started).unwrap();
/// assert!(*started);
/// ```
pub struct Condvar {
    seq: AtomicU32,
}

/// Whether a timed wait returned because its time ran out (std's type cannot be built outside
/// std, so this is ours, with the same method).
#[derive(Debug, PartialEq, Eq, Copy, Clone)]
pub struct WaitTimeoutResult(pub(crate) bool);

impl WaitTimeoutResult {
    /// `true` if the wait timed out.
    #[must_use]
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

impl Condvar {
    const_new! {
        /// A new condition variable.
        ///
        /// ```
        /// use gomutex::{Condvar, Mutex};
        /// static READY: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());
        /// *READY.0.lock().unwrap() = true;
        /// READY.1.notify_all();
        /// ```
        #[must_use]
        pub fn new() -> Self {
            Self {
                seq: AtomicU32::new(0),
            }
        }
    }

    fn key(&self) -> usize {
        &self.seq as *const AtomicU32 as usize
    }

    /// Release the guard's lock, sleep until notified (or a spurious wake-up, or `deadline`),
    /// relock. Returns whether the deadline passed.
    fn wait_raw<T: ?Sized>(&self, guard: &MutexGuard<'_, T>, deadline: Option<Instant>) -> bool {
        let mutex = guard.mutex();
        let seq = self.begin_wait();
        // SAFETY: the guard proves we hold the lock; we do not touch the data until relocked.
        unsafe { mutex.unlock_raw() };
        let timed_out = self.sleep(seq, deadline);
        mutex.relock();
        timed_out
    }

    /// The first step of every wait, taken while the caller still holds the mutex: the
    /// notification count the wait will sleep on. The wait is then: release the mutex,
    /// [`sleep`](Self::sleep), relock. `gomutex::lock_api::Condvar` makes the same three steps
    /// around a `lock_api` guard: this algorithm is written once.
    #[inline]
    pub(crate) fn begin_wait(&self) -> u32 {
        self.seq.load(Relaxed)
    }

    /// The middle of a wait, with the mutex released: sleep unless a notify has come since
    /// [`begin_wait`](Self::begin_wait) returned `seq` (checked again while the park queue is
    /// locked, so a notify between the release and the sleep is never lost), until notified,
    /// a spurious wake-up or `deadline`. Returns whether the deadline passed.
    pub(crate) fn sleep(&self, seq: u32, deadline: Option<Instant>) -> bool {
        // Give the CPU away once before sleeping: the thread that will make the condition true
        // is often runnable but waiting for a CPU (producers and consumers outnumbering the
        // cores), and a notification that comes in meanwhile saves a sleep and a wake-up,
        // each a trip through the scheduler. Costs one `sched_yield` per wait.
        crate::sync::yield_now();
        if self.seq.load(Relaxed) != seq {
            return false;
        }
        // SAFETY: the key is our own address; the closures neither panic nor re-enter.
        let r = unsafe {
            park::park(
                self.key(),
                || self.seq.load(Relaxed) == seq,
                || {},
                0,
                deadline,
            )
        };
        r == park::ParkResult::TimedOut
    }

    /// Block until notified; the lock is released while asleep and held again on return.
    /// Spurious wake-ups are possible. `Err` if the mutex is poisoned (the guard is inside).
    pub fn wait<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>) -> LockResult<MutexGuard<'a, T>> {
        self.wait_raw(&guard, None);
        let poisoned = guard.mutex().poisoned();
        poison::map_result(poisoned, guard)
    }

    /// Block while `condition` returns `true` for the data.
    pub fn wait_while<'a, T: ?Sized, F>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: F,
    ) -> LockResult<MutexGuard<'a, T>>
    where
        F: FnMut(&mut T) -> bool,
    {
        while condition(&mut *guard) {
            guard = self.wait(guard)?;
        }
        Ok(guard)
    }

    /// Like [`wait`](Self::wait) but for at most `dur`.
    ///
    /// ```
    /// use gomutex::{Condvar, Mutex};
    /// use std::time::Duration;
    /// let m = Mutex::new(());
    /// let cv = Condvar::new();
    /// let (_g, r) = cv.wait_timeout(m.lock().unwrap(), Duration::from_millis(2)).unwrap();
    /// assert!(r.timed_out());
    /// ```
    pub fn wait_timeout<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        dur: Duration,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
        let timed_out = self.wait_raw(&guard, crate::clock::deadline_after(dur));
        let poisoned = guard.mutex().poisoned();
        poison::map_result(poisoned, (guard, WaitTimeoutResult(timed_out)))
    }

    /// std's oldest timed wait, kept so code that uses it compiles: like
    /// [`wait_timeout`](Self::wait_timeout) for `ms` milliseconds, but the flag is `false` only
    /// if the time is known to have run out (the opposite sense of `timed_out()`).
    #[deprecated(
        since = "0.1.0",
        note = "replaced by `gomutex::Condvar::wait_timeout` (as in std)"
    )]
    pub fn wait_timeout_ms<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        ms: u32,
    ) -> LockResult<(MutexGuard<'a, T>, bool)> {
        match self.wait_timeout(guard, Duration::from_millis(ms.into())) {
            Ok((g, r)) => Ok((g, !r.timed_out())),
            Err(e) => {
                let (g, r) = e.into_inner();
                Err(std::sync::PoisonError::new((g, !r.timed_out())))
            }
        }
    }

    /// Block while `condition` holds, for at most `dur` in total. The result says whether the
    /// time ran out with the condition still true.
    pub fn wait_timeout_while<'a, T: ?Sized, F>(
        &self,
        mut guard: MutexGuard<'a, T>,
        dur: Duration,
        mut condition: F,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)>
    where
        F: FnMut(&mut T) -> bool,
    {
        let deadline = crate::clock::deadline_after(dur);
        loop {
            if !condition(&mut *guard) {
                return Ok((guard, WaitTimeoutResult(false)));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok((guard, WaitTimeoutResult(true)));
            }
            self.wait_raw(&guard, deadline);
            if guard.mutex().poisoned() {
                return Err(std::sync::PoisonError::new((
                    guard,
                    WaitTimeoutResult(false),
                )));
            }
        }
    }

    /// Wake one waiting thread, if any.
    pub fn notify_one(&self) {
        self.notify_one_woke();
    }

    /// Wake every waiting thread.
    pub fn notify_all(&self) {
        self.notify_all_woke();
    }

    /// [`notify_one`](Self::notify_one), returning whether it woke a sleeping thread.
    pub(crate) fn notify_one_woke(&self) -> bool {
        self.seq.fetch_add(1, Relaxed);
        let mut woke = false;
        // SAFETY: as in `sleep`.
        let r = unsafe {
            park::unpark_filter(
                self.key(),
                |_| {
                    if woke {
                        park::FilterOp::Stop
                    } else {
                        woke = true;
                        park::FilterOp::Unpark
                    }
                },
                |_| 0,
            )
        };
        r.unparked_threads != 0
    }

    /// [`notify_all`](Self::notify_all), returning how many sleeping threads it woke.
    pub(crate) fn notify_all_woke(&self) -> usize {
        self.seq.fetch_add(1, Relaxed);
        // SAFETY: as in `sleep`.
        unsafe { park::unpark_all(self.key()) }
    }
}

impl Default for Condvar {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condvar").finish_non_exhaustive()
    }
}
