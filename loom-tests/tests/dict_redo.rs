//! `ShmDict`'s redo record (`src/dict/redo.rs`) **transcribed** onto loom atomics: the commit
//! (`publish`) and the replay after a death (`replay`), over a zone of two words and a record
//! of two pairs. Keep it in step with `src/dict/redo.rs`:
//!
//! | here | `src/dict/redo.rs` |
//! |---|---|
//! | [`Zone::words`] | the zone's structure words (`Mem::ld64` / `st64`: `Relaxed`) |
//! | [`Zone::log`] / [`Zone::pairs`] | the record: `LOG` (its length) and `LOG_ENTRIES` (`(offset << 1 \| is_u64, value)` pairs) |
//! | [`Zone::commit`] | `ZoneTx::commit_here` (the pairs stored `Relaxed`) then `publish` |
//! | [`Zone::publish`] | `publish`: `LOG = n` `Release`, `fence(SeqCst)`, `apply_record`, `LOG = 0` `Release` |
//! | [`Zone::apply_record`] | `apply_record`: each pair loaded and its value stored, `Relaxed` |
//! | [`Zone::replay`] | `replay`: `LOG` loaded `Acquire`, 0 → nothing, else `apply_record` and `LOG = 0` `Release` |
//! | [`Stop`] | the crash points `DICT_LOGGED`, `DICT_COMMITTED`, `DICT_HALF_APPLIED` (reached by both callers of `apply_record`), `DICT_APPLIED` |
//!
//! Left out: the bounds checks of `replay` (a record `commit` cannot write: damage, a
//! different path), the corruption report, the lock (below).
//!
//! **Deaths.** A writer is a thread that stops at a crash point; the next holder of the lock
//! (the shard's `ShmRwLock` write side, which reports the death) runs `replay` and then reads
//! the words as a lookup does. The model gives the next holder *no* happens-before edge with
//! the dead thread: no lock release (a dead process releases nothing), no join. It starts
//! after the death by a flag outside loom's view (a `std` atomic, as the harness's ghost:
//! [`has_stopped`]). What it keeps of the death is that the record's length it reads is the
//! last one stored, as a load made after the process is gone reads it: its `LOG` load is
//! `fetch_add(0, Acquire)`, same ordering, because loom lets a plain load return an older
//! store and makes a read-modify-write read the newest. (With `load(Acquire)` the shipped
//! protocol fails here: a writer stopped after its commit point, the next holder reads the
//! initial 0, skips the replay and sees the old words. The real next holder cannot read that:
//! the liveness probe that reports the death follows it.) So the only thing that orders the
//! zone's words for the next holder is `LOG`'s own `Release`/`Acquire`: what the
//! `fence(SeqCst)` removed before the clearing store was said not to add to (commits
//! ae73025, `publish`, and 7c12754, `replay`). In the process the death also orders
//! everything the dead thread did before the next holder; the model leaves that out, so it
//! checks the orderings against a death at any point of an execution the compiler and the
//! processor may reorder as C11 allows (a `Relaxed` clearing store may be made before the
//! writes it follows, then the process dies).
//!
//! Not covered: the `fence(SeqCst)` after the commit point (it keeps an applied write from
//! being made before `LOG = n`; the next holder here reads `LOG` first and the newest one, so
//! it cannot tell; removing that fence passes these models).
//!
//! What the next holder must see: the whole update if the writer passed its commit point
//! (`LOG = n`), none of it otherwise; never one word old and the other new.
//!
//! The negative controls (a clearing store `Relaxed`, without the fence: in `publish`, in
//! `replay`) run in a child process as in `tests/negative.rs`, and loom must reject them.

use gomutex_loom_tests::{body_enabled, expect_rejected, model};
use loom::sync::atomic::{fence, AtomicU64, Ordering::*};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::{AtomicBool as StdAtomicBool, AtomicUsize as StdAtomicUsize};
use std::sync::Arc as StdArc;

