//! The coherence model (`--cfg gomutex_coherence`): the facade's atomics count the cache-line
//! transfers a many-core machine would make, on a machine of any size.
//!
//! The threads of a [`run`] advance in lock-step: exactly one runs a facade operation at a
//! time, in rounds in which every runnable thread makes one operation (a parked thread is
//! skipped until it is woken), as if every thread had a core of its own and every operation
//! took one tick. The order within a round is shuffled by a generator of the schedule's own
//! with a fixed seed: in a fixed order, loops of a fixed length fall into step with the
//! schedule, and a count could swing by 5× with one operation added to a reader's section.
//! Between two of its operations a thread runs freely, but only on its own data, so a run is
//! deterministic: the same program gives the same counts on any machine.
//!
//! Each operation is an access to a 64-byte line (the atomic's address / 64). The model
//! keeps, per line, which thread wrote it last and how many writes it has had, and per thread
//! which of those writes it has seen, and counts a **transfer** when an access must take the
//! line from another core:
//!
//! * a store or read-modify-write (a compare-and-swap whether or not it succeeds: x86's
//!   `lock cmpxchg` takes the line exclusive either way) of a line another thread wrote last;
//! * a load of a line another thread wrote since this thread last read or wrote it.
//!
//! Invalidating copies other threads merely read is not counted (no data moves).
//!
//! Parking (`park/coherence.rs`) is a mock on the same schedule: a park or unpark is a
//! read-modify-write of a line of its own per key (`parking_lot_core`'s bucket lock), a
//! wake-up a store by the waker to a line of the sleeper's (its futex word) and a load of it
//! by the sleeper once it runs: the transfers a sleep costs beside the lock's own. Timed waits
//! never time out in the model. The starvation clock ([`crate::clock::Monotonic`]) counts
//! rounds of the schedule, one round standing for [`NS_PER_ROUND`] ns.
//!
//! Threads outside a run (the one building the lock, say) use the atomics directly, counted
//! nowhere.

use core::sync::atomic::{AtomicU64 as RealU64, AtomicUsize as RealUsize, Ordering};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::Thread;

/// Nanoseconds one round of the schedule (one operation of every running thread) stands for,
/// for the 1 ms starvation rule: about one uncontended atomic operation.
pub const NS_PER_ROUND: u64 = 10;

/// What a run of the model counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Cache-line transfers (module docs).
    pub transfers: u64,
    /// Operations on the facade (atomics, spin hints, yields, parks), all threads.
    pub steps: u64,
    /// Rounds of the schedule.
    pub rounds: u64,
    /// Times a thread went to sleep.
    pub parks: u64,
}

/// How an access uses its line.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Load,
    Write,
}

/// A line's history.
#[derive(Default)]
struct Line {
    /// The thread that wrote it last, if any did in this run.
    last_writer: Option<usize>,
    /// Writes so far.
    version: u64,
    /// Per thread, the version it last read or wrote.
    seen: Vec<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Runnable,
    Parked,
    Done,
}

/// A parked thread in the mock's queue (arrival order).
struct Sleeper {
    key: usize,
    token: usize,
    thread: usize,
}

/// The state of the run in progress.
struct Run {
    handles: Vec<Thread>,
    state: Vec<State>,
    /// The token each woken thread is to return.
    woken: Vec<Option<usize>>,
    queue: Vec<Sleeper>,
    lines: HashMap<usize, Line>,
    counts: Counts,
    /// This round's order of the threads, and the position in it of the thread running.
    order: Vec<usize>,
    pos: usize,
    /// The schedule's random state (xorshift64), 0 for round-robin rounds in index order.
    rng: u64,
}

/// The thread whose turn it is (`usize::MAX`: nobody's).
static TURN: RealUsize = RealUsize::new(usize::MAX);
/// Rounds so far: the starvation clock.
static ROUNDS: RealU64 = RealU64::new(0);
/// The run in progress.
static RUN: Mutex<Option<Run>> = Mutex::new(None);
/// One run at a time.
static SERIAL: Mutex<()> = Mutex::new(());

