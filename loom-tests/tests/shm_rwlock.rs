//! `gomutex::shm::ShmRwLock` (`src/shm/rwlock/`) **transcribed** onto loom atomics.
//!
//! The shipped lock runs on futexes in shared memory, which loom cannot run, so this file
//! re-states its protocol operation for operation, same words, same orderings, same order.
//! Keep it in step with `src/shm/rwlock/`: each piece in `shm_rwlock/protocol.rs` mirrors,
//! line by line in order,
//!
//! | here | `src/shm/rwlock/` |
//! |---|---|
//! | `PENDING`, `RWAIT`, `WSLEEP`, `PHASE` | the constants of the same names |
//! | [`Rw`]`::state` / `map` / `wake` | `ShmRwLock::state()` (header `rw_state`), `map()` (`ctl(MAP)`; the models have < 64 slots, so no `ctl(HWM)`), `ctl(WAKE)` |
//! | `Rw::ident[i]`, `Rw::leave` / `join` | `ParticipantSlot::ident`: a slot freed, a newcomer's `claim_participant` |
//! | `Rw::reads[i]` / `waiting[i]` | `ShmRwLock::reads(i)` / `waiting(i)` (`ParticipantSlot::rw_reads` / `rw_waiting`) |
//! | `Rw::published[i]` | `ShmRwLock::published` of participant `i`'s handle (threads of one process share it) |
//! | `Rw::writers` ([`WritersMutex`]) | the writers' `ShmMutex` (Go's mutex algorithm, modelled in `shipped.rs` and `algo.rs`) |
//! | [`Futex`] | `sys::futex_wait` / `sys::futex_wake` |
//! | `Rw::any_reader`, `Rw::counted` | `ShmRwLock::any_reader`, `ShmRwLock::counted` |
//! | `Rw::publish` | `ShmRwLock::publish` |
//! | `Rw::tidy` | `ShmRwLock::tidy` |
//! | `Rw::notify_writer` | `ShmRwLock::notify_writer` |
//! | `Rw::read_as` | `ShmRwLock::read_as` (`read`: `once = false`; `try_read`: `once = true`) |
//! | `Rw::wait_phase_end` | `ShmRwLock::wait_phase_end` |
//! | `Rw::read_unlock` | `ShmRwLock::read_unlock` (`ShmRwLockReadGuard::drop`) |
//! | `Rw::write` / `try_write` | `ShmRwLock::write` / `try_write` (through `write_by`) |
//! | `Rw::write_phase` | `ShmRwLock::write_phase` |
//! | `Rw::wait_counts` | `ShmRwLock::wait_counts` |
//! | `Rw::end_phase` | `ShmRwLock::end_phase` (`write_unlock`: `ShmRwLockWriteGuard::drop`) |
//! | `Rw::end_orphan_phase` | `ShmRwLock::end_orphan_phase` |
//! | `Rw::downgrade` | `ShmRwLockWriteGuard::downgrade` |
//! | `Rw::force_unlock_dead_reader` | `ShmRwLock::force_unlock` of a dead reader: `Recovery::recover_locked`'s zeroing, then `end_orphan_phase`, `notify_writer` |
//!
//! What is left out, and why:
//!
//! * **Time.** Every wait is untimed: no deadline, and no `TICK` (the 10 ms look for dead
//!   processes, `reap_dead`, and the queued readers' `end_orphan_phase`). In the shipped lock a
//!   lost wake-up costs a 10 ms stall; here it is a sleep nobody ends, which loom reports as a
//!   deadlock. So "every model terminates" is the no-lost-wake-up check.
//! * **Deaths** other than a reader's: a dead reader is a thread that stops at a crash point
//!   (`sys::crash_point` and one more) and a supervisor that, after it stopped, zeroes its counts
//!   as recovery does (`shm_rw_dead_reader_recovered`). A dead *writer* would need the
//!   `ShmMutex` recovery, which a loom `Mutex` cannot do; `write_phase`'s "a dead writer's phase"
//!   branch and `end_orphan_phase`'s `probe` are transcribed but never taken here.
//! * `end_orphan_phase`'s pre-check of the mutex word (`low(w) & LOCKED`): an early return that
//!   `try_lock` would reach anyway (it fails while the mutex is held).
//! * `OwnerDied` / `Poisoned` (flags read after the lock is taken: no part of the protocol).
//! * Spurious futex wake-ups: every wait re-checks in a loop, so they only add executions.
//!
//! Loom's `SeqCst`: a `SeqCst` load never returns a store older than a newer `SeqCst` store,
//! but an atomic's *initial* value counts as a `Release` store, so a load could still return
//! it after a newer `SeqCst` store (tokio-rs/loom#180, the store-buffer shape). The protocol's
//! fast path is exactly that shape (the reader's count then the state, the writer's state then
//! the counts), so [`Rw::new`] stores every `SeqCst` word's 0 again with `SeqCst` before the
//! model's threads start; loom then runs the `SeqCst` words sequentially consistently, and the
//! `Relaxed` control (`negative_shm_rw_relaxed_reader`) shows what a weaker ordering breaks.
//!
//! A loom `UnsafeCell` stands for the value: readers read it, writers increment it, so loom
//! reports any two accesses not ordered by happens-before (exclusion, and that each section
//! sees the previous writer's write). Every model ends quiescent: no count, no flag (only the
//! phase, one per write phase), nobody asleep.
//!
//! Negative controls (each a deliberately broken variant, run in a child process as in
//! `tests/negative.rs`, because a loom deadlock aborts the process) prove the models can fail.

