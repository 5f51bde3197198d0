//! [`Mutex`] and [`MutexGuard`]: `std::sync::Mutex`'s API on Go's lock.

use crate::poison::{self, Poison};
use crate::raw::RawMutex;
use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::{LockResult, PoisonError, TryLockError, TryLockResult};
use std::time::{Duration, Instant};

/// A mutual exclusion primitive protecting shared data: `std::sync::Mutex`'s API and
/// poisoning, Go's `sync.Mutex` algorithm underneath.
///
/// Normal mode barges: a thread that arrives while the lock is free takes it, even if others
/// sleep, and a contender spins briefly before sleeping, which keeps the lock hot on one core.
/// Any waiter that has waited more than 1 ms switches the lock to starvation mode, where
/// unlocking hands ownership directly to the oldest waiter: no waiter is shut out for long.
///
/// Replace `use std::sync::Mutex;` with `use gomutex::Mutex;`; results, errors and poisoning are
/// std's own types.
///
/// ```
/// use gomutex::Mutex;
/// use std::sync::Arc;
/// use std::thread;
///
/// let counter = Arc::new(Mutex::new(0));
/// let handles: Vec<_> = (0..4)
///     .map(|_| {
///         let c = Arc::clone(&counter);
///         thread::spawn(move || {
///             for _ in 0..1000 {
///                 *c.lock().unwrap() += 1;
///             }
///         })
///     })
///     .collect();
/// for h in handles {
///     h.join().unwrap();
/// }
/// assert_eq!(*counter.lock().unwrap(), 4000);
/// ```
pub struct Mutex<T: ?Sized> {
    /// The lock, and the poison flag (a bit of its wait queue's word).
    raw: RawMutex,
    data: UnsafeCell<T>,
}

// SAFETY: as std: the mutex hands out `&mut T` to one thread at a time, so it can be sent and
// shared when `T` can be sent.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above; `T: Sync` is not needed because no two threads see the data at once.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

impl<T: ?Sized> UnwindSafe for Mutex<T> {}
impl<T: ?Sized> RefUnwindSafe for Mutex<T> {}

/// An RAII guard: the lock is held while it lives; the data is reached through `Deref`.
///
/// Like std's guard it is `!Send` (it must be dropped by the thread that locked) and `Sync`
/// when `T: Sync`.
#[must_use = "if unused the Mutex will immediately unlock"]
#[clippy::has_significant_drop]
pub struct MutexGuard<'a, T: ?Sized + 'a> {
    lock: &'a Mutex<T>,
    poison: poison::Guard,
    _not_send: NotSend,
}

/// Makes [`MutexGuard`] `!Send`, as std's is, with a compiler error that names a mutex guard:
/// "`std::sync::MutexGuard<'static, ()>` cannot be sent between threads safely" (a raw-pointer
/// marker would make it "`*const ()` cannot be sent…"). Only auto traits are affected: `Send`
/// is lost and `Sync` comes from the explicit impl below; nothing of std's type is ever built.
type NotSend = PhantomData<std::sync::MutexGuard<'static, ()>>;

