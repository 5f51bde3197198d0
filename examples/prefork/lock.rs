//! The cross-process accept lock for the `mutex` and `blocking` modes: a
//! [`gomutex::shm::ShmMutex`] over `()` (the accept lock protects no data) at the start of the
//! shared [`Mapping`] the master creates before forking, the stats (`shared.rs`) after it. Each
//! worker uses it through its own [`ShmAcceptMutex`] handle; the master calls
//! [`ForceUnlock::force_unlock`] after `waitpid`.

use gomutex::accept::{ForceUnlock, ShmAcceptMutex};
use gomutex::shm::{self, Mapping, MappingLayout, ShmError, ShmMutex};

/// The lock (the master's and, inherited by fork, every worker's view of it).
pub struct SharedLock {
    m: ShmMutex<()>,
}

impl SharedLock {
    /// The lock's sizes for `workers` workers: every worker takes a participant slot (and
    /// sleeps in a waiter slot in the blocking mode); a dead worker's are reclaimed by
    /// force_unlock.
    fn config(workers: usize) -> shm::Config {
        let n = (workers as u32 * 2 + 8).clamp(64, 65535);
        shm::Config::new().participants(n).waiter_slots(n)
    }

    /// Place the lock for `workers` workers in `plan`: its offset.
    pub fn place(plan: &mut MappingLayout, workers: usize) -> Result<usize, ShmError> {
        plan.mutex::<()>(Self::config(workers))
    }

    /// Create it at the offset `place` gave (in the master, before forking the workers).
    pub fn new(map: &Mapping, at: usize, workers: usize) -> Result<Self, ShmError> {
        let m = ShmMutex::init_in(map, at, (), Self::config(workers))?;
        Ok(Self { m })
    }

    /// A worker's handle.
    pub fn handle(&self) -> ShmAcceptMutex<'_> {
        ShmAcceptMutex::new(&self.m)
    }

    /// The lock's statistics, summed over every process that used it (the `/status` page).
    pub fn stats(&self) -> shm::LockStats {
        self.m.stats()
    }
}

impl ForceUnlock for SharedLock {
    fn force_unlock(&self, pid: i32) -> bool {
        ForceUnlock::force_unlock(&self.m, pid)
    }
}