/// The words' values before the update and after it.
const OLD: [u64; 2] = [1, 2];
const NEW: [u64; 2] = [10, 20];

/// Where a thread stops (dies). `None` in a model's list: it runs to the end.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stop {
    /// `DICT_LOGGED`: the pairs written, the length not stored (`publish` only).
    Logged,
    /// `DICT_COMMITTED`: the length stored, nothing applied (`publish` only).
    Committed,
    /// `DICT_HALF_APPLIED`: the first pair applied.
    HalfApplied,
    /// `DICT_APPLIED` (`publish`; in `replay` the same place, no crash point there).
    Applied,
}

/// How the clearing store `LOG = 0` is made.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Clear {
    /// As shipped: a `Release` store, no fence.
    Release,
    /// Before ae73025 / 7c12754 (the fence alone would do as well): `fence(SeqCst)`, then the
    /// store (`Relaxed` here, to show the fence orders it by itself).
    FenceThenRelaxed,
    /// The negative control: a `Relaxed` store and no fence (orders nothing).
    Relaxed,
}

/// A dictionary zone of two words and its redo record.
struct Zone {
    words: [AtomicU64; 2],
    /// `LOG`: how many pairs are committed.
    log: AtomicU64,
    /// `LOG_ENTRIES`: two pairs, `(key, value)`; a key is `word << 1 | 1` (a u64 word).
    pairs: [AtomicU64; 4],
    /// How `publish` and `replay` clear the record.
    publish_clear: Clear,
    replay_clear: Clear,
}

/// Outside loom's view (no happens-before edge): which threads have stopped.
#[derive(Default)]
struct Ghost {
    stopped: [StdAtomicBool; 2],
}

impl Zone {
    fn new(publish_clear: Clear, replay_clear: Clear) -> Self {
        Self {
            words: [AtomicU64::new(OLD[0]), AtomicU64::new(OLD[1])],
            log: AtomicU64::new(0),
            pairs: [
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
            ],
            publish_clear,
            replay_clear,
        }
    }

    /// `ZoneTx::commit_here` of the update `NEW` (both words), then `publish`. Returns whether
    /// it ran to the end (`false`: it stopped at `stop`).
    fn commit(&self, stop: Option<Stop>) -> bool {
        for (i, v) in NEW.iter().enumerate() {
            self.pairs[2 * i].store((i as u64) << 1 | 1, Relaxed);
            self.pairs[2 * i + 1].store(*v, Relaxed);
        }
        self.publish(NEW.len(), stop)
    }

    /// `publish`.
    fn publish(&self, n: usize, stop: Option<Stop>) -> bool {
        if stop == Some(Stop::Logged) {
            return false;
        }
        self.log.store(n as u64, Release);
        fence(SeqCst);
        if stop == Some(Stop::Committed) {
            return false;
        }
        if !self.apply_record(n, stop) {
            return false;
        }
        if stop == Some(Stop::Applied) {
            return false;
        }
        self.clear(self.publish_clear);
        true
    }

    /// The clearing store, `LOG = 0`.
    fn clear(&self, how: Clear) {
        match how {
            Clear::Release => self.log.store(0, Release),
            Clear::FenceThenRelaxed => {
                fence(SeqCst);
                self.log.store(0, Relaxed);
            }
            Clear::Relaxed => self.log.store(0, Relaxed),
        }
    }

    /// `apply_record`, with its `DICT_HALF_APPLIED` crash point (`i == n / 2 && i > 0`).
    fn apply_record(&self, n: usize, stop: Option<Stop>) -> bool {
        for i in 0..n {
            if i == n / 2 && i > 0 && stop == Some(Stop::HalfApplied) {
                return false;
            }
            let (k, v) = (
                self.pairs[2 * i].load(Relaxed),
                self.pairs[2 * i + 1].load(Relaxed),
            );
            assert_eq!(k & 1, 1, "the model writes u64 words only");
            self.words[(k >> 1) as usize].store(v, Relaxed);
        }
        true
    }

