//! The transcription of `ShmRwLock`'s protocol onto loom atomics (the table in
//! `shm_rwlock.rs` maps each piece to `src/shm/rwlock/`).

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU32;
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering::*};

/// `rw_state`: a writer holds the writers' mutex and wants the readers out.
pub(crate) const PENDING: u32 = 1;
/// `rw_state`: readers sleep on the word.
pub(crate) const RWAIT: u32 = 2;
/// `rw_state`: the writer sleeps on the wake-up word.
pub(crate) const WSLEEP: u32 = 4;
/// `rw_state`: the phase number's unit.
pub(crate) const PHASE: u32 = 8;
/// Participant slots (processes) in a model.
const SLOTS: usize = 3;

/// Deliberate deviations from the shipped protocol: the negative controls (all `false`: the
/// transcription as shipped).
#[derive(Clone, Copy, Default)]
pub(crate) struct Faults {
    /// (a) The reader checks `PENDING` first and counts itself after.
    pub(crate) check_before_count: bool,
    /// (b) Queued readers are not counted in `rw_waiting`: the next writer does not wait for
    /// the readers admitted by the previous phase's end.
    pub(crate) uncounted_queue: bool,
    /// Not a fault (loom accepts it): `wait_counts` does not re-check the counts after setting
    /// `WSLEEP`.
    pub(crate) no_recheck: bool,
    /// (c) `wait_counts` loads the wake-up sequence just before sleeping instead of before
    /// its first look at the counts.
    pub(crate) late_seq: bool,
    /// (d) `Relaxed` instead of `SeqCst` on the reader's count increment and state load.
    pub(crate) relaxed_reader: bool,
    /// (e) The reader publishes its slot in the readers' map only after it is in.
    pub(crate) publish_late: bool,
    /// (f) `wait_phase_end` sleeps on the state seen when queueing for the whole phase, not
    /// the state last seen (the busy wait fixed in `src/shm/rwlock/`).
    pub(crate) stale_expected: bool,
    /// (g) `downgrade` unlocks first and counts the reader after.
    pub(crate) downgrade_late: bool,
    /// (h) `tidy` clears a free slot's bit without looking at the slot again.
    pub(crate) tidy_no_recheck: bool,
}

/// Where a reader may be killed (`sys::crash_point`, plus `Admitted` and `Holding`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Crash {
    /// `RW_READ_COUNTED`: counted, state not loaded yet.
    ReadCounted,
    /// `RW_QUEUED`: counted in `rw_waiting`, `RWAIT` set, about to sleep.
    Queued,
    /// Admitted at the phase's end and counted in `rw_reads`, still counted in `rw_waiting`.
    Admitted,
    /// Holding the read lock.
    Holding,
}

/// A read attempt's outcome.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Read {
    Held,
    WouldBlock,
    /// The thread was killed at its crash point (it does nothing more).
    Died,
}

/// `sys::futex_wait` / `sys::futex_wake` on one word: the word is compared with the expected
/// value under the futex's lock (the kernel's hash-bucket lock), and a wake-up reaches only
/// threads already asleep (nothing is kept for a later sleeper). A waker changes the word
/// before it wakes, so a sleeper either sees the change or is asleep when the wake-up comes:
/// exactly the futex's lost-wake-up semantics, and a wake-up that is *skipped* (the waker saw
/// no sleeper flag) is lost for real.
struct Futex {
    lock: Mutex<()>,
    cv: Condvar,
}

