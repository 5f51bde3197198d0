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
//!   queue). Only the participants in the readers' map are scanned: a process sets its bit
//!   before its first count, a writer clears the bits of free slots. Spins a few rounds, then sleeps on the wake-up word, which departing readers
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

mod constructors;
mod diagnostics;
mod guard;
mod read;
mod stats;
mod write;

pub use diagnostics::RwDiagnostics;
pub use guard::{ShmRwLockReadGuard, ShmRwLockWriteGuard};
use stats::HeldUp;
pub use stats::RwLockStats;

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
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
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

/// The control words' index in [`RwBody::ctl`] of the readers' map: two words read as one
/// `u64`, bit `i` set while participant `i` (< 64) may read (writers scan only those counts).
/// On a read-mostly line: set once per process, cleared by a writer once the slot is free.
const MAP: usize = 0;
/// The control word, beside the map, for participants 64 and up: the highest such index that
/// ever read, plus one (writers scan those counts too).
const HWM: usize = 2;
/// The wake-up word a waiting writer sleeps on (bumped by departing readers).
const WAKE: usize = 16;

/// What the writers' mutex protects: the control words and the value. Readers reach the value
/// without the mutex, so it is reached through raw pointers only, never as `&mut RwBody`.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct RwBody<T> {
    /// Two lines of `u32`s, used as atomics ([`MAP`], [`HWM`], [`WAKE`]).
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
    /// `(fork generation << 32) | (participant index + 1)` once this handle's process is in
    /// the readers' map ([`MAP`], [`HWM`]): a forked child, or a process that took over the
    /// slot, publishes again.
    published: AtomicU64,
}

impl<T: ShmSafe> ShmRwLock<T> {
    fn wrap(m: ShmMutex<RwBody<T>>) -> Self {
        Self {
            m,
            published: AtomicU64::new(0),
        }
    }

    fn body(value: T) -> RwBody<T> {
        RwBody {
            ctl: [0; 32],
            value,
        }
    }

    /// The writers' mutex (for `seam::writer_coming`).
    pub(in crate::shm) fn writers(&self) -> &ShmMutex<RwBody<T>> {
        &self.m
    }

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

    /// The readers' map (bits 0–63 of participants that may read).
    fn map(&self) -> &AtomicU64 {
        let body = self.m.region.value_ptr().cast::<RwBody<T>>();
        // SAFETY: as `ctl`'s; the two words at `MAP` are 8-aligned (`RwBody` is 64-aligned,
        // `ctl` its first field) and only ever accessed as this one atomic `u64`.
        unsafe { AtomicU64::from_ptr(core::ptr::addr_of_mut!((*body).ctl[MAP]).cast::<u64>()) }
    }

    /// Whether `f(i)` holds for some participant `i` that may read: the map's bits, then the
    /// indices from 64 up to the high-water mark (counts outside them are 0).
    fn any_reader(&self, mut f: impl FnMut(u32) -> bool) -> bool {
        let mut m = self.map().load(SeqCst);
        while m != 0 {
            if f(m.trailing_zeros()) {
                return true;
            }
            m &= m - 1;
        }
        let hwm = self.ctl(HWM).load(SeqCst);
        (64..hwm.min(self.m.region.layout.participants)).any(f)
    }

    /// Whether `count(i)` is non-zero for some participant that may read.
    #[inline]
    fn counted<'a>(&'a self, count: impl Fn(u32) -> &'a AtomicU32) -> bool {
        self.any_reader(|i| count(i).load(SeqCst) != 0)
    }

    /// Put participant `me` in the readers' map before its first count (once per handle, slot
    /// and process): a writer that misses it loaded the map before this, so before our count,
    /// and we see its `PENDING` (module docs).
    #[inline]
    fn publish(&self, generation: u32, me: u32) {
        let key = (u64::from(generation) << 32) | u64::from(me + 1);
        if self.published.load(Acquire) != key {
            if me < 64 {
                self.map().fetch_or(1 << me, SeqCst);
            } else {
                self.ctl(HWM).fetch_max(me + 1, SeqCst);
            }
            self.published.store(key, Release);
        }
    }

    /// Take the participants whose slot is free (their process left, or was recovered) out of
    /// the map, so writers stop scanning them; a writer calls it holding the writers' mutex
    /// (the only scanner of the map). A slot claimed again meanwhile keeps its bit: its
    /// newcomer publishes after its claim, so either the second look sees the claim and puts
    /// the bit back, or the newcomer's publication comes after the clear. A map of one bit is
    /// left as it is: its scan costs what this look would.
    fn tidy(&self) {
        let mut m = self.map().load(SeqCst);
        if m & m.wrapping_sub(1) == 0 {
            return;
        }
        while m != 0 {
            let i = m.trailing_zeros();
            m &= m - 1;
            let ident = &self.m.region.participant(i).ident;
            if ident.load(SeqCst) == 0 {
                self.map().fetch_and(!(1 << i), SeqCst);
                if ident.load(SeqCst) != 0 {
                    self.map().fetch_or(1 << i, SeqCst);
                }
            }
        }
    }

    /// Wake a writer waiting for readers to leave or to come in.
    fn notify_writer(&self) {
        self.ctl(WAKE).fetch_add(1, SeqCst);
        if self.state().load(SeqCst) & WSLEEP != 0 {
            sys::futex_wake(self.ctl(WAKE), 1);
        }
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
