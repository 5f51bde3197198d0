//! Loom harness for `gomutex`: checked wrappers around the real algorithm.
//!
//! The models in `tests/` run the code that ships (`gomutex::algo`, `gomutex::sema::ParkSema`,
//! `gomutex::RawMutex`, `gomutex::Mutex`, `gomutex::Condvar`), built with `--cfg gomutex_loom`
//! (set by `.cargo/config.toml`), so its atomics are loom's, parking is loom's mock and the clock
//! is virtual. This crate adds what the models check with:
//!
//! * [`CheckedWord`] — a [`StateWord`] that forwards every operation to gomutex's own
//!   `impl StateWord for AtomicU32` (same orderings) and feeds every transition to a [`Ghost`]
//!   that checks the invariants of `docs/algorithm.md` on each one;
//! * [`Logged`] — a [`WaitQueue`] wrapper that tells the ghost about every sleep, wake-up and
//!   token, so the ghost knows who owns `WOKEN`, who receives a hand-off, and who is asleep;
//! * [`TimedQueue`] — a test-only queue with the [`WaitQueue`] contract whose timed
//!   `acquire` may time out (loom's spurious wake-up of its `Notify` is the deadline passing),
//!   to model the deadline path that the parking mock cannot;
//! * clocks that force the starvation decision ([`AlwaysStarving`], [`NeverStarving`]);
//! * [`model`], which runs a model with a preemption bound and reports how many executions it
//!   explored and how long it took, and [`Stats`], counters kept *across* executions so a model
//!   can assert that an interesting path (hand-off, token kept before sleep, …) was really taken.
//!
//! Ghost state lives in a `std::sync::Mutex`, outside loom's view on purpose: loom threads are
//! coroutines on one OS thread and only switch at loom operations, so updating the ghost right
//! after a loom atomic operation is atomic with it, and the ghost adds no happens-before edge
//! that could hide a missing one in the code under test.

#[cfg(not(gomutex_loom))]
compile_error!(
    "loom-tests must be built with `--cfg gomutex_loom`: run `cargo test --release` inside \
     loom-tests/ (its .cargo/config.toml sets it); a RUSTFLAGS environment variable overrides \
     that file, so add `--cfg gomutex_loom` to it if you set one"
);

use gomutex::algo::{self, waiters, CasError, StateWord, LOCKED, STARVING, WAITER, WOKEN};
use gomutex::clock::Clock;
use gomutex::rwalgo::{
    BiasFault, RwParts, RwState, BIAS, IDLE_SCANS, OVERLAPS, PHASE, WRITER_PARKED,
};
use gomutex::sema::{ParkSema, WaitQueue};
use loom::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed as LoomRelaxed, Release, SeqCst};
use loom::sync::atomic::{AtomicBool, AtomicU32};
use loom::thread::ThreadId;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Running models
// ---------------------------------------------------------------------------------------------

/// Run `f` under loom with `preemption_bound` (unless `LOOM_MAX_PREEMPTIONS` overrides it), and
/// print the number of executions and the time taken (visible with `--nocapture`).
pub fn model<F>(name: &str, preemption_bound: usize, f: F) -> usize
where
    F: Fn() + Sync + Send + 'static,
{
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(preemption_bound);
    }
    let execs = Arc::new(AtomicUsize::new(0));
    let e = execs.clone();
    let start = Instant::now();
    b.check(move || {
        e.fetch_add(1, Relaxed);
        f()
    });
    let n = execs.load(Relaxed);
    eprintln!(
        "[loom] {name}: {n} executions, preemption bound {:?}, {:.2} s",
        b.preemption_bound,
        start.elapsed().as_secs_f64()
    );
    n
}

/// [`model`] with a fresh [`Stats`] shared by every execution: `f` gets the counters (to build
/// its [`Harness`]), and they are printed after the model and returned for its assertions.
pub fn model_with_stats<F>(name: &str, preemption_bound: usize, f: F) -> Arc<Stats>
where
    F: Fn(&Arc<Stats>) + Sync + Send + 'static,
{
    let stats = Stats::new();
    let s = stats.clone();
    model(name, preemption_bound, move || f(&s));
    eprintln!("{stats:?}");
    stats
}

/// Join every thread of a model, propagating a panic.
pub fn join_all<T>(threads: impl IntoIterator<Item = loom::thread::JoinHandle<T>>) {
    for t in threads {
        t.join().unwrap();
    }
}

/// The value of one counter (of [`Stats`], or any other kept across executions).
pub fn get(c: &AtomicUsize) -> usize {
    c.load(Relaxed)
}

/// Counters kept across all executions of one model.
#[derive(Default)]
pub struct Stats {
    /// Starvation hand-offs completed (receiver fix-ups).
    pub handoffs: AtomicUsize,
    /// Fix-ups that left starvation mode because the receiver was the last waiter.
    pub leave_last: AtomicUsize,
    /// Fix-ups that left starvation mode because the receiver had not waited long.
    pub leave_short: AtomicUsize,
    /// Fix-ups that stayed in starvation mode.
    pub stay_starving: AtomicUsize,
    /// CASes that switched the lock to starvation mode.
    pub starving_set: AtomicUsize,
    /// Normal-mode wake-ups (unlock's `-WAITER | WOKEN` CAS).
    pub normal_wakeups: AtomicUsize,
    /// Spinners that announced themselves with WOKEN.
    pub announces: AtomicUsize,
    /// Tokens released before their consumer had reached the queue (normal / hand-off).
    pub early_normal: AtomicUsize,
    pub early_handoff: AtomicUsize,
    /// Re-queued sleeps (`lifo == true`).
    pub requeues: AtomicUsize,
    /// `try_lock` calls that failed / failed while STARVING was set / succeeded.
    pub try_fail: AtomicUsize,
    pub try_fail_starving: AtomicUsize,
    pub try_ok: AtomicUsize,
    /// Acquisitions by the lock fast path / the slow-path CAS.
    pub fast: AtomicUsize,
    pub slow_cas: AtomicUsize,
    /// Timed sleeps that timed out, and of those, while a hand-off was in flight.
    pub timeouts: AtomicUsize,
    pub timeouts_during_handoff: AtomicUsize,
    /// Waiters that removed themselves from the count (`deregister`), and of those, while
    /// starvation mode / a hand-off was in flight.
    pub deregisters: AtomicUsize,
    pub deregisters_starving: AtomicUsize,
    pub deregisters_handoff_in_flight: AtomicUsize,
    /// Waiters whose sleep timed out but then received a token (deregistering was unsafe).
    pub token_after_timeout: AtomicUsize,
    /// Timed lock calls that failed / succeeded.
    pub timed_fail: AtomicUsize,
    pub timed_ok: AtomicUsize,
    /// Contenders that gave up at their deadline while owning WOKEN (cleared it).
    pub gave_up_clearing_woken: AtomicUsize,
}

