//! Shared state for worker processes, built on the shared-memory lock ([`crate::shm`]):
//!
//! * [`ShmDict`]: a dictionary shared by worker processes, with OpenResty's
//!   `lua_shared_dict` operations (values, TTLs, LRU eviction, lists), that stays whole when a
//!   process is killed at any instruction ([`DictConfig`] for its shards and zone);
//! * [`RateLimiter`]: nginx's `limit_req` (a leaky bucket per key) on a [`ShmDict`].
//!
//! ```
//! use gomutex::dict::{Decision, RateLimiter, ShmDict};
//!
//! let d = ShmDict::anonymous(1 << 20)?; // before fork(): the workers share it
//! d.set("greeting", "hello", None, 0).unwrap();
//! let limiter = RateLimiter::new(ShmDict::anonymous(64 << 10)?, 10, 5)?.nodelay();
//! assert_eq!(limiter.check("client-1"), Decision::Allowed);
//! # Ok::<(), gomutex::shm::ShmError>(())
//! ```
//!
//! The module uses [`crate::shm`] through its public API ([`ShmRwLock`] guards each shard,
//! [`Mapping`] and [`MappingLayout`](crate::shm::MappingLayout) place the zones), plus the
//! clock, the pid and `init_in`'s checks from `shm/seam.rs`. Its crash points are in the
//! crate's one list (`src/crash.rs`). (Each type is documented on itself.)

mod alloc;
mod check;
mod config;
mod index;
mod layout;
mod limit_req;
mod list;
mod lru;
mod named;
mod ops;
mod overwrite;
mod passes;
mod redo;
mod shard;
mod ttl;
mod types;

pub use check::CheckReport;
pub use config::DictConfig;
pub use limit_req::{Decision, RateLimiter, Throttle};
pub use types::{DictError, DictStats, Incr, Item, OwnedValue, Value, MAX_KEY};

use self::layout::PAGE;
use self::ops::{Mode, Write};
use self::shard::Shard;
pub(crate) use self::ttl::Now;
#[cfg(doc)]
use crate::shm::ShmRwLock;
use crate::shm::{Mapping, ShmError};
use core::fmt;
use std::time::Duration;

