//! [`RwLock`] and its guards: `std::sync::RwLock`'s API on Go's `RWMutex`.

use crate::poison::{self, Poison};
use crate::raw_rwlock::RawRwLock;
use crate::rwalgo::ReadToken;
use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::{LockResult, PoisonError, TryLockError, TryLockResult};
use std::time::{Duration, Instant};

/// A readers-writer lock: `std::sync::RwLock`'s API and poisoning, Go's `sync.RWMutex`
/// policy underneath.
///
/// Any number of readers, or one writer. A read lock is one atomic add; once readers overlap,
/// they record themselves in their thread's slot of a global table instead, so that a read
/// writes no line another reader writes (folly's `SharedMutex`, BRAVO; the writer revokes by
/// scanning the table). A writer that arrives keeps new readers out at once (writer
/// preference) and waits only for the readers already inside; when it unlocks, every reader
/// that queued meanwhile is admitted before the next writer, so neither side starves. Writers
/// queue on Go's mutex (normal mode, then starvation mode's hand-off after 1 ms).
/// How, step by step, and what was measured: [`crate::guide::rwlock`].
///
/// Replace `use std::sync::RwLock;` with `use gomutex::RwLock;`; results, errors and poisoning
/// are std's own types. As with std's lock on Linux, taking a read lock twice on one thread can
/// deadlock if a writer starts waiting in between.
///
/// ```
/// use gomutex::RwLock;
/// use std::sync::Arc;
/// use std::thread;
///
/// let config = Arc::new(RwLock::new(String::from("v1")));
/// let readers: Vec<_> = (0..4)
///     .map(|_| {
///         let c = Arc::clone(&config);
///         thread::spawn(move || c.read().unwrap().len())
///     })
///     .collect();
/// *config.write().unwrap() = String::from("v2");
/// for r in readers {
///     assert_eq!(r.join().unwrap(), 2);
/// }
/// assert_eq!(*config.read().unwrap(), "v2");
/// ```
pub struct RwLock<T: ?Sized> {
    /// The lock, and the poison flag (a bit of the raw lock's word).
    raw: RawRwLock,
    data: UnsafeCell<T>,
}

// SAFETY: as std: the lock can be sent when `T` can.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}
// SAFETY: as std: readers share `&T` across threads (`T: Sync`), a writer gets `&mut T` on
// whatever thread it runs (`T: Send`).
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}

impl<T: ?Sized> UnwindSafe for RwLock<T> {}
impl<T: ?Sized> RefUnwindSafe for RwLock<T> {}

/// Makes the read guards `!Send`, as std's are, with a compiler error that names a read guard.
/// Only auto traits are affected; nothing of std's type is ever built.
type NotSendRead = PhantomData<std::sync::RwLockReadGuard<'static, ()>>;
/// The same for the write guards.
type NotSendWrite = PhantomData<std::sync::RwLockWriteGuard<'static, ()>>;

/// An RAII guard for a read lock: the lock is read-held while it lives; the data is reached
/// through `Deref`. `!Send` and `Sync` when `T: Sync`, as std's.
#[must_use = "if unused the RwLock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct RwLockReadGuard<'a, T: ?Sized + 'a> {
    /// Points into the lock's data; no `&mut T` exists while the read lock is held. A pointer,
    /// not `&'a T`, as std's (the guard may be dropped while the data is borrowed elsewhere).
    data: NonNull<T>,
    raw: &'a RawRwLock,
    /// Where the read lock is held (a slot of the readers' table, or the word).
    token: ReadToken,
    _not_send: NotSendRead,
}

// SAFETY: sharing `&RwLockReadGuard` only shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for RwLockReadGuard<'_, T> {}

/// An RAII guard for the write lock: the lock is write-held while it lives; the data is reached
/// through `Deref` and `DerefMut`. A panic while it lives poisons the lock. `!Send` and `Sync`
/// when `T: Sync`, as std's.
#[must_use = "if unused the RwLock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct RwLockWriteGuard<'a, T: ?Sized + 'a> {
    lock: &'a RwLock<T>,
    poison: poison::Guard,
    _not_send: NotSendWrite,
}

