//! [`ShmRwLock`]: a readers-writer lock in shared memory that survives the death of a reader
//! or a writer.
//!
//! # The protocol
//!
//! Writers serialise on a [`ShmMutex`] (Go's mutex algorithm, with its death recovery), held
//! for the whole write phase, as Go's `RWMutex` holds `w`. Readers are counted **per
//! participant** (`ParticipantSlot::rw_reads`, one cache line per process): there is no shared
//! reader count. Go's single `readerCount` cannot be taken back after a death (a reader killed
//! after its `XADD` and before any record of it leaves a count nobody can attribute), while a
//! per-process count is changed by one atomic operation, so recovery subtracts exactly what a
//! dead process held: its whole count.
//!
//! The write-phase word `rw_state` (in the header, beside the owner-died and poison flags
//! every reader loads) holds `PENDING` (a writer holds the writers' mutex and wants the
//! readers out), `RWAIT` (readers sleep on the word), `WSLEEP` (the writer sleeps on the
//! wake-up word) and a phase number, bumped when a write phase ends.
//!
//! * **Read lock**: add 1 to this process's count, then load `rw_state`; without `PENDING` the
//!   read lock is held (two sequentially consistent operations against the writer's two, in
//!   the other order: one of the two sees the other). With `PENDING`, take the 1 back, wake the
//!   writer, spin a few rounds (uncounted) in case the phase ends at once, and queue: count
//!   the thread in `rw_waiting`, set `RWAIT` and sleep until the phase changes. A reader
//!   queued while a phase is `PENDING` is *admitted*: the next writer waits until every queued
//!   reader is in (Go's batch order: one writer, the readers that queued behind it, then the
//!   next writer), so it enters without looking at `PENDING` again.
//! * **Write lock**: lock the writers' mutex; wait until no reader is queued; set `PENDING`;
//!   wait until every participant's count is 0 (writer preference: readers arriving now
//!   queue). Spins a few rounds, then sleeps on the wake-up word, which departing readers
//!   bump.
//! * **Write unlock**: end the phase (clear the flags, bump the phase, wake the queued
//!   readers), then unlock the writers' mutex.
//! * **Downgrade**: count the writer as a reader of its process (it holds the writers' mutex
//!   with `PENDING` set: no writer scans the counts, no reader gets in), then the write unlock.
//!
//! # Deaths
//!
//! * A **reader** that dies holding read locks: its count is zeroed by the recovery of its
//!   participant slot (the writer waiting for it looks for dead readers every 10 ms).
//! * A **writer** that dies holding the lock: the writers' mutex is recovered as a
//!   [`ShmMutex`]'s (`OwnerDied` for every later acquirer, readers included, until a writer
//!   calls `mark_consistent`); the phase it left `PENDING` is ended by the next writer to take
//!   the mutex, or by a queued reader that finds the mutex free.
//! * A process killed between any two steps: every step is one atomic operation on a count of
//!   its own process or on `rw_state`, so what it left is its counts (zeroed by recovery) and
//!   at most a `PENDING` phase of a dead writer (ended as above). A downgrader killed between
//!   its count and its unlock is both: a dead writer and a dead reader.

use super::config::Config;
use super::diagnostics::Diagnostics;
use super::error::{LockError, LockResult, ShmError, TryLockError, TryLockResult};
use super::guard::ShmMutexGuard;
use super::identity;
use super::journal::Hooks as _;
use super::mapping::{Mapping, MappingLayout};
use super::object::OpenOptions;
use super::region::low;
use super::stats::add;
use super::stats::LockStats;
use super::sys;
use super::timing::TICK;
use super::types::ShmSafe;
use super::ShmMutex;
use crate::algo::LOCKED;
use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU32, Ordering::*};
use std::time::{Duration, Instant};

/// `rw_state`: a writer holds the writers' mutex and wants the readers out (or, if no live
/// writer holds the mutex, a dead writer's phase not ended yet).
const PENDING: u32 = 1;
/// `rw_state`: readers sleep on the word (the phase's end wakes them).
const RWAIT: u32 = 2;
/// `rw_state`: the writer sleeps on the wake-up word (departing readers wake it).
const WSLEEP: u32 = 4;
/// `rw_state`: the phase number's unit (bits 3 and up).
const PHASE: u32 = 8;

/// The control words' index in [`RwBody::ctl`]: the highest participant index that ever read,
/// plus one (writers scan that many counts). On its own line: written once per process.
const HWM: usize = 0;
/// The wake-up word a waiting writer sleeps on (bumped by departing readers).
const WAKE: usize = 16;

/// What the writers' mutex protects: the control words and the value. Readers reach the value
/// without the mutex, so it is reached through raw pointers only, never as `&mut RwBody`.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct RwBody<T> {
    /// Two lines of `u32`s, used as atomics ([`HWM`], [`WAKE`]).
    ctl: [u32; 32],
    value: T,
}

// SAFETY: `repr(C)`, `u32`s and a `ShmSafe` value: plain data, valid for every bit pattern.
unsafe impl<T: ShmSafe> ShmSafe for RwBody<T> {}

