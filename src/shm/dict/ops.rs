//! The operations, on a [`Zone`]: the region seen by the holder of its lock. Each is one or
//! more transactions ([`Tx`]); an operation that frees room first (expired entries, then the
//! least recently used ones) commits each eviction on its own, so a death between two leaves a
//! dictionary with some entries evicted and the rest as they were, every one whole.

use super::alloc::{self, Size};
use super::crash;
use super::index;
use super::layout::*;
use super::lru;
use super::redo::Tx;
use super::ttl;
use super::{DictError, Value};
use std::time::Duration;

/// How many expired entries a write frees from the LRU tail before it starts (lua_shared_dict
/// frees up to 2).
const EXPIRE_ON_WRITE: usize = 2;
/// How far up from the LRU tail a write that does not fit looks for expired entries.
const EXPIRED_SCAN: usize = 1024;
/// At most this many live entries are evicted for one write before it fails with
/// [`DictError::NoMemory`] (lua_shared_dict: 30).
pub(crate) const MAX_EVICT: usize = 64;

/// Second chances planned in one transaction (each ~8 words of the redo record).
const SECOND_CHANCE_BATCH: usize = 16;

/// Which writes a store accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Whether the key exists or not (`set`).
    Any,
    /// Only if the key has no live entry (`add`).
    Absent,
    /// Only if it has one (`replace`).
    Present,
}

/// What a store writes besides the key and value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write {
    /// Expiry (ms, 0 = never).
    pub expires: u64,
    pub flags: u32,
    pub mode: Mode,
    /// Never evict a live entry.
    pub safe: bool,
}

/// The region, under its lock.
pub(crate) struct Zone<'m> {
    pub m: &'m Mem,
    pub g: Geometry,
    pub seed: u64,
}