// SAFETY: sharing `&RwLockWriteGuard` only shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for RwLockWriteGuard<'_, T> {}

impl<T> RwLock<T> {
    const_new! {
        /// A new unlocked lock holding `t`.
        ///
        /// ```
        /// use gomutex::RwLock;
        /// static CONFIG: RwLock<Vec<u8>> = RwLock::new(Vec::new());
        /// CONFIG.write().unwrap().push(1);
        /// assert_eq!(*CONFIG.read().unwrap(), [1]);
        /// ```
        #[inline]
        pub fn new(t: T) -> Self {
            Self {
                raw: RawRwLock::new(),
                data: UnsafeCell::new(t),
            }
        }
    }

    /// Consume the lock, returning the data (inside `PoisonError` if poisoned).
    ///
    /// ```
    /// let l = gomutex::RwLock::new(7);
    /// assert_eq!(l.into_inner().unwrap(), 7);
    /// ```
    pub fn into_inner(self) -> LockResult<T> {
        let poisoned = Poison::get(&self.raw);
        poison::map_result(poisoned, self.data.into_inner())
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Acquire a read lock, blocking while a writer holds the lock or waits for it. `Err`
    /// (still carrying the guard) if a writer panicked while holding it.
    ///
    /// ```
    /// let l = gomutex::RwLock::new(1);
    /// let a = l.read().unwrap();
    /// let b = l.read().unwrap(); // readers overlap
    /// assert_eq!(*a + *b, 2);
    /// ```
    #[inline]
    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, T>> {
        let (token, poisoned) = self.raw.read_token_poisoned();
        // SAFETY: we just read-locked.
        unsafe { RwLockReadGuard::new_seen(self, token, poisoned) }
    }

    /// Acquire a read lock if no writer holds the lock or waits for it; never blocks.
    /// `Err(WouldBlock)` otherwise, `Err(Poisoned)` if poisoned.
    ///
    /// ```
    /// use std::sync::TryLockError;
    /// let l = gomutex::RwLock::new(());
    /// let w = l.write().unwrap();
    /// assert!(matches!(l.try_read(), Err(TryLockError::WouldBlock)));
    /// drop(w);
    /// assert!(l.try_read().is_ok());
    /// ```
    #[inline]
    pub fn try_read(&self) -> TryLockResult<RwLockReadGuard<'_, T>> {
        self.read_guard_if(RawRwLock::try_read_token)
    }

