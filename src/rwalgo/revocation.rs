//! A writer's revocation of the readers' table: each reader of the lock in a slot is watched
//! for the spin rounds, then folded into the word's count (module docs of `rwalgo`).

use super::*;

/// Take every read lock the table holds of this lock into the word's count (the writer has
/// announced [`PHASE`] and fenced, so no reader enters the table any more), and adapt the
/// bias. Returns the read locks taken over.
#[cold]
pub(super) fn revoke<P: RwParts>(p: &P) -> u64 {
    let w = p.word();
    let key = p.key() as u64;
    let relaxed = P::BIAS_FAULT == BiasFault::Relaxed;
    let (mut seen, mut folded, mut iter) = (0u64, 0u64, 0u32);
    rwtable::scan(key, relaxed, |i| {
        seen += 1;
        // BRAVO's revocation first: a reader usually leaves soon, so watch its slot a few spin
        // rounds (all slots together), a line only it writes. Folding it instead would make
        // it leave through the word: one more write of the line every waiter reads again.
        while spin::can_spin(iter, false) {
            iter += 1;
            for _ in 0..SLOT_CHECKS {
                crate::sync::spin_loop();
                if !rwtable::names(i, key, relaxed) {
                    return;
                }
            }
        }
        if P::BIAS_FAULT == BiasFault::ForgetWatched {
            return;
        }
        // Counted first: the reader whose release then fails leaves through the count.
        w.add_all(ONE_READER);
        if rwtable::fold(i, key, relaxed) {
            folded += 1;
        } else {
            // It left meanwhile (or withdrew); we are before any sleep, nobody to wake.
            w.sub_all(ONE_READER);
        }
    });
    // Readers were there: the bias pays. Nobody, four times in a row: reads are rare next to
    // writes, and each scan is all cost; unbias (readers bias it again if they overlap again).
    let mut v = w.load_all();
    loop {
        let next = if seen != 0 {
            v & !IDLE_SCANS
        } else if v & IDLE_SCANS == IDLE_SCANS {
            v & !(BIAS | IDLE_SCANS | OVERLAPS)
        } else {
            v + ONE_IDLE_SCAN
        };
        if next == v {
            break;
        }
        match w.cas_all(v, next) {
            Ok(_) => break,
            Err(cur) => v = cur,
        }
    }
    folded
}

/// Looks at a table reader's slot per spin round of a revocation (a round's length of `PAUSE`
/// hints; loom: one look).
const SLOT_CHECKS: u32 = if cfg!(gomutex_loom) {
    1
} else {
    spin::HINTS_PER_ROUND
};
