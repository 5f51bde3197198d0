//! `gomutex::shm::ShmRwLock` (`src/shm/rwlock/`) **transcribed** onto loom atomics.
//!
//! The shipped lock runs on futexes in shared memory, which loom cannot run, so this file
//! re-states its protocol operation for operation, same words, same orderings, same order.
//! Keep it in step with `src/shm/rwlock/`: each piece below mirrors, line by line in order,
//!
//! | here | `src/shm/rwlock/` |
//! |---|---|
//! | `PENDING`, `RWAIT`, `WSLEEP`, `PHASE` | the constants of the same names |
//! | [`Rw`]`::state` / `hwm` / `wake` | `ShmRwLock::state()` (header `rw_state`), `ctl(HWM)`, `ctl(WAKE)` |
//! | `Rw::reads[i]` / `waiting[i]` | `ShmRwLock::reads(i)` / `waiting(i)` (`ParticipantSlot::rw_reads` / `rw_waiting`) |
//! | `Rw::published[i]` | `ShmRwLock::published` of participant `i`'s handle (threads of one process share it) |
//! | `Rw::writers` ([`WritersMutex`]) | the writers' `ShmMutex` (Go's mutex algorithm, modelled in `shipped.rs` and `algo.rs`) |
//! | [`Futex`] | `sys::futex_wait` / `sys::futex_wake` |
//! | `Rw::scanned` | `ShmRwLock::scanned` |
//! | `Rw::publish` | `ShmRwLock::publish` |
//! | `Rw::notify_writer` | `ShmRwLock::notify_writer` |
//! | `Rw::read_as` | `ShmRwLock::read_as` (`read`: `once = false`; `try_read`: `once = true`) |
//! | `Rw::wait_phase_end` | `ShmRwLock::wait_phase_end` |
//! | `Rw::read_unlock` | `ShmRwLock::read_unlock` (`ShmRwLockReadGuard::drop`) |
//! | `Rw::write` / `try_write` | `ShmRwLock::write` / `try_write` (through `write_by`) |
//! | `Rw::write_phase` | `ShmRwLock::write_phase` |
//! | `Rw::wait_counts` | `ShmRwLock::wait_counts` |
//! | `Rw::end_phase` | `ShmRwLock::end_phase` (`write_unlock`: `ShmRwLockWriteGuard::drop`) |
//! | `Rw::end_orphan_phase` | `ShmRwLock::end_orphan_phase` |
//! | `Rw::downgrade` | `ShmRwLockWriteGuard::downgrade` |
//! | `Rw::force_unlock_dead_reader` | `ShmRwLock::force_unlock` of a dead reader: `Recovery::recover_locked`'s zeroing, then `end_orphan_phase`, `notify_writer` |
//!
//! What is left out, and why:
//!
//! * **Time.** Every wait is untimed: no deadline, and no `TICK` (the 10 ms look for dead
//!   processes, `reap_dead`, and the queued readers' `end_orphan_phase`). In the shipped lock a
//!   lost wake-up costs a 10 ms stall; here it is a sleep nobody ends, which loom reports as a
//!   deadlock. So "every model terminates" is the no-lost-wake-up check.
//! * **Deaths** other than a reader's: a dead reader is a thread that stops at a crash point
//!   (`sys::crash_point` and one more) and a supervisor that, after it stopped, zeroes its counts
//!   as recovery does (`shm_rw_dead_reader_recovered`). A dead *writer* would need the
//!   `ShmMutex` recovery, which a loom `Mutex` cannot do; `write_phase`'s "a dead writer's phase"
//!   branch and `end_orphan_phase`'s `probe` are transcribed but never taken here.
//! * `end_orphan_phase`'s pre-check of the mutex word (`low(w) & LOCKED`): an early return that
//!   `try_lock` would reach anyway (it fails while the mutex is held).
//! * `OwnerDied` / `Poisoned` (flags read after the lock is taken: no part of the protocol).
//! * Spurious futex wake-ups: every wait re-checks in a loop, so they only add executions.
//!
//! Loom's `SeqCst`: a `SeqCst` load never returns a store older than a newer `SeqCst` store,
//! but an atomic's *initial* value counts as a `Release` store, so a load could still return
//! it after a newer `SeqCst` store (tokio-rs/loom#180, the store-buffer shape). The protocol's
//! fast path is exactly that shape (the reader's count then the state, the writer's state then
//! the counts), so [`Rw::new`] stores every `SeqCst` word's 0 again with `SeqCst` before the
//! model's threads start; loom then runs the `SeqCst` words sequentially consistently, and the
//! `Relaxed` control (`negative_shm_rw_relaxed_reader`) shows what a weaker ordering breaks.
//!
//! A loom `UnsafeCell` stands for the value: readers read it, writers increment it, so loom
//! reports any two accesses not ordered by happens-before (exclusion, and that each section
//! sees the previous writer's write). Every model ends quiescent: no count, no flag (only the
//! phase, one per write phase), nobody asleep.
//!
//! Negative controls (each a deliberately broken variant, run in a child process as in
//! `tests/negative.rs`, because a loom deadlock aborts the process) prove the models can fail.