std::thread_local! {
    /// This thread's index in the run, if it takes part in one.
    static ME: Cell<Option<usize>> = const { Cell::new(None) };
    /// Inside a park or unpark (its closures run while the queue is "locked"): accesses are
    /// counted but are no steps of their own.
    static CRITICAL: Cell<bool> = const { Cell::new(false) };
    /// What this thread does as it exits, as its last steps in the run ([`at_exit`]).
    static AT_EXIT: Cell<Option<fn()>> = const { Cell::new(None) };
}

/// Runs `f` as the calling thread's last steps in its run, where its thread-local destructor
/// would run at the thread's real exit, after the run has let the thread go and while other
/// threads still run: counted there, the destructor would race with them and a run would
/// not be deterministic. Outside a run, nothing.
pub(crate) fn at_exit(f: fn()) {
    if ME.get().is_some() {
        AT_EXIT.set(Some(f));
    }
}

/// Lines the mock parking lot adds: a bucket per key, a futex word per thread. Real lines are
/// addresses / 64 (below 2^58), so these never collide with one.
const BUCKET_LINE: usize = 1 << 62;
const PARKER_LINE: usize = 2 << 62;

fn run_state() -> MutexGuard<'static, Option<Run>> {
    RUN.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with_run<R>(f: impl FnOnce(&mut Run) -> R) -> R {
    f(run_state()
        .as_mut()
        .expect("coherence model: no run in progress"))
}

fn wait_turn(me: usize) {
    while TURN.load(Ordering::Acquire) != me {
        std::thread::park();
    }
}

impl Run {
    fn record(&mut self, me: usize, line: usize, access: Access) {
        let n = self.handles.len();
        let l = self.lines.entry(line).or_default();
        if l.seen.is_empty() {
            l.seen = vec![0; n];
        }
        let transfer = match access {
            Access::Write => l.last_writer.is_some_and(|w| w != me),
            Access::Load => l.seen[me] < l.version,
        };
        if access == Access::Write {
            l.version += 1;
            l.last_writer = Some(me);
        }
        l.seen[me] = l.version;
        self.counts.transfers += u64::from(transfer);
    }

    /// The end of `me`'s step: the turn goes to the next runnable thread in this round's
    /// order, or, at the end of the round, the first runnable one of the next round's.
    fn pass(&mut self, me: usize) {
        self.counts.steps += 1;
        let n = self.handles.len();
        let mut fresh = 0;
        let next = loop {
            self.pos += 1;
            if self.pos == n {
                if fresh == 1 {
                    break None;
                }
                fresh += 1;
                self.new_round();
            }
            let t = self.order[self.pos];
            if self.state[t] == State::Runnable {
                break Some(t);
            }
        };
        let Some(next) = next else {
            if self.state.contains(&State::Parked) {
                eprintln!("coherence model: every thread is asleep (a lost wake-up)");
                std::process::abort();
            }
            TURN.store(usize::MAX, Ordering::Release);
            return;
        };
        if next != me {
            TURN.store(next, Ordering::Release);
            self.handles[next].unpark();
        }
    }

    /// A new round: every thread gets one step, in a new order (a shuffle by the schedule's
    /// own generator, so that no thread is always first or always last).
    fn new_round(&mut self) {
        self.counts.rounds += 1;
        ROUNDS.store(self.counts.rounds, Ordering::Relaxed);
        self.pos = 0;
        if self.rng == 0 {
            return;
        }
        for i in (1..self.order.len()).rev() {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let j = (self.rng % (i as u64 + 1)) as usize;
            self.order.swap(i, j);
        }
    }
}

/// An access by the calling thread to the line of `addr`, running `op` in its step (or, outside
/// a run, just running it).
#[inline]
fn access<R>(addr: usize, write: bool, op: impl FnOnce() -> R) -> R {
    let Some(me) = ME.get() else {
        return op();
    };
    let critical = CRITICAL.get();
    if !critical {
        wait_turn(me);
    }
    let r = op();
    with_run(|run| {
        let access = if write { Access::Write } else { Access::Load };
        run.record(me, addr / 64, access);
        if !critical {
            run.pass(me);
        }
    });
    r
}

/// A step that touches no line (a spin hint, a yield).
pub(crate) fn step() {
    if let (Some(me), false) = (ME.get(), CRITICAL.get()) {
        wait_turn(me);
        with_run(|run| run.pass(me));
    }
}

