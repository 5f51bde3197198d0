//! The scenarios of `ShmMutex::stats`, each constructed deterministically (a waiter is known to
//! be queued before the holder lets go, a woken waiter is stopped until the lock is taken
//! again), with exact expected counts.
//!
//! `harness = false`: the tests run one after another on the main thread, so the process is
//! single-threaded whenever it forks. Run one with `cargo test --test shm_stats -- <name> --exact`.

use gomutex::shm::{Config, LockError, LockStats, ShmMutex, ShmMutexGuard};
use std::time::Duration;

#[path = "../common/mod.rs"]
mod common;
use common::procs::{self, fork, signal, wait_limit, wait_stopped};

const LIMIT: Duration = Duration::from_secs(30);
/// Longer than Go's 1 ms starvation threshold, with room to spare.
const HOLD: Duration = Duration::from_millis(5);

/// Wait until `n` waiters are registered in the lock's state word.
fn until_waiters(m: &ShmMutex<u64>, n: u32) {
    common::poll_until(
        LIMIT,
        Duration::from_micros(100),
        || format!("{n} waiter(s): {:?}", m.diagnostics()),
        || m.diagnostics().waiters >= n,
    );
}

/// The lock held by this process, and a forked child that blocks in `lock` (then unlocks
/// and exits 0), known to be queued for `HOLD` already: a waiter past Go's 1 ms threshold.
fn held_with_queued_child(m: &ShmMutex<u64>) -> (ShmMutexGuard<'_, u64>, libc::pid_t) {
    let g = m.lock().unwrap();
    let child = fork(|| {
        lock_once(m);
        0
    });
    until_waiters(m, 1);
    std::thread::sleep(HOLD);
    (g, child)
}

/// Lock and release once, reporting an owner death as a failure.
fn lock_once(m: &ShmMutex<u64>) {
    *m.lock().expect("no owner died") += 1;
}

/// Single process: every kind of acquisition counts once, failures never, and nobody waited.
fn uncontended_acquisitions() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    assert_eq!(m.stats(), LockStats::default());
    for _ in 0..10 {
        lock_once(&m);
    }
    drop(m.try_lock().unwrap());
    drop(m.try_lock_for(Duration::from_millis(1)).unwrap());
    let g = m.lock().unwrap();
    assert!(m.try_lock().is_err());
    assert!(m.try_lock_for(Duration::from_millis(2)).is_err());
    drop(g);
    let s = m.stats();
    assert_eq!(s.acquisitions, 13, "{s:?}");
    // The timed attempt that gave up went through the slow path but acquired nothing.
    assert_eq!(
        (s.contended, s.slept, s.total_wait_ns, s.worst_wait_ns),
        (0, 0, 0, 0),
        "{s:?}"
    );
    assert_eq!(
        s.starvation_entries + s.owner_deaths + s.recoveries,
        0,
        "{s:?}"
    );
}

/// Two processes: a child blocks in `lock` while the parent holds the lock for `HOLD` after
/// the child is queued: one contended acquisition that waited at least `HOLD`.
fn contended_across_processes() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let (g, child) = held_with_queued_child(&m);
    drop(g);
    assert_eq!(wait_limit(child, LIMIT, "contended child"), 0);
    let s = m.stats();
    assert_eq!((s.acquisitions, s.contended, s.slept), (2, 1, 1), "{s:?}");
    assert!(s.worst_wait_ns >= HOLD.as_nanos() as u64, "{s:?}");
    assert_eq!(s.total_wait_ns, s.worst_wait_ns, "one wait: {s:?}");
    assert_eq!(*m.lock().unwrap(), 1);
}

/// A contended acquisition that never sleeps is counted, not timed (no clock is read for it):
/// the child stops between its failed fast path and Go's slow path, the parent unlocks, and
/// the continued child finds the lock free at its slow path's first look.
fn contended_without_sleeping_is_counted_not_timed() {
    // `lock`'s fast path failed, the slow path not begun.
    use gomutex::__crash::CONTENDED;
    let m = ShmMutex::anonymous(0u64).unwrap();
    let g = m.lock().unwrap();
    let child = fork(|| {
        gomutex::__crash::stop_at(CONTENDED);
        lock_once(&m);
        0
    });
    wait_stopped(child);
    drop(g);
    signal(child, libc::SIGCONT);
    assert_eq!(wait_limit(child, LIMIT, "contended child"), 0);
    let s = m.stats();
    assert_eq!((s.acquisitions, s.contended, s.slept), (2, 1, 0), "{s:?}");
    assert_eq!((s.total_wait_ns, s.worst_wait_ns), (0, 0), "{s:?}");
    assert_eq!(*m.lock().unwrap(), 1);
}

/// Go's fairness scenario: a waiter that waited over 1 ms is woken, but the unlocker takes the
/// lock back before the waiter runs (made certain by stopping the waiter across the unlock and
/// the re-lock); the waiter, finding the lock held, switches it to starvation mode, and the
/// next unlock hands the lock to it.
fn starvation_entry_in_the_fairness_scenario() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let (g, child) = held_with_queued_child(&m);
    signal(child, libc::SIGSTOP);
    wait_stopped(child);
    // The unlock wakes the (stopped) waiter; the lock is free in normal mode, so this process
    // barges straight back in.
    drop(g);
    let g = m
        .try_lock()
        .expect("the woken waiter cannot run: the lock is free");
    assert_eq!(m.stats().starvation_entries, 0);
    signal(child, libc::SIGCONT);
    // The waiter finds the lock held after waiting > 1 ms: STARVING.
    common::poll_until(
        LIMIT,
        Duration::from_micros(100),
        || format!("starvation mode: {:?}", m.diagnostics()),
        || m.diagnostics().state & gomutex::algo::STARVING != 0,
    );
    drop(g); // hands the lock to the waiter
    assert_eq!(wait_limit(child, LIMIT, "starving child"), 0);
    let s = m.stats();
    assert_eq!(s.starvation_entries, 1, "{s:?}");
    assert_eq!((s.acquisitions, s.contended, s.slept), (3, 1, 1), "{s:?}");
    assert!(s.worst_wait_ns >= HOLD.as_nanos() as u64, "{s:?}");
    assert_eq!(*m.lock().unwrap(), 1);
}

