//! Negative controls: deliberately broken variants that the models must reject, proving that
//! the models can fail (a model that cannot fail proves nothing). Each expects a specific
//! failure, so an unrelated panic does not count as a pass.
//!
//! Each broken model runs in a child process (this test binary, re-run on one `#[ignore]`d
//! body): a loom deadlock cancels the blocked coroutines, whose destructors then touch loom
//! outside the model and abort the process, which `#[should_panic]` cannot catch. The bodies
//! do nothing unless `GOMUTEX_LOOM_NEGATIVE_BODY` is set, so `--include-ignored` is harmless.

use gomutex::algo::{self, StateWord};
use gomutex::rwalgo::{self, Counter, RwParts, MAX_READERS};
use gomutex::rwword::RwWord;
use gomutex::sema::{ParkSema, Sema};
use gomutex_loom_tests::{
    far_deadline, model, Harness, LossyQueue, NeverStarving, RelaxedCounter, RwHarness, SemaFault,
    Stats, TimedQueue,
};
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicI32 as LoomI32;
use loom::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use std::process::Command;

const BODY_ENV: &str = "GOMUTEX_LOOM_NEGATIVE_BODY";

/// Run the `#[ignore]`d test `body` in a child process; it must fail, with one of `expect` in
/// its output.
fn expect_rejected(body: &str, expect: &[&str]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            body,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(BODY_ENV, "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("could not re-run the test binary");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the broken variant `{body}` passed: the model cannot detect this bug\n{text}"
    );
    let hit = expect.iter().find(|e| text.contains(*e));
    assert!(
        hit.is_some(),
        "`{body}` failed for another reason than expected ({expect:?}):\n{text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains(hit.unwrap()))
        .unwrap_or("");
    eprintln!("[loom] {body}: rejected as expected: {line}");
}

fn body_enabled() -> bool {
    std::env::var_os(BODY_ENV).is_some()
}

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
// Readers-writer lock (`gomutex::rwalgo`): one shape, a writer and a reader behind it, broken
// three ways.

/// The shape: the main thread write-locks, a reader (timed if `timed`) arrives behind it, the
/// main thread writes and unlocks; the reader reads if it got in. Ends with the quiescence
/// check (counts 0, no token or debt, nobody asleep).
fn rw_shape<C: Counter + Send + Sync + 'static>(h: RwHarness<C>, timed: bool) {
    let h = Arc::new(h);
    rwalgo::lock(&*h);
    let h1 = h.clone();
    let r = thread::spawn(move || {
        let ok = if timed {
            rwalgo::rlock_until(&*h1, far_deadline())
        } else {
            rwalgo::rlock(&*h1);
            true
        };
        if ok {
            h1.read_cs();
            rwalgo::runlock(&*h1);
        }
    });
    h.write_cs();
    rwalgo::unlock(&*h);
    r.join().unwrap();
    h.assert_quiescent(1);
}

fn sound_counters() -> (LoomI32, LoomI32) {
    (LoomI32::new(0), LoomI32::new(0))
}

/// A reader semaphore that drops a release nobody sleeps for: the writer's unlock can run
/// between the reader's count increment and its sleep, and the reader sleeps forever.
#[test]
fn negative_rw_lossy_semaphore_deadlocks() {
    expect_rejected("body_rw_lossy_semaphore", &["deadlock"]);
}

#[test]
#[ignore = "negative-control body, run by negative_rw_lossy_semaphore_deadlocks in a child process"]
fn body_rw_lossy_semaphore() {
    if !body_enabled() {
        return;
    }
    model("body_rw_lossy_semaphore", 2, || {
        let (rc, rw) = sound_counters();
        rw_shape(RwHarness::with(rc, rw, SemaFault::Lossy), false);
    });
}

