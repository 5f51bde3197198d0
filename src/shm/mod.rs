//! Go's mutex in memory shared between processes, robust against process death.
//!
//! [`ShmMutex<T>`] is the same algorithm as [`crate::Mutex`] (the same code, shared, not
//! copied): barging with bounded spinning in normal mode, re-queued waiters served
//! first, a switch to FIFO hand-off once a waiter has waited more than 1 ms. Its state word,
//! its waiter queue (one 32-bit futex word per sleeping thread, in fixed slots addressed by
//! index) and the protected value `T` all live in one `MAP_SHARED` region, and waiters sleep
//! with `futex(2)` *without* `FUTEX_PRIVATE_FLAG`, so the kernel matches them by the backing
//! page: every process may map the region at a different address.
//!
//! ```
//! use gomutex::shm::ShmMutex;
//!
//! // An anonymous shared mapping, inherited by children made with fork().
//! let m = ShmMutex::anonymous(0u64)?;
//! *m.lock().unwrap() += 1;
//! assert_eq!(*m.lock().unwrap(), 1);
//! # Ok::<(), gomutex::shm::ShmError>(())
//! ```
//!
//! # The pieces
//!
//! * [`ShmMutex`]: the mutex, over a value of a [`ShmSafe`] type (plain data; [`ShmBool`] for
//!   a flag), with [`ShmMutex::stats`] ([`LockStats`]) and [`ShmMutex::diagnostics`];
//! * [`ShmCondvar`]: std's `Condvar` across processes ([`ShmMutex::condvar`], more of them with
//!   [`ShmMutex::condvar_in`]);
//! * [`ShmRwLock`]: a readers-writer lock (Go's `RWMutex`), robust to a reader's death too;
//! * [`Mapping`] and [`MappingLayout`]: several locks and lock-free [`ShmShared`] data (atomics)
//!   in one mapping, anonymous or named; [`commit_store`] for updates a kill cannot tear;
//! * [`ShmDict`]: a dictionary in one shared region (`lua_shared_dict`'s API: values, TTLs,
//!   LRU eviction, lists), every key old or new after any kill ([`DictConfig`] for its
//!   shards and zone);
//! * [`RateLimiter`]: nginx's `limit_req` (a leaky bucket per key) on a [`ShmDict`];
//! * the accept lock for prefork servers: [`crate::accept::ShmAcceptMutex`] puts a
//!   [`crate::accept::AcceptLock`] over a `ShmMutex`;
//! * with the `derive` feature, `#[derive(ShmSafe)]` and `#[derive(ShmShared)]`, checked at
//!   compile time instead of an `unsafe impl`.
//!
//! The in-process locks' mutex profile (feature `profile`, `gomutex::profile`) does not
//! sample these locks: [`ShmMutex::stats`] is their view from outside.
//!
//! The manual, [`crate::guide::shm`], walks through each with examples, what survives which
//! death, and how it is tested; [`crate::guide::rwlock`] and [`crate::guide::accept`] do the
//! same for `ShmRwLock` and the accept lock.
//!
//! # Where the region comes from
//!
//! * [`ShmMutex::anonymous`]: `mmap(MAP_SHARED | MAP_ANONYMOUS)`; create it before `fork()`
//!   and the children share it. (Not `memmap2`'s `map_anon`, which is `MAP_PRIVATE`: each
//!   child would get a copy.)
//! * [`ShmMutex::create`], [`ShmMutex::open`], [`ShmMutex::open_or_create`],
//!   [`unlink`]: a named POSIX shared-memory object (`shm_open`, visible under
//!   `/dev/shm`) for unrelated processes. The creator uses `O_CREAT | O_EXCL`, initialises the
//!   region and publishes it by writing the magic number last; openers wait (bounded) until
//!   it is there.
//! * [`ShmMutex::init_in`] / [`ShmMutex::attach_in`]: at an offset of a [`Mapping`] (anonymous,
//!   or of a file, memfd or `shm_open` descriptor), several locks per mapping at offsets
//!   [`MappingLayout`] computes; safe, and the handle keeps the mapping alive. Lock-free data
//!   next to the locks (counters, flags: atomics, [`ShmShared`]) is lent out by
//!   [`Mapping::shared`] / [`Mapping::shared_slice`], also checked.
//!   [`Mapping::create`] / [`Mapping::open`] / [`Mapping::open_or_create`] name such a mapping
//!   for unrelated processes, published (like `create`'s region) once its creator has
//!   initialised what it holds.
//! * [`ShmMutex::init_in_place`] / [`ShmMutex::attach`] (`unsafe`): memory you mapped
//!   yourself.
//!
//! Every attach validates the header (magic, layout version, sizes, slot counts, size,
//! alignment and type of `T`: a `u32` region does not open as `f32`) and returns a
//! [`ShmError`] without writing a byte if anything is off.
//! Errors of the calls that take a name name the object ([`ShmError::Object`]).
//!
//! The value type implements [`ShmSafe`] (plain data valid for every bit pattern); with the
//! `derive` feature `#[derive(ShmSafe)]` / `#[derive(ShmShared)]` check that at compile time
//! instead of an `unsafe impl`.
//!
//! # Statistics
//!
//! [`ShmMutex::stats`] sums what every process counted ([`LockStats`]: acquisitions, contended
//! ones and their wait, starvation-mode entries, owner deaths, recoveries, condvar waits and
//! notifies), readable by any process that maps the region; each process counts in its own
//! participant slot's row, so counting moves no cache line between processes.
//!
//! # Condition variable
//!
//! [`ShmMutex::condvar`] gives the region's [`ShmCondvar`]: std's `Condvar` API across
//! processes (`wait`, `wait_while`, `wait_timeout`, `wait_timeout_while`, `notify_one`,
//! `notify_all`), reporting [`LockError::OwnerDied`] / [`LockError::Poisoned`] from its waits as
//! [`ShmMutex::lock`] does; [`ShmCondvar::wait_while_or_repair`] repairs after a death and waits
//! on while the condition holds. [`ShmMutex::condvar_in`] places more of them in a [`Mapping`]
//! (one per condition). A notifier killed mid-notify delays sleepers by at most 10 ms, and the
//! recovery of a dead process notifies all (it may have died before its notify).
//!
//! # Readers-writer lock
//!
//! [`ShmRwLock`] is a readers-writer lock over the same kind of region (Go's writer
//! preference and batch order; writers serialise on a `ShmMutex`), robust against the death
//! of a reader as well as a writer: each process's read locks are counted in its own
//! participant slot, so recovery takes a dead reader's reads back exactly, and readers are
//! told [`LockError::OwnerDied`] after a writer's death until a writer marks the data
//! consistent.
//!
//! # Crash-consistent updates
//!
//! An owner may die anywhere in its critical section. Build the new state where readers do
//! not look yet and publish it with [`commit_store`] (one release store, after every write
//! before it): then a death leaves the old state or the new one, nothing to repair.
//!
//! # Robustness
//!
//! Every process that uses the lock owns a *participant* slot holding its identity: the pid
//! plus the process start time (field 22 of `/proc/<pid>/stat`), which tells a reused pid
//! apart. The owner's participant index is kept in the same 64-bit word as Go's state, so
//! taking the lock and recording the owner are one atomic operation.
//!
//! * **Owner death**: waiters sleep at most 10 ms at a time; a waking waiter (or a failing
//!   `try_lock`) checks, at most every few ms machine-wide, whether the owner is still alive
//!   (`kill(pid, 0)` and `/proc/<pid>/stat`: gone, a zombie with no thread left, or a different
//!   start time means dead) and if not releases the lock on its behalf. Detection takes
//!   ~10–20 ms.
//! * **Supervisor**: a parent that reaped a child with `waitpid` calls
//!   [`ShmMutex::force_unlock`]`(pid)` (nginx's `ngx_shmtx_force_unlock`) to release at once
//!   what that pid held and clean up everything else it left.
//! * **Telling the next owner**: the lock returns [`LockError::OwnerDied`] (carrying the
//!   guard) to every owner until one calls [`ShmMutexGuard::mark_consistent`]; the flag lives
//!   in the region, so it is never swallowed.
//! * **Dead waiters** leave the waiter count and the queue (no phantom waiters, no leaked
//!   slots); this happens in periodic scans (every ~40 ms while anybody waits) or at once with
//!   [`force_unlock`](ShmMutex::force_unlock) / [`recover`](ShmMutex::recover).
//! * **Panics** while holding the lock poison it, as in-process ([`LockError::Poisoned`]).
//!
//! Every other change of the lock's state (registering a waiter, `WOKEN`, `STARVING`, the
//! hand-off, the queue) is made under a small internal journal lock whose word names its
//! holder, and is written to a redo log in the region first. Per-process accounting (waiters
//! registered, `WOKEN` owned, wake-ups owed, hand-offs received) says exactly what a dead
//! process left behind, so survivors can finish or undo it. Death windows and how each is
//! handled:
//!
//! | a process dies … | handled by |
//! |---|---|
//! | holding the lock | the owner is in the state word: release on its behalf, set owner-died |
//! | between its acquiring CAS and recording itself | impossible: one atomic operation |
//! | while queued / registered as a waiter | its registrations leave the count, its slots are freed |
//! | after its unlock CAS (`WOKEN` set, a waiter removed) before the wake-up | the owed wake-up is recorded with the CAS; recovery performs it |
//! | after a starving unlock before the hand-off | likewise (`owes_handoff`) |
//! | after a normal unlock's subtraction, before its slow path | a waking waiter sees "free, waiters, nobody awake" and does the wake-up itself |
//! | owning `WOKEN` (spinner or woken waiter) | recorded; recovery clears `WOKEN` and wakes a waiter |
//! | as a hand-off receiver before its fix-up | recorded; recovery passes the hand-off to the next waiter (or ends starvation mode) |
//! | holding the journal lock | its word names it: the next taker replays or discards its redo log |
//! | after taking back a token its sleeper did not pick up, before delivering it | one transaction whose commit point is the slot CAS: replayed if the slot is parked with the same ticket |
//! | borrowing the spare participant slot to recover others (every regular slot held by the dead) | the next newcomer adopts the spare slot: it takes the journal lock over and undoes what the borrower left, then recovers the rest |
//!
//! # Limits
//!
//! * All participants must share one pid namespace (pids are compared), one time namespace
//!   (`/proc/<pid>/stat` start times are shifted by the reader's boot-time offset) and see the
//!   same `/proc`. Without a readable `/proc/<pid>/stat` (e.g. `hidepid`) a process that exists
//!   is presumed alive.
//! * A stopped (SIGSTOP) or hung owner is alive: it is never taken over.
//! * Calls with a deadline return by it (plus a 2 ms grace to hand back what they hold) even
//!   while a stopped process holds the internal journal lock: what they cannot hand back (a
//!   queue slot, a registration, `WOKEN`) is settled by the next journal-lock holder. `lock()`,
//!   unlocks and a hand-off's fix-up wait for the stopped process to continue.
//! * A wake-up or hand-off that its sleeper does not pick up passes on to the next waiter: after
//!   20 ms if the process is stopped, after 100 ms whatever the reason (an exec'd process, a
//!   thread that does not run). A stopped sleeper that continues queues again in its place.
//! * Death is per process: a thread ending without unwinding (`pthread_exit`) while holding
//!   the lock is not detected. A process whose main thread ended while others run shows as a
//!   zombie in `/proc`; it counts as alive until its last thread ends.
//! * `execve` keeps the pid and start time: a process must not exec while one of its threads
//!   holds the lock (it would stay held until the new program exits). A queued thread's
//!   wake-ups pass on to others, but its registration counts until then.
//! * Fork while holding the lock: the child does **not** own it (the owner recorded is the
//!   parent's participant); dropping the inherited guard in the child does nothing, and
//!   reaching the value through it panics. What a process keeps in its own memory (a guard, a
//!   handle's cached participant slot) is tagged with its *fork generation*, one more than its
//!   parent's (counted by a `pthread_atfork` handler, no system call on the lock path), not
//!   with its pid: a descendant that reuses a dead ancestor's pid is not taken for it (its
//!   inherited guard holds nothing, its inherited handle registers anew). Use `fork(3)`
//!   (libc's `fork`, which runs `pthread_atfork` handlers); a raw `clone`/`SYS_fork` child
//!   must not touch the lock.
//! * Waiter slots are fixed ([`Config::waiter_slots`]); when all are taken further waiters wait
//!   on a shared sequence word instead (correct, not FIFO among themselves). Participants are
//!   fixed too ([`Config::participants`], default 64). A process registers on first use: with
//!   every slot held by a live process, `lock()` waits for one and `try_lock*` return
//!   `WouldBlock` at their deadline, while [`ShmMutex::join`] (register now) fails with
//!   [`ShmError::NoParticipantSlot`] at once, as do opening and attaching when the table is
//!   full at that moment. No lock call panics for want of a slot.
//! * After a death the protected data may be half-updated: that is what
//!   [`LockError::OwnerDied`] is for.
//! * A named object owned by another uid is refused ([`ShmError::NotOwner`]) unless
//!   [`OpenOptions::allow_other_owner`]: whoever can write it controls the lock. A peer that
//!   truncates the object kills every process that maps it with `SIGBUS` (inherent; seal a
//!   memfd with `F_SEAL_SHRINK` for memory you share yourself). A peer that corrupts the
//!   region may hold the lock for good, but cannot make the library panic, hang a call with a
//!   deadline, or stall recovery: counts are clamped, an owner, `WOKEN` holder or queued
//!   waiter that names no participant is treated like a dead one, and an unlock of a lock
//!   word this process does not hold (cleared, or naming another owner) leaves it alone
//!   instead of aborting.
//! * Sleeping waiters wake every 10 ms to probe (cheap, but not free).

