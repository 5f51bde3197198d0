//! Every way to get a [`ShmMutex`]: an anonymous region, a named object (create, open, open or
//! create), memory the caller mapped (`init_in_place`, `attach`), or a place in a [`Mapping`]
//! (`init_in`, `attach_in`, which keep the mapping alive).

use super::attach::{check_not_in_use, init_region, layout_for, region_align, validate};
use super::config::Config;
use super::error::ShmError;
use super::layout::HEADER_SIZE;
use super::mapping::{overlaps, Claim, Claimed, Mapping, IN_USE};
use super::object::{
    about, create_object, open_object, open_or_create_by, shm_name, unlink, OpenOptions,
};
use super::region::Region;
use super::sys::{map_shared, unmap};
use super::types::ShmSafe;
use super::{Backing, ShmMutex};
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::AtomicU64;
use std::ffi::CStr;
use std::time::Duration;

impl<T: ShmSafe> ShmMutex<T> {
    /// Bytes a region for `T` with this configuration occupies (what to map for
    /// [`init_in_place`](Self::init_in_place)).
    ///
    /// ```
    /// use gomutex::shm::{Config, ShmMutex};
    /// let n = ShmMutex::<u64>::required_size(Config::default()).unwrap();
    /// assert_eq!(n % 64, 0);
    /// ```
    pub fn required_size(cfg: Config) -> Result<usize, ShmError> {
        Ok(layout_for::<T>(cfg)?.total_size)
    }

    pub(super) fn from_region(region: Region, backing: Backing, map_len: usize) -> Self {
        Self {
            region,
            backing,
            map_len,
            registration: AtomicU64::new(0),
            _t: PhantomData,
        }
    }

