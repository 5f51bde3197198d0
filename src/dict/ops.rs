//! The operations, on a [`Zone`]: the region seen by the holder of its lock. Each is one or
//! more transactions ([`ZoneTx`]). A write that must free room first plans the whole of it on an
//! overlay (nothing changes if it cannot succeed): from the LRU tail, or, if that frees no
//! room of its size, by emptying a run of pages near the tail. Then it frees the entries
//! planned in one transaction (or, when that would overflow the redo record, one entry per
//! transaction) and stores in another: a death between two leaves a dictionary with some
//! entries freed and the rest as they were, every one whole.

use super::alloc::{self, Size};
use super::index;
use super::layout::*;
use super::lru;
use super::redo::ZoneTx;
use super::ttl::{self, Now};
use super::types::{DictError, Value};
use crate::crash;
use std::time::Duration;

/// How many expired entries a write frees from the LRU tail before it starts (lua_shared_dict
/// frees up to 2).
const EXPIRE_ON_WRITE: usize = 2;
/// How far up from the LRU tail a write that does not fit looks for expired entries (they do
/// not count against [`MAX_EVICT`]).
const EXPIRED_SCAN: usize = 1024;
/// At most this many live entries may be evicted for one write; if that would not make room
/// it fails with [`DictError::NoMemory`], evicting none (lua_shared_dict: 30 tries).
pub(crate) const MAX_EVICT: usize = 64;

/// What a slice of a pass over the index may cost under one hold of the lock, in units of a
/// bucket looked at (4 bytes, 16 to a cache line). On 100 000 keys a hold measured 9–25 µs
/// (median) and at most 90 µs, with about 110 keys copied or 25 entries freed per slice
/// (docs/benchmarks.md; a slice always ends its last bucket: a chain more).
pub(crate) const SLICE_WORK: usize = 1024;
/// What an entry a pass looks at costs (its line or two, missed in a large zone; a key copied).
const VISIT_COST: usize = 8;
/// What an entry a pass frees costs (a transaction through the redo record).
const FREE_COST: usize = 32;

/// Where a pass over a zone's index stands between two slices: the next bucket to visit. An
/// entry never changes bucket (its hash picks it, in an array of fixed size; an update
/// replaces the entry in its chain) and each bucket is visited whole under one hold, so a
/// pass meets every entry that stays in the zone from its start to its end exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor(u32);

impl Cursor {
    /// The first bucket.
    pub(crate) const START: Self = Self(0);
}

/// What a pass did with an entry it met.
enum Met {
    /// Left it (what that cost, in [`SLICE_WORK`]'s units).
    Kept(usize),
    /// Freed it: the word that named it names the next one now (what that cost).
    Freed(usize),
    /// Nothing more to do: the pass ends.
    Stop,
}

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
    /// The value (bytes) is an encoded list.
    pub list: bool,
}

/// Room planned for a new entry: the plan, its steps in order, and how many live entries it
/// evicts.
struct Room<'m> {
    plan: ZoneTx<'m>,
    room: Vec<Step>,
    live: u32,
}

/// A step of making room.
#[derive(Clone, Copy)]
enum Step {
    /// Free entry `e` (`live`: an eviction).
    Free { e: usize, live: bool },
    /// Give the used entry `e` at the LRU tail its second chance: to the head, its used word
    /// cleared (the CLOCK approximation of LRU, see `lru`).
    Spare(usize),
}

