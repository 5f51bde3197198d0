//! Go's `RWMutex` (`gomutex::rwalgo`): the shipped `RawRwLock` (the algorithm on the writers'
//! `RawMutex`, `AtomicI32` counters and `Sema` semaphores, parking mocked) for the policy, and
//! `RwHarness` (the same algorithm with `TimedSema`s whose timed sleeps time out at arbitrary
//! points) for the deadlines. A loom `UnsafeCell` read by readers and written by writers checks
//! exclusion and happens-before; every model ends quiescent (counts 0, no token, no debt, nobody
//! parked). Negative controls: `tests/negative.rs`.

use gomutex::rwalgo::{self, MAX_READERS};
use gomutex::RawRwLock;
use gomutex_loom_tests::{far_deadline, join_all, model, RwHarness};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering::Relaxed};

struct Shared {
    l: RawRwLock,
    cell: UnsafeCell<u64>,
}

impl Shared {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            l: RawRwLock::new(),
            cell: UnsafeCell::new(0),
        })
    }
    fn read_cs(&self) -> u64 {
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        self.cell.with(|p| unsafe { *p })
    }
    fn write_cs(&self) {
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        self.cell.with_mut(|p| unsafe { *p += 1 });
    }
    fn read(&self) -> u64 {
        self.l.read();
        let v = self.read_cs();
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { self.l.unlock_read() };
        v
    }
    fn write(&self) {
        self.l.write();
        self.write_cs();
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { self.l.unlock_write() };
    }
    /// Yield until `pred(readerCount, readerWait, writers' mutex state)` holds.
    fn wait_until(&self, pred: impl Fn(i32, i32, u32) -> bool) {
        let mut spins = 0u32;
        loop {
            let (rc, rw, w, _, _) = self.l.state();
            if pred(rc, rw, w) {
                return;
            }
            spins += 1;
            assert!(spins < 200, "wait_until spins");
            thread::yield_now();
        }
    }
    fn assert_quiescent(&self, writes: u64) {
        assert_eq!(self.l.state(), (0, 0, 0, 0, 0), "not quiescent");
        assert_eq!(self.l.parked(), 0, "threads still parked");
        assert_eq!(self.read_cs(), writes);
    }
}

/// Readers overlap: two readers each wait, inside, until both are inside (a lock that
/// serialised them would deadlock, which loom reports).
#[test]
fn rw_readers_overlap() {
    model("rw_readers_overlap", 3, || {
        let s = Shared::new();
        let inside = Arc::new(AtomicUsize::new(0));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let (s, inside) = (s.clone(), inside.clone());
                thread::spawn(move || {
                    s.l.read();
                    s.read_cs();
                    inside.fetch_add(1, SeqCst);
                    while inside.load(SeqCst) < 2 {
                        thread::yield_now();
                    }
                    // SAFETY: the lock is held in this mode (taken above).
                    unsafe { s.l.unlock_read() };
                })
            })
            .collect();
        join_all(ts);
        s.assert_quiescent(0);
    });
}

/// A writer excludes everyone: two writers and a reader (blocking) and the main thread's
/// `try_read`/`try_write`; every write is ordered with every other access, nobody is left
/// asleep (no lost wake-up), and the try calls return.
#[test]
fn rw_writer_excludes_everyone() {
    model("rw_writer_excludes_everyone", 2, || {
        let s = Shared::new();
        let ts: Vec<_> = [true, true, false]
            .into_iter()
            .map(|w| {
                let s = s.clone();
                thread::spawn(move || {
                    if w {
                        s.write();
                    } else {
                        s.read();
                    }
                })
            })
            .collect();
        let mut writes = 2;
        if s.l.try_write() {
            s.write_cs();
            writes += 1;
            // SAFETY: the lock is held in this mode (taken above).
            unsafe { s.l.unlock_write() };
        }
        if s.l.try_read() {
            s.read_cs();
            // SAFETY: the lock is held in this mode (taken above).
            unsafe { s.l.unlock_read() };
        }
        join_all(ts);
        s.assert_quiescent(writes);
    });
}