impl Stats {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}

impl fmt::Debug for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = |c: &AtomicUsize| c.load(Relaxed);
        f.debug_struct("Stats")
            .field("handoffs", &g(&self.handoffs))
            .field("leave_last", &g(&self.leave_last))
            .field("leave_short", &g(&self.leave_short))
            .field("stay_starving", &g(&self.stay_starving))
            .field("starving_set", &g(&self.starving_set))
            .field("normal_wakeups", &g(&self.normal_wakeups))
            .field("announces", &g(&self.announces))
            .field("early_normal", &g(&self.early_normal))
            .field("early_handoff", &g(&self.early_handoff))
            .field("requeues", &g(&self.requeues))
            .field("try_fail", &g(&self.try_fail))
            .field("try_fail_starving", &g(&self.try_fail_starving))
            .field("try_ok", &g(&self.try_ok))
            .field("fast", &g(&self.fast))
            .field("slow_cas", &g(&self.slow_cas))
            .field("timeouts", &g(&self.timeouts))
            .field("timeouts_during_handoff", &g(&self.timeouts_during_handoff))
            .field("deregisters", &g(&self.deregisters))
            .field("deregisters_starving", &g(&self.deregisters_starving))
            .field(
                "deregisters_handoff_in_flight",
                &g(&self.deregisters_handoff_in_flight),
            )
            .field("token_after_timeout", &g(&self.token_after_timeout))
            .field("timed_fail", &g(&self.timed_fail))
            .field("timed_ok", &g(&self.timed_ok))
            .field("gave_up_clearing_woken", &g(&self.gave_up_clearing_woken))
            .finish()
    }
}

fn bump(c: &AtomicUsize) {
    c.fetch_add(1, Relaxed);
}

fn me() -> ThreadId {
    loom::thread::current().id()
}

// ---------------------------------------------------------------------------------------------
// Ghost state
// ---------------------------------------------------------------------------------------------

/// Who owns the WOKEN bit (invariant 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    None,
    /// A spinner that announced itself.
    Spinner(ThreadId),
    /// A normal-mode unlock set it; the thread that consumes its token will own it.
    Token,
    /// A waiter woken by a normal-mode unlock.
    Awake(ThreadId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Fast,
    Cas,
    FetchAdd,
    Release,
}

/// The abstract state the real state word must agree with, updated on every transition.
pub struct Ghost {
    stats: Arc<Stats>,
    /// Thread holding the lock (set by the transition that sets LOCKED).
    holder: Option<ThreadId>,
    woken: Woken,
    /// Registered waiters that have consumed no token and have not left (invariant 5).
    sleepers: Vec<ThreadId>,
    /// Normal-mode wake-ups decided (unlock's CAS) and not consumed yet.
    normal_tokens: u32,
    /// Of those, the unlocker that has not called `release(false)` yet.
    normal_unreleased: Option<ThreadId>,
    /// Starvation-mode unlocker between its `-LOCKED` and its `release(true)`.
    handoff_unreleased: Option<ThreadId>,
    /// Hand-off tokens released and not consumed.
    handoff_tokens: u32,
    /// Threads that consumed a hand-off token and have not done the fix-up yet.
    receivers: Vec<ThreadId>,
    /// Threads inside `try_lock`.
    in_try_lock: Vec<ThreadId>,
    /// Threads inside `WaitQueue::acquire`.
    in_acquire: Vec<ThreadId>,
    /// Threads that have slept in their current lock call (the next sleep must be lifo).
    slept: Vec<ThreadId>,
    /// Threads whose last sleep timed out.
    timed_out: Vec<ThreadId>,
    /// Last state value each thread observed (for try_lock's failure condition).
    last_seen: HashMap<ThreadId, u32>,
    /// The token in flight was kept by the queue (nobody asleep when it was released).
    token_kept: bool,
    /// Everything that happened in this execution, for failure messages.
    history: Vec<Event>,
    /// The state after the last transition.
    last_state: u32,
}

/// One step of an execution, as the ghost saw it.
#[derive(Clone, Copy)]
enum Event {
    Transition(ThreadId, Op, u32, u32),
    Sleep(ThreadId, bool),
    Woke(ThreadId, bool),
    Release(ThreadId, bool),
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Event::Transition(t, op, o, n) => write!(f, "{t:?} {op:?} {} -> {}", show(o), show(n)),
            Event::Sleep(t, lifo) => write!(f, "{t:?} queue.acquire(lifo={lifo})"),
            Event::Woke(t, got) => write!(
                f,
                "{t:?} queue.acquire returned {}",
                if got {
                    "true (token)"
                } else {
                    "false (timed out)"
                }
            ),
            Event::Release(t, h) => write!(f, "{t:?} queue.release(handoff={h})"),
        }
    }
}

/// An execution, one event a line.
fn fmt_history(h: &[Event]) -> String {
    let mut s = String::from("\n  execution so far (as the ghost saw it):");
    for e in h {
        s.push_str(&format!("\n    {e:?}"));
    }
    s
}

fn remove(v: &mut Vec<ThreadId>, t: ThreadId) -> bool {
    if let Some(i) = v.iter().position(|&x| x == t) {
        v.remove(i);
        true
    } else {
        false
    }
}

fn show(s: u32) -> String {
    format!(
        "{{L={} W={} S={} N={}}}",
        s & LOCKED,
        (s & WOKEN) >> 1,
        (s & STARVING) >> 2,
        waiters(s)
    )
}

impl Ghost {
    fn new(stats: Arc<Stats>) -> Self {
        Self {
            stats,
            holder: None,
            woken: Woken::None,
            sleepers: Vec::new(),
            normal_tokens: 0,
            normal_unreleased: None,
            handoff_unreleased: None,
            handoff_tokens: 0,
            receivers: Vec::new(),
            in_try_lock: Vec::new(),
            in_acquire: Vec::new(),
            slept: Vec::new(),
            timed_out: Vec::new(),
            last_seen: HashMap::new(),
            token_kept: false,
            history: Vec::new(),
            last_state: 0,
        }
    }

