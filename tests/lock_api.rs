//! `lock_api::Mutex<gomutex::RawMutex, T>` (features `lock_api` and `lock_api_04`): what a
//! parking_lot user expects, including fair unlocking and `bump`, and a parking_lot program
//! with `Mutex` + `Condvar` + `RwLock` switched to gomutex by its type aliases
//! (`gomutex::lock_api::Condvar`).
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

/// A parking_lot program, switched to gomutex by its `use` line and two type aliases: before,
/// `use parking_lot::{Condvar, Mutex, RwLock};`. A bounded queue (two condition variables,
/// `wait`, `wait_while`, `wait_for`, `wait_until`, `notify_one`, `notify_all`) whose consumers
/// read a configuration in an `RwLock` that the producer updates (and downgrades).
mod parking_lot_program {
    use gomutex::lock_api::Condvar; // was: parking_lot::Condvar
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    type Mutex<T> = lock_api::Mutex<gomutex::RawMutex, T>; // was: parking_lot::Mutex<T>
    type RwLock<T> = lock_api::RwLock<gomutex::RawRwLock, T>; // was: parking_lot::RwLock<T>

    const CAP: usize = 4;
    const ITEMS: u64 = 2_000;
    const CONSUMERS: u64 = 3;

    struct Queue {
        items: Mutex<(VecDeque<u64>, bool)>, // (queue, closed)
        not_empty: Condvar,
        not_full: Condvar,
    }

    struct Config {
        scale: u64,
        version: u64,
    }

    /// Runs the program: what the consumers summed, and how many items each took.
    pub fn run() -> (u64, Vec<u64>) {
        let q = Arc::new(Queue {
            items: Mutex::new((VecDeque::new(), false)),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
        });
        let config = Arc::new(RwLock::new(Config {
            scale: 1,
            version: 0,
        }));
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|_| {
                let (q, config) = (Arc::clone(&q), Arc::clone(&config));
                thread::spawn(move || {
                    let (mut sum, mut taken) = (0, 0);
                    loop {
                        let mut g = q.items.lock();
                        // parking_lot's shape: the guard by `&mut`, no poisoning.
                        q.not_empty
                            .wait_while(&mut g, |(v, closed)| v.is_empty() && !*closed);
                        let Some(item) = g.0.pop_front() else {
                            return (sum, taken); // closed and drained
                        };
                        drop(g);
                        q.not_full.notify_one();
                        let c = config.read();
                        assert_eq!(c.scale, 1 + c.version % 2, "a torn configuration");
                        sum += item;
                        taken += 1;
                    }
                })
            })
            .collect();
        for item in 1..=ITEMS {
            if item % 100 == 0 {
                // Update, then keep reading what we wrote without letting a writer in.
                let mut w = config.write();
                w.version += 1;
                w.scale = 1 + w.version % 2;
                let r = lock_api::RwLockWriteGuard::downgrade(w);
                assert_eq!(r.scale, 1 + r.version % 2);
            }
            let mut g = q.items.lock();
            while g.0.len() == CAP {
                // A timed wait in a loop: time-outs only make it look again.
                let _ = q.not_full.wait_for(&mut g, Duration::from_millis(50));
            }
            g.0.push_back(item);
            drop(g);
            q.not_empty.notify_one();
        }
        let mut g = q.items.lock();
        while !g.0.is_empty() {
            let deadline = Instant::now() + Duration::from_millis(50);
            q.not_full.wait_until(&mut g, deadline);
        }
        g.1 = true;
        drop(g);
        let woken = q.not_empty.notify_all();
        assert!(woken <= CONSUMERS as usize, "{woken} woken of {CONSUMERS}");
        let results = crate::common::join_within(Duration::from_secs(60), consumers);
        let sum = results.iter().map(|r| r.0).sum();
        (sum, results.iter().map(|r| r.1).collect())
    }
}

#[test]
fn parking_lot_program_switches_by_its_aliases() {
    let (sum, taken) = parking_lot_program::run();
    assert_eq!(sum, 2_000 * 2_001 / 2, "every item consumed once");
    assert_eq!(taken.iter().sum::<u64>(), 2_000, "{taken:?}");
}

