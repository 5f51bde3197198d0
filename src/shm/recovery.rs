//! Repairing what a dead process left: probes of the owner, scans of every participant, and
//! the recovery of one dead participant, step by step.
//!
//! # Accounting
//!
//! Per participant: `registered` (its waiters counted in the word), `woken` (it owns `WOKEN`),
//! `owes_normal`/`owes_handoff` (it took a wake-up decision and has not released the token yet)
//! and `handoff` (a hand-off token reached it and it has not taken ownership yet). With the
//! stored tokens these satisfy, at every transaction boundary:
//!
//! * `waiters(word) = Σ registered − stored_normal − Σ owes_normal`;
//! * `WOKEN = Σ woken + stored_normal + Σ owes_normal` (0 or 1);
//! * `STARVING && !LOCKED` iff `Σ owes_handoff + stored_handoff + Σ handoff = 1`.
//!
//! So when a participant is found dead, the survivors know exactly what it held and undo it
//! (`Ctx::recover`, in five steps).

use super::journal::{Post, Target, Txn};
use super::layout::*;
use super::queue::take_stored_for;
use super::region::{low, owner_of, word, Ctx};
use super::sys;
use crate::algo::{self, LOCKED, STARVING, WOKEN};
use core::sync::atomic::Ordering::*;

/// Owner probes (one `/proc` read) happen at most this often, machine-wide per region.
const PROBE_GAP_NS: u64 = 4_000_000;
/// Full participant scans happen at most this often.
const SCAN_GAP_NS: u64 = 40_000_000;
/// Indices of `Header::rec`.
pub(crate) const REC_STEALS: usize = 0;
pub(crate) const REC_REPLAYS: usize = 1;
pub(crate) const REC_REGISTRATIONS: usize = 2;
pub(crate) const REC_WOKEN: usize = 3;
pub(crate) const REC_OWED: usize = 4;
pub(crate) const REC_HANDOFFS: usize = 5;

