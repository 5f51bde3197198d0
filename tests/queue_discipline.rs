//! Queue discipline on the real in-process queue (`ParkSema` on `parking_lot_core`):
//!
//! * a re-queued sleeper (`lifo == true`: it lost a race after being woken) is served before
//!   every first-time sleeper, and first-time sleepers are served FIFO;
//! * in starvation mode the lock is handed off FIFO, the re-queued waiter first, and a newcomer
//!   queues behind every waiter instead of barging.
//!
//! "Is this thread parked yet?" is answered structurally, never by a sleep: `parking_lot_core`
//! keys its queues by address and `ParkSema` parks on its own address, so an `unpark_filter` on
//! that key whose filter skips every thread lists the parked threads (in queue order) without
//! waking any. The lock's waiter count (`state() >> 3`) is checked beside it.

mod common;
use common::{pin_to, two_cpus};

use gomutex::algo::{LOCKED, STARVING, WAITER_SHIFT, WOKEN};
use gomutex::sema::{ParkSema, WaitQueue};
use gomutex::RawMutex;
use parking_lot_core::{FilterOp, DEFAULT_UNPARK_TOKEN};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// These tests park threads on purpose and watch them: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Park tokens of the threads parked on `key`, oldest first. Wakes nobody.
fn parked_on(key: usize) -> Vec<usize> {
    let mut tokens = Vec::new();
    // SAFETY: `key` is the address of a queue owned by the calling test; the filter only
    // records and skips, the callback does nothing, neither calls into parking_lot.
    unsafe {
        parking_lot_core::unpark_filter(
            key,
            |t| {
                tokens.push(t.0);
                FilterOp::Skip
            },
            |_| DEFAULT_UNPARK_TOKEN,
        );
    }
    tokens
}

/// Poll `cond` (no fixed sleeps: it is the signal) for up to 10 s.
fn wait_until(what: impl Fn() -> String, cond: impl FnMut() -> bool) {
    common::poll_until(
        Duration::from_secs(10),
        Duration::from_micros(50),
        what,
        cond,
    );
}

fn sema_key(s: &ParkSema) -> usize {
    s as *const ParkSema as usize
}

/// Park one thread per `(name, lifo)` on `sema`, in this order, each really parked before the
/// next starts. Every thread records its name in `woken` when its `acquire` returns.
fn park_in_order(
    sema: &Arc<ParkSema>,
    sleepers: &[(char, bool)],
    woken: &Arc<Mutex<Vec<char>>>,
) -> Vec<thread::JoinHandle<()>> {
    let key = sema_key(sema);
    let mut handles = Vec::new();
    for (i, &(name, lifo)) in sleepers.iter().enumerate() {
        let (s, w) = (Arc::clone(sema), Arc::clone(woken));
        handles.push(thread::spawn(move || {
            assert!(s.acquire(lifo, None));
            w.lock().unwrap().push(name);
        }));
        wait_until(
            || format!("{name} is parked ({:?})", parked_on(key)),
            || parked_on(key).len() == i + 1,
        );
    }
    handles
}

#[test]
fn park_sema_serves_requeued_sleepers_first_then_fifo() {
    let _s = serial();
    let sema = Arc::new(ParkSema::new());
    let woken = Arc::new(Mutex::new(Vec::new()));
    let sleepers = [
        ('A', false),
        ('B', false),
        ('C', true),
        ('D', true),
        ('E', false),
    ];
    let handles = park_in_order(&sema, &sleepers, &woken);
    let key = sema_key(&sema);
    for k in 0..sleepers.len() {
        // The hand-off flag is only a hint to the queue: it must not change the order.
        sema.release(k % 2 == 0);
        wait_until(
            || format!("release {k} woke someone: {:?}", woken.lock().unwrap()),
            || woken.lock().unwrap().len() == k + 1,
        );
        assert_eq!(
            parked_on(key).len(),
            sleepers.len() - k - 1,
            "one release, one wake"
        );
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*woken.lock().unwrap(), ['C', 'D', 'A', 'B', 'E']);
    assert_eq!(sema.stored_tokens(), 0);
}

