//! Go's state word ([`StateWord`]) on the region's 64-bit word, for [`crate::algo`]: the lock's
//! fast paths, and every other change as one journal transaction.
//!
//! # Who changes what
//!
//! The 64-bit state word holds Go's 32-bit state in its low half and the owner (participant
//! index + 1) in its high half, so taking the lock and recording the owner are one atomic
//! operation, and so are releasing it and clearing the owner.
//!
//! * **Lock-free** (the fast paths): `0 -> LOCKED`, `old -> old | LOCKED` (barging in normal
//!   mode, `try_lock`), and the normal-mode unlock `-LOCKED`. These change only `LOCKED` and
//!   the owner.
//! * **Under the journal lock** (`jlock`, a small futex lock whose word names its holder):
//!   every other change of the word (waiter registration, `WOKEN`, `STARVING`, the hand-off
//!   fix-up, a starving unlock), every change of the per-participant accounting, the queue
//!   (waiter slots, stored tokens) and recovery. Each such change is one *transaction*: the
//!   new values are written to a redo log in the region, the log is marked committed, the
//!   word is CASed, the values are applied, the log is cleared. If the holder dies, whoever
//!   takes the journal lock from it replays a committed log (when the word CAS is found to have
//!   happened; only the lock holder changes the non-`LOCKED` bits, so that is decidable) or
//!   discards it.
//!
//! (See `journal` for transactions and `recovery` for what the accounting lets survivors undo.)

use super::journal::{Target, Txn};
use super::region::{low, owner_tag, word, Participant};
use super::timing::JLOCK_GRACE;
use crate::algo::{self, CasError, StateWord, LOCKED, STARVING, WOKEN};
use core::sync::atomic::Ordering::*;

std::thread_local! {
    /// The word this thread's last fast unlock left (free, owner 0): the next lock's guess.
    /// Only a guess (shared by every region the thread uses): a wrong one costs a failed CAS.
    static LAST_RELEASED: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

impl Participant<'_> {
    /// The word that replaces `cur` when this participant changes Go's state to `new`: the
    /// owner stays while the lock stays held, becomes us when we take it, and is cleared when
    /// it is released.
    fn successor(&self, cur: u64, new: u32) -> u64 {
        let owner = match (low(cur) & LOCKED != 0, new & LOCKED != 0) {
            (true, true) => owner_tag(cur),
            (false, true) => self.tag(),
            _ => 0,
        };
        word(new, owner)
    }

    /// Accounting for one of Go's compare-and-swaps, classified by what it changes (in Go's
    /// code only the `WOKEN` owner clears `WOKEN`, only an unlocker removes a waiter while
    /// setting `WOKEN`, only a newcomer adds one, and so on).
    fn account_cas(&self, tx: &mut Txn, old: u32, new: u32) {
        let r = self.r;
        let dn = i64::from(algo::waiters(new)) - i64::from(algo::waiters(old));
        let dw = i64::from((new & WOKEN) >> 1) - i64::from((old & WOKEN) >> 1);
        match (dn, dw) {
            (1, _) => {
                tx.add(r, Target::Registered(self.me), 1);
                if dw < 0 {
                    tx.add(r, Target::Woken(self.me), -1);
                }
            }
            (-1, 1) => tx.add(r, Target::OwesNormal(self.me), 1),
            (-1, _) => tx.add(r, Target::Registered(self.me), -1),
            (0, 1) => tx.add(r, Target::Woken(self.me), 1),
            (0, -1) => tx.add(r, Target::Woken(self.me), -1),
            _ => {}
        }
    }
}

