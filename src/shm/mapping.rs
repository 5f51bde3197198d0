//! [`Mapping`]: a `MAP_SHARED` mapping this crate owns (anonymous, or of a file / memfd /
//! `shm_open` descriptor), unmapped when its last handle goes; [`MappingLayout`] to place
//! several locks in one; and [`ShmMutex::init_in`] / [`ShmMutex::attach_in`], the safe
//! counterparts of `init_in_place` / `attach` that keep the mapping alive.

use super::attach::{check_version, layout_for, region_align};
use super::config::Config;
use super::error::ShmError;
use super::layout::{MapHeader, LAYOUT_VERSION, MAP_HEADER_SIZE, MAP_MAGIC};
use super::object::{about, create_object, open_object, open_or_create_by, shm_name, OpenOptions};
use super::sys::{map_shared, unmap};
use super::types::{ShmSafe, ShmShared};
#[cfg(doc)]
use super::ShmMutex;
use core::any::TypeId;
use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::{Arc, Mutex, MutexGuard};

/// A `MAP_SHARED`, read-write mapping, unmapped when the last handle to it (this value, its
/// clones, and every [`ShmMutex`] placed in it with [`ShmMutex::init_in`] /
/// [`ShmMutex::attach_in`]) is dropped. Clones are handles to the same mapping.
///
/// * [`Mapping::anonymous`]: `mmap(MAP_SHARED | MAP_ANONYMOUS)`, zero-filled; children made
///   with `fork()` afterwards share it (unlike `memmap2`'s `map_anon`, which is
///   `MAP_PRIVATE`).
/// * [`Mapping::from_fd`] / [`Mapping::from_fd_len`]: a file, memfd or `shm_open` object
///   (anything [`AsFd`]: `OwnedFd`, `File`, `&File`…), shared with every process that maps it.
///   The descriptor is not needed once mapped.
///
/// Several locks can live in one mapping, at offsets [`MappingLayout`] computes:
///
/// ```
/// use gomutex::shm::{Config, Mapping, MappingLayout, ShmMutex};
///
/// let cfg = Config::new().participants(8).waiter_slots(8);
/// let mut plan = MappingLayout::new();
/// let counter = plan.mutex::<u64>(cfg)?;
/// let table = plan.mutex::<[u32; 16]>(cfg)?;
///
/// let map = Mapping::anonymous(plan.len())?;
/// let a = ShmMutex::init_in(&map, counter, 0u64, cfg)?;
/// let b = ShmMutex::init_in(&map, table, [0u32; 16], cfg)?;
/// drop(map); // the locks keep the mapping alive
///
/// *a.lock().unwrap() += 1;
/// b.lock().unwrap()[3] = 7;
/// // Every region starts on a REGION_ALIGN (64-byte) boundary.
/// let (base, _) = a.as_ptr_len();
/// assert_eq!(base as usize % 64, 0);
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
#[derive(Clone)]
pub struct Mapping {
    inner: Arc<Inner>,
}

struct Inner {
    /// The contents: all of the mapping, or what follows a named mapping's header.
    ptr: NonNull<u8>,
    len: usize,
    /// What `mmap` returned, to unmap.
    whole: NonNull<u8>,
    whole_len: usize,
    /// The byte ranges `[start, end)` of the regions handles in this process use, with how
    /// many handles use each: `init_in` may only overwrite bytes nobody here uses, and
    /// `attach_in` may not read a region overlapping another one.
    claims: Mutex<Vec<Claimed>>,
}

pub(super) struct Claimed {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) handles: usize,
    /// `Some(type)`: lent out as `&type` by [`Mapping::shared`], for as long as the mapping
    /// lives (the references are not counted); `None`: a lock region.
    pub(super) shared: Option<TypeId>,
}

// SAFETY: the mapping is plain memory owned by `Inner`; it is reached only through raw
// pointers (whose use is the caller's `unsafe` business) and through `ShmMutex` handles, which
// are themselves `Send + Sync`. The claim table is behind a `Mutex`.
unsafe impl Send for Inner {}
// SAFETY: as for `Send`.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: no `ShmMutex` uses the memory any more.
        unmap(self.whole.as_ptr(), self.whole_len);
    }
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("ptr", &self.inner.ptr)
            .field("len", &self.inner.len)
            .finish()
    }
}