impl Ctx<'_> {
    /// Run what a recovery left for after the journal lock.
    fn finish(&self, mut post: Post) {
        self.flush_wakes(&mut post);
        if let Some(new) = post.released {
            algo::unlock_released(self, self, new);
        }
        if post.kick {
            self.kick();
        }
    }

    /// Look for dead participants if nobody did recently: the owner every few ms, everyone
    /// every few tens of ms. Then wake a sleeper if the lock is free and nobody will.
    pub(crate) fn probe(&self) {
        let h = self.r.hdr();
        let now = sys::mono_ns();
        let last = h.probe_at.load(Relaxed);
        if now.wrapping_sub(last) < PROBE_GAP_NS
            || h.probe_at
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        let owner = owner_of(h.state.load(SeqCst));
        if owner != 0 && owner - 1 != self.me && owner - 1 < self.r.layout.participants {
            let ident = self.r.proc(owner - 1).ident.load(SeqCst);
            if ident != 0 && sys::ident_dead(ident) {
                self.recover(owner - 1, ident);
            }
        }
        let last_scan = h.scan_at.load(Relaxed);
        if now.wrapping_sub(last_scan) >= SCAN_GAP_NS
            && h.scan_at
                .compare_exchange(last_scan, now, Relaxed, Relaxed)
                .is_ok()
        {
            self.scan(None);
        }
        if h.abandoned.load(SeqCst) != 0 {
            // Taking the journal lock settles what timed callers gave up.
            drop(self.jlock_by(self.deadline));
        }
        self.pass_on_stale();
        self.kick();
    }

    /// Recover every dead participant (or only those with this pid). Returns
    /// `(recovered, any of them owned the lock)`.
    ///
    /// One dead participant's cleanup may wait on another's (a hand-off owed by a dead unlocker
    /// scanned later), so passes repeat while some dead participant is left and the previous
    /// pass freed one.
    pub(crate) fn scan(&self, pid: Option<u32>) -> (usize, bool) {
        let mut found = 0;
        let mut owned = false;
        let mut left_before = usize::MAX;
        loop {
            let (mut dead, mut left) = (0, 0);
            for i in 0..self.r.layout.participants {
                if i == self.me {
                    continue;
                }
                let ident = self.r.proc(i).ident.load(SeqCst);
                if ident == 0 || pid.is_some_and(|p| p != sys::ident_pid(ident)) {
                    continue;
                }
                if sys::ident_dead(ident) {
                    dead += 1;
                    owned |= self.recover(i, ident);
                    left += usize::from(self.r.proc(i).ident.load(SeqCst) == ident);
                }
            }
            found = found.max(dead);
            if left == 0 || left >= left_before {
                return (found, owned);
            }
            left_before = left;
        }
    }

    /// The lock is free, not starving, nobody is awake and waiters sleep: in Go that is only
    /// the moment between an unlock's subtraction and its wake-up, so do the wake-up (exactly
    /// what that unlock would do; if it is alive and does it too, one of us finds `WOKEN` set).
    /// This covers an unlocker that died in that moment, and a dead `WOKEN` owner once its bit
    /// is cleared.
    ///
    /// Go's `unlockSlow` CAS and the wake-up it owes are one transaction here (nothing is
    /// owed in between), so a caller with a deadline gives up cleanly when the journal lock is
    /// not to be had by then.
    pub(super) fn kick(&self) {
        let st = &self.r.hdr().state;
        let idle = |l: u32| l & (LOCKED | STARVING | WOKEN) == 0 && algo::waiters(l) > 0;
        if !idle(low(st.load(SeqCst))) {
            return;
        }
        let mut post = Post::default();
        {
            let Some(_g) = self.jlock_by(self.deadline) else {
                return;
            };
            loop {
                let cur = st.load(SeqCst);
                let l = low(cur);
                if !idle(l) {
                    break;
                }
                let mut tx = Txn::new();
                tx.word = Some((cur, word((l - algo::WAITER) | WOKEN, 0)));
                self.deliver(&mut tx, false);
                if self.commit(&tx) {
                    post.absorb(self, &tx);
                    break;
                }
            }
        }
        self.flush_wakes(&mut post);
    }

    /// Undo everything participant `d` (found dead with identity `ident`) left. Returns whether
    /// it owned the lock.
    pub(crate) fn recover(&self, d: u32, ident: u64) -> bool {
        let mut post = Post::default();
        let owned = {
            // A timed caller leaves recovery to others if the journal lock is not to be had.
            let Some(_g) = self.jlock_by(self.deadline) else {
                return false;
            };
            self.recover_locked(d, ident, &mut post)
        };
        self.finish(post);
        owned
    }

    /// [`recover`](Self::recover) with the journal lock held: the five steps in order, each
    /// leaving the accounting invariants (module docs) true.
    fn recover_locked(&self, d: u32, ident: u64, post: &mut Post) -> bool {
        if d == self.me || self.r.proc(d).ident.load(SeqCst) != ident {
            return false; // recovered already (and maybe reused, or adopted)
        }
        let owned = self.undo_dead(d, post);
        self.free_if_idle(d, ident);
        owned
    }

    /// Steps 1–4 of [`Ctx::recover_locked`]: undo everything participant `d` left (journal
    /// lock held). Returns whether it owned the lock.
    fn undo_dead(&self, d: u32, post: &mut Post) -> bool {
        let owned = self.release_for_dead_owner(d, post);
        self.unqueue_dead(d);
        self.deliver_owed_by_dead(d, post);
        self.undo_dead_waiters(d, post);
        // What it gave up without the journal lock is undone with the rest.
        let p = self.r.proc(d);
        let (reg, woken) = (p.ab_reg_posted.load(SeqCst), p.ab_woken_posted.load(SeqCst));
        if p.ab_reg_done.load(SeqCst) != reg || p.ab_woken_done.load(SeqCst) != woken {
            let mut tx = Txn::new();
            tx.set(Target::AbRegDone(d), reg.into());
            tx.set(Target::AbWokenDone(d), woken.into());
            self.commit(&tx);
        }
        owned
    }

    /// Take over participant index `self.me` (the guest slot) from its dead user `dead`, then
    /// undo what that user left under the index (a wake-up or hand-off it owed from a recovery,
    /// the journal lock), as [`Ctx::recover`] would for any dead participant. `false` if
    /// another process took the index first.
    ///
    /// Needed when every regular participant slot is held by a dead process and the guest's
    /// borrower died too: no live process then has an index from which to recover the guest
    /// slot, so recovery (and every newcomer) would stop for good.
    pub(crate) fn adopt(&self, dead: u64, ident: u64) -> bool {
        let p = self.r.proc(self.me);
        // The CAS makes us the index's only user; from then on a death of ours leaves our own
        // (dead) identity here, to be adopted or recovered in turn.
        if p.ident
            .compare_exchange(dead, ident, SeqCst, SeqCst)
            .is_err()
        {
            return false;
        }
        let mut post = Post::default();
        {
            let _g = self.jlock_adopting();
            self.undo_dead(self.me, &mut post);
        }
        self.finish(post);
        true
    }

    /// Step 1: `d` owned the lock: release it on its behalf (Go's `Unlock`, finished after the
    /// journal lock in `post`) and tell the next owner. The flag is set before the release,
    /// outside the log (the next owner may clear it at once). Returns whether it owned it.
    fn release_for_dead_owner(&self, d: u32, post: &mut Post) -> bool {
        let (r, h) = (self.r, self.r.hdr());
        let mut owned = false;
        loop {
            let cur = h.state.load(SeqCst);
            if low(cur) & LOCKED == 0 || owner_of(cur) != d + 1 {
                return owned;
            }
            owned = true;
            h.owner_died.store(1, SeqCst);
            let new_low = low(cur) - LOCKED;
            let mut tx = Txn::new();
            tx.word = Some((cur, word(new_low, 0)));
            tx.add(r, Target::OwnerDeaths, 1);
            if new_low & STARVING != 0 {
                tx.add(r, Target::OwesHandoff(self.me), 1);
            }
            if self.commit(&tx) {
                post.released = Some(new_low);
                return owned;
            }
        }
    }

    /// Step 2: `d`'s queued slots leave the queue; tokens already in its slots were accounted
    /// to it on delivery (and are resolved in step 4).
    fn unqueue_dead(&self, d: u32) {
        let r = self.r;
        for i in 0..r.layout.waiter_slots {
            let s = r.slot(i);
            if s.state.load(SeqCst) != SLOT_FREE && s.proc.load(SeqCst) == d {
                s.state.store(SLOT_FREE, SeqCst);
            }
        }
    }

    /// Step 3: the wake-ups and hand-offs `d` owed, delivered on its behalf.
    fn deliver_owed_by_dead(&self, d: u32, post: &mut Post) {
        let (r, h, p) = (self.r, self.r.hdr(), self.r.proc(d));
        for handoff in [false, true] {
            let owes = if handoff {
                &p.owes_handoff
            } else {
                &p.owes_normal
            };
            while owes.load(SeqCst) > 0 {
                h.rec[REC_OWED].fetch_add(1, Relaxed);
                let mut tx = Txn::new();
                tx.add(r, Target::owed(d, handoff), -1);
                self.deliver(&mut tx, handoff);
                self.commit(&tx);
                post.absorb(self, &tx);
            }
        }
    }

    /// Step 4: what `d`'s waiters held: a hand-off received, `WOKEN`, registrations. A
    /// registration that may not leave yet (see below) stays for a later scan.
    fn undo_dead_waiters(&self, d: u32, post: &mut Post) {
        let (r, h, p) = (self.r, self.r.hdr(), self.r.proc(d));
        loop {
            if p.handoff.load(SeqCst) > 0 {
                // It received a hand-off and died before taking ownership: drop its waiter
                // and pass the hand-off on (or end starvation mode if it was the last).
                let cur = h.state.load(SeqCst);
                let mut tx = Txn::new();
                tx.add(r, Target::Handoff(d), -1);
                if let Some(new_low) = algo::handoff_declined(low(cur)) {
                    tx.add(r, Target::Registered(d), -1);
                    if new_low & STARVING != 0 {
                        self.deliver(&mut tx, true);
                    }
                    tx.word = Some((cur, word(new_low, owner_of(cur))));
                }
                if self.commit(&tx) {
                    h.rec[REC_HANDOFFS].fetch_add(1, Relaxed);
                    post.absorb(self, &tx);
                }
            } else if p.woken.load(SeqCst) > 0 {
                // It owned WOKEN: clear it, and wake someone if the lock is free.
                let cur = h.state.load(SeqCst);
                let mut tx = Txn::new();
                tx.set(Target::Woken(d), 0);
                if low(cur) & WOKEN != 0 {
                    tx.word = Some((cur, cur & !u64::from(WOKEN)));
                }
                if self.commit(&tx) {
                    h.rec[REC_WOKEN].fetch_add(1, Relaxed);
                    post.kick = true;
                }
            } else if p.registered.load(SeqCst) > 0 {
                // A waiter of its is still counted: a token in flight to nobody in particular
                // is as good as its own; otherwise leave the count under
                // `algo::deregistered`'s rule (during a hand-off the receiver and one more
                // waiter stay counted); if it may not, retry at a later scan (the fix-up is a
                // few instructions away).
                let mut tx = Txn::new();
                if !take_stored_for(r, &mut tx, d) {
                    let cur = h.state.load(SeqCst);
                    let Some(new_low) = algo::deregistered(low(cur)) else {
                        // A token it could take is owed by a live unlocker, or a live hand-off
                        // receiver has not taken ownership yet: finish later.
                        return;
                    };
                    tx.word = Some((cur, word(new_low, owner_of(cur))));
                    tx.add(r, Target::Registered(d), -1);
                    h.rec[REC_REGISTRATIONS].fetch_add(1, Relaxed);
                }
                self.commit(&tx);
            } else {
                return;
            }
        }
    }

    /// Step 5: free `d`'s participant slot once nothing refers to it.
    fn free_if_idle(&self, d: u32, ident: u64) {
        if self.r.holds_nothing(d) {
            // A CAS: a newcomer may have adopted the slot meanwhile (`adopt`, the guest slot),
            // and then it is the newcomer's.
            let _ = self
                .r
                .proc(d)
                .ident
                .compare_exchange(ident, 0, SeqCst, SeqCst);
        }
    }

    /// Give up this process's participant slot if it holds nothing (used when a handle is
    /// dropped).
    pub(crate) fn release_self(&self) {
        let _g = self.jlock();
        let in_queue = (0..self.r.layout.waiter_slots).any(|i| {
            let s = self.r.slot(i);
            s.state.load(SeqCst) != SLOT_FREE && s.proc.load(SeqCst) == self.me
        });
        if self.r.holds_nothing(self.me) && !in_queue {
            self.r.proc(self.me).ident.store(0, SeqCst);
        }
    }
}