    fn observe(&mut self, t: ThreadId, v: u32) {
        self.last_seen.insert(t, v);
    }

    /// One successful read-modify-write of the state word by thread `t`.
    fn transition(&mut self, t: ThreadId, op: Op, old: u32, new: u32) {
        self.observe(t, new);
        self.history.push(Event::Transition(t, op, old, new));
        let history = std::mem::take(&mut self.history);
        let ctx = || {
            format!(
                "{op:?} by {t:?}: {} -> {}{}",
                show(old),
                show(new),
                fmt_history(&history)
            )
        };
        let (ol, ow, os, on) = (
            old & LOCKED != 0,
            old & WOKEN != 0,
            old & STARVING != 0,
            waiters(old),
        );
        let (nl, nw, ns, nn) = (
            new & LOCKED != 0,
            new & WOKEN != 0,
            new & STARVING != 0,
            waiters(new),
        );
        assert!(
            !self.in_acquire.contains(&t),
            "state changed from inside the queue: {}",
            ctx()
        );
        // Invariant 5: the count never underflows (a wrapped count is huge) nor reaches 29 bits here.
        assert!(nn < 16, "waiter count out of range: {}", ctx());
        let in_try = self.in_try_lock.contains(&t);
        assert!(
            !in_try || op == Op::Cas,
            "try_lock did something other than one CAS: {}",
            ctx()
        );
        match op {
            Op::Fast => assert!(old == 0 && new == LOCKED, "fast path: {}", ctx()),
            Op::Release => {
                assert!(
                    ol && new == old - LOCKED,
                    "unlock of an unlocked lock: {}",
                    ctx()
                );
                if ns {
                    // Starvation-mode unlock: a hand-off is now owed to the front waiter.
                    assert!(
                        self.handoff_unreleased.is_none(),
                        "two hand-offs: {}",
                        ctx()
                    );
                    self.handoff_unreleased = Some(t);
                }
            }
            Op::FetchAdd => {
                // The hand-off receiver's fix-up (invariant 7): it must see L = 0, W = 0, N >= 1.
                assert!(
                    remove(&mut self.receivers, t),
                    "fix-up by a thread that received no hand-off: {}",
                    ctx()
                );
                assert!(
                    os && !ol && !ow && on >= 1,
                    "fix-up from a bad state: {}",
                    ctx()
                );
                assert!(nl && nn == on - 1, "fix-up result: {}", ctx());
                bump(&self.stats.handoffs);
                if !ns {
                    if on == 1 {
                        bump(&self.stats.leave_last);
                    } else {
                        bump(&self.stats.leave_short);
                    }
                } else {
                    bump(&self.stats.stay_starving);
                }
                // Invariant 9: the last waiter leaves starvation mode.
                assert!(
                    !(ns && nn == 0),
                    "starving with no waiter after fix-up: {}",
                    ctx()
                );
            }
            Op::Cas if in_try => {
                // Invariant 13: try_lock only sets LOCKED on a free, non-starving lock.
                assert!(
                    new == old | LOCKED && !ol && !os,
                    "try_lock changed more than LOCKED or took a starving lock: {}",
                    ctx()
                );
            }
            Op::Cas if nn == on + 1 => {
                // Registration (lockSlow enqueue): only while held or starving.
                assert!(ol || os, "registered on a free lock: {}", ctx());
                assert!(nl == (ol || !os), "enqueue CAS L bit: {}", ctx());
                if ns && !os {
                    assert!(ol && nl, "STARVING set while the lock was free: {}", ctx());
                    bump(&self.stats.starving_set);
                }
                assert!(!os || ns, "enqueue CAS cleared STARVING: {}", ctx());
                self.clear_woken_if_changed(t, ow, nw, &ctx);
                assert!(
                    !self.sleepers.contains(&t) && !self.receivers.contains(&t),
                    "registered twice: {}",
                    ctx()
                );
                self.sleepers.push(t);
            }
            Op::Cas if nn + 1 == on && nw && !ow => {
                // Normal-mode unlock picks a waiter to wake (invariant 10).
                assert!(
                    !ol && !os && new == (old - WAITER) | WOKEN,
                    "unlock wake: {}",
                    ctx()
                );
                assert_eq!(self.woken, Woken::None, "WOKEN owned but clear: {}", ctx());
                assert!(
                    self.normal_tokens == 0 && self.normal_unreleased.is_none(),
                    "two normal-mode wake-ups in flight: {}",
                    ctx()
                );
                self.woken = Woken::Token;
                self.normal_tokens += 1;
                self.normal_unreleased = Some(t);
                bump(&self.stats.normal_wakeups);
            }
            Op::Cas if nn + 1 == on => {
                // A timed-out waiter leaves the count (algo::deregister).
                assert!(
                    remove(&mut self.sleepers, t),
                    "deregister by a thread that is not a tokenless registered waiter: {}",
                    ctx()
                );
                assert!(
                    self.timed_out.contains(&t),
                    "deregister without a timed-out sleep: {}",
                    ctx()
                );
                let expect = if nn == 0 {
                    (old - WAITER) & !STARVING
                } else {
                    old - WAITER
                };
                assert_eq!(new, expect, "deregister result: {}", ctx());
                // During a hand-off the receiver stays counted, and so does one more waiter:
                // the receiver may have read "not the last" before this and keep STARVING.
                let handoff_in_flight = os && !ol;
                assert!(
                    !handoff_in_flight || on >= 3,
                    "left the count during a hand-off with fewer than two others counted: {}",
                    ctx()
                );
                bump(&self.stats.deregisters);
                if os {
                    bump(&self.stats.deregisters_starving);
                }
                if handoff_in_flight {
                    bump(&self.stats.deregisters_handoff_in_flight);
                }
            }
            Op::Cas if nn == on && !ow && nw => {
                // A spinner announces itself.
                assert!(
                    new == old | WOKEN && ol && !os && on >= 1,
                    "WOKEN announced in the wrong state: {}",
                    ctx()
                );
                assert_eq!(self.woken, Woken::None, "WOKEN set twice: {}", ctx());
                self.woken = Woken::Spinner(t);
                bump(&self.stats.announces);
            }
            Op::Cas if nn == on && ow && new == old & !WOKEN => {
                // A contender gives up at its deadline and clears the WOKEN it owns.
                assert!(ol || os, "gave up on a free lock: {}", ctx());
                self.clear_woken_if_changed(t, ow, nw, &ctx);
                bump(&self.stats.gave_up_clearing_woken);
            }
            Op::Cas if nn == on => {
                // lockSlow acquires with its CAS (invariant 8: never while STARVING).
                assert!(!ol && !os && nl, "slow-path acquire: {}", ctx());
                assert!(
                    new & !WOKEN == (old | LOCKED) & !WOKEN,
                    "slow-path acquire changed more: {}",
                    ctx()
                );
                self.clear_woken_if_changed(t, ow, nw, &ctx);
                bump(&self.stats.slow_cas);
            }
            Op::Cas => panic!("unexpected transition: {}", ctx()),
        }
        if op == Op::Fast {
            bump(&self.stats.fast);
        }
        // LOCKED edges: mutual exclusion at the state level, and who may set LOCKED.
        if !ol && nl {
            assert!(
                self.holder.is_none(),
                "LOCKED set while held by {:?}: {}",
                self.holder,
                ctx()
            );
            assert!(
                !os || op == Op::FetchAdd,
                "a newcomer or try_lock acquired a starving lock: {}",
                ctx()
            );
            self.holder = Some(t);
        }
        if ol && !nl {
            assert_eq!(op, Op::Release, "LOCKED cleared by a non-unlock: {}", ctx());
            assert_eq!(self.holder, Some(t), "unlocked by a non-holder: {}", ctx());
            self.holder = None;
        }
        self.check_state(new, &ctx);
        self.last_state = new;
        self.history = history;
    }

