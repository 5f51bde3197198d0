//! [`ShmSnapshot`]: a value (bytes) published by a writer process and read by any number of
//! processes without blocking the writer, each read whole (one published version, never a
//! mix), whatever process dies at whatever point.

use super::{commit_store, Mapping, MappingLayout, OpenOptions, ShmError, ShmMutex, ShmShared};
use core::fmt;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use core::sync::atomic::{fence, AtomicU64};

/// "GoSnapsh": the header's magic.
const MAGIC: u64 = u64::from_le_bytes(*b"GoSnapsh");
/// The largest snapshot, in bytes.
const MAX_CAPACITY: usize = 1 << 30;

/// Crash points (tests; `shm::__crash_at`): the inactive copy written, the version not
/// stored; a reader's copy made, its check not.
#[doc(hidden)]
#[repr(C)]
struct Header {
    magic: AtomicU64,
    /// The last version published (0: none); the copy `version & 1` holds it.
    version: AtomicU64,
    capacity: AtomicU64,
}

#[repr(C)]
struct CopyHead {
    /// Even: stable; odd: a writer is writing this copy.
    seq: AtomicU64,
    /// The version this copy holds, and its length in bytes.
    version: AtomicU64,
    len: AtomicU64,
}

// SAFETY: `#[repr(C)]` structs of fixed-width atomics only: the same layout in every
// process, every bit pattern a valid value, every change atomic, no pointers.
unsafe impl ShmShared for Header {}
// SAFETY: as above.
unsafe impl ShmShared for CopyHead {}

/// Where the parts lie for `capacity` bytes.
struct Plan {
    lock: usize,
    heads: usize,
    data: usize,
    words: usize,
    layout: MappingLayout,
}

impl Plan {
    fn new(capacity: usize) -> Result<Self, ShmError> {
        if capacity > MAX_CAPACITY {
            return Err(ShmError::InvalidConfig("a snapshot holds at most 1 GiB"));
        }
        let words = capacity.div_ceil(8);
        let mut layout = MappingLayout::new();
        let _header = layout.shared::<Header>();
        let lock = layout.mutex::<u64>(super::Config::new().participants(64).waiter_slots(8))?;
        let heads = layout.shared_slice::<CopyHead>(2);
        let data = layout.shared_slice::<AtomicU64>(2 * words);
        Ok(Self {
            lock,
            heads,
            data,
            words,
            layout,
        })
    }
}

/// A value published by writers and taken by readers in any process, without readers ever
/// blocking a writer: nginx's configuration reload through shared memory (the master
/// publishes the new configuration, the workers take it at an idle point), or any state one
/// process prepares and many read.
///
/// Two copies of up to `capacity` bytes and a version. A writer (writers take turns on a
/// [`ShmMutex`]) writes the copy readers are not directed to, then publishes it by one store
/// of the version; a reader copies the copy the version names, checking (a sequence word per
/// copy) that no writer rewrote it meanwhile, which takes two publishes during one read, and
/// reads again if one did. Readers write nothing.
///
/// | a process dies … | it leaves |
/// |---|---|
/// | a writer, before its version store | the old value (its half-written copy is the one nobody reads; the next writer writes it again) |
/// | a writer, after it | the new value (the publish lock taken back by its recovery) |
/// | a reader, anywhere | nothing |
///
/// ```
/// use gomutex::shm::ShmSnapshot;
///
/// let config = ShmSnapshot::anonymous(4096)?; // before fork(): the children share it
/// assert_eq!(config.read(), (0, Vec::new())); // nothing published yet
/// let v = config.publish(b"upstream a:80 weight=5")?;
/// // In a worker, at an idle point of its loop:
/// let mut seen = 0;
/// if let Some((version, bytes)) = config.read_if_newer(seen) {
///     seen = version; // switch to `bytes`
///     assert_eq!(bytes, b"upstream a:80 weight=5");
/// }
/// assert_eq!(seen, v);
/// assert!(config.read_if_newer(seen).is_none()); // one load when nothing changed
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
pub struct ShmSnapshot {
    lock: ShmMutex<u64>,
    header: &'static Header,
    heads: &'static [CopyHead],
    data: &'static [AtomicU64],
    words: usize,
    capacity: usize,
    // Last: the references above point into it.
    map: Mapping,
}

