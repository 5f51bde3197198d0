//! The one door from the rest of the crate into the lock's internals: what
//! [`crate::dict`] (built on [`ShmMutex`], [`Mapping`] and [`MappingLayout`] through their
//! public API), [`crate::upstream`] and the accept lock's `ShmAcceptMutex` need that the public API does not
//! offer. Nothing else outside `shm` imports from `shm`'s private modules.
//!
//! * the clock the lock reads (`CLOCK_MONOTONIC`, shared by every process of the machine),
//!   for the dictionary's expiry times and the rate limiter's buckets;
//! * this process's pid, cached (reset in a forked child), and its fork generation (which
//!   process this is to memory it may have inherited across `fork()`, with no system call:
//!   what a guard compares against);
//! * an error about a named object ([`ShmError::Object`]), as the lock's own calls that take a
//!   name report theirs;
//! * [`ShmMutex::init_in`]'s refusals, made before anything is written: a range claimed by a
//!   handle of this process, a lock region in use at an offset;
//! * whether a released lock owes a waiting writer its turn ([`writer_coming`]), for the dictionary's
//!   passes in slices, which re-take the lock at once.
//!
//! [`MappingLayout`]: super::MappingLayout

use super::attach::check_not_in_use;
use super::error::ShmError;
use super::identity;
use super::mapping::Mapping;
use super::mapping::{overlaps, IN_USE};
use super::sys;
use super::{ShmMutex, ShmRwLock};

/// Nanoseconds of `CLOCK_MONOTONIC`, the clock every process of the machine shares.
#[inline]
pub(crate) fn mono_ns() -> u64 {
    sys::mono_ns()
}

/// This process's pid, cached without a system call per call (reset in a forked child).
#[inline]
pub(crate) fn current_pid() -> u32 {
    identity::current_pid()
}

/// This process's fork generation: one more than its parent's, never 0 (see `identity.rs`).
#[inline]
pub(crate) fn fork_generation() -> u32 {
    identity::fork_generation()
}

/// A process's identity as the locks record it (its pid and start time, see `identity.rs`),
/// the pid in it, this process's own, the pidfs inode that tells a reused pid apart, and
/// whether the process so identified is dead: what [`crate::upstream`] judges a row's owner by,
/// so that a row is given back exactly when the locks would take back what it held.
pub(crate) use super::identity::{ident_dead, ident_pid, self_ident, self_pidfs_ino};

/// `e` about the object `name`: wrapped in [`ShmError::Object`] unless it already names one.
pub(crate) fn about(e: ShmError, name: &str) -> ShmError {
    e.about(name)
}

/// Refuse `off..off + len` of `map` if a handle of this process uses part of it (a lock, a
/// shared value, another dictionary), as [`ShmMutex::init_in`] and
/// [`Mapping::shared_slice`] would, but before anything is written.
pub(crate) fn check_range_free(map: &Mapping, off: usize, len: usize) -> Result<(), ShmError> {
    if overlaps(&map.claims(), off, off + len, None) {
        return Err(IN_USE);
    }
    Ok(())
}

/// Refuse `off` of `map` if a lock region in use starts there (its header says so), as
/// [`ShmMutex::init_in`] would, but before anything is written. `off` must be page-aligned
/// with at least a lock header's bytes ([`HEADER_SIZE`]) after it in the mapping.
///
/// [`HEADER_SIZE`]: super::HEADER_SIZE
pub(crate) fn check_no_region_at(map: &Mapping, off: usize) -> Result<(), ShmError> {
    assert!(off.is_multiple_of(4096) && map.len().saturating_sub(off) >= super::HEADER_SIZE);
    // SAFETY: `off` is page-aligned with a header's worth of mapped bytes after it (asserted):
    // `check_not_in_use` only loads, within the `map.len() - off` bytes it is given.
    let base = unsafe { map.as_ptr().add(off) };
    check_not_in_use(base, map.len() - off)
}

/// Whether `m`, free, has a contender on its way to it: a waiter the last unlock woke (or a
/// spinner: `WOKEN`), or waiters still queued. A holder that releases the lock and takes it
/// again at once (the dictionary's passes in slices) barges past such a waiter in Go's normal
/// mode, until the waiter has waited 1 ms and switches the lock to starvation mode; waiting
/// while this holds lets the waiter in first. A snapshot (`false` while the lock is held or
/// starving: a starving unlock hands the lock over itself), loaded `Relaxed`: a hint, which
/// orders nothing (the lock, taken next, does).
fn waiter_coming<T: super::ShmSafe>(m: &ShmMutex<T>) -> bool {
    use crate::algo::{self, LOCKED, STARVING, WOKEN};
    let s = super::region::low(
        m.region
            .hdr()
            .state
            .load(core::sync::atomic::Ordering::Relaxed),
    );
    s & (LOCKED | STARVING) == 0 && (s & WOKEN != 0 || algo::waiters(s) > 0)
}

/// [`waiter_coming`] for the writers' mutex of `l`: a writer on its way to the lock that a
/// write unlock just released (readers queued behind the phase need no such wait: the unlock
/// admits them itself, and the next writer waits for them).
pub(crate) fn writer_coming<T: super::ShmSafe>(l: &ShmRwLock<T>) -> bool {
    waiter_coming(l.writers())
}
