//! parking_lot's API on gomutex's locks: `lock_api::Mutex<gomutex::RawMutex, T>`,
//! `lock_api::RwLock<gomutex::RawRwLock, T>` and a [`Condvar`] with parking_lot's methods
//! (features `lock_api` for lock_api 0.5, parking_lot 0.13's; `lock_api_04` for lock_api 0.4,
//! parking_lot 0.12's).
//!
//! A program on parking_lot's `Mutex`, `Condvar` and `RwLock` switches by its `use` line, with
//! `Mutex`, `RwLock` and their guards from here (aliases of lock_api 0.5's types, feature
//! `lock_api`):
//!
//! ```text
//! use parking_lot::{Condvar, Mutex, RwLock};          // before
//! use gomutex::lock_api::{Condvar, Mutex, RwLock};    // after
//! ```
//!
//! or by type aliases of its own (the only way with lock_api 0.4, whose types these aliases are
//! not):
//!
//! ```
//! # #[cfg(feature = "lock_api")] {
//! use gomutex::lock_api::Condvar;
//! use std::sync::Arc;
//! use std::thread;
//! use std::time::Duration;
//!
//! type Mutex<T> = lock_api::Mutex<gomutex::RawMutex, T>;
//! type RwLock<T> = lock_api::RwLock<gomutex::RawRwLock, T>;
//!
//! let queue = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
//! let config = Arc::new(RwLock::new("v1"));
//! let producer = {
//!     let (queue, config) = (Arc::clone(&queue), Arc::clone(&config));
//!     thread::spawn(move || {
//!         *config.write() = "v2";
//!         let (items, ready) = &*queue;
//!         items.lock().push(7);
//!         ready.notify_one(); // -> bool: whether a thread was asleep
//!     })
//! };
//! let (items, ready) = &*queue;
//! let mut g = items.lock();
//! ready.wait_while(&mut g, |v| v.is_empty()); // parking_lot's shape: `&mut guard`
//! assert_eq!(g.pop(), Some(7));
//! assert!(ready.wait_for(&mut g, Duration::from_millis(1)).timed_out());
//! drop(g);
//! producer.join().unwrap();
//! assert_eq!(*config.read(), "v2");
//! # }
//! ```
//!
//! [`Condvar`] waits with a `lock_api::MutexGuard` of either version, over any raw mutex (the
//! condition variable needs nothing of the mutex but unlocking and relocking it). It is
//! [`crate::Condvar`]'s algorithm, not a second one: the same notification count, the same
//! check under the park queue's lock (no notification is lost between the unlock and the
//! sleep), the same yield before sleeping; only the guard's shape differs (parking_lot waits on
//! `&mut guard` and has no poisoning).

use core::fmt;
use core::ops::DerefMut;
use std::time::{Duration, Instant};

/// What the timed waits return (`timed_out()`), as parking_lot's.
pub use crate::WaitTimeoutResult;

/// `lock_api::Mutex<gomutex::RawMutex, T>` (lock_api 0.5): parking_lot's `Mutex` on Go's lock.
#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
pub type Mutex<T> = ::lock_api::Mutex<crate::RawMutex, T>;
/// Its guard.
#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
pub type MutexGuard<'a, T> = ::lock_api::MutexGuard<'a, crate::RawMutex, T>;
/// Its guard for a part of the data (`MutexGuard::map`).
#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
pub type MappedMutexGuard<'a, T> = ::lock_api::MappedMutexGuard<'a, crate::RawMutex, T>;
/// `lock_api::RwLock<gomutex::RawRwLock, T>` (lock_api 0.5): parking_lot's `RwLock` on Go's
/// `RWMutex` (with `downgrade` and the timed locks; not upgradable reads).
#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
pub type RwLock<T> = ::lock_api::RwLock<crate::RawRwLock, T>;
/// Its read guard.
#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
pub type RwLockReadGuard<'a, T> = ::lock_api::RwLockReadGuard<'a, crate::RawRwLock, T>;
/// Its write guard.
#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
pub type RwLockWriteGuard<'a, T> = ::lock_api::RwLockWriteGuard<'a, crate::RawRwLock, T>;
/// Its read guard for a part of the data.
#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
pub type MappedRwLockReadGuard<'a, T> = ::lock_api::MappedRwLockReadGuard<'a, crate::RawRwLock, T>;
/// Its write guard for a part of the data.
#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
pub type MappedRwLockWriteGuard<'a, T> =
    ::lock_api::MappedRwLockWriteGuard<'a, crate::RawRwLock, T>;