impl Mapping {
    /// A new zero-filled anonymous shared mapping of `len` bytes (`mmap(MAP_SHARED |
    /// MAP_ANONYMOUS)`), page-aligned. Children created with `fork()` afterwards share it.
    /// `len` 0 is [`ShmError::InvalidConfig`].
    ///
    /// ```
    /// use gomutex::shm::Mapping;
    /// let m = Mapping::anonymous(10_000)?;
    /// assert_eq!(m.len(), 10_000);
    /// assert_eq!(m.as_ptr() as usize % 4096, 0);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn anonymous(len: usize) -> Result<Self, ShmError> {
        if len == 0 {
            return Err(ShmError::InvalidConfig("a Mapping must not be empty"));
        }
        let p = map_shared(-1, len)?;
        Ok(Self::wrap(p, len))
    }

    /// Map the whole of a file, memfd or `shm_open` object shared and read-write; its size is
    /// read with `fstat`. The descriptor must be open for reading and writing; it may be
    /// closed (dropped) afterwards. An empty object is [`ShmError::TooSmall`].
    ///
    /// Other processes that write the object may corrupt what is in it (a region placed in
    /// it refuses nothing it cannot check: see the module docs' limits), and one that
    /// truncates it kills every process mapping it with `SIGBUS`; seal a memfd with
    /// `F_SEAL_SHRINK` to rule that out. The overlap checks of [`ShmMutex::init_in`] and
    /// [`Mapping::shared`] are per `Mapping`: two mappings of one object in a process are
    /// like two processes, which must follow the same layout. What is per object is the check
    /// that `init_in` overwrites no lock in use (it reads the region's header).
    ///
    /// ```
    /// use gomutex::shm::{Config, Mapping, ShmMutex};
    /// use std::os::fd::{FromRawFd, OwnedFd};
    ///
    /// let len = ShmMutex::<u64>::required_size(Config::default())?;
    /// // SAFETY: a NUL-terminated name; the result is checked below.
    /// let fd = unsafe { libc::memfd_create(c"gomutex-doc".as_ptr(), libc::MFD_CLOEXEC) };
    /// assert!(fd >= 0);
    /// // SAFETY: a fresh descriptor nobody else owns.
    /// let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    /// std::fs::File::from(fd.try_clone()?).set_len(len as u64)?;
    ///
    /// let map = Mapping::from_fd(&fd)?;
    /// assert_eq!(map.len(), len);
    /// let a = ShmMutex::init_in(&map, 0, 41u64, Config::default())?;
    /// // A second mapping of the same memfd (as another process would make) sees the lock.
    /// let b = ShmMutex::<u64>::attach_in(&Mapping::from_fd(fd)?, 0)?;
    /// *a.lock().unwrap() += 1;
    /// assert_eq!(*b.lock().unwrap(), 42);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_fd(fd: impl AsFd) -> Result<Self, ShmError> {
        let fd = fd.as_fd();
        let len = object_size(fd)?;
        if len == 0 {
            return Err(ShmError::TooSmall {
                needed: 1,
                actual: 0,
            });
        }
        Self::from_fd_len(fd, len)
    }

    /// Map the first `len` bytes of a file, memfd or `shm_open` object shared and read-write
    /// (for an object whose size is known, or to map only its start). `len` 0 is
    /// [`ShmError::InvalidConfig`]; a `len` past the object's size (`fstat`; 0 for what is not
    /// a file, e.g. `/dev/zero`: use [`anonymous`](Self::anonymous)) is
    /// [`ShmError::TooSmall`], refused before anything is mapped: touching a page past the
    /// end would raise `SIGBUS`.
    ///
    /// ```
    /// use gomutex::shm::{Mapping, ShmError};
    /// let f = tempfile_of(8192)?;
    /// assert_eq!(Mapping::from_fd_len(&f, 4096)?.len(), 4096); // the first page only
    /// assert!(matches!(
    ///     Mapping::from_fd_len(&f, 3 * 4096),
    ///     Err(ShmError::TooSmall { needed: 12288, actual: 8192 })
    /// ));
    /// # fn tempfile_of(len: u64) -> std::io::Result<std::fs::File> {
    /// #     let path = std::env::temp_dir().join(format!("gomutex-doc-fdlen-{}", std::process::id()));
    /// #     let f = std::fs::OpenOptions::new().read(true).write(true).create(true).open(&path)?;
    /// #     std::fs::remove_file(&path)?;
    /// #     f.set_len(len)?;
    /// #     Ok(f)
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_fd_len(fd: impl AsFd, len: usize) -> Result<Self, ShmError> {
        if len == 0 {
            return Err(ShmError::InvalidConfig("a Mapping must not be empty"));
        }
        let fd = fd.as_fd();
        let size = object_size(fd)?;
        if len > size {
            return Err(ShmError::TooSmall {
                needed: len,
                actual: size,
            });
        }
        let p = map_shared(fd.as_raw_fd(), len)?;
        Ok(Self::wrap(p, len))
    }

    fn wrap(p: *mut u8, len: usize) -> Self {
        Self::wrap_at(p, len, 0, len)
    }

    /// The mapping `p..p + whole_len`, whose contents are the `len` bytes from `at`.
    fn wrap_at(p: *mut u8, whole_len: usize, at: usize, len: usize) -> Self {
        debug_assert!(at + len <= whole_len && len > 0);
        // `mmap` never returns a null mapping for a null hint.
        let whole = NonNull::new(p).expect("mmap returned null");
        Self {
            inner: Arc::new(Inner {
                // SAFETY: `at + len <= whole_len`: inside the mapping.
                ptr: unsafe { whole.add(at) },
                len,
                whole,
                whole_len,
                claims: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Create the named shared-memory object `name` (`shm_open(O_CREAT | O_EXCL)`, mode 0600)
    /// for the contents `layout` describes, map it, let `init` place what it holds (the locks,
    /// with [`ShmMutex::init_in`], and any shared data), and publish it: processes that
    /// [`open`](Self::open) the name wait until `init` has returned. Fails with `Io(AlreadyExists)`
    /// if the name exists; if `init` fails (or panics) the name is removed and its error
    /// returned. `name` may omit the leading `/`; errors name the object
    /// ([`ShmError::Object`]).
    ///
    /// The contents start page-aligned after a one-page header (magic, version, length) that
    /// is not part of the mapping's [`len`](Self::len): offsets are those of `layout`.
    ///
    /// ```
    /// use gomutex::shm::{self, Config, Mapping, MappingLayout, ShmMutex};
    /// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    ///
    /// let cfg = Config::new().participants(8).waiter_slots(8);
    /// let mut plan = MappingLayout::new();
    /// let (jobs, stats) = (plan.mutex::<u64>(cfg)?, plan.mutex::<[u32; 4]>(cfg)?);
    /// let hits = plan.shared::<AtomicU64>();
    ///
    /// let name = format!("/gomutex-doc-map-create-{}", std::process::id());
    /// let map = Mapping::create(&name, &plan, |map| {
    ///     ShmMutex::init_in(map, jobs, 0u64, cfg)?;
    ///     ShmMutex::init_in(map, stats, [0u32; 4], cfg)?;
    ///     Ok(())
    /// })?;
    /// // Here or in any process that opens the name:
    /// let jobs = ShmMutex::<u64>::attach_in(&map, jobs)?;
    /// *jobs.lock().unwrap() += 1;
    /// map.shared::<AtomicU64>(hits)?.fetch_add(1, Relaxed);
    /// shm::unlink(&name)?;
    /// # Ok::<(), shm::ShmError>(())
    /// ```
    pub fn create(
        name: &str,
        layout: &MappingLayout,
        init: impl FnOnce(&Mapping) -> Result<(), ShmError>,
    ) -> Result<Self, ShmError> {
        Self::create_with(name, layout, OpenOptions::new(), init)
    }

    /// [`create`](Self::create) with the object's permissions from [`OpenOptions::mode`]
    /// (set exactly, whatever the umask; its other options concern opening).
    ///
    /// ```
    /// use gomutex::shm::{self, Config, Mapping, MappingLayout, OpenOptions, ShmMutex};
    /// use std::os::unix::fs::PermissionsExt;
    ///
    /// let mut plan = MappingLayout::new();
    /// let at = plan.mutex::<u32>(Config::default())?;
    /// let name = format!("/gomutex-doc-map-mode-{}", std::process::id());
    /// let opts = OpenOptions::new().mode(0o660);
    /// let map = Mapping::create_with(&name, &plan, opts, |map| {
    ///     ShmMutex::init_in(map, at, 0u32, Config::default()).map(drop)
    /// })?;
    /// let mode = std::fs::metadata(format!("/dev/shm{name}"))?.permissions().mode();
    /// shm::unlink(&name)?;
    /// assert_eq!(mode & 0o777, 0o660);
    /// # drop(map);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_with(
        name: &str,
        layout: &MappingLayout,
        opts: OpenOptions,
        init: impl FnOnce(&Mapping) -> Result<(), ShmError>,
    ) -> Result<Self, ShmError> {
        let cname = shm_name(name)?;
        Self::create_c(&cname, layout.len(), opts.mode, init).map_err(|e| about(&cname, e))
    }

    fn create_c(
        cname: &CStr,
        len: usize,
        mode: u32,
        init: impl FnOnce(&Mapping) -> Result<(), ShmError>,
    ) -> Result<Self, ShmError> {
        if len == 0 {
            return Err(ShmError::InvalidConfig("a Mapping must not be empty"));
        }
        let whole = MAP_HEADER_SIZE
            .checked_add(len)
            .ok_or(ShmError::InvalidConfig(
                "the shared memory object would be larger than off_t allows",
            ))?;
        create_object(cname, whole, mode, |p| {
            // Dropped (unmapped) if `init` fails; handles `init` made keep it mapped.
            let map = Self::wrap_at(p, whole, MAP_HEADER_SIZE, len);
            init(&map)?;
            // SAFETY: the start of the mapping, page-aligned, a header long; atomics only.
            let h = unsafe { &*p.cast::<MapHeader>() };
            h.version.store(LAYOUT_VERSION, Relaxed);
            h.header_size.store(MAP_HEADER_SIZE as u32, Relaxed);
            h.len.store(len as u64, Relaxed);
            // Publish: everything `init` wrote happens-before any open that sees the magic.
            h.magic.store(MAP_MAGIC, Release);
            Ok(map)
        })
    }

    /// Open the named mapping `name` made by [`create`](Self::create) (in any process),
    /// waiting up to 1 s for its creator to publish it. Then [`ShmMutex::attach_in`] and
    /// [`shared`](Self::shared) at the creator's offsets (the same [`MappingLayout`]).
    /// Refuses an object owned by another user ([`ShmError::NotOwner`], see
    /// [`OpenOptions::allow_other_owner`]) and anything that is not a published mapping of
    /// this layout version, writing nothing.
    ///
    /// ```
    /// use gomutex::shm::{self, Config, Mapping, MappingLayout, ShmError, ShmMutex};
    ///
    /// let mut plan = MappingLayout::new();
    /// let at = plan.mutex::<u64>(Config::default())?;
    /// let name = format!("/gomutex-doc-map-open-{}", std::process::id());
    /// let made = Mapping::create(&name, &plan, |map| {
    ///     ShmMutex::init_in(map, at, 41u64, Config::default()).map(drop)
    /// })?;
    /// let map = Mapping::open(&name)?; // e.g. in an unrelated process
    /// assert_eq!(map.len(), plan.len());
    /// let m = ShmMutex::<u64>::attach_in(&map, at)?;
    /// *m.lock().unwrap() += 1;
    /// assert_eq!(*ShmMutex::<u64>::attach_in(&made, at)?.lock().unwrap(), 42);
    /// shm::unlink(&name)?;
    /// assert!(matches!(Mapping::open(&name).unwrap_err().cause(), ShmError::Io(_)));
    /// # Ok::<(), ShmError>(())
    /// ```
    pub fn open(name: &str) -> Result<Self, ShmError> {
        Self::open_with(name, OpenOptions::new())
    }

    /// [`open`](Self::open) with explicit [`OpenOptions`] (the wait for the creator, whose
    /// objects to accept).
    ///
    /// ```
    /// use gomutex::shm::{self, Mapping, OpenOptions, ShmError};
    /// use std::time::Duration;
    ///
    /// // An object nobody publishes as a mapping: not waited for past the timeout.
    /// let name = format!("/gomutex-doc-map-open-with-{}", std::process::id());
    /// let plain = gomutex::shm::ShmMutex::create(&name, 0u32, Default::default())?;
    /// let e = Mapping::open_with(&name, OpenOptions::new().timeout(Duration::from_millis(10)))
    ///     .unwrap_err();
    /// assert!(matches!(e.cause(), ShmError::BadMagic { .. }), "{e}");
    /// shm::unlink(&name)?;
    /// # drop(plain);
    /// # Ok::<(), ShmError>(())
    /// ```
    pub fn open_with(name: &str, opts: OpenOptions) -> Result<Self, ShmError> {
        let cname = shm_name(name)?;
        open_object(
            &cname,
            &opts,
            size_of::<MapHeader>(),
            |p, whole| match Self::published_len(p, whole) {
                Ok(len) => Ok(Self::wrap_at(p, whole, MAP_HEADER_SIZE, len)),
                Err(e) => {
                    unmap(p, whole);
                    Err(e)
                }
            },
        )
        .map_err(|e| about(&cname, e))
    }

    /// The contents' length a published mapping header at `p` (mapped for `whole` bytes, at
    /// least a header) records; loads only.
    fn published_len(p: *const u8, whole: usize) -> Result<usize, ShmError> {
        // SAFETY: page-aligned, mapped for at least a header (the caller's); atomics only.
        let h = unsafe { &*p.cast::<MapHeader>() };
        let too_small = ShmError::TooSmall {
            needed: MAP_HEADER_SIZE + 1,
            actual: whole,
        };
        match h.magic.load(Acquire) {
            // The creator sizes the object in one `ftruncate`: this size is final.
            0 if whole <= MAP_HEADER_SIZE => return Err(too_small),
            0 => return Err(ShmError::Uninitialised),
            MAP_MAGIC => {}
            found => {
                return Err(ShmError::BadMagic {
                    found,
                    expected: MAP_MAGIC,
                })
            }
        }
        check_version(
            &h.version,
            &h.header_size,
            MAP_HEADER_SIZE,
            "mapping header size",
        )?;
        let len = usize::try_from(h.len.load(Relaxed)).unwrap_or(usize::MAX);
        if len == 0 {
            return Err(ShmError::Corrupt("empty mapping"));
        }
        if whole <= MAP_HEADER_SIZE || len > whole - MAP_HEADER_SIZE {
            return Err(ShmError::TooSmall {
                needed: MAP_HEADER_SIZE.saturating_add(len),
                actual: whole,
            });
        }
        Ok(len)
    }

    /// Open the named mapping, or create it for `layout` with `init` if it does not exist;
    /// `true` if this call created it. Race-free: exactly one of several concurrent callers
    /// creates (and runs `init`), the others wait for it to publish. An existing mapping
    /// shorter than `layout` is [`ShmError::TooSmall`].
    ///
    /// ```
    /// use gomutex::shm::{self, Config, Mapping, MappingLayout, ShmMutex};
    ///
    /// let mut plan = MappingLayout::new();
    /// let at = plan.mutex::<u64>(Config::default())?;
    /// let init = |map: &Mapping| ShmMutex::init_in(map, at, 0u64, Config::default()).map(drop);
    /// let name = format!("/gomutex-doc-map-ooc-{}", std::process::id());
    /// // Every process runs the same line; one of them creates.
    /// let (a, created) = Mapping::open_or_create(&name, &plan, init)?;
    /// let (b, again) = Mapping::open_or_create(&name, &plan, init)?;
    /// assert!(created && !again);
    /// *ShmMutex::<u64>::attach_in(&a, at)?.lock().unwrap() += 1;
    /// assert_eq!(*ShmMutex::<u64>::attach_in(&b, at)?.lock().unwrap(), 1);
    /// shm::unlink(&name)?;
    /// # Ok::<(), shm::ShmError>(())
    /// ```
    pub fn open_or_create(
        name: &str,
        layout: &MappingLayout,
        init: impl FnMut(&Mapping) -> Result<(), ShmError>,
    ) -> Result<(Self, bool), ShmError> {
        Self::open_or_create_with(name, layout, OpenOptions::new(), init)
    }

    /// [`open_or_create`](Self::open_or_create), opening an existing object as
    /// [`open_with`](Self::open_with) does, or creating one with [`OpenOptions::mode`].
    ///
    /// ```
    /// use gomutex::shm::{self, Mapping, MappingLayout, OpenOptions};
    /// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    ///
    /// let mut plan = MappingLayout::new();
    /// let at = plan.shared::<AtomicU64>(); // lock-free data only: nothing to initialise
    /// let name = format!("/gomutex-doc-map-ooc-with-{}", std::process::id());
    /// let opts = OpenOptions::new().mode(0o640);
    /// let (map, _) = Mapping::open_or_create_with(&name, &plan, opts, |_| Ok(()))?;
    /// map.shared::<AtomicU64>(at)?.fetch_add(1, Relaxed);
    /// shm::unlink(&name)?;
    /// # Ok::<(), shm::ShmError>(())
    /// ```
    pub fn open_or_create_with(
        name: &str,
        layout: &MappingLayout,
        opts: OpenOptions,
        mut init: impl FnMut(&Mapping) -> Result<(), ShmError>,
    ) -> Result<(Self, bool), ShmError> {
        let (map, created) = open_or_create_by(
            || Self::create_with(name, layout, opts, &mut init),
            || Self::open_with(name, opts),
        )?;
        if map.len() < layout.len() {
            let e = ShmError::TooSmall {
                needed: layout.len(),
                actual: map.len(),
            };
            return Err(about(&shm_name(name)?, e));
        }
        Ok((map, created))
    }

    /// The first byte of the mapping (page-aligned). Valid for [`len`](Self::len) bytes
    /// while a handle to the mapping lives. Reading or writing through it is `unsafe` and
    /// must not race with the locks placed in the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.ptr.as_ptr()
    }

    /// The length of the mapping in bytes (never 0).
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Always `false`: a mapping is never empty (clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The [`ShmShared`] value at `offset`: data shared without a lock (atomics), e.g. counters
    /// next to the locks of a [`MappingLayout`] (whose [`shared`](MappingLayout::shared) gives
    /// the offset). A fresh anonymous mapping holds zeroes there, a valid value of any
    /// `ShmShared` type.
    ///
    /// The range must lie in the mapping and be aligned for `T` ([`ShmError::TooSmall`],
    /// [`ShmError::Misaligned`]), and may not overlap a lock region used in this process nor
    /// another `shared` value other than the same `T` at the same offset
    /// ([`ShmError::InvalidConfig`]); once lent out, the range stays reserved for `T` while
    /// the mapping lives. As with any shared memory, other processes must use the same layout.
    ///
    /// ```
    /// use gomutex::shm::{Config, Mapping, MappingLayout, ShmMutex};
    /// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    ///
    /// let mut plan = MappingLayout::new();
    /// let lock = plan.mutex::<u32>(Config::default())?;
    /// let hits = plan.shared::<[AtomicU64; 4]>();
    /// let map = Mapping::anonymous(plan.len())?;
    /// let m = ShmMutex::init_in(&map, lock, 0u32, Config::default())?;
    /// let counters = map.shared::<[AtomicU64; 4]>(hits)?;
    /// counters[1].fetch_add(1, Relaxed); // no lock needed
    /// *m.lock().unwrap() += 1;
    /// assert_eq!(map.shared::<[AtomicU64; 4]>(hits)?[1].load(Relaxed), 1);
    /// assert!(map.shared::<AtomicU64>(lock).is_err()); // inside the lock's region
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn shared<T: ShmShared>(&self, offset: usize) -> Result<&T, ShmError> {
        let p = self.claim_shared::<T>(offset, 1)?;
        // SAFETY: `claim_shared` checked one `T` at `p` and lent the bytes out as `T`s only.
        Ok(unsafe { &*p })
    }

    /// `n` [`ShmShared`] values of type `T` one after another from `offset`: the run-time
    /// sized counterpart of [`shared`](Self::shared)`::<[T; N]>` (e.g. one slot per worker,
    /// the number of workers known at run time), at an offset from
    /// [`MappingLayout::shared_slice`].
    ///
    /// The same rules as [`shared`](Self::shared): in the mapping, aligned for `T`, over no
    /// lock region used in this process, and overlapping no other shared value but the same
    /// element type over the same range (the same `offset` and `n`; `shared::<T>(offset)` is
    /// `shared_slice::<T>(offset, 1)`, while an array type `[T; N]` is another type).
    /// `n == 0` gives an empty slice and claims nothing.
    ///
    /// ```
    /// use gomutex::shm::{Mapping, MappingLayout};
    /// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    ///
    /// let workers = std::thread::available_parallelism()?.get();
    /// let mut plan = MappingLayout::new();
    /// let at = plan.shared_slice::<AtomicU64>(workers);
    /// let map = Mapping::anonymous(plan.len())?;
    /// let hits = map.shared_slice::<AtomicU64>(at, workers)?;
    /// assert_eq!(hits.len(), workers);
    /// hits[workers - 1].fetch_add(1, Relaxed);
    /// // Again (here or in a forked child): the same values.
    /// assert_eq!(map.shared_slice::<AtomicU64>(at, workers)?[workers - 1].load(Relaxed), 1);
    /// // Not another length over the same bytes.
    /// assert!(map.shared_slice::<AtomicU64>(at, workers + 1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shared_slice<T: ShmShared>(&self, offset: usize, n: usize) -> Result<&[T], ShmError> {
        let p = self.claim_shared::<T>(offset, n)?;
        // SAFETY: `claim_shared` checked `n` `T`s from `p` and lent the bytes out as `T`s only.
        Ok(unsafe { core::slice::from_raw_parts(p, n) })
    }

    /// Check that `n` `T`s from `offset` lie in the mapping, aligned, and may be lent out as
    /// shared `T`s (see [`shared`](Self::shared)), and record them as such. The pointer may be
    /// turned into `&T`s (or a `&[T]` of length `n`) living as long as `self` is borrowed.
    fn claim_shared<T: ShmShared>(&self, offset: usize, n: usize) -> Result<*const T, ShmError> {
        let len = size_of::<T>().checked_mul(n).ok_or(ShmError::TooSmall {
            needed: usize::MAX,
            actual: self.len(),
        })?;
        let p = self.range(offset, len)?;
        if !(p as usize).is_multiple_of(align_of::<T>()) {
            return Err(ShmError::Misaligned {
                addr: p as usize,
                required: align_of::<T>(),
                offset: Some(offset),
            });
        }
        let (end, ty) = (offset + len, TypeId::of::<T>());
        let mut claims = self.claims();
        let same = claims
            .iter()
            .any(|c| c.start == offset && c.end == end && c.shared == Some(ty));
        if !same && len != 0 {
            if overlaps(&claims, offset, end, None) {
                return Err(IN_USE);
            }
            claims.push(Claimed {
                start: offset,
                end,
                handles: 0,
                shared: Some(ty),
            });
        }
        // In the mapping (checked) and aligned for `T` (checked); the mapping lives as long as
        // `self` is borrowed. The bytes belong to no lock region of this process and are lent
        // out only as `T`s of this range (both checked, and recorded for the mapping's
        // lifetime, so no later `init_in`/`attach_in` takes them; an empty range holds
        // nothing to protect). Any bit pattern is a valid `T` and `T` is only changed
        // atomically through `&T` (`ShmShared`'s contract), so what other processes write
        // there concurrently is no data race.
        Ok(p.cast::<T>())
    }

    pub(super) fn claims(&self) -> MutexGuard<'_, Vec<Claimed>> {
        // The table is consistent after any panic (one push or update at a time).
        self.inner.claims.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`ShmError::Misaligned`] if `offset` lies in the mapping but is not a multiple of
    /// `required` (checked before the range: a misaligned region near the end is not "too
    /// small"); an offset past the end is left to [`range`](Self::range).
    pub(super) fn check_offset(&self, offset: usize, required: usize) -> Result<(), ShmError> {
        if offset < self.len() && !offset.is_multiple_of(required) {
            return Err(ShmError::Misaligned {
                addr: (self.as_ptr() as usize).wrapping_add(offset),
                required,
                offset: Some(offset),
            });
        }
        Ok(())
    }

    /// The address at `offset`, if `offset..offset + len` lies in the mapping.
    pub(super) fn range(&self, offset: usize, len: usize) -> Result<*mut u8, ShmError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => {
                // SAFETY: `offset <= end <= len`: inside (or one past) the mapping.
                Ok(unsafe { self.as_ptr().add(offset) })
            }
            _ => Err(ShmError::TooSmall {
                needed: offset.saturating_add(len),
                actual: self.len(),
            }),
        }
    }
}