/// A dictionary in memory shared between processes, with OpenResty's `lua_shared_dict`
/// operations, that stays whole when a process is killed at any instruction.
///
/// One region of fixed size holds everything, as an nginx zone does: a header, a redo record,
/// a buddy allocator of 4 KiB pages with slab pages of 21 size classes for small entries, an
/// index (open hashing with chains of offsets, never pointers) and an LRU list; one
/// [`ShmRwLock`] guards it: lookups share its read side, updates hold its write side. A
/// dictionary is one such zone (nginx's layout) or several
/// ([`DictConfig::shards`]): each with its own lock, a key in the one its hash picks, so
/// processes working on different shards do not wait for each other.
///
/// ```text
/// mapping:  [ ShmRwLock<u64> region | pad to 4096 | dictionary zone (capacity bytes)          ]
/// zone:     [ header | redo record | page descriptors | buckets | pages (slabs, large, free) ]
/// entry:    [ chain link | LRU prev, next | hash | key length, kind | flags | value length |
///             used | expiry (ms, CLOCK_MONOTONIC) | sequence | value (8-aligned) | key ]
/// ```
///
/// A key holds a byte string, an integer ([`incr`](Self::incr)) or a list of byte strings
/// ([`lpush`](Self::lpush), [`rpush`](Self::rpush), [`lpop`](Self::lpop),
/// [`rpop`](Self::rpop), [`llen`](Self::llen); [`DictError::WrongType`] across the two
/// kinds, as lua_shared_dict's "value not a list").
///
/// # A death in the middle of an update
///
/// Every update is built so that one atomic store decides it. The new entry is written whole
/// (unless it is written in place: see the limits below) into a chunk that is still free (the allocator's state lives outside the chunks, so that
/// changes nothing anybody can see); every structure word the update changes (the index
/// link, the LRU links, the allocator's bitmap and free lists, the header's counts, and the
/// old entry's release) is planned in a transaction, copied to the zone's redo record, and
/// committed by storing the record's length. Then it is applied and the record cleared. A
/// process killed before the commit leaves the old value and every structure as it was (its
/// chunk is still free: no space lost); killed after, its update is complete once the record is
/// applied. The record is applied by whoever takes the lock next: the lock reports the death
/// ([`LockError::OwnerDied`](crate::shm::LockError::OwnerDied)), and the dictionary replays a
/// committed record before the operation proceeds, without the user's help. Operations made
/// of several steps (evicting to make room, then storing; `flush_expired`) commit each step,
/// each leaving a valid dictionary.
///
/// # What a concurrent reader sees
///
/// [`get`](Self::get), [`get_stale`](Self::get_stale), [`get_with`](Self::get_with),
/// [`ttl`](Self::ttl) and [`llen`](Self::llen) hold the read side of their shard's lock
/// (lua-nginx-module#656's shared lock for `ngx.shared.DICT` reads): lookups of any number of
/// processes and threads run side by side, each process counting its reads on its own line
/// (no line moves between reading processes), and every update waits until the readers
/// inside have left, then keeps new ones out until it is done (writer preference, as
/// [`ShmRwLock`]). So a reader sees the shard as the last update finished it, never an update
/// in progress: every value whole, the old one or the new one. Then:
///
/// * **A writer's death in the middle of an update**: the lock tells every later reader that
///   its writer died until somebody repairs; a reader told so lets go of the read side, takes
///   the write side to replay the dead writer's committed record (as the next writer would),
///   and reads again. No reader sees a half-applied update.
/// * **A reader writes nothing a reader reads**: a hit marks its entry used for eviction with
///   one store of a constant (skipped if the mark is there), which readers side by side may
///   repeat in any order, and which a death before or after leaves valid; the LRU list is
///   never relinked by a reader. An expired entry found by a reader is a miss (`get_stale`
///   returns it); its memory is freed by a later write (or [`flush_expired`](Self::flush_expired)).
/// * **A reader's death** changes nothing in the zone; its hold of the read side is given back
///   as [`ShmRwLock`] gives back a dead reader's (a waiting writer finds it within 10 ms, or
///   [`force_unlock`](Self::force_unlock) at once).
/// * Several shards are not one snapshot: two lookups on different shards may see one before
///   an update of the second shard and one after.
///
/// [`ShmDict::check`] walks every structure and verifies it (the allocator's tiling, free
/// lists and slab lists, every chain, the LRU list, every entry's size and hash, the counts).
///
/// # Examples
///
/// A per-client request counter shared by forked workers:
///
/// ```
/// use gomutex::dict::ShmDict;
/// use std::time::Duration;
///
/// let hits = ShmDict::anonymous(1 << 20)?; // before fork: the children share it
/// let mut children = Vec::new();
/// for worker in 0..4 {
///     // SAFETY: the doctest is single-threaded here; the child only uses the dictionary
///     // and leaves with _exit.
///     match unsafe { libc::fork() } {
///         0 => {
///             for i in 0..100 {
///                 let client = format!("client:{}", (worker + i) % 3);
///                 // Created at 0 with a one-minute window if missing, then counted.
///                 hits.incr(&client, 1, Some(0), Some(Duration::from_secs(60))).unwrap();
///             }
///             unsafe { libc::_exit(0) };
///         }
///         pid => children.push(pid),
///     }
/// }
/// for pid in children {
///     let mut status = 0;
///     unsafe { libc::waitpid(pid, &mut status, 0) };
/// }
/// let total: i64 = (0..3)
///     .map(|c| hits.get(format!("client:{c}")).unwrap().unwrap().value.as_int().unwrap())
///     .sum();
/// assert_eq!(total, 400);
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
///
/// A cache with a TTL, read without copying:
///
/// ```
/// use gomutex::dict::{ShmDict, Value};
/// use std::time::Duration;
///
/// let cache = ShmDict::anonymous(1 << 20)?;
/// cache.set("/index.html", b"<html>...</html>", Some(Duration::from_millis(50)), 0)?;
/// let len = cache.get_with("/index.html", |v, _flags| match v {
///     Value::Bytes(b) => b.len(), // borrowed from the shared region, under the lock
///     Value::Int(_) => 0,
/// })?;
/// assert_eq!(len, Some(16));
/// std::thread::sleep(Duration::from_millis(60));
/// assert!(cache.get("/index.html")?.is_none()); // expired
/// let stale = cache.get_stale("/index.html")?.unwrap(); // still there until evicted
/// assert!(stale.stale);
/// assert_eq!(cache.flush_expired(0)?, 1); // and now its memory is free
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Limits
///
/// * Keys up to [`MAX_KEY`] (65535) bytes, empty allowed. A value up to what the largest
///   buddy block of the zone holds ([`ShmDict::max_value_len`]; half the zone, rounded down to
///   a power of two of pages, minus 48 bytes and the key; at most 4 GiB − 1).
/// * Zone of at least [`ShmDict::MIN_CAPACITY`] bytes, at most 64 GiB.
/// * Per entry: 48 bytes of header, the value rounded up to 8, the key, rounded up to its size
///   class (at most 25 % more above 64 bytes), and about 4 bytes of buckets per 256 bytes of
///   zone; 3 % of the zone for page descriptors and buckets.
/// * An update of an existing key to a value of another size needs room for the new entry
///   beside the old one (it is never written over it); the old entry is not evicted to make
///   that room. A value of as many 8-byte words as the old one, up to 256 bytes, is written
///   in place instead (its words committed through the redo record like any other update:
///   old or new after a death), needing no memory; the entry keeps its place in the LRU list
///   and is marked used, as a hit marks it. A list's pop also shrinks the list in place.
/// * Eviction (per shard): every write frees up to 2 expired entries at the LRU tail; one that
///   does not fit then frees the expired entries within 1024 of the tail, then evicts live
///   ones from the tail, at most 64; `safe_*` free only expired ones. A hit marks its entry
///   used rather than moving it: eviction gives a used entry at the tail a second chance (to
///   the head, unmarked: the CLOCK approximation of LRU).
/// * When that makes no room of the size a write needs (the entries evicted share their pages
///   with newer ones: a zone full of one size class, a write of another), the write empties
///   instead the aligned run of pages it needs (one page for an entry up to 4 KiB, 2^k for a
///   block of 2^k pages) that holds an entry as near the LRU tail as possible (within 1024),
///   at most 64 live entries and not the key's own. A page holds at most 64 entries, so an
///   entry up to 4 KiB always finds room when one such page is reached; a larger one fails
///   for good when every aligned run of its pages holds more than 64 live entries (a 12 KB
///   value, 4 pages, in a zone full of entries up to 64 bytes: 256 per run).
/// * The room is planned before anything is changed: a write that cannot fit within these
///   bounds fails with [`DictError::NoMemory`] and frees (and moves) nothing.
/// * TTLs: `None` or zero never expires (lua_shared_dict's `exptime` 0); the resolution is
///   1 ms, a TTL under it is 1 ms.
/// * Every operation takes a side of the lock of its key's shard (a lookup the read side, an
///   update the write side): one called inside [`get_with`](Self::get_with) or
///   [`update`](Self::update) on the same shard panics (it would wait for itself; a read
///   inside a read too, since a writer may be queued between the two). Operations on the
///   whole dictionary take the shards' locks one after another, so with several shards they
///   are not atomic: writes to a shard already passed are not seen, or not flushed.
///   [`keys`](Self::keys) (on the read side) and [`flush_expired`](Self::flush_expired) go
///   further: they walk each shard in slices, holding its lock for tens of µs at a time
///   however large the zone (what a concurrent write may then show is on each), and
///   [`flush_all`](Self::flush_all) is one store per shard. [`check`](Self::check) and
///   [`stats`](Self::stats) hold each shard's write side for their walk of it.
/// * A peer that corrupts the zone (writes it outside this code) makes operations that meet
///   the damage fail with [`DictError::Corrupt`], committing nothing from there on (an
///   operation of several steps keeps those it finished, each whole). Every access to the
///   zone is bounds-checked and every computation on a word read from it checked or
///   saturating, so in any build they never read or write outside the zone, panic, or loop
///   without bound. Damage that looks valid (a value's bytes, a chunk marked free) is not
///   seen, and what an operation then does stays inside the zone. [`check`](Self::check)
///   describes the damage; [`stats`](Self::stats) reads the counts as they are (saturating),
///   and [`free_space`](Self::free_space) counts 0 for a zone claiming more free pages than
///   it has.
pub struct ShmDict {
    shards: Box<[Shard]>,
    /// Seed of the hash that picks a key's shard (from shard 0's header).
    route: u64,
    _map: Mapping,
}