/// Rounds of the schedule so far (the starvation clock).
pub(crate) fn rounds() -> u64 {
    ROUNDS.load(Ordering::Relaxed)
}

/// Runs `body(i)` on `threads` threads in lock-step (module docs) and returns their results
/// and what the model counted. Runs are serialised.
pub fn run<S: Send>(threads: usize, body: impl Fn(usize) -> S + Sync) -> (Vec<S>, Counts) {
    run_with(threads, true, body)
}

/// [`run`], in rounds shuffled as [`run`]'s are (`shuffled`), or always in index order:
/// thread 0, 1, …, n − 1, 0, … (for scripted tests of the counting rules; Go's loops fall into
/// step with such a schedule and their counts swing with a single added operation).
pub fn run_with<S: Send>(
    threads: usize,
    shuffled: bool,
    body: impl Fn(usize) -> S + Sync,
) -> (Vec<S>, Counts) {
    assert!(threads > 0);
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let body = &body;
    std::thread::scope(|s| {
        let joins: Vec<_> = (0..threads)
            .map(|i| {
                s.spawn(move || {
                    ME.set(Some(i));
                    wait_turn(i);
                    let r = body(i);
                    if let Some(f) = AT_EXIT.take() {
                        f();
                    }
                    wait_turn(i);
                    with_run(|run| {
                        run.state[i] = State::Done;
                        run.pass(i);
                    });
                    ME.set(None);
                    r
                })
            })
            .collect();
        *run_state() = Some(Run {
            handles: joins.iter().map(|j| j.thread().clone()).collect(),
            state: vec![State::Runnable; threads],
            woken: vec![None; threads],
            queue: Vec::new(),
            lines: HashMap::new(),
            counts: Counts::default(),
            order: (0..threads).collect(),
            pos: 0,
            rng: if shuffled { 0x9E37_79B9_7F4A_7C15 } else { 0 },
        });
        ROUNDS.store(0, Ordering::Relaxed);
        TURN.store(0, Ordering::Release);
        joins[0].thread().unpark();
        let results = joins
            .into_iter()
            .map(|j| j.join().expect("a thread of the model panicked"))
            .collect();
        let counts = run_state().take().expect("the run").counts;
        (results, counts)
    })
}

// ---------------------------------------------------------------------------------------------
// The mock parking lot (`crate::park` under `--cfg gomutex_coherence`)

/// Runs `f` as the critical section of a park or unpark call of the calling thread: its
/// accesses are counted without being steps.
fn critical<R>(f: impl FnOnce() -> R) -> R {
    CRITICAL.set(true);
    let r = f();
    CRITICAL.set(false);
    r
}

fn me_in_run() -> usize {
    ME.get()
        .expect("coherence model: a thread outside the run parks or unparks")
}

/// `park`: queue the caller on `key` if `validate` (run as if the queue were locked) says so,
/// and sleep until an unpark picks it. Returns the unpark's token, or `None` if `validate`
/// refused.
pub(crate) fn park(key: usize, validate: impl FnOnce() -> bool, token: usize) -> Option<usize> {
    let me = me_in_run();
    wait_turn(me);
    with_run(|run| run.record(me, BUCKET_LINE | key, Access::Write));
    if !critical(validate) {
        with_run(|run| run.pass(me));
        return None;
    }
    with_run(|run| {
        run.queue.push(Sleeper {
            key,
            token,
            thread: me,
        });
        run.state[me] = State::Parked;
        run.counts.parks += 1;
        run.pass(me);
    });
    // Our turn comes again only once an unpark has made us runnable.
    wait_turn(me);
    with_run(|run| {
        run.record(me, PARKER_LINE | me, Access::Load);
        let t = run.woken[me].take().expect("woken without a token");
        run.pass(me);
        Some(t)
    })
}

/// What [`unpark_filter`]'s filter says of a sleeper (`parking_lot_core::FilterOp`'s choices;
/// the park module maps its own onto them, so this lower layer does not import it).
pub(crate) enum Pick {
    /// Wake it.
    Wake,
    /// Leave it asleep, look at the next.
    Skip,
    /// Leave it and every later one asleep.
    Stop,
}