    /// Acquire a read lock, waiting at most `timeout` (not in std: parking_lot's name). Errors
    /// as [`try_read`](Self::try_read).
    ///
    /// ```
    /// use std::time::Duration;
    /// let l = gomutex::RwLock::new(());
    /// let w = l.write().unwrap();
    /// assert!(l.try_read_for(Duration::from_millis(5)).is_err());
    /// drop(w);
    /// assert!(l.try_read_for(Duration::from_millis(5)).is_ok());
    /// ```
    #[inline]
    pub fn try_read_for(&self, timeout: Duration) -> TryLockResult<RwLockReadGuard<'_, T>> {
        self.read_guard_if(|raw| raw.try_read_token_until(crate::clock::deadline_after(timeout)))
    }

    /// Acquire a read lock, waiting at most until `deadline`. Errors as
    /// [`try_read`](Self::try_read).
    #[inline]
    pub fn try_read_until(&self, deadline: Instant) -> TryLockResult<RwLockReadGuard<'_, T>> {
        self.read_guard_if(|raw| raw.try_read_token_until(Some(deadline)))
    }

    /// The one body of the `try_read*` methods: a guard if `acquire` (one of [`RawRwLock`]'s
    /// `try_read_token*`, which return the read lock's token) read-locked, else `WouldBlock`.
    #[inline]
    fn read_guard_if(
        &self,
        acquire: impl FnOnce(&RawRwLock) -> Option<ReadToken>,
    ) -> TryLockResult<RwLockReadGuard<'_, T>> {
        match acquire(&self.raw) {
            // SAFETY: `acquire` read-locked `self.raw` (its token says where); the guard takes
            // over that read lock.
            Some(token) => Ok(unsafe { RwLockReadGuard::new(self, token) }?),
            None => Err(TryLockError::WouldBlock),
        }
    }

    /// Acquire the write lock, blocking until no reader and no other writer holds it. `Err`
    /// (still carrying the guard) if a writer panicked while holding it.
    ///
    /// ```
    /// let l = gomutex::RwLock::new(1);
    /// *l.write().unwrap() += 1;
    /// assert_eq!(*l.read().unwrap(), 2);
    /// ```
    #[inline]
    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, T>> {
        let poisoned = self.raw.write_poisoned();
        // SAFETY: we just write-locked.
        unsafe { RwLockWriteGuard::new_seen(self, poisoned) }
    }

    /// Acquire the write lock if it is free right now; never blocks. `Err(WouldBlock)` if a
    /// reader or writer holds it (or writers queue for it), `Err(Poisoned)` if poisoned.
    ///
    /// ```
    /// use std::sync::TryLockError;
    /// let l = gomutex::RwLock::new(());
    /// let r = l.read().unwrap();
    /// assert!(matches!(l.try_write(), Err(TryLockError::WouldBlock)));
    /// drop(r);
    /// assert!(l.try_write().is_ok());
    /// ```
    #[inline]
    pub fn try_write(&self) -> TryLockResult<RwLockWriteGuard<'_, T>> {
        self.write_guard_if(RawRwLock::try_write)
    }

    /// Acquire the write lock, waiting at most `timeout` (not in std: parking_lot's name).
    /// Errors as [`try_write`](Self::try_write).
    ///
    /// A writer that gives up while readers are inside leaves as if it had acquired and
    /// released the lock the moment they left: readers that arrived after it (writer
    /// preference) wait until then.
    ///
    /// ```
    /// use std::time::Duration;
    /// let l = gomutex::RwLock::new(());
    /// let r = l.read().unwrap();
    /// assert!(l.try_write_for(Duration::from_millis(5)).is_err());
    /// drop(r);
    /// assert!(l.try_write_for(Duration::from_millis(5)).is_ok());
    /// ```
    #[inline]
    pub fn try_write_for(&self, timeout: Duration) -> TryLockResult<RwLockWriteGuard<'_, T>> {
        self.write_guard_if(|raw| raw.try_write_for(timeout))
    }

    /// Acquire the write lock, waiting at most until `deadline`. Errors as
    /// [`try_write_for`](Self::try_write_for).
    #[inline]
    pub fn try_write_until(&self, deadline: Instant) -> TryLockResult<RwLockWriteGuard<'_, T>> {
        self.write_guard_if(|raw| raw.try_write_until(deadline))
    }

    /// The one body of the `try_write*` methods, as [`read_guard_if`](Self::read_guard_if).
    #[inline]
    fn write_guard_if(
        &self,
        acquire: impl FnOnce(&RawRwLock) -> bool,
    ) -> TryLockResult<RwLockWriteGuard<'_, T>> {
        if acquire(&self.raw) {
            // SAFETY: `acquire` returned true, so it write-locked `self.raw`; the guard takes
            // over that ownership.
            Ok(unsafe { RwLockWriteGuard::new(self) }?)
        } else {
            Err(TryLockError::WouldBlock)
        }
    }

    /// Whether a writer panicked while holding the lock (a panicking reader does not poison).
    #[inline]
    pub fn is_poisoned(&self) -> bool {
        Poison::get(&self.raw)
    }

    /// Clear the poisoned state (after the data has been made consistent again).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let l = Arc::new(gomutex::RwLock::new(0));
    /// let l2 = Arc::clone(&l);
    /// let _ = std::thread::spawn(move || {
    ///     let _w = l2.write().unwrap();
    ///     panic!("poison it");
    /// })
    /// .join();
    /// assert!(l.is_poisoned());
    /// l.clear_poison();
    /// assert!(!l.is_poisoned());
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

    /// The raw lock underneath (for tests and diagnostics; not part of the API).
    #[doc(hidden)]
    pub fn raw(&self) -> &RawRwLock {
        &self.raw
    }
}

impl<T: Default> Default for RwLock<T> {
    fn default() -> Self {
        RwLock::new(T::default())
    }
}

