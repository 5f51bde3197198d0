//! The shared-memory instantiation of Go's algorithm: a [`StateWord`] and a [`WaitQueue`] that
//! live in the region, plus the bookkeeping that lets survivors repair what a dead process left.
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
//! (see [`Ctx::recover_locked`]).

use super::layout::*;
use super::sys::{self, crash};
use crate::algo::{self, StateWord, LOCKED, STARVING, WOKEN};
use crate::sema::WaitQueue;
use core::ptr::NonNull;
use core::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

/// A sleeping waiter wakes at least this often to look for dead participants.
pub(crate) const TICK: Duration = Duration::from_millis(10);
/// Owner probes (one `/proc` read) happen at most this often, machine-wide per region.
const PROBE_GAP_NS: u64 = 4_000_000;
/// Full participant scans happen at most this often.
const SCAN_GAP_NS: u64 = 40_000_000;
/// The journal lock's contended bit.
const J_CONTENDED: u32 = 1 << 31;
/// Log states.
const LOG_EMPTY: u32 = 0;
const LOG_COMMITTED: u32 = 1;
/// Indices of `Header::rec`.
pub(crate) const REC_STEALS: usize = 0;
pub(crate) const REC_REPLAYS: usize = 1;
pub(crate) const REC_REGISTRATIONS: usize = 2;
pub(crate) const REC_WOKEN: usize = 3;
pub(crate) const REC_OWED: usize = 4;
pub(crate) const REC_HANDOFFS: usize = 5;
/// Bits of the word that change only under the journal lock (Go's state without `LOCKED`).
const NONLOCK: u64 = 0xffff_fffe;

#[inline]
pub(crate) fn low(w: u64) -> u32 {
    w as u32
}
#[inline]
pub(crate) fn owner_of(w: u64) -> u32 {
    (w >> 32) as u32
}
#[inline]
fn word(low: u32, owner: u32) -> u64 {
    u64::from(low) | (u64::from(owner) << 32)
}

std::thread_local! {
    /// The word this thread's last fast unlock left (free, owner 0): the next lock's guess.
    /// Only a guess (shared by every region the thread uses): a wrong one costs a failed CAS.
    static LAST_RELEASED: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// A validated region: header, slots and value at fixed offsets from `base`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region {
    base: NonNull<u8>,
    pub layout: Layout,
}

// SAFETY: a region is shared memory accessed only through atomics (and the value, through the
// lock); the handle that owns it decides its lifetime.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// # Safety
    /// `base` points to at least `layout.total_size` bytes of memory, aligned to
    /// [`REGION_ALIGN`] and to `layout.value_align` (so the value is aligned too), initialised
    /// (or about to be, by the caller, before any other use) with this layout, that stay mapped
    /// while the `Region` is used.
    pub(crate) unsafe fn new(base: NonNull<u8>, layout: Layout) -> Self {
        Self { base, layout }
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub(crate) fn hdr(&self) -> &Header {
        // SAFETY: the region starts with an aligned header (`Region::new`'s contract).
        unsafe { &*(self.base.as_ptr() as *const Header) }
    }

    pub(crate) fn proc(&self, i: u32) -> &ProcSlot {
        assert!(i < self.layout.participants);
        // SAFETY: in bounds (checked), aligned to 64 by the layout.
        unsafe {
            &*(self
                .base
                .as_ptr()
                .add(self.layout.procs_offset + i as usize * PROC_SIZE)
                as *const ProcSlot)
        }
    }

    pub(crate) fn slot(&self, i: u32) -> &WaiterSlot {
        assert!(i < self.layout.waiter_slots);
        // SAFETY: in bounds (checked), aligned to 64 by the layout.
        unsafe {
            &*(self
                .base
                .as_ptr()
                .add(self.layout.slots_offset + i as usize * SLOT_SIZE)
                as *const WaiterSlot)
        }
    }

    pub(crate) fn value_ptr(&self) -> *mut u8 {
        // SAFETY: in bounds by the layout.
        unsafe { self.base.as_ptr().add(self.layout.value_offset) }
    }

    /// Participant `i` holds nothing (journal lock held): no waiter counted, no `WOKEN`, no
    /// token owed or received, not the owner. Its slot may be freed (once its queue slots are).
    pub(crate) fn holds_nothing(&self, i: u32) -> bool {
        let p = self.proc(i);
        p.registered.load(SeqCst) == 0
            && p.woken.load(SeqCst) == 0
            && p.owes_normal.load(SeqCst) == 0
            && p.owes_handoff.load(SeqCst) == 0
            && p.handoff.load(SeqCst) == 0
            && owner_of(self.hdr().state.load(SeqCst)) != i + 1
    }
}