impl StateWord for Participant<'_> {
    const ACROSS_PROCESSES: bool = true;

    #[inline]
    fn load(&self) -> u32 {
        low(self.r.hdr().state.load(Relaxed))
    }

    #[inline]
    fn try_acquire_fast(&self) -> bool {
        self.r
            .hdr()
            .state
            .compare_exchange(0, word(LOCKED, self.tag()), Acquire, Relaxed)
            .is_ok()
    }

    #[inline]
    fn cas(&self, old: u32, new: u32) -> Result<u32, CasError> {
        let st = &self.r.hdr().state;
        if old & LOCKED == 0 && new == old | LOCKED {
            // Barging acquisition: only LOCKED and the owner change, lock-free. No load first:
            // the owner half is 0 whenever LOCKED is clear, so the expected word is known, and
            // a failed CAS returns the current one.
            let mut cur = word(old, 0);
            loop {
                match st.compare_exchange(cur, word(new, self.tag()), SeqCst, Relaxed) {
                    Ok(_) => return Ok(old),
                    Err(c) if low(c) == old => cur = c,
                    Err(c) => return Err(CasError::Moved(low(c))),
                }
            }
        }
        self.cas_journaled(old, new)
    }

    fn fetch_add(&self, delta: u32) -> u32 {
        // Only the starvation hand-off receiver's fix-up uses this.
        let st = &self.r.hdr().state;
        let _g = self.jlock();
        loop {
            let cur = st.load(SeqCst);
            let old = low(cur);
            let new = old.wrapping_add(delta);
            let mut tx = Txn::new();
            tx.word = Some((cur, self.successor(cur, new)));
            if algo::waiters(new) < algo::waiters(old) {
                tx.add(self.r, Target::Registered(self.me), -1);
            }
            if old & LOCKED == 0 && new & LOCKED != 0 {
                tx.add(self.r, Target::Handoff(self.me), -1);
            }
            if self.commit(&tx) {
                return old;
            }
        }
    }

    #[inline]
    fn release_locked(&self) -> u32 {
        self.release_from(word(LOCKED, self.tag()))
    }
}

