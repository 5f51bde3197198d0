//! Models of the protocol as shipped.

use super::*;

/// Readers overlap, in different slots and in one slot: each waits, inside, until both are
/// inside (a lock that serialised them would deadlock, which loom reports).
#[test]
fn shm_rw_readers_overlap() {
    for slots in [[0, 1], [1, 1]] {
        model(&format!("shm_rw_readers_overlap {slots:?}"), 3, move || {
            let rw = Rw::new(Faults::default());
            let inside = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
            let ts: Vec<_> = slots
                .into_iter()
                .map(|me| {
                    let (rw, inside) = (rw.clone(), inside.clone());
                    thread::spawn(move || {
                        assert_eq!(rw.read_as(me, false), Read::Held);
                        rw.read_cs();
                        inside.fetch_add(1, SeqCst);
                        while inside.load(SeqCst) < 2 {
                            thread::yield_now();
                        }
                        rw.read_unlock(me);
                    })
                })
                .collect();
            for t in ts {
                t.join().unwrap();
            }
            rw.assert_quiescent(0, 0);
        });
    }
}

/// A writer excludes readers: two readers (different slots, then one slot) and a writer; every
/// read sees 0 or 1, every access is ordered with the write, nobody is left asleep.
#[test]
fn shm_rw_writer_excludes_readers() {
    for (slots, bound) in [([0, 1], 3), ([2, 2], 2)] {
        let name = format!("shm_rw_writer_excludes_readers {slots:?}");
        model(&name, bound, move || {
            let rw = Rw::new(Faults::default());
            let rs: Vec<_> = slots.iter().map(|&me| spawn_reader(&rw, me)).collect();
            rw.write_once();
            for v in join_values(rs) {
                assert!(v <= 1);
            }
            rw.assert_quiescent(1, 1);
        });
    }
}

/// A writer excludes readers and writers: one reader and two writers.
#[test]
fn shm_rw_writers_exclude_each_other() {
    model("shm_rw_writers_exclude_each_other", 3, || {
        let rw = Rw::new(Faults::default());
        let ws = [spawn_writer(&rw), spawn_writer(&rw)];
        let v = rw.read(0);
        assert!(v <= 2);
        for w in ws {
            w.join().unwrap();
        }
        rw.assert_quiescent(2, 2);
    });
}

/// Writer preference: once the writer has announced itself (`PENDING`) while a reader is
/// inside, `try_read` fails (in another slot and in the reader's own) and a new reader waits
/// for the writer, seeing its write.
#[test]
fn shm_rw_writer_preference() {
    model("shm_rw_writer_preference", 3, || {
        let rw = Rw::new(Faults::default());
        assert_eq!(rw.read_as(0, false), Read::Held);
        let w = spawn_writer(&rw);
        rw.wait_until(|s, _, _| s & PENDING != 0);
        assert_eq!(
            rw.read_as(1, true),
            Read::WouldBlock,
            "try_read with PENDING"
        );
        assert_eq!(
            rw.read_as(0, true),
            Read::WouldBlock,
            "try_read with PENDING"
        );
        let r = spawn_reader(&rw, 1);
        rw.read_cs();
        rw.read_unlock(0);
        w.join().unwrap();
        assert_eq!(
            r.join().unwrap(),
            1,
            "a new reader overtook the pending writer"
        );
        rw.assert_quiescent(1, 1);
    });
}

/// Go's batch order: a reader that queued behind writer 1 is admitted before writer 2 (which
/// may already wait for the writers' mutex) writes, and sees writer 1's write only.
#[test]
fn shm_rw_queued_reader_before_next_writer() {
    model("shm_rw_queued_reader_before_next_writer", 2, || {
        let rw = Rw::new(Faults::default());
        let r_done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        assert_eq!(rw.read_as(0, false), Read::Held);
        let w1 = spawn_writer(&rw);
        rw.wait_until(|s, _, _| s & PENDING != 0);
        let (rw2, d) = (rw.clone(), r_done.clone());
        let r = thread::spawn(move || {
            assert_eq!(rw2.read_as(1, false), Read::Held);
            let v = rw2.read_cs();
            d.store(true, SeqCst);
            rw2.read_unlock(1);
            v
        });
        // The reader is queued in writer 1's phase.
        rw.wait_until(|s, _, w| s & RWAIT != 0 && w[1] == 1);
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
        w1.join().unwrap();
        w2.join().unwrap();
        assert_eq!(r.join().unwrap(), 1);
        rw.assert_quiescent(2, 2);
    });
}

