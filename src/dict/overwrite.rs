//! An update of the same size, written in place: no new chunk, no LRU relinking.
//!
//! A store normally writes its new entry beside the old one and publishes it with the old
//! one's release in one transaction (`ops`). When the new value takes as many 8-byte words as
//! the old one and is small ([`IN_PLACE_MAX`]), it is written over the old value instead: each
//! word of the value, its expiry, and each other header word that changes (length, kind,
//! flags, and the sequence number if `flush_all` had expired the entry) is a write of the
//! transaction, so
//! the redo record carries the new value and one store commits it; a process killed before the
//! commit leaves the old value whole, killed after it the new one (replayed by the next
//! holder). Readers only read entries under the lock, so nobody sees the words between.
//!
//! The entry keeps its place in the LRU list and is marked used, as a hit marks it (and as
//! `incr` leaves a number it changes in place): eviction gives it a second chance. A store
//! beside moves its new entry to the head; CLOCK treats both as recent.

use super::index;
use super::layout::*;
use super::lru;
use super::ops::{Write, Zone};
use super::redo::{Direct, Plan, ZoneTx};
use super::ttl::{self, Now};
use super::types::{DictError, Value};
use crate::crash;

/// The largest value written in place, in bytes: its words go through the redo record (32
/// pairs of its 512; with the header's words and two expired entries freed at the LRU tail, a
/// transaction stays well under the record).
pub(crate) const IN_PLACE_MAX: usize = 256;

impl Zone<'_> {
    /// Write `value` over the value of entry `e`, the key's (live or expired: `live`), its key
    /// length and value kind word becoming `klen_kind` (as `E_KEYLEN_KIND` holds them), if it
    /// takes as many 8-byte words and at most [`IN_PLACE_MAX`] bytes; with lua_shared_dict's
    /// freeing of expired entries at the LRU tail, in the same transaction. Whether it did (if
    /// not, nothing was planned or changed).
    pub(crate) fn overwrite(
        &self,
        e: usize,
        live: bool,
        klen_kind: u32,
        value: Value<'_>,
        w: Write,
        now: &Now,
    ) -> Result<bool, DictError> {
        let m = self.m;
        let vlen = vlen_of(value);
        let old = m.ld32(e + E_VLEN) as usize;
        if vlen > IN_PLACE_MAX || vlen.div_ceil(8) != old.div_ceil(8) {
            return Ok(false);
        }
        // A live entry was not flushed (`ttl::expired`): no sequence numbers to read.
        let flushed = !live && m.ld64(e + E_SEQ) <= m.ld64(H_FLUSH_SEQ);
        let tail = m.ld32(H_LRU_TAIL);
        // Read from the region: most writes find no expired entry at the tail, and then the
        // words go straight into the redo record.
        if tail != 0 && index::off(tail) != e && ttl::expired(m, index::off(tail), now) {
            let mut tx = ZoneTx::new(m);
            self.expire_tail(&mut tx, Some(e), now)?;
            plan(m, &mut tx, e, klen_kind, value, w, flushed);
            crash::point(crash::DICT_IN_PLACE);
            tx.commit();
        } else {
            let mut tx = Direct::new(m);
            plan(m, &mut tx, e, klen_kind, value, w, flushed);
            crash::point(crash::DICT_IN_PLACE);
            tx.commit();
        }
        // A write is a use (one plain store, as a hit's).
        lru::mark_used(m, e);
        Ok(true)
    }
}

/// Plan the words of the overwrite of entry `e` in `tx` (`flushed`: `flush_all` expired it).
#[inline]
fn plan(
    m: &Mem,
    tx: &mut impl Plan,
    e: usize,
    klen_kind: u32,
    value: Value<'_>,
    w: Write,
    flushed: bool,
) {
    // The value's words and the expiry, every time (so a transaction's size does not depend
    // on the clock: at least two writes); the other fields if they change.
    match value {
        Value::Int(i) => tx.w64_unplanned(e + E_VALUE, i as u64),
        Value::Bytes(b) => {
            let mut words = b.chunks_exact(8);
            let mut at = e + E_VALUE;
            for c in &mut words {
                let v = u64::from_ne_bytes(c.try_into().unwrap_or_default());
                tx.w64_unplanned(at, v);
                at += 8;
            }
            let rest = words.remainder();
            if !rest.is_empty() {
                // The bytes then zeros, as they lie in memory (`tail` is little-endian).
                tx.w64_unplanned(at, index::tail(rest).to_le());
            }
        }
    }
    tx.w64_unplanned(e + E_EXPIRES, w.expires);
    put32(m, tx, e + E_VLEN, vlen_of(value) as u32);
    put32(m, tx, e + E_KEYLEN_KIND, klen_kind);
    put32(m, tx, e + E_FLAGS, w.flags);
    if flushed {
        // Flushed: live again only with a sequence number past the flush (freeing entries
        // at the tail writes no sequence number).
        match m.ld64(H_SEQ).checked_add(1) {
            Some(seq) => {
                tx.w64_unplanned(H_SEQ, seq);
                tx.w64_unplanned(e + E_SEQ, seq);
            }
            None => m.corrupt(H_SEQ),
        }
    }
}

fn vlen_of(value: Value<'_>) -> usize {
    match value {
        Value::Bytes(b) => b.len(),
        Value::Int(_) => 8,
    }
}

/// Plan `v` at `off`, a word of the entry overwritten, unless it is there already. Freeing
/// entries at the LRU tail (planned first) writes none of the entry's words but its index and
/// LRU links (it may be their neighbour), which an overwrite leaves alone, and each word is
/// planned once: so read from the region, and pushed without a search.
#[inline(always)]
fn put32(m: &Mem, tx: &mut impl Plan, off: usize, v: u32) {
    if m.ld32(off) != v {
        tx.w32_unplanned(off, v);
    }
}
