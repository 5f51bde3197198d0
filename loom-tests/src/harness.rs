//! The checked state word, the clocks that force the starvation decision, and the mutex
//! harness over them.

use crate::ghost::{lock_ghost, remove, show, Ghost, Op, SharedGhost, Woken};
use crate::queue::{Introspect, Logged};
use crate::run::{bump, me, Stats};
use gomutex::algo::{self, CasError, StateWord, LOCKED, STARVING};
use gomutex::clock::Clock;
use gomutex::sema::WaitQueue;
use loom::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
