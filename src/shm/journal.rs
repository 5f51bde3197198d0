//! The journal: a small futex lock (`jlock`) whose word names its holder, and a redo log in
//! the region. Every change of the state word other than the lock-free `LOCKED`/owner ones, every
//! change of the per-participant accounting and of the queue is one transaction ([`Txn`]): its
//! new values are written to the log, the log is marked committed, the word is CASed, the
//! values are applied, the log is cleared. Whoever takes the journal lock from a dead holder
//! replays a committed log (when the word CAS is found to have happened) or discards it.

use super::layout::*;
use super::region::{low, owner_tag, Participant, Region};
use super::sys;
use super::timing::TICK;
use crate::algo::{LOCKED, WOKEN};
use crate::crash;
use core::sync::atomic::Ordering::*;
use std::time::Instant;

/// The journal lock's contended bit.
const J_CONTENDED: u32 = 1 << 31;
/// Log states.
const LOG_EMPTY: u32 = 0;
const LOG_COMMITTED: u32 = 1;
/// `Log::has_word` of a transaction whose commit point is a slot CAS (`Txn::pivot`).
const LOG_PIVOT: u32 = 2;
/// Bits of the word that change only under the journal lock (Go's state without `LOCKED`).
const NONLOCK: u64 = 0xffff_fffe;

/// A field a transaction may write. Only fields that change exclusively under the journal lock
/// (so that replaying absolute values is idempotent), plus slot states (applied as
/// `QUEUED -> token` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    Registered(u32),
    Woken(u32),
    OwesNormal(u32),
    OwesHandoff(u32),
    Handoff(u32),
    StoredNormal,
    StoredHandoff,
    OwnerDeaths,
    SlotToken(u32),
    /// Abandoned registrations / `WOKEN`s of a participant settled so far.
    AbRegDone(u32),
    AbWokenDone(u32),
}

impl Target {
    /// Participant `p`'s count of tokens owed (taken a wake-up decision for, not delivered).
    pub(super) fn owed(p: u32, handoff: bool) -> Self {
        if handoff {
            Target::OwesHandoff(p)
        } else {
            Target::OwesNormal(p)
        }
    }

    /// The count of stored tokens of a kind.
    pub(super) fn stored(handoff: bool) -> Self {
        if handoff {
            Target::StoredHandoff
        } else {
            Target::StoredNormal
        }
    }

    fn encode(self) -> u32 {
        let (k, i) = match self {
            Target::Registered(i) => (1, i),
            Target::Woken(i) => (2, i),
            Target::OwesNormal(i) => (3, i),
            Target::OwesHandoff(i) => (4, i),
            Target::Handoff(i) => (5, i),
            Target::StoredNormal => (6, 0),
            Target::StoredHandoff => (7, 0),
            Target::OwnerDeaths => (8, 0),
            Target::SlotToken(i) => (9, i),
            Target::AbRegDone(i) => (10, i),
            Target::AbWokenDone(i) => (11, i),
        };
        (k << 24) | i
    }
    fn decode(v: u32) -> Option<Self> {
        let i = v & 0xff_ffff;
        Some(match v >> 24 {
            1 => Target::Registered(i),
            2 => Target::Woken(i),
            3 => Target::OwesNormal(i),
            4 => Target::OwesHandoff(i),
            5 => Target::Handoff(i),
            6 => Target::StoredNormal,
            7 => Target::StoredHandoff,
            8 => Target::OwnerDeaths,
            9 => Target::SlotToken(i),
            10 => Target::AbRegDone(i),
            11 => Target::AbWokenDone(i),
            _ => return None,
        })
    }
}

/// A journal transaction being built (only while holding the journal lock).
pub(super) struct Txn {
    pub(super) word: Option<(u64, u64)>,
    /// Instead of a word CAS, the transaction's commit point may be taking a token back from
    /// a waiter slot: `(slot, token state, ticket)`, CASed to `SLOT_PARKED` (see
    /// `queue::pass_on`). At most one of `word` and `pivot`.
    pub(super) pivot: Option<(u32, u32, u64)>,
    n: usize,
    ents: [(Target, u64); LOG_ENTRIES],
    /// A slot to wake after commit.
    pub(super) wake: Option<u32>,
    /// A token was stored: wake slot-less waiters after commit.
    pub(super) stored: bool,
}

