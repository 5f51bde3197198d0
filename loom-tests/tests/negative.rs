//! Negative controls: deliberately broken variants that the models must reject, proving that
//! the models can fail (a model that cannot fail proves nothing). Each expects a specific
//! failure, so an unrelated panic does not count as a pass.
//!
//! Each broken model runs in a child process (this test binary, re-run on one `#[ignore]`d
//! body): a loom deadlock cancels the blocked coroutines, whose destructors then touch loom
//! outside the model and abort the process, which `#[should_panic]` cannot catch. The bodies
//! do nothing unless `GOMUTEX_LOOM_NEGATIVE_BODY` is set, so `--include-ignored` is harmless.

use gomutex::algo::{self, StateWord};
use gomutex::rwalgo;
use gomutex::sema::ParkSema;
use gomutex_loom_tests::{
    body_enabled, expect_rejected, far_deadline, model, Harness, LossyQueue, NeverStarving,
    RwFault, RwHarness, RwHarnessOf, Stats, TimedQueue,
};
use loom::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;

/// A queue without persistent tokens (a release with nobody parked is dropped): unlock's wake-up
/// can run before the waiter sleeps, and the waiter then sleeps forever. Loom must report the
/// deadlock. The real algorithm on a plain `AtomicU32` (no ghost), as in `RawMutex`; the holder
/// waits in its critical section until the other thread has registered.
#[test]
fn negative_lossy_queue_deadlocks() {
    expect_rejected("body_lossy_queue", &["deadlock"]);
}

#[test]
#[ignore = "negative-control body, run by negative_lossy_queue_deadlocks in a child process"]
fn body_lossy_queue() {
    if !body_enabled() {
        return;
    }
    model("body_lossy_queue", 2, || {
        let l = Arc::new((AtomicU32::new(0), LossyQueue(ParkSema::new())));
        let l1 = l.clone();
        algo::lock::<_, _, NeverStarving>(&l.0, &l.1);
        let t = thread::spawn(move || {
            algo::lock::<_, _, NeverStarving>(&l1.0, &l1.1);
            algo::unlock(&l1.0, &l1.1);
        });
        while algo::waiters(StateWord::load(&l.0)) == 0 {
            thread::yield_now();
        }
        algo::unlock(&l.0, &l.1);
        t.join().unwrap();
    });
}