/// `unpark_filter`: walk the sleepers on `key` oldest first, wake those `filter` picks, then
/// run `callback` with their number; its result is their token. Returns how many woke.
pub(crate) fn unpark_filter(
    key: usize,
    mut filter: impl FnMut(usize) -> Pick,
    callback: impl FnOnce(usize) -> usize,
) -> usize {
    let me = me_in_run();
    wait_turn(me);
    let sleepers: Vec<(usize, usize)> = with_run(|run| {
        run.record(me, BUCKET_LINE | key, Access::Write);
        run.queue
            .iter()
            .filter(|s| s.key == key)
            .map(|s| (s.thread, s.token))
            .collect()
    });
    let mut picked = Vec::new();
    critical(|| {
        for (thread, token) in sleepers {
            match filter(token) {
                Pick::Wake => picked.push(thread),
                Pick::Skip => {}
                Pick::Stop => break,
            }
        }
    });
    with_run(|run| run.queue.retain(|s| !picked.contains(&s.thread)));
    let token = critical(|| callback(picked.len()));
    with_run(|run| {
        for &t in &picked {
            run.record(me, PARKER_LINE | t, Access::Write);
            run.woken[t] = Some(token);
            run.state[t] = State::Runnable;
        }
        run.pass(me);
    });
    picked.len()
}

/// Threads parked on `key` right now.
pub(crate) fn parked(key: usize) -> usize {
    run_state()
        .as_ref()
        .map_or(0, |run| run.queue.iter().filter(|s| s.key == key).count())
}

// ---------------------------------------------------------------------------------------------
// The counting atomics

macro_rules! counting_atomic {
    ($name:ident, $real:ident, $t:ty) => {
        /// `core`'s atomic of the same name, every operation an access of the model.
        #[repr(transparent)]
        pub struct $name(core::sync::atomic::$real);

        impl $name {
            /// A new atomic.
            pub const fn new(v: $t) -> Self {
                Self(core::sync::atomic::$real::new(v))
            }
            #[inline]
            fn addr(&self) -> usize {
                self as *const Self as usize
            }
            /// A load: a transfer if another thread wrote the line since we last saw it.
            pub fn load(&self, o: Ordering) -> $t {
                access(self.addr(), false, || self.0.load(o))
            }
            /// A store.
            pub fn store(&self, v: $t, o: Ordering) {
                access(self.addr(), true, || self.0.store(v, o))
            }
            /// A swap.
            pub fn swap(&self, v: $t, o: Ordering) -> $t {
                access(self.addr(), true, || self.0.swap(v, o))
            }
            /// A compare-and-swap (a write of the line even when it fails).
            pub fn compare_exchange(
                &self,
                old: $t,
                new: $t,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$t, $t> {
                access(self.addr(), true, || {
                    self.0.compare_exchange(old, new, success, failure)
                })
            }
            /// As [`compare_exchange`](Self::compare_exchange) (never fails spuriously here).
            pub fn compare_exchange_weak(
                &self,
                old: $t,
                new: $t,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$t, $t> {
                self.compare_exchange(old, new, success, failure)
            }
            /// An add (wrapping).
            pub fn fetch_add(&self, v: $t, o: Ordering) -> $t {
                access(self.addr(), true, || self.0.fetch_add(v, o))
            }
            /// A subtract (wrapping).
            pub fn fetch_sub(&self, v: $t, o: Ordering) -> $t {
                access(self.addr(), true, || self.0.fetch_sub(v, o))
            }
            /// A bitwise or.
            pub fn fetch_or(&self, v: $t, o: Ordering) -> $t {
                access(self.addr(), true, || self.0.fetch_or(v, o))
            }
            /// A bitwise and.
            pub fn fetch_and(&self, v: $t, o: Ordering) -> $t {
                access(self.addr(), true, || self.0.fetch_and(v, o))
            }
            /// The value, from an owner (no access).
            pub fn into_inner(self) -> $t {
                self.0.into_inner()
            }
            /// The value, from an owner (no access).
            pub fn get_mut(&mut self) -> &mut $t {
                self.0.get_mut()
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new(0)
            }
        }
    };
}

counting_atomic!(AtomicU32, AtomicU32, u32);
counting_atomic!(AtomicU64, AtomicU64, u64);
counting_atomic!(AtomicUsize, AtomicUsize, usize);
