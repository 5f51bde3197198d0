//! The deadline path (beyond Go): `algo::lock_slow` with a deadline, `wait_for_token_or_leave`
//! and `deregister`, on a [`TimedQueue`] whose timed sleeps may time out at any point (see its
//! docs), with the checked state word. The ghost checks that a waiter only leaves the count
//! while it holds no token and never as the receiver of a hand-off in flight; every model ends
//! with quiescence (state 0, no kept token, nobody asleep, no phantom waiter), and loom reports a
//! lost wake-up as a deadlock.

use gomutex::algo::{waiters, STARVING};
use gomutex_loom_tests::{
    far_deadline, get, join_all, model_with_stats, AlwaysStarving, Harness, NeverStarving,
    TimedQueue,
};
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use std::time::{Duration, Instant};

/// Normal mode: A locks (and waits in its critical section until the others are registered or
/// done), B locks, the main thread calls `lock_until` with a deadline that may pass while it
/// sleeps. Covers: a time-out racing unlock's wake-up (the token must not be lost: either the
/// sleeper gets it, or it is kept / goes to B), leaving the count while a normal token is in
/// flight, and waiting for a token that is ours.
#[test]
fn timed_lock_normal_mode() {
    let stats = model_with_stats("timed_lock_normal_mode", 2, move |s| {
        let h = Arc::new(Harness::new(TimedQueue::new(), s.clone()));
        let done = Arc::new(AtomicUsize::new(0));
        let (h1, d1) = (h.clone(), done.clone());
        let a = thread::spawn(move || {
            h1.lock::<NeverStarving>();
            h1.wait_until(|s| waiters(s) as usize + d1.load(SeqCst) >= 2);
            h1.unlock();
            d1.fetch_add(1, SeqCst);
        });
        let (h2, d2) = (h.clone(), done.clone());
        let b = thread::spawn(move || {
            h2.lock::<NeverStarving>();
            h2.unlock();
            d2.fetch_add(1, SeqCst);
        });
        let ok = h.lock_until::<NeverStarving>(far_deadline());
        if ok {
            h.unlock();
        }
        done.fetch_add(1, SeqCst);
        join_all([a, b]);
        h.assert_quiescent(2 + u64::from(ok));
    });
    assert!(get(&stats.timeouts) > 0, "no sleep timed out");
    assert!(get(&stats.deregisters) > 0, "no waiter left the count");
    assert!(
        get(&stats.token_after_timeout) > 0,
        "never waited for a token after a time-out"
    );
    assert!(get(&stats.timed_fail) > 0 && get(&stats.timed_ok) > 0);
}

/// Starvation mode (forced by the clock) with a timed waiter: A locks twice, waiting in each
/// critical section until the others are registered or done; B locks; the main thread calls
/// `lock_until`. Covers a time-out while the lock is starving and while a hand-off is in
/// flight: the timed waiter may only leave if another counted waiter remains to receive it,
/// and the last one out leaves starvation mode.
#[test]
fn timed_lock_starvation_mode() {
    let stats = model_with_stats("timed_lock_starvation_mode", 2, move |s| {
        let h = Arc::new(Harness::new(TimedQueue::new(), s.clone()));
        let done = Arc::new(AtomicUsize::new(0));
        let (h1, d1) = (h.clone(), done.clone());
        let a = thread::spawn(move || {
            for _ in 0..2 {
                h1.lock::<AlwaysStarving>();
                h1.wait_until(|s| waiters(s) as usize + d1.load(SeqCst) >= 2);
                h1.unlock();
            }
        });
        let (h2, d2) = (h.clone(), done.clone());
        let b = thread::spawn(move || {
            h2.lock::<AlwaysStarving>();
            h2.unlock();
            d2.fetch_add(1, SeqCst);
        });
        let ok = h.lock_until::<AlwaysStarving>(far_deadline());
        if ok {
            h.unlock();
        }
        done.fetch_add(1, SeqCst);
        join_all([a, b]);
        h.assert_quiescent(3 + u64::from(ok));
    });
    assert!(get(&stats.handoffs) > 0);
    assert!(
        get(&stats.deregisters_starving) > 0,
        "no waiter left a starving lock"
    );
    assert!(
        get(&stats.timeouts_during_handoff) > 0,
        "no sleep timed out while a hand-off was in flight"
    );
    assert!(get(&stats.token_after_timeout) > 0);
}

