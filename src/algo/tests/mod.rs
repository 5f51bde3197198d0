//! State-transition tests of the algorithm, driven on one thread.
//!
//! A [`Script`] queue stands in for the waiter queue: each `acquire` (a sleep) runs the next
//! scripted step, which plays what other threads do meanwhile (an unlock, a barger, a
//! hand-off) on the state word, and returns whether the sleeper got a token (`false` = its
//! deadline passed). Every `acquire`/`release` is logged with its `lifo`/`handoff` flag.
//! [`FakeClock`] is a per-thread nanosecond counter the steps advance by hand. A [`Word`] hook
//! can interfere right before a load or compare-and-swap, to play races. `deadlines` holds the
//! timed-lock cases; `threads` runs the algorithm on many threads over an independent std
//! `Mutex`+`Condvar` queue.
use super::*;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

const MS: u64 = 1_000_000;
const W: u32 = WAITER;
const W2: u32 = 2 * WAITER;
const W3: u32 = 3 * WAITER;

thread_local! {
    static NOW: Cell<u64> = const { Cell::new(0) };
    static CLOCK_READS: Cell<u32> = const { Cell::new(0) };
}

/// A clock moved by hand, per thread; counts its reads.
struct FakeClock;

impl Clock for FakeClock {
    type Instant = u64;
    fn now() -> u64 {
        CLOCK_READS.with(|r| r.set(r.get() + 1));
        NOW.with(Cell::get)
    }
    fn starving_since(since: u64) -> bool {
        CLOCK_READS.with(|r| r.set(r.get() + 1));
        NOW.with(Cell::get) - since > MS
    }
    fn starving_since_ns(since: u64) -> (bool, u64) {
        CLOCK_READS.with(|r| r.set(r.get() + 1));
        let ns = NOW.with(Cell::get) - since;
        (ns > MS, ns)
    }
}

fn advance(ns: u64) {
    NOW.with(|n| n.set(n.get() + ns));
}

fn clock_reads() -> u32 {
    CLOCK_READS.with(Cell::get)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Acquire { lifo: bool, timed: bool },
    Release { handoff: bool },
}
use Call::{Acquire, Release};

const fn acq(lifo: bool) -> Call {
    Acquire { lifo, timed: false }
}
const fn acq_timed(lifo: bool) -> Call {
    Acquire { lifo, timed: true }
}
const fn rel(handoff: bool) -> Call {
    Release { handoff }
}

/// The operation a [`Word`] hook runs before.
#[derive(Debug, Clone, Copy)]
enum Op {
    Load,
    Cas { old: u32, new: u32 },
}

/// Runs before a load or CAS; returns whether to stay installed.
type Hook = Box<dyn FnMut(Op, &Word) -> bool>;

/// A single-threaded state word with an interference hook.
struct Word {
    v: Cell<u32>,
    hook: RefCell<Option<Hook>>,
}

impl Word {
    fn new(v: u32) -> Self {
        Self {
            v: Cell::new(v),
            hook: RefCell::new(None),
        }
    }
    fn get(&self) -> u32 {
        self.v.get()
    }
    fn set(&self, v: u32) {
        self.v.set(v);
    }
    fn on(&self, hook: impl FnMut(Op, &Word) -> bool + 'static) {
        *self.hook.borrow_mut() = Some(Box::new(hook));
    }
    fn run_hook(&self, op: Op) {
        // Take the hook out while it runs: it may itself use the word.
        let taken = self.hook.borrow_mut().take();
        if let Some(mut h) = taken {
            if h(op, self) {
                *self.hook.borrow_mut() = Some(h);
            }
        }
    }
}

