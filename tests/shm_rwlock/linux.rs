//! The cases of `shm_rwlock` (module docs of `main.rs`).
// Without the test-only `__crash-points` feature (a build of the published crate) the cases
// that arm crash points are compiled out: their helpers are then unused.
#![cfg_attr(
    not(feature = "__crash-points"),
    allow(dead_code, unused_imports, unused_variables, unused_mut)
)]

use gomutex::shm::{LockError, ShmRwLock, TryLockError};
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;
use common::procs::{self, fork, kill9, signal, wait_limit, wait_stopped};

#[path = "calls.rs"]
mod calls;
#[path = "deaths.rs"]
mod deaths;
#[path = "downgrade.rs"]
mod downgrade;
#[path = "fixture.rs"]
mod fixture;
#[path = "readers_map.rs"]
mod readers_map;

const LIMIT: Duration = Duration::from_secs(30);

/// Wait until `f` holds (a bounded poll: a failure names what was awaited).
fn until(what: &str, f: impl Fn() -> bool) {
    common::poll_until(LIMIT, Duration::from_micros(200), || what.to_owned(), f);
}

/// Quiescent: nobody reads, nobody is queued, no phase pending, the writers' mutex free.
fn assert_quiescent<T: gomutex::shm::ShmSafe>(l: &ShmRwLock<T>) {
    let d = l.diagnostics();
    assert_eq!(
        (d.readers, d.queued_readers, d.write_pending),
        (0, 0, false),
        "{d:?}"
    );
    assert_eq!(
        (d.writers.state, d.writers.registered_waiters),
        (0, 0),
        "{d:?}"
    );
}

/// Readers in several processes hold the lock at once; a writer waits for all of them.
fn readers_overlap_across_processes() {
    let l = ShmRwLock::anonymous([0u64; 2]).unwrap();
    let go = common::anon::AnonShared::counters(1);
    let go = go.at(0);
    let r = l.read().unwrap();
    let kids: Vec<_> = (0..3)
        .map(|_| {
            fork(|| {
                let g = l.read().unwrap();
                // Held until the parent has seen all four readers inside at once.
                while go.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
                drop(g);
                0
            })
        })
        .collect();
    until("4 readers", || l.diagnostics().readers == 4);
    go.store(1, std::sync::atomic::Ordering::SeqCst);
    assert!(matches!(l.try_write(), Err(TryLockError::WouldBlock)));
    drop(r);
    let t = Instant::now();
    let mut w = l.write().unwrap();
    assert!(t.elapsed() < LIMIT);
    w[0] = 1;
    drop(w);
    for k in kids {
        assert_eq!(wait_limit(k, LIMIT, "reader"), 0);
    }
    assert_quiescent(&l);
}

/// Threads of several processes hammer the lock; a writer's update (two words that must match,
/// written one after the other) is never seen half-done, and the write count is exact.
fn hammer_across_processes() {
    let l = &ShmRwLock::anonymous([0u64; 2]).unwrap();
    const PROCS: usize = 4;
    const OPS: u64 = 20_000;
    let kids: Vec<_> = (0..PROCS)
        .map(|p| {
            fork(move || {
                std::thread::scope(|s| {
                    for t in 0..2u64 {
                        s.spawn(move || {
                            let mut x = (p as u64) * 7 + t;
                            for i in 0..OPS {
                                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                                if (x >> 33).is_multiple_of(10) {
                                    let mut w = l.write().unwrap();
                                    w[0] += 1;
                                    std::hint::black_box(&mut *w);
                                    w[1] += 1;
                                } else if i % 3 == 0 {
                                    if let Ok(r) = l.try_read() {
                                        assert_eq!(r[0], r[1]);
                                    }
                                } else {
                                    let r = l.read().unwrap();
                                    assert_eq!(r[0], r[1], "torn update seen by a reader");
                                }
                            }
                        });
                    }
                });
                0
            })
        })
        .collect();
    for k in kids {
        assert_eq!(wait_limit(k, Duration::from_secs(120), "hammer"), 0);
    }
    let v = *l.read().unwrap();
    let mut writes = 0;
    for p in 0..PROCS as u64 {
        for t in 0..2u64 {
            let mut x = p * 7 + t;
            for _ in 0..OPS {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                writes += u64::from((x >> 33).is_multiple_of(10));
            }
        }
    }
    assert_eq!(v, [writes, writes], "every write counted once");
    assert_quiescent(l);
}