    fn clear_woken_if_changed(
        &mut self,
        t: ThreadId,
        ow: bool,
        nw: bool,
        ctx: &dyn Fn() -> String,
    ) {
        if ow && !nw {
            assert!(
                self.woken == Woken::Spinner(t) || self.woken == Woken::Awake(t),
                "WOKEN cleared by {t:?}, owned by {:?}: {}",
                self.woken,
                ctx()
            );
            self.woken = Woken::None;
        }
        assert!(ow || !nw, "WOKEN set by a CAS that may not: {}", ctx());
    }

    /// Invariants of a state value against the ghost.
    fn check_state(&self, s: u32, ctx: &dyn Fn() -> String) {
        let (l, w, st, n) = (
            s & LOCKED != 0,
            s & WOKEN != 0,
            s & STARVING != 0,
            waiters(s),
        );
        // Invariant 7.
        assert!(
            !st || (!w && n >= 1),
            "STARVING needs !WOKEN and a waiter: {}",
            ctx()
        );
        // Invariant 6: WOKEN set exactly while an awake contender (or its token) exists.
        assert_eq!(
            w,
            self.woken != Woken::None,
            "WOKEN vs owner {:?}: {}",
            self.woken,
            ctx()
        );
        // Invariant 5: every registered waiter is asleep (or about to be) or a receiver, or its count
        // went to a normal-mode token in flight.
        assert_eq!(
            self.sleepers.len() + self.receivers.len(),
            n as usize + self.normal_tokens as usize,
            "waiter accounting: sleepers {:?} receivers {:?} normal tokens {}: {}",
            self.sleepers,
            self.receivers,
            self.normal_tokens,
            ctx()
        );
        // Invariant 7: STARVING && !LOCKED exactly while one hand-off is on its way to a counted
        // waiter.
        let chain = usize::from(self.handoff_unreleased.is_some())
            + self.handoff_tokens as usize
            + self.receivers.len();
        assert_eq!(chain, usize::from(st && !l), "hand-off chain: {}", ctx());
        assert!(
            self.normal_tokens == 0 || chain == 0,
            "normal and hand-off tokens at once: {}",
            ctx()
        );
        assert_eq!(l, self.holder.is_some(), "LOCKED vs holder: {}", ctx());
    }

    fn h(&self) -> String {
        fmt_history(&self.history)
    }

    fn before_acquire(&mut self, t: ThreadId, lifo: bool) {
        self.history.push(Event::Sleep(t, lifo));
        assert!(!self.in_try_lock.contains(&t), "try_lock slept{}", self.h());
        assert!(
            self.sleepers.contains(&t),
            "{t:?} sleeps without being a registered waiter{}",
            self.h()
        );
        // Invariant 11: a waiter that slept before in this lock call goes to the front.
        assert_eq!(
            lifo,
            self.slept.contains(&t),
            "{t:?}: wrong queue end{}",
            self.h()
        );
        if lifo {
            bump(&self.stats.requeues);
        } else {
            self.slept.push(t);
        }
        self.in_acquire.push(t);
    }

    fn after_acquire(&mut self, t: ThreadId, got: bool) {
        self.history.push(Event::Woke(t, got));
        assert!(remove(&mut self.in_acquire, t));
        if !got {
            bump(&self.stats.timeouts);
            if self.last_state & (STARVING | LOCKED) == STARVING {
                bump(&self.stats.timeouts_during_handoff);
            }
            if !self.timed_out.contains(&t) {
                self.timed_out.push(t);
            }
            return;
        }
        if remove(&mut self.timed_out, t) {
            bump(&self.stats.token_after_timeout);
        }
        assert!(
            remove(&mut self.sleepers, t),
            "{t:?} woke but was not a sleeper{}",
            self.h()
        );
        let early = std::mem::take(&mut self.token_kept);
        let released_normal = self.normal_tokens > 0 && self.normal_unreleased.is_none();
        if released_normal {
            assert_eq!(self.handoff_tokens, 0, "two tokens in flight{}", self.h());
            self.normal_tokens -= 1;
            assert_eq!(
                self.woken,
                Woken::Token,
                "normal token without WOKEN{}",
                self.h()
            );
            self.woken = Woken::Awake(t);
            if early {
                bump(&self.stats.early_normal);
            }
        } else {
            assert_eq!(
                self.handoff_tokens,
                1,
                "{t:?} woke with no token released{}",
                self.h()
            );
            self.handoff_tokens -= 1;
            self.receivers.push(t);
            if early {
                bump(&self.stats.early_handoff);
            }
        }
    }