impl<T> From<T> for RwLock<T> {
    fn from(t: T) -> Self {
        RwLock::new(t)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RwLock");
        match self.try_read() {
            Ok(guard) => {
                d.field("data", &&*guard);
            }
            Err(TryLockError::Poisoned(err)) => {
                d.field("data", &&**err.get_ref());
            }
            Err(TryLockError::WouldBlock) => {
                d.field("data", &format_args!("<locked>"));
            }
        }
        d.field("poisoned", &Poison::get(&self.raw));
        d.finish_non_exhaustive()
    }
}

impl<'a, T: ?Sized> RwLockReadGuard<'a, T> {
    /// # Safety
    /// `lock.raw` must be read-held by the caller (where `token` says), who hands that read
    /// lock to the guard.
    unsafe fn new(lock: &'a RwLock<T>, token: ReadToken) -> LockResult<Self> {
        // SAFETY: the caller's contract.
        unsafe { Self::new_seen(lock, token, Poison::get(&lock.raw)) }
    }

    /// [`new`](Self::new) with the poison flag as the read lock was taken.
    ///
    /// # Safety
    /// As for [`new`](Self::new).
    #[inline]
    unsafe fn new_seen(lock: &'a RwLock<T>, token: ReadToken, poisoned: bool) -> LockResult<Self> {
        let guard = Self {
            // SAFETY: `UnsafeCell::get` is never null.
            data: unsafe { NonNull::new_unchecked(lock.data.get()) },
            raw: &lock.raw,
            token,
            _not_send: PhantomData,
        };
        poison::map_result(poisoned, guard)
    }

    /// Take the guard apart without releasing its read lock: the lock and the token.
    fn into_parts(orig: Self) -> (&'a RawRwLock, ReadToken) {
        let mut orig = ManuallyDrop::new(orig);
        (
            orig.raw,
            core::mem::replace(&mut orig.token, ReadToken::word()),
        )
    }

    /// Make a guard for a part of the read-locked data, e.g. one field (beyond std: std's
    /// `RwLockReadGuard::map` is unstable, `mapped_lock_guards`; same name and semantics). The
    /// read lock stays held until the [`MappedRwLockReadGuard`] is dropped. An associated
    /// function, so it cannot shadow a `map` method of the data.
    ///
    /// If `f` panics, the guard is dropped and the read lock released (a reader never poisons).
    ///
    /// ```
    /// use gomutex::{RwLock, RwLockReadGuard};
    ///
    /// let l = RwLock::new((1, String::from("a")));
    /// let s = RwLockReadGuard::map(l.read().unwrap(), |d| &d.1);
    /// assert_eq!(*s, "a");
    /// ```
    pub fn map<U, F>(orig: Self, f: F) -> MappedRwLockReadGuard<'a, U>
    where
        F: FnOnce(&T) -> &U,
        U: ?Sized,
    {
        // SAFETY: the guard read-holds the lock, so no `&mut T` exists; the closure's
        // signature keeps the reference from escaping it. If it panics, `orig` unlocks.
        let data = NonNull::from(f(unsafe { orig.data.as_ref() }));
        let (raw, token) = Self::into_parts(orig);
        MappedRwLockReadGuard::new(data, raw, token)
    }

    /// Like [`map`](Self::map), but `f` may decline (`None`), which gives the original guard
    /// back (beyond std, as `map`).
    ///
    /// ```
    /// use gomutex::{RwLock, RwLockReadGuard};
    ///
    /// let l = RwLock::new(vec![1, 2]);
    /// let g = RwLockReadGuard::filter_map(l.read().unwrap(), |v| v.get(5)).unwrap_err();
    /// let first = RwLockReadGuard::filter_map(g, |v| v.first()).unwrap();
    /// assert_eq!(*first, 1);
    /// ```
    pub fn filter_map<U, F>(orig: Self, f: F) -> Result<MappedRwLockReadGuard<'a, U>, Self>
    where
        F: FnOnce(&T) -> Option<&U>,
        U: ?Sized,
    {
        // SAFETY: as in `map`.
        match f(unsafe { orig.data.as_ref() }) {
            Some(data) => {
                let data = NonNull::from(data);
                let (raw, token) = Self::into_parts(orig);
                Ok(MappedRwLockReadGuard::new(data, raw, token))
            }
            None => Err(orig),
        }
    }
}