mod attach;
mod commit;
mod condvar;
mod config;
mod constructors;
mod cv_words;
mod diagnostics;
mod dict;
mod error;
mod guard;
mod journal;
mod layout;
mod limit_req;
mod mapping;
mod object;
mod participants;
mod queue;
mod recovery;
mod region;
mod registration;
mod rwlock;
mod stats;
mod sys;
mod timing;
mod types;
mod word;

pub use commit::{commit_store, CommitWord};
pub use condvar::ShmCondvar;
pub use config::Config;
pub use diagnostics::{Diagnostics, RecoveryCounts};
#[doc(hidden)]
pub use dict::crash as __dict_crash;
pub use dict::{
    CheckReport, DictConfig, DictError, DictStats, Incr, Item, OwnedValue, ShmDict, Value, MAX_KEY,
};
pub use error::{LockError, LockResult, ShmError, TryLockError, TryLockResult};
pub use guard::ShmMutexGuard;
pub use layout::{HEADER_SIZE, LAYOUT_VERSION, MAGIC, MAP_MAGIC, REGION_ALIGN};
pub use limit_req::{Decision, RateLimiter, Throttle};
pub use mapping::{Mapping, MappingLayout};
pub use object::{unlink, OpenOptions};
pub use rwlock::{RwDiagnostics, RwLockStats, ShmRwLock, ShmRwLockReadGuard, ShmRwLockWriteGuard};
pub use stats::LockStats;
pub use types::{ShmBool, ShmSafe, ShmShared};