#[test]
fn park_sema_keeps_a_release_nobody_waits_for() {
    let _s = serial();
    let sema = ParkSema::new();
    sema.release(false);
    sema.release(true);
    assert_eq!(sema.stored_tokens(), 2);
    // Both acquires take a stored token instead of sleeping (a sleep here would never end).
    let t0 = Instant::now();
    assert!(sema.acquire(false, None));
    assert!(sema.acquire(true, Some(Instant::now() + Duration::from_secs(60))));
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert_eq!(sema.stored_tokens(), 0);
    // With no token, a timed acquire times out, having consumed nothing.
    let d = Duration::from_millis(20);
    let t0 = Instant::now();
    assert!(!sema.acquire(false, Some(t0 + d)));
    assert!(t0.elapsed() >= d);
    assert_eq!(sema.stored_tokens(), 0);
    assert!(parked_on(sema_key(&sema)).is_empty());
}

#[test]
fn park_sema_timed_out_front_sleeper_leaves_no_trace() {
    let _s = serial();
    let sema = Arc::new(ParkSema::new());
    // A front sleeper times out: it must no longer count as parked at the front, or releases
    // would skip the back sleepers looking for it (and store tokens instead of waking them).
    let d = Duration::from_millis(30);
    let t0 = Instant::now();
    assert!(!sema.acquire(true, Some(t0 + d)));
    assert!(t0.elapsed() >= d);
    assert!(parked_on(sema_key(&sema)).is_empty());

    let woken = Arc::new(Mutex::new(Vec::new()));
    let handles = park_in_order(&sema, &[('A', false), ('B', false)], &woken);
    sema.release(false);
    wait_until(
        || format!("A woken: {:?}", woken.lock().unwrap()),
        || woken.lock().unwrap().len() == 1,
    );
    assert_eq!(
        sema.stored_tokens(),
        0,
        "the release was kept instead of waking A"
    );
    sema.release(false);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*woken.lock().unwrap(), ['A', 'B']);
    assert_eq!(sema.stored_tokens(), 0);
}

/// The `parking_lot_core` key of `m`'s queue: the one address inside `m` threads park on
/// (call while at least one thread is parked on it).
fn raw_queue_key(m: &RawMutex) -> usize {
    let base = m as *const RawMutex as usize;
    let mut found = Vec::new();
    wait_until(
        || format!("a waiter is parked inside the RawMutex at {base:#x}"),
        || {
            found = (0..std::mem::size_of::<RawMutex>())
                .step_by(std::mem::align_of::<u32>())
                .map(|off| base + off)
                .filter(|&k| !parked_on(k).is_empty())
                .collect();
            !found.is_empty()
        },
    );
    assert_eq!(
        found.len(),
        1,
        "several parking keys inside one RawMutex: {found:?}"
    );
    found[0]
}

const fn waiters(n: usize) -> u32 {
    (n as u32) << WAITER_SHIFT
}

/// What each locker saw: its id, and whether the lock was in starvation mode while it held it.
type Log = Arc<Mutex<Vec<(usize, bool)>>>;

fn spawn_locker(
    m: &Arc<RawMutex>,
    id: usize,
    log: &Log,
    cpu: Option<usize>,
) -> thread::JoinHandle<()> {
    let (m, log) = (Arc::clone(m), Arc::clone(log));
    thread::spawn(move || {
        pin_to(cpu);
        m.lock();
        let starving = m.state() & STARVING != 0;
        log.lock().unwrap().push((id, starving));
        // SAFETY: locked above.
        unsafe { m.unlock() };
    })
}

