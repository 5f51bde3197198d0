//! Timed locking (`try_lock_for`/`try_lock_until`: parking_lot's names, not in std) and Go's
//! algorithm under timeouts: a timed waiter that gives up must leave the state word as Go's
//! invariants require (docs/algorithm.md), in every phase of the algorithm.

mod common;
use common::{join_within, pin_to, two_cpus};

use gomutex::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, TryLockError};
use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Timed locking (not in std: parking_lot's names)

#[test]
fn try_lock_for_times_out_while_held() {
    let m = Arc::new(Mutex::new(0));
    let g = m.lock().unwrap();
    let m2 = Arc::clone(&m);
    thread::spawn(move || {
        for ms in [0u64, 1, 5, 30] {
            let t = Duration::from_millis(ms);
            let t0 = Instant::now();
            assert!(matches!(m2.try_lock_for(t), Err(TryLockError::WouldBlock)));
            let took = t0.elapsed();
            assert!(took >= t, "gave up after {took:?} < {t:?}");
            let t0 = Instant::now();
            assert!(matches!(
                m2.try_lock_until(t0 + t),
                Err(TryLockError::WouldBlock)
            ));
            assert!(t0.elapsed() >= t);
        }
        // A deadline in the past gives up at once.
        let past = Instant::now();
        assert!(m2.try_lock_until(past).is_err());
    })
    .join()
    .unwrap();
    // Same thread, held: times out rather than deadlocking.
    assert!(m.try_lock_for(Duration::from_millis(2)).is_err());
    drop(g);
    assert_eq!(m.raw().state(), 0, "timed-out waiters left state behind");
    assert_eq!(m.raw().stored_tokens(), 0);
}

#[test]
fn try_lock_for_succeeds_when_released_in_time() {
    let m = Arc::new(Mutex::new(0));
    // `Duration::MAX` overflows `Instant`: it must mean "no deadline", not a panic.
    for (i, timeout) in [Duration::from_secs(20), Duration::MAX, Duration::ZERO]
        .into_iter()
        .enumerate()
    {
        let released = Arc::new(AtomicBool::new(false));
        let g = m.lock().unwrap();
        let (m2, r2) = (Arc::clone(&m), Arc::clone(&released));
        let h = thread::spawn(move || {
            let mut g = if i < 2 {
                m2.try_lock_for(timeout)
            } else {
                m2.try_lock_until(Instant::now() + Duration::from_secs(20))
            }
            .expect("lock released long before the timeout");
            assert!(r2.load(Relaxed), "acquired while held");
            *g += 1;
        });
        thread::sleep(Duration::from_millis(20));
        released.store(true, Relaxed);
        drop(g);
        h.join().unwrap();
    }
    assert_eq!(*m.lock().unwrap(), 3);
    // Free lock: succeeds even with a zero timeout or a past deadline.
    assert!(m.try_lock_for(Duration::ZERO).is_ok());
    assert!(m.try_lock_until(Instant::now()).is_ok());
}

#[test]
fn try_lock_for_reports_poisoning() {
    let m = Arc::new(Mutex::new(1));
    let m2 = Arc::clone(&m);
    let _ = thread::spawn(move || {
        let _g = m2.lock();
        panic!("poison");
    })
    .join();
    match m.try_lock_for(Duration::from_millis(1)) {
        Err(TryLockError::Poisoned(e)) => assert_eq!(**e.get_ref(), 1),
        other => panic!("expected Poisoned, got {:?}", other.map(|g| *g)),
    }
    assert!(matches!(
        m.try_lock_until(Instant::now()),
        Err(TryLockError::Poisoned(_))
    ));
}

/// Samples a lock's state word on its own thread until [`Watch::finish`], checking two of Go's
/// invariants that hold at every instant, timeouts included (docs/algorithm.md, invariant 7):
/// STARVING implies at least one counted waiter (else an unlock hands off to nobody) and
/// implies WOKEN clear. Catches a broken state even when later traffic would repair it.
struct Watch {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<(u64, Vec<u32>)>,
}

impl Watch {
    fn start(m: &Arc<Mutex<u64>>) -> Self {
        let (m, stop) = (Arc::clone(m), Arc::new(AtomicBool::new(false)));
        let stop2 = Arc::clone(&stop);
        let handle = thread::spawn(move || {
            let (mut samples, mut bad) = (0u64, Vec::new());
            while !stop2.load(Relaxed) {
                for _ in 0..64 {
                    let s = m.raw().state();
                    samples += 1;
                    let starving = s & gomutex::algo::STARVING != 0;
                    let broken = starving
                        && (gomutex::algo::waiters(s) == 0 || s & gomutex::algo::WOKEN != 0);
                    if broken && bad.len() < 8 {
                        bad.push(s);
                    }
                }
                thread::yield_now();
            }
            (samples, bad)
        });
        Self { stop, handle }
    }

    fn finish(self, what: &str) -> u64 {
        self.stop.store(true, Relaxed);
        let (samples, bad) = self.handle.join().unwrap();
        assert!(bad.is_empty(), "{what}: impossible states seen: {:x?}", bad);
        samples
    }
}

/// Check an idle lock after a stress, without locking it first (a lock() could repair a
/// broken state): quiescent, no stored token, and try_lock works. Returns the data.
fn check_idle(m: &Mutex<u64>, what: &str) -> u64 {
    assert_eq!(m.raw().state(), 0, "{what}: state not quiescent");
    assert_eq!(
        m.raw().stored_tokens(),
        0,
        "{what}: leftover wake-up tokens"
    );
    let v = *m
        .try_lock()
        .unwrap_or_else(|e| panic!("{what}: idle lock: {e:?}"));
    v
}

/// Timed lockers with short timeouts against a holder that sometimes keeps the lock past the
/// 1 ms starvation threshold, with and without plain lockers: timeouts hit every phase of the
/// algorithm (spinning, first sleep, re-queue, starvation hand-off in flight). Mutual exclusion
/// must hold, the counter must be exact and the lock must end quiescent, round after round.
#[test]
fn timed_lockers_against_a_holder_keep_the_lock_consistent() {
    const ROUNDS: usize = 6;
    const ROUND_TIME: Duration = Duration::from_millis(250);
    const TIMED: usize = 5;
    let timeouts_us = [0u64, 1, 5, 20, 80, 300, 900, 1100, 2500];

    let mut totals = [0u64; 4]; // timed ok, timed out, plain, starvation seen
                                // Rounds go on past ROUNDS (for at most MORE) until every outcome below was seen: on a
                                // loaded machine the scheduler may keep the waiters from starving for a few rounds.
    const MORE: Duration = Duration::from_secs(30);
    let start = Instant::now();
    let covered = |t: &[u64; 4]| t[0] > 0 && t[1] > 0 && t[3] > 0;
    let mut round = 0;
    while round < ROUNDS || (!covered(&totals) && start.elapsed() < MORE) {
        let m = Arc::new(Mutex::new(0u64));
        let inside = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let starving_seen = Arc::new(AtomicUsize::new(0));
        let enter = |inside: &AtomicBool| assert!(!inside.swap(true, Relaxed), "two owners");
        // Count holds that see starvation mode (STARVING = 4 in the state word).
        let sample = |m: &Mutex<u64>, seen: &AtomicUsize| {
            if m.raw().state() & 4 != 0 {
                seen.fetch_add(1, Relaxed);
            }
        };

        let mut handles = Vec::new();
        // The holder: short and long holds (a long one makes waiters starve).
        {
            let (m, inside, stop, seen) = (
                Arc::clone(&m),
                Arc::clone(&inside),
                Arc::clone(&stop),
                Arc::clone(&starving_seen),
            );
            handles.push(thread::spawn(move || {
                let mut n = 0u64;
                let mut i = 0u64;
                while !stop.load(Relaxed) {
                    let mut g = m.lock().unwrap();
                    enter(&inside);
                    sample(&m, &seen);
                    match i % 4 {
                        0 => thread::sleep(Duration::from_micros(1500)),
                        1 => thread::sleep(Duration::from_micros(200)),
                        2 => thread::yield_now(),
                        _ => {}
                    }
                    sample(&m, &seen);
                    *g += 1;
                    n += 1;
                    inside.store(false, Relaxed);
                    drop(g);
                    i += 1;
                    if i.is_multiple_of(3) {
                        thread::yield_now();
                    }
                }
                [0, 0, n]
            }));
        }
        for t in 0..TIMED {
            let (m, inside, stop, seen) = (
                Arc::clone(&m),
                Arc::clone(&inside),
                Arc::clone(&stop),
                Arc::clone(&starving_seen),
            );
            handles.push(thread::spawn(move || {
                let (mut ok, mut out) = (0u64, 0u64);
                let mut i = t;
                while !stop.load(Relaxed) {
                    let to = Duration::from_micros(timeouts_us[i % timeouts_us.len()]);
                    i += 1;
                    let r = if i.is_multiple_of(5) {
                        m.try_lock_until(Instant::now() + to)
                    } else {
                        m.try_lock_for(to)
                    };
                    match r {
                        Ok(mut g) => {
                            enter(&inside);
                            sample(&m, &seen);
                            *g += 1;
                            ok += 1;
                            inside.store(false, Relaxed);
                        }
                        Err(TryLockError::WouldBlock) => out += 1,
                        Err(TryLockError::Poisoned(_)) => panic!("poisoned"),
                    }
                }
                [ok, out, 0]
            }));
        }
        // Odd rounds have no plain lockers: then a starving timed waiter is often the last
        // one counted when it gives up, and must end starvation mode as it leaves.
        for _ in 0..if round % 2 == 0 { 2 } else { 0 } {
            let (m, inside, stop, seen) = (
                Arc::clone(&m),
                Arc::clone(&inside),
                Arc::clone(&stop),
                Arc::clone(&starving_seen),
            );
            handles.push(thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Relaxed) {
                    let mut g = m.lock().unwrap();
                    enter(&inside);
                    sample(&m, &seen);
                    *g += 1;
                    n += 1;
                    inside.store(false, Relaxed);
                }
                [0, 0, n]
            }));
        }
        let watch = Watch::start(&m);
        thread::sleep(ROUND_TIME);
        stop.store(true, Relaxed);
        let res = join_within(Duration::from_secs(30), handles);
        watch.finish(&format!("round {round}"));
        let sum = |k: usize| res.iter().map(|r| r[k]).sum::<u64>();
        let (ok, out, plain) = (sum(0), sum(1), sum(2));
        let v = check_idle(&m, &format!("round {round}"));
        assert_eq!(v, ok + plain, "round {round}: counter not exact");
        totals[0] += ok;
        totals[1] += out;
        totals[2] += plain;
        totals[3] += starving_seen.load(Relaxed) as u64;
        round += 1;
    }
    eprintln!(
        "{round} rounds: timed ok {}, timed out {}, plain {}, holds seen in starvation mode {}",
        totals[0], totals[1], totals[2], totals[3]
    );
    // The scenario must really exercise both outcomes of a timed lock and starvation mode.
    assert!(totals[0] > 0 && totals[1] > 0, "{totals:?}");
    assert!(totals[3] > 0, "starvation mode never seen: {totals:?}");
}

