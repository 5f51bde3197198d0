//! [`RwLockStats`]: the writers' mutex's [`LockStats`](crate::shm::LockStats), and the waits
//! readers and writers caused each other, summed over the participants' rows.

use super::*;

/// How a lock call was held up, for the statistics: whether it waited at all (spinning
/// counts), and since when it slept (`sys::mono_ns`). The clock is read only by a call about to
/// sleep, as [`ShmMutex`]'s statistics do: a read costs as much as an uncontended write phase,
/// and most waits end while spinning.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct HeldUp {
    pub(super) waited: bool,
    slept_since: Option<u64>,
}

impl HeldUp {
    /// The call is about to sleep (the first time: the start of its timed wait).
    pub(super) fn sleeps(&mut self) {
        self.slept_since.get_or_insert_with(sys::mono_ns);
    }

    /// Nanoseconds since the first sleep, if it slept.
    pub(super) fn slept_ns(self) -> Option<u64> {
        self.slept_since.map(|t| sys::mono_ns().saturating_sub(t))
    }
}

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
    pub(super) fn record_read_wait(&self, me: u32, held: HeldUp) {
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
    pub(super) fn record_write_wait(&self, me: u32, held: HeldUp) {
        if held.waited {
            let row = self.m.region.stats_row(me);
            row.rw_write_waits.fetch_add(1, Relaxed);
            if let Some(ns) = held.slept_ns() {
                row.rw_write_wait_ns.fetch_add(ns, Relaxed);
            }
        }
    }
}