/// `notify_one` says whether it woke a sleeper: `false` with nobody waiting, `true` once the
/// waiter is asleep (the notifier tries until then; a notify that finds the waiter between its
/// unlock and its sleep is seen without a wake-up, returns `false`, and the waiter waits again).
/// `notify_all` counts the sleepers it woke.
#[test]
fn condvar_notify_reports_who_it_woke() {
    use gomutex::lock_api::Condvar;
    let cv = Condvar::new();
    assert!(!cv.notify_one());
    assert_eq!(cv.notify_all(), 0);

    const WAITERS: usize = 3;
    let pair = Arc::new((Mutex::new((0usize, false)), Condvar::new()));
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let pair = Arc::clone(&pair);
            thread::spawn(move || {
                let (m, cv) = &*pair;
                let mut g = m.lock();
                g.0 += 1;
                while !g.1 {
                    cv.wait(&mut g);
                }
            })
        })
        .collect();
    let (m, cv) = &*pair;
    let give_up = Instant::now() + Duration::from_secs(20);
    // All three woken by one `notify_all`, once all are asleep (between tries, the ones just
    // woken go back to sleep: the flag is still false).
    loop {
        let mut g = m.lock();
        if g.0 == WAITERS {
            let n = cv.notify_all();
            assert!(n <= WAITERS, "{n}");
            if n == WAITERS {
                g.1 = true;
                break;
            }
        }
        drop(g);
        assert!(Instant::now() < give_up, "the waiters never all slept");
        thread::sleep(Duration::from_millis(5));
    }
    common::join_within(Duration::from_secs(10), waiters);

    // One waiter, woken by the first `notify_one` that finds it asleep.
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let waiter = {
        let pair = Arc::clone(&pair);
        thread::spawn(move || {
            let (m, cv) = &*pair;
            let mut g = m.lock();
            cv.wait_while(&mut g, |done| !*done);
        })
    };
    let (m, cv) = &*pair;
    loop {
        let mut g = m.lock();
        if cv.notify_one() {
            *g = true;
            break;
        }
        drop(g);
        assert!(Instant::now() < give_up, "the waiter never slept");
        thread::sleep(Duration::from_millis(1));
    }
    common::join_within(Duration::from_secs(10), vec![waiter]);
}

/// The timed waits: `wait_for`/`wait_until` time out with nobody notifying, and the lock is
/// held again on return; `wait_while_for`/`wait_while_until` report a time-out only with the
/// condition still true, and return at once (not timed out) when it is false.
#[test]
fn condvar_timed_waits() {
    use gomutex::lock_api::Condvar;
    let (m, cv) = (Mutex::new(0u32), Condvar::new());
    let mut g = m.lock();
    let t = Instant::now();
    assert!(cv.wait_for(&mut g, Duration::from_millis(20)).timed_out());
    assert!(t.elapsed() >= Duration::from_millis(20));
    assert!(m.is_locked());
    *g += 1;
    let deadline = Instant::now() + Duration::from_millis(5);
    assert!(cv.wait_until(&mut g, deadline).timed_out());
    assert!(Instant::now() >= deadline);
    // Already past: returns at once, timed out.
    assert!(cv.wait_until(&mut g, Instant::now()).timed_out());
    assert!(cv
        .wait_while_for(&mut g, |n| *n == 1, Duration::from_millis(5))
        .timed_out());
    let r = cv.wait_while_until(
        &mut g,
        |n| *n == 0,
        Instant::now() + Duration::from_secs(60),
    );
    assert!(!r.timed_out(), "the condition was false: no wait");
    // A duration too large for an `Instant` waits without a deadline (here: not at all).
    assert!(!cv
        .wait_while_for(&mut g, |_| false, Duration::MAX)
        .timed_out());
    drop(g);
    assert!(!m.is_locked());
}

/// No lost wake-up: two threads alternate 20 000 times through one `Condvar`, each waiting
/// for its turn with `wait_while` and passing it with `notify_one` (a lost notification
/// hangs the pair, which the time limit reports).
#[test]
fn condvar_ping_pong_loses_no_wakeup() {
    use gomutex::lock_api::Condvar;
    // Miri interprets every step: a few hundred rounds there, within the 120 s limit.
    const ROUNDS: u64 = if cfg!(miri) { 200 } else { 20_000 };
    let pair = Arc::new((Mutex::new(0u64), Condvar::new()));
    let players: Vec<_> = (0..2u64)
        .map(|parity| {
            let pair = Arc::clone(&pair);
            thread::spawn(move || {
                let (m, cv) = &*pair;
                for _ in 0..ROUNDS {
                    let mut g = m.lock();
                    cv.wait_while(&mut g, |n| *n % 2 != parity);
                    *g += 1;
                    cv.notify_one();
                }
            })
        })
        .collect();
    common::join_within(Duration::from_secs(120), players);
    assert_eq!(*pair.0.lock(), 2 * ROUNDS);
}

/// The same `Condvar` with lock_api 0.4's guards (parking_lot 0.12's generation).
#[cfg(feature = "lock_api_04")]
#[test]
fn condvar_with_lock_api_04_guards() {
    use gomutex::lock_api::Condvar;
    let pair = Arc::new((
        lock_api_04::Mutex::<RawMutex, bool>::new(false),
        Condvar::new(),
    ));
    let t = {
        let pair = Arc::clone(&pair);
        thread::spawn(move || {
            *pair.0.lock() = true;
            pair.1.notify_all();
        })
    };
    let mut g = pair.0.lock();
    pair.1.wait_while(&mut g, |ready| !*ready);
    assert!(*g);
    assert!(pair
        .1
        .wait_for(&mut g, Duration::from_millis(1))
        .timed_out());
    drop(g);
    t.join().unwrap();
}