mod sealed {
    pub trait Sealed {}
}

/// A mutex guard a [`Condvar`] can wait with: `lock_api::MutexGuard<'_, R, T>` of lock_api 0.5
/// (feature `lock_api`) and of lock_api 0.4 (feature `lock_api_04`), for any raw mutex `R`
/// (gomutex's [`RawMutex`](crate::RawMutex) above all). Sealed: implemented here only.
pub trait CondvarGuard: DerefMut + sealed::Sealed {
    /// Release the lock, run `f`, lock again (`lock_api`'s `MutexGuard::unlocked`).
    #[doc(hidden)]
    fn unlocked_for<U>(&mut self, f: impl FnOnce() -> U) -> U;
}

#[cfg(feature = "lock_api")]
impl<R: ::lock_api::RawMutex, T: ?Sized> sealed::Sealed for ::lock_api::MutexGuard<'_, R, T> {}

#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
impl<R: ::lock_api::RawMutex, T: ?Sized> CondvarGuard for ::lock_api::MutexGuard<'_, R, T> {
    #[inline]
    fn unlocked_for<U>(&mut self, f: impl FnOnce() -> U) -> U {
        ::lock_api::MutexGuard::unlocked(self, f)
    }
}

#[cfg(feature = "lock_api_04")]
impl<R: lock_api_04::RawMutex, T: ?Sized> sealed::Sealed for lock_api_04::MutexGuard<'_, R, T> {}

#[cfg(feature = "lock_api_04")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api_04")))]
impl<R: lock_api_04::RawMutex, T: ?Sized> CondvarGuard for lock_api_04::MutexGuard<'_, R, T> {
    #[inline]
    fn unlocked_for<U>(&mut self, f: impl FnOnce() -> U) -> U {
        lock_api_04::MutexGuard::unlocked(self, f)
    }
}

/// A condition variable with parking_lot's API, for `lock_api` mutex guards ([`CondvarGuard`]):
/// `wait(&mut guard)`, `wait_for`, `wait_until`, `wait_while` and their timed forms,
/// `notify_one` → `bool`, `notify_all` → `usize`.
///
/// [`crate::Condvar`]'s algorithm (std's futex design on `parking_lot_core`; module docs):
/// notifications between the unlock and the sleep are not lost; spurious wake-ups are
/// possible, as with parking_lot's (wait in a loop, or use [`wait_while`](Self::wait_while)).
/// Unlike parking_lot's, one `Condvar` may be used with several mutexes (it does not check, and
/// does not panic).
///
/// ```
/// # #[cfg(feature = "lock_api")] {
/// use gomutex::lock_api::{Condvar, Mutex};
/// use std::sync::Arc;
/// use std::thread;
///
/// let pair = Arc::new((Mutex::new(false), Condvar::new()));
/// let pair2 = Arc::clone(&pair);
/// thread::spawn(move || {
///     let (lock, cvar) = &*pair2;
///     *lock.lock() = true;
///     cvar.notify_one();
/// });
/// let (lock, cvar) = &*pair;
/// let mut started = lock.lock();
/// while !*started {
///     cvar.wait(&mut started);
/// }
/// # }
/// ```
#[derive(Default)]
pub struct Condvar {
    inner: crate::Condvar,
}

impl Condvar {
    const_new! {
        /// A new condition variable.
        ///
        /// ```
        /// static READY: gomutex::lock_api::Condvar = gomutex::lock_api::Condvar::new();
        /// assert!(!READY.notify_one()); // nobody waits
        /// ```
        #[must_use]
        pub fn new() -> Self {
            Self {
                inner: crate::Condvar::new(),
            }
        }
    }

    /// Release the lock, sleep until notified (or `deadline`), lock again: whether the
    /// deadline passed. `begin_wait` while locked, `sleep` unlocked: `crate::Condvar`'s steps.
    fn wait_inner<G: CondvarGuard>(&self, guard: &mut G, deadline: Option<Instant>) -> bool {
        let seq = self.inner.begin_wait();
        guard.unlocked_for(|| self.inner.sleep(seq, deadline))
    }