// The derive macros share the traits' names (as serde's do): `use gomutex::shm::ShmSafe`
// imports both.
#[cfg(feature = "derive")]
#[cfg_attr(docsrs, doc(cfg(feature = "derive")))]
pub use gomutex_derive::{ShmSafe, ShmShared};

use self::attach::unmap;
use self::journal::Hooks as _;
use self::region::{low, Participant, Region};
/// Which process this is to memory it may have inherited across `fork()` (no system call):
/// what guards and handles compare against.
pub(crate) use self::sys::fork_generation;
use crate::algo::{self, StateWord};
use crate::clock::Monotonic;
use core::fmt;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

enum Backing {
    /// We mapped it (anonymous or named): unmap on drop.
    Mapped,
    /// The caller's memory.
    Borrowed,
    /// Part of a [`Mapping`] (`init_in`/`attach_in`): the claim keeps it mapped and the
    /// range claimed in this process until the handle is dropped (after `Drop::drop`).
    Within(#[allow(dead_code)] mapping::Claim),
}

/// Go's mutex and a value `T`, in memory shared between processes. See the [module
/// docs](self).
///
/// The handle itself is per process (it is where this process caches its participant slot);
/// the lock and the value are in the region. A handle inherited across `fork()` works in the
/// child, which registers as a new participant on first use (the cache is valid only in the
/// process that made it, also in a descendant that got that process's pid).
pub struct ShmMutex<T: ShmSafe> {
    region: Region,
    backing: Backing,
    map_len: usize,
    /// `(fork generation << 32) | (participant index + 1)` of the process that registered
    /// ([`sys::fork_generation`]: a pid alone would let a descendant that reuses a dead
    /// ancestor's pid act as that ancestor); 0 = none.
    registration: AtomicU64,
    _t: PhantomData<T>,
}

// SAFETY: the value is only reached through the lock (one owner at a time); everything else
// is atomics in the region. `T: ShmSafe` is `Send`.
unsafe impl<T: ShmSafe> Send for ShmMutex<T> {}
// SAFETY: as above.
unsafe impl<T: ShmSafe> Sync for ShmMutex<T> {}

impl<T: ShmSafe> ShmMutex<T> {
    /// The guard of an acquisition by this process's participant `ctx` (in fork generation
    /// `generation`) that installed `word`, or the error it comes in: the previous owner died,
    /// or the lock is poisoned.
    #[inline]
    fn guard(
        &self,
        generation: u32,
        ctx: Participant<'_>,
        word: u64,
    ) -> LockResult<ShmMutexGuard<'_, T>> {
        let h = self.region.hdr();
        let died = h.owner_died.load(Acquire) != 0;
        // Counted by the holder, in its own row (`stats`): a plain add on a line no other
        // process writes. Before the guard is made, so that it is built in place (a store
        // in between has it built on the stack and copied). The row's address is worked out
        // here, where it is used (docs/benchmarks.md, "The lock statistics' cost").
        let row = ctx.stats();
        stats::bump(&row.acquisitions);
        if died {
            stats::bump(&row.owner_died_reported);
        }
        let g = ShmMutexGuard {
            m: self,
            generation,
            me: ctx.me,
            word,
            panicking: std::thread::panicking(),
            _not_send: PhantomData,
        };
        if died {
            Err(LockError::OwnerDied(g))
        } else if h.poisoned.load(Acquire) != 0 {
            Err(LockError::Poisoned(g))
        } else {
            Ok(g)
        }
    }

