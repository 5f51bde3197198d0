//! Go's algorithm (`gomutex::algo`) on a checked state word and a logged `ParkSema`: every
//! transition is checked against the ghost state (see `src/ghost.rs`), every critical section
//! touches a loom `UnsafeCell`, and every model ends with a quiescence check.

use gomutex::algo::waiters;
use gomutex::clock::{advance_virtual_clock, Monotonic};
use gomutex::sema::ParkSema;
use gomutex_loom_tests::{get, join_all, model_with_stats, AlwaysStarving, Harness, NeverStarving};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;

/// Normal mode (the clock never says "starving"): two lockers and a `try_lock`.
///
/// Proves: mutual exclusion and happens-before on the fast-path CAS, the slow-path CAS and
/// `try_lock`; waiter accounting; WOKEN ownership (spinner announcement and normal wake-ups);
/// at most one normal-mode wake-up in flight; `try_lock` only ever sets LOCKED and fails only on
/// LOCKED/STARVING; no lost wake-up (incl. unlock's release running before the waiter sleeps:
/// the token persists); quiescence.
#[test]
fn normal_mode_lock_lock_trylock() {
    let stats = model_with_stats("normal_mode_lock_lock_trylock", 3, move |s| {
        let h = Arc::new(Harness::new(ParkSema::new(), s.clone()));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let h = h.clone();
                thread::spawn(move || {
                    h.lock::<NeverStarving>();
                    h.unlock();
                })
            })
            .collect();
        let ok = h.try_lock();
        if ok {
            h.unlock();
        }
        join_all(ts);
        h.assert_quiescent(2 + u64::from(ok));
    });
    assert!(
        get(&stats.normal_wakeups) > 0,
        "no normal-mode wake-up explored"
    );
    assert!(
        get(&stats.early_normal) > 0,
        "release-before-sleep (kept token) not explored"
    );
    assert!(get(&stats.announces) > 0, "no spinner announced WOKEN");
    assert!(get(&stats.try_ok) > 0 && get(&stats.try_fail) > 0);
    assert!(get(&stats.fast) > 0 && get(&stats.slow_cas) > 0);
    assert_eq!(get(&stats.handoffs), 0);
}

/// A woken waiter loses the race to a barging newcomer and goes back to sleep at the *front*
/// (lifo), checked by the ghost on every sleep. Steered: A takes the lock, waits until B has
/// registered, unlocks (waking B), locks again at once (barging) and waits until B has
/// registered again or is done.
#[test]
fn normal_mode_requeue_is_lifo() {
    let stats = model_with_stats("normal_mode_requeue_is_lifo", 4, move |s| {
        let h = Arc::new(Harness::new(ParkSema::new(), s.clone()));
        let b_done = Arc::new(AtomicBool::new(false));
        let (h1, d1) = (h.clone(), b_done.clone());
        let a = thread::spawn(move || {
            for _ in 0..2 {
                h1.lock::<NeverStarving>();
                h1.wait_until(|s| waiters(s) >= 1 || d1.load(SeqCst));
                h1.unlock();
            }
        });
        h.lock::<NeverStarving>();
        h.unlock();
        b_done.store(true, SeqCst);
        a.join().unwrap();
        h.assert_quiescent(3);
    });
    assert!(get(&stats.requeues) > 0, "no woken waiter re-queued");
    assert_eq!(get(&stats.handoffs), 0);
}

/// Starvation mode forced by the clock (every woken waiter has "waited > 1 ms"), steered so the
/// deep path is reached at a small preemption bound: A takes the lock, waits until B has
/// registered, unlocks (waking B) and locks again; in that second critical section it waits
/// until B has registered again, switching the lock to starvation mode (or B is done). The main thread calls
/// `try_lock` twice. Loom explores every interleaving around those waits.
///
/// Proves, in addition to the normal-mode properties: STARVING is only set while LOCKED;
/// STARVING ⇒ ¬WOKEN ∧ N ≥ 1; neither a newcomer's CAS nor `try_lock` sets LOCKED while
/// STARVING (only the hand-off receiver's fix-up); the receiver sees L = 0, W = 0, N ≥ 1; the
/// last waiter leaves starvation mode; happens-before across the hand-off (the receiver never
/// CASes LOCKED: the edge must come from the queue); the hand-off token persists when unlock
/// runs before the receiver sleeps.
#[test]
fn starvation_mode_handoff() {
    let stats = model_with_stats("starvation_mode_handoff", 2, move |s| {
        let h = Arc::new(Harness::new(ParkSema::new(), s.clone()));
        let b_done = Arc::new(AtomicBool::new(false));
        let (h1, d1) = (h.clone(), b_done.clone());
        let a = thread::spawn(move || {
            h1.lock::<AlwaysStarving>();
            h1.wait_until(|s| waiters(s) >= 1 || d1.load(SeqCst));
            h1.unlock();
            h1.lock::<AlwaysStarving>();
            h1.wait_until(|s| waiters(s) >= 1 || d1.load(SeqCst));
            h1.unlock();
        });
        let (h2, d2) = (h.clone(), b_done.clone());
        let b = thread::spawn(move || {
            h2.lock::<AlwaysStarving>();
            h2.unlock();
            d2.store(true, SeqCst);
        });
        let mut n = 3;
        for _ in 0..2 {
            if h.try_lock() {
                h.unlock();
                n += 1;
            }
        }
        join_all([a, b]);
        h.assert_quiescent(n);
    });
    assert!(
        get(&stats.starving_set) > 0,
        "starvation mode never entered"
    );
    assert!(get(&stats.handoffs) > 0, "no hand-off explored");
    assert!(
        get(&stats.leave_last) > 0,
        "last waiter never left starvation mode"
    );
    assert!(
        get(&stats.early_handoff) > 0,
        "hand-off released before the receiver slept: not explored"
    );
    assert!(
        get(&stats.try_fail_starving) > 0,
        "try_lock never refused by STARVING"
    );
}