/// A contender whose deadline has already passed spins, announces itself with WOKEN (a sleeper
/// exists), then gives up: it must clear WOKEN, or the holder's unlock would not wake the
/// sleeper (lost wake-up → loom deadlock). The main thread holds the lock until A sleeps and
/// the timed contender B has finished.
#[test]
fn timed_spinner_gives_up_clearing_woken() {
    let stats = model_with_stats("timed_spinner_gives_up_clearing_woken", 3, move |s| {
        let h = Arc::new(Harness::new(TimedQueue::new(), s.clone()));
        h.lock::<NeverStarving>();
        let h1 = h.clone();
        let a = thread::spawn(move || {
            h1.lock::<NeverStarving>();
            h1.unlock();
        });
        h.wait_until(|s| waiters(s) >= 1);
        let h2 = h.clone();
        let b = thread::spawn(move || {
            // Already past: gives up at its first attempt to queue.
            let past = Instant::now().checked_sub(Duration::from_secs(1));
            assert!(!h2.lock_until::<NeverStarving>(past.or(Some(Instant::now()))));
        });
        b.join().unwrap();
        h.unlock();
        a.join().unwrap();
        h.assert_quiescent(2);
    });
    assert!(
        get(&stats.gave_up_clearing_woken) > 0,
        "the give-up-with-WOKEN path was not taken"
    );
}

/// Four threads in starvation mode: a hand-off with three waiters counted, during which the
/// timed waiter's deadline passes. With three waiters a timed-out one *may* leave during the
/// hand-off (the receiver and one more stay counted): this covers that branch of `deregister`,
/// racing the receiver's fix-up.
///
/// Four threads explode the state space, so the set-up runs one fixed schedule
/// (`loom::stop_exploring`): the main thread takes the lock, waits until B, C and the timed
/// waiter T are registered, unlocks (waking B, the oldest) and relocks at once (barging), and
/// waits until B has registered again (B starves, so the lock is now starving). Then
/// `loom::explore()`: every interleaving of the main thread's unlock (the hand-off), T's
/// deadline passing, T leaving, the fix-up and the rest is explored.
#[test]
fn timed_lock_leaves_during_handoff() {
    let stats = model_with_stats("timed_lock_leaves_during_handoff", 3, move |s| {
        loom::stop_exploring();
        let h = Arc::new(Harness::new(TimedQueue::new(), s.clone()));
        h.lock::<AlwaysStarving>();
        let mut ts = Vec::new();
        for _ in 0..2 {
            let h2 = h.clone();
            ts.push(thread::spawn(move || {
                h2.lock::<AlwaysStarving>();
                h2.unlock();
                true
            }));
            let n = ts.len() as u32;
            h.wait_until(|s| waiters(s) >= n);
        }
        let h3 = h.clone();
        ts.push(thread::spawn(move || {
            let ok = h3.lock_until::<AlwaysStarving>(far_deadline());
            if ok {
                h3.unlock();
            }
            ok
        }));
        h.wait_until(|s| waiters(s) >= 3);
        h.unlock();
        h.lock::<AlwaysStarving>();
        h.wait_until(|s| waiters(s) >= 3 && s & STARVING != 0);
        loom::explore();
        h.unlock();
        h.queue.inner.fire_timeouts();
        let ok = ts
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&ok| ok)
            .count();
        h.assert_quiescent(2 + ok as u64);
    });
    assert!(
        get(&stats.deregisters_handoff_in_flight) > 0,
        "no waiter left while a hand-off was in flight"
    );
}