use gomutex_loom_tests::{body_enabled, expect_rejected, model};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering::*};

#[path = "shm_rwlock/protocol.rs"]
mod protocol;
#[path = "shm_rwlock/shipped.rs"]
mod shipped;
use protocol::*;
use shipped::{downgrade_shape, lost_wakeup_shape, tidy_shape};

// ---------------------------------------------------------------------------------------------
// Negative controls (see `tests/negative.rs` for why each body runs in a child process)

/// One reader (slot 1, fresh) and a writer (the main thread).
fn reader_writer_shape(f: Faults) {
    let rw = Rw::new(f);
    let r = spawn_reader(&rw, 1);
    rw.write_once();
    assert!(r.join().unwrap() <= 1);
    rw.assert_quiescent(1, 1);
}

/// The controls' baseline: their shapes with the protocol as shipped pass.
#[test]
fn baseline_of_shm_rw_negative_controls_passes() {
    model("baseline_shm_rw_reader_writer", 3, || {
        reader_writer_shape(Faults::default())
    });
    model("baseline_shm_rw_lost_wakeup", 3, || {
        lost_wakeup_shape(Faults::default())
    });
}

/// (a) The reader looks at `PENDING` before it counts itself: the writer can set `PENDING` and
/// find the count 0 between the two, and both are inside.
#[test]
fn negative_shm_rw_check_before_count() {
    expect_rejected("body_shm_rw_check_before_count", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_check_before_count in a child process"]
fn body_shm_rw_check_before_count() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_check_before_count", 2, || {
        reader_writer_shape(Faults {
            check_before_count: true,
            ..Faults::default()
        })
    });
}

