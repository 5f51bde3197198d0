//! lua_shared_dict's list operations: a key holds either a scalar or a list of byte strings.
//!
//! A list is one entry whose value is a header of two u32s, little-endian (where the live
//! items start and end, byte offsets in the value), then the items encoded back to back (each
//! a u32 length, little-endian, then its bytes, first to last). A push is a store of the new
//! encoding, compacted (written beside the old one and published by one commit, as every store
//! is). A pop shrinks the list in place: it rewrites the header (one aligned word) and moves
//! the entry to the LRU head, in one transaction, so it allocates nothing, never fails for
//! want of memory and never evicts; the popped bytes are freed with the list (when its last
//! item goes, the key is deleted) or by its next push. So a death at any instruction leaves
//! the old list or the new, through the same redo record as the other operations, and
//! [`check`](super::ShmDict::check) verifies each list's encoding. The cost: a push copies the
//! list (lists are meant to be short, as in lua_shared_dict's uses: queues of pending work),
//! and a list's encoding is bounded by the largest value ([`ShmDict::max_value_len`]).

use super::layout::{E_EXPIRES, E_FLAGS, E_VALUE};
use super::lru;
use super::ops::{Mode, Write, Zone};
use super::redo::ZoneTx;
use super::ttl::Now;
use super::types::{DictError, Value};
use super::ShmDict;

/// Bytes of an item's length prefix.
const LEN: usize = 4;
/// Bytes of a list's header (start and end of its live items).
const HEADER: usize = 8;

/// The live items of an encoded list and their offset in it, or `None` if its header does not
/// bound them within it.
fn live(b: &[u8]) -> Option<(usize, &[u8])> {
    let start = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let end = u32::from_le_bytes(b.get(4..HEADER)?.try_into().ok()?) as usize;
    if start < HEADER || start > end {
        return None;
    }
    Some((start, b.get(start..end)?))
}

/// The number of live items of an encoded list, or `None` if they do not tile exactly.
pub(crate) fn items(b: &[u8]) -> Option<usize> {
    count(live(b)?.1)
}

/// The number of items encoded back to back in `b`, or `None` if they do not tile exactly.
fn count(mut b: &[u8]) -> Option<usize> {
    let mut n = 0;
    while !b.is_empty() {
        let len = u32::from_le_bytes(b.get(..LEN)?.try_into().ok()?) as usize;
        b = b.get(LEN..)?.get(len..)?;
        n += 1;
    }
    Some(n)
}

/// The live items without the first one (`front`) or the last: `(item, start, end)`, the
/// offsets in `live` of what is left. Lengths are read from the zone: added checked (`None`,
/// as for a list that is not whole).
fn split(b: &[u8], front: bool) -> Option<(&[u8], usize, usize)> {
    if front {
        let len = u32::from_le_bytes(b.get(..LEN)?.try_into().ok()?) as usize;
        let end = LEN.checked_add(len)?;
        let item = b.get(LEN..end)?;
        return Some((item, end, b.len()));
    }
    // The last item: walk to it.
    let mut at = 0;
    loop {
        let len = u32::from_le_bytes(b.get(at..at + LEN)?.try_into().ok()?) as usize;
        let end = (at + LEN).checked_add(len)?;
        if end >= b.len() {
            return Some((b.get(at + LEN..end)?, 0, at));
        }
        at = end;
    }
}

/// A key's live list: its entry, its live items (encoded) and their offset in the value.
struct Found<'m> {
    e: usize,
    items: &'m [u8],
    start: usize,
}

/// Which end of a list.
#[derive(Clone, Copy)]
enum End {
    Left,
    Right,
}

impl Zone<'_> {
    /// The live list of `key`: `Ok(None)` if the key has no live entry, `WrongType` if it holds
    /// a scalar.
    fn list(&self, key: &[u8], now: &Now) -> Result<Option<Found<'_>>, DictError> {
        // Found without moving it in the LRU order: the store that follows does (a push or pop
        // is one transaction, or a delete).
        let l = self.look(key, now);
        let Some((e, _)) = l.found.filter(|_| l.live) else {
            return Ok(None);
        };
        if !self.is_list(e) {
            return Err(DictError::WrongType);
        }
        match self.value_of(e).0 {
            Value::Bytes(b) => match live(b) {
                Some((start, items)) => Ok(Some(Found { e, items, start })),
                None => Err(DictError::Corrupt(format!(
                    "entry at {e:#x}: a list whose header is not within it"
                ))),
            },
            Value::Int(_) => Err(DictError::WrongType),
        }
    }

    /// Store `key`'s new list, encoded (it keeps the old entry's expiry and flags; a new one
    /// never expires).
    fn put_list(
        &self,
        key: &[u8],
        old: Option<usize>,
        new: &[u8],
        now: &Now,
    ) -> Result<(), DictError> {
        let (expires, flags) = match old {
            Some(e) => (self.m.ld64(e + E_EXPIRES), self.m.ld32(e + E_FLAGS)),
            None => (0, 0),
        };
        let w = Write {
            expires,
            flags,
            mode: Mode::Any,
            safe: false,
            list: true,
        };
        self.store(key, Value::Bytes(new), w, now).map(drop)
    }

    fn push(&self, key: &[u8], item: &[u8], end: End, max: usize, now: &Now) -> PushResult {
        let (old, bytes) = match self.list(key, now)? {
            Some(f) => (Some(f.e), f.items),
            None => (None, &[][..]),
        };
        let len = HEADER
            .saturating_add(bytes.len())
            .saturating_add(LEN)
            .saturating_add(item.len());
        if len > max {
            return Err(DictError::ValueTooLarge { len, max });
        }
        let Some(n) = count(bytes) else {
            return Err(not_whole(old.unwrap_or(0)));
        };
        let n = n + 1;
        let mut new = Vec::with_capacity(len);
        new.extend_from_slice(&(HEADER as u32).to_le_bytes());
        new.extend_from_slice(&(len as u32).to_le_bytes());
        let prefix = (item.len() as u32).to_le_bytes();
        match end {
            End::Left => {
                new.extend_from_slice(&prefix);
                new.extend_from_slice(item);
                new.extend_from_slice(bytes);
            }
            End::Right => {
                new.extend_from_slice(bytes);
                new.extend_from_slice(&prefix);
                new.extend_from_slice(item);
            }
        }
        self.put_list(key, old, &new, now)?;
        Ok(n)
    }

    fn pop(&self, key: &[u8], end: End, now: &Now) -> Result<Option<Vec<u8>>, DictError> {
        let Some(Found {
            e,
            items: bytes,
            start: base,
        }) = self.list(key, now)?
        else {
            return Ok(None);
        };
        let Some((item, start, stop)) = split(bytes, matches!(end, End::Left)) else {
            return Err(not_whole(e));
        };
        let item = item.to_vec();
        if start == stop {
            self.delete(key, now);
            return Ok(Some(item));
        }
        // In place: the live items' new bounds (offsets in the value), one aligned word, and
        // the move to the LRU head (a pop is a write), committed together.
        let bounds = (base + start) as u64 | ((base + stop) as u64) << 32;
        let mut tx = ZoneTx::new(self.m);
        tx.w64(e + E_VALUE, bounds);
        lru::touch(&mut tx, e);
        tx.commit();
        Ok(Some(item))
    }
}