impl StateWord for Word {
    fn load(&self) -> u32 {
        self.run_hook(Op::Load);
        self.v.get()
    }
    fn try_acquire_fast(&self) -> bool {
        if self.v.get() == 0 {
            self.v.set(LOCKED);
            true
        } else {
            false
        }
    }
    fn cas(&self, old: u32, new: u32) -> Result<u32, CasError> {
        self.run_hook(Op::Cas { old, new });
        let cur = self.v.get();
        if cur == old {
            self.v.set(new);
            Ok(cur)
        } else {
            Err(CasError::Moved(cur))
        }
    }
    fn fetch_add(&self, delta: u32) -> u32 {
        let cur = self.v.get();
        self.v.set(cur.wrapping_add(delta));
        cur
    }
    fn release_locked(&self) -> u32 {
        let new = self.v.get().wrapping_sub(LOCKED);
        self.v.set(new);
        new
    }
}

/// The call log; as a queue it is what other threads' unlocks release into (it never sleeps).
#[derive(Clone, Default)]
struct Log(Rc<RefCell<Vec<Call>>>);

impl Log {
    fn calls(&self) -> Vec<Call> {
        self.0.borrow().clone()
    }
}

impl WaitQueue for Log {
    fn acquire(&self, _: bool, _: Option<Instant>) -> bool {
        panic!("a scripted other thread tried to sleep")
    }
    fn release(&self, handoff: bool) {
        self.0.borrow_mut().push(Release { handoff });
    }
}

/// What other threads do while the thread under test sleeps; returns whether it gets a token.
type Step = Box<dyn FnOnce(&Word, &Log) -> bool>;

/// The queue of the thread under test: every sleep runs the next step.
struct Script<'a> {
    word: &'a Word,
    log: Log,
    steps: RefCell<VecDeque<Step>>,
}

impl<'a> Script<'a> {
    fn new(word: &'a Word) -> Self {
        Self {
            word,
            log: Log::default(),
            steps: RefCell::new(VecDeque::new()),
        }
    }
    fn then(self, step: impl FnOnce(&Word, &Log) -> bool + 'static) -> Self {
        self.steps.borrow_mut().push_back(Box::new(step));
        self
    }
    fn calls(&self) -> Vec<Call> {
        self.log.calls()
    }
    fn assert_done(&self) {
        assert!(
            self.steps.borrow().is_empty(),
            "{} scripted sleep(s) never happened; calls: {:?}",
            self.steps.borrow().len(),
            self.calls()
        );
    }
}

impl WaitQueue for Script<'_> {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        self.log.0.borrow_mut().push(Acquire {
            lifo,
            timed: deadline.is_some(),
        });
        let step = self.steps.borrow_mut().pop_front();
        let step = step.unwrap_or_else(|| {
            panic!(
                "unscripted sleep (lifo={lifo}) in state {:#x}; calls: {:?}",
                self.word.get(),
                self.calls()
            )
        });
        step(self.word, &self.log)
    }
    fn release(&self, handoff: bool) {
        self.log.release(handoff);
    }
}

fn do_lock(w: &Word, q: &Script<'_>) {
    lock::<_, _, FakeClock>(w, q);
}

fn do_lock_until(w: &Word, q: &Script<'_>, deadline: Instant) -> bool {
    lock_until::<_, _, FakeClock>(w, q, Some(deadline))
}

fn far_deadline() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// Another thread's unlock (its wake-ups are logged).
fn other_unlocks(w: &Word, log: &Log) {
    unlock(w, log);
}

/// A barger takes the free lock in `lockSlow` (a newcomer keeps `WOKEN`: it is not its own).
fn barger_locks(w: &Word) {
    let s = w.get();
    assert_eq!(
        s & (LOCKED | STARVING),
        0,
        "barger found the lock taken: {s:#x}"
    );
    w.set(s | LOCKED);
}

#[test]
fn fast_path_is_zero_to_locked_and_reads_no_clock() {
    let w = Word::new(0);
    let q = Script::new(&w);
    let reads = clock_reads();
    do_lock(&w, &q);
    assert_eq!(w.get(), LOCKED);
    assert_eq!(q.calls(), []);
    assert_eq!(clock_reads(), reads, "the fast path read the clock");
}

#[test]
fn newcomer_barges_past_sleepers_in_normal_mode() {
    // A woken contender is in flight (WOKEN) and two sleepers are registered; the lock is free.
    let w = Word::new(WOKEN | W2);
    let q = Script::new(&w);
    do_lock(&w, &q);
    assert_eq!(
        w.get(),
        LOCKED | WOKEN | W2,
        "barging must not touch WOKEN or the count"
    );
    assert_eq!(q.calls(), []);
}