/// Go's `RWMutex` and a value `T`, in memory shared between processes, robust against the
/// death of a reader or a writer.
///
/// * Writers serialise on a [`ShmMutex`] held for the whole write phase (Go's mutex
///   algorithm and its recovery); a writer keeps new readers out, waits for the readers inside
///   to leave, and the readers that queued behind it come in before the next writer (Go's
///   writer preference and batch order).
/// * A read lock is two atomic operations (an add on this process's own count, a load of a
///   read-mostly word), and so is its release: no cache line moves between reading processes.
/// * Each process's read locks are counted in its own participant slot, so the recovery of a
///   dead reader takes back exactly its reads (a waiting writer looks for dead readers every
///   10 ms); a dead writer's lock is recovered as a `ShmMutex`'s, and the write phase it left
///   is ended by the next writer or a queued reader. [`force_unlock`](Self::force_unlock) does
///   it at once for a reaped pid.
///
/// [`ShmMutex`]'s constructors (`anonymous`, `create`, `open`, `open_or_create`, their `_with`
/// and `open_timeout` forms, `init_in_place` / `attach`) and its placement in a [`Mapping`]
/// (`init_in` / `attach_in`); the lock *is* a `ShmMutex` region whose value holds the readers'
/// control words beside `T`, so a region of one does not open as the other. A write guard
/// [`downgrade`](ShmRwLockWriteGuard::downgrade)s to a read guard.
///
/// Not re-entrant: a thread that holds a read lock and asks for another, or for the write
/// lock, may wait for good (a writer may be queued between), as with any readers-writer lock.
/// A process stopped (`SIGSTOP`) while queued as a reader holds up the next writer until it
/// continues (it is alive, and was promised its turn). Readers are told [`LockError::OwnerDied`] (and
/// [`LockError::Poisoned`]) as writers are, and only a writer can repair:
/// [`ShmRwLockWriteGuard::mark_consistent`].
///
/// ```
/// use gomutex::shm::ShmRwLock;
///
/// let lock = ShmRwLock::anonymous([0u64; 4])?; // share it: fork() after this
/// lock.write().unwrap()[1] = 7;
/// let (a, b) = (lock.read().unwrap(), lock.read().unwrap()); // readers overlap
/// assert_eq!(a[1] + b[1], 14);
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
pub struct ShmRwLock<T: ShmSafe> {
    m: ShmMutex<RwBody<T>>,
    /// This handle's participant index + 1 once it is in the high-water mark ([`HWM`]).
    published: AtomicU32,
}

impl<T: ShmSafe> ShmRwLock<T> {
    fn wrap(m: ShmMutex<RwBody<T>>) -> Self {
        Self {
            m,
            published: AtomicU32::new(0),
        }
    }

    fn body(value: T) -> RwBody<T> {
        RwBody {
            ctl: [0; 32],
            value,
        }
    }