impl fmt::Debug for ShmDict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmDict")
            .field("capacity", &self.capacity())
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl ShmDict {
    /// The smallest zone (per shard), in bytes.
    pub const MIN_CAPACITY: usize = layout::MIN_LEN;

    /// Bytes a mapping needs from the dictionary's offset for `capacity` bytes of zones made
    /// as `cfg` says (what [`init_in`](Self::init_in) takes).
    ///
    /// ```
    /// use gomutex::dict::{DictConfig, ShmDict};
    /// let n = ShmDict::required_size(1 << 20, DictConfig::new())?;
    /// assert!(n > 1 << 20 && n % 4096 == 0);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn required_size(capacity: usize, cfg: DictConfig) -> Result<usize, ShmError> {
        let g = cfg.zone(capacity)?;
        Ok((shard::lock_pad(cfg.lock)? + g.len) * cfg.shards as usize)
    }

    /// A new dictionary with a zone of `capacity` bytes in an anonymous shared mapping,
    /// shared with children `fork()`ed afterwards: one shard, the lock's default sizes.
    ///
    /// ```
    /// let d = gomutex::dict::ShmDict::anonymous(64 << 10)?;
    /// assert_eq!(d.capacity(), 64 << 10);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn anonymous(capacity: usize) -> Result<Self, ShmError> {
        Self::anonymous_with(capacity, DictConfig::new())
    }

    /// [`anonymous`](Self::anonymous), made as `cfg` says.
    pub fn anonymous_with(capacity: usize, cfg: DictConfig) -> Result<Self, ShmError> {
        let map = Mapping::anonymous(Self::required_size(capacity, cfg)?)?;
        Self::init_in(&map, 0, capacity, cfg)
    }

    /// A new dictionary of `capacity` bytes of zones at `offset` of `map` (a multiple of
    /// 4096; it takes [`required_size`](Self::required_size) bytes from there). Whatever was
    /// there is overwritten. Nothing is written if an argument is wrong, if part of the range is
    /// used by a handle of this process ([`ShmError::InvalidConfig`]), or if a shard's place
    /// holds a lock a live process uses ([`ShmError::RegionInUse`]): every shard's place is
    /// checked before the first is written. The handle keeps the mapping alive.
    ///
    /// ```
    /// use gomutex::{dict::{DictConfig, ShmDict}, shm::Mapping};
    /// let cfg = DictConfig::new();
    /// let map = Mapping::anonymous(ShmDict::required_size(1 << 16, cfg)?)?;
    /// let a = ShmDict::init_in(&map, 0, 1 << 16, cfg)?;
    /// let b = ShmDict::attach_in(&map, 0)?; // what another process does
    /// a.set("k", "v", None, 7)?;
    /// assert_eq!(b.get("k")?.unwrap().flags, 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn init_in(
        map: &Mapping,
        offset: usize,
        capacity: usize,
        cfg: DictConfig,
    ) -> Result<Self, ShmError> {
        let need = Self::required_size(capacity, cfg)?;
        if !offset.is_multiple_of(PAGE) {
            return Err(ShmError::Misaligned {
                addr: (map.as_ptr() as usize).wrapping_add(offset),
                required: PAGE,
                offset: Some(offset),
            });
        }
        if offset.checked_add(need).is_none_or(|end| end > map.len()) {
            return Err(ShmError::TooSmall {
                needed: offset.saturating_add(need),
                actual: map.len(),
            });
        }
        let g = cfg.zone(capacity)?;
        let stride = need / cfg.shards as usize;
        // Every shard's place is checked before any is written: a refusal writes nothing.
        shard::check_free(map, offset, need)?;
        for i in 0..cfg.shards as usize {
            Shard::check_place(map, offset + i * stride)?;
        }
        // The last shard first: shard 0's magic, written last, says the whole is there.
        let mut shards = (0..cfg.shards)
            .rev()
            .map(|i| {
                let off = offset + i as usize * stride;
                Shard::init_in(map, off, g, cfg.lock, (i, cfg.shards))
            })
            .collect::<Result<Vec<_>, _>>()?;
        shards.reverse();
        Ok(Self::from_shards(shards, map))
    }

    fn from_shards(shards: Vec<Shard>, map: &Mapping) -> Self {
        let route = shards[0].seed ^ 0x5348_4152_4453_2121;
        Self {
            shards: shards.into_boxed_slice(),
            route,
            _map: map.clone(),
        }
    }

    /// Attach to the dictionary another process (or [`init_in`](Self::init_in)) made at
    /// `offset` of `map`. Validates every lock's header and every zone's (magic, version,
    /// sizes, shard numbers), writing nothing if one is wrong; [`ShmError::Uninitialised`] if
    /// the creator has not finished.
    pub fn attach_in(map: &Mapping, offset: usize) -> Result<Self, ShmError> {
        let (first, index, n) = Shard::attach_in(map, offset)?;
        if index != 0 {
            return Err(ShmError::Corrupt("dictionary shards"));
        }
        let stride = first.stride();
        let mut shards = vec![first];
        for i in 1..n {
            // At most MAX_SHARDS strides, each inside the mapping: checked all the same.
            let off = (i as usize)
                .checked_mul(stride)
                .and_then(|o| o.checked_add(offset))
                .ok_or(ShmError::Corrupt("dictionary shards"))?;
            let (s, index, m) = Shard::attach_in(map, off)?;
            if index != i || m != n || s.g != shards[0].g {
                return Err(ShmError::Corrupt("dictionary shards"));
            }
            shards.push(s);
        }
        Ok(Self::from_shards(shards, map))
    }

    /// The shard of `key`.
    #[inline]
    fn shard(&self, key: &[u8]) -> &Shard {
        let n = self.shards.len();
        if n == 1 {
            return &self.shards[0];
        }
        let h = index::hash(self.route, key) >> 32;
        &self.shards[((h * n as u64) >> 32) as usize]
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    fn check_key(key: &[u8]) -> Result<(), DictError> {
        if key.len() > MAX_KEY {
            return Err(DictError::KeyTooLong { len: key.len() });
        }
        Ok(())
    }

    fn check_size(&self, key: &[u8], value: &Value<'_>) -> Result<(), DictError> {
        Self::check_key(key)?;
        let vlen = match value {
            Value::Bytes(b) => b.len(),
            Value::Int(_) => 8,
        };
        let max = self.max_value_len_for(key.len());
        if vlen > max {
            return Err(DictError::ValueTooLarge { len: vlen, max });
        }
        Ok(())
    }

    fn store(
        &self,
        key: &[u8],
        value: Value<'_>,
        ttl: Option<Duration>,
        flags: u32,
        mode: Mode,
        safe: bool,
    ) -> Result<u32, DictError> {
        self.check_size(key, &value)?;
        self.shard(key).try_with(|z, now| {
            let w = Write {
                expires: ttl::expiry(ttl, now),
                flags,
                mode,
                safe,
                list: false,
            };
            z.store(key, value, w, now)
        })
    }

    /// The value and flags of `key`, if it has a live entry (a hit marks it used, which spares
    /// it from the next eviction that reaches it).
    ///
    /// ```
    /// use gomutex::dict::{OwnedValue, ShmDict};
    /// let d = ShmDict::anonymous(64 << 10)?;
    /// d.set("a", "x", None, 3).unwrap();
    /// let item = d.get("a")?.unwrap();
    /// assert_eq!((item.value, item.flags), (OwnedValue::Bytes(b"x".to_vec()), 3));
    /// assert!(d.get("b")?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Like every operation on a key, [`DictError::KeyTooLong`] for a key longer than
    /// [`MAX_KEY`] (none can be stored: lua_shared_dict's "key too long"), and
    /// [`DictError::Corrupt`] if the zone was damaged by a writer other than this dictionary
    /// (it never reads outside the zone, nor panics).
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>, DictError> {
        self.get_item(key.as_ref(), false)
    }

    /// [`get`](Self::get), also returning an expired entry not freed yet (`stale: true`).
    pub fn get_stale(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>, DictError> {
        self.get_item(key.as_ref(), true)
    }

    fn get_item(&self, key: &[u8], stale: bool) -> Result<Option<Item>, DictError> {
        Self::check_key(key)?;
        self.shard(key).try_read(|z, now| {
            let Some((e, expired)) = z.get(key, stale, now) else {
                return Ok(None);
            };
            if z.is_list(e) {
                return Err(DictError::WrongType);
            }
            let (v, flags) = z.value_of(e);
            Ok(Some(Item {
                value: v.to_owned(),
                flags,
                stale: expired,
            }))
        })
    }

    /// Run `f` on the value and flags of `key`'s live entry, borrowed from the zone under the
    /// read side of the lock (no copy): `None` without calling `f` if there is none. `f` holds
    /// the read side of the key's shard (other lookups run beside it, updates wait): keep it
    /// short.
    ///
    /// # Panics
    ///
    /// If `f` uses a key of the same shard of this dictionary (with one shard, any key; or
    /// [`keys`](Self::keys), [`stats`](Self::stats)… which take every shard's lock): the
    /// thread holds that lock already and would wait for itself for ever, so it panics and
    /// says so instead, as std's `Mutex::lock` may for a re-entrant lock. Other dictionaries,
    /// and other shards of this one, may be used inside `f`.
    ///
    /// ```
    /// use gomutex::dict::{ShmDict, Value};
    /// let d = ShmDict::anonymous(64 << 10)?;
    /// d.set("k", b"abc", None, 0).unwrap();
    /// let mut buf = [0u8; 8];
    /// let n = d.get_with("k", |v, _| match v {
    ///     Value::Bytes(b) => { buf[..b.len()].copy_from_slice(b); b.len() }
    ///     Value::Int(_) => 0,
    /// })?;
    /// assert_eq!((n, &buf[..3]), (Some(3), &b"abc"[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(Value<'_>, u32) -> R,
    ) -> Result<Option<R>, DictError> {
        let key = key.as_ref();
        Self::check_key(key)?;
        self.shard(key).try_read(|z, now| {
            let Some((e, _)) = z.get(key, false, now) else {
                return Ok(None);
            };
            if z.is_list(e) {
                return Err(DictError::WrongType);
            }
            let (v, flags) = z.value_of(e);
            // Not on bytes read from a corrupt zone.
            Ok((!z.m.corrupt_seen()).then(|| f(v, flags)))
        })
    }

    /// Read-modify-write `key` under one hold of the lock: `f` gets the live value (`None` if
    /// there is none) and returns a result and the new value (`None`: leave the entry as it
    /// is), stored as [`set`](Self::set) stores it (expiring after `ttl`, evicting if needed).
    /// So no other process updates the key between the read and the write, and a process
    /// killed in it leaves the old value or the new. Returns `f`'s result and the live entries
    /// evicted; on an error `f`'s result is dropped and nothing is written. `f` holds the lock:
    /// keep it short.
    ///
    /// # Panics
    ///
    /// If `f` uses this dictionary's shard of `key` (see [`get_with`](Self::get_with)): that
    /// would deadlock.
    ///
    /// ```
    /// use gomutex::dict::{ShmDict, Value};
    /// let d = ShmDict::anonymous(64 << 10)?;
    /// let bump = |v: Option<Value<'_>>| {
    ///     let n = match v {
    ///         Some(Value::Bytes(b)) => u64::from_le_bytes(b.try_into().unwrap()),
    ///         _ => 0,
    ///     };
    ///     (n, Some((n + 1).to_le_bytes()))
    /// };
    /// assert_eq!(d.update("k", None, bump), Ok((0, 0)));
    /// assert_eq!(d.update("k", None, bump), Ok((1, 0)));
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn update<R, const N: usize>(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Option<Duration>,
        f: impl FnOnce(Option<Value<'_>>) -> (R, Option<[u8; N]>),
    ) -> Result<(R, u32), DictError> {
        self.update_at(key.as_ref(), ttl, Now::lazy(), f)
    }

    /// [`update`](Self::update) at the time `now` (the caller's reading of the dictionary's
    /// clock, or lazy): the key is looked up once, for the read and the write.
    pub(crate) fn update_at<R, const N: usize>(
        &self,
        key: &[u8],
        ttl: Option<Duration>,
        now: Now,
        f: impl FnOnce(Option<Value<'_>>) -> (R, Option<[u8; N]>),
    ) -> Result<(R, u32), DictError> {
        self.check_size(key, &Value::Bytes(&[0u8; N]))?;
        self.shard(key).try_with_at(now, |z, now| {
            let looked = z.look(key, now);
            let live = looked.found.filter(|_| looked.live);
            if live.is_some_and(|(e, _)| z.is_list(e)) {
                return Err(DictError::WrongType);
            }
            let old = live.map(|(e, _)| z.value_of(e).0);
            if z.m.corrupt_seen() {
                return Err(DictError::NoMemory); // replaced by `Corrupt` in `with`
            }
            let (r, new) = f(old);
            let Some(new) = new else {
                if let Some((e, _)) = live {
                    lru::mark_used(z.m, e); // a read: a hit
                }
                return Ok((r, 0));
            };
            let w = Write {
                expires: ttl::expiry(ttl, now),
                flags: 0,
                mode: Mode::Any,
                safe: false,
                list: false,
            };
            z.store_found(key, looked, Value::Bytes(&new), w, now)
                .map(|ev| (r, ev))
        })
    }

    /// Store `value` under `key`, with a time to live (`None` or zero: never expires, as
    /// lua_shared_dict's `exptime` 0; millisecond resolution) and user `flags`. If it does not
    /// fit, frees expired entries and then evicts the least recently used ones; returns how
    /// many live entries it evicted (lua_shared_dict's `forcible` is `> 0`). If it cannot fit
    /// (see the limits on [`ShmDict`]), [`DictError::NoMemory`], nothing freed.
    ///
    /// ```
    /// use gomutex::dict::ShmDict;
    /// use std::time::Duration;
    /// let d = ShmDict::anonymous(64 << 10)?;
    /// assert_eq!(d.set("k", "v", Some(Duration::from_secs(10)), 0), Ok(0));
    /// assert_eq!(d.set("n", 5i64, None, 0), Ok(0)); // an integer, for incr
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn set<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<Value<'v>>,
        ttl: Option<Duration>,
        flags: u32,
    ) -> Result<u32, DictError> {
        self.store(key.as_ref(), value.into(), ttl, flags, Mode::Any, false)
    }

    /// [`set`](Self::set) that never evicts a live entry: [`DictError::NoMemory`] instead.
    pub fn safe_set<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<Value<'v>>,
        ttl: Option<Duration>,
        flags: u32,
    ) -> Result<(), DictError> {
        self.store(key.as_ref(), value.into(), ttl, flags, Mode::Any, true)
            .map(|_| ())
    }

    /// [`set`](Self::set) only if `key` has no live entry, else [`DictError::Exists`].
    ///
    /// ```
    /// use gomutex::dict::{DictError, ShmDict};
    /// let d = ShmDict::anonymous(64 << 10)?;
    /// assert_eq!(d.add("lock", "me", None, 0), Ok(0));
    /// assert_eq!(d.add("lock", "you", None, 0), Err(DictError::Exists));
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn add<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<Value<'v>>,
        ttl: Option<Duration>,
        flags: u32,
    ) -> Result<u32, DictError> {
        self.store(key.as_ref(), value.into(), ttl, flags, Mode::Absent, false)
    }

    /// [`add`](Self::add) that never evicts a live entry: [`DictError::NoMemory`] instead.
    pub fn safe_add<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<Value<'v>>,
        ttl: Option<Duration>,
        flags: u32,
    ) -> Result<(), DictError> {
        self.store(key.as_ref(), value.into(), ttl, flags, Mode::Absent, true)
            .map(|_| ())
    }

    /// [`set`](Self::set) only if `key` has a live entry, else [`DictError::NotFound`].
    pub fn replace<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<Value<'v>>,
        ttl: Option<Duration>,
        flags: u32,
    ) -> Result<u32, DictError> {
        self.store(key.as_ref(), value.into(), ttl, flags, Mode::Present, false)
    }

    /// Remove `key`; whether it had a live entry.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool, DictError> {
        let key = key.as_ref();
        Self::check_key(key)?;
        self.shard(key).with(|z, now| z.delete(key, now))
    }

    /// Add `by` to the integer under `key` and return the sum. If the key has no live entry:
    /// with `init`, store `init + by` (expiring after `init_ttl`), else
    /// [`DictError::NotFound`]. [`DictError::NotANumber`] if the value is bytes,
    /// [`DictError::Overflow`] if the sum does not fit (nothing is changed then). An existing
    /// entry keeps its TTL.
    ///
    /// ```
    /// use gomutex::dict::{DictError, ShmDict};
    /// let d = ShmDict::anonymous(64 << 10)?;
    /// assert_eq!(d.incr("n", 1, None, None), Err(DictError::NotFound));
    /// assert_eq!(d.incr("n", 1, Some(10), None).unwrap().value, 11);
    /// assert_eq!(d.incr("n", -20, None, None).unwrap().value, -9);
    /// assert_eq!(d.incr("n", i64::MIN, None, None), Err(DictError::Overflow));
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn incr(
        &self,
        key: impl AsRef<[u8]>,
        by: i64,
        init: Option<i64>,
        init_ttl: Option<Duration>,
    ) -> Result<Incr, DictError> {
        let key = key.as_ref();
        self.check_size(key, &Value::Int(0))?;
        self.shard(key).try_with(|z, now| {
            let init = init.map(|i| (i, ttl::expiry(init_ttl, now)));
            z.incr(key, by, init, now)
                .map(|(value, evicted)| Incr { value, evicted })
        })
    }

    /// Time left before `key`'s entry expires (`None`: never), or [`DictError::NotFound`].
    pub fn ttl(&self, key: impl AsRef<[u8]>) -> Result<Option<Duration>, DictError> {
        let key = key.as_ref();
        Self::check_key(key)?;
        self.shard(key).try_read(|z, now| z.ttl(key, now))
    }

    /// Set the time to live of `key`'s live entry (`None` or zero: never expires), or
    /// [`DictError::NotFound`].
    ///
    /// ```
    /// use gomutex::dict::ShmDict;
    /// use std::time::Duration;
    /// let d = ShmDict::anonymous(64 << 10)?;
    /// d.set("k", "v", None, 0).unwrap();
    /// assert_eq!(d.ttl("k"), Ok(None));
    /// d.expire("k", Some(Duration::from_secs(5))).unwrap();
    /// assert!(d.ttl("k").unwrap().unwrap() > Duration::from_secs(4));
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn expire(&self, key: impl AsRef<[u8]>, ttl: Option<Duration>) -> Result<(), DictError> {
        let key = key.as_ref();
        Self::check_key(key)?;
        self.shard(key)
            .try_with(|z, now| z.expire(key, ttl::expiry(ttl, now), now))
    }

    /// Bytes of the zone (what it was made with).
    pub fn capacity(&self) -> usize {
        self.shards.iter().map(|s| s.g.len).sum()
    }

    /// Bytes of free pages: room for entries of any size. Slab pages with free chunks are
    /// not counted (as in lua_shared_dict), so small entries may still fit at 0. A damaged
    /// zone's count (more pages than the zone has) counts 0.
    pub fn free_space(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.with(|z, _| alloc::free_bytes(z.m, &z.g)))
            .map(|r| r.unwrap_or(0))
            .sum()
    }

    /// The largest value a key of 0 bytes may have in this zone.
    pub fn max_value_len(&self) -> usize {
        self.max_value_len_for(0)
    }

    /// The largest value a key of `klen` bytes may have: its entry (header, the value padded
    /// to 8, the key) fits the largest block, and its length the entry's 32-bit field.
    fn max_value_len_for(&self, klen: usize) -> usize {
        let block = alloc::largest_block(&self.shards[0].g);
        let room = block.saturating_sub(layout::E_VALUE + klen) & !7;
        room.min(u32::MAX as usize)
    }

    /// Counters (see [`DictStats`]), from the zones' headers (read even from a damaged zone).
    pub fn stats(&self) -> DictStats {
        let mut t = DictStats {
            entries: 0,
            used_bytes: 0,
            evicted: 0,
            replayed: 0,
        };
        // Saturating: a damaged zone's counts may be anything.
        let add = |t: &mut u64, z: &ops::Zone<'_>, off| *t = t.saturating_add(z.m.ld64(off));
        for s in self.shards.iter() {
            let _ = s.with(|z, _| {
                add(&mut t.entries, z, layout::H_COUNT);
                add(&mut t.used_bytes, z, layout::H_USED);
                add(&mut t.evicted, z, layout::H_EVICTED);
                add(&mut t.replayed, z, layout::H_REPLAYED);
            });
        }
        t
    }

    /// Walk and validate every structure of every zone (see [`ShmDict`]); under each shard's
    /// lock, so it waits for operations in flight and completes a dead one's first. Takes time
    /// proportional to the zone.
    ///
    /// ```
    /// let d = gomutex::dict::ShmDict::anonymous(64 << 10)?;
    /// d.set("a", "1", None, 0).unwrap();
    /// assert_eq!(d.check().unwrap().entries, 1);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn check(&self) -> Result<CheckReport, DictError> {
        let mut total = CheckReport::default();
        for (i, s) in self.shards.iter().enumerate() {
            let r = s
                .with(|z, _| check::check(z.m, &z.g, z.seed))
                .and_then(|r| r.map_err(DictError::Corrupt))
                .map_err(|e| match e {
                    DictError::Corrupt(e) => DictError::Corrupt(format!("shard {i}: {e}")),
                    e => e,
                })?;
            total.add(&r);
        }
        Ok(total)
    }

    /// Release the lock if process `pid` died holding it (for a supervisor that reaped it with
    /// `waitpid`; see [`ShmRwLock::force_unlock`]): its write side, and its reads of the read
    /// side. The next operation completes what it was
    /// doing.
    pub fn force_unlock(&self, pid: impl TryInto<u32>) -> bool {
        let Ok(pid) = pid.try_into() else {
            return false;
        };
        let mut held = false;
        for s in self.shards.iter() {
            held |= s.lock.force_unlock(pid);
        }
        held
    }
}

#[cfg(test)]
mod tests;