/// Writer preference: once the writer has announced itself (count negative) while a reader is
/// inside, `try_read` fails and a new reader waits for the writer, seeing its write.
#[test]
fn rw_writer_preference() {
    model("rw_writer_preference", 3, || {
        let s = Shared::new();
        s.l.read();
        let s1 = s.clone();
        let w = thread::spawn(move || s1.write());
        s.wait_until(|rc, _, _| rc < 0);
        assert!(!s.l.try_read(), "try_read succeeded with a writer pending");
        let s2 = s.clone();
        let r = thread::spawn(move || s2.read());
        s.read_cs();
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { s.l.unlock_read() };
        w.join().unwrap();
        assert_eq!(
            r.join().unwrap(),
            1,
            "the new reader overtook the pending writer"
        );
        s.assert_quiescent(1);
    });
}

/// Go's batch order: a reader that queued behind writer 1 is admitted before writer 2, which
/// was already waiting on the writers' mutex.
#[test]
fn rw_queued_readers_before_next_writer() {
    model("rw_queued_readers_before_next_writer", 1, || {
        let s = Shared::new();
        let r_done = Arc::new(AtomicBool::new(false));
        s.l.read();
        let s1 = s.clone();
        let w1 = thread::spawn(move || s1.write());
        s.wait_until(|rc, _, _| rc < 0);
        let (s2, d) = (s.clone(), r_done.clone());
        let r = thread::spawn(move || {
            s2.l.read();
            let v = s2.read_cs();
            d.store(true, SeqCst); // inside the read section
                                   // SAFETY: the lock is held in this mode (taken above).
            unsafe { s2.l.unlock_read() };
            v
        });
        s.wait_until(|rc, _, _| rc == -MAX_READERS + 2);
        let (s3, d) = (s.clone(), r_done.clone());
        let w2 = thread::spawn(move || {
            s3.l.write();
            assert!(
                d.load(SeqCst),
                "writer 2 overtook a reader queued behind writer 1"
            );
            s3.write_cs();
            // SAFETY: the lock is held in this mode (taken above).
            unsafe { s3.l.unlock_write() };
        });
        // Writer 2 registered as a waiter on the writers' mutex.
        s.wait_until(|_, _, w| w >> 3 >= 1);
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { s.l.unlock_read() };
        join_all([w1, w2]);
        assert_eq!(r.join().unwrap(), 1);
        s.assert_quiescent(2);
    });
}

/// Downgrade: a reader queued during the write phase is admitted with the downgraded writer,
/// sees its write, and a writer waits for both.
#[test]
fn rw_downgrade_admits_queued_reader() {
    model("rw_downgrade_admits_queued_reader", 3, || {
        let s = Shared::new();
        s.l.write();
        let s1 = s.clone();
        let r = thread::spawn(move || s1.read());
        let s2 = s.clone();
        let w = thread::spawn(move || s2.write());
        s.write_cs();
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { s.l.downgrade() };
        assert_eq!(s.read_cs(), 1);
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { s.l.unlock_read() };
        assert!(r.join().unwrap() >= 1);
        w.join().unwrap();
        s.assert_quiescent(2);
    });
}

/// `try_read`/`try_write` never block: against a holder that never lets go during the calls
/// (the main thread holds it until both returned), each fails and returns.
#[test]
fn rw_try_never_blocks() {
    model("rw_try_never_blocks", 3, || {
        let s = Shared::new();
        s.l.write();
        let s1 = s.clone();
        let t = thread::spawn(move || {
            let r = s1.l.try_read();
            let w = s1.l.try_write();
            (r, w)
        });
        let s2 = s.clone();
        let reader = thread::spawn(move || s2.read());
        assert_eq!(t.join().unwrap(), (false, false));
        s.write_cs();
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { s.l.unlock_write() };
        assert_eq!(reader.join().unwrap(), 1);
        s.assert_quiescent(1);
    });
}

// ---------------------------------------------------------------------------------------------
// Deadlines: the same algorithm over `TimedSema`

/// Outcomes across executions, so a model can assert that both were explored.
#[derive(Default)]
struct Seen {
    ok: StdAtomicUsize,
    timed_out: StdAtomicUsize,
}

impl Seen {
    fn note(&self, ok: bool) {
        if ok { &self.ok } else { &self.timed_out }.fetch_add(1, Relaxed);
    }
    fn both(&self, name: &str) {
        let (ok, to) = (self.ok.load(Relaxed), self.timed_out.load(Relaxed));
        eprintln!("[loom] {name}: {ok} succeeded, {to} timed out");
        assert!(
            ok > 0 && to > 0,
            "{name}: not both outcomes explored ({ok}, {to})"
        );
    }
}