    /// The bytes a region with this configuration takes (to size a [`Mapping`] by hand).
    ///
    /// ```
    /// use gomutex::shm::{Config, ShmRwLock};
    /// assert!(ShmRwLock::<u64>::required_size(Config::default())? > 0);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn required_size(cfg: Config) -> Result<usize, ShmError> {
        ShmMutex::<RwBody<T>>::required_size(cfg)
    }

    /// A new lock in an anonymous shared mapping, default [`Config`]; children created with
    /// `fork()` afterwards share it.
    ///
    /// ```
    /// let lock = gomutex::shm::ShmRwLock::anonymous(5u32)?;
    /// assert_eq!(*lock.read().unwrap(), 5);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn anonymous(value: T) -> Result<Self, ShmError> {
        Self::anonymous_with(value, Config::default())
    }

    /// [`anonymous`](Self::anonymous) with explicit sizes.
    ///
    /// ```
    /// use gomutex::shm::{Config, ShmRwLock};
    /// let lock = ShmRwLock::anonymous_with(0u8, Config::default().participants(8))?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn anonymous_with(value: T, cfg: Config) -> Result<Self, ShmError> {
        ShmMutex::anonymous_with(Self::body(value), cfg).map(Self::wrap)
    }

    /// Create a named lock (`shm_open` with `O_CREAT | O_EXCL`, visible under `/dev/shm`), as
    /// [`ShmMutex::create`]; fails if the name exists.
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, ShmRwLock};
    /// let name = format!("/gomutex-doc-rw-create-{}", std::process::id());
    /// let lock = ShmRwLock::create(&name, 1u64, Config::default())?;
    /// let other = ShmRwLock::<u64>::open(&name)?; // e.g. in another process
    /// *lock.write().unwrap() += 1;
    /// assert_eq!(*other.read().unwrap(), 2);
    /// unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn create(name: &str, value: T, cfg: Config) -> Result<Self, ShmError> {
        ShmMutex::create(name, Self::body(value), cfg).map(Self::wrap)
    }

    /// Open a named lock another process created, validating its header (magic, version,
    /// sizes, value type) and writing nothing if anything is off, as [`ShmMutex::open`]. A
    /// [`ShmMutex`] region of the same name is refused ([`ShmError::ValueMismatch`]).
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, ShmError, ShmMutex, ShmRwLock};
    /// let name = format!("/gomutex-doc-rw-open-{}", std::process::id());
    /// let _m = ShmMutex::create(&name, 0u64, Config::default())?;
    /// assert!(matches!(ShmRwLock::<u64>::open(&name), Err(ShmError::Object { .. })));
    /// unlink(&name)?;
    /// # Ok::<(), ShmError>(())
    /// ```
    pub fn open(name: &str) -> Result<Self, ShmError> {
        ShmMutex::open(name).map(Self::wrap)
    }

    /// Open the named lock, or create it with `value` if it does not exist; `true` if this
    /// call created it (as [`ShmMutex::open_or_create`]).
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, ShmRwLock};
    /// let name = format!("/gomutex-doc-rw-ooc-{}", std::process::id());
    /// let (a, created) = ShmRwLock::open_or_create(&name, 3u32, Config::default())?;
    /// let (b, again) = ShmRwLock::open_or_create(&name, 9u32, Config::default())?;
    /// assert!(created && !again);
    /// assert_eq!(*b.read().unwrap(), 3);
    /// drop(a);
    /// unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open_or_create(name: &str, value: T, cfg: Config) -> Result<(Self, bool), ShmError> {
        ShmMutex::open_or_create(name, Self::body(value), cfg).map(|(m, c)| (Self::wrap(m), c))
    }

    /// Initialise a lock at `offset` of `map` (an offset from
    /// [`MappingLayout::rwlock`](super::MappingLayout::rwlock)), as [`ShmMutex::init_in`].
    ///
    /// ```
    /// use gomutex::shm::{Config, Mapping, MappingLayout, ShmRwLock};
    /// let mut plan = MappingLayout::new();
    /// let at = plan.rwlock::<u64>(Config::default())?;
    /// let map = Mapping::anonymous(plan.len())?;
    /// let lock = ShmRwLock::init_in(&map, at, 3u64, Config::default())?;
    /// let again = ShmRwLock::<u64>::attach_in(&map, at)?;
    /// assert_eq!(*again.read().unwrap(), 3);
    /// # drop(lock);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn init_in(map: &Mapping, offset: usize, value: T, cfg: Config) -> Result<Self, ShmError> {
        ShmMutex::init_in(map, offset, Self::body(value), cfg).map(Self::wrap)
    }

    /// Attach to the lock at `offset` of `map`, validating its header and writing nothing if it
    /// is wrong, as [`ShmMutex::attach_in`].
    pub fn attach_in(map: &Mapping, offset: usize) -> Result<Self, ShmError> {
        ShmMutex::attach_in(map, offset).map(Self::wrap)
    }

    // --- the words ---

    fn state(&self) -> &AtomicU32 {
        &self.m.region.hdr().rw_state
    }

    fn ctl(&self, i: usize) -> &AtomicU32 {
        let body = self.m.region.value_ptr().cast::<RwBody<T>>();
        // SAFETY: the region's value is an initialised `RwBody<T>` (validated header, type
        // checked); `i < 32`; its control words are only ever accessed atomically (here) after
        // initialisation, and no `&RwBody`/`&mut RwBody` is ever formed, so no non-atomic access
        // overlaps; `u32` and `AtomicU32` have the same size and the words are 4-aligned.
        unsafe { AtomicU32::from_ptr(core::ptr::addr_of_mut!((*body).ctl[i])) }
    }

    fn value_ptr(&self) -> *mut T {
        let body = self.m.region.value_ptr().cast::<RwBody<T>>();
        // SAFETY: in bounds of the region's value (a raw place projection, no reference made).
        unsafe { core::ptr::addr_of_mut!((*body).value) }
    }

    fn reads(&self, i: u32) -> &AtomicU32 {
        &self.m.region.participant(i).rw_reads
    }

    fn waiting(&self, i: u32) -> &AtomicU32 {
        &self.m.region.participant(i).rw_waiting
    }

    /// Participant slots a writer scans: every index that ever read (counts beyond it are 0).
    fn scanned(&self) -> u32 {
        self.ctl(HWM)
            .load(SeqCst)
            .min(self.m.region.layout.participants)
    }

    /// Put participant `me` in the high-water mark before its first count (once per handle
    /// and slot): a writer that misses it in the mark loaded the mark before this, so before
    /// our count, and we see its `PENDING` (module docs).
    #[inline]
    fn publish(&self, me: u32) {
        if self.published.load(Acquire) != me + 1 {
            self.ctl(HWM).fetch_max(me + 1, SeqCst);
            self.published.store(me + 1, Release);
        }
    }

    /// Wake a writer waiting for readers to leave or to come in.
    fn notify_writer(&self) {
        self.ctl(WAKE).fetch_add(1, SeqCst);
        if self.state().load(SeqCst) & WSLEEP != 0 {
            sys::futex_wake(self.ctl(WAKE), 1);
        }
    }

    // --- readers ---

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

    fn try_read_by(
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
    fn read_as(
        &self,
        generation: u32,
        me: u32,
        deadline: Option<Instant>,
        once: bool,
    ) -> Option<LockResult<ShmRwLockReadGuard<'_, T>>> {
        self.publish(me);
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
    fn wait_phase_end(&self, s: u32, deadline: Option<Instant>) -> bool {
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

    fn read_guard(&self, generation: u32, me: u32) -> LockResult<ShmRwLockReadGuard<'_, T>> {
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

    fn read_unlock(&self, me: u32) {
        self.reads(me).fetch_sub(1, SeqCst);
        if self.state().load(SeqCst) & PENDING != 0 {
            self.notify_writer();
        }
    }

    // --- writers ---

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

    fn write_by<'a>(
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
    fn write_phase<'a>(
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
        if !self.wait_counts(|i| self.waiting(i), deadline, once, &mut held) {
            self.record_write_wait(g.me, held);
            return None; // `g` unlocks
        }
        self.state().fetch_or(PENDING, SeqCst);
        crate::crash::point(crate::crash::RW_PENDING);
        let inside = self.wait_counts(|i| self.reads(i), deadline, once, &mut held);
        self.record_write_wait(g.me, held);
        if !inside {
            self.end_phase();
            return None;
        }
        Some(ShmRwLockWriteGuard {
            lock: self,
            g: ManuallyDrop::new(g),
        })
    }

    /// Wait until `count(i)` is 0 for every participant (a writer, holding the mutex);
    /// `false` if `deadline` passed first (or, if `once`, at once). Every [`TICK`], recover the
    /// participants found dead with a non-zero count (which zeroes it). `held` records, for the
    /// statistics, that a call that waits found a count non-zero, and when it first slept.
    fn wait_counts<'a>(
        &'a self,
        count: impl Fn(u32) -> &'a AtomicU32,
        deadline: Option<Instant>,
        once: bool,
        held: &mut HeldUp,
    ) -> bool {
        let busy = || (0..self.scanned()).any(|i| count(i).load(SeqCst) != 0);
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
    fn reap_dead<'a>(&'a self, count: &impl Fn(u32) -> &'a AtomicU32, deadline: Option<Instant>) {
        let ctx = self.m.participant().until(deadline);
        for i in 0..self.scanned() {
            if i == ctx.me || count(i).load(SeqCst) == 0 {
                continue;
            }
            let p = self.m.region.participant(i);
            let ident = p.ident.load(SeqCst);
            if ident != 0 && p.dead(ident) {
                ctx.recover(i, ident);
            }
        }
    }

    /// End the write phase: clear the flags, bump the phase, wake the queued readers.
    fn end_phase(&self) {
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
    fn end_orphan_phase(&self, deadline: Option<Instant>) {
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

    // --- recovery and monitoring ---

    /// Release whatever the process `pid` left, if it is gone (a supervisor right after
    /// `waitpid`, as [`ShmMutex::force_unlock`]): its read locks, the write lock (the next
    /// acquirer is told [`LockError::OwnerDied`]) and the write phase it had announced, its
    /// queued readers. Returns whether this call released a read or the write lock of it (a
    /// recovery by another process racing this call may have done it first). A live process
    /// is left alone.
    ///
    /// ```
    /// let lock = gomutex::shm::ShmRwLock::anonymous(0u32)?;
    /// let child = std::process::Command::new("true").spawn()?;
    /// let pid = child.id();
    /// child.wait_with_output()?;
    /// assert!(!lock.force_unlock(pid)); // it never held anything
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn force_unlock(&self, pid: impl TryInto<u32>) -> bool {
        let Ok(pid) = pid.try_into() else {
            return false;
        };
        let r = &self.m.region;
        // A dead participant of `pid` holding reads (a live one is left alone).
        let dead_reads = || {
            (0..r.layout.participants).any(|i| {
                let p = r.participant(i);
                let ident = p.ident.load(SeqCst);
                ident != 0
                    && identity::ident_pid(ident) == pid
                    && p.rw_reads.load(SeqCst) != 0
                    && p.dead(ident)
            })
        };
        let read = dead_reads();
        let wrote = self.m.force_unlock(pid);
        self.end_orphan_phase(None);
        self.notify_writer();
        wrote || (read && !dead_reads())
    }

    /// Register this process as a participant now, as [`ShmMutex::join`]: fails with
    /// [`ShmError::NoParticipantSlot`] at once if every slot is held by a live process
    /// (otherwise a process registers on first use, and `try_*` report a full table as
    /// `WouldBlock`).
    ///
    /// ```
    /// let lock = gomutex::shm::ShmRwLock::anonymous(0u32)?;
    /// lock.join()?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn join(&self) -> Result<(), ShmError> {
        self.m.join()
    }

    /// Look for dead participants now and repair what they left (normally done by waiting
    /// processes every 10 ms). Returns how many were found.
    pub fn recover(&self) -> usize {
        let n = self.m.recover();
        self.end_orphan_phase(None);
        // A writer waiting for a dead reader's count looks again now, not at its next tick.
        self.notify_writer();
        n
    }

    /// A snapshot of the lock's state, for tests and monitoring.
    ///
    /// ```
    /// let lock = gomutex::shm::ShmRwLock::anonymous(0u32)?;
    /// let _r = lock.read().unwrap();
    /// let d = lock.diagnostics();
    /// assert_eq!((d.readers, d.queued_readers, d.write_pending), (1, 0, false));
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn diagnostics(&self) -> RwDiagnostics {
        let (mut readers, mut queued_readers) = (0, 0);
        for i in 0..self.m.region.layout.participants {
            readers += u64::from(self.reads(i).load(SeqCst));
            queued_readers += u64::from(self.waiting(i).load(SeqCst));
        }
        let s = self.state().load(SeqCst);
        RwDiagnostics {
            writers: self.m.diagnostics(),
            readers,
            queued_readers,
            write_pending: s & PENDING != 0,
            writer_asleep: s & WSLEEP != 0,
            phase: s / PHASE,
        }
    }

    /// Whether a writer died (or panicked) while holding the lock and nobody marked it
    /// consistent since.
    pub fn owner_died(&self) -> bool {
        self.m.owner_died()
    }

    /// Whether a writer panicked while holding the lock (std's poisoning: readers never poison).
    pub fn is_poisoned(&self) -> bool {
        self.m.is_poisoned()
    }

    /// Clear the poison flag.
    pub fn clear_poison(&self) {
        self.m.clear_poison();
    }
}

