//! `RwLock`/`RawRwLock`: Go's `rwmutex_test.go` ported (TestParallelReaders, TestRWMutex's
//! try-lock truth table and HammerRWMutex), Go's policy (writer preference, the batch order),
//! the deadlines (readers that give up, ghost writers), and the lock_api traits. std parity:
//! `tests/rwlock_std_api.rs`.

mod common;
use common::join_within;
#[path = "rwlock/table.rs"]
mod table;

use gomutex::{RawRwLock, RwLock};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex as StdMutex, TryLockError};
use std::thread;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

/// Wait (yielding) until `pred` holds, failing instead of hanging.
fn wait_for(what: &str, pred: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !pred() {
        assert!(t0.elapsed() < LIMIT, "gave up waiting for {what}");
        thread::yield_now();
    }
}

/// The word back at zero (no reader, no writer, no waiting bit), no token kept, nobody parked.
fn assert_quiescent(l: &RawRwLock) {
    wait_for("quiescence (nobody parked)", || l.parked() == 0);
    assert_eq!(l.state(), 0, "state word (rwword's layout)");
    assert_eq!(l.stored_tokens(), 0, "writers' mutex tokens");
}

// ---------------------------------------------------------------------------------------------
// Go's rwmutex_test.go

/// Go's doTestParallelReaders: `n` readers all hold the read lock at once before any releases.
fn parallel_readers(n: usize) {
    let l = Arc::new(RwLock::new(()));
    let locked = Arc::new(Barrier::new(n + 1));
    let unlock = Arc::new(Barrier::new(n + 1));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (l, locked, unlock) = (l.clone(), locked.clone(), unlock.clone());
            thread::spawn(move || {
                let g = l.read().unwrap();
                locked.wait();
                unlock.wait();
                drop(g);
            })
        })
        .collect();
    locked.wait(); // every RLock succeeded while the others still hold theirs
    assert!(matches!(l.try_write(), Err(TryLockError::WouldBlock)));
    unlock.wait();
    join_within(LIMIT, handles);
    assert_quiescent(l.raw());
}

#[test]
fn go_parallel_readers() {
    parallel_readers(1);
    parallel_readers(3);
    parallel_readers(4);
}

/// Go's TestRWMutex preamble.
#[test]
fn go_try_lock_truth_table() {
    let m = RawRwLock::new();
    m.write();
    assert!(!m.try_write(), "TryLock succeeded with mutex locked");
    assert!(!m.try_read(), "TryRLock succeeded with mutex locked");
    // SAFETY: the lock is held in this mode (taken above).
    unsafe { m.unlock_write() };

    assert!(m.try_write(), "TryLock failed with mutex unlocked");
    // SAFETY: the lock is held in this mode (taken above).
    unsafe { m.unlock_write() };

    assert!(m.try_read(), "TryRLock failed with mutex unlocked");
    assert!(m.try_read(), "TryRLock failed with mutex rlocked");
    assert!(!m.try_write(), "TryLock succeeded with mutex rlocked");
    // SAFETY: the lock is held in this mode (taken above).
    unsafe { m.unlock_read() };
    // SAFETY: the lock is held in this mode (taken above).
    unsafe { m.unlock_read() };
    assert_quiescent(&m);
}

/// How the hammer's threads take the lock.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Go's: `read`/`write`.
    Blocking,
    /// `try_read_for`/`try_write_for` with deadlines short enough to expire under contention,
    /// so readers give up and ghost writers are made and finished all the time.
    Timed,
}