impl<'a, T: ?Sized> RwLockWriteGuard<'a, T> {
    /// # Safety
    /// `lock.raw` must be write-held by the caller, who hands that ownership to the guard.
    unsafe fn new(lock: &'a RwLock<T>) -> LockResult<Self> {
        // SAFETY: the caller's contract.
        unsafe { Self::new_seen(lock, Poison::get(&lock.raw)) }
    }

    /// [`new`](Self::new) with the poison flag as the write lock was taken.
    ///
    /// # Safety
    /// As for [`new`](Self::new).
    #[inline]
    unsafe fn new_seen(lock: &'a RwLock<T>, poisoned: bool) -> LockResult<Self> {
        match poison::guard_seen(poisoned) {
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

    /// Turn the write lock into a read lock, atomically: no writer can take the lock in
    /// between, and the readers that queued meanwhile are admitted with this one (std's,
    /// stable since 1.92; it cannot fail). As std's, it never poisons the lock, even while the
    /// thread is panicking (only dropping a write guard does).
    ///
    /// ```
    /// use gomutex::{RwLock, RwLockWriteGuard};
    ///
    /// let l = RwLock::new(1);
    /// let mut w = l.write().unwrap();
    /// *w = 2;
    /// let r = RwLockWriteGuard::downgrade(w);
    /// assert_eq!(*r, 2);
    /// assert_eq!(*l.try_read().unwrap(), 2); // other readers get in
    /// assert!(l.try_write().is_err());
    /// ```
    pub fn downgrade(s: Self) -> RwLockReadGuard<'a, T> {
        let s = ManuallyDrop::new(s);
        let lock = s.lock;
        // SAFETY: the guard holds the write lock; from here a read lock, which the new guard
        // takes over (the write guard is not dropped).
        unsafe { lock.raw.downgrade() };
        RwLockReadGuard {
            // SAFETY: `UnsafeCell::get` is never null.
            data: unsafe { NonNull::new_unchecked(lock.data.get()) },
            raw: &lock.raw,
            token: ReadToken::word(),
            _not_send: PhantomData,
        }
    }

    /// Make a guard for a part of the write-locked data (beyond std: std's
    /// `RwLockWriteGuard::map` is unstable, `mapped_lock_guards`; same name and semantics).
    /// The write lock stays held until the [`MappedRwLockWriteGuard`] is dropped, which
    /// unlocks it (and poisons it if the thread panics meanwhile).
    ///
    /// If `f` panics, the guard is dropped: the lock is released and poisoned.
    ///
    /// ```
    /// use gomutex::{RwLock, RwLockWriteGuard};
    ///
    /// let l = RwLock::new((1, String::from("a")));
    /// let mut s = RwLockWriteGuard::map(l.write().unwrap(), |d| &mut d.1);
    /// s.push('b');
    /// drop(s);
    /// assert_eq!(l.read().unwrap().1, "ab");
    /// ```
    pub fn map<U, F>(orig: Self, f: F) -> MappedRwLockWriteGuard<'a, U>
    where
        F: FnOnce(&mut T) -> &mut U,
        U: ?Sized,
    {
        // SAFETY: the guard write-holds the lock, so nobody else reaches the data; the
        // closure's signature keeps the reference from escaping it. If it panics, `orig`
        // unlocks (and poisons).
        let data = NonNull::from(f(unsafe { &mut *orig.lock.data.get() }));
        MappedRwLockWriteGuard::new(data, ManuallyDrop::new(orig))
    }

    /// Like [`map`](Self::map), but `f` may decline (`None`), which gives the original guard
    /// back (beyond std, as `map`).
    ///
    /// ```
    /// use gomutex::{RwLock, RwLockWriteGuard};
    ///
    /// let l = RwLock::new(vec![1, 2]);
    /// let g = RwLockWriteGuard::filter_map(l.write().unwrap(), |v| v.get_mut(5)).unwrap_err();
    /// let mut first = RwLockWriteGuard::filter_map(g, |v| v.first_mut()).unwrap();
    /// *first = 10;
    /// drop(first);
    /// assert_eq!(*l.read().unwrap(), [10, 2]);
    /// ```
    pub fn filter_map<U, F>(orig: Self, f: F) -> Result<MappedRwLockWriteGuard<'a, U>, Self>
    where
        F: FnOnce(&mut T) -> Option<&mut U>,
        U: ?Sized,
    {
        // SAFETY: as in `map`.
        match f(unsafe { &mut *orig.lock.data.get() }) {
            Some(data) => {
                let data = NonNull::from(data);
                Ok(MappedRwLockWriteGuard::new(data, ManuallyDrop::new(orig)))
            }
            None => Err(orig),
        }
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard read-holds the lock, so no `&mut T` exists.
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard write-holds the lock, so no `&mut T` exists elsewhere.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard write-holds the lock and we have `&mut self`.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard is being dropped, its token never used again (a plain value
        // without a destructor: copying it out leaves nothing to drop twice).
        let token = unsafe { core::ptr::read(&self.token) };
        // SAFETY: the guard read-holds the lock where `token` says.
        unsafe { self.raw.unlock_read_token(token) }
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        Poison::done(&self.lock.raw, &self.poison);
        // SAFETY: the guard write-holds the lock.
        unsafe { self.lock.raw.unlock_write() }
    }
}

/// A guard for a part of a [`RwLock`]'s data, read-locked, made by [`RwLockReadGuard::map`] or
/// [`RwLockReadGuard::filter_map`] (beyond std: std's is unstable, `mapped_lock_guards`; same
/// semantics). The read lock is held while it lives. `!Send`, as [`RwLockReadGuard`].
#[must_use = "if unused the RwLock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct MappedRwLockReadGuard<'a, T: ?Sized + 'a> {
    /// Points into the lock's data; no `&mut T` exists while the read lock is held.
    data: NonNull<T>,
    raw: &'a RawRwLock,
    /// Where the read lock is held.
    token: ReadToken,
    _not_send: NotSendRead,
}

// SAFETY: sharing `&MappedRwLockReadGuard` only shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for MappedRwLockReadGuard<'_, T> {}

impl<'a, T: ?Sized> MappedRwLockReadGuard<'a, T> {
    /// Take over a read lock of `raw` (held where `token` says; its guard is not dropped) for
    /// `data`, which points into the same lock's data.
    fn new(data: NonNull<T>, raw: &'a RawRwLock, token: ReadToken) -> Self {
        Self {
            data,
            raw,
            token,
            _not_send: PhantomData,
        }
    }