type PushResult = Result<usize, DictError>;

/// The list at entry `e` does not tile: `check` would report it; the entry is not a list this
/// code wrote.
fn not_whole(e: usize) -> DictError {
    DictError::Corrupt(format!("entry at {e:#x}: a list that is not whole"))
}

impl ShmDict {
    fn push_at(&self, key: &[u8], item: &[u8], end: End) -> PushResult {
        Self::check_key(key)?;
        let max = self.max_value_len_for(key.len());
        self.shard(key)
            .try_with(|z, now| z.push(key, item, end, max, now))
    }

    /// Put `item` at the head of `key`'s list (a new list if the key has no live entry;
    /// [`DictError::WrongType`] if it holds a scalar) and return the list's length. Evicts to
    /// make room as [`set`](Self::set) does; the list keeps its TTL (a new one never expires,
    /// [`expire`](Self::expire) sets one). A list and its items are bounded together by
    /// [`max_value_len`](Self::max_value_len) (8 bytes per list, 4 of length per item); each
    /// push copies the list, so keep lists short.
    ///
    /// ```
    /// use gomutex::dict::{DictError, ShmDict};
    /// let jobs = ShmDict::anonymous(64 << 10)?;
    /// assert_eq!(jobs.rpush("queue", b"first")?, 1);
    /// assert_eq!(jobs.rpush("queue", b"second")?, 2);
    /// assert_eq!(jobs.lpush("queue", b"urgent")?, 3);
    /// assert_eq!(jobs.llen("queue")?, 3);
    /// assert_eq!(jobs.lpop("queue")?.as_deref(), Some(&b"urgent"[..]));
    /// assert_eq!(jobs.rpop("queue")?.as_deref(), Some(&b"second"[..]));
    /// assert_eq!(jobs.lpop("queue")?.as_deref(), Some(&b"first"[..]));
    /// assert_eq!(jobs.lpop("queue")?, None); // empty: the key is gone
    /// assert!(jobs.get("queue")?.is_none());
    /// jobs.set("n", 1i64, None, 0)?;
    /// assert_eq!(jobs.lpush("n", b"x"), Err(DictError::WrongType));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lpush(&self, key: impl AsRef<[u8]>, item: impl AsRef<[u8]>) -> PushResult {
        self.push_at(key.as_ref(), item.as_ref(), End::Left)
    }

    /// Put `item` at the tail of `key`'s list (see [`lpush`](Self::lpush)).
    pub fn rpush(&self, key: impl AsRef<[u8]>, item: impl AsRef<[u8]>) -> PushResult {
        self.push_at(key.as_ref(), item.as_ref(), End::Right)
    }

    fn pop_at(&self, key: &[u8], end: End) -> Result<Option<Vec<u8>>, DictError> {
        Self::check_key(key)?;
        self.shard(key).try_with(|z, now| z.pop(key, end, now))
    }

    /// Take the head item of `key`'s list: `None` if the key has no live entry,
    /// [`DictError::WrongType`] if it holds a scalar. The key goes with its last item.
    ///
    /// A pop shrinks the list in place: it needs no memory, so it succeeds whenever the list
    /// exists (a full zone, a list at the size limit) and evicts nothing. The popped bytes are
    /// freed with the list's last item or by its next push, which stores it compacted.
    pub fn lpop(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, DictError> {
        self.pop_at(key.as_ref(), End::Left)
    }

    /// Take the tail item of `key`'s list (see [`lpop`](Self::lpop)).
    pub fn rpop(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, DictError> {
        self.pop_at(key.as_ref(), End::Right)
    }

    /// The number of items of `key`'s list: 0 if the key has no live entry,
    /// [`DictError::WrongType`] if it holds a scalar.
    pub fn llen(&self, key: impl AsRef<[u8]>) -> Result<usize, DictError> {
        let key = key.as_ref();
        Self::check_key(key)?;
        self.shard(key).try_read(|z, now| match z.list(key, now)? {
            Some(f) => count(f.items).ok_or_else(|| not_whole(f.e)),
            None => Ok(0),
        })
    }
}