#[test]
fn unlock_without_waiters_is_one_subtraction() {
    let w = Word::new(LOCKED);
    let ops = Rc::new(Cell::new(0));
    let o = Rc::clone(&ops);
    w.on(move |_, _| {
        o.set(o.get() + 1);
        true
    });
    let log = Log::default();
    let reads = clock_reads();
    unlock(&w, &log);
    assert_eq!(w.get(), 0);
    assert_eq!(log.calls(), [], "unlock 1 -> 0 touched the queue");
    assert_eq!(ops.get(), 0, "unlock 1 -> 0 did more than the subtraction");
    assert_eq!(clock_reads(), reads);
}

#[test]
fn try_lock_fails_on_locked_or_starving_and_changes_nothing() {
    for s in [
        LOCKED,
        LOCKED | W,
        LOCKED | WOKEN | W3,
        LOCKED | STARVING | W,
        STARVING | W,
        STARVING | W2,
    ] {
        let w = Word::new(s);
        assert!(!try_lock(&w), "try_lock succeeded in state {s:#x}");
        assert_eq!(w.get(), s, "try_lock changed state {s:#x}");
    }
}

#[test]
fn try_lock_sets_only_locked_when_free_in_normal_mode() {
    for s in [0, W, WOKEN, WOKEN | W2] {
        let w = Word::new(s);
        assert!(try_lock(&w), "try_lock failed in state {s:#x}");
        assert_eq!(
            w.get(),
            s | LOCKED,
            "try_lock changed more than LOCKED from {s:#x}"
        );
    }
}

#[test]
fn try_lock_retries_when_only_the_count_changed() {
    let w = Word::new(W);
    // Before its CAS, another waiter registers: the CAS fails, the retry must succeed and
    // keep the new count.
    w.on(|op, w| {
        if let Op::Cas { .. } = op {
            w.set(w.get() + W);
            return false;
        }
        true
    });
    assert!(try_lock(&w));
    assert_eq!(w.get(), LOCKED | W2);
}

#[test]
fn try_lock_fails_when_a_barger_wins_its_cas() {
    let w = Word::new(0);
    w.on(|op, w| {
        if let Op::Cas { .. } = op {
            barger_locks(w);
            return false;
        }
        true
    });
    assert!(!try_lock(&w));
    assert_eq!(w.get(), LOCKED);
}

#[test]
fn contended_lock_registers_and_first_sleeps_at_the_back() {
    let w = Word::new(LOCKED);
    let q = Script::new(&w).then(|w, log| {
        assert_eq!(
            w.get(),
            LOCKED | W,
            "not registered as a waiter before sleeping"
        );
        other_unlocks(w, log);
        assert_eq!(w.get(), WOKEN, "normal unlock must be (waiters-1)|WOKEN");
        true
    });
    do_lock(&w, &q);
    q.assert_done();
    assert_eq!(
        w.get(),
        LOCKED,
        "the woken waiter must clear WOKEN when it locks"
    );
    assert_eq!(q.calls(), [acq(false), rel(false)]);
}

#[test]
fn lock_slow_waited_reports_the_sleep_from_the_starvation_rules_clock_reads() {
    let w = Word::new(LOCKED);
    let q = Script::new(&w)
        .then(|w, log| {
            advance(300);
            other_unlocks(w, log);
            barger_locks(w); // the woken waiter loses and sleeps again
            true
        })
        .then(|w, log| {
            advance(400);
            other_unlocks(w, log);
            true
        });
    let reads = clock_reads();
    let waited = lock_slow_waited::<_, _, FakeClock>(&w, &q, None);
    q.assert_done();
    assert_eq!(w.get(), LOCKED);
    // From before the first sleep to the last wake-up, across both sleeps.
    assert_eq!(waited, Some(Waited::Slept { ns: 700 }));
    // Go's reads only: one before the first sleep, one after each wake-up.
    assert_eq!(clock_reads() - reads, 3);
}