    /// Acquire the lock, blocking until it is available. `Err` (still carrying the guard, so
    /// the lock is held) if a previous owner died or panicked while holding it.
    ///
    /// ```
    /// let m = gomutex::shm::ShmMutex::anonymous([0u8; 4])?;
    /// m.lock().unwrap()[0] = 7;
    /// assert_eq!(m.lock().unwrap()[0], 7);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    #[inline]
    pub fn lock(&self) -> LockResult<ShmMutexGuard<'_, T>> {
        let generation = sys::fork_generation();
        let ctx = self.participant_of(generation);
        let w = ctx.acquire_fast();
        if w == 0 {
            sys::crash_point(sys::crash::CONTENDED);
            // No deadline: the slow path returns only holding the lock. The statistics take
            // its wait from the starvation rule's clock reads: no read of their own.
            if let Some(waited) = algo::lock_slow_waited::<_, _, Monotonic>(&ctx, &ctx, None) {
                ctx.stats().record_contended(waited);
            }
        }
        self.guard(generation, ctx, w)
    }

    /// [`lock`](Self::lock), handling the owner-died path: if a previous owner died (or
    /// panicked) while holding the lock, run `repair` on the value, then
    /// [`mark_consistent`](ShmMutexGuard::mark_consistent); either way return the guard.
    ///
    /// If `repair` panics the flags stay set (and the lock is poisoned as well), so the next
    /// owner repairs again.
    ///
    /// ```
    /// use gomutex::shm::ShmMutex;
    ///
    /// #[derive(Clone, Copy)]
    /// #[repr(C)]
    /// struct Account { balance: i64, checksum: i64 }
    /// // SAFETY: repr(C), fixed-width integers only, every bit pattern valid.
    /// unsafe impl gomutex::shm::ShmSafe for Account {}
    ///
    /// let m = ShmMutex::anonymous(Account { balance: 10, checksum: 10 })?;
    /// // An owner that stops half-way through an update (a panic here; a killed process
    /// // leaves the lock the same way, with `LockError::OwnerDied`).
    /// std::thread::scope(|s| {
    ///     let t = s.spawn(|| {
    ///         let mut g = m.lock().unwrap();
    ///         g.balance += 5;
    ///         panic!("interrupted before the checksum");
    ///     });
    ///     assert!(t.join().is_err());
    /// });
    /// let g = m.lock_or_repair(|a| a.balance = a.checksum); // roll back
    /// assert_eq!(g.balance, 10);
    /// drop(g);
    /// assert!(m.lock().is_ok()); // consistent again
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn lock_or_repair(&self, repair: impl FnOnce(&mut T)) -> ShmMutexGuard<'_, T> {
        repaired(self.lock(), repair)
    }

    /// Acquire the lock if it is free right now (never spins, never queues). A failing call
    /// also checks, at most every few ms, whether the owner died (so polling users, like an
    /// accept lock, recover too).
    ///
    /// ```
    /// use gomutex::shm::{ShmMutex, TryLockError};
    /// let m = ShmMutex::anonymous(0u32)?;
    /// let g = m.lock().unwrap();
    /// assert!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)));
    /// drop(g);
    /// assert!(m.try_lock().is_ok());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    #[inline]
    pub fn try_lock(&self) -> TryLockResult<ShmMutexGuard<'_, T>> {
        let Some(ctx) = self.participant_by(Some(Instant::now())) else {
            return Err(TryLockError::WouldBlock);
        };
        // `algo::try_lock` exactly (fails only once LOCKED or STARVING is seen), minus a load.
        let w = ctx.acquire_fast();
        if w != 0 {
            return Ok(self.guard(sys::fork_generation(), ctx, w)?);
        }
        // The probe never waits for the journal lock here.
        ctx.until(Some(Instant::now())).probe();
        Err(TryLockError::WouldBlock)
    }

    /// Acquire the lock, waiting at most `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let m = gomutex::shm::ShmMutex::anonymous(0u32)?;
    /// let g = m.lock().unwrap();
    /// assert!(m.try_lock_for(Duration::from_millis(5)).is_err());
    /// drop(g);
    /// assert!(m.try_lock_for(Duration::from_millis(5)).is_ok());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn try_lock_for(&self, timeout: Duration) -> TryLockResult<ShmMutexGuard<'_, T>> {
        self.try_lock_until_opt(crate::clock::deadline_after(timeout))
    }

    /// Acquire the lock, waiting at most until `deadline`.
    pub fn try_lock_until(&self, deadline: Instant) -> TryLockResult<ShmMutexGuard<'_, T>> {
        self.try_lock_until_opt(Some(deadline))
    }

    fn try_lock_until_opt(&self, deadline: Option<Instant>) -> TryLockResult<ShmMutexGuard<'_, T>> {
        let Some(ctx) = self.participant_by(deadline) else {
            return Err(TryLockError::WouldBlock);
        };
        let ctx = ctx.until(deadline);
        let w = ctx.acquire_fast();
        if w != 0 {
            return Ok(self.guard(sys::fork_generation(), ctx, w)?);
        }
        match algo::lock_slow_waited::<_, _, Monotonic>(&ctx, &ctx, deadline) {
            Some(waited) => {
                ctx.stats().record_contended(waited);
                Ok(self.guard(sys::fork_generation(), ctx, w)?)
            }
            None => Err(TryLockError::WouldBlock),
        }
    }

    /// Release whatever the process `pid` left, if it is gone: the lock if it owned it (the
    /// next owner gets [`LockError::OwnerDied`]), its queued waiters, the wake-ups and
    /// hand-offs it owed or was handed. Returns whether it owned the lock.
    ///
    /// For a supervisor right after it reaped `pid` with `waitpid` (nginx's
    /// `ngx_shmtx_force_unlock`): no pid-reuse window. A process that is still alive (same pid
    /// and start time, not a zombie) is left alone, so calling it for a live pid is harmless.
    /// Not async-signal-safe: call it from normal code, not from a `SIGCHLD` handler.
    ///
    /// `pid` may be any integer type: the `u32` of [`Child::id`](std::process::Child::id), or
    /// the `i32` (`pid_t`) that `fork`/`waitpid` return. A value that is no pid (negative, or
    /// beyond `u32`) names no process: `false`.
    ///
    /// ```
    /// let m = gomutex::shm::ShmMutex::anonymous(0u32)?;
    /// let child = std::process::Command::new("true").spawn()?;
    /// let pid = child.id(); // u32
    /// let waited = child.wait_with_output()?;
    /// assert!(waited.status.success());
    /// assert!(!m.force_unlock(pid)); // it never held the lock
    /// assert!(!m.force_unlock(pid as libc::pid_t)); // i32 works as well
    /// assert!(!m.force_unlock(-1)); // no pid
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn force_unlock(&self, pid: impl TryInto<u32>) -> bool {
        match pid.try_into() {
            Ok(pid) => self.participant().scan(Some(pid)).1,
            Err(_) => false,
        }
    }

    /// Look for dead participants now and repair what they left (normally done by waiting
    /// processes every few tens of ms). Returns how many were found.
    pub fn recover(&self) -> usize {
        let ctx = self.participant();
        let n = ctx.scan(None).0;
        ctx.probe();
        n
    }

    /// Release the lock a guard of this handle left held with [`ShmMutexGuard::leak`]:
    /// exactly what dropping that guard would have done (the lock poisoned if this thread is
    /// panicking, the owner-died and poison flags otherwise left as they are, the next waiter
    /// woken or handed the lock). Returns whether it released the lock; `false`, doing nothing,
    /// if this handle in this process does not hold it (e.g. in a child forked while the
    /// parent held it, where dropping the inherited guard does nothing either). Per handle:
    /// every handle of a region (`open`, `attach_in`…) is its own participant, so a guard
    /// leaked through one is not released through another (`false`). A handle dropped while
    /// its leaked guard is held keeps the lock held until its process exits (then it is
    /// recovered as any dead owner's).
    ///
    /// With [`leak`](ShmMutexGuard::leak) it is a raw lock/unlock pair for code that cannot
    /// keep the guard (whose lifetime borrows the mutex) between the acquisition and the
    /// release, e.g. an object that locks in one method and unlocks in another. May be called
    /// from any thread of the process that holds the lock.
    ///
    /// A leaked guard no longer says whether its thread was already panicking when it locked
    /// (a guard made during unwinding does not poison when dropped): this call poisons
    /// whenever the calling thread is panicking.
    ///
    /// # Safety
    ///
    /// This process holds the lock through a guard that was leaked and not unlocked since:
    /// no live [`ShmMutexGuard`] of this process for this lock exists (unlocking under it
    /// would let another process write the value while that guard reads it). That the lock
    /// is held by this process *at all* is checked; which of its guards holds it cannot be.
    ///
    /// ```
    /// use gomutex::shm::{ShmMutex, ShmMutexGuard, TryLockError};
    ///
    /// let m = ShmMutex::anonymous(0u32)?;
    /// *m.lock().unwrap() = 7;
    /// ShmMutexGuard::leak(m.lock().unwrap()); // locked, no guard
    /// assert!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)));
    /// // SAFETY: this thread leaked the guard above and holds no other.
    /// assert!(unsafe { m.unlock_leaked() });
    /// assert_eq!(*m.try_lock().unwrap(), 7);
    /// // Not held (any more): nothing happens.
    /// // SAFETY: no guard of `m` is alive.
    /// assert!(!unsafe { m.unlock_leaked() });
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub unsafe fn unlock_leaked(&self) -> bool {
        if !self.held_here() {
            return false;
        }
        // A leaked guard's `word` is gone: guess "held by us, nothing else set"
        // (`release_locked`), and do not know whether the thread was panicking at lock time.
        self.release_held(self.participant(), 0, false);
        true
    }

    /// Whether this process holds the lock: it is a participant and the owner recorded in the
    /// state word. (Which of its threads, or whether through a live guard, is not known.)
    pub(crate) fn held_here(&self) -> bool {
        let w = self.region.hdr().state.load(Acquire);
        self.registered(sys::fork_generation())
            .is_some_and(|me| low(w) & algo::LOCKED != 0 && region::owner_tag(w) == me + 1)
    }

    /// The release of a lock this process holds: what dropping its guard does (also for
    /// [`unlock_leaked`](Self::unlock_leaked)). `word`: the state word the acquisition
    /// installed (0: unknown); `panicking`: whether the thread was panicking when it locked.
    #[inline]
    fn release_held(&self, ctx: Participant<'_>, word: u64, panicking: bool) {
        if !panicking && std::thread::panicking() {
            self.region.hdr().poisoned.store(1, Release);
        }
        // `algo::unlock`, with the release's CAS guessing the word we installed.
        let new = if word != 0 {
            ctx.release_from(word)
        } else {
            ctx.release_locked()
        };
        algo::unlock_released(&ctx, &ctx, new);
    }

    /// Whether the lock is held right now (a snapshot; in starvation mode between a hand-off
    /// and its receiver running this reports `true`).
    pub fn is_locked(&self) -> bool {
        let state = low(self.region.hdr().state.load(Relaxed));
        state & (algo::LOCKED | algo::STARVING) != 0
    }

    /// Whether a holder panicked (and nobody called `mark_consistent`/`clear_poison` since).
    pub fn is_poisoned(&self) -> bool {
        self.region.hdr().poisoned.load(Acquire) != 0
    }

    /// Clear the poison flag.
    pub fn clear_poison(&self) {
        self.region.hdr().poisoned.store(0, Release);
    }

    /// Whether the owner-died flag is set (see [`LockError::OwnerDied`]).
    pub fn owner_died(&self) -> bool {
        self.region.hdr().owner_died.load(Acquire) != 0
    }

    /// Address and length of the region (for diagnostics, or to hand the memory to
    /// [`attach`](Self::attach) elsewhere).
    pub fn as_ptr_len(&self) -> (*mut u8, usize) {
        (self.region.base(), self.map_len)
    }
}