/// The size of the object `fd` refers to (`fstat`'s `st_size`).
fn object_size(fd: BorrowedFd<'_>) -> Result<usize, ShmError> {
    // SAFETY: a zeroed stat buffer for fstat to fill.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: a descriptor borrowed for this call, a valid buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error().into());
    }
    usize::try_from(st.st_size)
        .map_err(|_| ShmError::InvalidConfig("the object is larger than the address space"))
}

/// A region's share of a [`Mapping`], held by the [`ShmMutex`] placed there: keeps the mapping
/// alive and its byte range claimed in this process.
pub(super) struct Claim {
    pub(super) map: Mapping,
    pub(super) start: usize,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claims = self.map.claims();
        if let Some(i) = claims
            .iter()
            .position(|c| c.start == self.start && c.shared.is_none())
        {
            claims[i].handles -= 1;
            if claims[i].handles == 0 {
                claims.swap_remove(i);
            }
        }
    }
}

/// Whether `start..end` overlaps a claim, other than the lock region starting at
/// `except_start` (a shared value starting there is never excepted).
pub(super) fn overlaps(
    claims: &[Claimed],
    start: usize,
    end: usize,
    except_start: Option<usize>,
) -> bool {
    claims.iter().any(|c| {
        !(c.shared.is_none() && Some(c.start) == except_start) && c.start < end && start < c.end
    })
}

