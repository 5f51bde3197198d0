//! Crash points: the places where a test makes a process die (`SIGKILL`) or stop (`SIGSTOP`)
//! in windows too narrow for random kills to hit. One list, one numbering, for the
//! shared-memory lock ([`crate::shm`]), the dictionary ([`crate::dict`]), the upstream zone
//! ([`crate::upstream`]) and [`crate::shm::ShmSnapshot`].
//!
//! Not part of the API. Armed only with the test-only `__crash-points` feature (this crate's
//! tests enable it), through `gomutex::__crash::crash_at` and `stop_at`; without the feature
//! [`point`] compiles to nothing. A point costs one relaxed load, on slow paths only (and on
//! a lookup's path, `DICT_READING`: in test builds alone).

// The shared-memory lock: its journal (`shm/journal.rs`).
/// Journal lock held, redo log committed, state word not changed yet.
pub const LOG_COMMITTED: u32 = 1;
/// Journal lock held, state word changed, accounting not applied yet.
pub const WORD_CHANGED: u32 = 2;
/// Journal lock held, everything applied, log not cleared yet.
pub const APPLIED: u32 = 3;
// Its waiter queue (`shm/queue.rs`) and recovery (`shm/recovery.rs`).
/// Normal-mode unlock: waiter removed and `WOKEN` set, wake-up not delivered yet.
pub const OWES_WAKEUP: u32 = 4;
/// Starving unlock: lock released, hand-off not delivered yet.
pub const OWES_HANDOFF: u32 = 5;
/// A sleeper picked up its token (normal: owns `WOKEN`; hand-off: owns the lock-to-be).
pub const TOKEN_TAKEN: u32 = 6;
/// A handle is being dropped: its participant slot found idle (journal lock released),
/// not freed yet.
pub const RELEASING_SELF: u32 = 7;
// `ShmRwLock` (`shm/rwlock/`).
/// `ShmRwLock` read lock: this process's read count raised, `rw_state` not looked at yet.
pub const RW_READ_COUNTED: u32 = 8;
/// `ShmRwLock` reader queued behind a writer (counted, `RWAIT` set), not asleep yet.
pub const RW_QUEUED: u32 = 9;
/// `ShmRwLock` writer: `PENDING` set, not waiting for the readers yet.
pub const RW_PENDING: u32 = 10;
/// `ShmRwLock` write unlock: the phase ended, the writers' mutex not unlocked yet.
pub const RW_UNLOCKING: u32 = 11;
/// `ShmRwLock` downgrade: the read count raised, the write phase not ended yet (the writers'
/// mutex held, `PENDING` set).
pub const RW_DOWNGRADING: u32 = 12;
/// `ShmMutex::lock`: the fast path failed, Go's slow path not begun.
pub const CONTENDED: u32 = 13;

// The dictionary (`dict/`): its transactions (`dict/redo.rs`) and operations (`dict/ops.rs`).
/// A new entry is written in free memory; its transaction is not committed.
pub const DICT_ENTRY_WRITTEN: u32 = 101;
/// The redo record's pairs are written; the commit store is not made.
pub const DICT_LOGGED: u32 = 102;
/// Committed; nothing applied.
pub const DICT_COMMITTED: u32 = 103;
/// Committed; half of the writes applied.
pub const DICT_HALF_APPLIED: u32 = 104;
/// Everything applied; the record not cleared.
pub const DICT_APPLIED: u32 = 105;
/// Between two transactions of one operation (an eviction before a store, an entry of
/// `flush_expired`).
pub const DICT_BETWEEN: u32 = 106;
/// An update of the same size is planned in place (its new words in the transaction); not
/// committed.
pub const DICT_IN_PLACE: u32 = 107;
/// A lookup holds its shard's read side (its process's read count raised); it has read
/// nothing yet.
pub const DICT_READING: u32 = 108;
/// Between two slices of a pass over the dictionary (`keys`, `flush_expired`, `flush_all`):
/// one slice done and its shard's lock released, the next not begun.
pub const DICT_SLICE: u32 = 109;

// The upstream zone (`upstream/`).
/// A pick: the spare copy written and this process's row counted, the epoch not committed.
pub const PICK_WRITTEN: u32 = 201;
/// A pick committed, the zone lock still held.
pub const PICK_COMMITTED: u32 = 202;
/// A failure report: the spare copy written and the row's count lowered, not committed.
pub const REPORT_WRITTEN: u32 = 203;
/// A row claimed (its identity stored), its pidfs inode not yet.
pub const ROW_CLAIMED: u32 = 204;
/// A row being given back: the first peer's count zeroed, the rest and the identity not.
pub const ROW_ZEROING: u32 = 205;

// `ShmSnapshot` (`shm/snapshot.rs`).
/// A publish: the inactive copy written and sealed, the version not stored.
pub const SNAPSHOT_WRITTEN: u32 = 301;
/// A read: the copy made, its sequence not checked again.
pub const SNAPSHOT_COPIED: u32 = 302;

/// A crash point armed in this process (0 = none).
#[cfg(feature = "__crash-points")]
static ARMED: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// Added to a crash point: stop (`SIGSTOP`) there once instead of dying.
#[cfg(feature = "__crash-points")]
const STOP: u32 = 1 << 16;

/// Testing only: make this process `SIGKILL` itself the next time it reaches crash point `p`
/// (one of the constants above; 0 disarms).
#[cfg(feature = "__crash-points")]
pub fn crash_at(p: u32) {
    ARMED.store(p, core::sync::atomic::Ordering::Relaxed);
}

/// Testing only: like [`crash_at`], but the process stops itself (`SIGSTOP`) at `p`, once, and
/// goes on when continued.
#[cfg(feature = "__crash-points")]
pub fn stop_at(p: u32) {
    ARMED.store(p | STOP, core::sync::atomic::Ordering::Relaxed);
}

/// Die (or stop) here if point `p` is armed (one relaxed load; on slow paths, and a lookup's).
#[cfg(feature = "__crash-points")]
#[inline]
pub(crate) fn point(p: u32) {
    use core::sync::atomic::Ordering::Relaxed;
    let armed = ARMED.load(Relaxed);
    if armed == p {
        // SAFETY: raising a signal at ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    } else if armed == p | STOP {
        // Stop instead, once (tests of stalled processes): disarm, so it goes on when
        // continued.
        ARMED.store(0, Relaxed);
        // SAFETY: raising a signal at ourselves.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
}

/// Crash points are compiled out: nothing.
#[cfg(not(feature = "__crash-points"))]
#[inline(always)]
pub(crate) fn point(_p: u32) {}