/// Go's HammerRWMutex: 2 writers and `readers` readers; `activity` is readers + 10000 × writers,
/// checked inside every critical section.
fn hammer(readers: usize, iterations: usize, mode: Mode) -> (usize, usize) {
    let l = Arc::new(RawRwLock::new());
    let activity = Arc::new(AtomicI32::new(0));
    let (got, missed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let short = Duration::from_micros(20);
    let spawn = |writer: bool| {
        let (l, activity, got, missed) = (l.clone(), activity.clone(), got.clone(), missed.clone());
        thread::spawn(move || {
            for _ in 0..iterations {
                let ok = match (mode, writer) {
                    (Mode::Blocking, false) => {
                        l.read();
                        true
                    }
                    (Mode::Blocking, true) => {
                        l.write();
                        true
                    }
                    (Mode::Timed, false) => l.try_read_for(short),
                    (Mode::Timed, true) => l.try_write_for(short),
                };
                if !ok {
                    missed.fetch_add(1, SeqCst);
                    continue;
                }
                got.fetch_add(1, SeqCst);
                let delta = if writer { 10000 } else { 1 };
                let n = activity.fetch_add(delta, SeqCst) + delta;
                if writer {
                    assert_eq!(n, 10000, "wlock({n})");
                } else {
                    assert!((1..10000).contains(&n), "rlock({n})");
                }
                for _ in 0..100 {
                    std::hint::spin_loop();
                }
                activity.fetch_sub(delta, SeqCst);
                // SAFETY: locked above, in the matching mode.
                unsafe {
                    if writer {
                        l.unlock_write()
                    } else {
                        l.unlock_read()
                    }
                }
            }
        })
    };
    let mut handles = vec![spawn(true)];
    for _ in 0..readers / 2 {
        handles.push(spawn(false));
    }
    handles.push(spawn(true));
    for _ in readers / 2..readers {
        handles.push(spawn(false));
    }
    join_within(LIMIT, handles);
    assert_eq!(activity.load(SeqCst), 0);
    assert_quiescent(&l);
    (got.load(SeqCst), missed.load(SeqCst))
}

/// Go's TestRWMutex: HammerRWMutex for readers ∈ {1, 3, 10, 5} (Go also varies GOMAXPROCS,
/// which threads do not have), 1000 iterations (Miri: 20).
#[test]
fn go_hammer_rwmutex() {
    let n = if cfg!(miri) { 20 } else { 1000 };
    for readers in [1, 3, 10, 5] {
        let (got, missed) = hammer(readers, n, Mode::Blocking);
        assert_eq!((got, missed), ((readers + 2) * n, 0));
    }
}

/// The hammer with deadlines: the exclusion checks hold, every lock call either succeeds or
/// times out, and the lock ends quiescent (every ghost writer's phase ended, no token left).
#[test]
fn hammer_with_deadlines_leaves_no_ghost() {
    let n = if cfg!(miri) { 20 } else { 2000 };
    let mut missed_total = 0;
    for readers in [1, 3, 10] {
        let (got, missed) = hammer(readers, n, Mode::Timed);
        assert_eq!(got + missed, (readers + 2) * n);
        missed_total += missed;
    }
    eprintln!("timed hammer: {missed_total} lock calls timed out");
}

// ---------------------------------------------------------------------------------------------
// Go's policy

/// Writer preference: once a writer waits for the readers inside, new readers wait (a blocking
/// read, and `try_read` fails), and they see the writer's update.
#[test]
fn a_waiting_writer_keeps_new_readers_out() {
    let l = Arc::new(RwLock::new(0));
    let r0 = l.read().unwrap();
    let w = {
        let l = l.clone();
        thread::spawn(move || *l.write().unwrap() = 1)
    };
    wait_for("the writer to announce itself", || {
        l.raw().is_locked_exclusive()
    });
    assert!(matches!(l.try_read(), Err(TryLockError::WouldBlock)));
    let r1 = {
        let l = l.clone();
        thread::spawn(move || *l.read().unwrap())
    };
    wait_for("the new reader to queue", || l.raw().parked_readers() == 1);
    assert!(!w.is_finished() && !r1.is_finished());
    drop(r0);
    join_within(LIMIT, vec![w]);
    assert_eq!(
        join_within(LIMIT, vec![r1]),
        [1],
        "the reader ran before the writer"
    );
    assert_quiescent(l.raw());
}

/// Go's batch order: readers that queued behind a writer are all admitted before the next
/// writer, even though that writer was already waiting.
#[test]
fn readers_queued_behind_a_writer_go_before_the_next_writer() {
    let l = Arc::new(RwLock::new(()));
    let log = Arc::new(StdMutex::new(Vec::new()));
    let r0 = l.read().unwrap();
    let spawn = |name: &'static str, write: bool| {
        let (l, log) = (l.clone(), log.clone());
        thread::spawn(move || {
            if write {
                let _g = l.write().unwrap();
                log.lock().unwrap().push(name);
            } else {
                let _g = l.read().unwrap();
                log.lock().unwrap().push(name);
            }
        })
    };
    let w1 = spawn("w1", true);
    wait_for("w1 to announce itself", || l.raw().is_locked_exclusive());
    let readers: Vec<_> = ["r1", "r2", "r3"]
        .into_iter()
        .map(|n| spawn(n, false))
        .collect();
    wait_for("three readers to queue", || l.raw().parked_readers() == 3);
    let w2 = spawn("w2", true);
    // w2 is registered as a waiter on the writers' mutex (waiter count at bit 3).
    wait_for("w2 to queue", || l.raw().writers() >> 3 == 1);
    drop(r0);
    let mut all = readers;
    all.push(w1);
    all.push(w2);
    join_within(LIMIT, all);
    let log = log.lock().unwrap().clone();
    assert_eq!(log[0], "w1", "{log:?}");
    assert_eq!(log[4], "w2", "{log:?}");
    assert_quiescent(l.raw());
}

