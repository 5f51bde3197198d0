//! The words of a condition variable in shared memory (std's futex sequence counter, the last
//! broadcast, the sleepers hint) and what recovery does with them after a death: the layer
//! below [`ShmCondvar`](crate::shm::ShmCondvar) that recovery may call.

use super::layout::Header;
use super::region::Region;
use super::sys;
use core::sync::atomic::{AtomicU32, Ordering::SeqCst};

/// The words of one condition variable: std's futex sequence counter, the last broadcast's
/// value (wake one and chain) and the sleepers hint.
#[derive(Clone, Copy)]
pub(super) struct Words<'a> {
    pub(super) seq: &'a AtomicU32,
    pub(super) all: &'a AtomicU32,
    pub(super) sleepers: &'a AtomicU32,
    /// `None` for the region's own condition variable (whose sleepers are also counted per
    /// participant, and which the recovery of a dead participant notifies); for one placed in
    /// a [`Mapping`](crate::shm::Mapping), the region's own counter, which that recovery bumps: its sleepers
    /// return when it moves (see [`ShmMutex::condvar_in`](crate::shm::ShmMutex::condvar_in)).
    pub(super) region_seq: Option<&'a AtomicU32>,
}

/// `word -= n`, stopping at 0 (a recovered share may have been counted already).
pub(super) fn sub_saturating(word: &AtomicU32, n: u32) {
    let _ = word.fetch_update(SeqCst, SeqCst, |v| Some(v.saturating_sub(n)));
}

impl<'a> Words<'a> {
    /// The words of the region's own condition variable, in its header.
    pub(super) fn own(h: &'a Header) -> Self {
        Words {
            seq: &h.cv_seq,
            all: &h.cv_all,
            sleepers: &h.cv_sleepers,
            region_seq: None,
        }
    }

    /// `notify_one` (see [`ShmCondvar::notify_one`](crate::shm::ShmCondvar::notify_one)).
    pub(super) fn notify_one(&self) {
        self.seq.fetch_add(1, SeqCst);
        // A waiter that was counted after this load sees the new value before it sleeps (its
        // count comes after its read of the counter, both SeqCst).
        if self.sleepers.load(SeqCst) != 0 {
            sys::futex_wake(self.seq, 1);
        }
    }

    /// `notify_all` (see [`ShmCondvar::notify_all`](crate::shm::ShmCondvar::notify_all)).
    pub(super) fn broadcast(&self) {
        // Record the broadcast before it happens: every waiter whose counter value is below
        // this one started waiting before the bump below and passes a wake-up on.
        self.all
            .store(self.seq.load(SeqCst).wrapping_add(1), SeqCst);
        self.notify_one();
    }
}

impl Region {
    /// Recovery, before it frees the slot of the dead participant `d` (identity `ident`): take
    /// the condvar waits it was counted in out of the sleepers hint, and notify all waiters.
    /// The dead process may have changed the data and died before its notify (in its critical
    /// section, or between its unlock and the notify): its death wakes the waiters to re-check
    /// their predicates (a spurious wake-up if it was not about to notify).
    pub(crate) fn cv_after_death(&self, d: u32, ident: u64) {
        let p = self.participant(d);
        if p.ident.load(SeqCst) == ident {
            let n = p.cv_waiting.swap(0, SeqCst);
            if n != 0 {
                sub_saturating(&self.hdr().cv_sleepers, n);
            }
            Words::own(self.hdr()).broadcast();
        }
    }
}
