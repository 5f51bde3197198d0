//! The waiter queue in the region: one futex word per sleeping thread, in fixed slots
//! addressed by index, served front class (Go's re-queued waiters) first, then FIFO by ticket;
//! tokens released while nobody sleeps are stored and taken by the next waiter. Implements
//! Go's [`WaitQueue`] for [`Participant`].

use super::identity;
use super::journal::{AfterJournal, Hooks, Target, Txn};
use super::layout::*;
use super::region::{low, owner_tag, word, Participant, Region};
use super::sys;
use super::timing::{JLOCK_GRACE, PASS_ANY, PASS_STOPPED, TICK};
use crate::algo;
use crate::crash;
use crate::sema::WaitQueue;
use core::sync::atomic::Ordering::*;
use std::time::Instant;

/// Add to `tx` a token reaching participant `p` (`n = 1`) or taken back from it (`n = -1`): a
/// hand-off is held until it takes ownership; a wake-up turns one of its registrations into
/// `WOKEN`.
pub(super) fn account_token(r: &Region, tx: &mut Txn, p: u32, handoff: bool, n: i64) {
    if handoff {
        tx.add(r, Target::Handoff(p), n);
    } else {
        tx.add(r, Target::Registered(p), -n);
        tx.add(r, Target::Woken(p), n);
    }
}

/// Add to `tx` participant `p` taking a stored token, if there is one (a hand-off first): the
/// token's accounting moves to `p` as if it had been delivered to its slot. `false` if none.
pub(super) fn take_stored_for(r: &Region, tx: &mut Txn, p: u32) -> bool {
    let h = r.hdr();
    let handoff = h.stored_handoff.load(SeqCst) > 0;
    if !handoff && h.stored_normal.load(SeqCst) == 0 {
        return false;
    }
    tx.add(r, Target::stored(handoff), -1);
    account_token(r, tx, p, handoff, 1);
    true
}

