//! Ghost state: the invariants of `docs/algorithm.md`, checked on every transition.

use crate::run::{bump, Stats};
use gomutex::algo::{waiters, LOCKED, STARVING, WAITER, WOKEN};
use loom::thread::ThreadId;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// Who owns the WOKEN bit (invariant 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    None,
    /// A spinner that announced itself.
    Spinner(ThreadId),
    /// A normal-mode unlock set it; the thread that consumes its token will own it.
    Token,
    /// A waiter woken by a normal-mode unlock.
    Awake(ThreadId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Fast,
    Cas,
    FetchAdd,
    Release,
}

/// The abstract state the real state word must agree with, updated on every transition.
pub struct Ghost {
    pub(crate) stats: Arc<Stats>,
    /// Thread holding the lock (set by the transition that sets LOCKED).
    pub(crate) holder: Option<ThreadId>,
    pub(crate) woken: Woken,
    /// Registered waiters that have consumed no token and have not left (invariant 5).
    pub(crate) sleepers: Vec<ThreadId>,
    /// Normal-mode wake-ups decided (unlock's CAS) and not consumed yet.
    normal_tokens: u32,
    /// Of those, the unlocker that has not called `release(false)` yet.
    normal_unreleased: Option<ThreadId>,
    /// Starvation-mode unlocker between its `-LOCKED` and its `release(true)`.
    handoff_unreleased: Option<ThreadId>,
    /// Hand-off tokens released and not consumed.
    handoff_tokens: u32,
    /// Threads that consumed a hand-off token and have not done the fix-up yet.
    pub(crate) receivers: Vec<ThreadId>,
    /// Threads inside `try_lock`.
    pub(crate) in_try_lock: Vec<ThreadId>,
    /// Threads inside `WaitQueue::acquire`.
    pub(crate) in_acquire: Vec<ThreadId>,
    /// Threads that have slept in their current lock call (the next sleep must be lifo).
    pub(crate) slept: Vec<ThreadId>,
    /// Threads whose last sleep timed out.
    pub(crate) timed_out: Vec<ThreadId>,
    /// Last state value each thread observed (for try_lock's failure condition).
    pub(crate) last_seen: HashMap<ThreadId, u32>,
    /// The token in flight was kept by the queue (nobody asleep when it was released).
    pub(crate) token_kept: bool,
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

pub(crate) fn remove(v: &mut Vec<ThreadId>, t: ThreadId) -> bool {
    if let Some(i) = v.iter().position(|&x| x == t) {
        v.remove(i);
        true
    } else {
        false
    }
}

pub(crate) fn show(s: u32) -> String {
    format!(
        "{{L={} W={} S={} N={}}}",
        s & LOCKED,
        (s & WOKEN) >> 1,
        (s & STARVING) >> 2,
        waiters(s)
    )
}

impl Ghost {
    pub(crate) fn new(stats: Arc<Stats>) -> Self {
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

    pub(crate) fn observe(&mut self, t: ThreadId, v: u32) {
        self.last_seen.insert(t, v);
    }

    /// One successful read-modify-write of the state word by thread `t`.
    pub(crate) fn transition(&mut self, t: ThreadId, op: Op, old: u32, new: u32) {
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

    pub(crate) fn before_acquire(&mut self, t: ThreadId, lifo: bool) {
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

    pub(crate) fn after_acquire(&mut self, t: ThreadId, got: bool) {
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

    pub(crate) fn before_release(&mut self, t: ThreadId, handoff: bool) {
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
    pub(crate) fn assert_quiescent(&self) {
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

pub(crate) type SharedGhost = Arc<Mutex<Ghost>>;

pub(crate) fn lock_ghost(g: &SharedGhost) -> MutexGuard<'_, Ghost> {
    g.lock().unwrap_or_else(|e| e.into_inner())
}