pub(super) const IN_USE: ShmError =
    ShmError::InvalidConfig("the range overlaps a region in use in this process");

/// Offsets for several regions (and other data) in one [`Mapping`]: each placed after the
/// previous ones, aligned as it needs; [`len`](Self::len) is the size to map.
///
/// ```
/// use gomutex::shm::{Config, MappingLayout, ShmMutex, REGION_ALIGN};
/// let cfg = Config::default();
/// let mut plan = MappingLayout::new();
/// let a = plan.mutex::<u32>(cfg)?;
/// let b = plan.mutex::<u64>(cfg)?;
/// let flags = plan.reserve(16, 8);
/// assert_eq!(a, 0);
/// assert_eq!(b, ShmMutex::<u32>::required_size(cfg)?);
/// assert_eq!(b % REGION_ALIGN, 0);
/// assert_eq!(plan.len(), flags + 16);
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MappingLayout {
    len: usize,
}

impl MappingLayout {
    /// An empty layout.
    ///
    /// ```
    /// use gomutex::shm::{Config, MappingLayout};
    /// let mut plan = MappingLayout::new();
    /// assert_eq!(plan.len(), 0);
    /// let lock = plan.mutex::<u64>(Config::default())?;
    /// assert_eq!(lock, 0);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub const fn new() -> Self {
        Self { len: 0 }
    }

    /// The offset of a [`ShmMutex<T>`] region with this configuration, placed after
    /// everything so far (aligned to [`REGION_ALIGN`](super::REGION_ALIGN), or to `align_of::<T>()` if more), for
    /// [`ShmMutex::init_in`] / [`ShmMutex::attach_in`].
    pub fn mutex<T: ShmSafe>(&mut self, cfg: Config) -> Result<usize, ShmError> {
        let size = layout_for::<T>(cfg)?.total_size;
        Ok(self.reserve(size, region_align::<T>()))
    }

    /// The offset of `size` bytes aligned to `align` (a power of two; the mapping's start is
    /// page-aligned, so up to 4096 holds for absolute addresses too), placed after everything
    /// so far.
    ///
    /// # Panics
    ///
    /// If `align` is not a power of two or the layout overflows `usize`.
    pub fn reserve(&mut self, size: usize, align: usize) -> usize {
        assert!(align.is_power_of_two(), "alignment must be a power of two");
        let start = self
            .len
            .checked_next_multiple_of(align)
            .expect("layout overflows usize");
        self.len = start.checked_add(size).expect("layout overflows usize");
        start
    }

    /// The offset of a [`ShmShared`] `T` (lock-free shared data, e.g. atomic counters) placed
    /// after everything so far, for [`Mapping::shared`].
    ///
    /// # Panics
    ///
    /// If the layout overflows `usize`.
    pub fn shared<T: ShmShared>(&mut self) -> usize {
        self.reserve(size_of::<T>(), align_of::<T>())
    }

    /// The offset of `n` [`ShmShared`] `T`s one after another (a number known only at run
    /// time) placed after everything so far, for [`Mapping::shared_slice`].
    ///
    /// # Panics
    ///
    /// If the layout overflows `usize`.
    pub fn shared_slice<T: ShmShared>(&mut self, n: usize) -> usize {
        let size = size_of::<T>()
            .checked_mul(n)
            .expect("layout overflows usize");
        self.reserve(size, align_of::<T>())
    }

    /// The bytes to map: the end of the last thing placed (0 for an empty layout).
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was placed.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests;