/// A reader killed while holding read locks (two threads' worth): a waiting writer gets the
/// lock within the recovery bound, the dead reads are gone, nothing else is disturbed.
fn dead_reader_releases_its_reads() {
    let l = ShmRwLock::anonymous(0u64).unwrap();
    let mine = l.read().unwrap();
    let child = fork(|| {
        let _a = l.read().unwrap();
        let _b = l.read().unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    until("3 reads", || l.diagnostics().readers == 3);
    kill9(child);
    assert_eq!(wait_limit(child, LIMIT, "reader"), 128 + libc::SIGKILL);
    drop(mine);
    let t = Instant::now();
    let w = l.write().expect("a reader's death is not a writer's");
    let waited = t.elapsed();
    println!("    the writer waited {waited:?} for the dead reader's reads");
    // The writer looks every 10 ms (the target is 100 ms, met when the machine is
    // not loaded); beside busy loops on 2 cores the scheduler alone can delay it past that,
    // so the test bounds it loosely: a lost wake-up or a missed dead reader would exceed it.
    assert!(waited < Duration::from_secs(2), "writer waited {waited:?}");
    drop(w);
    assert_quiescent(&l);
}

/// A writer killed holding the lock: readers and the next writer are told (`OwnerDied`) until a
/// writer marks the data consistent; readers queued behind it get in.
fn dead_writer_is_reported_to_readers_and_writers() {
    let l = ShmRwLock::anonymous(0u64).unwrap();
    let child = fork(|| {
        let mut w = l.write().unwrap();
        *w = 1;
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    until("the writer in", || l.diagnostics().write_pending);
    // A reader queued behind the dead writer gets in once it is found dead.
    let reader = fork(|| match l.read() {
        Err(LockError::OwnerDied(g)) => i32::from(*g == 1),
        _ => 2,
    });
    until("the reader queued", || l.diagnostics().queued_readers == 1);
    kill9(child);
    assert_eq!(wait_limit(child, LIMIT, "writer"), 128 + libc::SIGKILL);
    assert_eq!(wait_limit(reader, LIMIT, "queued reader"), 1);
    assert!(matches!(l.read(), Err(LockError::OwnerDied(_))));
    let w = match l.write() {
        Err(LockError::OwnerDied(w)) => w,
        other => panic!("expected OwnerDied, got {:?}", other.map(|_| ())),
    };
    w.mark_consistent();
    drop(w);
    assert!(l.read().is_ok());
    assert!(l.write().is_ok());
    assert_quiescent(&l);
}

/// Writer preference: with a reader inside and a writer waiting, a new reader waits; the
/// readers that queued behind the writer get in before the next writer.
fn writer_preference_and_batch_order() {
    let l = ShmRwLock::anonymous(0u64).unwrap();
    let r = l.read().unwrap();
    let writer = fork(|| {
        *l.write().unwrap() += 1;
        0
    });
    until("writer pending", || l.diagnostics().write_pending);
    assert!(matches!(l.try_read(), Err(TryLockError::WouldBlock)));
    // A reader that arrives now queues, and sees the first writer's update.
    let reader = fork(|| {
        let g = l.read().unwrap();
        let v = *g;
        std::thread::sleep(Duration::from_millis(20));
        drop(g);
        i32::try_from(v).unwrap()
    });
    until("reader queued", || l.diagnostics().queued_readers == 1);
    // A second writer waits on the writers' mutex behind the first.
    let writer2 = fork(|| {
        *l.write().unwrap() += 10;
        0
    });
    until("second writer queued", || {
        l.diagnostics().writers.waiters == 1
    });
    drop(r);
    assert_eq!(wait_limit(writer, LIMIT, "writer"), 0);
    // The queued reader saw 1, not 11: it came in before the second writer.
    assert_eq!(wait_limit(reader, LIMIT, "reader"), 1);
    assert_eq!(wait_limit(writer2, LIMIT, "writer 2"), 0);
    assert_eq!(*l.read().unwrap(), 11);
    assert_quiescent(&l);
}

/// A writer that panics poisons the lock for readers and writers (only a writer poisons), and
/// before the readers it held off come in: the writer is stopped right after its phase ended
/// (crash point 11, before the writers' mutex is unlocked), and a reader that comes in then is
/// told.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
fn writer_panic_poisons_before_readers_enter() {
    let l = ShmRwLock::anonymous(0u64).unwrap();
    // A reader that panics poisons nothing.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _g = l.read().unwrap();
        panic!("a reader panics");
    }));
    assert!(r.is_err() && !l.is_poisoned());
    let writer = fork(|| {
        gomutex::__crash::stop_at(gomutex::__crash::RW_UNLOCKING);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut g = l.write().unwrap();
            *g = 1;
            panic!("a writer panics");
        }));
        i32::from(r.is_err())
    });
    wait_stopped(writer);
    assert!(
        !l.diagnostics().write_pending,
        "stopped after the phase ended"
    );
    assert!(matches!(l.read(), Err(LockError::Poisoned(_))));
    signal(writer, libc::SIGCONT);
    assert_eq!(wait_limit(writer, LIMIT, "writer"), 1);
    let w = match l.write() {
        Err(LockError::Poisoned(w)) => w,
        other => panic!("expected Poisoned, got {:?}", other.map(|_| ())),
    };
    w.mark_consistent();
    drop(w);
    assert!(l.read().is_ok() && !l.is_poisoned());
    assert_quiescent(&l);
}