#[test]
fn lock_slow_waited_without_a_sleep_is_awake_and_reads_no_clock() {
    // Free in normal mode with a waiter counted: the slow path takes it with its first CAS.
    let w = Word::new(W);
    let q = Script::new(&w);
    let reads = clock_reads();
    let waited = lock_slow_waited::<_, _, FakeClock>(&w, &q, None);
    assert_eq!(waited, Some(Waited::Awake));
    assert_eq!(w.get(), LOCKED | W);
    assert_eq!(
        clock_reads(),
        reads,
        "a slow path that never slept read the clock"
    );
}

#[test]
fn woken_waiter_that_loses_the_race_requeues_at_the_front() {
    let w = Word::new(LOCKED);
    let q = Script::new(&w)
        .then(|w, log| {
            other_unlocks(w, log);
            barger_locks(w); // wins before the woken waiter runs
            true
        })
        .then(|w, log| {
            assert_eq!(
                w.get(),
                LOCKED | W,
                "re-registration must clear WOKEN, add 1 waiter"
            );
            other_unlocks(w, log);
            true
        });
    do_lock(&w, &q);
    q.assert_done();
    assert_eq!(w.get(), LOCKED);
    assert_eq!(q.calls(), [acq(false), rel(false), acq(true), rel(false)]);
}

#[test]
fn waiting_exactly_the_threshold_is_not_starving() {
    let w = Word::new(LOCKED);
    let q = Script::new(&w)
        .then(|w, log| {
            advance(MS); // exactly 1 ms: Go compares with a strict `>`
            other_unlocks(w, log);
            barger_locks(w);
            true
        })
        .then(|w, log| {
            assert_eq!(w.get(), LOCKED | W, "STARVING set after exactly 1 ms");
            other_unlocks(w, log);
            true
        });
    do_lock(&w, &q);
    q.assert_done();
    assert_eq!(w.get(), LOCKED);
}

#[test]
fn waiter_past_the_threshold_starves_the_lock_and_gets_it_handed_off() {
    let w = Word::new(LOCKED);
    let q = Script::new(&w)
        .then(|w, log| {
            advance(MS + 1);
            other_unlocks(w, log);
            barger_locks(w);
            true
        })
        .then(|w, log| {
            assert_eq!(
                w.get(),
                LOCKED | STARVING | W,
                "a starving waiter must set STARVING"
            );
            other_unlocks(w, log);
            assert_eq!(
                w.get(),
                STARVING | W,
                "starvation unlock must leave LOCKED clear"
            );
            true
        });
    do_lock(&w, &q);
    q.assert_done();
    // The receiver was the last waiter: −11 (takes LOCKED, leaves the count and starvation).
    assert_eq!(w.get(), LOCKED);
    assert_eq!(q.calls(), [acq(false), rel(false), acq(true), rel(true)]);
}

#[test]
fn starving_waiter_that_finds_the_lock_free_takes_it_without_starvation_mode() {
    let w = Word::new(LOCKED);
    let q = Script::new(&w).then(|w, log| {
        advance(5 * MS);
        other_unlocks(w, log);
        true
    });
    do_lock(&w, &q);
    q.assert_done();
    assert_eq!(w.get(), LOCKED, "STARVING set while the lock was free");
}

