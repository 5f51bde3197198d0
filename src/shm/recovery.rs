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
//! (`Participant::recover`, in five steps).
//!
//! The invariants also bound every count: a participant owes at most one wake-up and one
//! hand-off, owns `WOKEN` at most once, holds at most one hand-off, and its registrations are
//! at most `waiters(word) + stored_normal + Σ owes_normal`. Larger counts can only have been
//! written by a faulty peer; recovery clamps them, so undoing one participant is a bounded
//! number of transactions, each O(waiter slots + participants), whatever the region holds.

use super::identity;
use super::journal::{AfterJournal, Hooks, Target, Txn};
use super::layout::*;
use super::queue::take_stored_for;
use super::region::{low, owner_tag, word, Participant};
use super::sys;
use crate::algo::{self, LOCKED, STARVING, WOKEN};
use core::sync::atomic::Ordering::*;

/// Owner probes (one `/proc` read) happen at most this often, machine-wide per region.
const PROBE_GAP_NS: u64 = 4_000_000;
/// Full participant scans happen at most this often.
const SCAN_GAP_NS: u64 = 40_000_000;
/// Successful transactions step 4 makes for one dead participant before it leaves the rest
/// for a later scan. A real one needs at most seven (pass a hand-off on, clear `WOKEN`, take
/// each kind of stored token and undo it, remove its registrations); only counts written by a
/// faulty peer could ask for more.
const UNDO_BUDGET: u32 = 16;

impl Hooks for Participant<'_> {
    fn on_lock(&self, after: &mut AfterJournal) {
        self.settle_abandoned(after);
    }

    fn after_unlock(&self, released: Option<u32>, wake_if_stranded: bool) {
        if let Some(new) = released {
            algo::unlock_released(self, self, new);
        }
        if wake_if_stranded {
            self.wake_if_stranded();
        }
    }

    /// Look for dead participants if nobody did recently: the owner every few ms, everyone
    /// every few tens of ms. Then wake a sleeper if the lock is free and nobody will.
    fn probe(&self) {
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
        let w = h.state.load(SeqCst);
        let owner = owner_tag(w);
        if low(w) & LOCKED != 0 && self.r.names_no_participant(owner) {
            self.recover_phantom_owner();
        } else if owner != 0 && owner - 1 != self.me && owner - 1 < self.r.layout.participants {
            let ident = self.r.participant(owner - 1).ident.load(SeqCst);
            if ident != 0 && self.r.participant(owner - 1).dead(ident) {
                self.recover(owner - 1, ident);
            }
        }
        self.scan_if_due(now);
        if h.abandoned.load(SeqCst) != 0 {
            // Taking the journal lock settles what timed callers gave up.
            drop(self.jlock_by(self.deadline));
        }
        self.pass_on_stale();
        self.wake_if_stranded();
    }
}