impl Participant<'_> {
    /// Hand a token to the front sleeper (front class first, then FIFO), or store it.
    pub(super) fn deliver(&self, tx: &mut Txn, handoff: bool) {
        let mut best: Option<(u32, u32, u64)> = None; // (slot, class, ticket)
        for i in 0..self.r.layout.waiter_slots {
            let s = self.r.slot(i);
            if s.state.load(SeqCst) != SLOT_QUEUED {
                continue;
            }
            let class = s.class.load(SeqCst);
            let ticket = s.ticket.load(SeqCst);
            let better = match best {
                None => true,
                Some((_, bc, bt)) => class > bc || (class == bc && ticket < bt),
            };
            if better {
                best = Some((i, class, ticket));
            }
        }
        match best {
            Some((i, _, _)) => {
                let p = self.r.slot(i).participant.load(SeqCst);
                let token = if handoff {
                    SLOT_TOKEN_HANDOFF
                } else {
                    SLOT_TOKEN_NORMAL
                };
                tx.set(Target::SlotToken(i), token.into());
                if p < self.r.layout.participants {
                    account_token(self.r, tx, p, handoff, 1);
                }
                tx.wake = Some(i);
            }
            None => {
                tx.add(self.r, Target::stored(handoff), 1);
                tx.stored = true;
            }
        }
    }

    /// Consume a stored token, if any (journal lock held).
    fn take_stored(&self) -> bool {
        let mut tx = Txn::new();
        take_stored_for(self.r, &mut tx, self.me) && self.commit(&tx)
    }

    fn sleep_in_slot(&self, i: u32, deadline: Option<Instant>) -> bool {
        let s = self.r.slot(i);
        // Probe every TICK of sleep, timed from a fixed point: a wait cut short (EINTR from a
        // periodic signal handler, a stale wake-up meant for a former user of the slot) must
        // not restart the 10 ms, or a waiter under a profiler's timer never probes.
        let mut probe_at = Instant::now() + TICK;
        loop {
            let v = s.state.load(Acquire);
            if v == SLOT_TOKEN_NORMAL || v == SLOT_TOKEN_HANDOFF {
                // A CAS: a token we were too slow to pick up may be taken back (`pass_on`).
                if s.state
                    .compare_exchange(v, SLOT_FREE, Acquire, Acquire)
                    .is_ok()
                {
                    crash::point(crash::TOKEN_TAKEN);
                    return true;
                }
                continue;
            }
            let now = Instant::now();
            if let Some(d) = deadline.filter(|&d| now >= d) {
                // Leave the queue: under the journal lock, so that no token is delivered to the
                // slot meanwhile. If a stalled process holds it, leave the slot for the next
                // holder to free (passing on any token it receives).
                let Some(_g) = self.jlock_by(Some(d + JLOCK_GRACE)) else {
                    s.abandoned.store(1, SeqCst);
                    self.r.hdr().abandoned.fetch_add(1, SeqCst);
                    return false;
                };
                let v = s.state.load(Acquire);
                s.state.store(SLOT_FREE, Release);
                return v == SLOT_TOKEN_NORMAL || v == SLOT_TOKEN_HANDOFF;
            }
            if v == SLOT_PARKED {
                // We did not pick up a token in time and it was passed on: take a token stored
                // meanwhile (deliveries skipped us), or wait again in our place. Under the
                // journal lock, as when joining the queue.
                // (Past our deadline, the branch above leaves instead.)
                if let Some(_g) = self.jlock_by(deadline) {
                    if s.state.load(SeqCst) == SLOT_PARKED {
                        if self.take_stored() {
                            s.state.store(SLOT_FREE, Release);
                            return true;
                        }
                        s.state.store(SLOT_QUEUED, SeqCst);
                    }
                }
                continue;
            }
            if now >= probe_at {
                self.probe();
                probe_at = Instant::now() + TICK;
                continue; // the probe may have sent us a token
            }
            let wake_at = deadline.map_or(probe_at, |d| d.min(probe_at));
            sys::futex_wait(&s.state, SLOT_QUEUED, Some(wake_at));
        }
    }

    /// Take back the token waiting in slot `i` and deliver it to the next waiter (or store it),
    /// as one transaction whose commit point is the slot's `token -> SLOT_PARKED` CAS (journal
    /// lock held). `false` if the slot holds no token (or its sleeper took it first). The
    /// token's accounting moves from the slot's participant to the receiver; the parked sleeper,
    /// if it ever runs again, queues again in its place.
    pub(super) fn pass_on(&self, i: u32, after: &mut AfterJournal) -> bool {
        let s = self.r.slot(i);
        let v = s.state.load(SeqCst);
        if v != SLOT_TOKEN_NORMAL && v != SLOT_TOKEN_HANDOFF {
            return false;
        }
        let handoff = v == SLOT_TOKEN_HANDOFF;
        let p = s.participant.load(SeqCst);
        let mut tx = Txn::new();
        tx.pivot = Some((i, v, s.ticket.load(SeqCst)));
        if p < self.r.layout.participants {
            account_token(self.r, &mut tx, p, handoff, -1);
        }
        // Slot `i` is not queued: the token goes elsewhere.
        self.deliver(&mut tx, handoff);
        if self.commit(&tx) {
            after.absorb(self.r, &tx);
            true
        } else {
            false
        }
    }

    /// Pass on the tokens that sleepers did not pick up in time (see [`PASS_STOPPED`] and
    /// [`PASS_ANY`]): a stopped or exec'd process, or a thread that does not run, must not
    /// keep a free lock from the waiters behind it.
    pub(super) fn pass_on_stale(&self) {
        let now = sys::mono_ns();
        for i in 0..self.r.layout.waiter_slots {
            let s = self.r.slot(i);
            let v = s.state.load(SeqCst);
            if v != SLOT_TOKEN_NORMAL && v != SLOT_TOKEN_HANDOFF {
                continue;
            }
            let at = s.token_at.load(Relaxed);
            let age = now.saturating_sub(at);
            if age < PASS_STOPPED.as_nanos() as u64 {
                continue;
            }
            if age < PASS_ANY.as_nanos() as u64 {
                let p = s.participant.load(SeqCst);
                let gone = self.r.names_no_participant(p.wrapping_add(1))
                    || identity::ident_stopped(self.r.participant(p).ident.load(SeqCst));
                if !gone {
                    continue;
                }
            }
            let Some(mut g) = self.jlock_by(self.deadline) else {
                return;
            };
            // Still the same token (not taken and re-delivered meanwhile)?
            if s.state.load(SeqCst) == v && s.token_at.load(Relaxed) == at {
                self.pass_on(i, g.after());
            }
        }
    }

    /// Settle what participants gave up without the journal lock because their deadline
    /// passed while a stalled process held it (journal lock held; called by every taker while
    /// `Header::abandoned` is set): free their abandoned slots (passing on any token in them),
    /// drop the `WOKEN` they gave up, and let their given-up registrations leave the count (a
    /// stored token is as good as theirs; otherwise under `algo::deregistered`'s rule, or at a
    /// later taking of the journal lock).
    pub(super) fn settle_abandoned(&self, after: &mut AfterJournal) {
        let (r, h) = (self.r, self.r.hdr());
        loop {
            let seen = h.abandoned.load(SeqCst);
            if seen == 0 {
                return;
            }
            for i in 0..r.layout.waiter_slots {
                let s = r.slot(i);
                if s.abandoned.load(SeqCst) == 0 {
                    continue;
                }
                // Its sleeper is gone: a token in it goes to the next waiter.
                self.pass_on(i, after);
                s.state.store(SLOT_FREE, SeqCst);
                s.abandoned.store(0, SeqCst);
            }
            let mut settled = true;
            for p in 0..r.layout.participants {
                let pr = r.participant(p);
                loop {
                    let posted = pr.ab_woken_posted.load(SeqCst);
                    if pr.ab_woken_done.load(SeqCst) == posted {
                        break;
                    }
                    let cur = h.state.load(SeqCst);
                    let mut tx = Txn::new();
                    tx.set(Target::AbWokenDone(p), posted.into());
                    if pr.woken.load(SeqCst) > 0 {
                        tx.add(r, Target::Woken(p), -1);
                        tx.clear_woken(cur);
                    }
                    if self.commit(&tx) {
                        after.wake_if_stranded = true;
                    }
                }
                loop {
                    let done = pr.ab_reg_done.load(SeqCst);
                    if done == pr.ab_reg_posted.load(SeqCst) {
                        break;
                    }
                    let cur = h.state.load(SeqCst);
                    let mut tx = Txn::new();
                    tx.set(Target::AbRegDone(p), done.wrapping_add(1).into());
                    if pr.registered.load(SeqCst) == 0 || algo::waiters(low(cur)) == 0 {
                        // Nothing of it is counted (a count written by a faulty peer): done.
                    } else if h.stored_normal.load(SeqCst) > 0 {
                        // It takes the stored wake-up and drops the `WOKEN` it carries at once.
                        tx.add(r, Target::StoredNormal, -1);
                        tx.add(r, Target::Registered(p), -1);
                        tx.clear_woken(cur);
                        after.wake_if_stranded = true;
                    } else if let Some(new_low) = algo::deregistered(low(cur)) {
                        tx.word = Some((cur, word(new_low, owner_tag(cur))));
                        tx.add(r, Target::Registered(p), -1);
                    } else {
                        // A token in flight needs it counted: a later taker settles it.
                        settled = false;
                        break;
                    }
                    self.commit(&tx);
                }
            }
            if !settled
                || h.abandoned
                    .compare_exchange(seen, 0, SeqCst, SeqCst)
                    .is_ok()
            {
                return;
            }
        }
    }

    /// Give up this thread's registration (see [`WaitQueue::give_up`]) once its deadline is
    /// [`JLOCK_GRACE`] past.
    fn give_up_registration(&self) -> bool {
        if self
            .deadline
            .is_none_or(|d| Instant::now() < d + JLOCK_GRACE)
        {
            return false;
        }
        self.r
            .participant(self.me)
            .ab_reg_posted
            .fetch_add(1, SeqCst);
        self.r.hdr().abandoned.fetch_add(1, SeqCst);
        true
    }
}