/// `try_read` / `try_write` never block: against a writer holding the lock throughout (the
/// main thread), both fail and return; a blocking reader waits and sees the write. Then against
/// a reader inside: `try_write` fails (leaving no phase open), `try_read` succeeds.
#[test]
fn shm_rw_try_never_blocks() {
    model("shm_rw_try_never_blocks_writer_inside", 3, || {
        let rw = Rw::new(Faults::default());
        let g = rw.write();
        let rw1 = rw.clone();
        let t = thread::spawn(move || {
            let r = rw1.read_as(1, true);
            let w = rw1.try_write().is_some();
            (r, w)
        });
        let reader = spawn_reader(&rw, 2);
        assert_eq!(t.join().unwrap(), (Read::WouldBlock, false));
        rw.write_cs();
        rw.write_unlock(g);
        assert_eq!(reader.join().unwrap(), 1);
        rw.assert_quiescent(1, 1);
    });
    model("shm_rw_try_never_blocks_reader_inside", 3, || {
        let rw = Rw::new(Faults::default());
        assert_eq!(rw.read_as(0, false), Read::Held);
        let rw1 = rw.clone();
        let t = thread::spawn(move || {
            let w = rw1.try_write().is_some();
            let r = rw1.read_as(1, true);
            if r == Read::Held {
                rw1.read_cs();
                rw1.read_unlock(1);
            }
            (w, r)
        });
        let w = spawn_writer(&rw);
        rw.read_cs();
        let (tw, tr) = t.join().unwrap();
        assert!(!tw, "try_write with a reader inside");
        // `try_read` may meet the blocking writer's `PENDING` (or try_write's, briefly).
        assert!(tr == Read::Held || tr == Read::WouldBlock);
        rw.read_unlock(0);
        w.join().unwrap();
        let phases = rw.state.load(SeqCst) / PHASE;
        assert!(phases == 1 || phases == 2, "one phase per write attempt");
        rw.assert_quiescent(phases, 1);
    });
}

/// The readers' map's publication race: slot 0 has published (map 0b001); readers in slots 2
/// and 1 (never published, so the map gains their bits in either order while the writer
/// scans) race a writer that scans only the map's slots; exclusion holds, and the writer sees
/// each reader either way.
#[test]
fn shm_rw_map_publication_race() {
    model("shm_rw_map_publication_race", 3, || {
        let rw = Rw::new(Faults::default());
        assert_eq!(rw.read(0), 0);
        let rs = [spawn_reader(&rw, 2), spawn_reader(&rw, 1)];
        rw.write_once();
        for v in join_values(rs) {
            assert!(v <= 1);
        }
        assert_eq!(rw.map.load(SeqCst), 0b111);
        rw.assert_quiescent(1, 1);
    });
}

/// A reader killed at each crash point (a thread that stops there), a supervisor that after it
/// stopped zeroes its counts as recovery does (`force_unlock`), and two writers, the second
/// possibly queued behind readers of the first's phase: every model terminates (the
/// supervisor's `notify_writer` reaches a writer waiting for the dead reader's counts) and
/// ends quiescent.
#[test]
fn shm_rw_dead_reader_recovered() {
    for at in [
        Crash::ReadCounted,
        Crash::Queued,
        Crash::Admitted,
        Crash::Holding,
    ] {
        let died = std::sync::Arc::new(StdAtomicUsize::new(0));
        let d0 = died.clone();
        model(
            &format!("shm_rw_dead_reader_recovered {at:?}"),
            2,
            move || {
                let rw = Rw::build(Faults::default(), Some((1, at)), Default::default());
                let g = rw.write();
                let (rw1, d1) = (rw.clone(), d0.clone());
                let dead = thread::spawn(move || match rw1.read_as(1, false) {
                    Read::Died => {
                        d1.fetch_add(1, Relaxed);
                    }
                    Read::Held => {
                        rw1.read_cs();
                        rw1.read_unlock(1);
                    }
                    Read::WouldBlock => unreachable!(),
                });
                let rw2 = rw.clone();
                let supervisor = thread::spawn(move || {
                    dead.join().unwrap();
                    rw2.force_unlock_dead_reader(1);
                });
                let w2 = spawn_writer(&rw);
                rw.write_cs();
                rw.write_unlock(g);
                supervisor.join().unwrap();
                w2.join().unwrap();
                rw.assert_quiescent(2, 2);
            },
        );
        assert!(
            died.load(Relaxed) > 0,
            "crash point {at:?} never reached in any execution"
        );
    }
}

/// `downgrade`: a writer writes and downgrades (slot 0) while a reader (slot 1) and a second
/// writer race it. After the downgrade the first writer still reads its own write (no writer
/// came between; loom checks every access to the value against every other), the reader
/// comes in whenever, the second writer waits for the downgraded read, and all ends quiescent.
#[test]
fn shm_rw_downgrade() {
    model("shm_rw_downgrade", 3, || downgrade_shape(Faults::default()));
}

