//! The shipped types, unwrapped: `RawMutex` (Go's algorithm on `AtomicU32` + `ParkSema` + the
//! virtual `Monotonic` clock), `Mutex<T>` and `Condvar`, exactly as a user gets them (built with
//! `--cfg gomutex_loom`). A loom `UnsafeCell` beside the lock checks mutual exclusion and
//! happens-before; quiescence is checked with the loom-only introspection (`parked()`).

use gomutex::algo::{waiters, STARVING, WOKEN};
use gomutex::clock::advance_virtual_clock;
use gomutex::{Condvar, Mutex, RawMutex};
use gomutex_loom_tests::{join_all, model};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Proof that `--cfg gomutex_loom` reached the gomutex dependency: these items exist only under
/// it (this file does not compile otherwise), and gomutex's atomics must be loom's: they panic
/// when used outside a loom model.
#[test]
fn cfg_reaches_gomutex() {
    let outside = std::panic::catch_unwind(|| {
        let m = RawMutex::new();
        m.lock();
    });
    assert!(
        outside.is_err(),
        "gomutex used plain atomics outside a loom model: the cfg did not reach it"
    );
    model("cfg_reaches_gomutex", 2, || {
        advance_virtual_clock();
        let m = RawMutex::new();
        m.lock();
        assert!(!m.try_lock());
        // SAFETY: this thread locked `m` two lines up and has not unlocked it.
        unsafe { m.unlock() };
        assert_eq!((m.state(), m.stored_tokens(), m.parked()), (0, 0, 0));
    });
}

struct Shared {
    m: RawMutex,
    cell: UnsafeCell<u64>,
}

impl Shared {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            m: RawMutex::new(),
            cell: UnsafeCell::new(0),
        })
    }
    /// The critical section; callers hold `m`.
    fn cs(&self) {
        // SAFETY: `p` points to the cell's live `u64`, and callers hold `m`, so no other
        // access overlaps this one if the lock is correct; if it is not, loom's causality
        // check fails the model here (and loom runs one thread at a time, so the accesses
        // never overlap physically).
        self.cell.with_mut(|p| unsafe { *p += 1 });
    }
    fn assert_quiescent(&self, n: u64) {
        assert_eq!(self.m.state(), 0, "state not 0");
        assert_eq!(self.m.stored_tokens(), 0, "leftover tokens");
        assert_eq!(self.m.parked(), 0, "threads still parked");
        // SAFETY: called after every thread of the model has been joined: the only access.
        assert_eq!(self.cell.with(|p| unsafe { *p }), n);
    }
}

/// `RawMutex`: two lockers and a `try_lock`; mutual exclusion, happens-before, no lost wake-up,
/// quiescence, on the shipped composition.
#[test]
fn raw_mutex_lock_lock_trylock() {
    model("raw_mutex_lock_lock_trylock", 3, || {
        let s = Shared::new();
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || {
                    s.m.lock();
                    s.cs();
                    // SAFETY: this thread holds `s.m` (locked two lines up).
                    unsafe { s.m.unlock() };
                })
            })
            .collect();
        let ok = s.m.try_lock();
        if ok {
            s.cs();
            // SAFETY: `try_lock` returned true: this thread holds `s.m`.
            unsafe { s.m.unlock() };
        }
        join_all(ts);
        s.assert_quiescent(2 + u64::from(ok));
    });
}

/// `RawMutex` in starvation mode with the shipped virtual clock: A holds the lock until B has
/// registered, advances the clock (B may or may not have taken its first-sleep timestamp yet),
/// unlocks, relocks and waits until B registered again (or is done). When A sees STARVING in
/// its critical section, its unlock must hand off. Asserts the hand-off path was explored.
#[test]
fn raw_mutex_starvation_handoff() {
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let seen2 = seen.clone();
    model("raw_mutex_starvation_handoff", 3, move || {
        let s = Shared::new();
        let b_done = Arc::new(AtomicBool::new(false));
        let (s1, d1, seen) = (s.clone(), b_done.clone(), seen2.clone());
        let a = thread::spawn(move || {
            for round in 0..2 {
                s1.m.lock();
                s1.cs();
                while waiters(s1.m.state()) == 0 && !d1.load(SeqCst) {
                    thread::yield_now();
                }
                if round == 0 {
                    advance_virtual_clock();
                } else if s1.m.state() & STARVING != 0 {
                    seen.fetch_add(1, Relaxed);
                }
                // SAFETY: A holds `s1.m`, locked at the top of this round.
                unsafe { s1.m.unlock() };
            }
        });
        let (s2, d2) = (s.clone(), b_done.clone());
        let b = thread::spawn(move || {
            s2.m.lock();
            s2.cs();
            // SAFETY: B holds `s2.m` (locked two lines up).
            unsafe { s2.m.unlock() };
            d2.store(true, SeqCst);
        });
        join_all([a, b]);
        s.assert_quiescent(3);
    });
    let n = seen.load(Relaxed);
    eprintln!("executions where the holder saw STARVING before unlocking: {n}");
    assert!(n > 0, "the starvation hand-off was never explored");
}