/// A reader's place in the queue (`rw_waiting`): taken back when dropped, and the writer
/// waiting for the queue to empty woken.
struct Queued<'a, T: ShmSafe>(&'a ShmRwLock<T>, &'a AtomicU32);

impl<T: ShmSafe> Drop for Queued<'_, T> {
    fn drop(&mut self) {
        self.1.fetch_sub(1, SeqCst);
        self.0.notify_writer();
    }
}

/// The guard of a lock result and the error kind it came with (`None` if it timed out).
fn split<G>(r: TryLockResult<G>) -> (Option<G>, u8) {
    match r {
        Ok(g) => (Some(g), 0),
        Err(TryLockError::OwnerDied(g)) => (Some(g), 1),
        Err(TryLockError::Poisoned(g)) => (Some(g), 2),
        Err(TryLockError::WouldBlock) => (None, 0),
    }
}

/// `g` as the result [`split`]'s `flag` says.
fn flagged<G>(g: G, flag: u8) -> TryLockResult<G> {
    match flag {
        0 => Ok(g),
        1 => Err(TryLockError::OwnerDied(g)),
        _ => Err(TryLockError::Poisoned(g)),
    }
}

/// How a lock call was held up, for the statistics: whether it waited at all (spinning
/// counts), and since when it slept (`sys::mono_ns`). The clock is read only by a call about to
/// sleep, as [`ShmMutex`]'s statistics do: a read costs as much as an uncontended write phase,
/// and most waits end while spinning.
#[derive(Debug, Default, Clone, Copy)]
struct HeldUp {
    waited: bool,
    slept_since: Option<u64>,
}

