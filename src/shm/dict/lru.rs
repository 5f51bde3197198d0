//! The LRU order: a doubly linked list of every entry through `E_PREV`/`E_NEXT`, most recently
//! used at the head (`H_LRU_HEAD`), least at the tail. A write puts its entry at the head, a
//! hit moves it there, eviction takes from the tail (nginx's and lua_shared_dict's rule).

use super::index::{off, reference};
use super::layout::*;
use super::redo::Tx;

/// Put the unlinked entry `e` at the head.
pub(crate) fn push_head(tx: &mut Tx<'_>, e: usize) {
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
pub(crate) fn unlink(tx: &mut Tx<'_>, e: usize) {
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
pub(crate) fn touch(tx: &mut Tx<'_>, e: usize) {
    if tx.r32(H_LRU_HEAD) != reference(e) {
        unlink(tx, e);
        push_head(tx, e);
    }
}

/// Take `old` out and put the new entry `new` at the head (a write is a use).
pub(crate) fn replace(tx: &mut Tx<'_>, old: usize, new: usize) {
    unlink(tx, old);
    push_head(tx, new);
}