// SAFETY: the references are to atomics in `map`, which this value keeps alive.
unsafe impl Send for ShmSnapshot {}
// SAFETY: as above.
unsafe impl Sync for ShmSnapshot {}

impl fmt::Debug for ShmSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmSnapshot")
            .field("capacity", &self.capacity)
            .field("version", &self.version())
            .finish_non_exhaustive()
    }
}

impl ShmSnapshot {
    /// A snapshot of up to `capacity` bytes in a new anonymous shared mapping; children made
    /// with `fork()` afterwards share it.
    pub fn anonymous(capacity: usize) -> Result<Self, ShmError> {
        let plan = Plan::new(capacity)?;
        let map = Mapping::anonymous(plan.layout.len())?;
        let lock = init(&map, &plan, capacity)?;
        Self::wrap(map, plan, lock)
    }

    /// Create the named snapshot `name` (a named [`Mapping`], `shm_open(O_CREAT | O_EXCL)`,
    /// mode 0600) for unrelated processes, which [`open`](Self::open) it.
    ///
    /// ```
    /// use gomutex::shm::{self, ShmSnapshot};
    /// let name = format!("/gomutex-doc-snapshot-{}", std::process::id());
    /// let master = ShmSnapshot::create(&name, 1024)?;
    /// let worker = ShmSnapshot::open(&name)?; // another process
    /// shm::unlink(&name)?;
    /// master.publish(b"v2")?;
    /// assert_eq!(worker.read(), (1, b"v2".to_vec()));
    /// # Ok::<(), shm::ShmError>(())
    /// ```
    pub fn create(name: &str, capacity: usize) -> Result<Self, ShmError> {
        let plan = Plan::new(capacity)?;
        let mut lock = None;
        let map = Mapping::create_with(name, &plan.layout, OpenOptions::new(), |map| {
            lock = Some(init(map, &plan, capacity)?);
            Ok(())
        })?;
        Self::wrap(map, plan, lock.expect("init ran"))
    }

    /// Open the named snapshot made by [`create`](Self::create), waiting up to 1 s for its
    /// creator.
    pub fn open(name: &str) -> Result<Self, ShmError> {
        let map = Mapping::open(name)?;
        let h = map.shared::<Header>(0)?;
        let magic = h.magic.load(SeqCst);
        if magic != MAGIC {
            return Err(ShmError::BadMagic {
                found: magic,
                expected: MAGIC,
            });
        }
        let capacity = usize::try_from(h.capacity.load(Relaxed))
            .map_err(|_| ShmError::Corrupt("snapshot capacity"))?;
        let plan = Plan::new(capacity).map_err(|_| ShmError::Corrupt("snapshot capacity"))?;
        if map.len() < plan.layout.len() {
            return Err(ShmError::TooSmall {
                needed: plan.layout.len(),
                actual: map.len(),
            });
        }
        let lock = ShmMutex::<u64>::attach_in(&map, plan.lock)?;
        Self::wrap(map, plan, lock)
    }

    fn wrap(map: Mapping, plan: Plan, lock: ShmMutex<u64>) -> Result<Self, ShmError> {
        let header = map.shared::<Header>(0)?;
        let heads = map.shared_slice::<CopyHead>(plan.heads, 2)?;
        let data = map.shared_slice::<AtomicU64>(plan.data, 2 * plan.words)?;
        // (A peer could change the header: never past the copies this mapping holds.)
        let capacity = usize::try_from(header.capacity.load(Relaxed))
            .unwrap_or(usize::MAX)
            .min(plan.words * 8);
        // SAFETY: the references point into `map`'s memory, mapped at the same address for
        // as long as `map` (kept in the same value, dropped last) lives; they are only reached
        // through `&self`, never handed out with a longer lifetime.
        let (header, heads, data) = unsafe {
            (
                &*(header as *const Header),
                &*(heads as *const [CopyHead]),
                &*(data as *const [AtomicU64]),
            )
        };
        Ok(Self {
            lock,
            header,
            heads,
            data,
            words: plan.words,
            capacity,
            map,
        })
    }