/// One attempt at: `N` waiters queue in a known order behind the main thread, wait > 1 ms,
/// the main thread makes the first one lose a race (so it re-queues at the front and turns on
/// starvation mode), a newcomer queues, then the main thread unlocks and the lock travels
/// down the queue by hand-off. Returns `false` if the first waiter won the race instead (the
/// scheduler ran it between our unlock and relock), so starvation mode was not set up.
fn fifo_handoff_attempt(cpus: Option<(usize, usize)>) -> bool {
    const N: usize = 4;
    let (mine, theirs) = (cpus.map(|c| c.0), cpus.map(|c| c.1));
    pin_to(mine);
    let m = Arc::new(RawMutex::new());
    let log: Log = Arc::default();
    m.lock();

    let mut handles = vec![spawn_locker(&m, 0, &log, theirs)];
    let key = raw_queue_key(&m);
    for id in 1..N {
        handles.push(spawn_locker(&m, id, &log, theirs));
        wait_until(
            || format!("waiter {id} parked; state {:#x}", m.state()),
            || parked_on(key).len() == id + 1,
        );
    }
    assert_eq!(
        m.state(),
        LOCKED | waiters(N),
        "{N} waiters registered behind us"
    );
    // Everybody has now waited more than the 1 ms starvation threshold.
    thread::sleep(Duration::from_millis(3));

    // Normal-mode unlock: waiter 0 (the oldest) is woken; relock before it gets to run.
    // SAFETY: we hold the lock.
    unsafe { m.unlock() };
    m.lock();
    if !log.lock().unwrap().is_empty() {
        // Waiter 0 won the race. Let everything finish; the order must still be arrival order.
        // SAFETY: we hold the lock.
        unsafe { m.unlock() };
        for h in handles {
            h.join().unwrap();
        }
        let ids: Vec<usize> = log.lock().unwrap().iter().map(|e| e.0).collect();
        assert_eq!(ids, (0..N).collect::<Vec<_>>());
        return false;
    }
    // Waiter 0 lost: having waited > 1 ms it re-registers with STARVING and parks at the front.
    wait_until(
        || format!("waiter 0 re-queued starving; state {:#x}", m.state()),
        || m.state() == LOCKED | STARVING | waiters(N) && parked_on(key).len() == N,
    );
    assert_eq!(m.state() & WOKEN, 0);
    // A newcomer in starvation mode queues at the back; it must not barge later either.
    handles.push(spawn_locker(&m, N, &log, theirs));
    wait_until(
        || format!("newcomer parked; state {:#x}", m.state()),
        || parked_on(key).len() == N + 1,
    );
    assert_eq!(m.state(), LOCKED | STARVING | waiters(N + 1));

    // Hand-offs: 0 (re-queued, at the front although it re-parked last), then 1, 2, 3 (FIFO),
    // then the newcomer. Waiters 0..N waited > 1 ms and are not last: starvation mode stays
    // while they hold (fix-up -7); the newcomer is last and ends it (fix-up -11).
    // SAFETY: we hold the lock.
    unsafe { m.unlock() };
    for h in handles {
        h.join().unwrap();
    }
    let got = log.lock().unwrap().clone();
    let want: Vec<(usize, bool)> = (0..=N).map(|id| (id, id < N)).collect();
    assert_eq!(
        got, want,
        "(id, held in starvation mode) in acquisition order"
    );
    assert_eq!(m.state(), 0);
    assert_eq!(m.stored_tokens(), 0);
    true
}

#[test]
fn starvation_mode_hands_off_fifo_with_the_requeued_waiter_first() {
    let _s = serial();
    let cpus = two_cpus();
    for attempt in 1..=5 {
        // A thread of its own, so the pinning ends with it.
        if thread::spawn(move || fifo_handoff_attempt(cpus))
            .join()
            .unwrap()
        {
            return;
        }
        eprintln!("attempt {attempt}: the woken waiter won the race; retrying");
    }
    panic!("could not make a woken waiter lose a race in 5 attempts");
}

/// Spin (yielding) until `cond`, for up to 10 s: for phases that must be seen within
/// milliseconds even on a loaded machine, where a sleeping poller may wake too late.
fn spin_until(what: &str, cond: impl FnMut() -> bool) {
    common::poll_until(
        Duration::from_secs(10),
        Duration::ZERO,
        || what.into(),
        cond,
    );
}

/// A timed waiter's sleep ends as the holder releases the lock in starvation mode, its
/// hand-off aimed at that very waiter: the holder watches the queue and unlocks the instant
/// the timed-out sleep has left it. Whichever way the race goes (the waiter leaves the count
/// as the last waiter, ending starvation mode; or it sees its hand-off in flight and takes the
/// lock), no hand-off may be stranded: after every cycle the lock must be idle, with no token
/// kept and `try_lock` working. (The narrowest interleavings are loom's job; this checks the
/// real queue and clock, up to 150 times.)
#[test]
fn timeout_racing_a_starvation_handoff_strands_nothing() {
    let _s = serial();
    let cpus = two_cpus();
    let r = thread::spawn(move || timeout_race_cycles(cpus))
        .join()
        .unwrap();
    eprintln!(
        "{} cycles, {} with a starving waiter timing out at the hand-off (final timeout {:?}); \
         it took the in-flight hand-off in {}",
        r.cycles, r.races, r.timeout, r.took_handoff
    );
    assert!(r.races > 0, "never set up the race in {} cycles", r.cycles);
}