/// `stats()` across processes: a reader that queued behind a writer and a writer that waited
/// for a reader are each counted once, with at least the time they slept (each kept asleep
/// 5 ms after it is seen asleep); a `try_*` that fails waits for nothing and counts
/// nothing; write locks are the writers' mutex's acquisitions.
fn stats_count_the_waits_across_processes() {
    const HELD: Duration = Duration::from_millis(5);
    let l = ShmRwLock::anonymous(0u64).unwrap();
    let w = l.write().unwrap();
    let reader = fork(|| i32::try_from(*l.read().unwrap()).unwrap());
    until("reader queued", || l.diagnostics().queued_readers == 1);
    std::thread::sleep(HELD);
    drop(w);
    assert_eq!(wait_limit(reader, LIMIT, "reader"), 0);
    let r = l.read().unwrap();
    assert!(matches!(l.try_write(), Err(TryLockError::WouldBlock)));
    let writer = fork(|| {
        *l.write().unwrap() += 1;
        0
    });
    // Asleep: a wait is timed from its first sleep (spinning is counted, not timed).
    until("writer asleep waiting for the reader", || {
        l.diagnostics().writer_asleep
    });
    std::thread::sleep(HELD);
    drop(r);
    assert_eq!(wait_limit(writer, LIMIT, "writer"), 0);
    let s = l.stats();
    assert_eq!((s.read_waits, s.write_waits), (1, 1), "{s:?}");
    let held = HELD.as_nanos() as u64;
    assert!(
        s.read_wait_ns >= held && s.worst_read_wait_ns == s.read_wait_ns,
        "{s:?}"
    );
    assert!(s.write_wait_ns >= held, "{s:?}");
    // This process's write, the failed `try_write` (it took the mutex, then found a reader),
    // the child's write.
    assert_eq!(s.writers.acquisitions, 3, "{s:?}");
    assert_quiescent(&l);
}

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[
        (
            "readers_overlap_across_processes",
            readers_overlap_across_processes,
        ),
        ("hammer_across_processes", hammer_across_processes),
        (
            "dead_reader_releases_its_reads",
            dead_reader_releases_its_reads,
        ),
        (
            "dead_writer_is_reported_to_readers_and_writers",
            dead_writer_is_reported_to_readers_and_writers,
        ),
        (
            "writer_preference_and_batch_order",
            writer_preference_and_batch_order,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "writer_panic_poisons_before_readers_enter",
            writer_panic_poisons_before_readers_enter,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "killed_at_rw_crash_points",
            deaths::killed_at_rw_crash_points,
        ),
        ("killed_while_queued", deaths::killed_while_queued),
        (
            "force_unlock_after_waitpid",
            deaths::force_unlock_after_waitpid,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "try_calls_never_block_and_deadlines",
            calls::try_calls_never_block_and_deadlines,
        ),
        (
            "guards_inherited_across_fork",
            calls::guards_inherited_across_fork,
        ),
        (
            "header_validation_writes_nothing",
            calls::header_validation_writes_nothing,
        ),
        ("dead_reader_slot_reused", deaths::dead_reader_slot_reused),
        #[cfg(feature = "__crash-points")]
        (
            "queued_reader_sleeps_while_writer_waits",
            calls::queued_reader_sleeps_while_writer_waits,
        ),
        (
            "downgrade_lets_readers_in_and_keeps_writers_out",
            downgrade::downgrade_lets_readers_in_and_keeps_writers_out,
        ),
        (
            "killed_while_downgrading",
            downgrade::killed_while_downgrading,
        ),
        (
            "stats_count_the_waits_across_processes",
            stats_count_the_waits_across_processes,
        ),
        (
            "writers_scan_only_live_readers",
            readers_map::writers_scan_only_live_readers,
        ),
        (
            "a_forked_child_publishes_its_slot_again",
            readers_map::a_forked_child_publishes_its_slot_again,
        ),
    ];
    procs::run_cases("shm_rwlock", &args, tests);
}