    /// The most bytes a value may have.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The mapping the snapshot lives in.
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    /// The last version published: 0 before the first, then 1, 2, … (one load: poll it at an
    /// idle point).
    pub fn version(&self) -> u64 {
        self.header.version.load(Acquire)
    }

    /// Publish `value` as the next version (returned). Writers take turns; readers are never
    /// waited for. A value longer than [`capacity`](Self::capacity) is
    /// [`ShmError::InvalidConfig`], publishing nothing.
    pub fn publish(&self, value: &[u8]) -> Result<u64, ShmError> {
        if value.len() > self.capacity {
            return Err(ShmError::InvalidConfig(
                "the value is longer than the snapshot's capacity",
            ));
        }
        // A writer that died here left its version published or not: nothing to repair.
        let mut g = self.lock.lock_or_repair(|_| {});
        let v = self.header.version.load(Relaxed);
        let next = v.wrapping_add(1);
        let c = (next & 1) as usize;
        let head = &self.heads[c];
        // Seal the copy as being written (odd), then write it.
        let seq = head.seq.load(Relaxed) | 1;
        head.seq.store(seq, Relaxed);
        fence(Release);
        let words = &self.data[c * self.words..(c + 1) * self.words];
        for (w, chunk) in words.iter().zip(value.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            w.store(u64::from_le_bytes(b), Relaxed);
        }
        head.len.store(value.len() as u64, Relaxed);
        head.version.store(next, Relaxed);
        head.seq.store(seq.wrapping_add(1), Release);
        crate::crash::point(crate::crash::SNAPSHOT_WRITTEN);
        // The commit: one store.
        self.header.version.store(next, Release);
        commit_store(&mut *g, next);
        Ok(next)
    }

    /// The last value published and its version (`(0, [])` before the first publish): one
    /// version's bytes, never a mix of two.
    pub fn read(&self) -> (u64, Vec<u8>) {
        let mut out = Vec::new();
        let v = self.read_into(&mut out);
        (v, out)
    }

    /// [`read`](Self::read) if a version newer than `seen` was published; `None` (one load)
    /// otherwise.
    pub fn read_if_newer(&self, seen: u64) -> Option<(u64, Vec<u8>)> {
        (self.version() != seen).then(|| self.read())
    }

    /// [`read`](Self::read) into `out` (replacing its contents, reusing its allocation): the
    /// version read.
    pub fn read_into(&self, out: &mut Vec<u8>) -> u64 {
        loop {
            let v = self.header.version.load(Acquire);
            if v == 0 {
                out.clear();
                return 0;
            }
            let c = (v & 1) as usize;
            let head = &self.heads[c];
            let s1 = head.seq.load(Acquire);
            if s1 & 1 == 1 {
                // Two publishes since `v`: a writer is rewriting this copy.
                std::hint::spin_loop();
                continue;
            }
            let version = head.version.load(Relaxed);
            let len = (head.len.load(Relaxed) as usize).min(self.capacity);
            out.clear();
            let words = &self.data[c * self.words..(c + 1) * self.words];
            for w in &words[..len.div_ceil(8)] {
                out.extend_from_slice(&w.load(Relaxed).to_le_bytes());
            }
            out.truncate(len);
            crate::crash::point(crate::crash::SNAPSHOT_COPIED);
            fence(Acquire);
            if head.seq.load(Relaxed) == s1 {
                return version;
            }
        }
    }
}

/// A new snapshot's contents in a fresh (zero-filled) `map`: the lock, then the header.
fn init(map: &Mapping, plan: &Plan, capacity: usize) -> Result<ShmMutex<u64>, ShmError> {
    let lock = ShmMutex::init_in(
        map,
        plan.lock,
        0u64,
        super::Config::new().participants(64).waiter_slots(8),
    )?;
    let h = map.shared::<Header>(0)?;
    h.capacity.store(capacity as u64, Relaxed);
    h.magic.store(MAGIC, SeqCst);
    Ok(lock)
}