pub(super) fn downgrade_shape(f: Faults) {
    let rw = Rw::new(f);
    let r = spawn_reader(&rw, 1);
    let w2 = spawn_writer(&rw);
    let g = rw.write();
    rw.write_cs();
    let mine = rw.read_cs();
    rw.downgrade(g, 0);
    assert_eq!(
        rw.read_cs(),
        mine,
        "a writer came between the downgrade and the read"
    );
    rw.read_unlock(0);
    w2.join().unwrap();
    assert!(r.join().unwrap() <= 2);
    rw.assert_quiescent(2, 2);
}

/// `wait_counts` without the re-check after `WSLEEP` still loses no wake-up: the wake-up
/// sequence, loaded before the first look at the counts, covers the reader that left without
/// seeing `WSLEEP` (its bump precedes the writer's sleep, which then returns at once). The
/// re-check saves a futex call, not a wake-up. (Loading the sequence late instead loses one:
/// `negative_shm_rw_lost_wakeup`.)
#[test]
fn shm_rw_recheck_after_wsleep_is_redundant() {
    model("shm_rw_recheck_after_wsleep_is_redundant", 3, || {
        lost_wakeup_shape(Faults {
            no_recheck: true,
            ..Faults::default()
        })
    });
}

/// One reader inside, a writer waiting for it to leave, a second reader arriving (queued
/// behind the writer): the shape for the wake-up controls.
pub(super) fn lost_wakeup_shape(f: Faults) {
    let rw = Rw::new(f);
    let r = spawn_reader(&rw, 1);
    let r2 = spawn_reader(&rw, 2);
    rw.write_once();
    for v in join_values([r, r2]) {
        assert!(v <= 1);
    }
    rw.assert_quiescent(1, 1);
}

/// `wait_phase_end` sleeps on the state last seen. Sleeping on the state seen when queueing
/// (fault (f), as an earlier version shipped) busy-waits: a reader that queues after the
/// writer set `PENDING` and before it set `WSLEEP` (it found a reader inside) has `s` without
/// `WSLEEP`; from then on the word holds `s | WSLEEP` until the phase ends, so every
/// `futex_wait(state, s)` returns `EAGAIN` at once and the reader spins through the rest of the
/// writer's wait and its critical section. The model reaches that with the fault (some
/// execution is about to sleep on a value the word no longer holds) and never without it.
#[test]
fn shm_rw_queued_reader_busy_wait() {
    for (fixed, name) in [
        (
            false,
            "shm_rw_queued_reader_busy_wait (stale expected value, fault f)",
        ),
        (true, "shm_rw_queued_reader_busy_wait (as shipped)"),
    ] {
        let spins = std::sync::Arc::new(StdAtomicUsize::new(0));
        let s0 = spins.clone();
        model(name, 2, move || {
            let f = Faults {
                stale_expected: !fixed,
                ..Faults::default()
            };
            let rw = Rw::build(f, None, s0.clone());
            assert_eq!(rw.read_as(0, false), Read::Held);
            let w = spawn_writer(&rw);
            rw.wait_until(|s, _, _| s & PENDING != 0);
            let r = spawn_reader(&rw, 1);
            // The writer waits for us (`WSLEEP`) and the reader is queued.
            rw.wait_until(|s, _, w| s & WSLEEP != 0 && w[1] == 1);
            rw.read_cs();
            rw.read_unlock(0);
            w.join().unwrap();
            assert!(r.join().unwrap() <= 1);
            rw.assert_quiescent(1, 1);
        });
        let n = spins.load(Relaxed);
        eprintln!("[loom] {name}: {n} sleeps on a stale value");
        if fixed {
            assert_eq!(n, 0, "wait_phase_end as shipped busy-waits");
        } else {
            assert!(n > 0, "the busy wait was not reached with fault (f)");
        }
    }
}

/// Slots 0 and 1 read (two bits in the readers' map: `tidy` leaves a map of one bit alone),
/// then slot 1's process left (its slot free); a newcomer claims slot 1 and reads while the
/// main thread writes twice, and each write's `tidy` takes free slots out of the map. The first write may find slot 1 free and clear
/// its bit just as the newcomer claims it: the second look puts it back, so the second write
/// still sees the newcomer (exclusion), and the newcomer's bit is in the map at the end.
pub(crate) fn tidy_shape(f: Faults) {
    let rw = Rw::new(f);
    assert_eq!(rw.read(0), 0);
    assert_eq!(rw.read(1), 0);
    rw.leave(1);
    let newcomer = {
        let rw = rw.clone();
        thread::spawn(move || {
            rw.join(1);
            rw.read(1)
        })
    };
    rw.write_once();
    rw.write_once();
    assert!(newcomer.join().unwrap() <= 2);
    assert_eq!(rw.map.load(SeqCst), 0b11, "the newcomer's bit is gone");
    rw.assert_quiescent(2, 2);
}

#[test]
fn shm_rw_tidy_races_a_newcomer() {
    model("shm_rw_tidy_races_a_newcomer", 3, || {
        tidy_shape(Faults::default())
    });
}
