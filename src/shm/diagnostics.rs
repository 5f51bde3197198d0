//! Read-only snapshots of a region for tests and monitoring: the state word, the accounting
//! summed over participants, and what recovery has done.

use super::layout::*;
use super::recovery::{
    REC_HANDOFFS, REC_OWED, REC_REGISTRATIONS, REC_REPLAYS, REC_STEALS, REC_WOKEN,
};
use super::region::{low, owner_of, Region};
use super::{sys, ShmMutex, ShmSafe};
use crate::algo;
use core::sync::atomic::Ordering::*;

/// A snapshot of a region's lock state, for tests and monitoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diagnostics {
    /// Go's 32-bit state word (bit 0 locked, 1 woken, 2 starving, waiters << 3).
    pub state: u32,
    /// Waiters registered in the state word.
    pub waiters: u32,
    /// Pid of the owner, if the lock is held.
    pub owner_pid: Option<u32>,
    /// Waiter slots in use (queued, or holding a token not yet picked up).
    pub queued_slots: u32,
    /// Wake-up tokens released while nobody slept, not consumed yet.
    pub stored_tokens: u32,
    /// Waiter registrations summed over participants (equals `waiters` when quiescent).
    pub registered_waiters: u64,
    /// `WOKEN` owners, owed wake-ups and pending hand-offs summed over participants
    /// (0 when quiescent).
    pub in_flight: u64,
    /// Participant slots in use.
    pub participants: u32,
    /// Owners found dead so far (over the region's life).
    pub owner_deaths: u64,
    /// The owner-died flag (set until `mark_consistent`).
    pub owner_died: bool,
    /// The poison flag.
    pub poisoned: bool,
    /// What recovery has done so far (over the region's life).
    pub recovery: RecoveryCounts,
}

/// Counters of recovery actions, for tests and monitoring (approximate: a recovery that is
/// itself interrupted by a death may be counted twice).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryCounts {
    /// The internal journal lock was taken over from a dead holder.
    pub journal_takeovers: u64,
    /// A dead holder's committed journal transaction was completed.
    pub journal_replays: u64,
    /// Waiter registrations of dead processes removed from the count.
    pub dead_waiters_removed: u64,
    /// `WOKEN` bits owned by dead processes cleared.
    pub dead_woken_cleared: u64,
    /// Wake-ups and hand-offs a dead unlocker owed, delivered on its behalf.
    pub owed_wakeups_delivered: u64,
    /// Hand-offs received by a dead waiter, passed on to the next.
    pub handoffs_passed_on: u64,
}

impl<T: ShmSafe> ShmMutex<T> {
    /// A snapshot of the lock's state.
    pub fn diagnostics(&self) -> Diagnostics {
        let h = self.region.hdr();
        let w = h.state.load(SeqCst);
        let (state, owner) = (low(w), owner_of(w));
        let owner_pid = if state & algo::LOCKED != 0 && owner != 0 {
            Some(sys::ident_pid(
                self.region.proc(owner - 1).ident.load(SeqCst),
            ))
        } else {
            None
        };
        let s = self.region.sums();
        Diagnostics {
            state,
            waiters: algo::waiters(state),
            owner_pid,
            queued_slots: s.queued_slots,
            stored_tokens: h.stored_normal.load(SeqCst) + h.stored_handoff.load(SeqCst),
            registered_waiters: s.registered,
            in_flight: s.woken + s.owes + s.handoff,
            participants: s.participants,
            owner_deaths: h.owner_deaths.load(SeqCst),
            owner_died: h.owner_died.load(SeqCst) != 0,
            poisoned: h.poisoned.load(SeqCst) != 0,
            recovery: RecoveryCounts {
                journal_takeovers: h.rec[REC_STEALS].load(SeqCst),
                journal_replays: h.rec[REC_REPLAYS].load(SeqCst),
                dead_waiters_removed: h.rec[REC_REGISTRATIONS].load(SeqCst),
                dead_woken_cleared: h.rec[REC_WOKEN].load(SeqCst),
                owed_wakeups_delivered: h.rec[REC_OWED].load(SeqCst),
                handoffs_passed_on: h.rec[REC_HANDOFFS].load(SeqCst),
            },
        }
    }
}

/// Read-only diagnostics of a region, summed over participants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sums {
    pub registered: u64,
    pub woken: u64,
    pub owes: u64,
    pub handoff: u64,
    pub queued_slots: u32,
    pub participants: u32,
}

impl Region {
    pub(crate) fn sums(&self) -> Sums {
        let mut s = Sums::default();
        for i in 0..self.layout.participants {
            let p = self.proc(i);
            if p.ident.load(SeqCst) != 0 {
                s.participants += 1;
            }
            s.registered += u64::from(p.registered.load(SeqCst));
            s.woken += u64::from(p.woken.load(SeqCst));
            s.owes += u64::from(p.owes_normal.load(SeqCst) + p.owes_handoff.load(SeqCst));
            s.handoff += u64::from(p.handoff.load(SeqCst));
        }
        for i in 0..self.layout.waiter_slots {
            if self.slot(i).state.load(SeqCst) != SLOT_FREE {
                s.queued_slots += 1;
            }
        }
        s
    }
}