/// (b) Queued readers not counted in `rw_waiting`: writer 2 does not wait for the reader
/// admitted by writer 1's phase end, which enters without looking at `PENDING` again, so it
/// is inside with writer 2 (or writer 2 writes first).
#[test]
fn negative_shm_rw_uncounted_queue() {
    expect_rejected(
        "body_shm_rw_uncounted_queue",
        &["Causality violation", "overtook"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_uncounted_queue in a child process"]
fn body_shm_rw_uncounted_queue() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_uncounted_queue", 2, || {
        let rw = Rw::new(Faults {
            uncounted_queue: true,
            ..Faults::default()
        });
        let r_done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        assert_eq!(rw.read_as(0, false), Read::Held);
        let w1 = spawn_writer(&rw);
        rw.wait_until(|s, _, _| s & PENDING != 0);
        let (rw2, d) = (rw.clone(), r_done.clone());
        let r = thread::spawn(move || {
            assert_eq!(rw2.read_as(1, false), Read::Held);
            rw2.read_cs();
            d.store(true, SeqCst);
            rw2.read_unlock(1);
        });
        rw.wait_until(|s, _, _| s & RWAIT != 0);
        let (rw3, d) = (rw.clone(), r_done.clone());
        let w2 = thread::spawn(move || {
            let g = rw3.write();
            assert!(
                d.load(SeqCst),
                "writer 2 overtook a reader queued behind writer 1"
            );
            rw3.write_cs();
            rw3.write_unlock(g);
        });
        rw.read_cs();
        rw.read_unlock(0);
        for t in [w1, w2, r] {
            t.join().unwrap();
        }
    });
}

/// (c) `wait_counts` loads the wake-up sequence just before it sleeps (after the re-check)
/// instead of before its first look at the counts: the reader leaving after the re-check sees
/// `WSLEEP` and wakes nobody (the writer is not asleep yet), and the writer then sleeps on a
/// sequence that already counts the reader's bump: asleep forever. (Dropping the re-check after
/// `WSLEEP` instead loses nothing: `shm_rw_recheck_after_wsleep_is_redundant`.)
#[test]
fn negative_shm_rw_lost_wakeup() {
    expect_rejected("body_shm_rw_lost_wakeup", &["deadlock"]);
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_lost_wakeup in a child process"]
fn body_shm_rw_lost_wakeup() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_lost_wakeup", 3, || {
        lost_wakeup_shape(Faults {
            late_seq: true,
            ..Faults::default()
        })
    });
}

/// (d) `Relaxed` on the reader's count increment and state load: the store-buffer shape is no
/// longer ordered (both see the other's old value), and the reader's load no longer acquires
/// the previous phase's end.
#[test]
fn negative_shm_rw_relaxed_reader() {
    expect_rejected("body_shm_rw_relaxed_reader", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_relaxed_reader in a child process"]
fn body_shm_rw_relaxed_reader() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_relaxed_reader", 2, || {
        reader_writer_shape(Faults {
            relaxed_reader: true,
            ..Faults::default()
        })
    });
}

/// (e) The reader publishes its slot in the readers' map only once it is in: a writer that
/// loaded the map before does not scan the slot and enters beside the reader.
#[test]
fn negative_shm_rw_publish_late() {
    expect_rejected("body_shm_rw_publish_late", &["Causality violation"]);
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_publish_late in a child process"]
fn body_shm_rw_publish_late() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_publish_late", 2, || {
        reader_writer_shape(Faults {
            publish_late: true,
            ..Faults::default()
        })
    });
}

/// (g) `downgrade` unlocks first and counts itself as a reader after: the second writer can
/// take the writers' mutex, find no reader and write while the downgraded reader reads.
#[test]
fn negative_shm_rw_downgrade_late() {
    expect_rejected(
        "body_shm_rw_downgrade_late",
        &["Causality violation", "came between"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_downgrade_late in a child process"]
fn body_shm_rw_downgrade_late() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_downgrade_late", 2, || {
        downgrade_shape(Faults {
            downgrade_late: true,
            ..Faults::default()
        })
    });
}

/// (h) `tidy` clears a free slot's bit without looking at the slot again: a newcomer that
/// claimed the slot and published (its bit was still set) in between loses its bit, and the
/// next writer enters beside its read.
#[test]
fn negative_shm_rw_tidy_no_recheck() {
    expect_rejected(
        "body_shm_rw_tidy_no_recheck",
        &["Causality violation", "the newcomer's bit is gone"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_shm_rw_tidy_no_recheck in a child process"]
fn body_shm_rw_tidy_no_recheck() {
    if !body_enabled() {
        return;
    }
    model("body_shm_rw_tidy_no_recheck", 3, || {
        tidy_shape(Faults {
            tidy_no_recheck: true,
            ..Faults::default()
        })
    });
}