    /// `replay`, by a thread that may itself stop at `stop` (`HalfApplied`, `Applied`).
    /// Returns whether it ran to the end.
    fn replay(&self, stop: Option<Stop>) -> bool {
        // `load(Acquire)` in `src/dict/redo.rs`; see the file's comment for the `fetch_add`.
        let n = self.log.fetch_add(0, Acquire);
        if n == 0 {
            return true;
        }
        assert!(n <= 2, "a record commit cannot write");
        if !self.apply_record(n as usize, stop) {
            return false;
        }
        if stop == Some(Stop::Applied) {
            return false;
        }
        self.clear(self.replay_clear);
        true
    }

    /// The words as the next holder's lookups read them (`Mem::ld64`: `Relaxed`).
    fn read(&self) -> [u64; 2] {
        [self.words[0].load(Relaxed), self.words[1].load(Relaxed)]
    }
}

/// Whether the writer stopped at or after its commit point (`LOG = n` stored).
fn committed(stop: Option<Stop>) -> bool {
    stop != Some(Stop::Logged)
}

/// Whether thread `t` has stopped (or finished). The next holder runs after the death: an
/// execution in which it would start before is one the lock excludes (it waits until the
/// death is reported), so the thread does nothing in it. Loom runs each thread from its start
/// at a point it chooses, so the executions in which it starts after the death are explored,
/// with no happens-before edge (a wait on a flag would be a spin loom cannot bound).
fn has_stopped(g: &Ghost, t: usize) -> bool {
    g.stopped[t].load(std::sync::atomic::Ordering::SeqCst)
}