impl WaitQueue for Participant<'_> {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        let h = self.r.hdr();
        let mut probe_at: Option<Instant> = None;
        loop {
            let (slot, seq) = {
                let Some(_g) = self.jlock_by(deadline) else {
                    return false;
                };
                if self.take_stored() {
                    return true;
                }
                let free = (0..self.r.layout.waiter_slots)
                    .find(|&i| self.r.slot(i).state.load(SeqCst) == SLOT_FREE);
                match free {
                    Some(i) => {
                        let s = self.r.slot(i);
                        s.participant.store(self.me, SeqCst);
                        s.class
                            .store(if lifo { CLASS_FRONT } else { CLASS_BACK }, SeqCst);
                        s.ticket.store(h.next_ticket.fetch_add(1, SeqCst), SeqCst);
                        s.abandoned.store(0, SeqCst);
                        s.state.store(SLOT_QUEUED, SeqCst);
                        (Some(i), 0)
                    }
                    None => (None, h.overflow_seq.load(SeqCst)),
                }
            };
            if let Some(i) = slot {
                return self.sleep_in_slot(i, deadline);
            }
            // No free slot: wait for a token to be stored (no FIFO order among these waiters).
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return false;
            }
            // Probe every TICK from a fixed point (see `sleep_in_slot`).
            let at = *probe_at.get_or_insert(now + TICK);
            if now >= at {
                self.probe();
                probe_at = Some(Instant::now() + TICK);
                continue;
            }
            h.overflow_waiters.fetch_add(1, SeqCst);
            sys::futex_wait(
                &h.overflow_seq,
                seq,
                Some(deadline.map_or(at, |d| d.min(at))),
            );
            h.overflow_waiters.fetch_sub(1, SeqCst);
        }
    }

    fn give_up(&self) -> bool {
        self.give_up_registration()
    }

    fn release(&self, handoff: bool) {
        crash::point(if handoff {
            crash::OWES_HANDOFF
        } else {
            crash::OWES_WAKEUP
        });
        let mut g = self.jlock();
        let mut tx = Txn::new();
        tx.add(self.r, Target::owed(self.me, handoff), -1);
        self.deliver(&mut tx, handoff);
        self.commit(&tx);
        g.after().absorb(self.r, &tx);
    }
}