/// Runs `body` as the loom model `name` at `bound` with one [`Seen`] across its executions,
/// then asserts that both outcomes were explored.
fn model_both_outcomes(
    name: &'static str,
    bound: usize,
    body: impl Fn(&std::sync::Arc<Seen>) + Send + Sync + 'static,
) {
    let seen = std::sync::Arc::new(Seen::default());
    let s0 = seen.clone();
    model(name, bound, move || body(&s0));
    seen.both(name);
}

/// A reader that gives up at a deadline (which may pass at any point), noting the outcome:
/// the value it read if it got in.
fn spawn_timed_reader(
    h: &Arc<RwHarness>,
    seen: &std::sync::Arc<Seen>,
) -> thread::JoinHandle<Option<u64>> {
    let (h, seen) = (h.clone(), seen.clone());
    thread::spawn(move || {
        let ok = rwalgo::rlock_until(&*h, far_deadline());
        seen.note(ok);
        ok.then(|| {
            let v = h.read_cs();
            rwalgo::runlock(&*h);
            v
        })
    })
}

/// A writer that writes once.
fn spawn_writer(h: &Arc<RwHarness>) -> thread::JoinHandle<()> {
    let h = h.clone();
    thread::spawn(move || {
        rwalgo::lock(&*h);
        h.write_cs();
        rwalgo::unlock(&*h);
    })
}

/// A timed reader behind a writer whose unlock races its deadline, and a second writer after
/// it: either the reader gets in (and sees the write) or it is a ghost that the unlock (or the
/// second writer's) takes back; no token or debt survives.
#[test]
fn rw_timed_reader_races_unlock() {
    model_both_outcomes("rw_timed_reader_races_unlock", 3, |seen| {
        let h = Arc::new(RwHarness::new());
        rwalgo::lock(&*h);
        let r = spawn_timed_reader(&h, seen);
        let w2 = spawn_writer(&h);
        h.wait_until(|rc, _, _| rc == -MAX_READERS + 1);
        h.write_cs();
        rwalgo::unlock(&*h);
        if let Some(v) = r.join().unwrap() {
            assert_eq!(v, 1, "a timed reader got in during the write");
        }
        w2.join().unwrap();
        h.assert_quiescent(2);
    });
}

/// A timed writer waiting for a reader whose departure races the writer's deadline, with a
/// reader arriving behind it: either the writer gets the lock, or it is a ghost whose write
/// phase the departing reader finishes; the late reader gets in either way.
#[test]
fn rw_timed_writer_races_last_reader() {
    model_both_outcomes("rw_timed_writer_races_last_reader", 3, |seen| {
        let h = Arc::new(RwHarness::new());
        rwalgo::rlock(&*h);
        let (h1, seen) = (h.clone(), seen.clone());
        let w = thread::spawn(move || {
            let ok = rwalgo::lock_until(&*h1, far_deadline());
            seen.note(ok);
            if ok {
                h1.write_cs();
                rwalgo::unlock(&*h1);
            }
            ok
        });
        h.wait_until(|_, rw, _| rw == 1);
        let h2 = h.clone();
        let r = thread::spawn(move || {
            rwalgo::rlock(&*h2);
            let v = h2.read_cs();
            rwalgo::runlock(&*h2);
            v
        });
        h.read_cs();
        rwalgo::runlock(&*h);
        let wrote = w.join().unwrap();
        let v = r.join().unwrap();
        assert!(v <= 1);
        h.assert_quiescent(u64::from(wrote));
    });
}

/// A ghost reader across two write phases: the reader times out behind writer 1, possibly
/// after writer 1's unlock counted it, with writer 2 and a blocking reader arriving (which may
/// take the token released for the timed one while writer 2 waits): every interleaving ends
/// quiescent, every write excluded.
#[test]
fn rw_timed_ghost_reader_across_phases() {
    model_both_outcomes("rw_timed_ghost_reader_across_phases", 2, |seen| {
        let h = Arc::new(RwHarness::new());
        rwalgo::lock(&*h);
        let r = spawn_timed_reader(&h, seen);
        let w2 = spawn_writer(&h);
        let h3 = h.clone();
        let r3 = thread::spawn(move || {
            rwalgo::rlock(&*h3);
            h3.read_cs();
            rwalgo::runlock(&*h3);
        });
        h.write_cs();
        rwalgo::unlock(&*h);
        r.join().unwrap();
        join_all([w2, r3]);
        h.assert_quiescent(2);
    });
}
