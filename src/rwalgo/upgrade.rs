//! Upgradable read locks (lock_api's `RawRwLockUpgrade`): the writers' mutex held beside one
//! reader counted in the word.

use super::*;

/// Acquire an upgradable read lock: the writers' mutex (so no writer and no other upgradable
/// reader gets in; writers queue behind it), then one reader counted in the word, at once (no
/// write phase is announced while the mutex is ours). Plain readers come and go beside it.
#[inline]
pub fn read_upgradable<P: RwParts>(p: &P) {
    algo::lock::<_, _, P::Clock>(p.word(), p.queue());
    p.word().add_all(ONE_READER);
}

/// [`read_upgradable`] if the writers' mutex is free right now; never blocks.
#[inline]
pub fn try_read_upgradable<P: RwParts>(p: &P) -> bool {
    algo::try_lock(p.word()) && {
        p.word().add_all(ONE_READER);
        true
    }
}

/// [`read_upgradable`] giving up at `deadline` (while waiting for the writers' mutex).
#[inline]
pub fn read_upgradable_until<P: RwParts>(p: &P, deadline: Option<Instant>) -> bool {
    algo::lock_until::<_, _, P::Clock>(p.word(), p.queue(), deadline) && {
        p.word().add_all(ONE_READER);
        true
    }
}

/// Release an upgradable read lock (`fair`: hand the writers' mutex to the writer queued
/// first).
#[inline]
pub fn upgradable_unlock<P: RwParts>(p: &P, fair: bool) {
    read_unlock(p);
    if fair {
        algo::unlock_fair(p.word(), p.queue());
    } else {
        algo::unlock(p.word(), p.queue());
    }
}

/// Upgrade an upgradable read lock to the write lock: announce the write phase and stop
/// counting ourselves in one step, then wait for the other readers as any writer.
#[inline]
pub fn upgrade<P: RwParts>(p: &P) {
    announce_then_wait(p, PHASE.wrapping_sub(ONE_READER), None);
}

/// Upgrade if no other reader is inside (through the word or the table) right now; never
/// blocks. On failure the upgradable read lock is still held.
#[inline]
pub fn try_upgrade<P: RwParts>(p: &P) -> bool {
    let w = p.word();
    let mut v = w.load_all();
    loop {
        if readers(v) != 1 {
            return false;
        }
        match w.cas_all(v, v.wrapping_add(PHASE.wrapping_sub(ONE_READER))) {
            Ok(_) => break,
            Err(cur) => v = cur,
        }
    }
    if table_reader_after_announcing(p, v) {
        // A reader in the table: back to an upgradable read lock (the readers that queued
        // behind our phase meanwhile are admitted with us).
        end_phase(p, 1);
        return false;
    }
    true
}

/// Turn an upgradable read lock into a plain read lock (counted in the word): release the
/// writers' mutex, keeping the reader.
#[inline]
pub fn downgrade_upgradable<P: RwParts>(p: &P) {
    algo::unlock(p.word(), p.queue());
}

/// Turn the write lock into an upgradable read lock: end the write phase counting ourselves
/// in (with the readers queued behind it), keeping the writers' mutex.
#[inline]
pub fn downgrade_to_upgradable<P: RwParts>(p: &P) {
    end_phase(p, 1);
}