impl Txn {
    pub(super) fn new() -> Self {
        Self {
            word: None,
            pivot: None,
            n: 0,
            ents: [(Target::StoredNormal, 0); LOG_ENTRIES],
            wake: None,
            stored: false,
        }
    }

    pub(super) fn set(&mut self, t: Target, v: u64) {
        for e in &mut self.ents[..self.n] {
            if e.0 == t {
                e.1 = v;
                return;
            }
        }
        assert!(self.n < LOG_ENTRIES, "gomutex::shm: transaction too large");
        self.ents[self.n] = (t, v);
        self.n += 1;
    }

    /// Make the word CAS (from `cur`) clear `WOKEN`, if it is set.
    pub(super) fn clear_woken(&mut self, cur: u64) {
        if low(cur) & WOKEN != 0 {
            self.word = Some((cur, cur & !u64::from(WOKEN)));
        }
    }

    /// Add `delta` to a counter (saturating at 0), relative to its value in this transaction.
    pub(super) fn add(&mut self, r: &Region, t: Target, delta: i64) {
        let cur = self.ents[..self.n]
            .iter()
            .find(|e| e.0 == t)
            .map_or_else(|| read_target(r, t), |e| e.1);
        self.set(t, (cur as i64 + delta).max(0) as u64);
    }
}

fn read_target(r: &Region, t: Target) -> u64 {
    match t {
        Target::Registered(i) => r.participant(i).registered.load(SeqCst).into(),
        Target::Woken(i) => r.participant(i).woken.load(SeqCst).into(),
        Target::OwesNormal(i) => r.participant(i).owes_normal.load(SeqCst).into(),
        Target::OwesHandoff(i) => r.participant(i).owes_handoff.load(SeqCst).into(),
        Target::Handoff(i) => r.participant(i).handoff.load(SeqCst).into(),
        Target::StoredNormal => r.hdr().stored_normal.load(SeqCst).into(),
        Target::StoredHandoff => r.hdr().stored_handoff.load(SeqCst).into(),
        Target::OwnerDeaths => r.hdr().owner_deaths.load(SeqCst),
        Target::SlotToken(i) => r.slot(i).state.load(SeqCst).into(),
        Target::AbRegDone(i) => r.participant(i).ab_reg_done.load(SeqCst).into(),
        Target::AbWokenDone(i) => r.participant(i).ab_woken_done.load(SeqCst).into(),
    }
}

fn apply_target(r: &Region, t: Target, v: u64) {
    let v32 = v as u32;
    match t {
        Target::Registered(i) => r.participant(i).registered.store(v32, SeqCst),
        Target::Woken(i) => r.participant(i).woken.store(v32, SeqCst),
        Target::OwesNormal(i) => r.participant(i).owes_normal.store(v32, SeqCst),
        Target::OwesHandoff(i) => r.participant(i).owes_handoff.store(v32, SeqCst),
        Target::Handoff(i) => r.participant(i).handoff.store(v32, SeqCst),
        Target::StoredNormal => r.hdr().stored_normal.store(v32, SeqCst),
        Target::StoredHandoff => r.hdr().stored_handoff.store(v32, SeqCst),
        Target::OwnerDeaths => r.hdr().owner_deaths.store(v, SeqCst),
        Target::SlotToken(i) => {
            // Only a queued slot receives a token: if a replay finds the slot already free,
            // its sleeper consumed the token before the writer died.
            let s = r.slot(i);
            if s.state
                .compare_exchange(SLOT_QUEUED, v32, SeqCst, SeqCst)
                .is_ok()
            {
                s.token_at.store(sys::mono_ns(), Relaxed);
            }
        }
        Target::AbRegDone(i) => r.participant(i).ab_reg_done.store(v32, SeqCst),
        Target::AbWokenDone(i) => r.participant(i).ab_woken_done.store(v32, SeqCst),
    }
}

/// What the layers above the journal do around it (implemented by `recovery`, the top one):
/// the journal, and the queue below recovery, call up only through this.
pub(super) trait Hooks {
    /// The journal lock was just taken: settle what participants gave up without it
    /// (`queue::settle_abandoned`).
    fn on_lock(&self, after: &mut AfterJournal);
    /// The journal lock was just released, with `after`'s wake-ups done: the rest of a release
    /// made on a dead owner's behalf, then a wake-up if the lock is free and nobody will give
    /// one.
    fn after_unlock(&self, released: Option<u32>, wake_if_stranded: bool);
    /// Look for dead participants, if nobody did recently (`recovery`).
    fn probe(&self);
}

