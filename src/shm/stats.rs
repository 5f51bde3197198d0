//! Lock statistics for operators: what [`ShmMutex::stats`] sums over the region's participant
//! rows ([`StatsRow`]), and the counting itself.
//!
//! Each process counts in the row of its own participant slot, so counting moves no cache line
//! between processes: the acquisition count is a plain load and store by the lock's holder (the
//! lock orders all holders' writes), on a line no other process writes; what the slow paths
//! count they add with `fetch_add`, on a second line. No clock is read for them: a contended
//! acquisition's sleep is timed by the reads Go's starvation rule makes anyway
//! (`algo::lock_slow_waited`), one that only spun is counted, not timed. A reader sums the
//! rows. Rows are never
//! cleared while the region lives (a process that takes a dead one's slot over counts on top),
//! so every figure but `worst_wait_ns`'s maximum is a sum of counters that only grow.

use super::layout::StatsRow;
use super::region::{Participant, Region};
use super::types::ShmSafe;
use super::ShmMutex;
use crate::algo::Waited;
use core::sync::atomic::{AtomicU64, Ordering::*};

/// Counts of a [`ShmMutex`] (and of the [`ShmCondvar`](super::ShmCondvar)s bound to it) over
/// the region's life, summed over every process that used it, dead ones included: what
/// [`ShmMutex::stats`] returns. Any process that maps the region can read them, without
/// locking and without registering.
///
/// A snapshot of counters that only grow (the sums are not taken at one instant: a figure read
/// while the lock is busy may be a few counts behind another).
///
/// ```
/// use gomutex::shm::ShmMutex;
///
/// let m = ShmMutex::anonymous(0u32)?;
/// for _ in 0..3 {
///     *m.lock().unwrap() += 1;
/// }
/// let s = m.stats();
/// assert_eq!(s.acquisitions, 3);
/// assert_eq!((s.contended, s.slept), (0, 0)); // nobody else wanted it
/// assert_eq!((s.owner_deaths, s.starvation_entries), (0, 0));
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStats {
    /// Acquisitions: every `lock`, successful `try_lock*`, and condvar wait's re-acquisition.
    pub acquisitions: u64,
    /// Acquisitions that did not get the lock at once and went through Go's slow path
    /// (spinning, queueing), including those that then got it without sleeping.
    pub contended: u64,
    /// Contended acquisitions that slept (queued on the lock and were woken at least once).
    pub slept: u64,
    /// Nanoseconds the `slept` acquisitions slept, summed: each from just before its first
    /// sleep to its last wake-up. Spinning is not timed (it lasts a few µs at most): the
    /// figures come from the two clock reads Go's starvation rule makes anyway, so counting
    /// reads no clock. `total_wait_ns / slept` is the mean sleep.
    pub total_wait_ns: u64,
    /// The longest of those sleeps (ns).
    pub worst_wait_ns: u64,
    /// Switches into starvation mode: a waiter that had waited over 1 ms found the lock held
    /// and set `STARVING` (Go's fairness rule; unlocks then hand the lock over in FIFO order).
    pub starvation_entries: u64,
    /// Owners found dead holding the lock (and the lock taken back from them).
    pub owner_deaths: u64,
    /// Acquisitions that reported a dead previous owner ([`LockError::OwnerDied`](
    /// super::LockError::OwnerDied)): at least one per owner death, more while nobody calls
    /// `mark_consistent`.
    pub owner_died_reported: u64,
    /// Dead participants whose leftovers (the lock, queued waiters, owed wake-ups) recovery
    /// undid and whose slot it freed.
    pub recoveries: u64,
    /// Condition variable waits begun.
    pub cv_waits: u64,
    /// Condition variable waits that timed out.
    pub cv_timeouts: u64,
    /// Condition variable notifies (`notify_one` and `notify_all` calls of processes that
    /// used the mutex).
    pub cv_notifies: u64,
}

impl<T: ShmSafe> ShmMutex<T> {
    /// The lock's statistics, summed over every process that used it (see [`LockStats`]).
    /// Reads only: callable from any process that maps the region, also one that never
    /// locks it (a monitor), and never blocks.
    ///
    /// ```
    /// let m = gomutex::shm::ShmMutex::anonymous(0u32)?;
    /// drop(m.lock().unwrap());
    /// assert!(m.try_lock().is_ok());
    /// assert_eq!(m.stats().acquisitions, 2);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn stats(&self) -> LockStats {
        let r = &self.region;
        let mut s = LockStats {
            owner_deaths: r.hdr().owner_deaths.load(Relaxed),
            ..LockStats::default()
        };
        for row in r.stats_rows() {
            add(&mut s.acquisitions, &row.acquisitions);
            add(&mut s.contended, &row.contended);
            add(&mut s.slept, &row.slept);
            add(&mut s.total_wait_ns, &row.wait_ns);
            s.worst_wait_ns = s.worst_wait_ns.max(row.wait_max_ns.load(Relaxed));
            add(&mut s.starvation_entries, &row.starvation_entries);
            add(&mut s.owner_died_reported, &row.owner_died_reported);
            add(&mut s.recoveries, &row.recoveries);
            add(&mut s.cv_waits, &row.cv_waits);
            add(&mut s.cv_timeouts, &row.cv_timeouts);
            add(&mut s.cv_notifies, &row.cv_notifies);
        }
        s
    }
}

/// Add counter `c` to the sum `a`, saturating: every row may have been written by a faulty
/// peer.
pub(super) fn add(a: &mut u64, c: &AtomicU64) {
    *a = a.saturating_add(c.load(Relaxed));
}

impl Region {
    /// Every participant's statistics row, in slot order.
    pub(super) fn stats_rows(&self) -> impl Iterator<Item = &StatsRow> {
        (0..self.layout.participants).map(|i| self.stats_row(i))
    }
}

/// One more, by the only writer of `c` at this time (the lock's holder): a plain load and
/// store, no read-modify-write.
#[inline(always)]
pub(crate) fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
}

impl StatsRow {
    /// A contended acquisition, by the lock's holder, holding it: one plain add unless it
    /// slept. No clock read here: a sleep's length comes from the slow path.
    #[inline]
    pub(crate) fn record_contended(&self, waited: Waited) {
        bump(&self.contended);
        if let Waited::Slept { ns } = waited {
            self.record_sleep(ns);
        }
    }

    /// A contended acquisition that slept `ns` from its first sleep to its last wake-up.
    #[cold]
    fn record_sleep(&self, ns: u64) {
        bump(&self.slept);
        self.wait_ns
            .store(self.wait_ns.load(Relaxed).wrapping_add(ns), Relaxed);
        if ns > self.wait_max_ns.load(Relaxed) {
            self.wait_max_ns.store(ns, Relaxed);
        }
    }
}

impl Participant<'_> {
    /// This participant's statistics row.
    #[inline(always)]
    pub(crate) fn stats(&self) -> &StatsRow {
        self.r.stats_row(self.me)
    }
}