/// `try_write` never waits for departing readers; `try_read` fails while a writer is pending.
#[test]
fn try_never_blocks() {
    let l = Arc::new(RawRwLock::new());
    l.read();
    let t0 = Instant::now();
    for _ in 0..1000 {
        assert!(!l.try_write());
    }
    assert!(l.try_read());
    // SAFETY: the lock is held in this mode (taken above).
    unsafe { l.unlock_read() };
    let w = {
        let l = l.clone();
        thread::spawn(move || {
            l.write();
            // SAFETY: the lock is held in this mode (taken above).
            unsafe { l.unlock_write() };
        })
    };
    wait_for("the writer to announce itself", || l.is_locked_exclusive());
    for _ in 0..1000 {
        assert!(!l.try_read() && !l.try_write());
    }
    assert!(t0.elapsed() < LIMIT);
    // SAFETY: the lock is held in this mode (taken above).
    unsafe { l.unlock_read() };
    join_within(LIMIT, vec![w]);
    assert_quiescent(&l);
}

// ---------------------------------------------------------------------------------------------
// Deadlines (beyond Go)

#[test]
fn try_read_for_times_out_behind_a_writer_and_leaves_no_trace() {
    let l = RawRwLock::new();
    l.write();
    let t0 = Instant::now();
    assert!(!l.try_read_for(Duration::from_millis(20)));
    assert!(t0.elapsed() >= Duration::from_millis(20));
    // The reader that gave up left nothing: not counted, not parked...
    assert_eq!((l.readers(), l.parked()), (0, 0));
    assert!(l.is_locked_exclusive());
    // SAFETY: the lock is held in this mode (taken above).
    unsafe { l.unlock_write() };
    // ...and the unlock leaves the lock quiescent.
    assert_quiescent(&l);
    assert!(l.try_write());
    // SAFETY: the lock is held in this mode (taken above).
    unsafe { l.unlock_write() };
}