#[test]
fn starvation_clock_starts_at_the_first_sleep_and_keeps_running_across_requeues() {
    let w = Word::new(LOCKED | W);
    // Before our registration CAS: 5 ms pass and another waiter registers (the CAS fails).
    // Time before the first sleep must not count.
    w.on(|op, w| match op {
        Op::Cas { old, new } if waiters(new) > waiters(old) => {
            advance(5 * MS);
            w.set(w.get() + W);
            false
        }
        _ => true,
    });
    let q = Script::new(&w)
        .then(|w, log| {
            assert_eq!(w.get(), LOCKED | W3);
            advance(MS / 2);
            other_unlocks(w, log);
            barger_locks(w);
            true
        })
        .then(|w, log| {
            assert_eq!(w.get(), LOCKED | W3, "starving after 0.5 ms of sleep");
            advance(MS / 2 + 1);
            other_unlocks(w, log);
            barger_locks(w);
            true
        })
        .then(|w, log| {
            assert_eq!(
                w.get(),
                LOCKED | STARVING | W3,
                "not starving after 1 ms + 1 ns since the first sleep"
            );
            other_unlocks(w, log);
            true
        });
    do_lock(&w, &q);
    q.assert_done();
    // A starving receiver that is not the last: −7, starvation mode stays.
    assert_eq!(w.get(), LOCKED | STARVING | W2);
    assert_eq!(
        q.calls(),
        [
            acq(false),
            rel(false),
            acq(true),
            rel(false),
            acq(true),
            rel(true)
        ]
    );
}

#[test]
fn normal_unlock_with_waiters_wakes_exactly_one() {
    let w = Word::new(LOCKED | W2);
    let log = Log::default();
    unlock(&w, &log);
    assert_eq!(w.get(), WOKEN | W);
    assert_eq!(log.calls(), [rel(false)]);
}

#[test]
fn normal_unlock_wakes_nobody_while_a_contender_is_awake() {
    let w = Word::new(LOCKED | WOKEN | W2);
    let log = Log::default();
    unlock(&w, &log);
    assert_eq!(w.get(), WOKEN | W2);
    assert_eq!(log.calls(), []);
}

#[test]
fn normal_unlock_wakes_nobody_when_a_barger_took_the_lock() {
    let w = Word::new(LOCKED | W);
    w.on(|op, w| {
        if let Op::Cas { .. } = op {
            barger_locks(w);
            return false;
        }
        true
    });
    let log = Log::default();
    unlock(&w, &log);
    assert_eq!(w.get(), LOCKED | W, "the barger's unlock does the wake-up");
    assert_eq!(log.calls(), []);
}

#[test]
fn starvation_unlock_hands_off_and_leaves_locked_clear() {
    let w = Word::new(LOCKED | STARVING | W2);
    let log = Log::default();
    unlock(&w, &log);
    assert_eq!(w.get(), STARVING | W2);
    assert_eq!(log.calls(), [rel(true)]);
}

#[test]
fn fair_unlock_with_waiters_hands_off_in_normal_mode() {
    let w = Word::new(LOCKED | W2);
    let log = Log::default();
    unlock_fair(&w, &log);
    assert_eq!(
        w.get(),
        STARVING | W2,
        "a starvation-mode hand-off in flight"
    );
    assert_eq!(log.calls(), [rel(true)]);
}

#[test]
fn fair_unlock_falls_back_to_unlock_without_waiters_when_starving_or_woken() {
    for (before, after, calls) in [
        (LOCKED, 0, vec![]),
        (LOCKED | STARVING | W, STARVING | W, vec![rel(true)]),
        (LOCKED | WOKEN | W2, WOKEN | W2, vec![]),
        (LOCKED | WOKEN, WOKEN, vec![]),
    ] {
        let w = Word::new(before);
        let log = Log::default();
        unlock_fair(&w, &log);
        assert_eq!(w.get(), after, "from {before:#x}");
        assert_eq!(log.calls(), calls, "from {before:#x}");
    }
}

#[test]
fn fair_unlock_retries_when_a_waiter_registers_meanwhile() {
    let w = Word::new(LOCKED | W);
    w.on(|op, w| {
        if let Op::Cas { .. } = op {
            w.set(w.get() + W);
            return false;
        }
        true
    });
    let log = Log::default();
    unlock_fair(&w, &log);
    assert_eq!(w.get(), STARVING | W2);
    assert_eq!(log.calls(), [rel(true)]);
}

#[test]
fn fair_unlock_retries_when_a_spinner_announces_itself_meanwhile() {
    let w = Word::new(LOCKED | W);
    w.on(|op, w| {
        if let Op::Cas { .. } = op {
            w.set(w.get() | WOKEN);
            return false;
        }
        true
    });
    let log = Log::default();
    unlock_fair(&w, &log);
    assert_eq!(w.get(), WOKEN | W, "a plain unlock: the spinner takes it");
    assert_eq!(log.calls(), []);
}