/// Unlock's `-LOCKED` with `Relaxed` instead of `Release`: the next owner's fast-path CAS no
/// longer synchronizes with it, so the two critical sections race. Loom must report the
/// unordered accesses to the `UnsafeCell`.
#[test]
fn negative_relaxed_unlock_races() {
    expect_rejected("body_relaxed_unlock", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_relaxed_unlock_races in a child process"]
fn body_relaxed_unlock() {
    if !body_enabled() {
        return;
    }
    model("body_relaxed_unlock", 2, || {
        let h = Arc::new(Harness::with_relaxed_unlock(ParkSema::new(), Stats::new()));
        let h1 = h.clone();
        let t = thread::spawn(move || {
            h1.lock::<NeverStarving>();
            h1.unlock();
        });
        h.lock::<NeverStarving>();
        h.unlock();
        t.join().unwrap();
    });
}

/// A timed queue that, when a release picks a sleeper at the moment its deadline passes,
/// reports a time-out anyway (dropping the token). The timed-lock model must catch the lost
/// wake-up: the waiter then waits for its token forever (a deadlock, or, when every re-check
/// times out, a livelock that exceeds loom's branch limit).
#[test]
fn negative_timeout_drops_token() {
    expect_rejected(
        "body_timeout_drops_token",
        &["deadlock", "maximum number of branches"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_timeout_drops_token in a child process"]
fn body_timeout_drops_token() {
    if !body_enabled() {
        return;
    }
    model("body_timeout_drops_token", 2, || {
        let h = Arc::new(Harness::new(TimedQueue::with(true), Stats::new()));
        let done = Arc::new(AtomicUsize::new(0));
        let (h1, d1) = (h.clone(), done.clone());
        let a = thread::spawn(move || {
            h1.lock::<NeverStarving>();
            h1.wait_until(|s| algo::waiters(s) as usize + d1.load(SeqCst) >= 1);
            h1.unlock();
        });
        if h.lock_until::<NeverStarving>(far_deadline()) {
            h.unlock();
        }
        done.fetch_add(1, SeqCst);
        a.join().unwrap();
    });
}

/// The controls' baseline: the same shapes with the real queue and orderings pass.
#[test]
fn baseline_of_negative_controls_passes() {
    model("baseline_lossy_shape", 2, || {
        let l = Arc::new((AtomicU32::new(0), ParkSema::new()));
        let l1 = l.clone();
        algo::lock::<_, _, NeverStarving>(&l.0, &l.1);
        let t = thread::spawn(move || {
            algo::lock::<_, _, NeverStarving>(&l1.0, &l1.1);
            algo::unlock(&l1.0, &l1.1);
        });
        while algo::waiters(StateWord::load(&l.0)) == 0 {
            thread::yield_now();
        }
        algo::unlock(&l.0, &l.1);
        t.join().unwrap();
        assert_eq!(StateWord::load(&l.0), 0);
        assert_eq!((l.1.stored_tokens(), l.1.parked()), (0, 0));
    });
    model("baseline_timeout_shape", 2, || {
        let h = Arc::new(Harness::new(TimedQueue::new(), Stats::new()));
        let done = Arc::new(AtomicUsize::new(0));
        let (h1, d1) = (h.clone(), done.clone());
        let a = thread::spawn(move || {
            h1.lock::<NeverStarving>();
            h1.wait_until(|s| algo::waiters(s) as usize + d1.load(SeqCst) >= 1);
            h1.unlock();
        });
        let ok = h.lock_until::<NeverStarving>(far_deadline());
        if ok {
            h.unlock();
        }
        done.fetch_add(1, SeqCst);
        a.join().unwrap();
        h.assert_quiescent(1 + u64::from(ok));
    });
}

// ---------------------------------------------------------------------------------------------
// Readers-writer lock (`gomutex::rwalgo` on a `ModelWord`): two shapes, broken three ways.

/// A writer behind a reader: the main thread read-locks, a writer arrives (and, if `asleep`,
/// the main thread waits until it sleeps waiting for the reader), the main thread reads and
/// leaves. Ends quiescent. (A writer woken from its sleep is ordered after the reader by the
/// parking queue's lock too, so only the writer that sees the count at 0 without sleeping
/// depends on the reader's exit ordering alone.)
fn rw_writer_behind_reader(fault: RwFault, asleep: bool) {
    let h = Arc::new(RwHarness::new(fault));
    rwalgo::read(&*h);
    let h1 = h.clone();
    let w = thread::spawn(move || {
        rwalgo::write(&*h1);
        h1.write_cs();
        rwalgo::write_unlock(&*h1);
    });
    // Leave once the writer sleeps: the exit must wake it.
    while asleep && rwalgo::parked_writer(&*h) == 0 {
        thread::yield_now();
    }
    h.read_cs();
    rwalgo::read_unlock(&*h);
    w.join().unwrap();
    h.assert_quiescent(1);
}

/// A reader behind a writer: the main thread write-locks, a reader arrives and sleeps (or,
/// broken, walks in), the main thread writes and unlocks. Ends quiescent.
fn rw_reader_behind_writer(fault: RwFault) {
    let h = Arc::new(RwHarness::new(fault));
    rwalgo::write(&*h);
    let inside = Arc::new(loom::sync::atomic::AtomicBool::new(false));
    let (h1, in1) = (h.clone(), inside.clone());
    let r = thread::spawn(move || {
        rwalgo::read(&*h1);
        in1.store(true, SeqCst);
        let v = h1.read_cs();
        rwalgo::read_unlock(&*h1);
        v
    });
    // Write once the reader sleeps (or, broken, is inside).
    while rwalgo::parked_readers(&*h) == 0 && !inside.load(SeqCst) {
        thread::yield_now();
    }
    h.write_cs();
    rwalgo::write_unlock(&*h);
    assert_eq!(r.join().unwrap(), 1);
    h.assert_quiescent(1);
}

/// The last reader's exit does not look at `WRITER_PARKED`: a writer that went to sleep
/// waiting for it is never woken. Loom must report the deadlock.
#[test]
fn negative_rw_exit_ignores_parked_writer_deadlocks() {
    expect_rejected("body_rw_exit_ignores_parked_writer", &["deadlock"]);
}

#[test]
#[ignore = "negative-control body, run by negative_rw_exit_ignores_parked_writer_deadlocks in a child process"]
fn body_rw_exit_ignores_parked_writer() {
    if !body_enabled() {
        return;
    }
    model("body_rw_exit_ignores_parked_writer", 2, || {
        rw_writer_behind_reader(RwFault::ExitIgnoresParkedWriter, true)
    });
}

/// A reader's exit with `Relaxed` ordering: its read no longer happens before the write of the
/// writer it lets in.
#[test]
fn negative_rw_relaxed_reader_exit_races() {
    expect_rejected("body_rw_relaxed_reader_exit", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_rw_relaxed_reader_exit_races in a child process"]
fn body_rw_relaxed_reader_exit() {
    if !body_enabled() {
        return;
    }
    model("body_rw_relaxed_reader_exit", 2, || {
        rw_writer_behind_reader(RwFault::RelaxedExit, false)
    });
}

/// A reader's entry that does not look at `PHASE` walks in during a write: loom reports the
/// race on the data.
#[test]
fn negative_rw_entry_ignores_phase_races() {
    expect_rejected(
        "body_rw_entry_ignores_phase",
        &["Causality violation", "a reader got in during the write"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_rw_entry_ignores_phase_races in a child process"]
fn body_rw_entry_ignores_phase() {
    if !body_enabled() {
        return;
    }
    model("body_rw_entry_ignores_phase", 2, || {
        rw_reader_behind_writer(RwFault::EntryIgnoresPhase)
    });
}

/// The readers-writer controls' baseline: both shapes with the sound word pass.
#[test]
fn baseline_of_rw_negative_controls_passes() {
    model("baseline_rw_writer_behind_reader", 2, || {
        rw_writer_behind_reader(RwFault::Sound, false);
        rw_writer_behind_reader(RwFault::Sound, true);
    });
    model("baseline_rw_reader_behind_writer", 2, || {
        rw_reader_behind_writer(RwFault::Sound)
    });
}

// ---------------------------------------------------------------------------------------------
// The readers' slot table (`gomutex::rwalgo` on a biased `ModelWord` lock): the Dekker pair
// between a reader publishing itself and a writer announcing its phase, broken three ways.

/// A reader through the table racing a writer on a biased lock. Loom checks the reader's read
/// of the data against the write: a broken Dekker pair lets both in.
fn rw_table_reader_vs_writer<const B: u8>(fault: RwFault) {
    let h = Arc::new(RwHarnessOf::<B>::new(fault));
    assert!(rwalgo::bias(&*h));
    let h1 = h.clone();
    let r = thread::spawn(move || {
        let t = rwalgo::read_token(&*h1);
        let v = h1.read_cs();
        rwalgo::read_unlock_token(&*h1, t);
        v
    });
    rwalgo::write(&*h);
    h.write_cs();
    rwalgo::write_unlock(&*h);
    let v = r.join().unwrap();
    assert!(v <= 1);
    h.assert_quiescent(1);
}

/// The reader looks at the word before publishing itself: a writer that announces and scans in
/// between finds nobody, and the reader walks in beside it.
#[test]
fn negative_rw_table_check_before_publish_races() {
    expect_rejected(
        "body_rw_table_check_before_publish",
        &["Causality violation"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_rw_table_check_before_publish_races in a child process"]
fn body_rw_table_check_before_publish() {
    if !body_enabled() {
        return;
    }
    model("body_rw_table_check_before_publish", 2, || {
        rw_table_reader_vs_writer::<1>(RwFault::Sound)
    });
}

/// The writer scans the table before announcing its phase: a reader that publishes and
/// re-checks in between sees no writer, and the writer saw no reader.
#[test]
fn negative_rw_table_scan_before_announce_races() {
    expect_rejected(
        "body_rw_table_scan_before_announce",
        &["Causality violation"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_rw_table_scan_before_announce_races in a child process"]
fn body_rw_table_scan_before_announce() {
    if !body_enabled() {
        return;
    }
    model("body_rw_table_scan_before_announce", 2, || {
        rw_table_reader_vs_writer::<2>(RwFault::Sound)
    });
}

/// The Dekker pair without its `SeqCst` fences (acquire/release on the word, `Relaxed` in the
/// table): store buffering lets the reader's re-check miss the announcement while the
/// writer's scan misses the publication.
#[test]
fn negative_rw_table_relaxed_dekker_races() {
    expect_rejected("body_rw_table_relaxed_dekker", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_rw_table_relaxed_dekker_races in a child process"]
fn body_rw_table_relaxed_dekker() {
    if !body_enabled() {
        return;
    }
    model("body_rw_table_relaxed_dekker", 2, || {
        rw_table_reader_vs_writer::<3>(RwFault::Sound)
    });
}

/// The writer watches a table reader's slot (the revocation's spin before it folds) and, not
/// seeing it leave, goes on as if it had: it writes while the reader reads.
#[test]
fn negative_rw_table_forget_watched_races() {
    expect_rejected("body_rw_table_forget_watched", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_rw_table_forget_watched_races in a child process"]
fn body_rw_table_forget_watched() {
    if !body_enabled() {
        return;
    }
    // Bound 3: the watch's yield lets the reader run, so it must be preempted once more,
    // between its read and its release, for the writer to look again while it is inside.
    model("body_rw_table_forget_watched", 3, || {
        rw_table_reader_vs_writer::<4>(RwFault::Sound)
    });
}

/// The slot-table controls' baseline: the same shape with the shipped protocol passes.
#[test]
fn baseline_of_rw_table_negative_controls_passes() {
    model("baseline_rw_table_reader_vs_writer", 2, || {
        rw_table_reader_vs_writer::<0>(RwFault::Sound)
    });
    // At the forget-watched control's bound too.
    model("baseline_rw_table_reader_vs_writer_bound_3", 3, || {
        rw_table_reader_vs_writer::<0>(RwFault::Sound)
    });
}