    /// Take the guard apart without releasing its read lock: the lock and the token.
    fn into_parts(orig: Self) -> (&'a RawRwLock, ReadToken) {
        let mut orig = ManuallyDrop::new(orig);
        (
            orig.raw,
            core::mem::replace(&mut orig.token, ReadToken::word()),
        )
    }

    /// Narrow the guard further (as [`RwLockReadGuard::map`]).
    pub fn map<U, F>(orig: Self, f: F) -> MappedRwLockReadGuard<'a, U>
    where
        F: FnOnce(&T) -> &U,
        U: ?Sized,
    {
        // SAFETY: the guard read-holds the lock, so no `&mut T` exists.
        let data = NonNull::from(f(unsafe { orig.data.as_ref() }));
        let (raw, token) = Self::into_parts(orig);
        MappedRwLockReadGuard::new(data, raw, token)
    }

    /// Narrow the guard further if `f` says so, else give it back (as
    /// [`RwLockReadGuard::filter_map`]).
    pub fn filter_map<U, F>(orig: Self, f: F) -> Result<MappedRwLockReadGuard<'a, U>, Self>
    where
        F: FnOnce(&T) -> Option<&U>,
        U: ?Sized,
    {
        // SAFETY: as in `map`.
        match f(unsafe { orig.data.as_ref() }) {
            Some(data) => {
                let data = NonNull::from(data);
                let (raw, token) = Self::into_parts(orig);
                Ok(MappedRwLockReadGuard::new(data, raw, token))
            }
            None => Err(orig),
        }
    }
}

impl<T: ?Sized> Deref for MappedRwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard read-holds the lock, so no `&mut T` exists.
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> Drop for MappedRwLockReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard is being dropped, its token never used again (a plain value
        // without a destructor: copying it out leaves nothing to drop twice).
        let token = unsafe { core::ptr::read(&self.token) };
        // SAFETY: the guard read-holds the lock where `token` says.
        unsafe { self.raw.unlock_read_token(token) }
    }
}