impl HeldUp {
    /// The call is about to sleep (the first time: the start of its timed wait).
    fn sleeps(&mut self) {
        self.slept_since.get_or_insert_with(sys::mono_ns);
    }

    /// Nanoseconds since the first sleep, if it slept.
    fn slept_ns(self) -> Option<u64> {
        self.slept_since.map(|t| sys::mono_ns().saturating_sub(t))
    }
}

/// A snapshot of a [`ShmRwLock`] (see [`ShmRwLock::diagnostics`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwDiagnostics {
    /// The writers' mutex (its owner is the writer; `waiters`, the writers queued for it).
    pub writers: Diagnostics,
    /// Read locks held, summed over participants.
    pub readers: u64,
    /// Readers queued behind a writer, summed over participants.
    pub queued_readers: u64,
    /// A writer holds the lock or waits for the readers inside to leave.
    pub write_pending: bool,
    /// The writer waiting for readers sleeps (it spun first).
    pub writer_asleep: bool,
    /// Write phases ended so far (modulo 2^29).
    pub phase: u32,
}

/// A read lock held; the value is reached through `Deref`. Dropping it releases the read lock.
///
/// `!Send`. Held only in the process that locked: a copy inherited across `fork()` holds
/// nothing (dropping it does nothing; reaching the value through it panics).
#[must_use = "if unused the ShmRwLock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct ShmRwLockReadGuard<'a, T: ShmSafe> {
    lock: &'a ShmRwLock<T>,
    generation: u32,
    me: u32,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing `&ShmRwLockReadGuard` only shares `&T`, and `T: ShmSafe` is `Sync`.
unsafe impl<T: ShmSafe> Sync for ShmRwLockReadGuard<'_, T> {}

impl<T: ShmSafe> ShmRwLockReadGuard<'_, T> {
    /// Whether this guard holds a read lock (false for a copy inherited across `fork()`).
    pub fn is_owner(&self) -> bool {
        self.generation == identity::fork_generation()
    }
}

impl<T: ShmSafe> Deref for ShmRwLockReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        if !self.is_owner() {
            super::guard::inherited_guard();
        }
        // SAFETY: this process holds a read lock (checked: not an inherited copy), so no writer
        // is inside until it is released: nobody writes the value while the borrow lives. In
        // bounds and aligned (the region's layout), initialised, and every bit pattern is a
        // valid `T` (`ShmSafe`).
        unsafe { &*self.lock.value_ptr() }
    }
}

impl<T: ShmSafe> Drop for ShmRwLockReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.is_owner() {
            self.lock.read_unlock(self.me);
        }
    }
}