impl Futex {
    fn new() -> Self {
        Self {
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Sleep while `word` holds `expected`; `false` if it did not (`EAGAIN`: returns at once).
    fn wait(&self, word: &AtomicU32, expected: u32) -> bool {
        let g = self.lock.lock().unwrap();
        if word.load(SeqCst) != expected {
            return false;
        }
        drop(self.cv.wait(g).unwrap());
        true
    }

    /// Wake one sleeper, or all.
    fn wake(&self, all: bool) {
        let _g = self.lock.lock().unwrap();
        if all {
            self.cv.notify_all();
        } else {
            self.cv.notify_one();
        }
    }
}

/// The writers' `ShmMutex`, as a sleeping mutex with a `try_lock` that never waits. Not a
/// loom `Mutex`: loom 0.7 blocks a thread whose next operation is `try_lock` on a mutex
/// another thread acquires, until that one releases it, which turns a writer holding the
/// mutex while it waits for readers into a false deadlock. The inner loom `Mutex` is only ever
/// held for a few operations (and released by `Condvar::wait`). A failing `try_lock` here
/// still acquires the inner mutex (a happens-before edge the shipped mutex's failing CAS does
/// not give); only `try_read`'s `end_orphan_phase` and `try_write` take it, and neither then
/// touches the value.
struct WritersMutex {
    locked: Mutex<bool>,
    cv: Condvar,
}

/// The writers' mutex held.
pub(crate) struct WGuard<'a>(&'a WritersMutex);

impl WritersMutex {
    fn new() -> Self {
        Self {
            locked: Mutex::new(false),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> WGuard<'_> {
        let mut g = self.locked.lock().unwrap();
        while *g {
            g = self.cv.wait(g).unwrap();
        }
        *g = true;
        WGuard(self)
    }

    fn try_lock(&self) -> Option<WGuard<'_>> {
        let mut g = self.locked.lock().unwrap();
        if *g {
            return None;
        }
        *g = true;
        Some(WGuard(self))
    }
}

impl Drop for WGuard<'_> {
    fn drop(&mut self) {
        *self.0.locked.lock().unwrap() = false;
        self.0.cv.notify_one();
    }
}

/// The lock's shared words (see the table at the top).
pub(crate) struct Rw {
    pub(crate) state: AtomicU32,
    pub(crate) map: AtomicU32,
    wake: AtomicU32,
    /// `ParticipantSlot::ident`: 1 while a process holds slot `i` (every slot, unless a model
    /// frees one with `leave` and claims it with `join`).
    ident: [AtomicU32; SLOTS],
    reads: [AtomicU32; SLOTS],
    waiting: [AtomicU32; SLOTS],
    published: [AtomicU32; SLOTS],
    writers: WritersMutex,
    state_futex: Futex,
    wake_futex: Futex,
    cell: UnsafeCell<u64>,
    f: Faults,
    /// The reader that is killed, and where.
    crash: Option<(usize, Crash)>,
    /// Counted across executions: `wait_phase_end` found that it is about to sleep on a value
    /// the state word will not hold again before the phase ends (a busy loop).
    stale_sleeps: std::sync::Arc<StdAtomicUsize>,
}

impl Rw {
    pub(crate) fn new(f: Faults) -> Arc<Self> {
        Self::build(f, None, Default::default())
    }

    pub(crate) fn build(
        f: Faults,
        crash: Option<(usize, Crash)>,
        stale_sleeps: std::sync::Arc<StdAtomicUsize>,
    ) -> Arc<Self> {
        let rw = Self {
            state: AtomicU32::new(0),
            map: AtomicU32::new(0),
            wake: AtomicU32::new(0),
            ident: Default::default(),
            reads: Default::default(),
            waiting: Default::default(),
            published: Default::default(),
            writers: WritersMutex::new(),
            state_futex: Futex::new(),
            wake_futex: Futex::new(),
            cell: UnsafeCell::new(0),
            f,
            crash,
            stale_sleeps,
        };
        // Loom: make the initial 0 of every `SeqCst` word a `SeqCst` store (module docs).
        for w in [&rw.state, &rw.map, &rw.wake]
            .into_iter()
            .chain(&rw.reads)
            .chain(&rw.waiting)
        {
            w.store(0, SeqCst);
        }
        for w in &rw.ident {
            w.store(1, SeqCst);
        }
        Arc::new(rw)
    }

    fn crashes(&self, me: usize, at: Crash) -> bool {
        self.crash == Some((me, at))
    }

    // --- the words ---

