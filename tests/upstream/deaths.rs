//! Deaths: a process killed holding slots (found by a picker that finds the peer full, by a
//! newcomer, by `force_release` after `waitpid`), and killed at each of the zone's crash
//! points. Every window is built step by step (crash points, a child that signals it holds
//! its slots before it is killed), so it is reached on every run.

use super::{assert_idle, zone, LIMIT};
use gomutex::__crash as crash;
use gomutex::upstream::{Peer, UpstreamZone};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::common::anon::AnonShared;
use super::common::procs::{fork, kill9, reap, wait_limit};

/// A child that takes `n` slots on peer `peer` (picking until it has them; the others it
/// reports at once), says so in `side[0]`, and waits to be killed. Its pid, once it holds
/// them.
fn holder(z: &UpstreamZone, side: &AnonShared, peer: usize, n: usize) -> libc::pid_t {
    side.at(0).store(0, SeqCst);
    let pid = fork(|| {
        super::die_with_parent();
        let mut kept = Vec::new();
        while kept.len() < n {
            let s = z.pick().unwrap();
            if s.peer() == peer {
                kept.push(s);
            }
        }
        side.at(0).store(1, SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    super::common::poll_until(
        LIMIT,
        Duration::from_micros(200),
        || "holder".into(),
        || side.at(0).load(SeqCst) == 1,
    );
    pid
}

fn kill_and_reap(pid: libc::pid_t) {
    kill9(pid);
    let st = reap(pid);
    assert!(libc::WIFSIGNALED(st), "{st:#x}");
}

/// Killed holding both of `a`'s connections: the next picker finds `a` full, looks for the
/// dead (at most every 10 ms) and takes the connections back, instead of falling back to the
/// backup.
pub fn dead_holder_found_by_a_picker() {
    let z = zone(&[Peer::new("a").max_conns(2), Peer::new("b").backup(true)]);
    let side = AnonShared::counters(2);
    drop(z.pick().unwrap()); // this process's row, taken now: its next pick is no newcomer's
    let pid = holder(&z, &side, 0, 2);
    assert_eq!(z.diagnostics().peers[0].conns, 2);
    kill_and_reap(pid);
    std::thread::sleep(Duration::from_millis(11)); // the scan's rate limit
    let s = z.pick().unwrap();
    assert_eq!(s.peer(), 0, "a given back at once: not the backup");
    drop(s);
    let d = z.diagnostics();
    assert_eq!((d.conns_given_back, d.rows_given_back), (2, 1));
    assert_eq!(d.peers[0].conns, 0);
}

/// Killed holding a connection to a peer without `max_conns`: nobody's pick needs it back,
/// but the next process to take a row gives it back.
pub fn dead_holder_found_by_a_newcomer() {
    let z = zone(&[Peer::new("a"), Peer::new("b")]);
    let side = AnonShared::counters(2);
    let pid = holder(&z, &side, 1, 3);
    kill_and_reap(pid);
    assert_eq!(z.diagnostics().peers[1].conns, 3);
    super::in_children(1, |_| drop(z.pick().unwrap()));
    let d = z.diagnostics();
    assert_eq!((d.peers[1].conns, d.conns_given_back), (0, 3));
    z.recover();
    assert_idle(&z);
}

/// A supervisor's `force_release(pid)` right after `waitpid`: exactly the dead process's
/// connections, none of a live one's.
pub fn force_release_after_waitpid() {
    let z = zone(&[Peer::new("a"), Peer::new("b")]);
    let side = AnonShared::counters(2);
    let live = holder(&z, &side, 0, 2);
    let dead = holder(&z, &side, 1, 1);
    kill_and_reap(dead);
    assert_eq!(z.force_release(live), 0, "alive: left alone");
    assert_eq!(z.force_release(dead), 1);
    assert_eq!(z.force_release(dead), 0, "given back once");
    let d = z.diagnostics();
    assert_eq!((d.peers[0].conns, d.peers[1].conns, d.processes), (2, 0, 1));
    kill_and_reap(live);
    assert_eq!(z.force_release(live), 2);
    assert_eq!(z.force_release(-1), 0);
    assert_idle(&z);
}

/// Run `f` in a child that arms crash point `point` first; it must die there.
fn dies_at(point: u32, f: impl FnOnce()) -> libc::pid_t {
    let pid = fork(|| {
        gomutex::__crash::crash_at(point);
        f();
        0
    });
    let code = wait_limit(pid, LIMIT, "crash-point child");
    assert_eq!(
        code,
        128 + libc::SIGKILL,
        "the child did not die at {point}"
    );
    pid
}

/// Killed after writing the spare copy and counting its connection, before the commit: the
/// old state (the sequence did not move), and its row given back.
pub fn killed_mid_pick() {
    let z = zone(&[Peer::new("a").weight(5), Peer::new("b"), Peer::new("c")]);
    let pid = dies_at(crash::PICK_WRITTEN, || drop(z.pick()));
    let d = z.diagnostics(); // the zone lock: its dead holder is recovered, nothing to repair
    assert_eq!(d.epoch, 0, "not committed");
    assert_eq!(d.peers[0].conns, 1, "counted in its row");
    assert_eq!(z.force_release(pid), 1);
    let seq: String = (0..7)
        .map(|_| ["a", "b", "c"][z.pick().unwrap().peer()])
        .collect();
    assert_eq!(seq, "aabacaa", "the sequence from its start");
    assert_idle_after_recover(&z);
}

/// Killed holding the zone lock right after the commit: the pick made (the sequence moved
/// on), the lock taken back by its recovery, the connection given back.
pub fn killed_after_commit_holding_the_lock() {
    let z = zone(&[Peer::new("a").weight(5), Peer::new("b"), Peer::new("c")]);
    dies_at(crash::PICK_COMMITTED, || drop(z.pick()));
    // This process's first pick is a newcomer's: it gives back the dead one's row.
    let seq: String = (0..6)
        .map(|_| ["a", "b", "c"][z.pick().unwrap().peer()])
        .collect();
    assert_eq!(seq, "abacaa", "the dead one's a was the first");
    let d = z.diagnostics();
    assert_eq!((d.epoch, d.peers[0].conns), (7, 0));
    assert_eq!((d.rows_given_back, d.conns_given_back), (1, 1));
}

/// Killed mid-report of a failure (the spare copy written, its connection uncounted, not
/// committed): the failure not counted.
pub fn killed_mid_failure_report() {
    let z = zone(&[Peer::new("a").max_fails(1), Peer::new("b")]);
    dies_at(crash::REPORT_WRITTEN, || {
        let s = z.pick().unwrap();
        assert_eq!(s.peer(), 0);
        s.failure();
    });
    let d = z.diagnostics();
    assert_eq!((d.epoch, d.peers[0].fails, d.peers[0].conns), (1, 0, 0));
    assert_eq!(d.processes, 1);
    assert_eq!(z.recover(), 1);
    assert_idle(&z);
    // And a failure that completes counts.
    in_child_fail(&z);
    assert_eq!(z.diagnostics().peers[0].fails, 1);
}

fn in_child_fail(z: &UpstreamZone) {
    super::in_children(1, |_| loop {
        let s = z.pick().unwrap();
        if s.peer() == 0 {
            s.failure();
            return;
        }
    });
}

/// Killed between claiming a row and recording its pidfs inode: the row is its, and given
/// back like any dead process's.
pub fn killed_claiming_a_row() {
    let z = zone(&[Peer::new("a"), Peer::new("b")]);
    dies_at(crash::ROW_CLAIMED, || drop(z.pick()));
    assert_eq!(z.diagnostics().processes, 1);
    assert_eq!(z.recover(), 1);
    assert_idle(&z);
    assert_eq!(z.pick().map(|s| s.peer()), Ok(0));
}

/// Killed giving back a dead process's row, after zeroing its first peer's count: the row
/// still names the dead, and the next repair finishes it (zeroing again is harmless).
pub fn killed_giving_back_a_row() {
    let z = zone(&[Peer::new("a"), Peer::new("b")]);
    let side = AnonShared::counters(2);
    let pid = holder(&z, &side, 1, 1); // a, then b: holds b (the a was reported)
    kill_and_reap(pid);
    assert_eq!(z.diagnostics().peers[1].conns, 1);
    dies_at(crash::ROW_ZEROING, || {
        z.recover();
    });
    let d = z.diagnostics();
    assert_eq!(
        (d.peers[1].conns, d.rows_given_back),
        (1, 0),
        "not given back yet"
    );
    assert_eq!(z.recover(), 1, "the holder's row (the repairer took none)");
    let d = z.diagnostics();
    assert_eq!((d.peers[1].conns, d.conns_given_back), (0, 1));
    assert_idle(&z);
}

fn assert_idle_after_recover(z: &UpstreamZone) {
    z.recover();
    let d = z.diagnostics();
    assert!(d.peers.iter().all(|p| p.conns == 0), "{d:?}");
}
