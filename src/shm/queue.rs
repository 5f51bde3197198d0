//! The waiter queue in the region: one futex word per sleeping thread, in fixed slots
//! addressed by index, served front class (Go's re-queued waiters) first, then FIFO by ticket;
//! tokens released while nobody sleeps are stored and taken by the next waiter. Implements
//! Go's [`WaitQueue`] for [`Ctx`].

use super::journal::{Post, Target, Txn};
use super::layout::*;
use super::region::{Ctx, Region};
use super::sys::{self, crash};
use crate::sema::WaitQueue;
use core::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

/// A sleeping waiter wakes at least this often to look for dead participants.
pub(crate) const TICK: Duration = Duration::from_millis(10);

/// Add to `tx` participant `p` taking a stored token, if there is one (a hand-off first): the
/// token's accounting moves to `p` as if it had been delivered to its slot. `false` if none.
pub(super) fn take_stored_for(r: &Region, tx: &mut Txn, p: u32) -> bool {
    let h = r.hdr();
    if h.stored_handoff.load(SeqCst) > 0 {
        tx.add(r, Target::StoredHandoff, -1);
        tx.add(r, Target::Handoff(p), 1);
    } else if h.stored_normal.load(SeqCst) > 0 {
        tx.add(r, Target::StoredNormal, -1);
        tx.add(r, Target::Registered(p), -1);
        tx.add(r, Target::Woken(p), 1);
    } else {
        return false;
    }
    true
}

impl Ctx<'_> {
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
                let p = self.r.slot(i).proc.load(SeqCst);
                if handoff {
                    tx.set(Target::SlotToken(i), SLOT_TOKEN_HANDOFF.into());
                    if p < self.r.layout.participants {
                        tx.add(self.r, Target::Handoff(p), 1);
                    }
                } else {
                    tx.set(Target::SlotToken(i), SLOT_TOKEN_NORMAL.into());
                    if p < self.r.layout.participants {
                        tx.add(self.r, Target::Registered(p), -1);
                        tx.add(self.r, Target::Woken(p), 1);
                    }
                }
                tx.wake = Some(i);
            }
            None => {
                let t = if handoff {
                    Target::StoredHandoff
                } else {
                    Target::StoredNormal
                };
                tx.add(self.r, t, 1);
                tx.stored = true;
            }
        }
    }

    pub(super) fn flush_wakes(&self, post: &mut Post) {
        for w in post.wakes[..post.n_wakes].iter_mut() {
            if let Some(i) = w.take() {
                sys::futex_wake(&self.r.slot(i).state, 1);
            }
        }
        post.n_wakes = 0;
        if post.stored {
            post.stored = false;
            let h = self.r.hdr();
            h.overflow_seq.fetch_add(1, SeqCst);
            if h.overflow_waiters.load(SeqCst) != 0 {
                sys::futex_wake(&h.overflow_seq, i32::MAX);
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
            if v >= SLOT_TOKEN_NORMAL {
                s.state.store(SLOT_FREE, Release);
                sys::crash_point(crash::TOKEN_TAKEN);
                return true;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                let _g = self.jlock();
                let v = s.state.load(Acquire);
                s.state.store(SLOT_FREE, Release);
                return v >= SLOT_TOKEN_NORMAL;
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
}

impl WaitQueue for Ctx<'_> {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        let h = self.r.hdr();
        let mut probe_at: Option<Instant> = None;
        loop {
            let (slot, seq) = {
                let _g = self.jlock();
                if self.take_stored() {
                    return true;
                }
                let free = (0..self.r.layout.waiter_slots)
                    .find(|&i| self.r.slot(i).state.load(SeqCst) == SLOT_FREE);
                match free {
                    Some(i) => {
                        let s = self.r.slot(i);
                        s.proc.store(self.me, SeqCst);
                        s.class
                            .store(if lifo { CLASS_FRONT } else { CLASS_BACK }, SeqCst);
                        s.ticket.store(h.next_ticket.fetch_add(1, SeqCst), SeqCst);
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

    fn release(&self, handoff: bool) {
        sys::crash_point(if handoff {
            crash::OWES_HANDOFF
        } else {
            crash::OWES_WAKEUP
        });
        let mut post = Post::default();
        {
            let _g = self.jlock();
            let mut tx = Txn::new();
            tx.add(self.r, Target::owed(self.me, handoff), -1);
            self.deliver(&mut tx, handoff);
            self.commit(&tx);
            post.absorb(self, &tx);
        }
        self.flush_wakes(&mut post);
    }
}
