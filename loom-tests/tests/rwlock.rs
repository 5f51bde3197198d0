//! The readers-writer lock (`gomutex::rwalgo`): the shipped `RawRwLock` (one state word, the
//! writers' mutex on its low half and a `ParkSema`, readers and the waiting writer parked in
//! the parking mock) for the policy and, with `gomutex::let_deadlines_pass`, the deadlines
//! (a timed sleep times out at an arbitrary point). A loom `UnsafeCell` read by readers and
//! written by writers checks exclusion and happens-before; every model ends quiescent (the
//! word 0, no token kept, nobody parked), so a lost wake-up is a loom deadlock or a failed
//! check. Negative controls: `tests/negative.rs`.

use gomutex::rwalgo::{ReadToken, PHASE, WRITER_PARKED};
use gomutex::RawRwLock;
use gomutex_loom_tests::{far_deadline, join_all, model};
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
    /// Yield until `pred(lock)` holds.
    fn wait_until(&self, pred: impl Fn(&RawRwLock) -> bool) {
        let mut spins = 0u32;
        while !pred(&self.l) {
            spins += 1;
            assert!(spins < 200, "wait_until spins");
            thread::yield_now();
        }
    }
    fn assert_quiescent(&self, writes: u64) {
        assert_eq!(self.l.state(), 0, "state word not 0 at the end");
        assert_eq!(gomutex::rwtable::occupied(), 0, "slots left naming a lock");
        assert_eq!(self.l.stored_tokens(), 0, "writers' tokens left at the end");
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

/// A writer excludes everyone: two writers and a reader (blocking); every write is ordered with
/// every other access and nobody is left asleep (no lost wake-up). (`try_read`/`try_write`
/// against holders: `rw_try_never_blocks`; with them in this model too, bound 2 did not finish
/// in 400 s on the loaded 2-core machine.)
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
        join_all(ts);
        s.assert_quiescent(2);
    });
}