impl<T: ShmSafe + fmt::Debug> fmt::Debug for ShmRwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// The write lock held; the value is reached through `Deref`/`DerefMut`. Dropping it ends the
/// write phase (the readers that queued meanwhile come in before the next writer) and unlocks
/// (poisoning the lock if the thread is panicking).
///
/// `!Send`; held only in the process that locked, as [`ShmMutexGuard`].
#[must_use = "if unused the ShmRwLock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct ShmRwLockWriteGuard<'a, T: ShmSafe> {
    lock: &'a ShmRwLock<T>,
    g: ManuallyDrop<ShmMutexGuard<'a, RwBody<T>>>,
}

// SAFETY: as for the read guard: `&ShmRwLockWriteGuard` only shares `&T`.
unsafe impl<T: ShmSafe> Sync for ShmRwLockWriteGuard<'_, T> {}

impl<T: ShmSafe> ShmRwLockWriteGuard<'_, T> {
    /// Declare the data consistent again after [`LockError::OwnerDied`] or
    /// [`LockError::Poisoned`]: later writers and readers get `Ok`. Only a writer can: readers
    /// may not change the data they would repair.
    ///
    /// ```
    /// let lock = gomutex::shm::ShmRwLock::anonymous(0u32)?;
    /// lock.write().unwrap().mark_consistent(); // nothing to repair here, and harmless
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn mark_consistent(&self) {
        self.g.mark_consistent();
    }

    /// Whether this guard holds the write lock (false for a copy inherited across `fork()`).
    pub fn is_owner(&self) -> bool {
        self.g.is_owner()
    }
}

impl<T: ShmSafe> Deref for ShmRwLockWriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        if !self.is_owner() {
            super::guard::inherited_guard();
        }
        // SAFETY: this process holds the write lock (checked): no reader and no other writer
        // is inside; in bounds, aligned, initialised, every bit pattern valid (`ShmSafe`).
        unsafe { &*self.lock.value_ptr() }
    }
}

impl<T: ShmSafe> DerefMut for ShmRwLockWriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        if !self.is_owner() {
            super::guard::inherited_guard();
        }
        // SAFETY: as above, and the guard is borrowed mutably: no other reference into the
        // value exists in this process. Only the value is borrowed, never the control words
        // beside it, which readers change atomically meanwhile.
        unsafe { &mut *self.lock.value_ptr() }
    }
}

impl<T: ShmSafe> Drop for ShmRwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        if self.is_owner() {
            // Poisoned before the phase ends: a reader let in by `end_phase` must be told that
            // the writer panicked (the mutex's unlock would set the flag only after).
            if !self.g.panicking && std::thread::panicking() {
                self.lock.m.region.hdr().poisoned.store(1, SeqCst);
            }
            self.lock.end_phase();
            crate::crash::point(crate::crash::RW_UNLOCKING);
        }
        // SAFETY: dropped once, here; the field is not used again.
        unsafe { ManuallyDrop::drop(&mut self.g) };
    }
}

impl<T: ShmSafe + fmt::Debug> fmt::Debug for ShmRwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ShmSafe + fmt::Debug> fmt::Debug for ShmRwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ShmRwLock");
        match self.try_read() {
            Ok(g) => d.field("data", &&*g),
            Err(TryLockError::OwnerDied(g)) | Err(TryLockError::Poisoned(g)) => {
                d.field("data", &&*g)
            }
            Err(TryLockError::WouldBlock) => d.field("data", &"<locked>"),
        };
        let diag = self.diagnostics();
        d.field("readers", &diag.readers)
            .field("write_pending", &diag.write_pending)
            .field("owner_died", &diag.writers.owner_died)
            .field("poisoned", &diag.writers.poisoned)
            .finish_non_exhaustive()
    }
}

// --- statistics ---

/// Counts of a [`ShmRwLock`] over the region's life, summed over every process that used it,
/// dead ones included (what [`ShmRwLock::stats`] returns): the writers' mutex's
/// [`LockStats`], and the waits that readers and writers caused each other.
///
/// Read locks themselves are not counted: a read lock is two atomic operations on this
/// process's own line (type docs), and a count would add a third on every one. The waits are
/// counted on the slow paths only, where the waiter reads the clock anyway.
///
/// ```
/// use gomutex::shm::ShmRwLock;
/// let lock = ShmRwLock::anonymous(0u32)?;
/// *lock.write().unwrap() += 1;
/// drop(lock.read().unwrap());
/// let s = lock.stats();
/// assert_eq!(s.writers.acquisitions, 1); // the write lock; reads are not counted
/// assert_eq!((s.read_waits, s.write_waits), (0, 0)); // nobody was in the way
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockStats {
    /// The writers' mutex (a [`ShmMutex`]'s statistics): `acquisitions` are the write locks
    /// taken, plus the timed or `try_` ones that took the mutex and then gave up waiting for
    /// readers; `contended`, `starvation_entries` are among writers; `owner_deaths`,
    /// `owner_died_reported` and `recoveries` as for a `ShmMutex` (a recovery takes back a dead
    /// reader's counts too).
    pub writers: LockStats,
    /// Read locks that found a writer holding or wanting the lock and waited for its phase to
    /// end (spinning, then queued behind it; timed ones that gave up included).
    pub read_waits: u64,
    /// Nanoseconds those waited asleep (queued), summed: a wait that ended while spinning is
    /// counted in `read_waits` and not timed (no clock read for it).
    pub read_wait_ns: u64,
    /// The longest of those sleeps (ns).
    pub worst_read_wait_ns: u64,
    /// Write locks that waited for readers: the readers queued behind the previous writer to
    /// come in, then the readers inside to leave (timed ones that gave up included).
    pub write_waits: u64,
    /// Nanoseconds those slept waiting for readers, summed (spinning is not timed, as for
    /// `read_wait_ns`; the wait for the writers' mutex is in `writers.total_wait_ns`).
    pub write_wait_ns: u64,
}