impl Participant<'_> {
    /// Recover every dead participant if nobody did for [`SCAN_GAP_NS`] (machine-wide per
    /// region; `now` is `sys::mono_ns()`).
    pub(crate) fn scan_if_due(&self, now: u64) {
        let h = self.r.hdr();
        let last_scan = h.scan_at.load(Relaxed);
        if now.wrapping_sub(last_scan) >= SCAN_GAP_NS
            && h.scan_at
                .compare_exchange(last_scan, now, Relaxed, Relaxed)
                .is_ok()
        {
            self.scan(None);
        }
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
                let ident = self.r.participant(i).ident.load(SeqCst);
                if ident == 0 || pid.is_some_and(|p| p != identity::ident_pid(ident)) {
                    continue;
                }
                if self.r.participant(i).dead(ident) {
                    dead += 1;
                    owned |= self.recover(i, ident);
                    left += usize::from(self.r.participant(i).ident.load(SeqCst) == ident);
                }
            }
            found = found.max(dead);
            if left == 0 || left >= left_before {
                break;
            }
            left_before = left;
        }
        if pid.is_none() {
            self.repair_orphans();
        }
        (found, owned)
    }

    /// The lock is held by no participant ([`Region::names_no_participant`]): release it as
    /// for a dead owner (the next owner is told).
    fn recover_phantom_owner(&self) {
        // A timed caller does not wait past its deadline (the next probe retries).
        let Some(mut g) = self.jlock_by(self.deadline) else {
            return;
        };
        let cur = self.r.hdr().state.load(SeqCst);
        // Re-checked under the journal lock: no participant can take a held lock, and a
        // slot is claimed lock-free but becomes an owner only by taking the lock.
        if low(cur) & LOCKED != 0 && self.r.names_no_participant(owner_tag(cur)) {
            self.release_for_owner(owner_tag(cur), g.after());
        }
    }

    /// What only a faulty peer leaves (journal lock held, once per full scan, O(waiter
    /// slots and participants)): waiter slots naming no participant, counters in empty participant
    /// slots, and a `WOKEN` bit or a hand-off in flight that no participant or stored token
    /// accounts for (the invariants in the module docs). Each would leave waiters asleep
    /// beside a free lock for good.
    fn repair_orphans(&self) {
        let (r, h) = (self.r, self.r.hdr());
        {
            // A timed caller does not wait past its deadline (the next full scan retries).
            let Some(mut g) = self.jlock_by(self.deadline) else {
                return;
            };
            let after = g.after();
            // 1. A waiter slot naming no participant: nobody sleeps there. A token it got (it
            // may have been at the front of the queue) goes to the next waiter instead.
            for i in 0..r.layout.waiter_slots {
                let s = r.slot(i);
                let v = s.state.load(SeqCst);
                if v == SLOT_FREE
                    || !r.names_no_participant(s.participant.load(SeqCst).wrapping_add(1))
                {
                    continue;
                }
                if s.state
                    .compare_exchange(v, SLOT_FREE, SeqCst, SeqCst)
                    .is_ok()
                    && v != SLOT_QUEUED
                {
                    let mut tx = Txn::new();
                    self.deliver(&mut tx, v == SLOT_TOKEN_HANDOFF);
                    self.commit(&tx);
                    after.absorb(r, &tx);
                }
            }
            // 2. Counters in an empty participant slot belong to nobody (its tokens were just
            // passed on): cleared, and the word is repaired below.
            for i in 0..r.layout.participants {
                let p = r.participant(i);
                if i == self.me || p.ident.load(SeqCst) != 0 || self.r.holds_nothing(i) {
                    continue;
                }
                let mut tx = Txn::new();
                for t in [
                    Target::Registered(i),
                    Target::Woken(i),
                    Target::OwesNormal(i),
                    Target::OwesHandoff(i),
                    Target::Handoff(i),
                ] {
                    tx.set(t, 0);
                }
                self.commit(&tx);
            }
            // 3. The word's WOKEN and hand-off against what accounts for them.
            let (mut woken, mut handoff) = (0u64, 0u64);
            for i in 0..r.layout.participants {
                let p = r.participant(i);
                woken += u64::from(p.woken.load(SeqCst)) + u64::from(p.owes_normal.load(SeqCst));
                handoff +=
                    u64::from(p.handoff.load(SeqCst)) + u64::from(p.owes_handoff.load(SeqCst));
            }
            woken += u64::from(h.stored_normal.load(SeqCst));
            handoff += u64::from(h.stored_handoff.load(SeqCst));
            for _ in 0..4 {
                let cur = h.state.load(SeqCst);
                let l = low(cur);
                let mut tx = Txn::new();
                if l & WOKEN != 0 && woken == 0 {
                    // Nobody is awake to clear it: clear it and wake a waiter.
                    tx.clear_woken(cur);
                    after.wake_if_stranded = true;
                } else if l & (STARVING | LOCKED) == STARVING && handoff == 0 {
                    // A hand-off nobody owes, holds or stored: give one to the front waiter,
                    // or leave starvation mode if there is none.
                    if algo::waiters(l) > 0 {
                        self.deliver(&mut tx, true);
                        handoff = 1;
                    } else {
                        tx.word = Some((cur, word(l & !STARVING, owner_tag(cur))));
                    }
                } else {
                    break;
                }
                if self.commit(&tx) {
                    after.absorb(r, &tx);
                }
            }
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
    pub(super) fn wake_if_stranded(&self) {
        let st = &self.r.hdr().state;
        let idle = |l: u32| l & (LOCKED | STARVING | WOKEN) == 0 && algo::waiters(l) > 0;
        if !idle(low(st.load(SeqCst))) {
            return;
        }
        let Some(mut g) = self.jlock_by(self.deadline) else {
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
                g.after().absorb(self.r, &tx);
                break;
            }
        }
    }

    /// Undo everything participant `d` (found dead with identity `ident`) left. Returns whether
    /// it owned the lock.
    pub(crate) fn recover(&self, d: u32, ident: u64) -> bool {
        // A timed caller leaves recovery to others if the journal lock is not to be had.
        let Some(mut g) = self.jlock_by(self.deadline) else {
            return false;
        };
        self.recover_locked(d, ident, g.after())
    }

    /// [`recover`](Self::recover) with the journal lock held: the five steps in order, each
    /// leaving the accounting invariants (module docs) true.
    fn recover_locked(&self, d: u32, ident: u64, after: &mut AfterJournal) -> bool {
        if d == self.me || self.r.participant(d).ident.load(SeqCst) != ident {
            return false; // recovered already (and maybe reused, or adopted)
        }
        let owned = self.undo_dead(d, after);
        self.free_if_idle(d, ident);
        owned
    }

    /// Steps 1–4 of [`Participant::recover_locked`]: undo everything participant `d` left (journal
    /// lock held). Returns whether it owned the lock.
    fn undo_dead(&self, d: u32, after: &mut AfterJournal) -> bool {
        let owned = self.release_for_dead_owner(d, after);
        // A `ShmRwLock`'s counts of this process are all it held as a reader: one atomic add
        // each, so exact (`rwlock`); its waiting writer finds them gone at its next look.
        let p = self.r.participant(d);
        p.rw_reads.store(0, SeqCst);
        p.rw_waiting.store(0, SeqCst);
        self.unqueue_dead(d);
        self.deliver_owed_by_dead(d, after);
        self.undo_dead_waiters(d, after);
        // What it gave up without the journal lock is undone with the rest.
        let (reg, woken) = (p.ab_reg_posted.load(SeqCst), p.ab_woken_posted.load(SeqCst));
        if p.ab_reg_done.load(SeqCst) != reg || p.ab_woken_done.load(SeqCst) != woken {
            let mut tx = Txn::new();
            tx.set(Target::AbRegDone(d), reg.into());
            tx.set(Target::AbWokenDone(d), woken.into());
            self.commit(&tx);
        }
        owned
    }

    /// Take over participant index `self.me` (the spare slot) from its dead user `dead`, then
    /// undo what that user left under the index (a wake-up or hand-off it owed from a recovery,
    /// the journal lock), as [`Participant::recover`] would for any dead participant. `false` if
    /// another process took the index first.
    ///
    /// Needed when every regular participant slot is held by a dead process and the spare's
    /// borrower died too: no live process then has an index from which to recover the spare
    /// slot, so recovery (and every newcomer) would stop for good.
    pub(crate) fn adopt(&self, dead: u64, ident: u64) -> bool {
        let p = self.r.participant(self.me);
        // The CAS makes us the index's only user; from then on a death of ours leaves our own
        // (dead) identity here, to be adopted or recovered in turn.
        if !p.claim(dead, ident) {
            return false;
        }
        let mut g = self.jlock_adopting();
        self.undo_dead(self.me, g.after());
        self.stats().recoveries.fetch_add(1, Relaxed);
        true
    }

    /// Step 1: `d` owned the lock: release it on its behalf ([`Participant::release_for_owner`]).
    fn release_for_dead_owner(&self, d: u32, after: &mut AfterJournal) -> bool {
        self.release_for_owner(d + 1, after)
    }

    /// Release the lock on behalf of its owner `tag` (participant index + 1 in the word), if
    /// that owner still holds it: Go's `Unlock`, finished after the journal lock by `after`, and
    /// tell the next owner. The flag is set before the release, outside the log (the next
    /// owner may clear it at once). Returns whether `tag` owned it.
    fn release_for_owner(&self, tag: u32, after: &mut AfterJournal) -> bool {
        let (r, h) = (self.r, self.r.hdr());
        let mut owned = false;
        loop {
            let cur = h.state.load(SeqCst);
            if low(cur) & LOCKED == 0 || owner_tag(cur) != tag {
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
                after.released = Some(new_low);
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
            if s.state.load(SeqCst) != SLOT_FREE && s.participant.load(SeqCst) == d {
                s.state.store(SLOT_FREE, SeqCst);
            }
        }
    }

    /// Step 3: the wake-ups and hand-offs `d` owed, delivered on its behalf. At most one of
    /// each (module docs): a larger count is garbage, dropped with the one delivered.
    fn deliver_owed_by_dead(&self, d: u32, after: &mut AfterJournal) {
        let (h, p) = (self.r.hdr(), self.r.participant(d));
        for handoff in [false, true] {
            let owes = if handoff {
                &p.owes_handoff
            } else {
                &p.owes_normal
            };
            if owes.load(SeqCst) > 0 {
                h.rec[rec::OWED_WAKEUPS_DELIVERED].fetch_add(1, Relaxed);
                let mut tx = Txn::new();
                tx.set(Target::owed(d, handoff), 0);
                self.deliver(&mut tx, handoff);
                self.commit(&tx);
                after.absorb(self.r, &tx);
            }
        }
    }

    /// The most registrations one participant can legitimately have (journal lock held):
    /// `waiters(word) + stored_normal + Σ owes_normal` (module docs).
    fn registrations_possible(&self) -> u64 {
        let (r, h) = (self.r, self.r.hdr());
        let owed: u64 = (0..r.layout.participants)
            .map(|i| u64::from(r.participant(i).owes_normal.load(SeqCst)))
            .sum();
        u64::from(algo::waiters(low(h.state.load(SeqCst))))
            + u64::from(h.stored_normal.load(SeqCst))
            + owed
    }

    /// Step 4: what `d`'s waiters held: a hand-off received, `WOKEN`, registrations. A
    /// registration that may not leave yet (see below) stays for a later scan, and so does
    /// whatever is left after [`UNDO_BUDGET`] transactions (only garbage counts need more).
    fn undo_dead_waiters(&self, d: u32, after: &mut AfterJournal) {
        let (r, h, p) = (self.r, self.r.hdr(), self.r.participant(d));
        let mut budget = UNDO_BUDGET;
        while budget > 0 {
            if p.handoff.load(SeqCst) > 0 {
                // It received a hand-off and died before taking ownership: drop its waiter
                // and pass the hand-off on (or end starvation mode if it was the last). One
                // at most is in flight: a larger count is garbage, dropped with it.
                let cur = h.state.load(SeqCst);
                let mut tx = Txn::new();
                tx.set(Target::Handoff(d), 0);
                if let Some(new_low) = algo::handoff_declined(low(cur)) {
                    tx.add(r, Target::Registered(d), -1);
                    if new_low & STARVING != 0 {
                        self.deliver(&mut tx, true);
                    }
                    tx.word = Some((cur, word(new_low, owner_tag(cur))));
                }
                if self.commit(&tx) {
                    budget -= 1;
                    h.rec[rec::HANDOFFS_PASSED_ON].fetch_add(1, Relaxed);
                    after.absorb(r, &tx);
                }
            } else if p.woken.load(SeqCst) > 0 {
                // It owned WOKEN: clear it, and wake someone if the lock is free.
                let cur = h.state.load(SeqCst);
                let mut tx = Txn::new();
                tx.set(Target::Woken(d), 0);
                tx.clear_woken(cur);
                if self.commit(&tx) {
                    budget -= 1;
                    h.rec[rec::DEAD_WOKEN_CLEARED].fetch_add(1, Relaxed);
                    after.wake_if_stranded = true;
                }
            } else if p.registered.load(SeqCst) > 0 {
                let registered = p.registered.load(SeqCst);
                let possible = self.registrations_possible();
                let mut tx = Txn::new();
                if u64::from(registered) > possible {
                    // More than the word and the tokens can account for: garbage.
                    tx.set(Target::Registered(d), possible);
                } else if !take_stored_for(r, &mut tx, d) {
                    // A waiter of its is still counted: a token in flight to nobody in
                    // particular is as good as its own (above); otherwise its registrations
                    // leave the count under `algo::deregistered`'s rule (during a hand-off
                    // the receiver and one more waiter stay counted), all in one transaction;
                    // if none may, retry at a later scan (the fix-up is a few instructions
                    // away).
                    let cur = h.state.load(SeqCst);
                    let Some((new_low, k)) = algo::deregistered_up_to(low(cur), registered) else {
                        // A token it could take is owed by a live unlocker, or a live hand-off
                        // receiver has not taken ownership yet: finish later.
                        return;
                    };
                    tx.word = Some((cur, word(new_low, owner_tag(cur))));
                    tx.add(r, Target::Registered(d), -i64::from(k));
                    h.rec[rec::DEAD_WAITERS_REMOVED].fetch_add(u64::from(k), Relaxed);
                }
                if self.commit(&tx) {
                    budget -= 1;
                }
            } else {
                return;
            }
        }
    }

    /// Step 5: free `d`'s participant slot once nothing refers to it.
    fn free_if_idle(&self, d: u32, ident: u64) {
        if self.r.holds_nothing(d) {
            // A CAS: a newcomer may have adopted the slot meanwhile (`adopt`, the spare slot),
            // and then it is the newcomer's.
            self.r.cv_after_death(d, ident);
            if self.r.participant(d).free(ident) {
                self.stats().recoveries.fetch_add(1, Relaxed);
            }
        }
    }

    /// Give up this process's participant slot if it holds nothing (used when a handle is
    /// dropped).
    ///
    /// Decided under the journal lock (no journaled change of this participant's accounting or
    /// queue slots is half-done), but freed after releasing it: a process that died between
    /// freeing its identity and releasing the lock would leave the journal lock naming an
    /// empty slot, which no survivor can tell from a live holder (a wedge). Nothing can make
    /// the slot hold something in between: the handle is being dropped (no guard, no waiter of
    /// it), and other processes only hand things to queued waiters or to the dead. A death
    /// after the lock is released leaves an idle slot with a dead identity: recovery frees it.
    pub(crate) fn release_self(&self) {
        let idle = {
            let _g = self.jlock();
            let in_queue = (0..self.r.layout.waiter_slots).any(|i| {
                let s = self.r.slot(i);
                s.state.load(SeqCst) != SLOT_FREE && s.participant.load(SeqCst) == self.me
            });
            self.r.holds_nothing(self.me) && !in_queue
        };
        if idle {
            crate::crash::point(crate::crash::RELEASING_SELF);
            let p = self.r.participant(self.me);
            p.free(p.ident.load(SeqCst));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::{Config, ShmMutex};
    use std::sync::mpsc;
    use std::time::Duration;

    /// An identity that is certainly dead: our pid with another start time (a predecessor).
    fn dead_ident() -> u64 {
        let me = identity::self_ident();
        identity::make_ident(identity::ident_pid(me), (me >> identity::PID_BITS) + 1)
    }

    fn small() -> ShmMutex<u32> {
        ShmMutex::anonymous_with(
            0u32,
            Config {
                participants: 2,
                waiter_slots: 2,
            },
        )
        .unwrap()
    }

    /// Run `f` on another thread; panic if it takes longer than `limit`.
    fn within<R: Send + 'static>(
        limit: Duration,
        what: &str,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(limit)
            .unwrap_or_else(|_| panic!("{what}: not done after {limit:?}"))
    }

    #[test]
    fn recovery_of_garbage_counts_is_bounded() {
        // Three slots: this process's, the dead one's, the spare.
        let cfg = Config {
            participants: 3,
            waiter_slots: 2,
        };
        let m: &'static ShmMutex<u32> =
            Box::leak(Box::new(ShmMutex::anonymous_with(0u32, cfg).unwrap()));
        // Registered first (participant 0): registering recovers the dead it finds.
        m.join().unwrap();
        let r = &m.region;
        let p = r.participant(1);
        p.ident.store(dead_ident(), SeqCst);
        for c in p.counters() {
            c.store(u32::MAX, SeqCst);
        }
        let found = within(Duration::from_secs(2), "recovery", move || m.recover());
        assert_eq!(found, 1);
        // Everything it claimed to hold is gone, and its slot is free again.
        assert_eq!(r.participant(1).ident.load(SeqCst), 0);
        let d = m.diagnostics();
        assert_eq!(
            (d.waiters, d.registered_waiters, d.in_flight),
            (0, 0, 0),
            "{d:?}"
        );
        drop(m.lock().unwrap());
    }

    /// Start a thread that takes the lock and reports how it went; wait until it sleeps in
    /// the queue (the caller holds the lock).
    fn queued_waiter(m: &'static ShmMutex<u32>) -> mpsc::Receiver<bool> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let died = matches!(m.lock(), Err(crate::shm::LockError::OwnerDied(_)));
            let _ = tx.send(died);
        });
        let t = std::time::Instant::now();
        while m.diagnostics().queued_slots == 0 || m.diagnostics().waiters == 0 {
            assert!(t.elapsed() < Duration::from_secs(2), "waiter did not queue");
            std::thread::sleep(Duration::from_millis(1));
        }
        rx
    }

    fn leaked() -> &'static ShmMutex<u32> {
        let m: &'static ShmMutex<u32> = Box::leak(Box::new(small()));
        drop(m.lock().unwrap()); // this process is participant 0
        m
    }

    #[test]
    fn woken_set_by_nobody_does_not_wedge_waiters() {
        // WOKEN alone, and WOKEN "owned" by an empty participant slot.
        for holder in [None, Some(1)] {
            let m = leaked();
            let g = m.lock().unwrap();
            let rx = queued_waiter(m);
            m.region.hdr().state.fetch_or(u64::from(WOKEN), SeqCst);
            if let Some(i) = holder {
                m.region.participant(i).woken.store(1, SeqCst);
            }
            drop(g); // a normal unlock: WOKEN set, so it wakes nobody
            let died = rx.recv_timeout(Duration::from_secs(1)).unwrap_or_else(|_| {
                panic!("holder {holder:?}: the waiter sleeps through a free lock")
            });
            assert!(!died);
        }
    }

    #[test]
    fn phantom_queued_slot_at_the_front_does_not_wedge_waiters() {
        // A queued slot naming a participant out of range, or an empty participant slot.
        for participant in [1000, 1] {
            let m = leaked();
            let g = m.lock().unwrap();
            let rx = queued_waiter(m);
            let r = &m.region;
            let free = (0..r.layout.waiter_slots)
                .find(|&i| r.slot(i).state.load(SeqCst) == SLOT_FREE)
                .unwrap();
            let s = r.slot(free);
            s.participant.store(participant, SeqCst);
            s.class.store(CLASS_FRONT, SeqCst);
            s.ticket.store(0, SeqCst);
            s.state.store(SLOT_QUEUED, SeqCst);
            drop(g); // the wake-up goes to the phantom
            let died = rx.recv_timeout(Duration::from_secs(1)).unwrap_or_else(|_| {
                panic!("participant {participant}: the waiter sleeps through a free lock")
            });
            assert!(!died);
        }
    }

    #[test]
    fn lock_held_by_nobody_is_taken_back() {
        // LOCKED with owner 0, an empty participant slot (index 1), an index out of range.
        for owner in [0, 2, 1000] {
            let m = leaked();
            m.region.hdr().state.store(word(LOCKED, owner), SeqCst);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let died = matches!(m.lock(), Err(crate::shm::LockError::OwnerDied(_)));
                let _ = tx.send(died);
            });
            let died = rx
                .recv_timeout(Duration::from_secs(1))
                .unwrap_or_else(|_| panic!("owner {owner}: the lock is never taken back"));
            assert!(died, "owner {owner}: the next owner must be told");
        }
    }
}