/// An owner dies holding the lock: the next acquisition reports it, recovery ran once, and the
/// owner-died report repeats until `mark_consistent`.
fn owner_death_reported_and_recovered() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let child = fork(|| {
        std::mem::forget(m.lock().unwrap());
        0
    });
    assert_eq!(wait_limit(child, LIMIT, "dying owner"), 0);
    let s = m.stats();
    assert_eq!(
        (s.acquisitions, s.owner_deaths, s.recoveries),
        (1, 0, 0),
        "{s:?}"
    );
    let g = match m.lock() {
        Err(LockError::OwnerDied(g)) => g,
        other => panic!("expected OwnerDied, got {:?}", other.map(|_| ())),
    };
    let s = m.stats();
    assert_eq!(
        (s.owner_deaths, s.owner_died_reported, s.recoveries),
        (1, 1, 1),
        "{s:?}"
    );
    assert_eq!((s.acquisitions, s.contended), (2, 1), "{s:?}");
    drop(g);
    // Not marked consistent: reported again.
    let g = m.lock().unwrap_err().into_inner();
    g.mark_consistent();
    drop(g);
    lock_once(&m);
    let s = m.stats();
    assert_eq!(
        (s.owner_deaths, s.owner_died_reported, s.recoveries),
        (1, 2, 1),
        "{s:?}"
    );
    assert_eq!(s.acquisitions, 4, "{s:?}");
}

/// One participant slot (and the spare): processes that die without leaving take the slot
/// one after another, each recovered by the next; no count is lost, the sums only grow.
fn sums_monotonic_across_slot_reuse() {
    let m = ShmMutex::anonymous_with(0u64, Config::new().participants(1).waiter_slots(2)).unwrap();
    let mut last = m.stats();
    for (round, n) in [5u64, 3, 7].into_iter().enumerate() {
        let child = fork(|| {
            for _ in 0..n {
                // A dead predecessor never held the lock: no owner death to report.
                lock_once(&m);
            }
            // Leave without dropping the handle: the slot stays taken by a dead process.
            0
        });
        assert_eq!(wait_limit(child, LIMIT, "slot user"), 0);
        let s = m.stats();
        assert_eq!(
            s.acquisitions,
            last.acquisitions + n,
            "round {round}: {s:?}"
        );
        // Each child after the first had to recover its predecessor's slot to get one.
        assert_eq!(s.recoveries, round as u64, "round {round}: {s:?}");
        assert!(s.contended >= last.contended && s.cv_waits >= last.cv_waits);
        assert!(s.slept >= last.slept && s.total_wait_ns >= last.total_wait_ns);
        assert_eq!(
            m.diagnostics().participants,
            1,
            "the dead child's slot: round {round}"
        );
        last = s;
    }
    assert_eq!(last.acquisitions, 15);
    assert_eq!(*m.lock().unwrap(), 15);
}

/// The region's condition variable: waits, time-outs and notifies, across processes.
fn condvar_counts() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let cv = m.condvar();
    let g = m.lock().unwrap();
    let (g, t) = cv.wait_timeout(g, Duration::from_millis(2)).unwrap();
    assert!(t.timed_out());
    drop(g);
    let child = fork(|| {
        let cv = m.condvar();
        let g = m.lock().unwrap();
        let g = cv.wait_while(g, |v| *v == 0).unwrap();
        drop(g);
        0
    });
    // The child sleeps in the condvar (one wait begun) before the value changes.
    common::poll_until(
        LIMIT,
        Duration::from_micros(100),
        || format!("the child's wait: {:?}", m.stats()),
        || m.stats().cv_waits == 2,
    );
    *m.lock().unwrap() = 1;
    cv.notify_one();
    assert_eq!(wait_limit(child, LIMIT, "condvar child"), 0);
    let s = m.stats();
    assert_eq!(s.cv_timeouts, 1, "{s:?}");
    assert_eq!(s.cv_notifies, 1, "{s:?}");
    // The child may have woken spuriously (a probe tick) and waited again.
    assert!(s.cv_waits >= 2, "{s:?}");
}

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[
        ("uncontended_acquisitions", uncontended_acquisitions),
        ("contended_across_processes", contended_across_processes),
        (
            "contended_without_sleeping_is_counted_not_timed",
            contended_without_sleeping_is_counted_not_timed,
        ),
        (
            "starvation_entry_in_the_fairness_scenario",
            starvation_entry_in_the_fairness_scenario,
        ),
        (
            "owner_death_reported_and_recovered",
            owner_death_reported_and_recovered,
        ),
        (
            "sums_monotonic_across_slot_reuse",
            sums_monotonic_across_slot_reuse,
        ),
        ("condvar_counts", condvar_counts),
    ];
    procs::run_cases("shm_stats", &args, tests);
}
