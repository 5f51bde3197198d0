//! Read-only snapshots of a region for tests and monitoring: the state word, the accounting
//! summed over participants, and what recovery has done.

use super::identity;
use super::layout::*;
use super::region::{low, owner_tag, Region};
use super::types::ShmSafe;
use super::ShmMutex;
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
    /// Pid of the owner, if the lock is held by a participant that can be told (see
    /// `owner_unknown`).
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
    /// The lock is held but its owner cannot be told: the state word names no participant,
    /// one out of range or an empty participant slot (left so by a faulty peer, until
    /// recovery takes the lock back). `owner_pid` is `None` then.
    pub owner_unknown: bool,
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
        let (state, owner) = (low(w), owner_tag(w));
        // Every value read here may have been written by a faulty peer: an index is checked
        // before use and sums saturate, so a snapshot never panics.
        let owner_ident = (state & algo::LOCKED != 0).then(|| {
            (owner != 0 && owner - 1 < self.region.layout.participants)
                .then(|| self.region.participant(owner - 1).ident.load(SeqCst))
                .filter(|&ident| ident != 0)
        });
        let owner_pid = owner_ident.flatten().map(identity::ident_pid);
        let s = self.region.sums();
        Diagnostics {
            state,
            waiters: algo::waiters(state),
            owner_pid,
            queued_slots: s.queued_slots,
            stored_tokens: h
                .stored_normal
                .load(SeqCst)
                .saturating_add(h.stored_handoff.load(SeqCst)),
            registered_waiters: s.registered,
            in_flight: s.woken.saturating_add(s.owes).saturating_add(s.handoff),
            participants: s.participants,
            owner_deaths: h.owner_deaths.load(SeqCst),
            owner_died: h.owner_died.load(SeqCst) != 0,
            poisoned: h.poisoned.load(SeqCst) != 0,
            recovery: RecoveryCounts {
                journal_takeovers: h.rec[rec::JOURNAL_TAKEOVERS].load(SeqCst),
                journal_replays: h.rec[rec::JOURNAL_REPLAYS].load(SeqCst),
                dead_waiters_removed: h.rec[rec::DEAD_WAITERS_REMOVED].load(SeqCst),
                dead_woken_cleared: h.rec[rec::DEAD_WOKEN_CLEARED].load(SeqCst),
                owed_wakeups_delivered: h.rec[rec::OWED_WAKEUPS_DELIVERED].load(SeqCst),
                handoffs_passed_on: h.rec[rec::HANDOFFS_PASSED_ON].load(SeqCst),
            },
            owner_unknown: owner_ident.is_some_and(|i| i.is_none()),
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

impl Diagnostics {
    /// The owner for `Debug` output: its pid, `None` (free), or `"unknown"`.
    pub(crate) fn owner_debug(&self) -> &dyn core::fmt::Debug {
        if self.owner_unknown {
            &"unknown"
        } else {
            &self.owner_pid
        }
    }
}

impl Region {
    pub(crate) fn sums(&self) -> Sums {
        let mut s = Sums::default();
        for i in 0..self.layout.participants {
            let p = self.participant(i);
            if p.ident.load(SeqCst) != 0 {
                s.participants += 1;
            }
            s.registered += u64::from(p.registered.load(SeqCst));
            s.woken += u64::from(p.woken.load(SeqCst));
            // u64 sums of u32 counters: at most 2^16 participants, no overflow.
            s.owes +=
                u64::from(p.owes_normal.load(SeqCst)) + u64::from(p.owes_handoff.load(SeqCst));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::Config;

    fn region_of(m: &ShmMutex<u32>) -> &Region {
        &m.region
    }

    #[test]
    fn snapshots_of_a_corrupt_region_never_panic() {
        let m = ShmMutex::anonymous_with(
            0u32,
            Config {
                participants: 2,
                waiter_slots: 2,
            },
        )
        .unwrap();
        let r = region_of(&m);
        let h = r.hdr();
        // Counters at their maximum: their sums must not overflow (debug builds panic).
        h.stored_normal.store(u32::MAX, SeqCst);
        h.stored_handoff.store(u32::MAX, SeqCst);
        for i in 0..r.layout.participants {
            let p = r.participant(i);
            for c in p.counters() {
                c.store(u32::MAX, SeqCst);
            }
        }
        // LOCKED with an owner index out of range.
        h.state
            .store(super::super::region::word(algo::LOCKED, 1000), SeqCst);
        let d = m.diagnostics();
        assert_eq!(d.owner_pid, None);
        assert!(d.owner_unknown);
        assert_eq!(d.stored_tokens, u32::MAX);
        assert_eq!(format!("{:?}", d.owner_debug()), "\"unknown\"");
        assert!(format!("{d:?}").contains("owner_unknown: true"));
        // LOCKED by an empty participant slot: not pid 0.
        h.state
            .store(super::super::region::word(algo::LOCKED, 1), SeqCst);
        let d = m.diagnostics();
        assert_eq!(d.owner_pid, None);
        assert!(d.owner_unknown);
        // LOCKED with no owner at all.
        h.state
            .store(super::super::region::word(algo::LOCKED, 0), SeqCst);
        assert!(m.diagnostics().owner_unknown);
        // The handle's `Debug` does not panic either (its `try_lock` may take the lock back
        // from the phantom owner, so the next owner is told).
        let _ = format!("{m:?}");
        // A real owner is known.
        h.state.store(0, SeqCst);
        let g = m.lock().unwrap_or_else(|e| e.into_inner());
        let d = m.diagnostics();
        assert_eq!(d.owner_pid, Some(identity::current_pid()));
        assert!(!d.owner_unknown);
        assert_eq!(
            format!("{:?}", d.owner_debug()),
            format!("Some({})", identity::current_pid())
        );
        drop(g);
        assert!(!m.diagnostics().owner_unknown);
    }
}
