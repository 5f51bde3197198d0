//! Passes over the whole dictionary: `flush_all`, `flush_expired` and `keys`, each shard walked
//! in slices of bounded work with no lock held between two (`DICT_SLICE`), so a large
//! dictionary is never stopped for the whole walk, and a process killed between two slices
//! leaves every structure whole.

use super::ops;
use super::shard::Shard;
use super::types::DictError;
use super::ShmDict;
use crate::crash;

impl ShmDict {
    /// Expire every entry now (one store per shard; their memory is freed as writes, eviction
    /// or [`flush_expired`](Self::flush_expired) reach them). Atomic in each shard, not across
    /// shards: with several, a write to a shard already flushed survives the call, and a
    /// process killed in the call leaves the shards before it flushed and the others as they
    /// were (every one whole).
    ///
    /// ```
    /// let d = gomutex::dict::ShmDict::anonymous(64 << 10)?;
    /// d.set("a", "1", None, 0)?;
    /// d.flush_all()?;
    /// assert!(d.get("a")?.is_none());
    /// assert!(d.get_stale("a")?.unwrap().stale);
    /// assert_eq!(d.flush_expired(0)?, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flush_all(&self) -> Result<(), DictError> {
        self.pass(|s, _| {
            s.with(|z, _| z.flush_all())?;
            Ok(None)
        })
    }

    /// Free up to `max` expired entries (0: all); how many were freed. A pass over the index
    /// in slices, each holding its shard's lock for a bounded time (see
    /// [`keys`](Self::keys)): not atomic. An entry is freed only if it is expired when its
    /// slice reaches it; one that expires, or is written, during the call may stay; each
    /// entry freed is freed in a transaction of its own, so a process killed in the call
    /// leaves some expired entries freed and the rest as they were.
    ///
    /// ```
    /// use std::time::Duration;
    /// let d = gomutex::dict::ShmDict::anonymous(1 << 20)?;
    /// for i in 0..1000 {
    ///     let ttl = (i % 2 == 0).then(|| Duration::from_millis(1));
    ///     d.set(format!("k{i}"), "v", ttl, 0)?;
    /// }
    /// std::thread::sleep(Duration::from_millis(5));
    /// // Some were freed by the writes already (up to 2 at the LRU tail each).
    /// let freed = d.flush_expired(0)?;
    /// assert!(freed > 0 && freed <= 500);
    /// assert_eq!(d.stats().entries, 500);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flush_expired(&self, max: usize) -> Result<usize, DictError> {
        let mut freed = 0;
        self.pass(|s, at| {
            if max != 0 && freed >= max {
                return Ok(None);
            }
            s.with(|z, now| z.flush_expired_slice(at, max, &mut freed, now))
        })?;
        Ok(freed)
    }

    /// Up to `max` live keys (0: all), in no particular order (the index's: shard after
    /// shard, bucket after bucket).
    ///
    /// Not atomic: a pass over the index in slices, each holding its shard's read side for a
    /// bounded time (a few thousand buckets or a few hundred entries: tens of µs), so that
    /// lookups go on beside it and writers between two slices of a large dictionary. What a
    /// concurrent writer does shows as follows: a key that has an entry for the whole call
    /// (set before it, neither deleted, evicted nor expired before it returns; updated or not)
    /// is returned exactly once (an entry never moves between buckets: the index has a fixed
    /// number of them, no rehash). A key added, deleted, evicted or expiring during the call
    /// may be returned or not. No key is returned twice.
    ///
    /// ```
    /// let d = gomutex::dict::ShmDict::anonymous(1 << 20)?;
    /// for i in 0..3000 {
    ///     d.set(format!("k{i}"), "v", None, 0)?;
    /// }
    /// let mut keys = d.keys(0)?;
    /// keys.sort();
    /// keys.dedup();
    /// assert_eq!(keys.len(), 3000);
    /// assert_eq!(d.keys(10)?.len(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keys(&self, max: usize) -> Result<Vec<Vec<u8>>, DictError> {
        let mut out = Vec::new();
        self.pass(|s, at| {
            if max != 0 && out.len() >= max {
                return Ok(None);
            }
            let left = if max == 0 { 0 } else { max - out.len() };
            let (keys, next) = Self::keys_slice(s, at, left)?;
            // Outside the lock: growing `out` may copy megabytes.
            out.extend(keys);
            Ok(next)
        })?;
        Ok(out)
    }

    /// One slice of [`keys`](Self::keys) in shard `s`, from `at`: up to `max` (0: any number)
    /// live keys, and where the next slice starts. It only reads the zone.
    pub(super) fn keys_slice(
        s: &Shard,
        at: ops::Cursor,
        max: usize,
    ) -> Result<(Vec<Vec<u8>>, Option<ops::Cursor>), DictError> {
        s.read(|z, now| {
            let mut keys = Vec::new();
            let next = z.keys_slice(at, max, &mut keys, now);
            (keys, next)
        })
    }

    /// A pass over every shard in slices: `slice(shard, cursor)` does a bounded part under one
    /// hold of the shard's lock and says where the next one starts (`None`: go to the next
    /// shard). Between two slices no lock is held (crash point `DICT_SLICE`), so a process
    /// killed there leaves every structure whole, the slices done done and the rest not begun;
    /// a waiter the release woke takes the lock first ([`Shard::let_waiter_in`]).
    fn pass(
        &self,
        mut slice: impl FnMut(&Shard, ops::Cursor) -> Result<Option<ops::Cursor>, DictError>,
    ) -> Result<(), DictError> {
        let mut first = true;
        for s in self.shards.iter() {
            let mut at = Some(ops::Cursor::START);
            while let Some(c) = at {
                if !first {
                    crash::point(crash::DICT_SLICE);
                }
                first = false;
                at = slice(s, c)?;
                if at.is_some() {
                    s.let_waiter_in();
                }
            }
        }
        Ok(())
    }

    /// Testing only, not part of the API: every key of every shard, expired ones too, each
    /// shard in its LRU order (most recently written or spared first), for tests of that order
    /// ([`keys`](Self::keys) has none).
    #[cfg(feature = "__crash-points")]
    #[doc(hidden)]
    pub fn __lru_keys(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            out.extend(s.with(|z, _| z.lru_keys()).unwrap_or_default());
        }
        out
    }
}
