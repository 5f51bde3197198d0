//! Adversarial cases of `shm_rwlock`: deaths at each of the lock's crash points and while
//! queued, `force_unlock`, and participant-slot reuse. Every window is built step by step
//! (crash and stop points, SIGSTOP, polling the diagnostics), so it is reached on every run.
//! The calls that must not block are in `calls.rs`, downgrades in `downgrade.rs`.

use super::common::anon::AnonShared;
use super::common::procs::{fork, kill9, signal, wait_limit, wait_stopped};
use super::fixture::{
    after_death, holding_reader, holding_writer, reader_child, write_expect, writer_child, Fixture,
    KILLED, RW_PENDING, RW_QUEUED, RW_READ_COUNTED, RW_UNLOCKING,
};
use super::{assert_quiescent, until, LIMIT};
use gomutex::shm::{Config, LockError, TryLockError};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// A process killed at each of the lock's own crash points, and a writer killed while it waits
/// for departing readers: no waiter is stuck, the counts are exact afterwards, the next writer
/// and reader get in, and `OwnerDied` is reported exactly when the dead process held the
/// writers' mutex.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
pub fn killed_at_rw_crash_points() {
    // 8, with a writer waiting: a reader dies counted, before it looked at `rw_state`. The
    // waiting writer must find the dead count and get in.
    {
        let f = Fixture::new(Config::default());
        let r = f.l.read().unwrap();
        let w = writer_child(&f.l);
        f.until_writer_sleeps();
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_READ_COUNTED);
            drop(f.l.read());
            3
        });
        assert_eq!(
            wait_limit(k, LIMIT, "point 8"),
            KILLED,
            "point 8 not reached"
        );
        drop(r);
        assert_eq!(wait_limit(w, LIMIT, "writer after point 8"), 0);
        after_death(&f, false, 0, 1, "point 8, writer waiting");
    }
    // 8, no writer yet: the count stays until a writer comes and reaps it.
    {
        let f = Fixture::new(Config::default());
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_READ_COUNTED);
            drop(f.l.read());
            3
        });
        assert_eq!(
            wait_limit(k, LIMIT, "point 8"),
            KILLED,
            "point 8 not reached"
        );
        assert_eq!(
            f.l.diagnostics().readers,
            1,
            "the dead count, not reaped yet"
        );
        after_death(&f, false, 0, 0, "point 8, writer later");
    }
    // 9: a reader dies queued behind a waiting writer. Its queue count stays (the writer waits
    // for readers inside, not queued ones) until the next writer reaps it; a live reader queued
    // beside it still comes in after the writer.
    {
        let f = Fixture::new(Config::default());
        let r = f.l.read().unwrap();
        let w = writer_child(&f.l);
        f.until_writer_sleeps();
        let live = reader_child(&f.l);
        until("the live reader queued", || {
            f.l.diagnostics().queued_readers == 1
        });
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_QUEUED);
            drop(f.l.read());
            3
        });
        assert_eq!(
            wait_limit(k, LIMIT, "point 9"),
            KILLED,
            "point 9 not reached"
        );
        // The live reader's periodic scan (`probe`) may have reaped the dead one already.
        let queued = f.l.diagnostics().queued_readers;
        assert!(queued == 2 || queued == 1, "{queued}");
        drop(r);
        assert_eq!(wait_limit(w, LIMIT, "writer after point 9"), 0);
        assert_eq!(wait_limit(live, LIMIT, "queued reader"), 1);
        after_death(&f, false, 0, 1, "point 9");
    }
    // 10: a writer dies with `PENDING` set and the writers' mutex held, readers inside. A
    // reader queued behind the dead phase ends it (told `OwnerDied`) without any writer.
    {
        let f = Fixture::new(Config::default());
        let r = f.l.read().unwrap();
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_PENDING);
            drop(f.l.write());
            3
        });
        assert_eq!(
            wait_limit(k, LIMIT, "point 10"),
            KILLED,
            "point 10 not reached"
        );
        assert!(f.l.diagnostics().write_pending);
        let q = reader_child(&f.l);
        assert_eq!(wait_limit(q, LIMIT, "reader behind a dead phase"), 100);
        assert!(!f.l.diagnostics().write_pending);
        drop(r);
        after_death(&f, true, 1, 0, "point 10, a reader ends the phase");
    }
    // 10 again: the next writer ends the dead phase.
    {
        let f = Fixture::new(Config::default());
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_PENDING);
            drop(f.l.write());
            3
        });
        assert_eq!(
            wait_limit(k, LIMIT, "point 10"),
            KILLED,
            "point 10 not reached"
        );
        assert!(matches!(f.l.try_read(), Err(TryLockError::WouldBlock)));
        after_death(&f, true, 1, 0, "point 10, the next writer ends the phase");
    }
    // 11: a writer dies after ending its phase, still holding the writers' mutex. The reader
    // queued behind it is admitted (the update was complete); the next writer is told.
    {
        let f = Fixture::new(Config::default());
        let flags = AnonShared::counters(2);
        let (inside, go) = (flags.at(0), flags.at(1));
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_UNLOCKING);
            let mut g = f.l.write().unwrap();
            g[0] += 1;
            g[1] += 1;
            inside.store(1, SeqCst);
            while go.load(SeqCst) == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
            drop(g);
            3
        });
        until("the writer inside", || inside.load(SeqCst) == 1);
        let q = reader_child(&f.l);
        until("the reader queued", || {
            f.l.diagnostics().queued_readers == 1
        });
        go.store(1, SeqCst);
        assert_eq!(
            wait_limit(k, LIMIT, "point 11"),
            KILLED,
            "point 11 not reached"
        );
        // Admitted by the phase's end, before or after its writer was found dead.
        let seen = wait_limit(q, LIMIT, "reader behind point 11");
        assert!(seen == 1 || seen == 101, "{seen}");
        // Not repaired by the first writer: readers are told too from then on.
        match f.l.write() {
            Err(LockError::OwnerDied(g)) => drop(g),
            other => panic!("point 11: writer not told: {:?}", other.map(|g| *g)),
        }
        match f.l.read() {
            Err(LockError::OwnerDied(g)) => assert_eq!(*g, [1, 1]),
            other => panic!("point 11: readers not told: {:?}", other.map(|g| *g)),
        }
        after_death(&f, true, 1, 1, "point 11");
    }
    // A writer SIGKILLed while it waits for departing readers, a reader queued behind it.
    {
        let f = Fixture::new(Config::default());
        let r = f.l.read().unwrap();
        let w = writer_child(&f.l);
        f.until_writer_sleeps();
        let q = reader_child(&f.l);
        until("the reader queued", || {
            f.l.diagnostics().queued_readers == 1
        });
        kill9(w);
        assert_eq!(wait_limit(w, LIMIT, "waiting writer"), KILLED);
        // It held the writers' mutex: the queued reader is told.
        assert_eq!(wait_limit(q, LIMIT, "reader behind a killed writer"), 100);
        assert_eq!(f.l.diagnostics().readers, 1);
        drop(r);
        after_death(&f, true, 1, 0, "writer killed waiting for readers");
    }
}