    fn before_release(&mut self, t: ThreadId, handoff: bool) {
        self.history.push(Event::Release(t, handoff));
        assert!(
            !self.in_try_lock.contains(&t),
            "try_lock released a token{}",
            self.h()
        );
        if handoff {
            assert_eq!(
                self.handoff_unreleased,
                Some(t),
                "release(handoff) without a starvation-mode unlock{}",
                self.h()
            );
            self.handoff_unreleased = None;
            self.handoff_tokens += 1;
        } else {
            assert_eq!(
                self.normal_unreleased,
                Some(t),
                "release(normal) without unlock's wake CAS{}",
                self.h()
            );
            self.normal_unreleased = None;
        }
    }

    /// Everything is back to rest (invariant 4).
    fn assert_quiescent(&self) {
        assert_eq!(self.holder, None, "lock still held{}", self.h());
        assert_eq!(self.woken, Woken::None, "WOKEN still owned{}", self.h());
        assert!(
            self.sleepers.is_empty(),
            "phantom waiters {:?}{}",
            self.sleepers,
            self.h()
        );
        assert!(
            self.receivers.is_empty(),
            "hand-off not completed{}",
            self.h()
        );
        assert_eq!(
            self.normal_tokens + self.handoff_tokens,
            0,
            "tokens in flight{}",
            self.h()
        );
        assert!(self.normal_unreleased.is_none() && self.handoff_unreleased.is_none());
        assert!(self.in_acquire.is_empty() && self.in_try_lock.is_empty());
    }
}

type SharedGhost = Arc<Mutex<Ghost>>;

fn lock_ghost(g: &SharedGhost) -> MutexGuard<'_, Ghost> {
    g.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// The checked state word
// ---------------------------------------------------------------------------------------------

/// A [`StateWord`] that delegates to gomutex's own `impl StateWord for AtomicU32` (loom's
/// `AtomicU32` under the cfg, so the very orderings that ship) and checks every transition.
pub struct CheckedWord {
    atom: AtomicU32,
    ghost: SharedGhost,
    /// Negative control: unlock with `Relaxed` instead of `Release`.
    relaxed_unlock: bool,
}

impl CheckedWord {
    fn g(&self) -> MutexGuard<'_, Ghost> {
        lock_ghost(&self.ghost)
    }
    /// The current value (a loom load).
    pub fn value(&self) -> u32 {
        <AtomicU32 as StateWord>::load(&self.atom)
    }
}

impl StateWord for CheckedWord {
    fn load(&self) -> u32 {
        let t = me();
        let v = <AtomicU32 as StateWord>::load(&self.atom);
        self.g().observe(t, v);
        v
    }
    fn try_acquire_fast(&self) -> bool {
        let t = me();
        let ok = self.atom.try_acquire_fast();
        if ok {
            self.g().transition(t, Op::Fast, 0, LOCKED);
        }
        ok
    }
    fn cas(&self, old: u32, new: u32) -> Result<u32, CasError> {
        let t = me();
        let r = <AtomicU32 as StateWord>::cas(&self.atom, old, new);
        match r {
            Ok(_) => self.g().transition(t, Op::Cas, old, new),
            Err(CasError::Moved(cur)) => self.g().observe(t, cur),
            Err(CasError::OutOfTime) => unreachable!("an in-process word never runs out of time"),
        }
        r
    }
    fn fetch_add(&self, delta: u32) -> u32 {
        let t = me();
        let prev = <AtomicU32 as StateWord>::fetch_add(&self.atom, delta);
        self.g()
            .transition(t, Op::FetchAdd, prev, prev.wrapping_add(delta));
        prev
    }
    fn release_locked(&self) -> u32 {
        let t = me();
        let new = if self.relaxed_unlock {
            self.atom
                .fetch_sub(LOCKED, loom::sync::atomic::Ordering::Relaxed)
                .wrapping_sub(LOCKED)
        } else {
            <AtomicU32 as StateWord>::release_locked(&self.atom)
        };
        self.g()
            .transition(t, Op::Release, new.wrapping_add(LOCKED), new);
        new
    }
}

// ---------------------------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------------------------

/// What a model asks a queue at the end: nothing may be left in it.
pub trait Introspect {
    /// Tokens kept for future sleepers.
    fn stored(&self) -> u32;
    /// Threads asleep in the queue.
    fn sleeping(&self) -> usize;
}

impl Introspect for ParkSema {
    fn stored(&self) -> u32 {
        self.stored_tokens()
    }
    fn sleeping(&self) -> usize {
        self.parked()
    }
}

/// A [`WaitQueue`] wrapper that reports every sleep, wake-up and token to the ghost.
pub struct Logged<Q> {
    pub inner: Q,
    ghost: SharedGhost,
}

impl<Q: WaitQueue + Introspect> WaitQueue for Logged<Q> {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        let t = me();
        lock_ghost(&self.ghost).before_acquire(t, lifo);
        let got = self.inner.acquire(lifo, deadline);
        lock_ghost(&self.ghost).after_acquire(t, got);
        got
    }
    fn release(&self, handoff: bool) {
        lock_ghost(&self.ghost).before_release(me(), handoff);
        self.inner.release(handoff);
        // Was the token kept because nobody was asleep (unlock ran ahead of the waiter's
        // sleep; its consumer will find it when it reaches the queue)? Nothing can consume it
        // between this load and the ghost update: no loom operation separates them.
        if self.inner.stored() > 0 {
            lock_ghost(&self.ghost).token_kept = true;
        }
    }
}

impl<Q: Introspect> Introspect for Logged<Q> {
    fn stored(&self) -> u32 {
        self.inner.stored()
    }
    fn sleeping(&self) -> usize {
        self.inner.sleeping()
    }
}

/// Negative control: a queue that drops a wake-up when nobody is parked (no persistent
/// tokens), i.e. the lost wake-up Go's semaphore exists to prevent.
pub struct LossyQueue(pub ParkSema);

impl WaitQueue for LossyQueue {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        self.0.acquire(lifo, deadline)
    }
    fn release(&self, handoff: bool) {
        if self.0.parked() > 0 {
            self.0.release(handoff);
        }
    }
}

impl Introspect for LossyQueue {
    fn stored(&self) -> u32 {
        self.0.stored()
    }
    fn sleeping(&self) -> usize {
        self.0.sleeping()
    }
}

struct Slot {
    /// Set (under the queue lock) by the `release` that picked this sleeper.
    woken: AtomicBool,
    notify: loom::sync::Notify,
}

struct TqSleeper {
    lifo: bool,
    timed: bool,
    slot: loom::sync::Arc<Slot>,
}

