//! Recovery and monitoring: [`ShmRwLock::force_unlock`], [`ShmRwLock::recover`], snapshots
//! ([`RwDiagnostics`]) and the writers' flags.

use super::*;

impl<T: ShmSafe> ShmRwLock<T> {
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
        let mut scanned = 0;
        self.any_reader(|_| {
            scanned += 1;
            false
        });
        RwDiagnostics {
            writers: self.m.diagnostics(),
            readers,
            queued_readers,
            write_pending: s & PENDING != 0,
            writer_asleep: s & WSLEEP != 0,
            phase: s / PHASE,
            scanned,
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

    /// Address and length of the region, as [`ShmMutex::as_ptr_len`] (what a structure placed
    /// after the lock in a [`Mapping`] starts past).
    ///
    /// ```
    /// use gomutex::shm::{Config, ShmRwLock};
    /// let lock = ShmRwLock::anonymous(0u64)?;
    /// assert!(lock.as_ptr_len().1 >= ShmRwLock::<u64>::required_size(Config::default())?);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn as_ptr_len(&self) -> (*mut u8, usize) {
        self.m.as_ptr_len()
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
    /// Participant slots a writer reads the counts of: the processes that read the lock and
    /// still hold their slot (a dead one's until its slot is recovered: by the next process
    /// to register, a writer waiting for its reads, or [`ShmRwLock::recover`]).
    pub scanned: u32,
}
