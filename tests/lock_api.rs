//! `lock_api::Mutex<gomutex::RawMutex, T>` (features `lock_api` and `lock_api_04`): what a
//! parking_lot user expects, including fair unlocking and `bump`.
//!
//! The fair hand-off is checked deterministically: once the only contender is registered as a
//! waiter (state exactly `LOCKED | WAITER`: a spinner clears `WOKEN` when it registers), a fair
//! unlock leaves the lock to that waiter, so an immediate `try_lock` by the old holder fails,
//! where a plain unlock would let it barge straight back in.
#![cfg(feature = "lock_api")]

mod common;

use gomutex::RawMutex;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

type Mutex<T> = lock_api::Mutex<RawMutex, T>;
type MutexGuard<'a, T> = lock_api::MutexGuard<'a, RawMutex, T>;

const LOCKED: u32 = 1;
const WAITER: u32 = 8;

/// Wait until `m`'s raw state is `state` (panics after 10 s).
fn wait_for_state<T>(m: &Mutex<T>, state: u32) {
    // SAFETY: only reads the state word.
    let raw = unsafe { m.raw() };
    let what = || format!("state {state:#x} (it is {:#x})", raw.state());
    common::poll_until(Duration::from_secs(10), Duration::ZERO, what, || {
        raw.state() == state
    });
}

/// Wait (bounded) until `n` threads sleep on the lock's queue.
fn wait_parked<T>(m: &Mutex<T>, n: usize) {
    // SAFETY: only reads.
    let raw = unsafe { m.raw() };
    let what = || format!("{n} parked (there are {})", raw.parked());
    common::poll_until(Duration::from_secs(10), Duration::ZERO, what, || {
        raw.parked() == n
    });
}

#[test]
fn api_works_like_parking_lot() {
    let m: Mutex<Vec<i32>> = Mutex::new(vec![1]);
    m.lock().push(2);
    {
        let g = m.try_lock().expect("free");
        assert!(m.is_locked());
        assert!(m.try_lock().is_none());
        assert!(m.try_lock_for(Duration::from_millis(1)).is_none());
        let mut v = MutexGuard::map(g, |v| &mut v[0]);
        *v = 10;
    }
    let mut g = m
        .try_lock_until(Instant::now() + Duration::from_millis(1))
        .unwrap();
    MutexGuard::bump(&mut g); // nobody waits: keeps the lock
    assert!(m.is_locked());
    g.push(3);
    MutexGuard::unlock_fair(g); // nobody waits: a plain unlock
    assert!(!m.is_locked());
    assert_eq!(m.into_inner(), [10, 2, 3]);
}

#[test]
fn unlock_fair_hands_the_lock_to_the_waiter() {
    let m = Arc::new(Mutex::new(0u32));
    let release = Arc::new(AtomicBool::new(false));
    let g = m.lock();
    let waiter = {
        let (m, release) = (Arc::clone(&m), Arc::clone(&release));
        thread::spawn(move || {
            let mut g = m.lock();
            *g += 1;
            // Hold it until the main thread has tried to barge in.
            while !release.load(SeqCst) {
                thread::yield_now();
            }
        })
    };
    wait_for_state(&m, LOCKED | WAITER);
    MutexGuard::unlock_fair(g);
    // The lock is in flight to the waiter or held by it: either way not ours to take.
    assert!(
        m.try_lock().is_none(),
        "a fair unlock must not let the old holder barge back in"
    );
    release.store(true, SeqCst);
    waiter.join().unwrap();
    assert_eq!(*m.lock(), 1);
}

#[test]
fn bump_lets_the_waiter_run_first() {
    let m = Arc::new(Mutex::new(()));
    let ran = Arc::new(AtomicBool::new(false));
    let mut g = m.lock();
    let waiter = {
        let (m, ran) = (Arc::clone(&m), Arc::clone(&ran));
        thread::spawn(move || {
            let _g = m.lock();
            ran.store(true, SeqCst);
        })
    };
    wait_for_state(&m, LOCKED | WAITER);
    // Registered is not enough: a waiter that has not gone to sleep yet leaves the hand-off
    // token in the queue, and bump's own relock may take it first (Go's semaphore keeps a
    // token for the next acquirer; loom's raw_mutex_unlock_fair_handoff shows it). Bump
    // yields to a waiter that is asleep.
    wait_parked(&m, 1);
    MutexGuard::bump(&mut g);
    assert!(ran.load(SeqCst), "bump returned before the waiter ran");
    drop(g);
    waiter.join().unwrap();
}

#[test]
fn unlocked_fair_releases_around_a_closure() {
    let m = Mutex::new(1);
    let mut g = m.lock();
    let seen = MutexGuard::unlocked_fair(&mut g, || *m.lock());
    assert_eq!(seen, 1);
    *g += 1;
    drop(g);
    assert_eq!(*m.lock(), 2);
}

#[cfg(feature = "lock_api_04")]
#[test]
fn lock_api_04_traits_work_too() {
    let m: lock_api_04::Mutex<RawMutex, i32> = lock_api_04::Mutex::new(1);
    *m.lock() += 1;
    let g = m.try_lock_for(Duration::from_millis(1)).unwrap();
    lock_api_04::MutexGuard::unlock_fair(g);
    let mut g = m.lock();
    lock_api_04::MutexGuard::bump(&mut g);
    assert_eq!(*g, 2);
}