#[derive(Default)]
struct TqInner {
    tokens: u32,
    /// Arrival order.
    sleepers: Vec<TqSleeper>,
}

/// The inner state of a test queue ([`TimedQueue`], [`TimedSema`]): its sleepers, in arrival
/// order.
trait Sleepers {
    fn sleepers(&mut self) -> &mut Vec<TqSleeper>;
}

impl Sleepers for TqInner {
    fn sleepers(&mut self) -> &mut Vec<TqSleeper> {
        &mut self.sleepers
    }
}

/// How a sleep on a test queue ended.
enum Woke {
    /// A `release` picked the sleeper while it slept.
    Picked,
    /// Its deadline passed, but a `release` picked it before it could leave: the token is
    /// its.
    PickedAtDeadline,
    /// Its deadline passed: it left the queue (and `on_timeout` ran, under the lock).
    TimedOut,
}

/// The sleep of both test queues: queue a sleeper in `q` (the locked inner state of `lock`),
/// then wait until a `release` picks it, or, for a timed sleep, until loom's spurious wake-up
/// (the deadline passing), after which the sleeper decides under the lock: picked meanwhile,
/// or removed from the queue and `on_timeout` run.
fn sleep<I: Sleepers>(
    lock: &loom::sync::Mutex<I>,
    mut q: loom::sync::MutexGuard<'_, I>,
    lifo: bool,
    timed: bool,
    on_timeout: impl FnOnce(&mut I),
) -> Woke {
    let slot = loom::sync::Arc::new(Slot {
        woken: AtomicBool::new(false),
        notify: loom::sync::Notify::new(),
    });
    q.sleepers().push(TqSleeper {
        lifo,
        timed,
        slot: slot.clone(),
    });
    drop(q);
    loop {
        slot.notify.wait();
        if slot.woken.load(loom::sync::atomic::Ordering::SeqCst) {
            return Woke::Picked;
        }
        if timed {
            let mut q = lock.lock().unwrap();
            if slot.woken.load(loom::sync::atomic::Ordering::SeqCst) {
                return Woke::PickedAtDeadline;
            }
            let i = q
                .sleepers()
                .iter()
                .position(|s| loom::sync::Arc::ptr_eq(&s.slot, &slot))
                .expect("timed-out sleeper not queued");
            q.sleepers().remove(i);
            on_timeout(&mut q);
            return Woke::TimedOut;
        }
    }
}

/// Wake the sleeper at `i`, picked by a `release` holding `q`: its token is marked under the
/// lock, the notification goes out after it.
fn wake<I: Sleepers>(mut q: loom::sync::MutexGuard<'_, I>, i: usize) {
    let s = q.sleepers().remove(i);
    s.slot
        .woken
        .store(true, loom::sync::atomic::Ordering::SeqCst);
    drop(q);
    s.slot.notify.notify();
}

/// A test-only [`WaitQueue`] implementing the documented contract (persistent tokens; the
/// oldest `lifo` sleeper first, else the oldest; a timed-out `acquire` consumed nothing and is
/// no longer queued) whose *timed* `acquire` may time out.
///
/// Loom has no time. A loom `Notify` may wake up spuriously once; here that spurious wake-up of
/// a sleeper with a deadline *is* its deadline passing. After it the sleeper yields, so any
/// number of other steps can happen before it takes the queue lock to leave, exactly like a
/// deadline that passes at an arbitrary later moment; under that lock it either finds that a
/// `release` picked it first (it got the token) or removes itself (timed out). Untimed sleepers
/// ignore spurious wake-ups. [`TimedQueue::fire_timeouts`] makes the deadlines of all current
/// timed sleepers pass at a chosen point.
pub struct TimedQueue {
    inner: loom::sync::Mutex<TqInner>,
    /// Negative control: a sleeper that was picked but then sees its deadline still reports a
    /// time-out, dropping the token.
    lose_token_on_timeout: bool,
}

impl TimedQueue {
    pub fn new() -> Self {
        Self::with(false)
    }

    /// The deadline of every timed sleeper asleep right now passes: each wakes and times out,
    /// unless a `release` picks it first. (Sleeps may also time out on their own: see above.)
    pub fn fire_timeouts(&self) {
        let q = self.inner.lock().unwrap();
        let timed: Vec<_> = q
            .sleepers
            .iter()
            .filter(|s| s.timed)
            .map(|s| s.slot.clone())
            .collect();
        drop(q);
        for s in timed {
            s.notify.notify();
        }
    }
    pub fn with(lose_token_on_timeout: bool) -> Self {
        Self {
            inner: loom::sync::Mutex::new(TqInner::default()),
            lose_token_on_timeout,
        }
    }
}

impl Default for TimedQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl WaitQueue for TimedQueue {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        let mut q = self.inner.lock().unwrap();
        if q.tokens > 0 {
            q.tokens -= 1;
            return true;
        }
        match sleep(&self.inner, q, lifo, deadline.is_some(), |_| {}) {
            Woke::Picked => true,
            Woke::PickedAtDeadline => !self.lose_token_on_timeout,
            Woke::TimedOut => false,
        }
    }

    fn release(&self, _handoff: bool) {
        let mut q = self.inner.lock().unwrap();
        let pick = q
            .sleepers
            .iter()
            .position(|s| s.lifo)
            .or(if q.sleepers.is_empty() { None } else { Some(0) });
        match pick {
            Some(i) => wake(q, i),
            None => q.tokens += 1,
        }
    }
}

impl Introspect for TimedQueue {
    fn stored(&self) -> u32 {
        self.inner.lock().unwrap().tokens
    }
    fn sleeping(&self) -> usize {
        self.inner.lock().unwrap().sleepers.len()
    }
}

// ---------------------------------------------------------------------------------------------
// Clocks
// ---------------------------------------------------------------------------------------------

/// Every waiter has waited "more than 1 ms" as soon as it wakes: forces starvation mode without
/// a ticker thread (docs/algorithm.md, "Time in a model": threshold 0).
pub struct AlwaysStarving;
impl Clock for AlwaysStarving {
    type Instant = ();
    fn now() {}
    fn starving_since(_: ()) -> bool {
        true
    }
}

/// No waiter ever starves: normal mode only ("threshold ∞").
pub struct NeverStarving;
impl Clock for NeverStarving {
    type Instant = ();
    fn now() {}
    fn starving_since(_: ()) -> bool {
        false
    }
}