impl Zone<'_> {
    fn hash(&self, key: &[u8]) -> u32 {
        index::hash(self.seed, key) as u32
    }

    /// Unlink and free entry `e` (linked from `link`).
    fn remove(&self, tx: &mut Tx<'_>, e: usize, link: usize) {
        index::unlink(tx, link, e);
        lru::unlink(tx, e);
        let n = tx.r64(H_COUNT);
        tx.w64(H_COUNT, n - 1);
        alloc::free(tx, &self.g, e);
    }

    /// Remove entry `e`, found by a route other than its key, in a transaction of its own.
    fn remove_alone(&self, e: usize) {
        let mut tx = Tx::new(self.m);
        // A linked entry is always in its chain (`check` verifies it).
        let link = index::link_of(&tx, &self.g, e).expect("entry missing from the index");
        self.remove(&mut tx, e, link);
        tx.commit();
        crash::point(crash::BETWEEN);
    }

    /// Free up to [`EXPIRE_ON_WRITE`] expired entries at the LRU tail.
    fn expire_tail(&self, now: u64) {
        for _ in 0..EXPIRE_ON_WRITE {
            let tail = self.m.ld32(H_LRU_TAIL);
            if tail == 0 {
                return;
            }
            let e = index::off(tail);
            if !ttl::expired(&Tx::new(self.m), e, now) {
                return;
            }
            self.remove_alone(e);
        }
    }

    /// Give the used entries at the LRU tail their second chance, until the tail is an unused
    /// one; batches of [`SECOND_CHANCE_BATCH`], each committed on its own. Every entry moves at
    /// most once (its used word is cleared as it moves), so this ends within one pass.
    fn second_chances(&self) {
        let mut left = self.m.ld64(H_COUNT) as usize;
        while left > 0 {
            let mut tx = Tx::new(self.m);
            let moved = lru::second_chance(&mut tx, SECOND_CHANCE_BATCH.min(left));
            tx.commit();
            if moved < SECOND_CHANCE_BATCH {
                return;
            }
            crash::point(crash::BETWEEN);
            left -= moved;
        }
    }

    /// Free one entry to make room, never `keep`: an expired one if there is one within
    /// [`EXPIRED_SCAN`] of the LRU tail, else (unless `safe`) the least recently used.
    /// `Ok(true)` if a live entry was evicted; `NoMemory` if nothing may go.
    fn evict_one(
        &self,
        now: u64,
        safe: bool,
        keep: Option<usize>,
        scan: &mut bool,
    ) -> Result<bool, DictError> {
        let tx = Tx::new(self.m);
        if *scan {
            let mut r = tx.r32(H_LRU_TAIL);
            for _ in 0..EXPIRED_SCAN {
                if r == 0 {
                    break;
                }
                let e = index::off(r);
                if Some(e) != keep && ttl::expired(&tx, e, now) {
                    self.remove_alone(e);
                    return Ok(false);
                }
                r = tx.r32(e + E_PREV);
            }
            // None near the tail: do not look again during this operation.
            *scan = false;
        }
        if safe {
            return Err(DictError::NoMemory);
        }
        self.second_chances();
        let tx = Tx::new(self.m);
        let mut r = tx.r32(H_LRU_TAIL);
        if r != 0 && Some(index::off(r)) == keep {
            r = tx.r32(index::off(r) + E_PREV);
        }
        if r == 0 {
            return Err(DictError::NoMemory);
        }
        let e = index::off(r);
        let live = !ttl::expired(&tx, e, now);
        self.remove_alone(e);
        if live {
            let n = self.m.ld64(H_EVICTED);
            self.m.st64(H_EVICTED, n + 1);
        }
        Ok(live)
    }

    /// Store `key` → `value`: the new entry is built in free memory and published, with the
    /// old entry (if any) freed, in one transaction. Returns the live entries evicted.
    pub(crate) fn store(
        &self,
        key: &[u8],
        value: Value<'_>,
        w: Write,
        now: u64,
    ) -> Result<u32, DictError> {
        let Write {
            expires,
            flags,
            mode,
            safe,
        } = w;
        self.expire_tail(now);
        let hash = self.hash(key);
        let (kind, vlen) = match value {
            Value::Bytes(b) => (VALUE_BYTES, b.len()),
            Value::Int(_) => (VALUE_INT, 8),
        };
        let size = Size::of(entry_size(key.len(), vlen));
        let mut evicted = 0u32;
        let mut scan = true;
        for _ in 0..=MAX_EVICT + EXPIRED_SCAN {
            let mut tx = Tx::new(self.m);
            let found = index::find(&tx, &self.g, key, hash);
            let live = found.is_some_and(|(e, _)| !ttl::expired(&tx, e, now));
            match mode {
                Mode::Absent if live => return Err(DictError::Exists),
                Mode::Present if !live => return Err(DictError::NotFound),
                _ => {}
            }
            // Allocate first, while the old entry still holds its chunk: the new one is
            // written beside it, never over it.
            let Some(e) = alloc::alloc(&mut tx, &self.g, size) else {
                // Nothing was written: the plan is dropped.
                if evicted as usize >= MAX_EVICT {
                    return Err(DictError::NoMemory);
                }
                if self.evict_one(now, safe, found.map(|f| f.0), &mut scan)? {
                    evicted += 1;
                }
                continue;
            };
            // The entry, whole, in memory no structure names yet.
            let m = self.m;
            m.st32(e + E_HASH, hash);
            m.st32(e + E_KEYLEN_KIND, key.len() as u32 | kind << 16);
            m.st32(e + E_FLAGS, flags);
            m.st32(e + E_VLEN, vlen as u32);
            m.st32(e + E_USED, 0);
            m.st64(e + E_EXPIRES, expires);
            let seq = tx.r64(H_SEQ) + 1;
            m.st64(e + E_SEQ, seq);
            match value {
                Value::Bytes(b) => m.write(e + E_VALUE, b),
                Value::Int(i) => m.st64(e + E_VALUE, i as u64),
            }
            m.write(key_off(e, vlen), key);
            // Its links and the structures' changes, planned.
            tx.w64(H_SEQ, seq);
            match found {
                Some((old, link)) => {
                    index::swap(&mut tx, link, old, e);
                    lru::replace(&mut tx, old, e);
                    alloc::free(&mut tx, &self.g, old);
                }
                None => {
                    index::link(&mut tx, &self.g, e, hash);
                    lru::push_head(&mut tx, e);
                    let n = tx.r64(H_COUNT);
                    tx.w64(H_COUNT, n + 1);
                }
            }
            crash::point(crash::ENTRY_WRITTEN);
            tx.commit();
            return Ok(evicted);
        }
        Err(DictError::NoMemory)
    }

    /// The live (or, with `stale`, also expired) entry of `key`, marked used if live:
    /// `(entry, expired)`.
    pub(crate) fn get(&self, key: &[u8], stale: bool, now: u64) -> Option<(usize, bool)> {
        let tx = Tx::new(self.m);
        let (e, _) = index::find(&tx, &self.g, key, self.hash(key))?;
        let expired = ttl::expired(&tx, e, now);
        if expired && !stale {
            return None;
        }
        if !expired {
            lru::mark_used(self.m, e);
        }
        Some((e, expired))
    }

    /// Read entry `e`'s value and flags.
    pub(crate) fn value_of(&self, e: usize) -> (Value<'_>, u32) {
        let tx = Tx::new(self.m);
        let (_, kind) = index::klen_kind(&tx, e);
        let flags = tx.r32(e + E_FLAGS);
        if kind == VALUE_INT {
            (Value::Int(self.m.ld64(e + E_VALUE) as i64), flags)
        } else {
            let vlen = tx.r32(e + E_VLEN) as usize;
            (Value::Bytes(self.m.bytes(e + E_VALUE, vlen)), flags)
        }
    }

    /// Add `by` to the integer at `key`; if it has no live entry, store `init + by` with
    /// `init_expires` (if `init` is given). `(new value, live entries evicted)`.
    pub(crate) fn incr(
        &self,
        key: &[u8],
        by: i64,
        init: Option<(i64, u64)>,
        now: u64,
    ) -> Result<(i64, u32), DictError> {
        self.expire_tail(now);
        let mut tx = Tx::new(self.m);
        if let Some((e, _)) = index::find(&tx, &self.g, key, self.hash(key)) {
            if !ttl::expired(&tx, e, now) {
                if index::klen_kind(&tx, e).1 != VALUE_INT {
                    return Err(DictError::NotANumber);
                }
                let v = tx.r64(e + E_VALUE) as i64;
                let v = v.checked_add(by).ok_or(DictError::Overflow)?;
                tx.w64(e + E_VALUE, v as u64);
                lru::touch(&mut tx, e);
                tx.commit();
                return Ok((v, 0));
            }
        }
        let Some((init, expires)) = init else {
            return Err(DictError::NotFound);
        };
        let v = init.checked_add(by).ok_or(DictError::Overflow)?;
        let w = Write {
            expires,
            flags: 0,
            mode: Mode::Any,
            safe: false,
        };
        let evicted = self.store(key, Value::Int(v), w, now)?;
        Ok((v, evicted))
    }

    /// Remove `key`'s entry; whether it had a live one.
    pub(crate) fn delete(&self, key: &[u8], now: u64) -> bool {
        let mut tx = Tx::new(self.m);
        match index::find(&tx, &self.g, key, self.hash(key)) {
            Some((e, link)) => {
                let live = !ttl::expired(&tx, e, now);
                self.remove(&mut tx, e, link);
                tx.commit();
                live
            }
            None => false,
        }
    }

    /// The live entry of `key`, or `NotFound`.
    fn live(&self, key: &[u8], now: u64) -> Result<usize, DictError> {
        let tx = Tx::new(self.m);
        match index::find(&tx, &self.g, key, self.hash(key)) {
            Some((e, _)) if !ttl::expired(&tx, e, now) => Ok(e),
            _ => Err(DictError::NotFound),
        }
    }

    pub(crate) fn ttl(&self, key: &[u8], now: u64) -> Result<Option<Duration>, DictError> {
        let e = self.live(key, now)?;
        Ok(ttl::left(&Tx::new(self.m), e, now))
    }

    pub(crate) fn expire(&self, key: &[u8], expires: u64, now: u64) -> Result<(), DictError> {
        let e = self.live(key, now)?;
        let mut tx = Tx::new(self.m);
        tx.w64(e + E_EXPIRES, expires);
        tx.commit();
        Ok(())
    }

    /// Expire every entry at once: one word (entries written up to now count as flushed).
    pub(crate) fn flush_all(&self) {
        let mut tx = Tx::new(self.m);
        let seq = tx.r64(H_SEQ);
        tx.w64(H_FLUSH_SEQ, seq);
        tx.commit();
    }

    /// Free up to `max` (0: all) expired entries, from the LRU tail up. How many were freed.
    pub(crate) fn flush_expired(&self, max: usize, now: u64) -> usize {
        let mut freed = 0;
        let mut r = self.m.ld32(H_LRU_TAIL);
        while r != 0 && (max == 0 || freed < max) {
            let e = index::off(r);
            let tx = Tx::new(self.m);
            r = tx.r32(e + E_PREV);
            if ttl::expired(&tx, e, now) {
                self.remove_alone(e);
                freed += 1;
            }
        }
        freed
    }

    /// Up to `max` (0: all) live keys, most recently used first.
    pub(crate) fn keys(&self, max: usize, now: u64) -> Vec<Vec<u8>> {
        let tx = Tx::new(self.m);
        let mut out = Vec::new();
        let mut r = tx.r32(H_LRU_HEAD);
        let mut left = tx.r64(H_COUNT);
        while r != 0 && left > 0 && (max == 0 || out.len() < max) {
            let e = index::off(r);
            if !ttl::expired(&tx, e, now) {
                out.push(index::key_of(&tx, e).to_vec());
            }
            r = tx.r32(e + E_NEXT);
            left -= 1;
        }
        out
    }
}
