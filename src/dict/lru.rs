//! The LRU order: a doubly linked list of every entry through `E_PREV`/`E_NEXT`, most recently
//! written at the head (`H_LRU_HEAD`), least at the tail. A write puts its new entry at the
//! head (an update written in place, like `incr`'s, marks its entry used instead: see below);
//! eviction takes from the tail (nginx's and lua_shared_dict's rule).
//!
//! A hit does not relink: it sets the entry's used word (`E_USED`), one store into a line the
//! lookup has just read. Eviction gives a used tail entry a second chance (to the head, word
//! cleared) and evicts the first unused one: the CLOCK approximation of LRU. Moving the entry
//! on every hit, as nginx does, writes two neighbours' lines and a redo record per `get`, and
//! measured 2.5 times slower for `get`s (docs/benchmarks.md).

use super::index::{off, reference};
use super::layout::*;
use super::redo::ZoneTx;

/// Put the unlinked entry `e` at the head.
pub(crate) fn push_head(tx: &mut ZoneTx<'_>, e: usize) {
    let head = tx.r32(H_LRU_HEAD);
    tx.w32(e + E_PREV, 0);
    tx.w32(e + E_NEXT, head);
    if head == 0 {
        tx.w32(H_LRU_TAIL, reference(e));
    } else {
        tx.w32(off(head) + E_PREV, reference(e));
    }
    tx.w32(H_LRU_HEAD, reference(e));
}

/// Take `e` out of the list.
pub(crate) fn unlink(tx: &mut ZoneTx<'_>, e: usize) {
    let (prev, next) = (tx.r32(e + E_PREV), tx.r32(e + E_NEXT));
    if prev == 0 {
        tx.w32(H_LRU_HEAD, next);
    } else {
        tx.w32(off(prev) + E_NEXT, next);
    }
    if next == 0 {
        tx.w32(H_LRU_TAIL, prev);
    } else {
        tx.w32(off(next) + E_PREV, prev);
    }
}

/// Move `e` to the head (nothing to write if it is there).
pub(crate) fn touch(tx: &mut ZoneTx<'_>, e: usize) {
    if tx.r32(H_LRU_HEAD) != reference(e) {
        unlink(tx, e);
        push_head(tx, e);
    }
}

/// Mark `e` used by a hit: one plain store, outside any transaction (a death before or after
/// it leaves a valid dictionary either way), skipped if already marked so that a hot entry's
/// line stays clean, and if the operation met a damaged zone (which it then leaves as it was).
#[inline]
pub(crate) fn mark_used(m: &Mem, e: usize) {
    if !m.corrupt_seen() && m.ld32(e + E_USED) == 0 {
        m.st32(e + E_USED, 1);
    }
}

/// Give `e` (used, at the tail) its second chance: to the head with its used word cleared, so
/// the next pass that reaches it evicts it unless a hit marks it again. Planned in `tx`, like
/// any other change of the list.
pub(crate) fn spare(tx: &mut ZoneTx<'_>, e: usize) {
    tx.w32(e + E_USED, 0);
    touch(tx, e);
}

/// Take `old` out and put the new entry `new` at the head (a write is a use).
pub(crate) fn replace(tx: &mut ZoneTx<'_>, old: usize, new: usize) {
    unlink(tx, old);
    push_head(tx, new);
}