struct RaceStats {
    cycles: usize,
    /// Cycles in which the starving waiter's sleep timed out with the holder about to unlock.
    races: usize,
    /// Races in which the waiter then took the hand-off (it saw it in flight).
    took_handoff: usize,
    timeout: Duration,
}

/// The holder's side of the test above (on its own thread, pinned if there are two CPUs).
fn timeout_race_cycles(cpus: Option<(usize, usize)>) -> RaceStats {
    // The waiter's timeout must outlast our 1.2 ms hold plus its own wake-up and re-queue: on
    // a machine whose CPUs are busy elsewhere that takes longer, so a cycle in which the
    // waiter gave up too early doubles it. 150 races, 300 cycles or 5 s end the test.
    let mut timeout = Duration::from_millis(4);
    let budget = Instant::now() + Duration::from_secs(5);
    let (mine, theirs) = (cpus.map(|c| c.0), cpus.map(|c| c.1));
    pin_to(mine);
    let m = Arc::new(RawMutex::new());

    // Find the queue's key once, with a helper parked on it.
    m.lock();
    let helper = spawn_locker(&m, 0, &Arc::default(), None);
    let key = raw_queue_key(&m);
    // SAFETY: we hold the lock.
    unsafe { m.unlock() };
    helper.join().unwrap();

    let (go_tx, go_rx) = std::sync::mpsc::channel::<Instant>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<bool>();
    let m2 = Arc::clone(&m);
    let waiter = thread::spawn(move || {
        pin_to(theirs);
        for deadline in go_rx {
            let got = m2.try_lock_until(deadline);
            if got {
                // SAFETY: acquired just above.
                unsafe { m2.unlock() };
            }
            done_tx.send(got).unwrap();
        }
    });
    let (mut races, mut took_handoff, mut cycles) = (0, 0, 0);
    while cycles < 300 && races < 150 && Instant::now() < budget {
        let cycle = cycles;
        cycles += 1;
        m.lock();
        go_tx.send(Instant::now() + timeout).unwrap();
        let mut done = None;
        let mut finished = || {
            if done.is_none() {
                done = done_rx.try_recv().ok();
            }
            done.is_some()
        };
        // On a loaded machine the waiter may time out before a phase is seen: then the cycle
        // is just a plain timeout, still checked below.
        spin_until("the waiter parks", || {
            finished() || parked_on(key).len() == 1
        });
        let mut raced = false;
        if !finished() {
            // Past the threshold, make the woken waiter lose a race: it re-queues, starving.
            thread::sleep(Duration::from_micros(1200));
            // SAFETY: we hold the lock.
            unsafe { m.unlock() };
            m.lock();
            spin_until("the waiter re-queues starving", || {
                finished()
                    || (m.state() == LOCKED | STARVING | waiters(1) && parked_on(key).len() == 1)
            });
            raced = !finished();
        }
        if !raced {
            timeout = (timeout * 2).min(Duration::from_millis(100));
        }
        if raced {
            races += 1;
            // Unlock the instant the timed-out sleep has left the queue: inside the poll, to
            // keep our way to the unlock as short as the waiter's way to its decision.
            spin_until("the waiter's sleep times out", || {
                let gone = parked_on(key).is_empty();
                if gone {
                    // SAFETY: we hold the lock.
                    unsafe { m.unlock() };
                }
                gone
            });
        } else {
            // SAFETY: we hold the lock.
            unsafe { m.unlock() };
        }
        let got = match done {
            Some(got) => got,
            None => done_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("the waiter never returned"),
        };
        took_handoff += usize::from(got && raced);
        // The waiter is done: the lock must be idle with no token left over.
        assert_eq!(m.state(), 0, "cycle {cycle}: state not idle");
        assert_eq!(
            m.stored_tokens(),
            0,
            "cycle {cycle}: a hand-off token was stranded"
        );
        assert!(m.try_lock(), "cycle {cycle}: idle lock refused try_lock");
        // SAFETY: try_lock succeeded.
        unsafe { m.unlock() };
    }
    drop(go_tx);
    waiter.join().unwrap();
    RaceStats {
        cycles,
        races,
        took_handoff,
        timeout,
    }
}