impl<T: ShmSafe> ShmRwLock<T> {
    /// The lock's statistics, summed over every process that used it (see [`RwLockStats`]).
    /// Reads only, as [`ShmMutex::stats`]: any process that maps the region may call it, and
    /// it never blocks.
    ///
    /// ```
    /// let lock = gomutex::shm::ShmRwLock::anonymous(0u32)?;
    /// let r = lock.read().unwrap();
    /// assert!(lock.try_write().is_err()); // a try_write does not wait: not a write wait
    /// drop(r);
    /// assert_eq!(lock.stats().write_waits, 0);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn stats(&self) -> RwLockStats {
        let mut s = RwLockStats {
            writers: self.m.stats(),
            ..RwLockStats::default()
        };
        for row in self.m.region.stats_rows() {
            add(&mut s.read_waits, &row.rw_read_waits);
            add(&mut s.read_wait_ns, &row.rw_read_wait_ns);
            s.worst_read_wait_ns = s
                .worst_read_wait_ns
                .max(row.rw_read_wait_max_ns.load(Relaxed));
            add(&mut s.write_waits, &row.rw_write_waits);
            add(&mut s.write_wait_ns, &row.rw_write_wait_ns);
        }
        s
    }

    /// A read lock call of participant `me` that was held up as `held` says is done waiting:
    /// count it. Readers of one process count on its row at once, hence `fetch_add` (the
    /// row's second line, written by the slow paths).
    #[inline]
    fn record_read_wait(&self, me: u32, held: HeldUp) {
        if held.waited {
            let row = self.m.region.stats_row(me);
            row.rw_read_waits.fetch_add(1, Relaxed);
            if let Some(ns) = held.slept_ns() {
                row.rw_read_wait_ns.fetch_add(ns, Relaxed);
                row.rw_read_wait_max_ns.fetch_max(ns, Relaxed);
            }
        }
    }

    /// The same for a writer (participant `me`, holding the writers' mutex) that waited for
    /// readers.
    #[inline]
    fn record_write_wait(&self, me: u32, held: HeldUp) {
        if held.waited {
            let row = self.m.region.stats_row(me);
            row.rw_write_waits.fetch_add(1, Relaxed);
            if let Some(ns) = held.slept_ns() {
                row.rw_write_wait_ns.fetch_add(ns, Relaxed);
            }
        }
    }
}

// --- the rest of ShmMutex's constructors ---

