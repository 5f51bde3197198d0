//! [`ShmAcceptMutex`]: the accept lock over the cross-process [`ShmMutex`] (Linux, as
//! `gomutex::shm` is). The module is compiled on Linux only: one gate, in `accept.rs`.

use super::{AcceptMutex, Acquired, ForceUnlock};
use crate::shm::{ShmMutex, ShmMutexGuard, ShmSafe, TryLockError, TryLockResult};
use core::fmt;
use std::cell::Cell;
use std::time::Duration;

/// [`AcceptMutex`] over a cross-process [`ShmMutex`] (usually `ShmMutex<()>`: the accept lock
/// protects no data): one handle per worker process. Between the acquisition and
/// [`AcceptMutex::unlock`] the lock is held without a guard ([`ShmMutexGuard::leak`], then
/// [`ShmMutex::unlock_leaked`]); dropping the handle while it holds the lock releases it.
///
/// The lock is held by the process that took it: a copy inherited across `fork()` holds
/// nothing in the child (nor in a later descendant with the holder's pid). A peer that
/// corrupts the lock word cannot make the handle panic: an acquisition after the hold was lost
/// replaces it, and [`AcceptMutex::unlock`] releases only what this process holds.
///
/// A dead previous owner (released by the supervisor's [`ForceUnlock::force_unlock`] or by the
/// lock's own owner-death detection) is reported as [`Acquired::OwnerDied`]; the handle then
/// marks the lock consistent (there is no data to repair), so the next owner is told nothing
/// new. A poisoned lock is treated the same way and reported as [`Acquired::Clean`].
///
/// ```
/// use gomutex::accept::{AcceptLock, Config, ShmAcceptMutex};
/// use gomutex::shm::ShmMutex;
///
/// // The master, before forking: the lock in an anonymous shared mapping.
/// let lock = ShmMutex::anonymous(())?;
/// // Each worker (after fork; here two in one process for the demo):
/// let mut a = AcceptLock::new(ShmAcceptMutex::new(&lock), Config::blocking());
/// let mut b = AcceptLock::new(ShmAcceptMutex::new(&lock), Config::nginx());
/// assert!(a.begin_iteration(false).armed);
/// assert!(!b.begin_iteration(false).armed);
/// a.end_accept_phase();
/// assert!(b.begin_iteration(false).armed);
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
pub struct ShmAcceptMutex<'a, T: ShmSafe = ()> {
    m: &'a ShmMutex<T>,
    /// The fork generation (`shm/seam.rs`'s `fork_generation`) of the process that holds the lock
    /// through this handle (a leaked guard); 0: none. A copy inherited across `fork()` holds
    /// nothing in the child or any later descendant (whose generations differ, whatever their
    /// pids), as an inherited guard does not.
    held: Cell<u32>,
}

impl<'a, T: ShmSafe> ShmAcceptMutex<'a, T> {
    /// A worker's handle on `m`.
    ///
    /// ```
    /// use gomutex::accept::{AcceptMutex, ShmAcceptMutex};
    /// let shared = gomutex::shm::ShmMutex::anonymous(())?; // create before fork()
    /// let worker = ShmAcceptMutex::new(&shared);
    /// assert!(worker.try_lock().is_some());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn new(m: &'a ShmMutex<T>) -> Self {
        Self {
            m,
            held: Cell::new(0),
        }
    }

    /// The shared mutex (its [`stats`](ShmMutex::stats) are the accept lock's, summed over
    /// every worker).
    ///
    /// ```
    /// use gomutex::accept::{AcceptMutex, ShmAcceptMutex};
    /// let shared = gomutex::shm::ShmMutex::anonymous(())?;
    /// let worker = ShmAcceptMutex::new(&shared);
    /// assert!(worker.try_lock().is_some());
    /// // SAFETY: acquired just above.
    /// unsafe { worker.unlock() };
    /// assert!(worker.lock_for(std::time::Duration::from_millis(1)).is_some());
    /// // SAFETY: as above.
    /// unsafe { worker.unlock() };
    /// assert_eq!(worker.shm().stats().acquisitions, 2);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn shm(&self) -> &'a ShmMutex<T> {
        self.m
    }

    fn keep(&self, r: TryLockResult<ShmMutexGuard<'a, T>>) -> Option<Acquired> {
        let (g, how) = match r {
            Ok(g) => (g, Acquired::Clean),
            Err(TryLockError::WouldBlock) => return None,
            Err(TryLockError::OwnerDied(g)) => {
                g.mark_consistent();
                (g, Acquired::OwnerDied)
            }
            Err(TryLockError::Poisoned(g)) => {
                g.mark_consistent();
                (g, Acquired::Clean)
            }
        };
        // As the guard's own check (no syscall). If this handle already held the lock, only a
        // peer that cleared the lock word can have let this acquisition succeed: the earlier
        // hold is gone (there is nothing to release twice) and this one replaces it. A
        // corrupted region must not panic the process.
        self.held.set(crate::shm::seam::fork_generation());
        ShmMutexGuard::leak(g);
        Some(how)
    }
}

impl<T: ShmSafe> fmt::Debug for ShmAcceptMutex<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmAcceptMutex")
            .field(
                "held",
                &(self.held.get() == crate::shm::seam::fork_generation()),
            )
            .finish_non_exhaustive()
    }
}

impl<T: ShmSafe> AcceptMutex for ShmAcceptMutex<'_, T> {
    fn try_lock(&self) -> Option<Acquired> {
        self.keep(self.m.try_lock())
    }
    fn lock_for(&self, timeout: Duration) -> Option<Acquired> {
        self.keep(self.m.try_lock_for(timeout))
    }
    unsafe fn unlock(&self) {
        if self.held.replace(0) == crate::shm::seam::fork_generation() {
            // SAFETY: `held`: this handle leaked the guard of its acquisition in this process
            // (not in a parent it was copied from by `fork()`) and has not released it since;
            // the only guard it made, and nobody else holds one (the caller holds the lock
            // through this handle: `AcceptMutex::unlock`'s contract).
            unsafe { self.m.unlock_leaked() };
        }
    }
}

impl<T: ShmSafe> Drop for ShmAcceptMutex<'_, T> {
    fn drop(&mut self) {
        // SAFETY: as in `unlock`: releases only what this handle holds.
        unsafe { AcceptMutex::unlock(self) };
    }
}

impl<T: ShmSafe> ForceUnlock for ShmMutex<T> {
    fn force_unlock(&self, pid: i32) -> bool {
        pid > 0 && ShmMutex::force_unlock(self, pid as u32)
    }
}

#[cfg(test)]
mod tests;