/// A reader killed while queued (seen queued first), and a writer killed while queued on the
/// writers' mutex: nobody else is held up, nothing is reported, the counts end exact.
pub fn killed_while_queued() {
    // A reader.
    let f = Fixture::new(Config::default());
    let mut w = f.l.write().unwrap();
    let k = reader_child(&f.l);
    until("reader queued", || f.l.diagnostics().queued_readers == 1);
    let live = reader_child(&f.l);
    until("a second reader queued", || {
        f.l.diagnostics().queued_readers == 2
    });
    kill9(k);
    assert_eq!(wait_limit(k, LIMIT, "queued reader"), KILLED);
    // The live reader's periodic scan (`probe`) may have reaped it already.
    let queued = f.l.diagnostics().queued_readers;
    assert!(queued == 2 || queued == 1, "{queued}");
    w[0] = 5;
    w[1] = 5;
    drop(w);
    assert_eq!(wait_limit(live, LIMIT, "live queued reader"), 5);
    // The next writer waits for the queue to empty: it must reap the dead reader's count.
    after_death(&f, false, 0, 5, "reader killed queued");

    // A writer.
    let f = Fixture::new(Config::default());
    let w = f.l.write().unwrap();
    let k = writer_child(&f.l);
    until("writer queued on the writers' mutex", || {
        f.l.diagnostics().writers.waiters == 1
    });
    let live = writer_child(&f.l);
    until("a second writer queued", || {
        f.l.diagnostics().writers.waiters == 2
    });
    kill9(k);
    assert_eq!(wait_limit(k, LIMIT, "queued writer"), KILLED);
    drop(w);
    assert_eq!(wait_limit(live, LIMIT, "live queued writer"), 0);
    after_death(&f, false, 0, 1, "writer killed queued");
}