    /// Block until notified: the guard's lock is released while asleep and held again on
    /// return. Spurious wake-ups are possible.
    #[inline]
    pub fn wait<G: CondvarGuard>(&self, guard: &mut G) {
        self.wait_inner(guard, None);
    }

    /// Like [`wait`](Self::wait), giving up at `deadline` (then [`WaitTimeoutResult::timed_out`]
    /// is `true`).
    pub fn wait_until<G: CondvarGuard>(
        &self,
        guard: &mut G,
        deadline: Instant,
    ) -> WaitTimeoutResult {
        WaitTimeoutResult(self.wait_inner(guard, Some(deadline)))
    }

    /// Like [`wait`](Self::wait), for at most `timeout`.
    ///
    /// ```
    /// # #[cfg(feature = "lock_api")] {
    /// use gomutex::lock_api::{Condvar, Mutex};
    /// use std::time::Duration;
    /// let (m, cv) = (Mutex::new(()), Condvar::new());
    /// let mut g = m.lock();
    /// assert!(cv.wait_for(&mut g, Duration::from_millis(2)).timed_out());
    /// # }
    /// ```
    pub fn wait_for<G: CondvarGuard>(&self, guard: &mut G, timeout: Duration) -> WaitTimeoutResult {
        WaitTimeoutResult(self.wait_inner(guard, crate::clock::deadline_after(timeout)))
    }

    /// Block while `condition` returns `true` for the data (checked first, and after every
    /// wake-up, with the lock held).
    pub fn wait_while<G, F>(&self, guard: &mut G, mut condition: F)
    where
        G: CondvarGuard,
        F: FnMut(&mut G::Target) -> bool,
    {
        while condition(&mut **guard) {
            self.wait(guard);
        }
    }

    /// Block while `condition` holds, giving up at `deadline`. `timed_out()` says the deadline
    /// passed with the condition still true (checked once more at the deadline, as std's
    /// `wait_timeout_while` does).
    pub fn wait_while_until<G, F>(
        &self,
        guard: &mut G,
        condition: F,
        deadline: Instant,
    ) -> WaitTimeoutResult
    where
        G: CondvarGuard,
        F: FnMut(&mut G::Target) -> bool,
    {
        self.wait_while_by(guard, condition, Some(deadline))
    }

    /// Block while `condition` holds, for at most `timeout` in total (see
    /// [`wait_while_until`](Self::wait_while_until)).
    ///
    /// ```
    /// # #[cfg(feature = "lock_api")] {
    /// use gomutex::lock_api::{Condvar, Mutex};
    /// use std::time::Duration;
    /// let (m, cv) = (Mutex::new(0), Condvar::new());
    /// let mut g = m.lock();
    /// let r = cv.wait_while_for(&mut g, |n| *n == 0, Duration::from_millis(2));
    /// assert!(r.timed_out() && *g == 0);
    /// # }
    /// ```
    pub fn wait_while_for<G, F>(
        &self,
        guard: &mut G,
        condition: F,
        timeout: Duration,
    ) -> WaitTimeoutResult
    where
        G: CondvarGuard,
        F: FnMut(&mut G::Target) -> bool,
    {
        self.wait_while_by(guard, condition, crate::clock::deadline_after(timeout))
    }

    fn wait_while_by<G, F>(
        &self,
        guard: &mut G,
        mut condition: F,
        deadline: Option<Instant>,
    ) -> WaitTimeoutResult
    where
        G: CondvarGuard,
        F: FnMut(&mut G::Target) -> bool,
    {
        loop {
            if !condition(&mut **guard) {
                return WaitTimeoutResult(false);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return WaitTimeoutResult(true);
            }
            self.wait_inner(guard, deadline);
        }
    }

    /// Wake one waiting thread, if any: `true` if a thread asleep on this condition variable
    /// was woken (a waiter between its unlock and its sleep sees the notification without
    /// being woken, and is not counted).
    #[inline]
    pub fn notify_one(&self) -> bool {
        self.inner.notify_one_woke()
    }

    /// Wake every waiting thread: how many were asleep and woken.
    #[inline]
    pub fn notify_all(&self) -> usize {
        self.inner.notify_all_woke()
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condvar").finish_non_exhaustive()
    }
}