/// Writer preference: once the writer has announced itself (`PHASE`) while a reader is inside,
/// `try_read` fails and a new reader waits for the writer, seeing its write.
#[test]
fn rw_writer_preference() {
    model("rw_writer_preference", 3, || {
        let s = Shared::new();
        s.l.read();
        let s1 = s.clone();
        let w = thread::spawn(move || s1.write());
        s.wait_until(|l| l.state() & PHASE != 0);
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
    model("rw_queued_readers_before_next_writer", 0, || {
        let s = Shared::new();
        let r_done = Arc::new(AtomicBool::new(false));
        s.l.read();
        let s1 = s.clone();
        let w1 = thread::spawn(move || s1.write());
        s.wait_until(|l| l.state() & PHASE != 0);
        let (s2, d) = (s.clone(), r_done.clone());
        let r = thread::spawn(move || {
            s2.l.read();
            let v = s2.read_cs();
            d.store(true, SeqCst); // inside the read section
                                   // SAFETY: the lock is held in this mode (taken above).
            unsafe { s2.l.unlock_read() };
            v
        });
        // The reader sleeps behind writer 1.
        s.wait_until(|l| l.parked_readers() == 1);
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
        s.wait_until(|l| l.writers() >> 3 >= 1);
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { s.l.unlock_read() };
        join_all([w1, w2]);
        assert_eq!(r.join().unwrap(), 1);
        s.assert_quiescent(2);
    });
}

/// Writers among themselves have the mutex's starvation mode (the shipped virtual clock): A
/// holds the write lock until B has registered on the writers' mutex, advances the clock,
/// unlocks, relocks and waits until B registered again (or is done). When A sees `STARVING`
/// in its write section, its unlock must hand the lock to B. Asserts the hand-off was explored.
#[test]
fn rw_writers_starvation_handoff() {
    let seen = std::sync::Arc::new(StdAtomicUsize::new(0));
    let seen2 = seen.clone();
    model("rw_writers_starvation_handoff", 2, move || {
        let s = Shared::new();
        let b_done = Arc::new(AtomicBool::new(false));
        let (s1, d1, seen) = (s.clone(), b_done.clone(), seen2.clone());
        let a = thread::spawn(move || {
            for round in 0..2 {
                s1.l.write();
                s1.write_cs();
                while s1.l.writers() >> 3 == 0 && !d1.load(SeqCst) {
                    thread::yield_now();
                }
                if round == 0 {
                    gomutex::clock::advance_virtual_clock();
                } else if s1.l.writers() & gomutex::algo::STARVING != 0 {
                    seen.fetch_add(1, Relaxed);
                }
                // SAFETY: A holds the write lock, taken at the top of this round.
                unsafe { s1.l.unlock_write() };
            }
        });
        let (s2, d2) = (s.clone(), b_done.clone());
        let b = thread::spawn(move || {
            s2.write();
            d2.store(true, SeqCst);
        });
        join_all([a, b]);
        s.assert_quiescent(3);
    });
    let n = seen.load(Relaxed);
    eprintln!("executions where the holder saw STARVING before unlocking: {n}");
    assert!(
        n > 0,
        "the starvation hand-off between writers was never explored"
    );
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
    s: &Arc<Shared>,
    seen: &std::sync::Arc<Seen>,
) -> thread::JoinHandle<Option<u64>> {
    let (s, seen) = (s.clone(), seen.clone());
    thread::spawn(move || {
        let ok = s.l.try_read_until(far_deadline().unwrap());
        seen.note(ok);
        ok.then(|| {
            let v = s.read_cs();
            // SAFETY: the lock is held in this mode (taken above).
            unsafe { s.l.unlock_read() };
            v
        })
    })
}

/// A writer that writes once.
fn spawn_writer(s: &Arc<Shared>) -> thread::JoinHandle<()> {
    let s = s.clone();
    thread::spawn(move || s.write())
}

/// A timed reader asleep behind a writer whose unlock races its deadline, and a second writer
/// after it: either the end of the write phase admits the reader (which sees the write, not
/// the second writer's: the batch goes first) or the reader left the queue and is not
/// counted; nothing survives.
#[test]
fn rw_timed_reader_races_unlock() {
    model_both_outcomes("rw_timed_reader_races_unlock", 3, |seen| {
        gomutex::let_deadlines_pass();
        let s = Shared::new();
        s.l.write();
        let gave_up = Arc::new(AtomicBool::new(false));
        let r = {
            let (s, seen, gave_up) = (s.clone(), seen.clone(), gave_up.clone());
            thread::spawn(move || {
                let ok = s.l.try_read_until(far_deadline().unwrap());
                seen.note(ok);
                gave_up.store(!ok, SeqCst);
                ok.then(|| {
                    let v = s.read_cs();
                    // SAFETY: the lock is held in this mode (taken above).
                    unsafe { s.l.unlock_read() };
                    v
                })
            })
        };
        // Queued (asleep behind the writer), or already gone.
        s.wait_until(|l| l.parked_readers() == 1 || gave_up.load(SeqCst));
        let w2 = spawn_writer(&s);
        s.write_cs();
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { s.l.unlock_write() };
        if let Some(v) = r.join().unwrap() {
            assert_eq!(
                v, 1,
                "a timed reader got in during a write, or after writer 2"
            );
        }
        w2.join().unwrap();
        s.assert_quiescent(2);
    });
}

/// A timed writer asleep waiting for a reader whose departure races the writer's deadline,
/// with a reader arriving behind it: either the writer gets the lock, or it is a ghost whose
/// write phase the departing reader ends; the late reader gets in either way, after the write
/// if there was one.
#[test]
fn rw_timed_writer_races_last_reader() {
    model_both_outcomes("rw_timed_writer_races_last_reader", 3, |seen| {
        gomutex::let_deadlines_pass();
        let s = Shared::new();
        s.l.read();
        let (s1, seen) = (s.clone(), seen.clone());
        let w = thread::spawn(move || {
            let ok = s1.l.try_write_until(far_deadline().unwrap());
            seen.note(ok);
            if ok {
                s1.write_cs();
                // SAFETY: the lock is held in this mode (taken above).
                unsafe { s1.l.unlock_write() };
            }
            ok
        });
        // Set before it sleeps, still set if it gave up (a ghost).
        s.wait_until(|l| l.state() & WRITER_PARKED != 0);
        let s2 = s.clone();
        let r = thread::spawn(move || s2.read());
        s.read_cs();
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { s.l.unlock_read() };
        let wrote = w.join().unwrap();
        let v = r.join().unwrap();
        assert!(v <= 1);
        s.assert_quiescent(u64::from(wrote));
    });
}

/// A timed reader across two write phases: it may time out behind writer 1, be admitted by its
/// end, or (not yet asleep then) queue again behind writer 2: every interleaving ends
/// quiescent, every write excluded. (With a blocking reader as a fourth thread, bound 2 did
/// not finish in 6 minutes on the loaded 2-core machine.)
#[test]
fn rw_timed_reader_across_phases() {
    model_both_outcomes("rw_timed_reader_across_phases", 2, |seen| {
        gomutex::let_deadlines_pass();
        let s = Shared::new();
        s.l.write();
        let r = spawn_timed_reader(&s, seen);
        let w2 = spawn_writer(&s);
        s.write_cs();
        // SAFETY: the lock is held in this mode (taken above).
        unsafe { s.l.unlock_write() };
        if let Some(v) = r.join().unwrap() {
            assert!(v >= 1, "a timed reader got in during writer 1's write");
        }
        w2.join().unwrap();
        s.assert_quiescent(2);
    });
}

// ---------------------------------------------------------------------------------------------
// Readers through the slot table (`gomutex::rwtable`): the shipped lock, biased

/// Read locks taken through the table, across the executions of one model.
static TABLE_READS: StdAtomicUsize = StdAtomicUsize::new(0);

impl Shared {
    /// A token read (through the table if the lock is biased and no writer is announced), its
    /// critical section and release: the value read.
    fn token_read(&self) -> u64 {
        let t = self.l.read_token();
        if t.in_table() {
            TABLE_READS.fetch_add(1, Relaxed);
        }
        let v = self.read_cs();
        // SAFETY: read-locked just above, where the token says.
        unsafe { self.l.unlock_read_token(t) };
        v
    }

    /// A token read of a biased lock that goes through the table (counted there); the caller
    /// releases it.
    fn table_read(&self) -> ReadToken {
        let t = self.l.read_token();
        assert!(t.in_table());
        TABLE_READS.fetch_add(1, Relaxed);
        t
    }
}

/// Runs the model, then asserts some of its executions read through the table.
fn model_through_table(name: &'static str, bound: usize, f: impl Fn() + Send + Sync + 'static) {
    TABLE_READS.store(0, Relaxed);
    model(name, bound, f);
    let n = TABLE_READS.load(Relaxed);
    eprintln!("[loom] {name}: {n} reads through the table");
    assert!(n > 0, "{name}: no read went through the table");
}

/// A table reader and a writer: exclusion through the Dekker pair (the reader's publication
/// and re-check, the writer's announcement and scan) and the fold; quiescent at the end (the
/// slot released, the word 0).
#[test]
fn rw_table_reader_excludes_writer() {
    model_through_table("rw_table_reader_excludes_writer", 3, || {
        let s = Shared::new();
        assert!(s.l.bias());
        let s1 = s.clone();
        let r = thread::spawn(move || s1.token_read());
        s.write();
        assert!(r.join().unwrap() <= 1);
        s.assert_quiescent(1);
    });
}

/// Two table readers and a writer (bound 2): folds racing releases and withdrawals.
#[test]
fn rw_table_two_readers_and_a_writer() {
    model_through_table("rw_table_two_readers_and_a_writer", 2, || {
        let s = Shared::new();
        assert!(s.l.bias());
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || {
                    s.token_read();
                })
            })
            .collect();
        s.write();
        join_all(ts);
        s.assert_quiescent(1);
    });
}

