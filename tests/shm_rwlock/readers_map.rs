//! The readers' map: a writer reads the counts of the processes that read the lock and still
//! hold their slot, not of every process that ever read it.

use super::common::anon::AnonShared;
use super::common::procs::{fork, wait_limit};
use super::fixture::{write_expect, V};
use super::{assert_quiescent, until, LIMIT};
use gomutex::shm::{ShmRwLock, TryLockError};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

/// How long a newcomer may have to wait for the participant scan's rate limit (its gap is
/// 40 ms, machine-wide per region) before it gives the dead processes' slots back.
const SCAN_GAP: Duration = Duration::from_millis(60);

/// Five readers that exited without dropping their handles (their slots held by the dead):
/// the next process to register gives their slots back, takes the lowest, and after the
/// next write the writer scans this process and the newcomer only. Before the map, a writer
/// scanned every slot up to the highest index that ever read (seven here). The newcomer
/// registers after the scan's gap: the last scan was before it slept.
pub fn writers_scan_only_live_readers() {
    let l = ShmRwLock::<V>::anonymous([0; 2]).unwrap();
    drop(l.read().unwrap()); // this process: slot 0
    for _ in 0..5 {
        let c = fork(|| {
            drop(l.read().unwrap());
            0
        });
        assert_eq!(wait_limit(c, LIMIT, "reader"), 0);
    }
    drop(write_expect(&l, false, "after the readers"));
    // Six, unless a child's registration came after the scan's gap and recovered the
    // children before it (a loaded machine): not asserted.
    println!(
        "    before the newcomer: {} scanned",
        l.diagnostics().scanned
    );
    std::thread::sleep(SCAN_GAP);
    let n = fork(|| {
        drop(l.read().unwrap());
        0
    });
    assert_eq!(wait_limit(n, LIMIT, "newcomer"), 0);
    // The newcomer (dead now too) recovered the five; the write takes their bits out.
    drop(write_expect(&l, false, "after the newcomer"));
    let d = l.diagnostics();
    assert_eq!((d.scanned, d.writers.participants), (2, 2), "{d:?}");
    assert_quiescent(&l);
}

/// A forked child inherits a handle that published its parent's slot. The parent dies, its
/// slot is recovered and a writer takes it out of the map; the child then registers, gets
/// the same slot, and must publish it again (its fork generation differs): a writer sees
/// its read. Publishing only per slot index would skip that, and the writer would enter
/// beside the child's reader.
pub fn a_forked_child_publishes_its_slot_again() {
    let l = ShmRwLock::<V>::anonymous([0; 2]).unwrap();
    drop(l.read().unwrap()); // this process: slot 0
    let flags = AnonShared::counters(3);
    let (go, reading, release) = (flags.at(0), flags.at(1), flags.at(2));
    // Bounded waits in the grandchild: it outlives its parent, so nobody reaps it early.
    let wait_for = |flag: &std::sync::atomic::AtomicU64| {
        let t = std::time::Instant::now();
        while flag.load(SeqCst) == 0 && t.elapsed() < LIMIT {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let parent = fork(|| {
        drop(l.read().unwrap()); // slot 1, published by this handle
        let child = fork(|| {
            wait_for(go);
            let _r = l.read().unwrap(); // registers: slot 1, free again
            reading.store(1, SeqCst);
            wait_for(release);
            0
        });
        // Not reaped here: the child outlives its parent (reparented).
        i32::from(child <= 0)
    });
    assert_eq!(wait_limit(parent, LIMIT, "parent"), 0);
    // The parent is dead: recover its slot, and let a write take its bit out.
    l.recover();
    drop(write_expect(&l, false, "after the parent"));
    assert_eq!(l.diagnostics().scanned, 1);
    go.store(1, SeqCst);
    until("the child reading", || reading.load(SeqCst) == 1);
    assert!(
        matches!(l.try_write(), Err(TryLockError::WouldBlock)),
        "a writer entered beside the child's read"
    );
    assert_eq!(l.diagnostics().readers, 1);
    release.store(1, SeqCst);
    until("the child's read released", || l.diagnostics().readers == 0);
    drop(write_expect(&l, false, "after the child"));
    assert_quiescent(&l);
}