use gomutex_loom_tests::model;
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU32;
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use std::process::Command;
use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering::*};

/// `rw_state`: a writer holds the writers' mutex and wants the readers out.
const PENDING: u32 = 1;
/// `rw_state`: readers sleep on the word.
const RWAIT: u32 = 2;
/// `rw_state`: the writer sleeps on the wake-up word.
const WSLEEP: u32 = 4;
/// `rw_state`: the phase number's unit.
const PHASE: u32 = 8;
/// Participant slots (processes) in a model.
const SLOTS: usize = 3;

/// Deliberate deviations from the shipped protocol: the negative controls (all `false`: the
/// transcription as shipped).
#[derive(Clone, Copy, Default)]
struct Faults {
    /// (a) The reader checks `PENDING` first and counts itself after.
    check_before_count: bool,
    /// (b) Queued readers are not counted in `rw_waiting`: the next writer does not wait for
    /// the readers admitted by the previous phase's end.
    uncounted_queue: bool,
    /// Not a fault (loom accepts it): `wait_counts` does not re-check the counts after setting
    /// `WSLEEP`.
    no_recheck: bool,
    /// (c) `wait_counts` loads the wake-up sequence just before sleeping instead of before
    /// its first look at the counts.
    late_seq: bool,
    /// (d) `Relaxed` instead of `SeqCst` on the reader's count increment and state load.
    relaxed_reader: bool,
    /// (e) The reader publishes its slot in the high-water mark only after it is in.
    publish_late: bool,
    /// (f) `wait_phase_end` sleeps on the state seen when queueing for the whole phase, not
    /// the state last seen (the busy wait fixed in `src/shm/rwlock/`).
    stale_expected: bool,
    /// (g) `downgrade` unlocks first and counts the reader after.
    downgrade_late: bool,
}

/// Where a reader may be killed (`sys::crash_point`, plus `Admitted` and `Holding`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Crash {
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
enum Read {
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
struct WGuard<'a>(&'a WritersMutex);

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
struct Rw {
    state: AtomicU32,
    hwm: AtomicU32,
    wake: AtomicU32,
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
    fn new(f: Faults) -> Arc<Self> {
        Self::build(f, None, Default::default())
    }