/// `force_unlock(pid)` after `waitpid`: the dead process's reads and write lock are released
/// by the call itself (the waiters that could have found them are stopped meanwhile), and it
/// returns whether the process held anything.
pub fn force_unlock_after_waitpid() {
    // Reads: two of them, a writer waiting for them (stopped, so it cannot reap them itself).
    let f = Fixture::new(Config::default());
    let flags = AnonShared::counters(2);
    let k = holding_reader(&f.l, 2, flags.at(0));
    let w = writer_child(&f.l);
    f.until_writer_sleeps();
    signal(w, libc::SIGSTOP);
    wait_stopped(w);
    assert!(!f.l.force_unlock(k), "alive: left alone");
    assert_eq!(f.l.diagnostics().readers, 2);
    kill9(k);
    assert_eq!(wait_limit(k, LIMIT, "reader"), KILLED);
    assert_eq!(f.l.diagnostics().readers, 2, "nobody has looked yet");
    assert!(f.l.force_unlock(k), "it held reads");
    assert_eq!(f.l.diagnostics().readers, 0, "released by the call");
    assert!(!f.l.force_unlock(k), "already released");
    let t = Instant::now();
    signal(w, libc::SIGCONT);
    assert_eq!(wait_limit(w, LIMIT, "writer"), 0);
    println!("    the writer got in {:?} after SIGCONT", t.elapsed());
    after_death(&f, false, 0, 1, "force_unlock of a reader");

    // The write lock, a reader queued behind it (stopped, so it cannot recover the writer).
    let f = Fixture::new(Config::default());
    let k = holding_writer(&f.l, flags.at(1));
    let q = reader_child(&f.l);
    until("reader queued", || f.l.diagnostics().queued_readers == 1);
    signal(q, libc::SIGSTOP);
    wait_stopped(q);
    assert!(!f.l.force_unlock(k), "alive: left alone");
    kill9(k);
    assert_eq!(wait_limit(k, LIMIT, "writer"), KILLED);
    let d = f.l.diagnostics();
    assert!(
        d.write_pending && d.writers.owner_pid == Some(k as u32),
        "{d:?}"
    );
    assert!(f.l.force_unlock(k), "it held the write lock");
    let d = f.l.diagnostics();
    assert!(!d.write_pending && d.writers.owner_pid.is_none(), "{d:?}");
    assert!(!f.l.force_unlock(k), "already released");
    // Readers get in at once, and are told; the queued one comes first, then a writer.
    match f.l.try_read() {
        Err(TryLockError::OwnerDied(g)) => assert_eq!(*g, [1, 0]),
        other => panic!("{:?}", other.map(|g| *g)),
    }
    signal(q, libc::SIGCONT);
    assert_eq!(
        wait_limit(q, LIMIT, "queued reader"),
        199,
        "it saw [1, 0], told"
    );
    match f.l.try_write() {
        Err(TryLockError::OwnerDied(mut g)) => {
            g[1] = g[0];
            g.mark_consistent();
        }
        other => panic!("{:?}", other.map(|g| *g)),
    }
    after_death(&f, false, 1, 1, "force_unlock of a writer");

    // Nothing held: false.
    let idle = fork(|| {
        drop(f.l.read().unwrap());
        0
    });
    assert_eq!(wait_limit(idle, LIMIT, "idle"), 0);
    assert!(!f.l.force_unlock(idle), "held nothing");
    assert!(!f.l.force_unlock(-1), "no pid");
    f.l.recover();
    assert_quiescent(&f.l);
}

/// A dead reader's participant slot reused by a new process: the newcomer's counts start at 0
/// and the dead process's reads never come back.
pub fn dead_reader_slot_reused() {
    // Two participant slots: this process's, and one for the children in turn.
    let f = Fixture::new(Config::new().participants(2).waiter_slots(2));
    let l = &f.l;
    drop(l.read().unwrap()); // this process takes its slot
    let flags = AnonShared::counters(4);
    for round in 0..3 {
        let k = holding_reader(l, 2, flags.at(round));
        kill9(k);
        assert_eq!(wait_limit(k, LIMIT, "reader"), KILLED);
        assert_eq!(l.diagnostics().readers, 2, "round {round}: not reaped yet");
        // The newcomer finds no free slot but the dead reader's: it recovers and takes it.
        let n = fork(|| {
            let g = l.read().unwrap();
            let inside = l.diagnostics().readers;
            drop(g);
            let after = l.diagnostics().readers;
            // The dead reads do not hold a writer up either.
            let w = l.try_write().is_ok();
            i32::from(!(inside == 1 && after == 0 && w))
        });
        assert_eq!(wait_limit(n, LIMIT, "newcomer"), 0, "round {round}");
        assert_eq!(l.diagnostics().readers, 0, "round {round}");
        println!(
            "    round {round}: {} participant slots taken",
            l.diagnostics().writers.participants
        );
    }
    l.recover();
    drop(write_expect(l, false, "after the reused slots"));
    assert_quiescent(l);
    assert_eq!(l.diagnostics().writers.participants, 1);
}