/// A writer behind a table reader folds it into the count and sleeps; the reader's release
/// fails, it leaves through the word and wakes the writer (no lost wake-up: quiescence).
#[test]
fn rw_table_folded_reader_wakes_the_writer() {
    model_through_table("rw_table_folded_reader_wakes_the_writer", 3, || {
        let s = Shared::new();
        assert!(s.l.bias());
        let t = s.table_read();
        let s1 = s.clone();
        let w = thread::spawn(move || s1.write());
        s.wait_until(|l| l.parked() == 1);
        s.read_cs();
        // SAFETY: read-locked above, where the token says.
        unsafe { s.l.unlock_read_token(t) };
        w.join().unwrap();
        s.assert_quiescent(1);
    });
}

/// A token reader that comes during a write phase of a biased lock waits for its end without
/// counting itself in, then enters through the table (or, had it slept, is admitted by the
/// phase's end); a second writer then revokes it: exclusion both times, quiescent at the end.
#[test]
fn rw_table_reader_waits_out_a_phase() {
    model_through_table("rw_table_reader_waits_out_a_phase", 2, || {
        let s = Shared::new();
        assert!(s.l.bias());
        s.l.write();
        let s1 = s.clone();
        let r = thread::spawn(move || s1.token_read());
        s.write_cs();
        // SAFETY: write-locked above.
        unsafe { s.l.unlock_write() };
        s.write();
        let v = r.join().unwrap();
        assert!((1..=2).contains(&v), "read {v}");
        s.assert_quiescent(2);
    });
}