    fn build(
        f: Faults,
        crash: Option<(usize, Crash)>,
        stale_sleeps: std::sync::Arc<StdAtomicUsize>,
    ) -> Arc<Self> {
        let rw = Self {
            state: AtomicU32::new(0),
            hwm: AtomicU32::new(0),
            wake: AtomicU32::new(0),
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
        for w in [&rw.state, &rw.hwm, &rw.wake]
            .into_iter()
            .chain(&rw.reads)
            .chain(&rw.waiting)
        {
            w.store(0, SeqCst);
        }
        Arc::new(rw)
    }

    fn crashes(&self, me: usize, at: Crash) -> bool {
        self.crash == Some((me, at))
    }

    // --- the words ---

    /// `scanned`
    fn scanned(&self) -> usize {
        (self.hwm.load(SeqCst) as usize).min(SLOTS)
    }

    /// `publish`
    fn publish(&self, me: usize) {
        let me1 = me as u32 + 1;
        if self.published[me].load(Acquire) != me1 {
            self.hwm.fetch_max(me1, SeqCst);
            self.published[me].store(me1, Release);
        }
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
    fn read_as(&self, me: usize, once: bool) -> Read {
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
    fn read_unlock(&self, me: usize) {
        self.reads[me].fetch_sub(1, SeqCst);
        if self.state.load(SeqCst) & PENDING != 0 {
            self.notify_writer();
        }
    }

    // --- writers ---

    /// `write`
    fn write(&self) -> WGuard<'_> {
        let g = self.writers.lock();
        self.write_phase(g, false)
            .expect("an untimed write lock never gives up")
    }

    /// `try_write`
    fn try_write(&self) -> Option<WGuard<'_>> {
        let g = self.writers.try_lock()?;
        self.write_phase(g, true)
    }

    /// `write_phase`
    fn write_phase<'a>(&self, g: WGuard<'a>, once: bool) -> Option<WGuard<'a>> {
        if self.state.load(SeqCst) & PENDING != 0 {
            self.end_phase();
        }
        if !self.wait_counts(&self.waiting, once) {
            return None;
        }
        self.state.fetch_or(PENDING, SeqCst);
        if !self.wait_counts(&self.reads, once) {
            self.end_phase();
            return None;
        }
        Some(g)
    }

    /// `wait_counts` without a deadline, without `reap_dead` (nobody dies during a write phase
    /// in these models but the dead reader, whose counts the supervisor zeroes).
    fn wait_counts(&self, count: &[AtomicU32; SLOTS], once: bool) -> bool {
        let busy = || (0..self.scanned()).any(|i| count[i].load(SeqCst) != 0);
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
    fn write_unlock(&self, g: WGuard<'_>) {
        self.end_phase();
        drop(g);
    }

    /// `ShmRwLockWriteGuard::downgrade`: the writer counts itself as a reader of slot `me`
    /// (published first) while it still holds the writers' mutex with `PENDING` set, then
    /// unlocks as `write_unlock`.
    fn downgrade(&self, g: WGuard<'_>, me: usize) {
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
    fn force_unlock_dead_reader(&self, d: usize) {
        self.reads[d].store(0, SeqCst);
        self.waiting[d].store(0, SeqCst);
        self.end_orphan_phase();
        self.notify_writer();
    }

    // --- the model's side ---

    fn read_cs(&self) -> u64 {
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        self.cell.with(|p| unsafe { *p })
    }

    fn write_cs(&self) {
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        self.cell.with_mut(|p| unsafe { *p += 1 });
    }

    /// Read lock (blocking), read, unlock: the value read.
    fn read(&self, me: usize) -> u64 {
        assert_eq!(self.read_as(me, false), Read::Held);
        let v = self.read_cs();
        self.read_unlock(me);
        v
    }

    /// Write lock (blocking), write, unlock.
    fn write_once(&self) {
        let g = self.write();
        self.write_cs();
        self.write_unlock(g);
    }

    /// Yield until `pred(state, reads, waiting)` holds.
    fn wait_until(&self, pred: impl Fn(u32, &[u32], &[u32]) -> bool) {
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
    fn assert_quiescent(&self, phases: u32, writes: u64) {
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
fn spawn_reader(rw: &Arc<Rw>, me: usize) -> thread::JoinHandle<u64> {
    let rw = rw.clone();
    thread::spawn(move || rw.read(me))
}

fn spawn_writer(rw: &Arc<Rw>) -> thread::JoinHandle<()> {
    let rw = rw.clone();
    thread::spawn(move || rw.write_once())
}

fn join_values(ts: impl IntoIterator<Item = thread::JoinHandle<u64>>) -> Vec<u64> {
    ts.into_iter().map(|t| t.join().unwrap()).collect()
}

// ---------------------------------------------------------------------------------------------
// Models of the protocol as shipped

/// Readers overlap, in different slots and in one slot: each waits, inside, until both are
/// inside (a lock that serialised them would deadlock, which loom reports).
#[test]
fn shm_rw_readers_overlap() {
    for slots in [[0, 1], [1, 1]] {
        model(&format!("shm_rw_readers_overlap {slots:?}"), 3, move || {
            let rw = Rw::new(Faults::default());
            let inside = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
            let ts: Vec<_> = slots
                .into_iter()
                .map(|me| {
                    let (rw, inside) = (rw.clone(), inside.clone());
                    thread::spawn(move || {
                        assert_eq!(rw.read_as(me, false), Read::Held);
                        rw.read_cs();
                        inside.fetch_add(1, SeqCst);
                        while inside.load(SeqCst) < 2 {
                            thread::yield_now();
                        }
                        rw.read_unlock(me);
                    })
                })
                .collect();
            for t in ts {
                t.join().unwrap();
            }
            rw.assert_quiescent(0, 0);
        });
    }
}

/// A writer excludes readers: two readers (different slots, then one slot) and a writer; every
/// read sees 0 or 1, every access is ordered with the write, nobody is left asleep.
#[test]
fn shm_rw_writer_excludes_readers() {
    for (slots, bound) in [([0, 1], 3), ([2, 2], 2)] {
        let name = format!("shm_rw_writer_excludes_readers {slots:?}");
        model(&name, bound, move || {
            let rw = Rw::new(Faults::default());
            let rs: Vec<_> = slots.iter().map(|&me| spawn_reader(&rw, me)).collect();
            rw.write_once();
            for v in join_values(rs) {
                assert!(v <= 1);
            }
            rw.assert_quiescent(1, 1);
        });
    }
}

/// A writer excludes readers and writers: one reader and two writers.
#[test]
fn shm_rw_writers_exclude_each_other() {
    model("shm_rw_writers_exclude_each_other", 3, || {
        let rw = Rw::new(Faults::default());
        let ws = [spawn_writer(&rw), spawn_writer(&rw)];
        let v = rw.read(0);
        assert!(v <= 2);
        for w in ws {
            w.join().unwrap();
        }
        rw.assert_quiescent(2, 2);
    });
}

/// Writer preference: once the writer has announced itself (`PENDING`) while a reader is
/// inside, `try_read` fails (in another slot and in the reader's own) and a new reader waits
/// for the writer, seeing its write.
#[test]
fn shm_rw_writer_preference() {
    model("shm_rw_writer_preference", 3, || {
        let rw = Rw::new(Faults::default());
        assert_eq!(rw.read_as(0, false), Read::Held);
        let w = spawn_writer(&rw);
        rw.wait_until(|s, _, _| s & PENDING != 0);
        assert_eq!(
            rw.read_as(1, true),
            Read::WouldBlock,
            "try_read with PENDING"
        );
        assert_eq!(
            rw.read_as(0, true),
            Read::WouldBlock,
            "try_read with PENDING"
        );
        let r = spawn_reader(&rw, 1);
        rw.read_cs();
        rw.read_unlock(0);
        w.join().unwrap();
        assert_eq!(
            r.join().unwrap(),
            1,
            "a new reader overtook the pending writer"
        );
        rw.assert_quiescent(1, 1);
    });
}

/// Go's batch order: a reader that queued behind writer 1 is admitted before writer 2 (which
/// may already wait for the writers' mutex) writes, and sees writer 1's write only.
#[test]
fn shm_rw_queued_reader_before_next_writer() {
    model("shm_rw_queued_reader_before_next_writer", 2, || {
        let rw = Rw::new(Faults::default());
        let r_done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        assert_eq!(rw.read_as(0, false), Read::Held);
        let w1 = spawn_writer(&rw);
        rw.wait_until(|s, _, _| s & PENDING != 0);
        let (rw2, d) = (rw.clone(), r_done.clone());
        let r = thread::spawn(move || {
            assert_eq!(rw2.read_as(1, false), Read::Held);
            let v = rw2.read_cs();
            d.store(true, SeqCst);
            rw2.read_unlock(1);
            v
        });
        // The reader is queued in writer 1's phase.
        rw.wait_until(|s, _, w| s & RWAIT != 0 && w[1] == 1);
        let (rw3, d) = (rw.clone(), r_done.clone());
        let w2 = thread::spawn(move || {
            let g = rw3.write();
            assert!(
                d.load(SeqCst),
                "writer 2 overtook a reader queued behind writer 1"
            );
            rw3.write_cs();
            rw3.write_unlock(g);
        });
        rw.read_cs();
        rw.read_unlock(0);
        w1.join().unwrap();
        w2.join().unwrap();
        assert_eq!(r.join().unwrap(), 1);
        rw.assert_quiescent(2, 2);
    });
}

/// `try_read` / `try_write` never block: against a writer holding the lock throughout (the
/// main thread), both fail and return; a blocking reader waits and sees the write. Then against
/// a reader inside: `try_write` fails (leaving no phase open), `try_read` succeeds.
#[test]
fn shm_rw_try_never_blocks() {
    model("shm_rw_try_never_blocks_writer_inside", 3, || {
        let rw = Rw::new(Faults::default());
        let g = rw.write();
        let rw1 = rw.clone();
        let t = thread::spawn(move || {
            let r = rw1.read_as(1, true);
            let w = rw1.try_write().is_some();
            (r, w)
        });
        let reader = spawn_reader(&rw, 2);
        assert_eq!(t.join().unwrap(), (Read::WouldBlock, false));
        rw.write_cs();
        rw.write_unlock(g);
        assert_eq!(reader.join().unwrap(), 1);
        rw.assert_quiescent(1, 1);
    });
    model("shm_rw_try_never_blocks_reader_inside", 3, || {
        let rw = Rw::new(Faults::default());
        assert_eq!(rw.read_as(0, false), Read::Held);
        let rw1 = rw.clone();
        let t = thread::spawn(move || {
            let w = rw1.try_write().is_some();
            let r = rw1.read_as(1, true);
            if r == Read::Held {
                rw1.read_cs();
                rw1.read_unlock(1);
            }
            (w, r)
        });
        let w = spawn_writer(&rw);
        rw.read_cs();
        let (tw, tr) = t.join().unwrap();
        assert!(!tw, "try_write with a reader inside");
        // `try_read` may meet the blocking writer's `PENDING` (or try_write's, briefly).
        assert!(tr == Read::Held || tr == Read::WouldBlock);
        rw.read_unlock(0);
        w.join().unwrap();
        let phases = rw.state.load(SeqCst) / PHASE;
        assert!(phases == 1 || phases == 2, "one phase per write attempt");
        rw.assert_quiescent(phases, 1);
    });
}

/// The high-water mark's publication race: slot 0 has published (mark 1); readers in slots 2
/// and 1 (never published, so the mark moves 1 → 3 or 1 → 2 → 3 while the writer scans)
/// race a writer that scans only the mark's slots; exclusion holds, and the writer sees each
/// reader either way.
#[test]
fn shm_rw_hwm_publication_race() {
    model("shm_rw_hwm_publication_race", 3, || {
        let rw = Rw::new(Faults::default());
        assert_eq!(rw.read(0), 0);
        let rs = [spawn_reader(&rw, 2), spawn_reader(&rw, 1)];
        rw.write_once();
        for v in join_values(rs) {
            assert!(v <= 1);
        }
        assert_eq!(rw.hwm.load(SeqCst), 3);
        rw.assert_quiescent(1, 1);
    });
}

/// A reader killed at each crash point (a thread that stops there), a supervisor that after it
/// stopped zeroes its counts as recovery does (`force_unlock`), and two writers, the second
/// possibly queued behind readers of the first's phase: every model terminates (the
/// supervisor's `notify_writer` reaches a writer waiting for the dead reader's counts) and
/// ends quiescent.
#[test]
fn shm_rw_dead_reader_recovered() {
    for at in [
        Crash::ReadCounted,
        Crash::Queued,
        Crash::Admitted,
        Crash::Holding,
    ] {
        let died = std::sync::Arc::new(StdAtomicUsize::new(0));
        let d0 = died.clone();
        model(
            &format!("shm_rw_dead_reader_recovered {at:?}"),
            2,
            move || {
                let rw = Rw::build(Faults::default(), Some((1, at)), Default::default());
                let g = rw.write();
                let (rw1, d1) = (rw.clone(), d0.clone());
                let dead = thread::spawn(move || match rw1.read_as(1, false) {
                    Read::Died => {
                        d1.fetch_add(1, Relaxed);
                    }
                    Read::Held => {
                        rw1.read_cs();
                        rw1.read_unlock(1);
                    }
                    Read::WouldBlock => unreachable!(),
                });
                let rw2 = rw.clone();
                let supervisor = thread::spawn(move || {
                    dead.join().unwrap();
                    rw2.force_unlock_dead_reader(1);
                });
                let w2 = spawn_writer(&rw);
                rw.write_cs();
                rw.write_unlock(g);
                supervisor.join().unwrap();
                w2.join().unwrap();
                rw.assert_quiescent(2, 2);
            },
        );
        assert!(
            died.load(Relaxed) > 0,
            "crash point {at:?} never reached in any execution"
        );
    }
}

/// `downgrade`: a writer writes and downgrades (slot 0) while a reader (slot 1) and a second
/// writer race it. After the downgrade the first writer still reads its own write (no writer
/// came between; loom checks every access to the value against every other), the reader
/// comes in whenever, the second writer waits for the downgraded read, and all ends quiescent.
#[test]
fn shm_rw_downgrade() {
    model("shm_rw_downgrade", 3, || downgrade_shape(Faults::default()));
}

fn downgrade_shape(f: Faults) {
    let rw = Rw::new(f);
    let r = spawn_reader(&rw, 1);
    let w2 = spawn_writer(&rw);
    let g = rw.write();
    rw.write_cs();
    let mine = rw.read_cs();
    rw.downgrade(g, 0);
    assert_eq!(
        rw.read_cs(),
        mine,
        "a writer came between the downgrade and the read"
    );
    rw.read_unlock(0);
    w2.join().unwrap();
    assert!(r.join().unwrap() <= 2);
    rw.assert_quiescent(2, 2);
}

/// `wait_counts` without the re-check after `WSLEEP` still loses no wake-up: the wake-up
/// sequence, loaded before the first look at the counts, covers the reader that left without
/// seeing `WSLEEP` (its bump precedes the writer's sleep, which then returns at once). The
/// re-check saves a futex call, not a wake-up. (Loading the sequence late instead loses one:
/// `negative_shm_rw_lost_wakeup`.)
#[test]
fn shm_rw_recheck_after_wsleep_is_redundant() {
    model("shm_rw_recheck_after_wsleep_is_redundant", 3, || {
        lost_wakeup_shape(Faults {
            no_recheck: true,
            ..Faults::default()
        })
    });
}

/// One reader inside, a writer waiting for it to leave, a second reader arriving (queued
/// behind the writer): the shape for the wake-up controls.
fn lost_wakeup_shape(f: Faults) {
    let rw = Rw::new(f);
    let r = spawn_reader(&rw, 1);
    let r2 = spawn_reader(&rw, 2);
    rw.write_once();
    for v in join_values([r, r2]) {
        assert!(v <= 1);
    }
    rw.assert_quiescent(1, 1);
}

/// `wait_phase_end` sleeps on the state last seen. Sleeping on the state seen when queueing
/// (fault (f), as an earlier version shipped) busy-waits: a reader that queues after the
/// writer set `PENDING` and before it set `WSLEEP` (it found a reader inside) has `s` without
/// `WSLEEP`; from then on the word holds `s | WSLEEP` until the phase ends, so every
/// `futex_wait(state, s)` returns `EAGAIN` at once and the reader spins through the rest of the
/// writer's wait and its critical section. The model reaches that with the fault (some
/// execution is about to sleep on a value the word no longer holds) and never without it.
#[test]
fn shm_rw_queued_reader_busy_wait() {
    for (fixed, name) in [
        (
            false,
            "shm_rw_queued_reader_busy_wait (stale expected value, fault f)",
        ),
        (true, "shm_rw_queued_reader_busy_wait (as shipped)"),
    ] {
        let spins = std::sync::Arc::new(StdAtomicUsize::new(0));
        let s0 = spins.clone();
        model(name, 2, move || {
            let f = Faults {
                stale_expected: !fixed,
                ..Faults::default()
            };
            let rw = Rw::build(f, None, s0.clone());
            assert_eq!(rw.read_as(0, false), Read::Held);
            let w = spawn_writer(&rw);
            rw.wait_until(|s, _, _| s & PENDING != 0);
            let r = spawn_reader(&rw, 1);
            // The writer waits for us (`WSLEEP`) and the reader is queued.
            rw.wait_until(|s, _, w| s & WSLEEP != 0 && w[1] == 1);
            rw.read_cs();
            rw.read_unlock(0);
            w.join().unwrap();
            assert!(r.join().unwrap() <= 1);
            rw.assert_quiescent(1, 1);
        });
        let n = spins.load(Relaxed);
        eprintln!("[loom] {name}: {n} sleeps on a stale value");
        if fixed {
            assert_eq!(n, 0, "wait_phase_end as shipped busy-waits");
        } else {
            assert!(n > 0, "the busy wait was not reached with fault (f)");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Negative controls (see `tests/negative.rs` for why each body runs in a child process)

const BODY_ENV: &str = "GOMUTEX_LOOM_NEGATIVE_BODY";

/// Run the `#[ignore]`d test `body` in a child process; it must fail, with one of `expect` in
/// its output.
fn expect_rejected(body: &str, expect: &[&str]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            body,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(BODY_ENV, "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("could not re-run the test binary");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the broken variant `{body}` passed: the model cannot detect this bug\n{text}"
    );
    let hit = expect.iter().find(|e| text.contains(*e));
    assert!(
        hit.is_some(),
        "`{body}` failed for another reason than expected ({expect:?}):\n{text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains(hit.unwrap()))
        .unwrap_or("");
    eprintln!("[loom] {body}: rejected as expected: {line}");
}

fn body_enabled() -> bool {
    std::env::var_os(BODY_ENV).is_some()
}

/// One reader (slot 1, fresh) and a writer (the main thread).
fn reader_writer_shape(f: Faults) {
    let rw = Rw::new(f);
    let r = spawn_reader(&rw, 1);
    rw.write_once();
    assert!(r.join().unwrap() <= 1);
    rw.assert_quiescent(1, 1);
}

/// The controls' baseline: their shapes with the protocol as shipped pass.
#[test]
fn baseline_of_shm_rw_negative_controls_passes() {
    model("baseline_shm_rw_reader_writer", 3, || {
        reader_writer_shape(Faults::default())
    });
    model("baseline_shm_rw_lost_wakeup", 3, || {
        lost_wakeup_shape(Faults::default())
    });
}

/// (a) The reader looks at `PENDING` before it counts itself: the writer can set `PENDING` and
/// find the count 0 between the two, and both are inside.
#[test]
fn negative_shm_rw_check_before_count() {
    expect_rejected("body_shm_rw_check_before_count", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_check_before_count in a child process"]
fn body_shm_rw_check_before_count() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_check_before_count", 2, || {
        reader_writer_shape(Faults {
            check_before_count: true,
            ..Faults::default()
        })
    });
}

/// (b) Queued readers not counted in `rw_waiting`: writer 2 does not wait for the reader
/// admitted by writer 1's phase end, which enters without looking at `PENDING` again, so it
/// is inside with writer 2 (or writer 2 writes first).
#[test]
fn negative_shm_rw_uncounted_queue() {
    expect_rejected(
        "body_shm_rw_uncounted_queue",
        &["Causality violation", "overtook"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_uncounted_queue in a child process"]
fn body_shm_rw_uncounted_queue() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_uncounted_queue", 2, || {
        let rw = Rw::new(Faults {
            uncounted_queue: true,
            ..Faults::default()
        });
        let r_done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        assert_eq!(rw.read_as(0, false), Read::Held);
        let w1 = spawn_writer(&rw);
        rw.wait_until(|s, _, _| s & PENDING != 0);
        let (rw2, d) = (rw.clone(), r_done.clone());
        let r = thread::spawn(move || {
            assert_eq!(rw2.read_as(1, false), Read::Held);
            rw2.read_cs();
            d.store(true, SeqCst);
            rw2.read_unlock(1);
        });
        rw.wait_until(|s, _, _| s & RWAIT != 0);
        let (rw3, d) = (rw.clone(), r_done.clone());
        let w2 = thread::spawn(move || {
            let g = rw3.write();
            assert!(
                d.load(SeqCst),
                "writer 2 overtook a reader queued behind writer 1"
            );
            rw3.write_cs();
            rw3.write_unlock(g);
        });
        rw.read_cs();
        rw.read_unlock(0);
        for t in [w1, w2, r] {
            t.join().unwrap();
        }
    });
}

/// (c) `wait_counts` loads the wake-up sequence just before it sleeps (after the re-check)
/// instead of before its first look at the counts: the reader leaving after the re-check sees
/// `WSLEEP` and wakes nobody (the writer is not asleep yet), and the writer then sleeps on a
/// sequence that already counts the reader's bump: asleep forever. (Dropping the re-check after
/// `WSLEEP` instead loses nothing: `shm_rw_recheck_after_wsleep_is_redundant`.)
#[test]
fn negative_shm_rw_lost_wakeup() {
    expect_rejected("body_shm_rw_lost_wakeup", &["deadlock"]);
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_lost_wakeup in a child process"]
fn body_shm_rw_lost_wakeup() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_lost_wakeup", 3, || {
        lost_wakeup_shape(Faults {
            late_seq: true,
            ..Faults::default()
        })
    });
}

/// (d) `Relaxed` on the reader's count increment and state load: the store-buffer shape is no
/// longer ordered (both see the other's old value), and the reader's load no longer acquires
/// the previous phase's end.
#[test]
fn negative_shm_rw_relaxed_reader() {
    expect_rejected("body_shm_rw_relaxed_reader", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_relaxed_reader in a child process"]
fn body_shm_rw_relaxed_reader() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_relaxed_reader", 2, || {
        reader_writer_shape(Faults {
            relaxed_reader: true,
            ..Faults::default()
        })
    });
}

/// (e) The reader publishes its slot in the high-water mark only once it is in: a writer that
/// loaded the mark before does not scan the slot and enters beside the reader.
#[test]
fn negative_shm_rw_publish_late() {
    expect_rejected("body_shm_rw_publish_late", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_publish_late in a child process"]
fn body_shm_rw_publish_late() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_publish_late", 2, || {
        reader_writer_shape(Faults {
            publish_late: true,
            ..Faults::default()
        })
    });
}

/// (g) `downgrade` unlocks first and counts itself as a reader after: the second writer can
/// take the writers' mutex, find no reader and write while the downgraded reader reads.
#[test]
fn negative_shm_rw_downgrade_late() {
    expect_rejected(
        "body_shm_rw_downgrade_late",
        &["Causality violation", "came between"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_downgrade_late in a child process"]
fn body_shm_rw_downgrade_late() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_downgrade_late", 2, || {
        downgrade_shape(Faults {
            downgrade_late: true,
            ..Faults::default()
        })
    });
}