/// A dedicated squeeze on hand-off plus deadline: one holder keeps the lock for just over the
/// starvation threshold and relocks at once, while timed waiters' deadlines fall around its
/// holds: a woken waiter loses the race and starves the lock, then times out, often as the
/// last waiter (so it must end starvation mode), or while a hand-off is in flight to it or to
/// a neighbour. Every other hold the holder takes with a try_lock loop (an accept-lock style
/// user, never counted as a waiter itself), else with lock(). The holder and the waiters run
/// on different CPUs where there are two, or the scheduler lets a woken waiter preempt the
/// holder and win, and starvation mode never comes.
#[test]
fn deadlines_expiring_around_starvation_handoffs() {
    const WAITERS: usize = 4;
    const CYCLES: u64 = 150;
    let cpus = two_cpus();
    let m = Arc::new(Mutex::new(0u64));
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..WAITERS as u64 {
        let (m, stop, ok) = (Arc::clone(&m), Arc::clone(&stop), Arc::clone(&ok));
        handles.push(thread::spawn(move || {
            pin_to(cpus.map(|c| c.1));
            let mut i = t;
            while !stop.load(Relaxed) {
                i += 1;
                let to = Duration::from_micros(900 + 150 * (i % 5));
                if let Ok(mut g) = m.try_lock_for(to) {
                    *g += 1;
                    ok.fetch_add(1, Relaxed);
                }
            }
        }));
    }
    // And one plain locker beside them until the holder has seen starvation mode: it surely
    // sleeps through a whole hold (over 1 ms) and is woken by the unlock while the holder
    // relocks, so starvation mode comes even when a loaded scheduler wakes the timed waiters
    // only after their deadlines. Then the timed waiters are on their own again (and often
    // the last waiter, which must end starvation mode).
    let seen = Arc::new(AtomicBool::new(false));
    {
        let (m, stop, ok, seen) = (
            Arc::clone(&m),
            Arc::clone(&stop),
            Arc::clone(&ok),
            Arc::clone(&seen),
        );
        handles.push(thread::spawn(move || {
            pin_to(cpus.map(|c| c.1));
            while !stop.load(Relaxed) && !seen.load(Relaxed) {
                *m.lock().unwrap() += 1;
                ok.fetch_add(1, Relaxed);
            }
        }));
    }
    let watch = Watch::start(&m);
    let m2 = Arc::clone(&m);
    let (held, starving) = thread::spawn(move || {
        pin_to(cpus.map(|c| c.0));
        let (mut held, mut starving) = (0u64, 0u64);
        // Past CYCLES (for at most MORE), hold on until starvation mode was seen where it
        // must be: on a loaded machine a woken waiter may win the race for many cycles.
        const MORE: Duration = Duration::from_secs(30);
        let start = Instant::now();
        let mut cycle = 0u64;
        while cycle < CYCLES || (cpus.is_some() && starving == 0 && start.elapsed() < MORE) {
            let mut g = if cycle.is_multiple_of(2) {
                let give_up = Instant::now() + Duration::from_secs(10);
                loop {
                    match m2.try_lock() {
                        Ok(g) => break g,
                        Err(_) => assert!(Instant::now() < give_up, "try_lock locked out"),
                    }
                    std::hint::spin_loop();
                }
            } else {
                m2.lock().unwrap()
            };
            *g += 1;
            held += 1;
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_micros(1200) {
                std::hint::spin_loop();
            }
            if m2.raw().state() & gomutex::algo::STARVING != 0 {
                starving += 1;
                seen.store(true, Relaxed);
            }
            drop(g);
            cycle += 1;
        }
        (held, starving)
    })
    .join()
    .unwrap();
    stop.store(true, Relaxed);
    join_within(Duration::from_secs(30), handles);
    watch.finish("hand-off squeeze");
    eprintln!(
        "hand-off squeeze: {held} holds ({starving} ending in starvation mode), {} timed locks",
        ok.load(Relaxed)
    );
    assert_eq!(check_idle(&m, "hand-off squeeze"), held + ok.load(Relaxed));
    if cpus.is_some() {
        assert!(starving > 0, "starvation mode never reached");
    }
}