/// A guard for a part of a [`RwLock`]'s data, write-locked, made by [`RwLockWriteGuard::map`]
/// or [`RwLockWriteGuard::filter_map`] (beyond std: std's is unstable, `mapped_lock_guards`;
/// same semantics). The write lock is held while it lives; dropping it unlocks, and poisons the
/// lock if the thread is panicking. `!Send`, as [`RwLockWriteGuard`].
#[must_use = "if unused the RwLock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct MappedRwLockWriteGuard<'a, T: ?Sized + 'a> {
    /// Points into the lock's data; valid and exclusive while the write lock is held.
    data: NonNull<T>,
    raw: &'a RawRwLock,
    poison_flag: &'a RawRwLock,
    poison: poison::Guard,
    /// Invariant in `T`, as `&'a mut T` (std's choice: the guard hands out `&mut T`).
    _variance: PhantomData<&'a mut T>,
    _not_send: NotSendWrite,
}

// SAFETY: sharing `&MappedRwLockWriteGuard` only shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for MappedRwLockWriteGuard<'_, T> {}

impl<'a, T: ?Sized> MappedRwLockWriteGuard<'a, T> {
    /// Take over the write lock of `orig` (not dropped) for `data`, which points into the same
    /// lock's data.
    fn new<D: ?Sized>(data: NonNull<T>, orig: ManuallyDrop<RwLockWriteGuard<'a, D>>) -> Self {
        let lock: &'a RwLock<D> = orig.lock;
        Self {
            data,
            raw: &lock.raw,
            poison_flag: &lock.raw,
            poison: orig.poison,
            _variance: PhantomData,
            _not_send: PhantomData,
        }
    }

    /// This guard's write lock, for `data` (which points into the same lock's data).
    fn narrow<U: ?Sized>(self, data: NonNull<U>) -> MappedRwLockWriteGuard<'a, U> {
        let orig = ManuallyDrop::new(self);
        MappedRwLockWriteGuard {
            data,
            raw: orig.raw,
            poison_flag: orig.poison_flag,
            poison: orig.poison,
            _variance: PhantomData,
            _not_send: PhantomData,
        }
    }

    /// Narrow the guard further (as [`RwLockWriteGuard::map`]).
    pub fn map<U, F>(mut orig: Self, f: F) -> MappedRwLockWriteGuard<'a, U>
    where
        F: FnOnce(&mut T) -> &mut U,
        U: ?Sized,
    {
        // SAFETY: the guard write-holds the lock, so the data is ours alone while `f` runs.
        let data = NonNull::from(f(unsafe { orig.data.as_mut() }));
        orig.narrow(data)
    }

    /// Narrow the guard further if `f` says so, else give it back (as
    /// [`RwLockWriteGuard::filter_map`]).
    pub fn filter_map<U, F>(mut orig: Self, f: F) -> Result<MappedRwLockWriteGuard<'a, U>, Self>
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

impl<T: ?Sized> Deref for MappedRwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard write-holds the lock, so no `&mut T` exists elsewhere.
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for MappedRwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard write-holds the lock and we have `&mut self`.
        unsafe { self.data.as_mut() }
    }
}

impl<T: ?Sized> Drop for MappedRwLockWriteGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.poison_flag.done(&self.poison);
        // SAFETY: the guard write-holds the lock.
        unsafe { self.raw.unlock_write() }
    }
}

/// `Debug` and `Display` of every guard: those of the data, as std's.
macro_rules! fmt_as_data {
    ($($guard:ident),*) => {$(
        impl<T: ?Sized + fmt::Debug> fmt::Debug for $guard<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&**self, f)
            }
        }

        impl<T: ?Sized + fmt::Display> fmt::Display for $guard<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                (**self).fmt(f)
            }
        }
    )*};
}

fmt_as_data!(
    RwLockReadGuard,
    RwLockWriteGuard,
    MappedRwLockReadGuard,
    MappedRwLockWriteGuard
);