/// `readerCount` with `Relaxed` operations: a reader whose add sees the writer's unlock no
/// longer synchronizes with it, so its read races the writer's write.
#[test]
fn negative_rw_relaxed_reader_count_races() {
    expect_rejected("body_rw_relaxed_reader_count", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_rw_relaxed_reader_count_races in a child process"]
fn body_rw_relaxed_reader_count() {
    if !body_enabled() {
        return;
    }
    model("body_rw_relaxed_reader_count", 2, || {
        let rc = RelaxedCounter(LoomI32::new(0));
        let rw = RelaxedCounter(LoomI32::new(0));
        rw_shape(RwHarness::with(rc, rw, SemaFault::Sound), false);
    });
}

/// A timed-out reader that leaves its semaphore without a debt: the unlock's release for it is
/// kept as a token nobody is owed and the reader stays counted, so the lock does not come back
/// to quiescence (and the token would admit a later reader during a write).
#[test]
fn negative_rw_timeout_without_debt() {
    expect_rejected("body_rw_timeout_without_debt", &["at the end"]);
}

#[test]
#[ignore = "negative-control body, run by negative_rw_timeout_without_debt in a child process"]
fn body_rw_timeout_without_debt() {
    if !body_enabled() {
        return;
    }
    model("body_rw_timeout_without_debt", 2, || {
        let (rc, rw) = sound_counters();
        rw_shape(RwHarness::with(rc, rw, SemaFault::NoDebt), true);
    });
}

/// The readers-writer controls' baseline: the same shape, untimed and timed, with the sound
/// semaphore and gomutex's own counters, passes.
#[test]
fn baseline_of_rw_negative_controls_passes() {
    model("baseline_rw_shape", 2, || {
        let (rc, rw) = sound_counters();
        rw_shape(RwHarness::with(rc, rw, SemaFault::Sound), false);
    });
    model("baseline_rw_timed_shape", 2, || {
        let (rc, rw) = sound_counters();
        rw_shape(RwHarness::with(rc, rw, SemaFault::Sound), true);
    });
}

// ---------------------------------------------------------------------------------------------
// The one-word fast path (`RwParts::lock_fast`, in-process `RwWord`).

/// The in-process lock's parts (`RwWord`, `ParkSema`, `Sema`s, as `RawRwLock`), with the fast
/// write lock sound (`RwWord::lock_fast`: the whole word 0) or broken (only the mutex half
/// checked, then the count biased: the readers inside are not waited for).
struct FastParts {
    word: RwWord,
    queue: ParkSema,
    reader_wait: LoomI32,
    writer_sem: Sema,
    reader_sem: Sema,
    broken: bool,
    cell: UnsafeCell<u64>,
}

impl FastParts {
    fn new(broken: bool) -> Self {
        Self {
            word: RwWord::new(),
            queue: ParkSema::new(),
            reader_wait: LoomI32::new(0),
            writer_sem: Sema::new(),
            reader_sem: Sema::new(),
            broken,
            cell: UnsafeCell::new(0),
        }
    }
}

impl RwParts for FastParts {
    type Word = RwWord;
    type Queue = ParkSema;
    type Clock = NeverStarving;
    type Count = dyn Counter + 'static;
    type Sema = Sema;
    fn w(&self) -> (&RwWord, &ParkSema) {
        (&self.word, &self.queue)
    }
    fn reader_count(&self) -> &Self::Count {
        &self.word
    }
    fn reader_wait(&self) -> &Self::Count {
        &self.reader_wait
    }
    fn writer_sem(&self) -> &Sema {
        &self.writer_sem
    }
    fn reader_sem(&self) -> &Sema {
        &self.reader_sem
    }
    fn lock_fast(&self) -> bool {
        if !self.broken {
            return self.word.lock_fast();
        }
        self.word.try_acquire_fast() && {
            Counter::add(&self.word, -MAX_READERS);
            true
        }
    }
    fn unlock_fast(&self) -> bool {
        self.word.unlock_fast()
    }
}

/// A reader inside, a writer arriving: the writer must wait for the reader (loom checks the
/// cell), and everything ends quiescent.
fn rw_fast_shape(p: FastParts) {
    let p = Arc::new(p);
    let p1 = p.clone();
    let r = thread::spawn(move || {
        rwalgo::rlock(&*p1);
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        p1.cell.with(|c| unsafe { *c });
        rwalgo::runlock(&*p1);
    });
    rwalgo::lock(&*p);
    // SAFETY: as above.
    p.cell.with_mut(|c| unsafe { *c += 1 });
    rwalgo::unlock(&*p);
    r.join().unwrap();
    assert_eq!(StateWord::load(&p.word), 0);
    assert_eq!(Counter::load(&p.word), 0);
    assert_eq!(Counter::load(&p.reader_wait), 0);
    assert_eq!((p.writer_sem.count(), p.reader_sem.count()), (0, 0));
}

/// A fast write lock that checks only the writers' mutex half of the word (not the reader
/// count beside it) takes the lock with a reader inside: loom reports the race on the data.
#[test]
fn negative_rw_fast_lock_ignores_readers() {
    expect_rejected(
        "body_rw_fast_lock_ignores_readers",
        &["Causality violation"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_rw_fast_lock_ignores_readers in a child process"]
fn body_rw_fast_lock_ignores_readers() {
    if !body_enabled() {
        return;
    }
    model("body_rw_fast_lock_ignores_readers", 2, || {
        rw_fast_shape(FastParts::new(true))
    });
}

/// The fast-path control's baseline: the same shape with `RwWord`'s own fast path passes.
#[test]
fn baseline_of_rw_fast_path_control_passes() {
    model("baseline_rw_fast_shape", 2, || {
        rw_fast_shape(FastParts::new(false))
    });
}