// ---------------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------------

/// Go's algorithm on a [`CheckedWord`] and a [`Logged`] queue, with a loom `UnsafeCell` for the
/// critical section.
pub struct Harness<Q> {
    pub word: CheckedWord,
    pub queue: Logged<Q>,
    /// Touched in every critical section: loom reports any two accesses not ordered by
    /// happens-before, so this checks mutual exclusion and invariant 2 on every acquisition path.
    pub cell: loom::cell::UnsafeCell<u64>,
    ghost: SharedGhost,
}

/// A deadline that real time never reaches during a model (loom has no time; the timed queue
/// decides when a sleep times out).
pub fn far_deadline() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(3600))
}

impl<Q: WaitQueue + Introspect> Harness<Q> {
    pub fn new(queue: Q, stats: Arc<Stats>) -> Self {
        Self::build(queue, stats, false)
    }

    /// Negative control: unlock's `-LOCKED` is `Relaxed`.
    pub fn with_relaxed_unlock(queue: Q, stats: Arc<Stats>) -> Self {
        Self::build(queue, stats, true)
    }

    fn build(queue: Q, stats: Arc<Stats>, relaxed_unlock: bool) -> Self {
        let ghost = Arc::new(Mutex::new(Ghost::new(stats)));
        Self {
            word: CheckedWord {
                atom: AtomicU32::new(0),
                ghost: ghost.clone(),
                relaxed_unlock,
            },
            queue: Logged {
                inner: queue,
                ghost: ghost.clone(),
            },
            cell: loom::cell::UnsafeCell::new(0),
            ghost,
        }
    }

    fn g(&self) -> MutexGuard<'_, Ghost> {
        lock_ghost(&self.ghost)
    }

    fn begin(&self) {
        let t = me();
        let mut g = self.g();
        remove(&mut g.slept, t);
        remove(&mut g.timed_out, t);
    }

    fn acquired(&self) {
        let t = me();
        let g = self.g();
        assert_eq!(
            g.holder,
            Some(t),
            "lock returned but {t:?} does not hold it"
        );
        assert!(!g.sleepers.contains(&t) && !g.receivers.contains(&t));
    }

    /// `algo::lock` with clock `C`, then the critical section.
    pub fn lock<C: Clock>(&self) {
        self.begin();
        algo::lock::<_, _, C>(&self.word, &self.queue);
        self.acquired();
        self.critical_section();
    }

    /// `algo::lock_until` with clock `C`; on success the critical section. Returns the result.
    pub fn lock_until<C: Clock>(&self, deadline: Option<Instant>) -> bool {
        self.begin();
        let ok = algo::lock_until::<_, _, C>(&self.word, &self.queue, deadline);
        let stats = self.g().stats.clone();
        if ok {
            bump(&stats.timed_ok);
            self.acquired();
            self.critical_section();
        } else {
            bump(&stats.timed_fail);
            let t = me();
            let g = self.g();
            assert_ne!(g.holder, Some(t), "failed lock call holds the lock");
            assert!(
                !g.sleepers.contains(&t) && !g.receivers.contains(&t),
                "failed lock call left a phantom waiter"
            );
            assert!(
                g.woken != Woken::Spinner(t) && g.woken != Woken::Awake(t),
                "failed lock call kept WOKEN"
            );
        }
        ok
    }

    /// `algo::try_lock`; on success the critical section. Returns the result.
    pub fn try_lock(&self) -> bool {
        let t = me();
        self.g().in_try_lock.push(t);
        let ok = algo::try_lock(&self.word);
        let mut g = self.g();
        remove(&mut g.in_try_lock, t);
        let stats = g.stats.clone();
        if ok {
            drop(g);
            bump(&stats.try_ok);
            self.acquired();
            self.critical_section();
        } else {
            // Invariant 13: it fails only when LOCKED or STARVING was seen.
            let seen = *g.last_seen.get(&t).expect("try_lock observed nothing");
            assert!(
                seen & (LOCKED | STARVING) != 0,
                "try_lock failed on {}",
                show(seen)
            );
            bump(&stats.try_fail);
            if seen & STARVING != 0 {
                bump(&stats.try_fail_starving);
            }
        }
        ok
    }

    /// `algo::unlock`.
    pub fn unlock(&self) {
        algo::unlock(&self.word, &self.queue);
    }

    /// Steer a model: yield until the state word satisfies `pred` (loom explores every
    /// interleaving of the other threads around this wait).
    pub fn wait_until(&self, pred: impl Fn(u32) -> bool) {
        let mut spins = 0u32;
        while !pred(self.word.value()) {
            spins += 1;
            if spins > 200 {
                let g = self.g();
                panic!(
                    "wait_until spins: state {} holder {:?} woken {:?} sleepers {:?} receivers {:?} in_acquire {:?}",
                    show(self.word.value()),
                    g.holder,
                    g.woken,
                    g.sleepers,
                    g.receivers,
                    g.in_acquire
                );
            }
            loom::thread::yield_now();
        }
    }

    /// Read-modify-write of the protected cell (loom checks happens-before).
    pub fn critical_section(&self) {
        // SAFETY: `p` points to the cell's live `u64`. Callers have just acquired the lock
        // under test, so no other access overlaps this one if the lock is correct; if it is
        // not, loom's causality check fails the model at this access (the negative controls
        // rely on that), and loom runs one thread at a time, so the accesses never overlap
        // physically either.
        self.cell.with_mut(|p| unsafe { *p += 1 });
    }

    /// After all threads joined: quiescence (invariant 4) and the number of critical sections.
    pub fn assert_quiescent(&self, critical_sections: u64) {
        let s = self.word.value();
        assert_eq!(s, 0, "state not 0 at the end: {}", show(s));
        self.g().assert_quiescent();
        assert_eq!(self.queue.stored(), 0, "leftover tokens");
        assert_eq!(self.queue.sleeping(), 0, "threads still parked");
        // SAFETY: every thread of the model has been joined, so this read is the cell's only
        // access (loom checks that the writes happen-before it).
        let n = self.cell.with(|p| unsafe { *p });
        assert_eq!(n, critical_sections, "critical sections lost");
    }
}

// ---------------------------------------------------------------------------------------------
// Readers-writer lock: a state word that can be broken, and parts over it
// ---------------------------------------------------------------------------------------------