impl Participant<'_> {
    /// [`StateWord::release_locked`], guessing that the word is `guess` (what our acquisition
    /// installed, or the uncontended "held by us, nothing else set").
    ///
    /// Held in normal mode: one CAS clears LOCKED and the owner. Not a plain `fetch_sub`:
    /// STARVING may have been set while we held the lock, and a starving release must be one
    /// journal transaction with the hand-off it owes (a death in between would strand the lock
    /// in starvation mode with nobody owing the hand-off). No load first either: a wrong guess
    /// returns the current word, on a line that is then ours. A word this participant does not
    /// hold (only a peer writing the region makes one) is left alone.
    #[inline]
    pub(crate) fn release_from(&self, guess: u64) -> u32 {
        let st = &self.r.hdr().state;
        let mut cur = guess;
        loop {
            let l = low(cur);
            if l & (LOCKED | STARVING) != LOCKED || owner_tag(cur) != self.tag() {
                return self.release_locked_slow();
            }
            match st.compare_exchange(cur, word(l - LOCKED, 0), Release, Relaxed) {
                Ok(_) => {
                    LAST_RELEASED.set(word(l - LOCKED, 0));
                    return l - LOCKED;
                }
                Err(c) => cur = c,
            }
        }
    }

    /// Go's `Lock` fast path and `lockSlow`'s first step (take a lock that is free in normal
    /// mode even though waiters are counted), as `algo::lock` does with `try_acquire_fast` and
    /// a barging `cas`, but without a load before each CAS: the first guesses the word this
    /// thread's last unlock left (waiters counted then are likely still there; 0 if none),
    /// each failure returns the word to try next. Returns the word it installed (the unlock's
    /// guess), or 0 once `LOCKED` or `STARVING` is seen (then `algo::lock_slow`). Never
    /// changes anything but `LOCKED` and the owner, so it is also `try_lock`.
    #[inline]
    pub(crate) fn acquire_fast(&self) -> u64 {
        let st = &self.r.hdr().state;
        let tag = self.tag();
        // The same orderings as the in-process word: acquire for `0 -> LOCKED`, sequentially
        // consistent for a barging CAS. `g` is free in normal mode with owner 0 (see
        // `release_from`), so either CAS only sets LOCKED and the owner.
        let g = LAST_RELEASED.get();
        let first = if g == 0 {
            st.compare_exchange(0, word(LOCKED, tag), Acquire, Relaxed)
        } else {
            st.compare_exchange(g, word(low(g) | LOCKED, tag), SeqCst, Relaxed)
        };
        let mut cur = match first {
            Ok(_) => return word(low(g) | LOCKED, tag),
            Err(c) => c,
        };
        // Free in normal mode: the owner half is 0 whenever LOCKED is clear.
        while low(cur) & (LOCKED | STARVING) == 0 {
            let new = word(low(cur) | LOCKED, tag);
            match st.compare_exchange(cur, new, SeqCst, Relaxed) {
                Ok(_) => return new,
                Err(c) => cur = c,
            }
        }
        0
    }

    /// A compare-and-swap that changes more than `LOCKED` and the owner: one journal
    /// transaction.
    #[inline(never)]
    fn cas_journaled(&self, old: u32, new: u32) -> Result<u32, CasError> {
        let st = &self.r.hdr().state;
        // Fail without the journal lock if the word moved on already.
        let cur = st.load(Relaxed);
        if low(cur) != old {
            return Err(CasError::Moved(low(cur)));
        }
        // Joining the queue waits until the deadline; handing something back a little longer.
        let by = if algo::waiters(new) > algo::waiters(old) {
            self.deadline
        } else {
            self.deadline.map(|d| d + JLOCK_GRACE)
        };
        let Some(_g) = self.jlock_by(by) else {
            return self.cas_abandoned(old, new);
        };
        loop {
            let cur = st.load(SeqCst);
            if low(cur) != old {
                return Err(CasError::Moved(low(cur)));
            }
            let mut tx = Txn::new();
            tx.word = Some((cur, self.successor(cur, new)));
            self.account_cas(&mut tx, old, new);
            if self.commit(&tx) {
                // Go's switch to starvation mode (`lockSlow`, the lock held): not a fair
                // unlock's hand-off, which clears LOCKED.
                if new & !old & STARVING != 0 && new & LOCKED != 0 {
                    self.stats().starvation_entries.fetch_add(1, Relaxed);
                }
                return Ok(old);
            }
        }
    }

    /// A journaled CAS whose caller's deadline passed while the journal lock was held by
    /// another process (stopped, say). What the caller gives up by it, a registration leaving
    /// the count or `WOKEN` being dropped, is handed to the next journal-lock holder
    /// (`queue::settle_abandoned`) and the CAS reported done; any other change fails with the
    /// word unchanged: [`CasError::OutOfTime`].
    #[cold]
    fn cas_abandoned(&self, old: u32, new: u32) -> Result<u32, CasError> {
        let p = self.r.participant(self.me);
        if algo::deregistered(old) == Some(new) {
            p.ab_reg_posted.fetch_add(1, SeqCst);
        } else if old & WOKEN != 0 && new == old & !WOKEN {
            p.ab_woken_posted.fetch_add(1, SeqCst);
        } else {
            return Err(CasError::OutOfTime);
        }
        self.r.hdr().abandoned.fetch_add(1, SeqCst);
        Ok(old)
    }

    #[cold]
    fn release_locked_slow(&self) -> u32 {
        let st = &self.r.hdr().state;
        let mut cur = st.load(Relaxed);
        loop {
            let l = low(cur);
            if l & LOCKED == 0 || owner_tag(cur) != self.tag() {
                // Not held by us: every caller (a guard, `unlock_leaked`, a condvar wait)
                // releases only what this participant holds, so a peer wrote the word
                // (cleared it, or installed another owner). Leave it alone and wake nobody
                // (0: nothing left to do): a corrupted region must not abort or panic a process
                // (module docs), and releasing another owner's lock would break its exclusion.
                return 0;
            }
            if l & STARVING == 0 {
                match st.compare_exchange(cur, word(l - LOCKED, 0), Release, Relaxed) {
                    Ok(_) => return l - LOCKED,
                    Err(c) => {
                        cur = c;
                        continue;
                    }
                }
            }
            // Starving: the release and the hand-off we now owe are one transaction, so a
            // death before the hand-off leaves a record of it.
            let _g = self.jlock();
            loop {
                let c = st.load(SeqCst);
                let l = low(c);
                if l & STARVING == 0 || l & LOCKED == 0 || owner_tag(c) != self.tag() {
                    cur = c;
                    break;
                }
                let mut tx = Txn::new();
                tx.word = Some((c, word(l - LOCKED, 0)));
                tx.add(self.r, Target::OwesHandoff(self.me), 1);
                if self.commit(&tx) {
                    return l - LOCKED;
                }
            }
        }
    }
}