#[test]
fn receiver_of_a_fair_handoff_takes_the_lock_and_leaves_starvation_mode() {
    let w = Word::new(LOCKED | W); // another waiter, older than us
    let q = Script::new(&w).then(|w, log| {
        assert_eq!(w.get(), LOCKED | W2);
        unlock_fair(w, log);
        assert_eq!(w.get(), STARVING | W2);
        true // we are the front waiter
    });
    do_lock(&w, &q);
    q.assert_done();
    // −11: LOCKED, one waiter fewer, normal mode again (we waited less than 1 ms).
    assert_eq!(w.get(), LOCKED | W);
    assert_eq!(q.calls(), [acq(false), rel(true)]);
    // A fair unlock of our own hands the lock on to the remaining waiter.
    unlock_fair(&w, &q.log);
    assert_eq!(w.get(), STARVING | W);
}

#[test]
fn receiver_of_a_fair_handoff_that_starved_keeps_starvation_mode() {
    let w = Word::new(LOCKED | W);
    let q = Script::new(&w).then(|w, log| {
        advance(2 * MS);
        unlock_fair(w, log);
        true
    });
    do_lock(&w, &q);
    q.assert_done();
    // −7: LOCKED, one waiter fewer, still starving (as Go's lock would be once we woke).
    assert_eq!(w.get(), LOCKED | STARVING | W);
}

#[test]
fn spinner_announces_woken_so_unlock_wakes_no_sleeper() {
    if !crate::spin::multicore(false) {
        eprintln!("single core: no spinning, nothing to check");
        return;
    }
    let w = Word::new(LOCKED | W);
    let log = Log::default();
    let l = log.clone();
    // Once the spinner has announced itself, the holder unlocks.
    w.on(move |op, w| {
        if matches!(op, Op::Load) && w.get() & WOKEN != 0 {
            unlock(w, &l);
            return false;
        }
        true
    });
    let q = Script::new(&w);
    do_lock(&w, &q);
    assert_eq!(
        log.calls(),
        [],
        "unlock woke a sleeper although a spinner was awake"
    );
    assert_eq!(q.calls(), [], "the spinner slept");
    assert_eq!(
        w.get(),
        LOCKED | W,
        "the spinner must take the lock and clear WOKEN"
    );
}

#[test]
fn newcomer_in_starvation_mode_queues_at_the_back_without_locking() {
    let w = Word::new(LOCKED | STARVING | W);
    let q = Script::new(&w).then(|w, log| {
        assert_eq!(w.get(), LOCKED | STARVING | W2);
        // The older waiter gets the hand-off, stays starving, then hands off to us.
        other_unlocks(w, log);
        w.fetch_add(LOCKED.wrapping_sub(W));
        assert_eq!(w.get(), LOCKED | STARVING | W);
        other_unlocks(w, log);
        true
    });
    do_lock(&w, &q);
    q.assert_done();
    // Not starving (no time passed) and the last waiter: −11.
    assert_eq!(w.get(), LOCKED);
    assert_eq!(q.calls(), [acq(false), rel(true), rel(true)]);
}

#[test]
fn handoff_to_a_waiter_that_did_not_starve_leaves_starvation_mode_with_others_queued() {
    let w = Word::new(LOCKED | STARVING | W);
    let q = Script::new(&w).then(|w, log| {
        w.set(w.get() + W); // a third waiter queues behind us
        other_unlocks(w, log); // hand-off to the oldest waiter
        w.fetch_add(LOCKED.wrapping_sub(W)); // its fix-up: −7, still starving
        advance(MS / 2);
        other_unlocks(w, log); // hand-off to us
        assert_eq!(w.get(), STARVING | W2);
        true
    });
    do_lock(&w, &q);
    q.assert_done();
    // −11: LOCKED, one waiter fewer, normal mode again; the third waiter still counted.
    assert_eq!(w.get(), LOCKED | W);
}

mod deadlines;
mod threads;