    /// A new region in an anonymous shared mapping (`MAP_SHARED | MAP_ANONYMOUS`) holding
    /// `value`, with the default [`Config`]. Children created with `fork()` afterwards share
    /// it.
    ///
    /// ```
    /// let m = gomutex::shm::ShmMutex::anonymous(0u64)?; // share it: fork() after this
    /// *m.lock().unwrap() += 1;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn anonymous(value: T) -> Result<Self, ShmError> {
        Self::anonymous_with(value, Config::default())
    }

    /// [`anonymous`](Self::anonymous) with explicit sizes.
    ///
    /// ```
    /// use gomutex::shm::{Config, ShmMutex};
    /// let m = ShmMutex::anonymous_with([0u32; 4], Config::new().participants(4).waiter_slots(4))?;
    /// m.lock().unwrap()[1] = 7;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn anonymous_with(value: T, cfg: Config) -> Result<Self, ShmError> {
        let len = layout_for::<T>(cfg)?.total_size;
        let p = map_shared(-1, len)?;
        // SAFETY: a fresh mapping of `len` bytes, page aligned, ours alone, zero-filled.
        match unsafe { init_region(p, len, value, cfg, true) } {
            Ok(r) => Self::from_region(r, Backing::Mapped, len).checked(),
            Err(e) => {
                unmap(p, len);
                Err(e)
            }
        }
    }

    /// Create a named region (`shm_open(name, O_CREAT | O_EXCL)`, mode 0600) holding `value`.
    /// Fails with `Io(AlreadyExists)` if the name exists. `name` may omit the leading `/`.
    ///
    /// ```
    /// use gomutex::shm::{self, Config, ShmMutex};
    /// let name = format!("/gomutex-doc-create-{}", std::process::id());
    /// let m = ShmMutex::create(&name, 0u64, Config::default())?;
    /// assert!(ShmMutex::create(&name, 0u64, Config::default()).is_err()); // the name exists
    /// shm::unlink(&name)?; // the region lives on in `m` until it is dropped
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn create(name: &str, value: T, cfg: Config) -> Result<Self, ShmError> {
        Self::create_with(name, value, cfg, OpenOptions::new())
    }

    /// [`create`](Self::create) with the object's permissions from
    /// [`OpenOptions::mode`] (its other options concern opening and are ignored here).
    ///
    /// ```
    /// use gomutex::shm::{self, Config, OpenOptions, ShmMutex};
    /// use std::os::unix::fs::PermissionsExt;
    ///
    /// let name = format!("/gomutex-doc-mode-{}", std::process::id());
    /// // Readable and writable by the group too (peers of another uid in the group open it
    /// // with `OpenOptions::new().allow_other_owner(true)`).
    /// let m = ShmMutex::create_with(&name, 0u64, Config::default(), OpenOptions::new().mode(0o660))?;
    /// let mode = std::fs::metadata(format!("/dev/shm{name}"))?.permissions().mode();
    /// shm::unlink(&name)?;
    /// assert_eq!(mode & 0o777, 0o660);
    /// # drop(m);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_with(
        name: &str,
        value: T,
        cfg: Config,
        opts: OpenOptions,
    ) -> Result<Self, ShmError> {
        let cname = shm_name(name)?;
        Self::create_c(&cname, value, cfg, opts.mode).map_err(|e| about(&cname, e))
    }

    fn create_c(cname: &CStr, value: T, cfg: Config, mode: u32) -> Result<Self, ShmError> {
        let len = layout_for::<T>(cfg)?.total_size;
        create_object(cname, len, mode, |p| {
            // SAFETY: a fresh mapping of the new (O_EXCL), just-extended, so zero-filled
            // object, page aligned; openers only load its magic atomically until it is
            // written, last.
            match unsafe { init_region(p, len, value, cfg, true) } {
                Ok(r) => Self::from_region(r, Backing::Mapped, len).checked(),
                Err(e) => {
                    unmap(p, len);
                    Err(e)
                }
            }
        })
    }

    /// Open an existing named region, waiting up to 1 s for its creator to finish
    /// initialising it. Refuses an object owned by another user ([`ShmError::NotOwner`]; see
    /// [`open_with`](Self::open_with)).
    ///
    /// ```
    /// use gomutex::shm::{self, Config, ShmMutex};
    /// let name = format!("/gomutex-doc-open-{}", std::process::id());
    /// let created = ShmMutex::create(&name, 1u64, Config::default())?;
    /// let opened = ShmMutex::<u64>::open(&name)?; // as another process would
    /// *opened.lock().unwrap() += 1;
    /// assert_eq!(*created.lock().unwrap(), 2);
    /// shm::unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open(name: &str) -> Result<Self, ShmError> {
        Self::open_with(name, OpenOptions::new())
    }

    /// [`open`](Self::open) with an explicit wait for initialisation.
    ///
    /// ```
    /// use gomutex::shm::ShmMutex;
    /// use std::time::Duration;
    /// let r = ShmMutex::<u64>::open_timeout("/gomutex-doc-no-such-name", Duration::from_millis(10));
    /// assert!(r.is_err()); // NotFound: no object of that name
    /// ```
    pub fn open_timeout(name: &str, timeout: Duration) -> Result<Self, ShmError> {
        Self::open_with(name, OpenOptions::new().timeout(timeout))
    }

    /// Open an existing named region. Fails with `Io(NotFound)` if the name does not exist,
    /// [`ShmError::NotOwner`] if another user owns the object (unless
    /// [`OpenOptions::allow_other_owner`]), [`ShmError::TooSmall`] if it is smaller than a
    /// header, [`ShmError::InitTimeout`] if it is not initialised within
    /// [`OpenOptions::timeout`], or a validation error (nothing is written then).
    ///
    /// ```
    /// use gomutex::shm::{self, Config, OpenOptions, ShmMutex};
    /// let name = format!("/gomutex-doc-open-with-{}", std::process::id());
    /// let _created = ShmMutex::create(&name, 0u64, Config::default())?;
    /// let opened = ShmMutex::<u64>::open_with(&name, OpenOptions::new().allow_other_owner(true))?;
    /// assert_eq!(*opened.lock().unwrap(), 0);
    /// shm::unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open_with(name: &str, opts: OpenOptions) -> Result<Self, ShmError> {
        let cname = shm_name(name)?;
        Self::open_c(&cname, opts).map_err(|e| about(&cname, e))
    }

    fn open_c(cname: &CStr, opts: OpenOptions) -> Result<Self, ShmError> {
        open_object(cname, &opts, HEADER_SIZE, |p, len| {
            match validate::<T>(p, len) {
                Ok(layout) => {
                    // SAFETY: validated; mapped for `len >= total_size` bytes until drop.
                    let r = unsafe { Region::new(NonNull::new_unchecked(p), layout) };
                    Self::from_region(r, Backing::Mapped, len).checked()
                }
                Err(e) => {
                    unmap(p, len);
                    Err(e)
                }
            }
        })
    }

    /// Open the named region, or create it with `value` if it does not exist; `true` if this
    /// call created it. Race-free: exactly one of several concurrent callers creates. An
    /// existing object owned by another user is refused ([`ShmError::NotOwner`]).
    ///
    /// ```
    /// use gomutex::shm::{self, Config, ShmMutex};
    /// let name = format!("/gomutex-doc-ooc-{}", std::process::id());
    /// let (a, created) = ShmMutex::open_or_create(&name, 0u64, Config::default())?;
    /// let (b, again) = ShmMutex::open_or_create(&name, 99u64, Config::default())?;
    /// assert!(created && !again);
    /// assert_eq!(*b.lock().unwrap(), 0); // the existing value, not 99
    /// shm::unlink(&name)?;
    /// # drop(a);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open_or_create(name: &str, value: T, cfg: Config) -> Result<(Self, bool), ShmError> {
        Self::open_or_create_with(name, value, cfg, OpenOptions::new())
    }

    /// [`open_or_create`](Self::open_or_create), opening an existing object as
    /// [`open_with`](Self::open_with) does, or creating one with [`OpenOptions::mode`].
    ///
    /// ```
    /// use gomutex::shm::{self, Config, OpenOptions, ShmMutex};
    /// let name = format!("/gomutex-doc-oocw-{}", std::process::id());
    /// let opts = OpenOptions::new().mode(0o660);
    /// let (_m, created) = ShmMutex::open_or_create_with(&name, 0u64, Config::default(), opts)?;
    /// assert!(created);
    /// shm::unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open_or_create_with(
        name: &str,
        value: T,
        cfg: Config,
        opts: OpenOptions,
    ) -> Result<(Self, bool), ShmError> {
        open_or_create_by(
            || Self::create_with(name, value, cfg, opts),
            || Self::open_with(name, opts),
        )
    }

    /// Remove a name: the same as the free function [`shm::unlink`](super::unlink), which
    /// needs no type parameter.
    pub fn unlink(name: &str) -> Result<(), ShmError> {
        unlink(name)
    }

    /// Initialise a region in memory the caller mapped, holding `value`.
    ///
    /// # Safety
    ///
    /// * `ptr..ptr + len` is writable memory mapped `MAP_SHARED` (a shared file, `shm_open`,
    ///   memfd or `MAP_SHARED | MAP_ANONYMOUS` object; never private or copy-on-write memory,
    ///   where other processes would not see the lock) that stays mapped for the life of the
    ///   returned handle;
    /// * no other process or thread uses that memory until this returns (it is overwritten).
    ///
    /// Checks (and returns an error for, without writing) a misaligned `ptr` (it must be
    /// [`REGION_ALIGN`](super::REGION_ALIGN)-aligned, or `align_of::<T>()`-aligned if that is more; `mmap` results
    /// are) and a `len` below [`required_size`](Self::required_size).
    ///
    /// ```
    /// use gomutex::shm::{Config, Mapping, ShmMutex};
    /// let cfg = Config::default();
    /// let map = Mapping::anonymous(ShmMutex::<u64>::required_size(cfg)?)?;
    /// // SAFETY: `map` is MAP_SHARED, unused by anyone else, and outlives `m` (dropped first).
    /// let m = unsafe { ShmMutex::init_in_place(map.as_ptr(), map.len(), 5u64, cfg)? };
    /// assert_eq!(*m.lock().unwrap(), 5);
    /// # drop(m);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub unsafe fn init_in_place(
        ptr: *mut u8,
        len: usize,
        value: T,
        cfg: Config,
    ) -> Result<Self, ShmError> {
        // SAFETY: the caller's contract (the memory may hold anything: zero it).
        let r = unsafe { init_region(ptr, len, value, cfg, false) }?;
        Self::from_region(r, Backing::Borrowed, len).checked()
    }

    /// Attach to a region another process (or [`init_in_place`](Self::init_in_place))
    /// initialised in memory the caller mapped. Validates the header and writes nothing if it
    /// is wrong.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` is readable and writable `MAP_SHARED` memory that stays mapped for the
    /// life of the returned handle, and, if it holds a valid header, is used only as a gomutex
    /// region for `T` by everybody.
    ///
    /// ```
    /// use gomutex::shm::{Config, ShmError, ShmMutex};
    ///
    /// let len = ShmMutex::<u32>::required_size(Config::default())?;
    /// // SAFETY: a fresh shared anonymous mapping, unmapped below after the handles are gone.
    /// let p = unsafe {
    ///     libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE,
    ///                libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0)
    /// } as *mut u8;
    /// // Zeroed memory is not a region: an error, and nothing written.
    /// assert!(matches!(unsafe { ShmMutex::<u32>::attach(p, len) }, Err(ShmError::Uninitialised)));
    /// let a = unsafe { ShmMutex::init_in_place(p, len, 5u32, Config::default()) }?;
    /// let b = unsafe { ShmMutex::<u32>::attach(p, len) }?;
    /// *a.lock().unwrap() += 1;
    /// assert_eq!(*b.lock().unwrap(), 6);
    /// // A different T is refused.
    /// assert!(matches!(unsafe { ShmMutex::<u64>::attach(p, len) }, Err(ShmError::ValueMismatch { .. })));
    /// drop((a, b));
    /// unsafe { libc::munmap(p.cast(), len) };
    /// # Ok::<(), ShmError>(())
    /// ```
    pub unsafe fn attach(ptr: *mut u8, len: usize) -> Result<Self, ShmError> {
        let layout = validate::<T>(ptr, len)?;
        // SAFETY: validated (non-null, aligned, big enough); kept mapped per the contract.
        let r = unsafe { Region::new(NonNull::new_unchecked(ptr), layout) };
        Self::from_region(r, Backing::Borrowed, len).checked()
    }

    /// Initialise a region holding `value` at `offset` in `map` and return a handle that
    /// keeps the mapping alive. Safe: the range must lie in the mapping, be aligned to
    /// [`REGION_ALIGN`](super::REGION_ALIGN) (or `align_of::<T>()` if more) and be
    /// [`required_size`](Self::required_size) long ([`ShmError::Misaligned`],
    /// [`ShmError::TooSmall`] otherwise), and overlap no region a handle placed through this
    /// `Mapping` uses ([`ShmError::InvalidConfig`]); it is overwritten, unless it holds a lock
    /// in use: a region whose header names a live participant, a process registered with it
    /// (it locked through any handle, in any mapping of the object, and has not dropped that
    /// handle), is refused with [`ShmError::RegionInUse`], and one whose header this build
    /// cannot read (another [`LAYOUT_VERSION`](super::LAYOUT_VERSION), corrupt) with that
    /// error. The first check is per `Mapping` (a table in this process), the second per
    /// object (the memory's header).
    ///
    /// Other processes sharing the mapping must place the same things at the same offsets
    /// (as with any shared memory, the library cannot check what they do) and must not use
    /// the region until this returns: create the regions before `fork()`, or tell peers that
    /// opened the same object when to [`attach_in`](Self::attach_in) (an attach before that
    /// is an error, [`ShmError::Uninitialised`], never a wrong region).
    ///
    /// The per-process table of claimed ranges is behind a lock: do not `fork()` while
    /// another thread is inside `init_in`/`attach_in` or dropping a handle placed in a
    /// [`Mapping`] (the child would find that lock held for good), as with any lock and
    /// `fork()`.
    ///
    /// ```
    /// use gomutex::shm::{Config, Mapping, MappingLayout, ShmMutex};
    /// let mut plan = MappingLayout::new();
    /// let at = plan.mutex::<u64>(Config::default())?;
    /// let map = Mapping::anonymous(plan.len())?;
    /// let m = ShmMutex::init_in(&map, at, 3u64, Config::default())?;
    /// assert_eq!(*m.lock().unwrap(), 3);
    /// assert!(ShmMutex::init_in(&map, at, 0u64, Config::default()).is_err()); // in use
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn init_in(map: &Mapping, offset: usize, value: T, cfg: Config) -> Result<Self, ShmError> {
        let len = Self::required_size(cfg)?;
        map.check_offset(offset, region_align::<T>())?;
        let base = map.range(offset, len)?;
        let mut claims = map.claims();
        if overlaps(&claims, offset, offset + len, None) {
            return Err(IN_USE);
        }
        // Per object: not over a live lock, whatever mapping (or process) uses it. Aligned
        // (`check_offset`) and a header long (`len`): what it reads lies in the mapping.
        check_not_in_use(base, map.len() - offset)?;
        // SAFETY: in the mapping (checked), which lives as long as the returned handle (its
        // `Claim`); no handle placed through this mapping uses these bytes (checked, under
        // the claim lock, held until the new handle's claim is recorded), and no process is
        // registered with a lock there (checked). Peers follow the documented contract: the
        // same layout, no use before the region is published.
        let r = unsafe { init_region(base, len, value, cfg, false) }?;
        claims.push(Claimed {
            start: offset,
            end: offset + len,
            handles: 1,
            shared: None,
        });
        drop(claims);
        Self::in_mapping(r, map, offset, len)
    }

    /// Attach to the region for `T` at `offset` in `map` (made by [`init_in`](Self::init_in)
    /// or by another process, e.g. with [`init_in_place`](Self::init_in_place) at the same
    /// offset of the same object), validating its header as [`attach`](Self::attach) does
    /// and writing nothing if it is wrong. The handle keeps the mapping alive. Several
    /// handles may attach to one region; a region overlapping another one this process uses
    /// is refused ([`ShmError::InvalidConfig`]).
    ///
    /// ```
    /// use gomutex::shm::{Config, Mapping, ShmError, ShmMutex};
    /// let len = ShmMutex::<u32>::required_size(Config::default())?;
    /// let map = Mapping::anonymous(2 * len)?;
    /// assert!(matches!(ShmMutex::<u32>::attach_in(&map, 0), Err(ShmError::Uninitialised)));
    /// let a = ShmMutex::init_in(&map, len, 5u32, Config::default())?;
    /// let b = ShmMutex::<u32>::attach_in(&map, len)?;
    /// *a.lock().unwrap() += 1;
    /// assert_eq!(*b.lock().unwrap(), 6);
    /// // Not over a region in use, nor of another type.
    /// assert!(ShmMutex::init_in(&map, len, 0u32, Config::default()).is_err());
    /// assert!(matches!(ShmMutex::<u64>::attach_in(&map, len), Err(ShmError::ValueMismatch { .. })));
    /// # Ok::<(), ShmError>(())
    /// ```
    pub fn attach_in(map: &Mapping, offset: usize) -> Result<Self, ShmError> {
        map.check_offset(offset, region_align::<T>())?;
        if offset >= map.len() {
            return Err(ShmError::TooSmall {
                needed: offset.saturating_add(HEADER_SIZE),
                actual: map.len(),
            });
        }
        // SAFETY: `offset < len`: inside the mapping.
        let base = unsafe { map.as_ptr().add(offset) };
        let mut claims = map.claims();
        let same = claims
            .iter()
            .position(|c| c.start == offset && c.shared.is_none());
        // Nothing read may belong to another region this process uses (its value may be
        // borrowed mutably): first the header, then the whole region.
        if overlaps(&claims, offset, offset + HEADER_SIZE, Some(offset)) {
            return Err(IN_USE);
        }
        let layout = validate::<T>(base, map.len() - offset)?;
        let end = offset + layout.total_size;
        if overlaps(&claims, offset, end, Some(offset))
            || same.is_some_and(|i| claims[i].end != end)
        {
            return Err(IN_USE);
        }
        match same {
            Some(i) => claims[i].handles += 1,
            None => claims.push(Claimed {
                start: offset,
                end,
                handles: 1,
                shared: None,
            }),
        }
        drop(claims);
        // SAFETY: validated (non-null, aligned, `total_size` bytes in the mapping), which the
        // handle keeps mapped.
        let r = unsafe { Region::new(NonNull::new_unchecked(base), layout) };
        Self::in_mapping(r, map, offset, layout.total_size)
    }

    /// The handle for a region at `offset` in `map` whose claim was just recorded: on failure
    /// the dropped handle gives the claim back.
    fn in_mapping(r: Region, map: &Mapping, offset: usize, len: usize) -> Result<Self, ShmError> {
        let claim = Claim {
            map: map.clone(),
            start: offset,
        };
        Self::from_region(r, Backing::Within(claim), len).checked()
    }
}