// SAFETY: sharing `&MutexGuard` only shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<T> Mutex<T> {
    const_new! {
        /// A new unlocked mutex holding `t`.
        ///
        /// ```
        /// use gomutex::Mutex;
        /// static M: Mutex<Vec<u8>> = Mutex::new(Vec::new());
        /// M.lock().unwrap().push(1);
        /// ```
        #[inline]
        pub fn new(t: T) -> Self {
            Self {
                raw: RawMutex::new(),
                data: UnsafeCell::new(t),
            }
        }
    }

    /// Consume the mutex, returning the data (inside `PoisonError` if poisoned).
    ///
    /// ```
    /// let m = gomutex::Mutex::new(7);
    /// assert_eq!(m.into_inner().unwrap(), 7);
    /// ```
    pub fn into_inner(self) -> LockResult<T> {
        let poisoned = Poison::get(&self.raw);
        poison::map_result(poisoned, self.data.into_inner())
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Acquire the lock, blocking until it is available. `Err` (still carrying the guard) if
    /// another thread panicked while holding it.
    ///
    /// ```
    /// let m = gomutex::Mutex::new(1);
    /// *m.lock().unwrap() += 1;
    /// assert_eq!(*m.lock().unwrap(), 2);
    /// ```
    #[inline]
    pub fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        self.raw.lock();
        // SAFETY: we just locked.
        unsafe { MutexGuard::new(self) }
    }

    /// Acquire the lock if it is free right now. `Err(WouldBlock)` if it is held (or in
    /// starvation mode, where it belongs to the oldest waiter), `Err(Poisoned)` if poisoned.
    ///
    /// ```
    /// use std::sync::TryLockError;
    /// let m = gomutex::Mutex::new(());
    /// let g = m.lock().unwrap();
    /// assert!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)));
    /// drop(g);
    /// assert!(m.try_lock().is_ok());
    /// ```
    #[inline]
    pub fn try_lock(&self) -> TryLockResult<MutexGuard<'_, T>> {
        self.guard_if(RawMutex::try_lock)
    }

    /// Acquire the lock, waiting at most `timeout` (not in std: parking_lot's name). Errors as
    /// [`try_lock`](Self::try_lock).
    ///
    /// ```
    /// use std::time::Duration;
    /// let m = gomutex::Mutex::new(());
    /// let g = m.lock().unwrap();
    /// assert!(m.try_lock_for(Duration::from_millis(5)).is_err());
    /// drop(g);
    /// assert!(m.try_lock_for(Duration::from_millis(5)).is_ok());
    /// ```
    #[inline]
    pub fn try_lock_for(&self, timeout: Duration) -> TryLockResult<MutexGuard<'_, T>> {
        self.guard_if(|raw| raw.try_lock_for(timeout))
    }

    /// Acquire the lock, waiting at most until `deadline`. Errors as
    /// [`try_lock`](Self::try_lock).
    #[inline]
    pub fn try_lock_until(&self, deadline: Instant) -> TryLockResult<MutexGuard<'_, T>> {
        self.guard_if(|raw| raw.try_lock_until(deadline))
    }

    /// The one body of the `try_lock*` methods: a guard if `acquire` (one of [`RawMutex`]'s
    /// `try_lock*`, which return whether they took the lock) took it, else `WouldBlock`.
    #[inline]
    fn guard_if(
        &self,
        acquire: impl FnOnce(&RawMutex) -> bool,
    ) -> TryLockResult<MutexGuard<'_, T>> {
        if acquire(&self.raw) {
            // SAFETY: `acquire` returned true, so it locked `self.raw`; the guard takes over
            // that ownership.
            Ok(unsafe { MutexGuard::new(self) }?)
        } else {
            Err(TryLockError::WouldBlock)
        }
    }

    /// Whether a thread panicked while holding the lock.
    #[inline]
    pub fn is_poisoned(&self) -> bool {
        Poison::get(&self.raw)
    }

    /// Clear the poisoned state (after the data has been made consistent again).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let m = Arc::new(gomutex::Mutex::new(0));
    /// let m2 = Arc::clone(&m);
    /// let _ = std::thread::spawn(move || {
    ///     let _g = m2.lock().unwrap();
    ///     panic!("poison it");
    /// })
    /// .join();
    /// assert!(m.is_poisoned());
    /// m.clear_poison();
    /// assert!(!m.is_poisoned());
    /// ```
    #[inline]
    pub fn clear_poison(&self) {
        Poison::clear(&self.raw);
    }

    /// A mutable reference to the data; no locking needed since we have `&mut self`.
    pub fn get_mut(&mut self) -> LockResult<&mut T> {
        let poisoned = Poison::get(&self.raw);
        poison::map_result(poisoned, self.data.get_mut())
    }

    /// The raw lock underneath (for tests and diagnostics: e.g. `raw().state()`; not part of
    /// the API).
    #[doc(hidden)]
    pub fn raw(&self) -> &RawMutex {
        &self.raw
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T> From<T> for Mutex<T> {
    fn from(t: T) -> Self {
        Mutex::new(t)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Mutex");
        match self.try_lock() {
            Ok(guard) => {
                d.field("data", &&*guard);
            }
            Err(TryLockError::Poisoned(err)) => {
                d.field("data", &&**err.get_ref());
            }
            Err(TryLockError::WouldBlock) => {
                d.field("data", &"<locked>"); // std (1.95) prints it as a string
            }
        }
        d.field("poisoned", &Poison::get(&self.raw));
        d.finish_non_exhaustive()
    }
}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    /// # Safety
    /// `lock.raw` must be held by the caller, who hands that ownership to the guard.
    unsafe fn new(lock: &'a Mutex<T>) -> LockResult<Self> {
        match lock.raw.guard() {
            Ok(poison) => Ok(Self {
                lock,
                poison,
                _not_send: PhantomData,
            }),
            Err(e) => Err(PoisonError::new(Self {
                lock,
                poison: e.into_inner(),
                _not_send: PhantomData,
            })),
        }
    }

    /// Make a guard for a part of the locked data, e.g. one field (beyond std: std's
    /// `MutexGuard::map` is unstable, `mapped_lock_guards`; same name and semantics). The lock
    /// stays held until the [`MappedMutexGuard`] is dropped, which unlocks it (and poisons it if
    /// the thread panics meanwhile). An associated function, so it cannot shadow a `map` method
    /// of the data: call it as `MutexGuard::map(guard, f)`.
    ///
    /// If `f` panics, the guard is dropped: the lock is released and poisoned.
    ///
    /// ```
    /// use gomutex::{MappedMutexGuard, Mutex, MutexGuard};
    ///
    /// let m = Mutex::new((1, String::from("a")));
    /// let mut s: MappedMutexGuard<'_, String> = MutexGuard::map(m.lock().unwrap(), |d| &mut d.1);
    /// s.push('b');
    /// drop(s);
    /// assert_eq!(m.lock().unwrap().1, "ab");
    /// ```
    pub fn map<U, F>(orig: Self, f: F) -> MappedMutexGuard<'a, U>
    where
        F: FnOnce(&mut T) -> &mut U,
        U: ?Sized,
    {
        // SAFETY: the guard holds the lock, so nobody else reaches the data; the closure's
        // signature keeps the reference from escaping it. If it panics, `orig` unlocks.
        let data = NonNull::from(f(unsafe { &mut *orig.lock.data.get() }));
        // SAFETY: the lock's ownership moves from `orig` (not dropped) to the mapped guard.
        unsafe { MappedMutexGuard::new(data, ManuallyDrop::new(orig)) }
    }

    /// Like [`map`](Self::map), but `f` may decline (`None`), which gives the original guard
    /// back (beyond std, as `map`).
    ///
    /// ```
    /// use gomutex::{Mutex, MutexGuard};
    ///
    /// let m = Mutex::new(vec![1, 2]);
    /// let g = MutexGuard::filter_map(m.lock().unwrap(), |v| v.get_mut(5)).unwrap_err();
    /// let mut first = MutexGuard::filter_map(g, |v| v.first_mut()).unwrap();
    /// *first = 10;
    /// drop(first);
    /// assert_eq!(*m.lock().unwrap(), [10, 2]);
    /// ```
    pub fn filter_map<U, F>(orig: Self, f: F) -> Result<MappedMutexGuard<'a, U>, Self>
    where
        F: FnOnce(&mut T) -> Option<&mut U>,
        U: ?Sized,
    {
        // SAFETY: as in `map`.
        match f(unsafe { &mut *orig.lock.data.get() }) {
            Some(data) => {
                let data = NonNull::from(data);
                // SAFETY: as in `map`.
                Ok(unsafe { MappedMutexGuard::new(data, ManuallyDrop::new(orig)) })
            }
            None => Err(orig),
        }
    }

    /// The mutex this guard locks (used by [`crate::Condvar`]).
    pub(crate) fn mutex(&self) -> &'a Mutex<T> {
        self.lock
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Release the raw lock while a guard still exists (the guard stays logically alive but
    /// must not be used until [`relock`](Self::relock)). For [`crate::Condvar`].
    ///
    /// # Safety
    /// The caller holds the lock through a guard it keeps and does not touch the data until
    /// it calls `relock`.
    pub(crate) unsafe fn unlock_raw(&self) {
        // SAFETY: held, per the contract.
        unsafe { self.raw.unlock() }
    }

    pub(crate) fn relock(&self) {
        self.raw.lock();
    }

    pub(crate) fn poisoned(&self) -> bool {
        Poison::get(&self.raw)
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no `&mut T` exists elsewhere.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock exclusively and we have `&mut self`.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.raw.done(&self.poison);
        // SAFETY: the guard holds the lock.
        unsafe { self.lock.raw.unlock() }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// A guard for a part of a [`Mutex`]'s data, made by [`MutexGuard::map`] or
/// [`MutexGuard::filter_map`] (beyond std: std's is unstable, `mapped_lock_guards`; same
/// semantics). The lock is held while it lives; dropping it unlocks, and poisons the mutex if
/// the thread is panicking. `!Send` like [`MutexGuard`]; it cannot be used with a [`Condvar`]
/// (neither can std's).
///
/// [`Condvar`]: crate::Condvar
#[must_use = "if unused the Mutex will immediately unlock"]
#[clippy::has_significant_drop]
pub struct MappedMutexGuard<'a, T: ?Sized + 'a> {
    /// Points into the mutex's data; valid and exclusive while the lock is held.
    data: NonNull<T>,
    raw: &'a RawMutex,
    poison_flag: &'a RawMutex,
    poison: poison::Guard,
    /// Invariant in `T`, as `&'a mut T` (std's choice: the guard hands out `&mut T`).
    _variance: PhantomData<&'a mut T>,
    _not_send: NotSend,
}

// SAFETY: sharing `&MappedMutexGuard` only shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for MappedMutexGuard<'_, T> {}

impl<'a, T: ?Sized> MappedMutexGuard<'a, T> {
    /// # Safety
    /// `orig` holds its lock and is not dropped: its ownership of the lock moves here. `data`
    /// points into that lock's data.
    unsafe fn new<D: ?Sized>(data: NonNull<T>, orig: ManuallyDrop<MutexGuard<'a, D>>) -> Self {
        let lock: &'a Mutex<D> = orig.lock;
        Self {
            data,
            raw: &lock.raw,
            poison_flag: &lock.raw,
            poison: orig.poison,
            _variance: PhantomData,
            _not_send: PhantomData,
        }
    }

    /// This guard's lock ownership, for `data` (which points into the same lock's data).
    fn narrow<U: ?Sized>(self, data: NonNull<U>) -> MappedMutexGuard<'a, U> {
        let orig = ManuallyDrop::new(self);
        MappedMutexGuard {
            data,
            raw: orig.raw,
            poison_flag: orig.poison_flag,
            poison: orig.poison,
            _variance: PhantomData,
            _not_send: PhantomData,
        }
    }

    /// Narrow the guard further (as [`MutexGuard::map`]).
    pub fn map<U, F>(mut orig: Self, f: F) -> MappedMutexGuard<'a, U>
    where
        F: FnOnce(&mut T) -> &mut U,
        U: ?Sized,
    {
        // SAFETY: the guard holds the lock, so the data is ours alone while `f` runs.
        let data = NonNull::from(f(unsafe { orig.data.as_mut() }));
        orig.narrow(data)
    }

    /// Narrow the guard further if `f` says so, else give it back (as
    /// [`MutexGuard::filter_map`]).
    pub fn filter_map<U, F>(mut orig: Self, f: F) -> Result<MappedMutexGuard<'a, U>, Self>
    where
        F: FnOnce(&mut T) -> Option<&mut U>,
        U: ?Sized,
    {
        // SAFETY: as in `map`.
        match f(unsafe { orig.data.as_mut() }) {
            Some(data) => {
                let data = NonNull::from(data);
                Ok(orig.narrow(data))
            }
            None => Err(orig),
        }
    }
}

impl<T: ?Sized> Deref for MappedMutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no `&mut T` exists elsewhere.
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for MappedMutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock exclusively and we have `&mut self`.
        unsafe { self.data.as_mut() }
    }
}

impl<T: ?Sized> Drop for MappedMutexGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.poison_flag.done(&self.poison);
        // SAFETY: the guard holds the lock.
        unsafe { self.raw.unlock() }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MappedMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MappedMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}