/// `RawMutex::unlock_fair` (`lock_api::RawMutexFair`): with a waiter registered and nobody
/// awake, A hands the lock off in normal mode with starvation mode's hand-off (LOCKED clear,
/// STARVING set), then relocks at once, so it registers as a waiter too (a newcomer never
/// barges while STARVING). Mutual exclusion and happens-before hold through the hand-off, the
/// receiver's fix-up leaves starvation mode (nobody waited past the virtual threshold), and the
/// lock ends quiescent. Which registered waiter receives the token is not fixed: if B has
/// registered but not yet parked, the queue keeps the token and A may take it first, exactly as
/// Go's semaphore keeps a hand-off for the next `semacquire` (loom found that interleaving).
/// Asserts the hand-off path was explored.
#[test]
fn raw_mutex_unlock_fair_handoff() {
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let seen2 = seen.clone();
    model("raw_mutex_unlock_fair_handoff", 3, move || {
        let s = Shared::new();
        let b_done = Arc::new(AtomicBool::new(false));
        let (s1, d1) = (s.clone(), b_done.clone());
        let a = thread::spawn(move || {
            s1.m.lock();
            s1.cs();
            while waiters(s1.m.state()) == 0 && !d1.load(SeqCst) {
                thread::yield_now();
            }
            let st = s1.m.state();
            let hands_off = waiters(st) != 0 && st & (WOKEN | STARVING) == 0;
            // SAFETY: A holds `s1.m`, locked at the top of this thread.
            unsafe { s1.m.unlock_fair() };
            if hands_off {
                s1.m.lock();
                assert_eq!(
                    s1.m.state() & STARVING,
                    0,
                    "the fix-up kept starvation mode"
                );
                s1.cs();
                // SAFETY: A relocked `s1.m` above (the hand-off's receiver released it).
                unsafe { s1.m.unlock() };
            }
            hands_off
        });
        let (s2, d2) = (s.clone(), b_done.clone());
        let b = thread::spawn(move || {
            s2.m.lock();
            s2.cs();
            d2.store(true, SeqCst);
            assert_eq!(
                s2.m.state() & STARVING,
                0,
                "B's fix-up kept starvation mode"
            );
            // SAFETY: B holds `s2.m`, locked at the top of this thread.
            unsafe { s2.m.unlock() };
        });
        let handed_off = a.join().unwrap();
        b.join().unwrap();
        if handed_off {
            seen2.fetch_add(1, Relaxed);
        }
        s.assert_quiescent(if handed_off { 3 } else { 2 });
    });
    let n = seen.load(Relaxed);
    eprintln!("executions where unlock_fair handed off: {n}");
    assert!(n > 0, "the fair hand-off was never explored");
}

/// `Condvar` + `Mutex<bool>`: no notification is lost between `wait` releasing the lock and
/// going to sleep (loom reports the waiter stuck forever as a deadlock). The notifier sets the
/// flag under the lock and notifies after releasing it.
#[test]
fn condvar_no_lost_notification() {
    model("condvar_no_lost_notification", 4, || {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let p2 = pair.clone();
        let waiter = thread::spawn(move || {
            let (m, cv) = &*p2;
            let mut g = m.lock().unwrap();
            while !*g {
                g = cv.wait(g).unwrap();
            }
        });
        let (m, cv) = &*pair;
        *m.lock().unwrap() = true;
        cv.notify_one();
        waiter.join().unwrap();
        assert_eq!(m.raw().state(), 0);
        assert_eq!(m.raw().parked(), 0);
    });
}

/// `Condvar::notify_all` with two waiters and the notifier notifying while it still holds the
/// lock: both wake (re-acquiring the mutex one after the other), nothing is left parked.
#[test]
fn condvar_notify_all_two_waiters() {
    model("condvar_notify_all_two_waiters", 3, || {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let p = pair.clone();
                thread::spawn(move || {
                    let (m, cv) = &*p;
                    let g = cv.wait_while(m.lock().unwrap(), |ready| !*ready).unwrap();
                    assert!(*g);
                })
            })
            .collect();
        let (m, cv) = &*pair;
        {
            let mut g = m.lock().unwrap();
            *g = true;
            cv.notify_all();
        }
        join_all(ts);
        assert_eq!(m.raw().state(), 0);
        assert_eq!(m.raw().stored_tokens(), 0);
        assert_eq!(m.raw().parked(), 0);
    });
}

/// `Condvar` ping-pong: two threads take turns on a counter (A moves it from even to odd, B
/// from odd to even, twice each), each waiting for its turn and notifying the other. Every
/// wait releases the lock and sleeps while the other side may be notifying: a notification
/// lost in that window leaves both asleep, which loom reports as a deadlock.
#[test]
fn condvar_ping_pong() {
    model("condvar_ping_pong", 3, || {
        let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
        let p2 = pair.clone();
        let turn = |p: &(Mutex<u32>, Condvar), parity: u32| {
            let (m, cv) = p;
            for _ in 0..2 {
                let mut g = cv
                    .wait_while(m.lock().unwrap(), |n| *n % 2 != parity)
                    .unwrap();
                *g += 1;
                drop(g);
                cv.notify_one();
            }
        };
        let b = thread::spawn(move || turn(&p2, 1));
        turn(&pair, 0);
        b.join().unwrap();
        let (m, _) = &*pair;
        assert_eq!(*m.lock().unwrap(), 4);
        assert_eq!(
            (m.raw().state(), m.raw().stored_tokens(), m.raw().parked()),
            (0, 0, 0)
        );
    });
}
