//! The cross-process accept lock for the `mutex` and `blocking` modes: a
//! [`gomutex::shm::ShmMutex`] over `()` (the accept lock protects no data) in an anonymous
//! shared mapping the master creates before forking. Each worker uses it through its own
//! [`ShmAcceptMutex`] handle; the master calls [`ForceUnlock::force_unlock`] after `waitpid`.

use gomutex::accept::{ForceUnlock, ShmAcceptMutex};
use gomutex::shm::{self, ShmMutex};
use std::io;

/// The lock (the master's and, inherited by fork, every worker's view of it).
pub struct SharedLock {
    m: ShmMutex<()>,
}

impl SharedLock {
    /// Create it (in the master, before forking `workers` workers).
    pub fn new(workers: usize) -> io::Result<Self> {
        // Every worker takes a participant slot (and sleeps in a waiter slot in the blocking
        // mode); a dead worker's are reclaimed by force_unlock.
        let n = (workers as u32 * 2 + 8).clamp(64, 65535);
        let cfg = shm::Config::new().participants(n).waiter_slots(n);
        let m = ShmMutex::anonymous_with((), cfg).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self { m })
    }

    /// A worker's handle.
    pub fn handle(&self) -> ShmAcceptMutex<'_> {
        ShmAcceptMutex::new(&self.m)
    }
}

impl ForceUnlock for SharedLock {
    fn force_unlock(&self, pid: i32) -> bool {
        ForceUnlock::force_unlock(&self.m, pid)
    }
}
