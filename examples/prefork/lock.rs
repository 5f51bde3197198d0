//! The cross-process accept lock for the `mutex` and `blocking` modes: a
//! [`gomutex::shm::ShmMutex`] over `()` (the accept lock protects no data) in an anonymous
//! shared mapping the master creates before forking.

use gomutex::accept::{AcceptMutex, Acquired, ForceUnlock};
use gomutex::shm::{self, ShmMutex, ShmMutexGuard, TryLockError};
use std::cell::RefCell;
use std::io;
use std::time::Duration;

/// The lock (the master's and, inherited by fork, every worker's view of it).
pub struct SharedLock {
    m: ShmMutex<()>,
}

impl SharedLock {
    /// Create it (in the master, before forking `workers` workers).
    pub fn new(workers: usize) -> io::Result<Self> {
        // Every worker takes a participant slot; a dead one's is reclaimed by force_unlock.
        let n = (workers as u32 * 2 + 8).clamp(64, 65535);
        let cfg = shm::Config {
            participants: n,
            waiter_slots: n,
        };
        let m = ShmMutex::anonymous_with((), cfg).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self { m })
    }

    /// A worker's handle: holds the guard between `try_lock`/`lock_for` and `unlock`.
    pub fn handle(&self) -> LockHandle<'_> {
        LockHandle {
            m: &self.m,
            guard: RefCell::new(None),
        }
    }
}

impl ForceUnlock for SharedLock {
    fn force_unlock(&self, pid: i32) -> bool {
        self.m.force_unlock(pid as u32)
    }
}

/// One worker's side of the lock.
pub struct LockHandle<'a> {
    m: &'a ShmMutex<()>,
    guard: RefCell<Option<ShmMutexGuard<'a, ()>>>,
}

impl<'a> LockHandle<'a> {
    /// Keep the guard of a successful acquisition; tell how it went.
    fn keep(
        &self,
        r: Result<ShmMutexGuard<'a, ()>, TryLockError<ShmMutexGuard<'a, ()>>>,
    ) -> Option<Acquired> {
        let (g, how) = match r {
            Ok(g) => (g, Acquired::Clean),
            Err(TryLockError::WouldBlock) => return None,
            Err(TryLockError::OwnerDied(g)) => {
                // Nothing to repair: the accept lock protects no data.
                g.mark_consistent();
                (g, Acquired::OwnerDied)
            }
            Err(TryLockError::Poisoned(g)) => {
                g.mark_consistent();
                (g, Acquired::Clean)
            }
        };
        let old = self.guard.borrow_mut().replace(g);
        assert!(old.is_none(), "accept lock acquired twice");
        Some(how)
    }
}

impl AcceptMutex for LockHandle<'_> {
    fn try_lock(&self) -> Option<Acquired> {
        self.keep(self.m.try_lock())
    }
    fn lock_for(&self, timeout: Duration) -> Option<Acquired> {
        self.keep(self.m.try_lock_for(timeout))
    }
    unsafe fn unlock(&self) {
        // Dropping the guard releases the lock.
        drop(self.guard.borrow_mut().take());
    }
}