/// The constructors of [`ShmMutex`] that take options or raw memory, each that `ShmMutex`
/// constructor over the lock's region (which is a `ShmMutex` region: see the type's docs).
impl<T: ShmSafe> ShmRwLock<T> {
    /// [`create`](Self::create) with the object's permissions from [`OpenOptions::mode`], as
    /// [`ShmMutex::create_with`].
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, OpenOptions, ShmRwLock};
    /// use std::os::unix::fs::PermissionsExt;
    /// let name = format!("/gomutex-doc-rw-create-with-{}", std::process::id());
    /// let opts = OpenOptions::new().mode(0o640);
    /// let lock = ShmRwLock::create_with(&name, 0u64, Config::default(), opts)?;
    /// let mode = std::fs::metadata(format!("/dev/shm{name}"))?.permissions().mode();
    /// unlink(&name)?;
    /// assert_eq!(mode & 0o777, 0o640);
    /// # drop(lock);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_with(
        name: &str,
        value: T,
        cfg: Config,
        opts: OpenOptions,
    ) -> Result<Self, ShmError> {
        ShmMutex::create_with(name, Self::body(value), cfg, opts).map(Self::wrap)
    }

    /// [`open`](Self::open) with an explicit wait for the creator to finish initialising, as
    /// [`ShmMutex::open_timeout`].
    ///
    /// ```
    /// use gomutex::shm::ShmRwLock;
    /// use std::time::Duration;
    /// let r = ShmRwLock::<u64>::open_timeout("/gomutex-doc-rw-none", Duration::from_millis(10));
    /// assert!(r.is_err()); // NotFound: no object of that name
    /// ```
    pub fn open_timeout(name: &str, timeout: Duration) -> Result<Self, ShmError> {
        ShmMutex::open_timeout(name, timeout).map(Self::wrap)
    }

    /// [`open`](Self::open) with [`OpenOptions`] (the wait for initialisation, whether an
    /// object of another owner is accepted), as [`ShmMutex::open_with`].
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, OpenOptions, ShmRwLock};
    /// let name = format!("/gomutex-doc-rw-open-with-{}", std::process::id());
    /// let _created = ShmRwLock::create(&name, 4u32, Config::default())?;
    /// let opts = OpenOptions::new().allow_other_owner(true);
    /// let opened = ShmRwLock::<u32>::open_with(&name, opts)?;
    /// assert_eq!(*opened.read().unwrap(), 4);
    /// unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open_with(name: &str, opts: OpenOptions) -> Result<Self, ShmError> {
        ShmMutex::open_with(name, opts).map(Self::wrap)
    }

    /// [`open_or_create`](Self::open_or_create), opening as [`open_with`](Self::open_with) or
    /// creating with [`OpenOptions::mode`], as [`ShmMutex::open_or_create_with`].
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, OpenOptions, ShmRwLock};
    /// let name = format!("/gomutex-doc-rw-oocw-{}", std::process::id());
    /// let opts = OpenOptions::new().mode(0o600);
    /// let (_l, created) = ShmRwLock::open_or_create_with(&name, 0u8, Config::default(), opts)?;
    /// assert!(created);
    /// unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open_or_create_with(
        name: &str,
        value: T,
        cfg: Config,
        opts: OpenOptions,
    ) -> Result<(Self, bool), ShmError> {
        ShmMutex::open_or_create_with(name, Self::body(value), cfg, opts)
            .map(|(m, c)| (Self::wrap(m), c))
    }

    /// Remove a name: the same as the free function [`shm::unlink`](super::unlink).
    pub fn unlink(name: &str) -> Result<(), ShmError> {
        super::unlink(name)
    }

    /// Initialise a lock in memory the caller mapped, as [`ShmMutex::init_in_place`] (whose
    /// checks it makes).
    ///
    /// # Safety
    ///
    /// As for [`ShmMutex::init_in_place`]: `ptr..ptr + len` is writable `MAP_SHARED` memory
    /// that stays mapped for the life of the returned handle, and nobody else uses it until
    /// this returns.
    ///
    /// ```
    /// use gomutex::shm::{Config, Mapping, ShmRwLock};
    /// let cfg = Config::default();
    /// let map = Mapping::anonymous(ShmRwLock::<u64>::required_size(cfg)?)?;
    /// // SAFETY: `map` is MAP_SHARED, unused by anyone else, and outlives the lock.
    /// let lock = unsafe { ShmRwLock::init_in_place(map.as_ptr(), map.len(), 5u64, cfg)? };
    /// // SAFETY: the same memory, holding the lock just initialised.
    /// let again = unsafe { ShmRwLock::<u64>::attach(map.as_ptr(), map.len())? };
    /// assert_eq!(*again.read().unwrap(), 5);
    /// # drop((lock, again));
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub unsafe fn init_in_place(
        ptr: *mut u8,
        len: usize,
        value: T,
        cfg: Config,
    ) -> Result<Self, ShmError> {
        // SAFETY: the caller's contract, which is `ShmMutex::init_in_place`'s.
        unsafe { ShmMutex::init_in_place(ptr, len, Self::body(value), cfg) }.map(Self::wrap)
    }

    /// Attach to a lock initialised in memory the caller mapped, as [`ShmMutex::attach`]
    /// (validating the header, writing nothing if it is wrong).
    ///
    /// # Safety
    ///
    /// As for [`ShmMutex::attach`]: `ptr..ptr + len` is readable and writable `MAP_SHARED`
    /// memory that stays mapped for the life of the returned handle and, if it holds a valid
    /// header, is used only as this lock's region by everybody.
    pub unsafe fn attach(ptr: *mut u8, len: usize) -> Result<Self, ShmError> {
        // SAFETY: the caller's contract, which is `ShmMutex::attach`'s.
        unsafe { ShmMutex::attach(ptr, len) }.map(Self::wrap)
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
            lock.publish(me);
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

// Here rather than in mapping.rs, which is below the readers-writer lock.
impl MappingLayout {
    /// The offset of a [`ShmRwLock<T>`] with this configuration, placed after everything so
    /// far, for [`ShmRwLock::init_in`] / [`attach_in`](ShmRwLock::attach_in).
    ///
    /// ```
    /// use gomutex::shm::{Config, MappingLayout, ShmRwLock};
    /// let mut plan = MappingLayout::new();
    /// assert_eq!(plan.rwlock::<u64>(Config::default())?, 0);
    /// assert_eq!(plan.len(), ShmRwLock::<u64>::required_size(Config::default())?);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn rwlock<T: ShmSafe>(&mut self, cfg: Config) -> Result<usize, ShmError> {
        self.mutex::<RwBody<T>>(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The phase number wraps after its last value (no overflow panic in debug builds).
    #[test]
    fn phase_number_wraps() {
        let l = ShmRwLock::anonymous(0u32).unwrap();
        l.state().store(!(PHASE - 1), SeqCst);
        assert_eq!(l.diagnostics().phase, u32::MAX / PHASE);
        *l.write().unwrap() = 1;
        let d = l.diagnostics();
        assert_eq!((d.phase, d.write_pending), (0, false));
        assert_eq!(l.state().load(SeqCst), 0);
        assert_eq!(*l.read().unwrap(), 1);
    }
}