/// Starvation decided by the shipped clock (`Monotonic`, virtual under loom). Steered like
/// [`starvation_mode_handoff`]; A advances the clock once after B has registered, so loom
/// explores B taking its first-sleep timestamp before the tick (B starves when it wakes) and
/// after it (B does not). Both regimes must be reached.
#[test]
fn virtual_clock_starvation() {
    let handoff_runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let other_runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (hr, nr) = (handoff_runs.clone(), other_runs.clone());
    let stats = model_with_stats("virtual_clock_starvation", 3, move |s| {
        let before = get(&s.handoffs);
        let h = Arc::new(Harness::new(ParkSema::new(), s.clone()));
        let b_done = Arc::new(AtomicBool::new(false));
        let (h1, d1) = (h.clone(), b_done.clone());
        let a = thread::spawn(move || {
            h1.lock::<Monotonic>();
            h1.wait_until(|s| waiters(s) >= 1 || d1.load(SeqCst));
            advance_virtual_clock();
            h1.unlock();
            h1.lock::<Monotonic>();
            h1.wait_until(|s| waiters(s) >= 1 || d1.load(SeqCst));
            h1.unlock();
        });
        let (h2, d2) = (h.clone(), b_done.clone());
        let b = thread::spawn(move || {
            h2.lock::<Monotonic>();
            h2.unlock();
            d2.store(true, SeqCst);
        });
        join_all([a, b]);
        h.assert_quiescent(3);
        if get(&s.handoffs) > before {
            hr.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            nr.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let (hr, nr) = (get(&handoff_runs), get(&other_runs));
    eprintln!("executions with a hand-off: {hr}, without: {nr}");
    assert!(hr > 0, "the virtual clock never led to a hand-off");
    assert!(
        nr > 0,
        "every execution handed off: the clock is not a real input"
    );
    assert!(get(&stats.leave_last) > 0);
}

/// Three lockers in starvation mode, steered so two waiters are queued at a hand-off: A takes
/// the lock and waits until B and the main thread have both registered, unlocks, relocks and
/// waits again until two others are registered or done. The first receiver then has N = 2 at its
/// fix-up and must *stay* in starvation mode and hand off again; the second is the last and
/// must leave it.
#[test]
fn starvation_mode_three_lockers() {
    let stats = model_with_stats("starvation_mode_three_lockers", 2, move |s| {
        let h = Arc::new(Harness::new(ParkSema::new(), s.clone()));
        let done = Arc::new(AtomicUsize::new(0));
        let (h1, d1) = (h.clone(), done.clone());
        let a = thread::spawn(move || {
            h1.lock::<AlwaysStarving>();
            h1.wait_until(|s| waiters(s) as usize + d1.load(SeqCst) >= 2);
            h1.unlock();
            h1.lock::<AlwaysStarving>();
            h1.wait_until(|s| waiters(s) as usize + d1.load(SeqCst) >= 2);
            h1.unlock();
        });
        let (h2, d2) = (h.clone(), done.clone());
        let b = thread::spawn(move || {
            h2.lock::<AlwaysStarving>();
            h2.unlock();
            d2.fetch_add(1, SeqCst);
        });
        h.lock::<AlwaysStarving>();
        h.unlock();
        done.fetch_add(1, SeqCst);
        join_all([a, b]);
        h.assert_quiescent(4);
    });
    assert!(get(&stats.handoffs) > 0);
    assert!(
        get(&stats.stay_starving) > 0,
        "no receiver stayed in starvation mode"
    );
    assert!(get(&stats.leave_last) > 0);
}

/// `try_lock` never blocks and never touches the count or WOKEN: the main thread holds the
/// lock, A sleeps on it, B calls `try_lock` twice and must return (false) while the main thread
/// still holds the lock, because the main thread joins B before unlocking (a blocking try_lock
/// would be a deadlock loom reports). The ghost checks that B's only transitions are
/// `old -> old | LOCKED` and that it never reaches the queue.
#[test]
fn try_lock_never_blocks() {
    let stats = model_with_stats("try_lock_never_blocks", 3, move |s| {
        let h = Arc::new(Harness::new(ParkSema::new(), s.clone()));
        h.lock::<NeverStarving>();
        let h1 = h.clone();
        let a = thread::spawn(move || {
            h1.lock::<NeverStarving>();
            h1.unlock();
        });
        let h2 = h.clone();
        let b = thread::spawn(move || {
            assert!(!h2.try_lock());
            assert!(!h2.try_lock());
        });
        b.join().unwrap();
        h.unlock();
        a.join().unwrap();
        h.assert_quiescent(2);
    });
    assert_eq!(get(&stats.try_ok), 0);
}
