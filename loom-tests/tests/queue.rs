//! `gomutex::sema::ParkSema`, the in-process wait queue, through the `WaitQueue` trait alone:
//! persistent tokens (a release before the sleep is not lost) and queue discipline (re-queued
//! `lifo` sleepers before first-time sleepers, FIFO within a class).

use gomutex::sema::{ParkSema, WaitQueue};
use gomutex_loom_tests::{join_all, model};
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// One sleeper, one release, in any order: the sleeper always returns with the token, and
/// nothing is left behind. Both orders must be explored (release first: the token is kept and
/// taken without sleeping; sleep first: the release wakes it).
#[test]
fn queue_token_persists() {
    let kept = std::sync::Arc::new(AtomicUsize::new(0));
    let direct = std::sync::Arc::new(AtomicUsize::new(0));
    let (k, d) = (kept.clone(), direct.clone());
    model("queue_token_persists", 3, move || {
        let q = Arc::new(ParkSema::new());
        let q1 = q.clone();
        let t = thread::spawn(move || assert!(q1.acquire(false, None)));
        q.release(false);
        // Right after the release: a kept token means the sleeper had not slept yet.
        if q.stored_tokens() == 1 {
            k.fetch_add(1, Relaxed);
        } else {
            d.fetch_add(1, Relaxed);
        }
        t.join().unwrap();
        assert_eq!((q.stored_tokens(), q.parked()), (0, 0));
    });
    let (k, d) = (kept.load(Relaxed), direct.load(Relaxed));
    eprintln!("release before the sleep: {k} executions, after: {d}");
    assert!(k > 0 && d > 0);
}

/// Two sleepers (one re-queued, one first-time) and two concurrent releases (one a hand-off):
/// both sleepers wake, no token is kept or lost, nobody stays parked.
#[test]
fn queue_two_sleepers_two_releasers() {
    model("queue_two_sleepers_two_releasers", 2, || {
        let q = Arc::new(ParkSema::new());
        let sleepers: Vec<_> = [false, true]
            .into_iter()
            .map(|lifo| {
                let q = q.clone();
                thread::spawn(move || assert!(q.acquire(lifo, None)))
            })
            .collect();
        let q1 = q.clone();
        let r = thread::spawn(move || q1.release(true));
        q.release(false);
        r.join().unwrap();
        for s in sleepers {
            s.join().unwrap();
        }
        assert_eq!((q.stored_tokens(), q.parked()), (0, 0));
    });
}

/// Queue discipline (docs/algorithm.md, invariant 11): sleepers park in a fixed order (the main
/// thread waits for each to be parked before starting the next), then releases one at a time
/// (each waiting until its sleeper has run) must serve the re-queued (`lifo`) sleepers first,
/// oldest first as the `WaitQueue` contract says, then the first-time sleepers in FIFO order.
fn discipline(
    name: &'static str,
    bound: usize,
    sleepers: &'static [(char, bool)],
    expect: &'static [char],
) {
    model(name, bound, move || {
        let q = Arc::new(ParkSema::new());
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut ts = Vec::new();
        for &(name, lifo) in sleepers {
            let (q1, o) = (q.clone(), order.clone());
            ts.push(thread::spawn(move || {
                assert!(q1.acquire(lifo, None));
                o.lock().unwrap().push(name);
            }));
            let n = ts.len();
            while q.parked() < n {
                thread::yield_now();
            }
        }
        for served in 1..=sleepers.len() {
            q.release(false);
            while order.lock().unwrap().len() < served {
                thread::yield_now();
            }
        }
        join_all(ts);
        assert_eq!(*order.lock().unwrap(), expect);
        assert_eq!((q.stored_tokens(), q.parked()), (0, 0));
    });
}

/// First-time A, B, then re-queued C: C, A, B.
#[test]
fn queue_requeued_before_first_time_sleepers() {
    discipline(
        "queue_requeued_before_first_time_sleepers",
        1,
        &[('A', false), ('B', false), ('C', true)],
        &['C', 'A', 'B'],
    );
}

/// First-time A, B, then re-queued C, D: C, D, A, B. Four sleepers make five loom threads, so
/// only schedules without preemption are explored (the order is fixed by construction).
#[test]
fn queue_two_requeued_oldest_first() {
    discipline(
        "queue_two_requeued_oldest_first",
        0,
        &[('A', false), ('B', false), ('C', true), ('D', true)],
        &['C', 'D', 'A', 'B'],
    );
}