/// How a [`ModelWord`] is broken, for the negative controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwFault {
    /// None: the orderings of gomutex's `RwWord`.
    Sound,
    /// A reader's exit (`sub_all`) is `Relaxed`: its reads no longer happen before the writer
    /// it lets in.
    RelaxedExit,
    /// A reader's exit does not see `WRITER_PARKED` (as if it never looked): the last reader
    /// leaves a sleeping writer asleep.
    ExitIgnoresParkedWriter,
    /// A reader's entry (`add_all`) does not see `PHASE`: it walks in during a write phase.
    EntryIgnoresPhase,
}

/// A readers-writer state word with gomutex's `RwWord` layout and orderings (`AcqRel`
/// read-modify-writes, `Acquire` loads; the low half as `impl StateWord for AtomicU32`), or
/// broken one way ([`RwFault`]).
pub struct ModelWord {
    a: loom::sync::atomic::AtomicU64,
    fault: RwFault,
}

impl ModelWord {
    pub fn new(fault: RwFault) -> Self {
        Self {
            a: loom::sync::atomic::AtomicU64::new(0),
            fault,
        }
    }
}

impl RwState for ModelWord {
    fn load_all(&self) -> u64 {
        self.a.load(Acquire)
    }
    fn cas_all(&self, old: u64, new: u64) -> Result<u64, u64> {
        self.a.compare_exchange(old, new, AcqRel, Acquire)
    }
    fn add_all(&self, delta: u64) -> u64 {
        let prev = self.a.fetch_add(delta, AcqRel);
        if self.fault == RwFault::EntryIgnoresPhase {
            prev & !PHASE
        } else {
            prev
        }
    }
    fn sub_all(&self, delta: u64) -> u64 {
        match self.fault {
            RwFault::RelaxedExit => self.a.fetch_sub(delta, LoomRelaxed),
            RwFault::ExitIgnoresParkedWriter => self.a.fetch_sub(delta, AcqRel) & !WRITER_PARKED,
            _ => self.a.fetch_sub(delta, AcqRel),
        }
    }
    fn or_all(&self, bits: u64) -> u64 {
        self.a.fetch_or(bits, AcqRel)
    }
    fn clear_all(&self, bits: u64) -> u64 {
        self.a.fetch_and(!bits, AcqRel)
    }
}

impl StateWord for ModelWord {
    fn load(&self) -> u32 {
        self.a.load(SeqCst) as u32
    }
    fn try_acquire_fast(&self) -> bool {
        let mut v = self.a.load(SeqCst);
        while v as u32 == 0 {
            match self
                .a
                .compare_exchange(v, v | LOCKED as u64, Acquire, LoomRelaxed)
            {
                Ok(_) => return true,
                Err(cur) => v = cur,
            }
        }
        false
    }
    fn cas(&self, old: u32, new: u32) -> Result<u32, CasError> {
        let mut v = self.a.load(SeqCst);
        while v as u32 == old {
            let next = (v & !(u32::MAX as u64)) | new as u64;
            match self.a.compare_exchange(v, next, SeqCst, LoomRelaxed) {
                Ok(_) => return Ok(old),
                Err(cur) => v = cur,
            }
        }
        Err(CasError::Moved(v as u32))
    }
    fn fetch_add(&self, delta: u32) -> u32 {
        self.a.fetch_add(delta as i32 as i64 as u64, SeqCst) as u32
    }
    fn release_locked(&self) -> u32 {
        (self.a.fetch_sub(LOCKED as u64, Release) as u32).wrapping_sub(LOCKED)
    }
}

/// The parts of `gomutex::RawRwLock` (a state word, the writers' `ParkSema`, parking mocked)
/// over a [`ModelWord`], with a loom `UnsafeCell` that readers read and writers write (loom
/// reports any write not ordered with every other access). `B` picks the slot table's
/// protocol ([`bias_fault`]): 0 is the shipped one.
pub struct RwHarnessOf<const B: u8> {
    pub word: ModelWord,
    pub queue: ParkSema,
    pub cell: loom::cell::UnsafeCell<u64>,
}

/// The harness with the shipped slot-table protocol.
pub type RwHarness = RwHarnessOf<0>;

/// The slot table's protocol of [`RwHarnessOf<B>`]: 0 sound, 1 the reader checks before
/// publishing, 2 the writer scans before announcing, 3 no `SeqCst` fences and `Relaxed`
/// table accesses.
pub const fn bias_fault(b: u8) -> BiasFault {
    match b {
        0 => BiasFault::Sound,
        1 => BiasFault::CheckBeforePublish,
        2 => BiasFault::ScanBeforeAnnounce,
        _ => BiasFault::Relaxed,
    }
}

impl<const B: u8> RwHarnessOf<B> {
    pub fn new(fault: RwFault) -> Self {
        Self {
            word: ModelWord::new(fault),
            queue: ParkSema::new(),
            cell: loom::cell::UnsafeCell::new(0),
        }
    }

    /// A reader's critical section: returns the value (loom checks the read is ordered after
    /// every write).
    pub fn read_cs(&self) -> u64 {
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        self.cell.with(|p| unsafe { *p })
    }

    /// A writer's critical section: one more write.
    pub fn write_cs(&self) {
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        self.cell.with_mut(|p| unsafe { *p += 1 });
    }

    /// After all threads joined: the word 0 (but for the bias bits), the slot table empty,
    /// nobody asleep, `writes` write sections.
    pub fn assert_quiescent(&self, writes: u64) {
        assert_eq!(
            self.word.load_all() & !(BIAS | OVERLAPS | IDLE_SCANS),
            0,
            "state word not 0 at the end"
        );
        assert_eq!(gomutex::rwtable::occupied(), 0, "slots left naming a lock");
        assert_eq!(
            self.queue.stored_tokens(),
            0,
            "writers' tokens left at the end"
        );
        assert_eq!(self.read_cs(), writes, "write critical sections lost");
    }
}

impl<const B: u8> RwParts for RwHarnessOf<B> {
    const BIAS_FAULT: BiasFault = bias_fault(B);
    type Word = ModelWord;
    type Queue = ParkSema;
    type Clock = NeverStarving;
    fn word(&self) -> &ModelWord {
        &self.word
    }
    fn queue(&self) -> &ParkSema {
        &self.queue
    }
    fn key(&self) -> usize {
        &self.word as *const ModelWord as usize
    }
}