/// Work left for after the journal lock is released (the holder's [`JGuard`] does it when
/// dropped): wake the sleepers its transactions delivered tokens to, and what
/// [`Hooks::after_unlock`] does.
#[derive(Default)]
pub(super) struct AfterJournal {
    wakes: [Option<u32>; 8],
    n_wakes: usize,
    stored: bool,
    /// Finish a release made on a dead owner's behalf: the rest of Go's `Unlock` after the
    /// subtraction left this state ([`crate::algo::unlock_released`]).
    pub(super) released: Option<u32>,
    /// Wake a sleeper if the lock is free and nobody will (a `WOKEN` was dropped).
    pub(super) wake_if_stranded: bool,
}

impl AfterJournal {
    /// Wake, after the journal lock, whom the committed transaction `tx` delivered to.
    pub(super) fn absorb(&mut self, r: &Region, tx: &Txn) {
        self.stored |= tx.stored;
        if let Some(w) = tx.wake {
            if self.n_wakes == self.wakes.len() {
                self.wake(r);
            }
            self.wakes[self.n_wakes] = Some(w);
            self.n_wakes += 1;
        }
    }

    /// The wake-ups so far: each slot a token went to, and the slot-less waiters if a token
    /// was stored.
    fn wake(&mut self, r: &Region) {
        for w in self.wakes[..self.n_wakes].iter_mut() {
            if let Some(i) = w.take() {
                sys::futex_wake(&r.slot(i).state, 1);
            }
        }
        self.n_wakes = 0;
        if self.stored {
            self.stored = false;
            let h = r.hdr();
            h.overflow_seq.fetch_add(1, SeqCst);
            if h.overflow_waiters.load(SeqCst) != 0 {
                sys::futex_wake(&h.overflow_seq, i32::MAX);
            }
        }
    }
}

/// The journal lock, held. Dropping it releases the lock, then does the work left in
/// [`JGuard::after`].
pub(super) struct JGuard<'a> {
    ctx: Participant<'a>,
    after: AfterJournal,
}

impl JGuard<'_> {
    /// What to do once the lock is released.
    pub(super) fn after(&mut self) -> &mut AfterJournal {
        &mut self.after
    }
}

impl Drop for JGuard<'_> {
    fn drop(&mut self) {
        let j = &self.ctx.r.hdr().jlock;
        if j.swap(0, Release) & J_CONTENDED != 0 {
            sys::futex_wake(j, 1);
        }
        let a = &mut self.after;
        if a.n_wakes != 0 || a.stored || a.released.is_some() || a.wake_if_stranded {
            let mut a = core::mem::take(a);
            a.wake(self.ctx.r);
            if a.released.is_some() || a.wake_if_stranded {
                self.ctx.after_unlock(a.released, a.wake_if_stranded);
            }
        }
    }
}