/// The guard of a lock result; after an error, `repair` run on the value and the value marked
/// consistent (`lock_or_repair`, `ShmCondvar::wait_while_or_repair`).
fn repaired<'a, T: ShmSafe>(
    r: LockResult<ShmMutexGuard<'a, T>>,
    repair: impl FnOnce(&mut T),
) -> ShmMutexGuard<'a, T> {
    match r {
        Ok(g) => g,
        Err(e) => {
            let mut g = e.into_inner();
            repair(&mut g);
            g.mark_consistent();
            g
        }
    }
}

/// Testing only: make this process SIGKILL itself the next time it reaches `point` inside the
/// lock's slow paths (1 = journal committed, 2 = state word changed, 3 = journal applied,
/// 4 = a normal-mode wake-up owed, 5 = a hand-off owed, 6 = a waiter picked up its token,
/// 12 = `lock`'s fast path failed; 0 disarms). Lets tests kill a process in windows too narrow for random kills to hit.
/// Costs one relaxed load on slow paths. Exists only with the test-only `__crash-points`
/// feature (this crate's tests enable it); without it the crash points compile to nothing.
#[cfg(feature = "__crash-points")]
#[doc(hidden)]
pub fn __crash_at(point: u32) {
    sys::arm_crash(point);
}

/// Testing only: like [`__crash_at`], but the process stops itself (SIGSTOP) at `point`, once,
/// and goes on when continued. Exists only with the test-only `__crash-points` feature.
#[cfg(feature = "__crash-points")]
#[doc(hidden)]
pub fn __stop_at(point: u32) {
    sys::arm_crash(point | sys::STOP);
}

impl<T: ShmSafe> Drop for ShmMutex<T> {
    fn drop(&mut self) {
        let generation = sys::fork_generation();
        if let Some(me) = self.registered(generation) {
            // The slot is the process's: given back by the last of its handles here.
            if participants::lock(generation).leave(self.region.base() as usize, me) {
                Participant::new(&self.region, me).release_self();
            }
        }
        if let Backing::Mapped = self.backing {
            unmap(self.region.base(), self.map_len);
        }
    }
}

impl<T: ShmSafe + fmt::Debug> fmt::Debug for ShmMutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ShmMutex");
        match self.try_lock() {
            Ok(g) => {
                d.field("data", &*g);
            }
            Err(TryLockError::OwnerDied(g)) | Err(TryLockError::Poisoned(g)) => {
                d.field("data", &*g);
            }
            Err(TryLockError::WouldBlock) => {
                d.field("data", &"<locked>");
            }
        }
        let diag = self.diagnostics();
        d.field("owner_pid", diag.owner_debug())
            .field("waiters", &diag.waiters)
            .field("poisoned", &diag.poisoned)
            .field("owner_died", &diag.owner_died);
        d.finish_non_exhaustive()
    }
}