#[test]
fn try_write_for_times_out_behind_readers_then_finishes_as_a_ghost() {
    let l = Arc::new(RwLock::new(0));
    let r0 = l.read().unwrap();
    let t0 = Instant::now();
    assert!(matches!(
        l.try_write_for(Duration::from_millis(20)),
        Err(TryLockError::WouldBlock)
    ));
    assert!(t0.elapsed() >= Duration::from_millis(20));
    // The ghost writer keeps new readers out until the reader before it leaves, as a writer
    // that took the lock then would have.
    assert!(matches!(l.try_read(), Err(TryLockError::WouldBlock)));
    let r1 = {
        let l = l.clone();
        thread::spawn(move || *l.read().unwrap())
    };
    wait_for("the new reader to queue", || l.raw().parked_readers() == 1);
    drop(r0); // the last departing reader finishes the ghost's write phase
    assert_eq!(join_within(LIMIT, vec![r1]), [0]);
    assert_quiescent(l.raw());
    *l.try_write().unwrap() = 1;
    assert!(!l.is_poisoned());
}

#[test]
fn try_write_for_times_out_behind_a_writer() {
    let l = RawRwLock::new();
    l.write();
    assert!(!l.try_write_for(Duration::from_millis(10)));
    // SAFETY: the lock is held in this mode (taken above).
    unsafe { l.unlock_write() };
    assert_quiescent(&l);
}

#[test]
fn timed_calls_succeed_when_released_in_time() {
    let l = Arc::new(RwLock::new(0));
    let w = l.write().unwrap();
    let reader = {
        let l = l.clone();
        thread::spawn(move || *l.try_read_for(Duration::from_secs(30)).unwrap())
    };
    wait_for("the reader to queue", || l.raw().parked_readers() == 1);
    let mut w = w;
    *w = 5;
    drop(w);
    assert_eq!(join_within(LIMIT, vec![reader]), [5]);

    let r = l.read().unwrap();
    let writer = {
        let l = l.clone();
        thread::spawn(move || *l.try_write_until(Instant::now() + LIMIT).unwrap() += 1)
    };
    wait_for("the writer to wait for the reader", || {
        l.raw().parked() == 1
    });
    drop(r);
    join_within(LIMIT, vec![writer]);
    assert_eq!(*l.read().unwrap(), 6);
    assert_quiescent(l.raw());
}

/// Several readers give up behind one writer, with a blocking reader among them: they leave
/// nothing behind, and the unlock wakes the live one.
#[test]
fn many_ghost_readers_and_a_live_one() {
    let l = Arc::new(RawRwLock::new());
    l.write();
    let done = Arc::new(AtomicBool::new(false));
    let live = {
        let (l, done) = (l.clone(), done.clone());
        thread::spawn(move || {
            l.read();
            done.store(true, SeqCst);
            // SAFETY: the lock is held in this mode (taken above).
            unsafe { l.unlock_read() };
        })
    };
    let ghosts: Vec<_> = (0..3)
        .map(|_| {
            let l = l.clone();
            thread::spawn(move || l.try_read_for(Duration::from_millis(5)))
        })
        .collect();
    assert_eq!(join_within(LIMIT, ghosts), [false; 3]);
    wait_for("the live reader to queue", || l.parked_readers() == 1);
    assert_eq!(l.readers(), 0, "a reader that gave up is not counted");
    assert!(!done.load(SeqCst));
    // SAFETY: the lock is held in this mode (taken above).
    unsafe { l.unlock_write() };
    join_within(LIMIT, vec![live]);
    assert!(done.load(SeqCst));
    assert_quiescent(&l);
}

/// A downgrade admits the readers that queued during the write phase and keeps writers out,
/// also after a reader gave up.
#[test]
fn downgrade_admits_queued_readers_and_keeps_writers_out() {
    let l = Arc::new(RwLock::new(0));
    let mut w = l.write().unwrap();
    let reader = {
        let l = l.clone();
        thread::spawn(move || *l.read().unwrap())
    };
    wait_for("the reader to queue", || l.raw().parked_readers() == 1);
    assert!(l.try_read_for(Duration::from_millis(2)).is_err()); // gives up
    *w = 3;
    let r = gomutex::RwLockWriteGuard::downgrade(w);
    assert_eq!(join_within(LIMIT, vec![reader]), [3]);
    assert!(l.try_write().is_err());
    assert_eq!(*l.try_read().unwrap(), 3);
    drop(r);
    assert_quiescent(l.raw());
}