impl<'a> Participant<'a> {
    /// The journal lock, waiting as long as it takes (for a holder that is stopped, until it
    /// continues; a dead holder is taken over). For callers that must hand back what they hold
    /// (an unlock's delivery, a hand-off's fix-up) and callers without a deadline.
    pub(super) fn jlock(&self) -> JGuard<'a> {
        match self.jlock_by(None) {
            Some(g) => g,
            None => unreachable!("an untimed journal-lock wait never times out"),
        }
    }

    /// The journal lock, or `None` once `deadline` passed (nothing written then).
    pub(super) fn jlock_by(&self, deadline: Option<Instant>) -> Option<JGuard<'a>> {
        let j = &self.r.hdr().jlock;
        let tag = self.tag();
        // AcqRel, not just Acquire: a taker that later finds the holder dead re-checks the
        // holder's identity after its own CAS; with the acquiring CASes also releasing, every
        // holder's CAS is a release the takeover's RMW chain synchronises with, so that
        // re-check is formally ordered after it (on x86 it is the same instruction).
        if j.compare_exchange(0, tag, AcqRel, Relaxed).is_ok() {
            return Some(self.held());
        }
        self.jlock_slow(tag, false, deadline)
    }

    /// The journal lock, for a process that has just taken over this participant index from
    /// its dead previous user ([`Participant::adopt`]): a journal-lock word naming this index was left
    /// by that dead user (no other thread uses the index meanwhile), so it is taken over at
    /// once; every other holder is treated as by [`Participant::jlock`].
    pub(super) fn jlock_adopting(&self) -> JGuard<'a> {
        let j = &self.r.hdr().jlock;
        let tag = self.tag();
        if j.compare_exchange(0, tag, AcqRel, Relaxed).is_ok() {
            return self.held();
        }
        match self.jlock_slow(tag, true, None) {
            Some(g) => g,
            None => unreachable!("an untimed journal-lock wait never times out"),
        }
    }

    /// The guard of a journal lock just taken: first settle what participants gave up without
    /// it ([`Hooks::on_lock`]).
    fn held(&self) -> JGuard<'a> {
        let mut g = JGuard {
            ctx: *self,
            after: AfterJournal::default(),
        };
        if self.r.hdr().abandoned.load(SeqCst) != 0 {
            self.on_lock(&mut g.after);
        }
        g
    }

    #[cold]
    fn jlock_slow(
        &self,
        tag: u32,
        adopting: bool,
        deadline: Option<Instant>,
    ) -> Option<JGuard<'a>> {
        let j = &self.r.hdr().jlock;
        for _ in 0..64 {
            if j.load(Relaxed) == 0 && j.compare_exchange(0, tag, AcqRel, Relaxed).is_ok() {
                return Some(self.held());
            }
            core::hint::spin_loop();
        }
        // The holder is looked at once it has held the lock for TICK, timed from a fixed point:
        // a wait cut short (EINTR from a periodic signal handler) must not restart the 10 ms,
        // or a dead holder is never taken over. Progress (another holder) restarts it.
        let mut watched = 0;
        let mut check_at = Instant::now() + TICK;
        loop {
            let mut cur = j.load(Relaxed);
            if cur == 0 {
                // We may have shared the contended bit with other sleepers: keep it.
                if j.compare_exchange(0, tag | J_CONTENDED, AcqRel, Relaxed)
                    .is_ok()
                {
                    return Some(self.held());
                }
                continue;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            if cur & J_CONTENDED == 0 {
                if j.compare_exchange(cur, cur | J_CONTENDED, Relaxed, Relaxed)
                    .is_err()
                {
                    continue;
                }
                cur |= J_CONTENDED;
            }
            let holder = (cur & !J_CONTENDED).wrapping_sub(1);
            if (adopting && holder == self.me) || holder >= self.r.layout.participants {
                // Left by the dead previous user of our index (see `jlock_adopting`), or a word
                // naming no participant at all (written by a faulty peer): nobody will release
                // it, take it over at once.
                if j.compare_exchange(cur, tag | J_CONTENDED, SeqCst, Relaxed)
                    .is_ok()
                {
                    self.took_over();
                    return Some(self.held());
                }
                continue;
            }
            if cur & !J_CONTENDED != watched {
                watched = cur & !J_CONTENDED;
                check_at = Instant::now() + TICK;
            }
            let wake_at = deadline.map_or(check_at, |d| d.min(check_at));
            sys::futex_wait(j, cur, Some(wake_at));
            if Instant::now() >= check_at {
                check_at = Instant::now() + TICK;
                if holder != self.me {
                    let ident = self.r.participant(holder).ident.load(SeqCst);
                    if ident != 0
                        && self.r.participant(holder).dead(ident)
                        && j.compare_exchange(cur, tag | J_CONTENDED, SeqCst, Relaxed)
                            .is_ok()
                    {
                        // ABA: while we were looking at /proc (or preempted), someone may have
                        // taken over from the dead holder, freed its participant slot, and a new
                        // process claimed it and now holds the journal lock with the same word.
                        // The dead identity never comes back, so if the slot still holds it, the
                        // word we replaced was the dead holder's. If not, give the word back
                        // (it fails only if the live holder released meanwhile) and go on
                        // waiting; we wrote nothing in between.
                        if self.r.participant(holder).ident.load(SeqCst) != ident {
                            let _ = j.compare_exchange(tag | J_CONTENDED, cur, SeqCst, Relaxed);
                            continue;
                        }
                        self.took_over();
                        return Some(self.held());
                    }
                }
            }
        }
    }

    /// The journal lock was just taken from a dead holder: finish or drop its transaction, and
    /// have the next probe clean up the rest of what it left.
    fn took_over(&self) {
        self.r.hdr().rec[rec::JOURNAL_TAKEOVERS].fetch_add(1, Relaxed);
        self.replay();
        self.r.hdr().scan_at.store(0, SeqCst);
    }

    /// Complete (or discard) the transaction a dead journal-lock holder left in the log.
    fn replay(&self) {
        let log = &self.r.hdr().log;
        if log.state.load(Acquire) != LOG_COMMITTED {
            return;
        }
        let has_word = log.has_word.load(SeqCst);
        let apply = if has_word == LOG_PIVOT {
            // A token taken back from a slot: done if the slot is parked (or queued again by
            // its sleeper) with the same ticket. Before the CAS it held the token, and a token
            // leaves a slot otherwise only by its sleeper taking it (the slot is then free, or
            // queued again with a later ticket).
            let old = log.word_old.load(SeqCst);
            let i = old as u32;
            i < self.r.layout.waiter_slots && {
                let s = self.r.slot(i);
                matches!(s.state.load(SeqCst), SLOT_PARKED | SLOT_QUEUED)
                    && s.ticket.load(SeqCst) == log.word_new.load(SeqCst)
            }
        } else if has_word != 0 {
            let old = log.word_old.load(SeqCst);
            let new = log.word_new.load(SeqCst);
            let cur = self.r.hdr().state.load(SeqCst);
            if old & NONLOCK != new & NONLOCK {
                // Only the journal-lock holder changes these bits.
                cur & NONLOCK == new & NONLOCK
            } else {
                // An ownership release (LOCKED + owner -> 0): done unless the same owner still
                // holds (no one else can make that owner hold again: it is dead).
                !(low(cur) & LOCKED != 0 && owner_tag(cur) == owner_tag(old))
            }
        } else {
            true
        };
        if apply {
            self.r.hdr().rec[rec::JOURNAL_REPLAYS].fetch_add(1, Relaxed);
            let n = (log.n.load(SeqCst) as usize).min(LOG_ENTRIES);
            for e in &log.entries[..n] {
                if let Some(t) = Target::decode(e.target.load(SeqCst)) {
                    if self.target_in_range(t) {
                        apply_target(self.r, t, e.value.load(SeqCst));
                    }
                }
            }
        }
        log.state.store(LOG_EMPTY, Release);
    }

    fn target_in_range(&self, t: Target) -> bool {
        let l = &self.r.layout;
        match t {
            Target::Registered(i)
            | Target::Woken(i)
            | Target::OwesNormal(i)
            | Target::OwesHandoff(i)
            | Target::Handoff(i) => i < l.participants,
            Target::AbRegDone(i) | Target::AbWokenDone(i) => i < l.participants,
            Target::SlotToken(i) => i < l.waiter_slots,
            _ => true,
        }
    }

    /// Commit a transaction (journal lock held). `false` if its word CAS failed (nothing
    /// written).
    pub(super) fn commit(&self, tx: &Txn) -> bool {
        let log = &self.r.hdr().log;
        for (e, &(t, v)) in log.entries.iter().zip(&tx.ents[..tx.n]) {
            e.target.store(t.encode(), Relaxed);
            e.value.store(v, Relaxed);
        }
        log.n.store(tx.n as u32, Relaxed);
        if let Some((old, new)) = tx.word {
            log.has_word.store(1, Relaxed);
            log.word_old.store(old, Relaxed);
            log.word_new.store(new, Relaxed);
        } else if let Some((i, v, ticket)) = tx.pivot {
            log.has_word.store(LOG_PIVOT, Relaxed);
            log.word_old
                .store(u64::from(i) | (u64::from(v) << 32), Relaxed);
            log.word_new.store(ticket, Relaxed);
        } else {
            log.has_word.store(0, Relaxed);
        }
        log.state.store(LOG_COMMITTED, SeqCst);
        crash::point(crash::LOG_COMMITTED);
        if let Some((old, new)) = tx.word {
            if self
                .r
                .hdr()
                .state
                .compare_exchange(old, new, SeqCst, SeqCst)
                .is_err()
            {
                log.state.store(LOG_EMPTY, SeqCst);
                return false;
            }
            crash::point(crash::WORD_CHANGED);
        } else if let Some((i, v, _)) = tx.pivot {
            if self
                .r
                .slot(i)
                .state
                .compare_exchange(v, SLOT_PARKED, SeqCst, SeqCst)
                .is_err()
            {
                log.state.store(LOG_EMPTY, SeqCst);
                return false;
            }
        }
        for &(t, v) in &tx.ents[..tx.n] {
            apply_target(self.r, t, v);
        }
        crash::point(crash::APPLIED);
        log.state.store(LOG_EMPTY, Release);
        true
    }
}