fn set_stopped(g: &Ghost, t: usize) {
    g.stopped[t].store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The next holder's check: the whole update or none of it, as the writer got.
fn check(seen: [u64; 2], writer_stop: Option<Stop>, who: &str) {
    let want = if committed(writer_stop) { NEW } else { OLD };
    assert_eq!(
        seen, want,
        "{who} saw the words {seen:?} after the writer stopped at {writer_stop:?}: \
         stale or mixed words (want {want:?})"
    );
}

const PUBLISH_STOPS: [Option<Stop>; 5] = [
    Some(Stop::Logged),
    Some(Stop::Committed),
    Some(Stop::HalfApplied),
    Some(Stop::Applied),
    None,
];

/// Model (1): a writer commits a two-word update and stops at each crash point (or finishes);
/// the next holder replays and reads. Returns the executions per stop.
fn publish_then_next_holder(name: &str, clear: Clear) -> usize {
    let mut total = 0;
    for stop in PUBLISH_STOPS {
        let checked = StdArc::new(StdAtomicUsize::new(0));
        let c = checked.clone();
        total += model(
            &format!("{name} (writer stops at {stop:?})"),
            3,
            move || {
                let c = c.clone();
                let z = Arc::new(Zone::new(clear, Clear::Release));
                let g = Arc::new(Ghost::default());
                let (z1, g1) = (z.clone(), g.clone());
                let w = thread::spawn(move || {
                    let finished = z1.commit(stop);
                    assert_eq!(finished, stop.is_none());
                    set_stopped(&g1, 0);
                });
                let (z2, g2) = (z.clone(), g.clone());
                let next = thread::spawn(move || {
                    if !has_stopped(&g2, 0) {
                        return;
                    }
                    z2.replay(None);
                    check(z2.read(), stop, "the next holder");
                    c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                });
                w.join().unwrap();
                next.join().unwrap();
            },
        );
        assert!(checked.load(std::sync::atomic::Ordering::Relaxed) > 0);
    }
    total
}

/// Model (2): a writer stops after its commit point; a first replayer stops at each point of
/// `replay` (or finishes); a second one replays and reads.
fn replay_then_next_holder(name: &str, replay_clear: Clear) -> usize {
    let mut total = 0;
    for wstop in [Stop::Committed, Stop::HalfApplied, Stop::Applied] {
        for rstop in [Some(Stop::HalfApplied), Some(Stop::Applied), None] {
            let checked = StdArc::new(StdAtomicUsize::new(0));
            let c0 = checked.clone();
            total += model(
                &format!("{name} (writer stops at {wstop:?}, first replayer at {rstop:?})"),
                3,
                move || {
                    let checked = &c0;
                    let z = Arc::new(Zone::new(Clear::Release, replay_clear));
                    let g = Arc::new(Ghost::default());
                    let (z1, g1) = (z.clone(), g.clone());
                    let w = thread::spawn(move || {
                        assert!(!z1.commit(Some(wstop)));
                        set_stopped(&g1, 0);
                    });
                    let (z2, g2) = (z.clone(), g.clone());
                    let r1 = thread::spawn(move || {
                        if !has_stopped(&g2, 0) {
                            return;
                        }
                        let finished = z2.replay(rstop);
                        assert_eq!(finished, rstop.is_none());
                        if finished {
                            check(z2.read(), Some(wstop), "the first replayer");
                        }
                        set_stopped(&g2, 1);
                    });
                    let (z3, g3, c) = (z.clone(), g.clone(), checked.clone());
                    let r2 = thread::spawn(move || {
                        // After the first replayer, which ran after the writer.
                        if !has_stopped(&g3, 1) {
                            return;
                        }
                        z3.replay(None);
                        check(z3.read(), Some(wstop), "the second replayer");
                        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    });
                    for t in [w, r1, r2] {
                        t.join().unwrap();
                    }
                },
            );
            assert!(checked.load(std::sync::atomic::Ordering::Relaxed) > 0);
        }
    }
    total
}

/// (1) as shipped: the next holder sees the whole update or none of it.
#[test]
fn dict_redo_publish_then_next_holder() {
    publish_then_next_holder("dict_redo_publish_then_next_holder", Clear::Release);
}

/// (1) with the fence before a `Relaxed` clear instead of the `Release` store: passes too,
/// so either one orders the applied writes before the clear, and the two together are one
/// more than needed.
#[test]
fn dict_redo_publish_fence_alone_orders() {
    publish_then_next_holder(
        "dict_redo_publish_fence_alone_orders",
        Clear::FenceThenRelaxed,
    );
}

/// (2) as shipped: a replay's clear orders its writes for the holder after it.
#[test]
fn dict_redo_replay_then_next_holder() {
    replay_then_next_holder("dict_redo_replay_then_next_holder", Clear::Release);
}

// ---------------------------------------------------------------------------------------------
// Negative controls (see `tests/negative.rs` for why each body runs in a child process)

/// `publish` clearing the record with a `Relaxed` store and no fence: the next holder reads
/// the clear, skips the replay, and reads a word the writer's update has not reached it with.
#[test]
fn negative_dict_redo_relaxed_publish_clear() {
    expect_rejected(
        "body_dict_redo_relaxed_publish_clear",
        &["stale or mixed words"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_dict_redo_relaxed_publish_clear in a child process"]
fn body_dict_redo_relaxed_publish_clear() {
    if !body_enabled() {
        return;
    }
    publish_then_next_holder("body_dict_redo_relaxed_publish_clear", Clear::Relaxed);
}

/// `replay` clearing the record with a `Relaxed` store and no fence: the holder after the
/// replayer reads the clear and misses the replayed words.
#[test]
fn negative_dict_redo_relaxed_replay_clear() {
    expect_rejected(
        "body_dict_redo_relaxed_replay_clear",
        &["stale or mixed words"],
    );
}

#[test]
#[ignore = "negative-control body, run by negative_dict_redo_relaxed_replay_clear in a child process"]
fn body_dict_redo_relaxed_replay_clear() {
    if !body_enabled() {
        return;
    }
    replay_then_next_holder("body_dict_redo_relaxed_replay_clear", Clear::Relaxed);
}
