//! A participant's view of a region: the [`Region`] (header, participant and waiter slots,
//! value, at offsets fixed by the layout), the 64-bit state word's halves, and [`Participant`], one
//! process's handle on the region as one participant. What `Participant` does is in the layers above:
//! the journal (`journal`), Go's state word (`word`), the waiter queue (`queue`) and recovery
//! (`recovery`).

use super::layout::*;
use core::mem::size_of;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering::*};
use std::time::Instant;

/// Go's 32-bit state in the 64-bit word.
#[inline]
pub(crate) fn low(w: u64) -> u32 {
    w as u32
}
/// The owner (participant index + 1; 0 while `LOCKED` is clear) in the 64-bit word.
#[inline]
pub(crate) fn owner_tag(w: u64) -> u32 {
    (w >> 32) as u32
}
/// The 64-bit word of Go's state `low` and `owner`.
#[inline]
pub(super) fn word(low: u32, owner: u32) -> u64 {
    u64::from(low) | (u64::from(owner) << 32)
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

    /// Element `i` of the `n` slots of type `S` at `offset` (panics if out of bounds).
    ///
    /// # Safety
    /// The layout places `n` consecutive `S`s at `offset`.
    unsafe fn element<S>(&self, offset: usize, i: u32, n: u32) -> &S {
        assert!(i < n);
        // SAFETY: in bounds (checked, and the caller's contract), aligned to 64 by the layout.
        unsafe { &*(self.base.as_ptr().add(offset + i as usize * size_of::<S>()) as *const S) }
    }

    pub(crate) fn participant(&self, i: u32) -> &ParticipantSlot {
        // SAFETY: the layout places `participants` participant slots at `participants_offset`.
        unsafe { self.element(self.layout.participants_offset, i, self.layout.participants) }
    }

    pub(crate) fn slot(&self, i: u32) -> &WaiterSlot {
        // SAFETY: the layout places `waiter_slots` waiter slots at `slots_offset`.
        unsafe { self.element(self.layout.slots_offset, i, self.layout.waiter_slots) }
    }

    /// The statistics row of participant slot `i` (inline: the lock's holder counts there on
    /// every acquisition).
    #[inline]
    pub(crate) fn stats_row(&self, i: u32) -> &StatsRow {
        // SAFETY: the layout places `participants` stats rows at `stats_offset`.
        unsafe { self.element(self.layout.stats_offset, i, self.layout.participants) }
    }

    pub(crate) fn value_ptr(&self) -> *mut u8 {
        // SAFETY: in bounds by the layout.
        unsafe { self.base.as_ptr().add(self.layout.value_offset) }
    }

    /// Participant `i` holds nothing (journal lock held): no waiter counted, no `WOKEN`, no
    /// token owed or received, not the owner, no `ShmRwLock` read held or queued. Its slot may be freed (once its queue slots are).
    pub(crate) fn holds_nothing(&self, i: u32) -> bool {
        let p = self.participant(i);
        p.counters().iter().all(|c| c.load(SeqCst) == 0)
            && p.rw_reads.load(SeqCst) == 0
            && p.rw_waiting.load(SeqCst) == 0
            && owner_tag(self.hdr().state.load(SeqCst)) != i + 1
    }

    /// Whether `tag` (participant index + 1, as in the state word) names no participant: 0,
    /// out of range, or an empty participant slot. Only a faulty peer leaves such a tag as the
    /// owner, `WOKEN` holder or queued waiter (a participant slot is emptied only once it
    /// holds nothing, under the journal lock); it is treated like a dead participant.
    pub(crate) fn names_no_participant(&self, tag: u32) -> bool {
        tag == 0
            || tag > self.layout.participants
            || self.participant(tag - 1).ident.load(SeqCst) == 0
    }
}

/// One process's view of a region: the region plus its own participant index. Implements
/// Go's [`StateWord`](crate::algo::StateWord) (in `word`) and
/// [`WaitQueue`](crate::sema::WaitQueue) (in `queue`) contracts for [`crate::algo`].
#[derive(Clone, Copy)]
pub(crate) struct Participant<'a> {
    pub r: &'a Region,
    /// This process's participant index.
    pub me: u32,
    /// The deadline of the call this view serves (`None`: it may wait as long as it takes).
    /// Waits for the journal lock end there; what the call holds is then given up for the next
    /// journal-lock holder to settle (`queue::settle_abandoned`).
    pub deadline: Option<Instant>,
}

impl<'a> Participant<'a> {
    /// A view without a deadline.
    pub(super) fn new(r: &'a Region, me: u32) -> Self {
        Self {
            r,
            me,
            deadline: None,
        }
    }

    /// This view, for a call that ends at `deadline`.
    pub(super) fn until(self, deadline: Option<Instant>) -> Self {
        Self { deadline, ..self }
    }

    #[inline]
    pub(super) fn tag(&self) -> u32 {
        self.me + 1
    }
}

/// Claim one of the first `n` participant slots for `ident` (lock-free CAS on a free slot).
pub(crate) fn claim_participant(r: &Region, ident: u64, n: u32) -> Option<u32> {
    (0..n.min(r.layout.participants)).find(|&i| r.participant(i).claim(0, ident))
}

/// A participant slot's identity: `ident` (pid and start time) is what ownership CASes on;
/// `pidfs_ino`, written by the owner right after its claiming CAS, is an extra liveness check.
///
/// Invariant: `pidfs_ino` is 0 or the inode of the process `ident` names. Only the owner
/// writes a non-zero inode (its own, after its claim); whoever frees the slot or takes it
/// from a dead owner clears the inode first ([`ParticipantSlot::free`], [`ParticipantSlot::claim`]). A
/// clear that lands after a newcomer's store only loses the extra check (0 = unknown).
impl ParticipantSlot {
    /// The participant's accounting (module docs of `recovery`): all zero when it holds
    /// nothing.
    pub(crate) fn counters(&self) -> [&AtomicU32; 5] {
        [
            &self.registered,
            &self.woken,
            &self.owes_normal,
            &self.owes_handoff,
            &self.handoff,
        ]
    }

    /// CAS the identity from `from` (0 for a free slot, or a dead owner's identity) to
    /// `ident`, this process's, and record this process's pidfs inode.
    pub(crate) fn claim(&self, from: u64, ident: u64) -> bool {
        if from != 0 {
            // A dead owner's inode must not be taken for ours between the CAS and the store.
            self.pidfs_ino.store(0, SeqCst);
        }
        if self
            .ident
            .compare_exchange(from, ident, SeqCst, SeqCst)
            .is_err()
        {
            return false;
        }
        self.pidfs_ino
            .store(super::identity::self_pidfs_ino(), SeqCst);
        true
    }

    /// Free the slot if it still holds `ident` (an unconditional free of our own slot is
    /// `free(own ident)`). Returns whether it did.
    pub(crate) fn free(&self, ident: u64) -> bool {
        self.pidfs_ino.store(0, SeqCst);
        self.ident
            .compare_exchange(ident, 0, SeqCst, SeqCst)
            .is_ok()
    }

    /// Is the participant recorded here as `ident` (read from this slot) gone? Its pidfs inode
    /// is used only if the slot still holds `ident` after it was read.
    pub(crate) fn dead(&self, ident: u64) -> bool {
        let ino = self.pidfs_ino.load(SeqCst);
        let ino = if self.ident.load(SeqCst) == ident {
            ino
        } else {
            0
        };
        super::identity::ident_dead(ident, ino)
    }
}