/// A key looked up: its hash, where its entry is (the entry, the word that links to it), and
/// whether that entry is live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Looked {
    pub hash: u32,
    pub found: Option<(usize, usize)>,
    pub live: bool,
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

    /// Unlink and free entry `e` (linked from `link`); `evicted`: it is live (statistics).
    fn remove(&self, tx: &mut ZoneTx<'_>, e: usize, link: usize, evicted: bool) {
        index::unlink(tx, link, e);
        lru::unlink(tx, e);
        tx.sub64(H_COUNT, 1);
        if evicted {
            let n = tx.r64(H_EVICTED);
            tx.w64(H_EVICTED, n.saturating_add(1));
        }
        alloc::free(tx, &self.g, e);
    }

    /// Plan the removal of entry `e`, found by a route other than its key (the LRU list).
    fn remove_found(&self, tx: &mut ZoneTx<'_>, e: usize, evicted: bool) -> Result<(), DictError> {
        let link = self.link_of(tx, e)?;
        self.remove(tx, e, link, evicted);
        Ok(())
    }

    /// The word that links to entry `e`, found by a route other than its key.
    fn link_of(&self, tx: &impl Words, e: usize) -> Result<usize, DictError> {
        // A linked entry is always in its chain (`check` verifies it).
        index::link_of(tx, &self.g, e)
            .ok_or_else(|| DictError::Corrupt(format!("entry at {e:#x} missing from the index")))
    }

    /// Remove entry `e`, found by a route other than its key, in a transaction of its own.
    fn remove_alone(&self, e: usize, evicted: bool) -> Result<(), DictError> {
        let link = self.link_of(self.m, e)?;
        self.remove_linked(e, link, evicted);
        Ok(())
    }

    /// Remove entry `e` (linked from `link`) in a transaction of its own.
    fn remove_linked(&self, e: usize, link: usize, evicted: bool) {
        let mut tx = ZoneTx::new(self.m);
        self.remove(&mut tx, e, link, evicted);
        tx.commit();
        crash::point(crash::DICT_BETWEEN);
    }

    /// lua_shared_dict's freeing of expired entries at the LRU tail on every write: plan the
    /// removal of up to [`EXPIRE_ON_WRITE`] of them (never `keep`, the key's own entry);
    /// the entries planned, tail first, then zeros (no entry is at offset 0, the header).
    pub(crate) fn expire_tail(
        &self,
        tx: &mut ZoneTx<'_>,
        keep: Option<usize>,
        now: &Now,
    ) -> Result<[usize; EXPIRE_ON_WRITE], DictError> {
        let mut freed = [0; EXPIRE_ON_WRITE];
        for f in &mut freed {
            let tail = tx.r32(H_LRU_TAIL);
            let e = index::off(tail);
            if tail == 0 || Some(e) == keep || !ttl::expired(tx, e, now) {
                break;
            }
            self.remove_found(tx, e, false)?;
            *f = e;
        }
        Ok(freed)
    }

    /// Plan room for a new entry of `size` (never freeing `keep`, the key's live entry):
    /// lua_shared_dict's freeing of expired entries at the LRU tail on every write; then, while
    /// it does not fit, the expired entries within [`EXPIRED_SCAN`] of the tail; then (unless
    /// `safe`) the least recently used entries, at most [`MAX_EVICT`] of them live. The plan
    /// is made on an overlay and changes nothing: if the entry cannot fit within these
    /// bounds, `NoMemory` leaves every entry where it was. `(plan, entries to free with
    /// whether each is live, live ones)`.
    fn plan_room(
        &self,
        size: Size,
        keep: Option<usize>,
        safe: bool,
        now: &Now,
    ) -> Result<Room<'_>, DictError> {
        let mut plan = ZoneTx::plan(self.m);
        let mut room = Vec::new();
        // Bounds every walk (a corrupt list may hold a cycle).
        let entries = plan.r64(H_COUNT).min(self.g.max_entries()) as usize;
        let free = |plan: &mut ZoneTx<'_>, room: &mut Vec<Step>, e, live| {
            room.push(Step::Free { e, live });
            self.remove_found(plan, e, live)
        };
        for e in self
            .expire_tail(&mut plan, keep, now)?
            .into_iter()
            .take_while(|&e| e != 0)
        {
            room.push(Step::Free { e, live: false });
        }
        let mut r = plan.r32(H_LRU_TAIL);
        for _ in 0..EXPIRED_SCAN.min(entries) {
            if r == 0 || alloc::fits(&plan, size) {
                break;
            }
            let e = index::off(r);
            r = plan.r32(e + E_PREV);
            if Some(e) != keep && ttl::expired(&plan, e, now) {
                free(&mut plan, &mut room, e, false)?;
            }
        }
        let mut live = 0;
        let mut r = plan.r32(H_LRU_TAIL);
        // Each entry is passed at most twice: once to spare it (its used word cleared), once
        // to evict it (`keep` at most twice too: the walk wraps once, after sparing the head).
        for _ in 0..=2 * entries {
            if alloc::fits(&plan, size) {
                return Ok(Room { plan, room, live });
            }
            if r == 0 || safe {
                break;
            }
            let e = index::off(r);
            r = plan.r32(e + E_PREV);
            if Some(e) == keep {
                continue;
            }
            let is_live = !ttl::expired(&plan, e, now);
            if is_live && plan.r32(e + E_USED) != 0 {
                lru::spare(&mut plan, e);
                room.push(Step::Spare(e));
                if r == 0 {
                    // `e` was the head: the walk wraps to the tail (CLOCK), where the entries
                    // spared are now, unmarked; `e` among them.
                    r = plan.r32(H_LRU_TAIL);
                }
                continue;
            }
            if is_live {
                if live as usize == MAX_EVICT {
                    break;
                }
                live += 1;
            }
            free(&mut plan, &mut room, e, is_live)?;
        }
        if safe {
            return Err(DictError::NoMemory);
        }
        self.plan_pages(size, keep, now)?.ok_or(DictError::NoMemory)
    }

    /// Plan room for `size` by emptying the aligned run of pages it needs (one page for a slab
    /// chunk, 2^k for a block) around an entry near the LRU tail: for when evicting from the
    /// tail frees no such run, because the entries it reaches are spread over pages they share
    /// with newer ones (a zone full of entries of one size class, a write of another). The
    /// first run, going up from the tail over [`EXPIRED_SCAN`] entries, that holds neither
    /// `keep` nor more than [`MAX_EVICT`] live entries is emptied; `None` if there is none. On
    /// an overlay of its own, like [`plan_room`](Self::plan_room).
    fn plan_pages(
        &self,
        size: Size,
        keep: Option<usize>,
        now: &Now,
    ) -> Result<Option<Room<'_>>, DictError> {
        let run = match size {
            Size::Class(_) => 1,
            Size::Order(k) => 1u32.checked_shl(k).unwrap_or(u32::MAX),
        };
        if run > self.g.npages {
            return Ok(None);
        }
        let mut plan = ZoneTx::plan(self.m);
        let entries = plan.r64(H_COUNT).min(self.g.max_entries()) as usize;
        let mut tried = std::collections::HashSet::new();
        let mut r = plan.r32(H_LRU_TAIL);
        for _ in 0..EXPIRED_SCAN.min(entries) {
            if r == 0 {
                break;
            }
            let e = index::off(r);
            r = plan.r32(e + E_PREV);
            if Some(e) == keep {
                continue;
            }
            let first = self.g.page_of(self.m, e) & !(run - 1);
            let victims = match alloc::size_at(&plan, &self.g, e) {
                // A block at least as large as the run: it alone makes the room.
                Some(Size::Order(k))
                    if 1u64.checked_shl(k).is_some_and(|b| b >= u64::from(run)) =>
                {
                    vec![e]
                }
                _ if first + run > self.g.npages || !tried.insert(first) => continue,
                _ => match self.entries_in(&plan, first, run, keep) {
                    Some(v) => v,
                    None => continue,
                },
            };
            let room: Vec<Step> = victims
                .into_iter()
                .map(|e| Step::Free {
                    e,
                    live: !ttl::expired(&plan, e, now),
                })
                .collect();
            let live = room
                .iter()
                .filter(|s| matches!(s, Step::Free { live: true, .. }))
                .count();
            if live > MAX_EVICT {
                continue;
            }
            for &step in &room {
                if let Step::Free { e, live } = step {
                    self.remove_found(&mut plan, e, live)?;
                }
            }
            if !alloc::fits(&plan, size) {
                // Only a corrupt zone gets here (a freed run merges into a free block).
                return Ok(None);
            }
            return Ok(Some(Room {
                plan,
                room,
                live: live as u32,
            }));
        }
        Ok(None)
    }

    /// The entries in pages `first .. first + run` (a run aligned to its size), by their
    /// page descriptors; `None` if `keep` is among them, if they are more than a write may
    /// evict with the expired ones beside, or if a descriptor is not a block's start.
    fn entries_in(
        &self,
        tx: &ZoneTx<'_>,
        first: u32,
        run: u32,
        keep: Option<usize>,
    ) -> Option<Vec<usize>> {
        let mut out = Vec::new();
        let mut p = first;
        while p < first + run {
            let d = Geometry::desc(p);
            let arg = tx.r32(d + D_ARG);
            let span = match tx.r32(d + D_KIND) {
                KIND_FREE => 1u32.checked_shl(arg)?,
                KIND_LARGE => {
                    out.push(self.g.page(p));
                    1u32.checked_shl(arg)?
                }
                KIND_SLAB => {
                    let chunk = *CLASSES.get(arg as usize)? as usize;
                    let bm = tx.r64(d + D_BITMAP);
                    let used = (0..alloc::chunks(arg)).filter(|i| bm & 1 << i != 0);
                    out.extend(used.map(|i| self.g.page(p) + i as usize * chunk));
                    1
                }
                _ => return None,
            };
            if out.len() > 4 * MAX_EVICT || keep.is_some_and(|k| out.contains(&k)) {
                return None;
            }
            p = p.checked_add(span)?;
        }
        Some(out)
    }

    /// Free what [`plan_room`](Self::plan_room) planned: in one transaction if it fits the
    /// redo record, else one entry per transaction (each leaving a valid dictionary).
    fn make_room(&self, room: Room<'_>) -> Result<(), DictError> {
        if room.room.is_empty() {
            return Ok(());
        }
        if room.plan.fits_record() {
            room.plan.commit();
            crash::point(crash::DICT_BETWEEN);
            return Ok(());
        }
        for step in room.room {
            match step {
                Step::Free { e, live } => self.remove_alone(e, live)?,
                Step::Spare(e) => {
                    let mut tx = ZoneTx::new(self.m);
                    lru::spare(&mut tx, e);
                    tx.commit();
                    crash::point(crash::DICT_BETWEEN);
                }
            }
        }
        Ok(())
    }

    /// Store `key` → `value`: the new entry is built in free memory and published, with the
    /// old entry (if any) freed, in one transaction. Returns the live entries evicted to make
    /// room (freed first, in transactions of their own; none if the store fails).
    pub(crate) fn store(
        &self,
        key: &[u8],
        value: Value<'_>,
        w: Write,
        now: &Now,
    ) -> Result<u32, DictError> {
        let l = self.look(key, now);
        self.store_found(key, l, value, w, now)
    }

    /// [`store`](Self::store) of a key looked up already ([`look`](Self::look)). An update of
    /// the same size is written in place ([`overwrite`](Self::overwrite)).
    pub(crate) fn store_found(
        &self,
        key: &[u8],
        Looked { hash, found, live }: Looked,
        value: Value<'_>,
        w: Write,
        now: &Now,
    ) -> Result<u32, DictError> {
        let Write {
            expires,
            flags,
            mode,
            safe,
            list,
        } = w;
        let (kind, vlen) = match value {
            Value::Bytes(b) if list => (VALUE_LIST, b.len()),
            Value::Bytes(b) => (VALUE_BYTES, b.len()),
            Value::Int(_) => (VALUE_INT, 8),
        };
        match mode {
            Mode::Absent if live => return Err(DictError::Exists),
            Mode::Present if !live => return Err(DictError::NotFound),
            _ => {}
        }
        if let Some((e, _)) = found {
            if self.overwrite(e, live, key.len() as u32 | kind << 16, value, w, now)? {
                return Ok(0);
            }
        }
        let size = Size::of(entry_size(key.len(), vlen));
        let mut found = found;
        // The key's live entry stays until the new one replaces it (it is never written over);
        // an expired one may go to make room.
        let room = self.plan_room(size, found.filter(|_| live).map(|f| f.0), safe, now)?;
        let evicted = room.live;
        if !room.room.is_empty() {
            self.make_room(room)?;
            found = index::find(self.m, &self.g, key, hash);
        }
        // Allocate first, while the old entry still holds its chunk: the new one is written
        // beside it, never over it.
        let mut tx = ZoneTx::new(self.m);
        let Some(e) = alloc::alloc(&mut tx, &self.g, size) else {
            return Err(DictError::Corrupt(
                "no chunk where the plan found room".to_string(),
            ));
        };
        // The entry, whole, in memory no structure names yet.
        let m = self.m;
        m.st32(e + E_HASH, hash);
        m.st32(e + E_KEYLEN_KIND, key.len() as u32 | kind << 16);
        m.st32(e + E_FLAGS, flags);
        m.st32(e + E_VLEN, vlen as u32);
        m.st32(e + E_USED, 0);
        m.st64(e + E_EXPIRES, expires);
        tx.add64(H_SEQ, 1);
        let seq = tx.r64(H_SEQ);
        m.st64(e + E_SEQ, seq);
        match value {
            Value::Bytes(b) => m.write(e + E_VALUE, b),
            Value::Int(i) => m.st64(e + E_VALUE, i as u64),
        }
        m.write(key_off(e, vlen), key);
        // Its links and the structures' changes, planned.
        match found {
            Some((old, link)) => {
                index::swap(&mut tx, link, old, e);
                lru::replace(&mut tx, old, e);
                alloc::free(&mut tx, &self.g, old);
            }
            None => {
                index::link(&mut tx, &self.g, e, hash);
                lru::push_head(&mut tx, e);
                tx.add64(H_COUNT, 1);
            }
        }
        crash::point(crash::DICT_ENTRY_WRITTEN);
        tx.commit();
        Ok(evicted)
    }

    /// The live (or, with `stale`, also expired) entry of `key`, marked used if live:
    /// `(entry, expired)`.
    #[inline]
    pub(crate) fn get(&self, key: &[u8], stale: bool, now: &Now) -> Option<(usize, bool)> {
        let l = self.look(key, now);
        let (e, _) = l.found?;
        if !l.live && !stale {
            return None;
        }
        if l.live {
            lru::mark_used(self.m, e);
        }
        Some((e, !l.live))
    }

    /// Look `key` up (once, for an operation that reads and may then store).
    #[inline]
    pub(crate) fn look(&self, key: &[u8], now: &Now) -> Looked {
        let hash = self.hash(key);
        let found = index::find(self.m, &self.g, key, hash);
        let live = found.is_some_and(|(e, _)| !ttl::expired(self.m, e, now));
        Looked { hash, found, live }
    }

    /// Whether entry `e` holds a list.
    pub(crate) fn is_list(&self, e: usize) -> bool {
        index::klen_kind(self.m, e).1 == VALUE_LIST
    }

    /// Read entry `e`'s value and flags (a list's encoded bytes).
    #[inline]
    pub(crate) fn value_of(&self, e: usize) -> (Value<'_>, u32) {
        let tx = self.m;
        let (_, kind) = index::klen_kind(tx, e);
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
        now: &Now,
    ) -> Result<(i64, u32), DictError> {
        let tx = self.m;
        if let Some((e, _)) = index::find(tx, &self.g, key, self.hash(key)) {
            if !ttl::expired(tx, e, now) {
                if index::klen_kind(tx, e).1 != VALUE_INT {
                    return Err(DictError::NotANumber);
                }
                let v = tx.r64(e + E_VALUE) as i64;
                let v = v.checked_add(by).ok_or(DictError::Overflow)?;
                // One aligned 8-byte store, so a death leaves the old number or the new one:
                // no transaction. A use like a hit (marked, not moved).
                if !self.m.corrupt_seen() {
                    self.m.st64(e + E_VALUE, v as u64);
                    lru::mark_used(self.m, e);
                }
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
            list: false,
        };
        let evicted = self.store(key, Value::Int(v), w, now)?;
        Ok((v, evicted))
    }

    /// Remove `key`'s entry; whether it had a live one.
    pub(crate) fn delete(&self, key: &[u8], now: &Now) -> bool {
        let mut tx = ZoneTx::new(self.m);
        match index::find(&tx, &self.g, key, self.hash(key)) {
            Some((e, link)) => {
                let live = !ttl::expired(self.m, e, now);
                self.remove(&mut tx, e, link, false);
                tx.commit();
                live
            }
            None => false,
        }
    }

    /// The live entry of `key`, or `NotFound`.
    fn live(&self, key: &[u8], now: &Now) -> Result<usize, DictError> {
        let tx = self.m;
        match index::find(tx, &self.g, key, self.hash(key)) {
            Some((e, _)) if !ttl::expired(tx, e, now) => Ok(e),
            _ => Err(DictError::NotFound),
        }
    }

    pub(crate) fn ttl(&self, key: &[u8], now: &Now) -> Result<Option<Duration>, DictError> {
        let e = self.live(key, now)?;
        Ok(ttl::left(self.m, e, now))
    }

    pub(crate) fn expire(&self, key: &[u8], expires: u64, now: &Now) -> Result<(), DictError> {
        let e = self.live(key, now)?;
        let mut tx = ZoneTx::new(self.m);
        tx.w64(e + E_EXPIRES, expires);
        tx.commit();
        Ok(())
    }

    /// Expire every entry at once: one word (entries written up to now count as flushed).
    pub(crate) fn flush_all(&self) {
        let mut tx = ZoneTx::new(self.m);
        let seq = tx.r64(H_SEQ);
        tx.w64(H_FLUSH_SEQ, seq);
        tx.commit();
    }

    /// One slice of a pass over the index ([`ShmDict::keys`](super::ShmDict::keys),
    /// [`ShmDict::flush_expired`](super::ShmDict::flush_expired)), under one hold of the lock:
    /// `f(e, link)` on every entry of the buckets from `at` on (`link`: the word that names
    /// `e`), whole buckets, until [`SLICE_WORK`] is spent (a bucket counts 1, an entry what
    /// `f` says). Where the next slice starts; `None` at the end of the index, or when `f`
    /// says [`Met::Stop`].
    fn slice(&self, at: Cursor, mut f: impl FnMut(usize, usize) -> Met) -> Option<Cursor> {
        let m = self.m;
        // A chain is never longer than the number of entries: bound each walk (a corrupt
        // cycle would otherwise spin for ever under the lock).
        let bound = m.ld64(H_COUNT).min(self.g.max_entries()) + 1;
        let (mut b, mut work) = (at.0, 0);
        while b < self.g.nbuckets && work < SLICE_WORK && !m.corrupt_seen() {
            // `b` is below the (power of two) number of buckets: its own bucket.
            let mut link = index::bucket(&self.g, b);
            let mut left = bound;
            loop {
                let r = m.ld32(link);
                if r == 0 || left == 0 || m.corrupt_seen() {
                    break;
                }
                left -= 1;
                let e = index::off(r);
                match f(e, link) {
                    Met::Kept(cost) => {
                        work += cost;
                        link = e + E_HNEXT;
                    }
                    // `link` names the next entry now.
                    Met::Freed(cost) => work += cost,
                    Met::Stop => return None,
                }
            }
            b += 1;
            work += 1;
        }
        (b < self.g.nbuckets && !m.corrupt_seen()).then_some(Cursor(b))
    }

    /// One slice of `flush_expired`: free the expired entries of the buckets from `at` on,
    /// each in a transaction of its own, until `*freed` reaches `max` (0: no bound). Where the
    /// next slice starts (`None`: done).
    pub(crate) fn flush_expired_slice(
        &self,
        at: Cursor,
        max: usize,
        freed: &mut usize,
        now: &Now,
    ) -> Option<Cursor> {
        self.slice(at, |e, link| {
            if max != 0 && *freed >= max {
                return Met::Stop;
            }
            if !ttl::expired(self.m, e, now) {
                return Met::Kept(VISIT_COST);
            }
            self.remove_linked(e, link, false);
            *freed += 1;
            Met::Freed(FREE_COST)
        })
    }

    /// One slice of `keys`: the live keys of the buckets from `at` on, into `out` until it
    /// holds `max` (0: no bound). Where the next slice starts (`None`: done). Reads only.
    pub(crate) fn keys_slice(
        &self,
        at: Cursor,
        max: usize,
        out: &mut Vec<Vec<u8>>,
        now: &Now,
    ) -> Option<Cursor> {
        self.slice(at, |e, _| {
            if max != 0 && out.len() >= max {
                return Met::Stop;
            }
            if !ttl::expired(self.m, e, now) {
                out.push(index::key_of(self.m, e).to_vec());
            }
            Met::Kept(VISIT_COST)
        })
    }

    /// Every key in LRU order (most recently written or spared first), expired ones too: what
    /// tests compare the LRU list with (`keys` has no order).
    #[cfg(any(test, feature = "__crash-points"))]
    pub(crate) fn lru_keys(&self) -> Vec<Vec<u8>> {
        let m = self.m;
        let mut out = Vec::new();
        let mut r = m.ld32(H_LRU_HEAD);
        let mut left = m.ld64(H_COUNT).min(self.g.max_entries());
        while r != 0 && left > 0 {
            let e = index::off(r);
            out.push(index::key_of(m, e).to_vec());
            r = m.ld32(e + E_NEXT);
            left -= 1;
        }
        out
    }
}
