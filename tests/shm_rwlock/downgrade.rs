//! Downgrades across processes: readers come in, writers stay out, and a death while
//! downgrading.

use super::common::anon::AnonShared;
use super::common::procs::{fork, kill9, signal, wait_limit, wait_stopped};
use super::fixture::{
    after_death, in_child, reader_child, writer_child, Fixture, KILLED, RW_DOWNGRADING,
};
use super::{assert_quiescent, until, LIMIT};
use gomutex::shm::{Config, ShmRwLockWriteGuard, TryLockError};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

/// A writer downgrades across processes, with a reader queued behind its phase and a writer
/// asleep on the writers' mutex: the reader comes in and sees the write; the writer, handed
/// the writers' mutex by the downgrade's unlock, waits for the downgraded read lock (the value
/// stays the one written before the downgrade), as does another process's `try_write`; both
/// get in once it is dropped.
pub fn downgrade_lets_readers_in_and_keeps_writers_out() {
    let f = Fixture::new(Config::default());
    let mut w = f.l.write().unwrap();
    let q = reader_child(&f.l);
    until("the reader queued", || {
        f.l.diagnostics().queued_readers == 1
    });
    let w2 = writer_child(&f.l);
    until("the writer asleep on the writers' mutex", || {
        f.l.diagnostics().writers.queued_slots == 1
    });
    w[0] = 5;
    w[1] = 5;
    let r = ShmRwLockWriteGuard::downgrade(w);
    assert_eq!(wait_limit(q, LIMIT, "reader queued behind the writer"), 5);
    f.until_writer_sleeps();
    in_child("try_write against a downgraded read lock", || {
        i32::from(!matches!(f.l.try_write(), Err(TryLockError::WouldBlock)))
    });
    assert_eq!(
        *r,
        [5, 5],
        "a writer got in beside the downgraded read lock"
    );
    assert_eq!(f.l.diagnostics().readers, 1);
    drop(r);
    assert_eq!(wait_limit(w2, LIMIT, "writer after the downgraded read"), 0);
    assert_eq!(*f.l.read().unwrap(), [6, 6]);
    assert_quiescent(&f.l);
}

/// A writer killed in the middle of `downgrade` (`RW_DOWNGRADING`: its read counted, its
/// phase still pending, the writers' mutex held): a reader queued behind it ends the dead
/// phase and comes in, told `OwnerDied`; the dead count is zeroed with the rest of what the
/// process left; the next writer is told too, and the counts end exact. And a downgraded
/// reader killed after the downgrade is an ordinary dead reader (nothing reported).
pub fn killed_while_downgrading() {
    // The window itself: stopped at point 12, the downgrader is counted as a reader while it
    // still holds the writers' mutex with its phase pending (so no writer can come between).
    {
        let f = Fixture::new(Config::default());
        let k = fork(|| {
            gomutex::__crash::stop_at(RW_DOWNGRADING);
            let g = f.l.write().unwrap();
            drop(ShmRwLockWriteGuard::downgrade(g));
            0
        });
        wait_stopped(k);
        let d = f.l.diagnostics();
        assert_eq!(
            (d.readers, d.write_pending, d.writers.owner_pid),
            (1, true, Some(k as u32)),
            "{d:?}"
        );
        signal(k, libc::SIGCONT);
        assert_eq!(wait_limit(k, LIMIT, "continued downgrader"), 0);
        assert_quiescent(&f.l);
    }
    {
        let f = Fixture::new(Config::default());
        let flags = AnonShared::counters(2);
        let (inside, go) = (flags.at(0), flags.at(1));
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_DOWNGRADING);
            let mut g = f.l.write().unwrap();
            g[0] += 1;
            g[1] += 1;
            inside.store(1, SeqCst);
            while go.load(SeqCst) == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
            drop(ShmRwLockWriteGuard::downgrade(g));
            3
        });
        until("the writer inside", || inside.load(SeqCst) == 1);
        let q = reader_child(&f.l);
        until("the reader queued", || {
            f.l.diagnostics().queued_readers == 1
        });
        go.store(1, SeqCst);
        assert_eq!(
            wait_limit(k, LIMIT, "point 12"),
            KILLED,
            "point 12 not reached"
        );
        assert_eq!(wait_limit(q, LIMIT, "reader behind point 12"), 101);
        after_death(&f, true, 1, 1, "point 12");
    }
    {
        let f = Fixture::new(Config::default());
        let flag = AnonShared::counters(1);
        let flag = flag.at(0);
        let k = fork(|| {
            let mut g = f.l.write().unwrap();
            g[0] += 1;
            g[1] += 1;
            let _r = ShmRwLockWriteGuard::downgrade(g);
            flag.store(1, SeqCst);
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        until("the downgraded reader inside", || flag.load(SeqCst) == 1);
        assert_eq!(f.l.diagnostics().readers, 1);
        kill9(k);
        assert_eq!(wait_limit(k, LIMIT, "downgraded reader"), KILLED);
        after_death(&f, false, 0, 1, "killed holding a downgraded read");
    }
}