    /// `any_reader` (`SLOTS` < 64: the map alone, no high-water mark)
    fn any_reader(&self, mut f: impl FnMut(usize) -> bool) -> bool {
        let mut m = self.map.load(SeqCst);
        while m != 0 {
            if f(m.trailing_zeros() as usize) {
                return true;
            }
            m &= m - 1;
        }
        false
    }

    /// `counted`
    fn counted(&self, count: &[AtomicU32; SLOTS]) -> bool {
        self.any_reader(|i| count[i].load(SeqCst) != 0)
    }

    /// `publish` (a handle's key is its slot: a process that takes a slot over comes with a
    /// new handle, `join`)
    fn publish(&self, me: usize) {
        let me1 = me as u32 + 1;
        if self.published[me].load(Acquire) != me1 {
            self.map.fetch_or(1 << me, SeqCst);
            self.published[me].store(me1, Release);
        }
    }

    /// `tidy`
    fn tidy(&self) {
        let mut m = self.map.load(SeqCst);
        if m & m.wrapping_sub(1) == 0 {
            return;
        }
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if self.ident[i].load(SeqCst) == 0 {
                self.map.fetch_and(!(1 << i), SeqCst);
                if !self.f.tidy_no_recheck && self.ident[i].load(SeqCst) != 0 {
                    self.map.fetch_or(1 << i, SeqCst);
                }
            }
        }
    }

    /// The process in slot `me` gives it back (before the model's threads start): its slot
    /// is free, its handle gone, its bit still in the map.
    pub(crate) fn leave(&self, me: usize) {
        self.ident[me].store(0, SeqCst);
        self.published[me].store(0, Release);
    }

    /// A newcomer claims the free slot `me` (`claim_participant`'s compare-and-swap).
    pub(crate) fn join(&self, me: usize) {
        assert!(self.ident[me]
            .compare_exchange(0, 1, SeqCst, SeqCst)
            .is_ok());
    }

    /// `notify_writer`
    fn notify_writer(&self) {
        self.wake.fetch_add(1, SeqCst);
        if self.state.load(SeqCst) & WSLEEP != 0 {
            self.wake_futex.wake(false);
        }
    }

    // --- readers ---

    /// `read_as` (`once`: `try_read`).
    pub(crate) fn read_as(&self, me: usize, once: bool) -> Read {
        let fast = if self.f.relaxed_reader {
            Relaxed
        } else {
            SeqCst
        };
        if !self.f.publish_late {
            self.publish(me);
        }
        let (reads, waiting) = (&self.reads[me], &self.waiting[me]);
        loop {
            if self.f.check_before_count {
                if self.state.load(SeqCst) & PENDING == 0 {
                    reads.fetch_add(1, SeqCst);
                    return Read::Held;
                }
            } else {
                reads.fetch_add(1, fast);
                if self.crashes(me, Crash::ReadCounted) {
                    return Read::Died;
                }
                if self.state.load(fast) & PENDING == 0 {
                    if self.f.publish_late {
                        self.publish(me);
                    }
                    return self.read_guard(me);
                }
                reads.fetch_sub(1, SeqCst);
            }
            self.notify_writer();
            if once {
                self.end_orphan_phase();
                return Read::WouldBlock;
            }
            if !self.f.uncounted_queue {
                waiting.fetch_add(1, SeqCst);
            }
            let s = self.state.fetch_or(RWAIT, SeqCst) | RWAIT;
            if s & PENDING == 0 {
                if !self.f.uncounted_queue {
                    waiting.fetch_sub(1, SeqCst);
                }
                self.notify_writer();
                continue;
            }
            if self.crashes(me, Crash::Queued) {
                return Read::Died;
            }
            let admitted = self.wait_phase_end(s);
            if admitted {
                reads.fetch_add(1, SeqCst);
            }
            if self.crashes(me, Crash::Admitted) {
                return Read::Died;
            }
            if !self.f.uncounted_queue {
                waiting.fetch_sub(1, SeqCst);
            }
            self.notify_writer();
            return if admitted {
                self.read_guard(me)
            } else {
                Read::WouldBlock
            };
        }
    }

    /// `read_guard` (the flags it reads are not modelled) and the `Holding` crash point.
    fn read_guard(&self, me: usize) -> Read {
        if self.crashes(me, Crash::Holding) {
            Read::Died
        } else {
            Read::Held
        }
    }

    /// `wait_phase_end` without a deadline (always `true`) and without the `TICK`.
    fn wait_phase_end(&self, s: u32) -> bool {
        let ended = |cur: u32| cur & PENDING == 0 || cur / PHASE != s / PHASE;
        let mut expected = s;
        loop {
            let slept = self.state_futex.wait(&self.state, expected);
            let cur = self.state.load(SeqCst);
            if ended(cur) {
                return true;
            }
            if !self.f.stale_expected {
                expected = cur;
            }
            if !slept && expected != cur {
                // `EAGAIN`, the phase not over, and the next sleep compares with a value the
                // word no longer holds. Within a phase the word only gains flags (`RWAIT`,
                // `WSLEEP`) until `end_phase`, so it never holds it again: every later call
                // returns at once too, and this loop spins until the phase ends.
                self.stale_sleeps.fetch_add(1, Relaxed);
                // Not in the shipped loop: tells loom that this thread spins, so it runs the
                // others (the shipped one spins on its CPU while they run on theirs).
                thread::yield_now();
            }
        }
    }

    /// `read_unlock`
    pub(crate) fn read_unlock(&self, me: usize) {
        self.reads[me].fetch_sub(1, SeqCst);
        if self.state.load(SeqCst) & PENDING != 0 {
            self.notify_writer();
        }
    }

    // --- writers ---

    /// `write`
    pub(crate) fn write(&self) -> WGuard<'_> {
        let g = self.writers.lock();
        self.write_phase(g, false)
            .expect("an untimed write lock never gives up")
    }

    /// `try_write`
    pub(crate) fn try_write(&self) -> Option<WGuard<'_>> {
        let g = self.writers.try_lock()?;
        self.write_phase(g, true)
    }

    /// `write_phase`
    fn write_phase<'a>(&self, g: WGuard<'a>, once: bool) -> Option<WGuard<'a>> {
        if self.state.load(SeqCst) & PENDING != 0 {
            self.end_phase();
        }
        if self.counted(&self.waiting) && !self.wait_counts(&self.waiting, once) {
            return None;
        }
        self.state.fetch_or(PENDING, SeqCst);
        if self.counted(&self.reads) && !self.wait_counts(&self.reads, once) {
            self.end_phase();
            return None;
        }
        self.tidy();
        Some(g)
    }

    /// `wait_counts` without a deadline, without `reap_dead` (nobody dies during a write phase
    /// in these models but the dead reader, whose counts the supervisor zeroes).
    fn wait_counts(&self, count: &[AtomicU32; SLOTS], once: bool) -> bool {
        let busy = || self.counted(count);
        loop {
            let early = (!self.f.late_seq).then(|| self.wake.load(SeqCst));
            if !busy() {
                return true;
            }
            if once {
                return !busy();
            }
            self.state.fetch_or(WSLEEP, SeqCst);
            if !self.f.no_recheck && !busy() {
                return true;
            }
            let seq = early.unwrap_or_else(|| self.wake.load(SeqCst));
            self.wake_futex.wait(&self.wake, seq);
        }
    }

    /// `end_phase`
    fn end_phase(&self) {
        let old = self
            .state
            .fetch_update(SeqCst, SeqCst, |s| {
                Some((s / PHASE).wrapping_add(1) * PHASE)
            })
            .unwrap_or_else(|s| s);
        if old & RWAIT != 0 {
            self.state_futex.wake(true);
        }
    }

    /// `write_unlock`: `ShmRwLockWriteGuard::drop` (end the phase, then unlock the mutex).
    pub(crate) fn write_unlock(&self, g: WGuard<'_>) {
        self.end_phase();
        drop(g);
    }

    /// `ShmRwLockWriteGuard::downgrade`: the writer counts itself as a reader of slot `me`
    /// (published first) while it still holds the writers' mutex with `PENDING` set, then
    /// unlocks as `write_unlock`.
    pub(crate) fn downgrade(&self, g: WGuard<'_>, me: usize) {
        self.publish(me);
        if self.f.downgrade_late {
            self.write_unlock(g);
            self.reads[me].fetch_add(1, SeqCst);
            return;
        }
        self.reads[me].fetch_add(1, SeqCst);
        self.write_unlock(g);
    }

    /// `end_orphan_phase` (the `probe` finds nobody dead; the `LOCKED` pre-check left to
    /// `try_lock`, see the module docs).
    fn end_orphan_phase(&self) {
        if self.state.load(SeqCst) & PENDING == 0 {
            return;
        }
        if let Some(_g) = self.writers.try_lock() {
            if self.state.load(SeqCst) & PENDING != 0 {
                self.end_phase();
            }
        }
    }

    /// `force_unlock` for a dead reader in slot `d` (called after it stopped): recovery's
    /// `p.rw_reads.store(0)`, `p.rw_waiting.store(0)`, then `end_orphan_phase` and
    /// `notify_writer`.
    pub(crate) fn force_unlock_dead_reader(&self, d: usize) {
        self.reads[d].store(0, SeqCst);
        self.waiting[d].store(0, SeqCst);
        self.end_orphan_phase();
        self.notify_writer();
    }

    // --- the model's side ---

    pub(crate) fn read_cs(&self) -> u64 {
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        self.cell.with(|p| unsafe { *p })
    }

    pub(crate) fn write_cs(&self) {
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        self.cell.with_mut(|p| unsafe { *p += 1 });
    }

    /// Read lock (blocking), read, unlock: the value read.
    pub(crate) fn read(&self, me: usize) -> u64 {
        assert_eq!(self.read_as(me, false), Read::Held);
        let v = self.read_cs();
        self.read_unlock(me);
        v
    }

    /// Write lock (blocking), write, unlock.
    pub(crate) fn write_once(&self) {
        let g = self.write();
        self.write_cs();
        self.write_unlock(g);
    }

    /// Yield until `pred(state, reads, waiting)` holds.
    pub(crate) fn wait_until(&self, pred: impl Fn(u32, &[u32], &[u32]) -> bool) {
        let mut spins = 0u32;
        loop {
            let s = self.state.load(SeqCst);
            let r: Vec<u32> = self.reads.iter().map(|c| c.load(SeqCst)).collect();
            let w: Vec<u32> = self.waiting.iter().map(|c| c.load(SeqCst)).collect();
            if pred(s, &r, &w) {
                return;
            }
            spins += 1;
            assert!(spins < 200, "wait_until spins");
            thread::yield_now();
        }
    }

    /// No count, no flag, `phases` write phases ended, `writes` writes seen.
    pub(crate) fn assert_quiescent(&self, phases: u32, writes: u64) {
        let s = self.state.load(SeqCst);
        assert_eq!(s & (PENDING | WSLEEP), 0, "a write phase left open");
        assert_eq!(s / PHASE, phases, "write phases ended");
        for i in 0..SLOTS {
            assert_eq!(self.reads[i].load(SeqCst), 0, "a read count left");
            assert_eq!(self.waiting[i].load(SeqCst), 0, "a queued reader left");
        }
        assert_eq!(self.read_cs(), writes);
        assert!(
            self.writers.try_lock().is_some(),
            "writers' mutex left locked"
        );
    }
}

/// A reader thread in slot `me`: the value it read.
pub(crate) fn spawn_reader(rw: &Arc<Rw>, me: usize) -> thread::JoinHandle<u64> {
    let rw = rw.clone();
    thread::spawn(move || rw.read(me))
}

pub(crate) fn spawn_writer(rw: &Arc<Rw>) -> thread::JoinHandle<()> {
    let rw = rw.clone();
    thread::spawn(move || rw.write_once())
}

pub(crate) fn join_values(ts: impl IntoIterator<Item = thread::JoinHandle<u64>>) -> Vec<u64> {
    ts.into_iter().map(|t| t.join().unwrap()).collect()
}