/// A field a transaction may write. Only fields that change exclusively under the journal lock
/// (so that replaying absolute values is idempotent), plus slot states (applied as
/// `QUEUED -> token` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Registered(u32),
    Woken(u32),
    OwesNormal(u32),
    OwesHandoff(u32),
    Handoff(u32),
    StoredNormal,
    StoredHandoff,
    OwnerDeaths,
    SlotToken(u32),
}

impl Target {
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
            _ => return None,
        })
    }
}

/// A journal transaction being built (only while holding the journal lock).
struct Txn {
    word: Option<(u64, u64)>,
    n: usize,
    ents: [(Target, u64); LOG_ENTRIES],
    /// A slot to wake after commit.
    wake: Option<u32>,
    /// A token was stored: wake slot-less waiters after commit.
    stored: bool,
}

impl Txn {
    fn new() -> Self {
        Self {
            word: None,
            n: 0,
            ents: [(Target::StoredNormal, 0); LOG_ENTRIES],
            wake: None,
            stored: false,
        }
    }

    fn set(&mut self, t: Target, v: u64) {
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

    /// Add `delta` to a counter (saturating at 0), relative to its value in this transaction.
    fn add(&mut self, r: &Region, t: Target, delta: i64) {
        let cur = self.ents[..self.n]
            .iter()
            .find(|e| e.0 == t)
            .map_or_else(|| read_target(r, t), |e| e.1);
        self.set(t, (cur as i64 + delta).max(0) as u64);
    }
}

fn read_target(r: &Region, t: Target) -> u64 {
    match t {
        Target::Registered(i) => r.proc(i).registered.load(SeqCst).into(),
        Target::Woken(i) => r.proc(i).woken.load(SeqCst).into(),
        Target::OwesNormal(i) => r.proc(i).owes_normal.load(SeqCst).into(),
        Target::OwesHandoff(i) => r.proc(i).owes_handoff.load(SeqCst).into(),
        Target::Handoff(i) => r.proc(i).handoff.load(SeqCst).into(),
        Target::StoredNormal => r.hdr().stored_normal.load(SeqCst).into(),
        Target::StoredHandoff => r.hdr().stored_handoff.load(SeqCst).into(),
        Target::OwnerDeaths => r.hdr().owner_deaths.load(SeqCst),
        Target::SlotToken(i) => r.slot(i).state.load(SeqCst).into(),
    }
}

fn apply_target(r: &Region, t: Target, v: u64) {
    let v32 = v as u32;
    match t {
        Target::Registered(i) => r.proc(i).registered.store(v32, SeqCst),
        Target::Woken(i) => r.proc(i).woken.store(v32, SeqCst),
        Target::OwesNormal(i) => r.proc(i).owes_normal.store(v32, SeqCst),
        Target::OwesHandoff(i) => r.proc(i).owes_handoff.store(v32, SeqCst),
        Target::Handoff(i) => r.proc(i).handoff.store(v32, SeqCst),
        Target::StoredNormal => r.hdr().stored_normal.store(v32, SeqCst),
        Target::StoredHandoff => r.hdr().stored_handoff.store(v32, SeqCst),
        Target::OwnerDeaths => r.hdr().owner_deaths.store(v, SeqCst),
        Target::SlotToken(i) => {
            // Only a queued slot receives a token: if a replay finds the slot already free,
            // its sleeper consumed the token before the writer died.
            let _ = r
                .slot(i)
                .state
                .compare_exchange(SLOT_QUEUED, v32, SeqCst, SeqCst);
        }
    }
}

/// Add to `tx` participant `p` taking a stored token, if there is one (a hand-off first): the
/// token's accounting moves to `p` as if it had been delivered to its slot. `false` if none.
fn take_stored_for(r: &Region, tx: &mut Txn, p: u32) -> bool {
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

/// Work left for after the journal lock is released.
#[derive(Default)]
struct Post {
    wakes: [Option<u32>; 8],
    n_wakes: usize,
    stored: bool,
    /// Finish a release made on a dead owner's behalf: the rest of Go's `Unlock` after the
    /// subtraction left this state ([`algo::unlock_released`]).
    released: Option<u32>,
    kick: bool,
}

impl Post {
    fn absorb(&mut self, ctx: &Ctx<'_>, tx: &Txn) {
        self.stored |= tx.stored;
        if let Some(w) = tx.wake {
            if self.n_wakes == self.wakes.len() {
                ctx.flush_wakes(self);
            }
            self.wakes[self.n_wakes] = Some(w);
            self.n_wakes += 1;
        }
    }
}

/// The journal lock, held.
struct JGuard<'a> {
    r: &'a Region,
}

impl Drop for JGuard<'_> {
    fn drop(&mut self) {
        let j = &self.r.hdr().jlock;
        if j.swap(0, Release) & J_CONTENDED != 0 {
            sys::futex_wake(j, 1);
        }
    }
}