/// Writer preference through the table: with a writer announced behind a table reader,
/// `try_read_token` fails and a new token reader waits for the write.
#[test]
fn rw_table_writer_preference() {
    model_through_table("rw_table_writer_preference", 2, || {
        let s = Shared::new();
        assert!(s.l.bias());
        let t = s.table_read();
        let s1 = s.clone();
        let w = thread::spawn(move || s1.write());
        s.wait_until(|l| l.state() & PHASE != 0);
        assert!(
            s.l.try_read_token().is_none(),
            "try_read with a writer pending"
        );
        let s2 = s.clone();
        let r = thread::spawn(move || s2.token_read());
        s.read_cs();
        // SAFETY: read-locked above, where the token says.
        unsafe { s.l.unlock_read_token(t) };
        w.join().unwrap();
        assert_eq!(r.join().unwrap(), 1, "the new reader overtook the writer");
        s.assert_quiescent(1);
    });
}

/// `try_write` against a table reader fails without waiting (it announces, finds the reader,
/// and ends its empty phase), racing the reader's release; `try_read_token` beside it
/// succeeds.
#[test]
fn rw_table_try_write_never_blocks() {
    model_through_table("rw_table_try_write_never_blocks", 3, || {
        let s = Shared::new();
        assert!(s.l.bias());
        let s1 = s.clone();
        let r = thread::spawn(move || s1.token_read());
        let wrote = s.l.try_write();
        if wrote {
            s.write_cs();
            // SAFETY: write-locked just above.
            unsafe { s.l.unlock_write() };
        }
        let v = r.join().unwrap();
        assert!(v <= 1);
        s.assert_quiescent(u64::from(wrote));
    });
}

/// A timed writer behind a table reader whose release races the deadline: the writer gets
/// the lock, or is a ghost whose phase the folded reader's exit ends.
#[test]
fn rw_table_timed_writer_races_the_reader() {
    model_both_outcomes("rw_table_timed_writer_races_the_reader", 3, |seen| {
        gomutex::let_deadlines_pass();
        let s = Shared::new();
        assert!(s.l.bias());
        let t = s.l.read_token();
        assert!(t.in_table());
        let (s1, seen) = (s.clone(), seen.clone());
        let w = thread::spawn(move || {
            let ok = s1.l.try_write_until(far_deadline().unwrap());
            seen.note(ok);
            if ok {
                s1.write_cs();
                // SAFETY: write-locked just above.
                unsafe { s1.l.unlock_write() };
            }
            ok
        });
        s.wait_until(|l| l.state() & WRITER_PARKED != 0);
        s.read_cs();
        // SAFETY: read-locked above, where the token says.
        unsafe { s.l.unlock_read_token(t) };
        let wrote = w.join().unwrap();
        s.assert_quiescent(u64::from(wrote));
    });
}

/// The bias taken away by a writer's idle revocation (the fourth in a row, three done first)
/// while a reader publishes: the reader either is folded or withdraws; exclusion and
/// quiescence either way.
#[test]
fn rw_table_unbias_races_a_reader() {
    model("rw_table_unbias_races_a_reader", 2, || {
        let s = Shared::new();
        assert!(s.l.bias());
        for _ in 0..3 {
            s.write();
        }
        let s1 = s.clone();
        let r = thread::spawn(move || s1.token_read());
        s.write();
        assert!(r.join().unwrap() <= 4);
        s.assert_quiescent(4);
    });
}

/// An upgradable reader upgrading past a table reader (which it folds) while a writer waits
/// for the writers' mutex: the upgrade's write excludes the reader and the writer, nobody is
/// lost asleep, the lock ends quiescent.
#[test]
fn rw_table_upgrade_folds_reader() {
    model("rw_table_upgrade_folds_reader", 2, || {
        let s = Shared::new();
        assert!(s.l.bias());
        let s1 = s.clone();
        let r = thread::spawn(move || s1.token_read());
        let s2 = s.clone();
        let w = thread::spawn(move || s2.write());
        gomutex::rwalgo::read_upgradable(&s.l);
        s.read_cs();
        gomutex::rwalgo::upgrade(&s.l);
        s.write_cs();
        // SAFETY: write-locked by the upgrade.
        unsafe { s.l.unlock_write() };
        assert!(r.join().unwrap() <= 2);
        w.join().unwrap();
        s.assert_quiescent(2);
    });
}