/// One process's view of a region: the region plus its own participant index. Implements
/// Go's [`StateWord`] and [`WaitQueue`] contracts for [`crate::algo`].
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub r: &'a Region,
    /// This process's participant index.
    pub me: u32,
}

impl<'a> Ctx<'a> {
    #[inline]
    fn tag(&self) -> u32 {
        self.me + 1
    }

    /// The word that replaces `cur` when this participant changes Go's state to `new`: the
    /// owner stays while the lock stays held, becomes us when we take it, and is cleared when
    /// it is released.
    fn successor(&self, cur: u64, new: u32) -> u64 {
        let owner = match (low(cur) & LOCKED != 0, new & LOCKED != 0) {
            (true, true) => owner_of(cur),
            (false, true) => self.tag(),
            _ => 0,
        };
        word(new, owner)
    }

    // ---------------------------------------------------------------- journal lock

    fn jlock(&self) -> JGuard<'a> {
        let j = &self.r.hdr().jlock;
        let me = self.tag();
        // AcqRel, not just Acquire: a taker that later finds the holder dead re-checks the
        // holder's identity after its own CAS; with the acquiring CASes also releasing, every
        // holder's CAS is a release the takeover's RMW chain synchronises with, so that
        // re-check is formally ordered after it (on x86 it is the same instruction).
        if j.compare_exchange(0, me, AcqRel, Relaxed).is_ok() {
            return JGuard { r: self.r };
        }
        self.jlock_slow(me)
    }

    #[cold]
    fn jlock_slow(&self, me: u32) -> JGuard<'a> {
        let j = &self.r.hdr().jlock;
        for _ in 0..64 {
            if j.load(Relaxed) == 0 && j.compare_exchange(0, me, AcqRel, Relaxed).is_ok() {
                return JGuard { r: self.r };
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
                if j.compare_exchange(0, me | J_CONTENDED, AcqRel, Relaxed)
                    .is_ok()
                {
                    return JGuard { r: self.r };
                }
                continue;
            }
            if cur & J_CONTENDED == 0 {
                if j.compare_exchange(cur, cur | J_CONTENDED, Relaxed, Relaxed)
                    .is_err()
                {
                    continue;
                }
                cur |= J_CONTENDED;
            }
            if cur & !J_CONTENDED != watched {
                watched = cur & !J_CONTENDED;
                check_at = Instant::now() + TICK;
            }
            sys::futex_wait(j, cur, Some(check_at));
            if Instant::now() >= check_at {
                check_at = Instant::now() + TICK;
                let holder = (cur & !J_CONTENDED).wrapping_sub(1);
                if holder != self.me && holder < self.r.layout.participants {
                    let ident = self.r.proc(holder).ident.load(SeqCst);
                    if ident != 0
                        && sys::ident_dead(ident)
                        && j.compare_exchange(cur, me | J_CONTENDED, SeqCst, Relaxed)
                            .is_ok()
                    {
                        // ABA: while we were looking at /proc (or preempted), someone may have
                        // taken over from the dead holder, freed its participant slot, and a new
                        // process claimed it and now holds the journal lock with the same word.
                        // The dead identity never comes back, so if the slot still holds it, the
                        // word we replaced was the dead holder's. If not, give the word back
                        // (it fails only if the live holder released meanwhile) and go on
                        // waiting; we wrote nothing in between.
                        if self.r.proc(holder).ident.load(SeqCst) != ident {
                            let _ = j.compare_exchange(me | J_CONTENDED, cur, SeqCst, Relaxed);
                            continue;
                        }
                        // Taken from a dead holder: finish or drop its transaction, and have
                        // the next probe clean up the rest of what it left.
                        self.r.hdr().rec[REC_STEALS].fetch_add(1, Relaxed);
                        self.replay();
                        self.r.hdr().scan_at.store(0, SeqCst);
                        return JGuard { r: self.r };
                    }
                }
            }
        }
    }

    /// Complete (or discard) the transaction a dead journal-lock holder left in the log.
    fn replay(&self) {
        let log = &self.r.hdr().log;
        if log.state.load(Acquire) != LOG_COMMITTED {
            return;
        }
        let apply = if log.has_word.load(SeqCst) != 0 {
            let old = log.word_old.load(SeqCst);
            let new = log.word_new.load(SeqCst);
            let cur = self.r.hdr().state.load(SeqCst);
            if old & NONLOCK != new & NONLOCK {
                // Only the journal-lock holder changes these bits.
                cur & NONLOCK == new & NONLOCK
            } else {
                // An ownership release (LOCKED + owner -> 0): done unless the same owner still
                // holds (no one else can make that owner hold again: it is dead).
                !(low(cur) & LOCKED != 0 && owner_of(cur) == owner_of(old))
            }
        } else {
            true
        };
        if apply {
            self.r.hdr().rec[REC_REPLAYS].fetch_add(1, Relaxed);
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
            Target::SlotToken(i) => i < l.waiter_slots,
            _ => true,
        }
    }

    /// Commit a transaction (journal lock held). `false` if its word CAS failed (nothing
    /// written).
    fn commit(&self, tx: &Txn) -> bool {
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
        } else {
            log.has_word.store(0, Relaxed);
        }
        log.state.store(LOG_COMMITTED, SeqCst);
        sys::crash_point(crash::LOG_COMMITTED);
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
            sys::crash_point(crash::WORD_CHANGED);
        }
        for &(t, v) in &tx.ents[..tx.n] {
            apply_target(self.r, t, v);
        }
        sys::crash_point(crash::APPLIED);
        log.state.store(LOG_EMPTY, Release);
        true
    }

    // ---------------------------------------------------------------- the queue

    /// Hand a token to the front sleeper (front class first, then FIFO), or store it.
    fn deliver(&self, tx: &mut Txn, handoff: bool) {
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

    fn flush_wakes(&self, post: &mut Post) {
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

    // ---------------------------------------------------------------- death

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
    fn kick(&self) {
        let cur = low(self.r.hdr().state.load(SeqCst));
        if cur & (LOCKED | STARVING | WOKEN) == 0 && algo::waiters(cur) > 0 {
            algo::unlock_slow(self, self, cur);
        }
    }

    /// Undo everything participant `d` (found dead with identity `ident`) left. Returns whether
    /// it owned the lock.
    pub(crate) fn recover(&self, d: u32, ident: u64) -> bool {
        let mut post = Post::default();
        let owned = {
            let _g = self.jlock();
            self.recover_locked(d, ident, &mut post)
        };
        self.finish(post);
        owned
    }

    fn recover_locked(&self, d: u32, ident: u64, post: &mut Post) -> bool {
        let r = self.r;
        let h = r.hdr();
        let p = r.proc(d);
        if d == self.me || p.ident.load(SeqCst) != ident {
            return false; // recovered already (and maybe reused)
        }
        let tag = d + 1;
        // 1. It owned the lock: release it on its behalf and tell the next owner. The flag is
        //    set before the release, outside the log (the next owner may clear it at once).
        let mut owned = false;
        loop {
            let cur = h.state.load(SeqCst);
            if low(cur) & LOCKED == 0 || owner_of(cur) != tag {
                break;
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
                break;
            }
        }
        // 2. Its queued slots leave the queue; tokens already in its slots were accounted to
        //    it on delivery (and are resolved below).
        for i in 0..r.layout.waiter_slots {
            let s = r.slot(i);
            if s.state.load(SeqCst) != SLOT_FREE && s.proc.load(SeqCst) == d {
                s.state.store(SLOT_FREE, SeqCst);
            }
        }
        // 3. Wake-ups it owed.
        while p.owes_normal.load(SeqCst) > 0 {
            h.rec[REC_OWED].fetch_add(1, Relaxed);
            let mut tx = Txn::new();
            tx.add(r, Target::OwesNormal(d), -1);
            self.deliver(&mut tx, false);
            self.commit(&tx);
            post.absorb(self, &tx);
        }
        while p.owes_handoff.load(SeqCst) > 0 {
            h.rec[REC_OWED].fetch_add(1, Relaxed);
            let mut tx = Txn::new();
            tx.add(r, Target::OwesHandoff(d), -1);
            self.deliver(&mut tx, true);
            self.commit(&tx);
            post.absorb(self, &tx);
        }
        // 4. What its waiters held.
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
                // is as good as its own; otherwise leave the count under `algo::deregister`'s
                // rule: during a hand-off (STARVING && !LOCKED) the receiver may already have
                // read "not the last waiter" and will keep STARVING in its blind fix-up add,
                // so the receiver and one more waiter must stay counted; if not, retry at a
                // later scan (the fix-up is a few instructions away).
                let mut tx = Txn::new();
                if !take_stored_for(r, &mut tx, d) {
                    let cur = h.state.load(SeqCst);
                    let Some(new_low) = algo::deregistered(low(cur)) else {
                        // A token it could take is owed by a live unlocker, or a live hand-off
                        // receiver has not taken ownership yet: finish later.
                        break;
                    };
                    tx.word = Some((cur, word(new_low, owner_of(cur))));
                    tx.add(r, Target::Registered(d), -1);
                    h.rec[REC_REGISTRATIONS].fetch_add(1, Relaxed);
                }
                self.commit(&tx);
            } else {
                break;
            }
        }
        // 5. Free its participant slot once nothing refers to it.
        if r.holds_nothing(d) {
            p.ident.store(0, SeqCst);
        }
        owned
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

    /// Accounting for one of Go's compare-and-swaps, classified by what it changes (see the
    /// table in `algo`'s docs: only the `WOKEN` owner clears `WOKEN`, only an unlocker removes a
    /// waiter while setting `WOKEN`, and so on).
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

impl StateWord for Ctx<'_> {
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
    fn cas(&self, old: u32, new: u32) -> Result<u32, u32> {
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
                    Err(c) => return Err(low(c)),
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

impl Ctx<'_> {
    /// [`StateWord::release_locked`], guessing that the word is `guess` (what our acquisition
    /// installed, or the uncontended "held by us, nothing else set").
    ///
    /// Held in normal mode: one CAS clears LOCKED and the owner. Not a plain `fetch_sub`:
    /// STARVING may have been set while we held the lock, and a starving release must be one
    /// journal transaction with the hand-off it owes (a death in between would strand the lock
    /// in starvation mode with nobody owing the hand-off). No load first either: a wrong guess
    /// returns the current word, on a line that is then ours.
    #[inline]
    pub(crate) fn release_from(&self, guess: u64) -> u32 {
        let st = &self.r.hdr().state;
        let mut cur = guess;
        loop {
            let l = low(cur);
            if l & (LOCKED | STARVING) != LOCKED {
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
    fn cas_journaled(&self, old: u32, new: u32) -> Result<u32, u32> {
        let st = &self.r.hdr().state;
        // Fail without the journal lock if the word moved on already.
        let cur = st.load(Relaxed);
        if low(cur) != old {
            return Err(low(cur));
        }
        let _g = self.jlock();
        loop {
            let cur = st.load(SeqCst);
            if low(cur) != old {
                return Err(low(cur));
            }
            let mut tx = Txn::new();
            tx.word = Some((cur, self.successor(cur, new)));
            self.account_cas(&mut tx, old, new);
            if self.commit(&tx) {
                return Ok(old);
            }
        }
    }

    #[cold]
    fn release_locked_slow(&self) -> u32 {
        let st = &self.r.hdr().state;
        let mut cur = st.load(Relaxed);
        loop {
            let l = low(cur);
            if l & LOCKED == 0 {
                // Unlock of an unlocked lock: leave the shared word alone; the algorithm sees
                // the wrapped value and aborts this process.
                return l.wrapping_sub(LOCKED);
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
                if l & STARVING == 0 || l & LOCKED == 0 {
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
            let owed = if handoff {
                Target::OwesHandoff(self.me)
            } else {
                Target::OwesNormal(self.me)
            };
            tx.add(self.r, owed, -1);
            self.deliver(&mut tx, handoff);
            self.commit(&tx);
            post.absorb(self, &tx);
        }
        self.flush_wakes(&mut post);
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

/// Claim one of the first `n` participant slots for `ident` (lock-free CAS on a free slot).
pub(crate) fn claim_participant(r: &Region, ident: u64, n: u32) -> Option<u32> {
    (0..n.min(r.layout.participants)).find(|&i| {
        r.proc(i)
            .ident
            .compare_exchange(0, ident, SeqCst, Relaxed)
            .is_ok()
    })
}
