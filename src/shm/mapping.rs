//! Where a region comes from: an anonymous shared mapping, a named POSIX shared-memory object
//! (`shm_open`), or memory the caller mapped; the checks every attach makes before it trusts a
//! header, and the initialisation that publishes one.

use super::layout::{
    self, Header, Layout, ProcSlot, HEADER_SIZE, LAYOUT_VERSION, MAGIC, REGION_ALIGN,
};
use super::region::Region;
use super::{Backing, Config, ShmError, ShmMutex, ShmSafe};
use core::marker::PhantomData;
use core::mem::{align_of, size_of};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::ffi::{CStr, CString};
use std::io;
use std::time::{Duration, Instant};

/// The alignment a region holding `T` must start on: the value sits at an offset aligned to
/// `max(REGION_ALIGN, align_of::<T>())` from the start, so an over-aligned `T` (up to the 4096
/// `Layout` accepts) is only aligned if the start is too.
pub(super) fn region_align<T>() -> usize {
    REGION_ALIGN.max(align_of::<T>())
}

fn check_base<T>(base: *const u8) -> Result<(), ShmError> {
    let required = region_align::<T>();
    if base.is_null() || !(base as usize).is_multiple_of(required) {
        return Err(ShmError::Misaligned {
            addr: base as usize,
            required,
            offset: None,
        });
    }
    Ok(())
}

/// [`ShmError::VersionMismatch`] unless a header's `version` is [`LAYOUT_VERSION`], then
/// [`ShmError::Corrupt`]`(what)` unless its `header_size` is `expected`.
pub(super) fn check_version(
    version: &AtomicU32,
    header_size: &AtomicU32,
    expected: usize,
    what: &'static str,
) -> Result<(), ShmError> {
    let found = version.load(Relaxed);
    if found != LAYOUT_VERSION {
        return Err(ShmError::VersionMismatch {
            found,
            expected: LAYOUT_VERSION,
        });
    }
    if header_size.load(Relaxed) as usize != expected {
        return Err(ShmError::Corrupt(what));
    }
    Ok(())
}

pub(super) fn validate<T>(base: *const u8, len: usize) -> Result<Layout, ShmError> {
    check_base::<T>(base)?;
    if len < HEADER_SIZE {
        return Err(ShmError::TooSmall {
            needed: HEADER_SIZE,
            actual: len,
        });
    }
    // SAFETY: `base` is aligned and at least a header long (checked); we only load atomics.
    let h = unsafe { &*(base as *const Header) };
    let magic = h.magic.load(Acquire);
    if magic == 0 {
        return Err(ShmError::Uninitialised);
    }
    if magic != MAGIC {
        return Err(ShmError::BadMagic { found: magic });
    }
    check_version(&h.version, &h.header_size, HEADER_SIZE, "header size")?;
    let (vs, va) = (h.value_size.load(Relaxed), h.value_align.load(Relaxed));
    if vs != size_of::<T>() as u64 || va as usize != align_of::<T>() {
        return Err(ShmError::ValueMismatch {
            expected_size: size_of::<T>(),
            expected_align: align_of::<T>(),
            found_size: vs,
            found_align: va,
        });
    }
    let (name, hash) = layout::type_ident::<T>();
    let found_hash = h.type_hash.load(Relaxed);
    if found_hash != hash {
        return Err(ShmError::TypeMismatch {
            expected: name,
            found: layout::unpack_name(h.type_name.each_ref().map(|w| w.load(Relaxed))),
            found_hash,
        });
    }
    let layout = Layout::new(
        h.participants.load(Relaxed),
        h.waiter_slots.load(Relaxed),
        size_of::<T>(),
        align_of::<T>(),
    )
    .ok_or(ShmError::Corrupt("slot counts"))?;
    if layout.participants < 2 {
        // Every region has at least one participant slot plus the spare "guest" slot; with
        // fewer, every lock call would spin for 2 s and panic (`register`).
        return Err(ShmError::Corrupt("participant count"));
    }
    if h.total_size.load(Relaxed) != layout.total_size as u64
        || h.value_offset.load(Relaxed) != layout.value_offset as u64
    {
        return Err(ShmError::Corrupt("sizes do not add up"));
    }
    if len < layout.total_size {
        return Err(ShmError::TooSmall {
            needed: layout.total_size,
            actual: len,
        });
    }
    Ok(layout)
}

/// Refuse to initialise a region over one in use: `base` (aligned, `avail` bytes of it mapped,
/// at least a header) holds a header and a live process is registered in its participant
/// table ([`ShmError::RegionInUse`]), or a header this build cannot read the table of
/// (another layout version, a corrupt header: it may be in use). Zeroed memory, garbage, and
/// a region whose participants are all gone may be overwritten. Loads only: writes nothing.
///
/// A process registers on its first lock call and leaves when its handle is dropped: a handle
/// that never locked is not seen.
pub(super) fn check_not_in_use(base: *const u8, avail: usize) -> Result<(), ShmError> {
    debug_assert!(avail >= HEADER_SIZE && (base as usize).is_multiple_of(REGION_ALIGN));
    // SAFETY: aligned and at least a header long (the caller's checks); atomics only.
    let h = unsafe { &*(base as *const Header) };
    if h.magic.load(Acquire) != MAGIC {
        return Ok(());
    }
    check_version(&h.version, &h.header_size, HEADER_SIZE, "header size")?;
    let n = h.participants.load(Relaxed) as usize;
    if n == 0 || n > layout::MAX_SLOTS as usize || HEADER_SIZE + n * layout::PROC_SIZE > avail {
        return Err(ShmError::Corrupt(
            "participant table (not within the mapping)",
        ));
    }
    for i in 0..n {
        // SAFETY: slot `i` lies in the mapping (checked) at a 64-aligned offset; atomics only.
        let p = unsafe { &*(base.add(HEADER_SIZE + i * layout::PROC_SIZE) as *const ProcSlot) };
        let ident = p.ident.load(SeqCst);
        if ident != 0 && !p.dead(ident) {
            return Err(ShmError::RegionInUse {
                pid: super::sys::ident_pid(ident),
            });
        }
    }
    Ok(())
}

fn layout_for<T>(cfg: Config) -> Result<Layout, ShmError> {
    if cfg.participants == 0 || cfg.participants >= layout::MAX_SLOTS {
        return Err(ShmError::InvalidConfig("participants must be in 1..=65535"));
    }
    if cfg.waiter_slots > layout::MAX_SLOTS {
        return Err(ShmError::InvalidConfig(
            "waiter_slots must be at most 65536",
        ));
    }
    // One extra participant slot is the "guest" a process borrows to reclaim dead
    // participants when the table is full.
    Layout::new(
        cfg.participants + 1,
        cfg.waiter_slots,
        size_of::<T>(),
        align_of::<T>(),
    )
    .ok_or(ShmError::InvalidConfig(
        "the value is aligned to more than 4096 bytes, or too large",
    ))
}

/// Initialise a region at `base` (checked: aligned, big enough).
///
/// # Safety
/// `base..base+len` is writable memory nobody else uses until this returns; except that if
/// `zeroed` (it is known to hold only zeros: a new anonymous mapping, a new `ftruncate`d
/// object), others may already load its atomics (an opener polling for the magic).
pub(super) unsafe fn init_region<T: ShmSafe>(
    base: *mut u8,
    len: usize,
    value: T,
    cfg: Config,
    zeroed: bool,
) -> Result<Region, ShmError> {
    let layout = layout_for::<T>(cfg)?;
    check_base::<T>(base)?;
    if len < layout.total_size {
        return Err(ShmError::TooSmall {
            needed: layout.total_size,
            actual: len,
        });
    }
    if !zeroed {
        // SAFETY: writable and ours alone (caller's contract), `total_size <= len`.
        unsafe { core::ptr::write_bytes(base, 0, layout.total_size) };
    }
    // SAFETY: aligned, in bounds; zeroed memory is a valid all-atomics header (its padding
    // fields are never written, so others' `&Header` to it see no change).
    let h = unsafe { &*(base as *const Header) };
    h.version.store(LAYOUT_VERSION, Relaxed);
    h.header_size.store(HEADER_SIZE as u32, Relaxed);
    h.total_size.store(layout.total_size as u64, Relaxed);
    h.participants.store(layout.participants, Relaxed);
    h.waiter_slots.store(layout.waiter_slots, Relaxed);
    h.value_offset.store(layout.value_offset as u64, Relaxed);
    h.value_size.store(size_of::<T>() as u64, Relaxed);
    h.value_align.store(align_of::<T>() as u32, Relaxed);
    let (name, hash) = layout::type_ident::<T>();
    h.type_hash.store(hash, Relaxed);
    for (w, v) in h.type_name.iter().zip(layout::pack_name(&name)) {
        w.store(v, Relaxed);
    }
    // SAFETY: the value offset is in bounds (layout) and aligned for T: it is a multiple of
    // `align_of::<T>()` from a base aligned to it (`check_base`).
    unsafe { core::ptr::write(base.add(layout.value_offset).cast::<T>(), value) };
    // Publish: everything above happens-before any attach that sees the magic.
    h.magic.store(MAGIC, Release);
    // SAFETY: initialised above with this layout; the caller keeps it mapped.
    Ok(unsafe { Region::new(NonNull::new_unchecked(base), layout) })
}

/// The rule of shared-memory names `name` breaks, if any (`name` may omit the leading `/`).
pub(super) fn name_rule_broken(name: &str) -> Option<&'static str> {
    let bare = name.strip_prefix('/').unwrap_or(name);
    Some(if bare.is_empty() {
        "it is empty (a name has 1 to 250 bytes after the leading '/')"
    } else if bare.len() > 250 {
        "it is longer than 250 bytes (without the leading '/')"
    } else if bare.contains('/') {
        "it contains a '/' after the leading one"
    } else if bare.contains('\0') {
        "it contains a NUL byte"
    } else if bare == "." || bare == ".." {
        // They name the directory `shm_open` works in (or its parent), never an object.
        "\".\" and \"..\" name a directory, not an object"
    } else {
        return None;
    })
}

pub(super) fn shm_name(name: &str) -> Result<CString, ShmError> {
    if name_rule_broken(name).is_some() {
        return Err(ShmError::InvalidName.about(name));
    }
    let bare = name.strip_prefix('/').unwrap_or(name);
    CString::new(format!("/{bare}")).map_err(|_| ShmError::InvalidName.about(name))
}

pub(super) fn map_shared(fd: libc::c_int, len: usize) -> Result<*mut u8, ShmError> {
    let flags = if fd < 0 {
        libc::MAP_SHARED | libc::MAP_ANONYMOUS
    } else {
        libc::MAP_SHARED
    };
    // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error().into());
    }
    Ok(p.cast())
}

pub(super) fn unmap(p: *mut u8, len: usize) {
    // SAFETY: `p..p+len` is a mapping we made and no longer use.
    unsafe { libc::munmap(p.cast(), len) };
}

struct Fd(libc::c_int);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// How [`ShmMutex::open_with`], [`ShmMutex::create_with`] and
/// [`ShmMutex::open_or_create_with`] treat a named region: the wait for an existing one and
/// whose to accept, the permissions of a new one.
///
/// ```
/// use gomutex::shm::OpenOptions;
/// use std::time::Duration;
/// let o = OpenOptions::new().timeout(Duration::from_millis(100)).mode(0o660);
/// assert!(!o.allow_other_owner);
/// assert_eq!(o.mode, 0o660);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenOptions {
    /// How long to wait for the creator to finish initialising the region (default 1 s;
    /// `Duration::MAX` waits as long as it takes).
    pub timeout: Duration,
    /// Accept an object owned by another user than the caller's effective uid (default
    /// `false`: [`ShmError::NotOwner`]). Any user who can write the object can hold the lock
    /// for ever, corrupt its state, or truncate it (every process that maps it then dies of
    /// `SIGBUS`); and anyone may create a name first in `/dev/shm`. Set it only when the owner
    /// is trusted, e.g. a service whose clients run as other users.
    pub allow_other_owner: bool,
    /// Permission bits of an object this call creates (default `0o600`: the owner only). Set
    /// exactly, whatever the umask (`fchmod` after `shm_open`). Only the bits in `0o777` are
    /// allowed ([`ShmError::InvalidConfig`] otherwise). Other users who may write the object
    /// must also open it with [`allow_other_owner`](Self::allow_other_owner).
    pub mode: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// The defaults: wait 1 s, refuse an object owned by another user, create with mode
    /// `0o600`.
    ///
    /// ```
    /// use gomutex::shm::OpenOptions;
    /// use std::time::Duration;
    /// let opts = OpenOptions::new().timeout(Duration::from_millis(100)).mode(0o660);
    /// assert_eq!(opts.timeout, Duration::from_millis(100));
    /// ```
    pub const fn new() -> Self {
        Self {
            timeout: Duration::from_secs(1),
            allow_other_owner: false,
            mode: 0o600,
        }
    }

    /// Set [`timeout`](Self::timeout).
    #[must_use]
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Set [`allow_other_owner`](Self::allow_other_owner).
    #[must_use]
    pub const fn allow_other_owner(mut self, allow: bool) -> Self {
        self.allow_other_owner = allow;
        self
    }

    /// Set [`mode`](Self::mode).
    #[must_use]
    pub const fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }
}

/// Refuse an object another user owns, unless `opts` allow it.
fn check_owner(name: &CStr, st: &libc::stat, opts: &OpenOptions) -> Result<(), ShmError> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if st.st_uid != uid && !opts.allow_other_owner {
        return Err(ShmError::NotOwner {
            name: name.to_string_lossy().into_owned(),
            owner_uid: st.st_uid,
            uid,
        });
    }
    Ok(())
}

/// Remove a named shared-memory object (`shm_unlink`); `name` may omit the leading `/`.
/// Processes that have it mapped keep their mapping; the next
/// [`create`](ShmMutex::create) of the name makes a new object. Fails with `Io(NotFound)` (inside
/// [`ShmError::Object`], as every error about a name) if the name does not exist.
///
/// ```
/// use gomutex::shm::{self, Config, ShmMutex};
/// let name = format!("/gomutex-doc-unlink-{}", std::process::id());
/// let m = ShmMutex::create(&name, 1u32, Config::default())?;
/// shm::unlink(&name)?; // no `ShmMutex::<u32>::` needed
/// assert_eq!(*m.lock().unwrap(), 1); // still mapped here
/// assert!(shm::unlink(&name).is_err());
/// # Ok::<(), shm::ShmError>(())
/// ```
pub fn unlink(name: &str) -> Result<(), ShmError> {
    let cname = shm_name(name)?;
    // SAFETY: a NUL-terminated name.
    if unsafe { libc::shm_unlink(cname.as_ptr()) } != 0 {
        return Err(about(&cname, io::Error::last_os_error().into()));
    }
    Ok(())
}

/// Create the named object `cname` of `len` bytes (`shm_open(O_CREAT | O_EXCL)`, permissions
/// exactly `mode`), map it whole and hand the mapping, zero-filled and page aligned, to
/// `init`, which initialises it, **publishes it last** (a magic number stored with release
/// ordering: openers poll for it with [`open_object`]) and owns it from then on (unmapping it
/// if it fails). The name is removed again if anything fails, `init` panicking included.
pub(super) fn create_object<R>(
    cname: &CStr,
    len: usize,
    mode: u32,
    init: impl FnOnce(*mut u8) -> Result<R, ShmError>,
) -> Result<R, ShmError> {
    if mode & !0o777 != 0 {
        return Err(ShmError::InvalidConfig(
            "mode must be permission bits (at most 0o777)",
        ));
    }
    let size = libc::off_t::try_from(len)
        .map_err(|_| ShmError::InvalidConfig("the object would be too large"))?;
    // SAFETY: a NUL-terminated name; creates a new object, owner-only until the fchmod.
    let fd = unsafe {
        libc::shm_open(
            cname.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error().into());
    }
    let fd = Fd(fd);
    /// Removes the name we created unless disarmed (on every failure, also an unwind).
    struct Unlink<'a>(Option<&'a CStr>);
    impl Drop for Unlink<'_> {
        fn drop(&mut self) {
            if let Some(n) = self.0 {
                // SAFETY: removing the name we just created.
                unsafe { libc::shm_unlink(n.as_ptr()) };
            }
        }
    }
    let mut unlink = Unlink(Some(cname));
    // The exact mode, not masked by the umask as `shm_open`'s would be.
    // SAFETY: our descriptor.
    if unsafe { libc::fchmod(fd.0, mode) } != 0 {
        return Err(io::Error::last_os_error().into());
    }
    // SAFETY: our descriptor.
    if unsafe { libc::ftruncate(fd.0, size) } != 0 {
        return Err(io::Error::last_os_error().into());
    }
    let r = init(map_shared(fd.0, len)?)?;
    unlink.0 = None;
    Ok(r)
}

/// Open the existing named object `cname` (refused unless we own it or `opts` allow another
/// owner, before anything is mapped), map it whole once it is at least `min_len` bytes, and
/// hand the mapping and its length to `attach`, which validates it and owns it from then on
/// (unmapping it if it fails). While `attach` says [`ShmError::Uninitialised`] (the creator
/// has not published it) this is retried every millisecond until `opts.timeout`
/// ([`ShmError::InitTimeout`]). An object of 1 to `min_len - 1` bytes is
/// [`ShmError::TooSmall`] at once: creators size it in one `ftruncate`.
pub(super) fn open_object<R>(
    cname: &CStr,
    opts: &OpenOptions,
    min_len: usize,
    mut attach: impl FnMut(*mut u8, usize) -> Result<R, ShmError>,
) -> Result<R, ShmError> {
    // SAFETY: a NUL-terminated name.
    let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error().into());
    }
    let fd = Fd(fd);
    // `None` (wait as long as it takes) if the timeout overflows `Instant`.
    let deadline = crate::park::deadline_after(opts.timeout);
    let mut owner_checked = false;
    loop {
        // SAFETY: a zeroed stat buffer for fstat to fill.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: our descriptor, a valid buffer.
        if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
            return Err(io::Error::last_os_error().into());
        }
        if !owner_checked {
            // Before mapping anything: a squatter's object is not even read.
            check_owner(cname, &st, opts)?;
            owner_checked = true;
        }
        let len = st.st_size as usize;
        if (1..min_len).contains(&len) {
            // The creator sets the full size in one `ftruncate` (an object between its
            // `shm_open` and that call is empty): this size is final, and too small.
            return Err(ShmError::TooSmall {
                needed: min_len,
                actual: len,
            });
        }
        if len >= min_len {
            match attach(map_shared(fd.0, len)?, len) {
                Err(ShmError::Uninitialised) => {}
                r => return r,
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(ShmError::InitTimeout);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Race-free open-or-create of a named object: `create` (failing with `AlreadyExists` if the
/// name exists), else `open` (failing with `NotFound` if it was unlinked meanwhile: then again
/// from the start). `true` if this call created it.
pub(super) fn open_or_create_by<R>(
    mut create: impl FnMut() -> Result<R, ShmError>,
    mut open: impl FnMut() -> Result<R, ShmError>,
) -> Result<(R, bool), ShmError> {
    loop {
        match create() {
            Ok(m) => return Ok((m, true)),
            Err(e) if is_io(&e, io::ErrorKind::AlreadyExists) => {}
            Err(e) => return Err(e),
        }
        match open() {
            Ok(m) => return Ok((m, false)),
            // Unlinked between our two calls: try again.
            Err(e) if is_io(&e, io::ErrorKind::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
}

/// `e`, about the object `cname`.
pub(super) fn about(cname: &CStr, e: ShmError) -> ShmError {
    e.about(&cname.to_string_lossy())
}

/// Whether `e` is a system call's error of this kind (about a named object or not).
fn is_io(e: &ShmError, kind: io::ErrorKind) -> bool {
    matches!(e.cause(), ShmError::Io(io) if io.kind() == kind)
}

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
            me: AtomicU64::new(0),
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
    /// [`REGION_ALIGN`]-aligned, or `align_of::<T>()`-aligned if that is more; `mmap` results
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn uniq(tag: &str) -> String {
        format!("/gomutex-unit-{tag}-{}", std::process::id())
    }

    /// A named object of `len` bytes made with plain `shm_open` (not a region).
    fn raw_object(name: &str, len: usize) -> Fd {
        let cname = shm_name(name).unwrap();
        // SAFETY: a NUL-terminated name.
        let fd = unsafe {
            libc::shm_open(
                cname.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        };
        assert!(fd >= 0, "shm_open: {}", io::Error::last_os_error());
        // SAFETY: our descriptor.
        assert_eq!(unsafe { libc::ftruncate(fd, len as libc::off_t) }, 0);
        Fd(fd)
    }

    #[test]
    fn errors_name_the_object() {
        let name = uniq("named");
        let _a = ShmMutex::create(&name, 1u32, Config::default()).unwrap();
        let e = ShmMutex::create(&name, 1u32, Config::default()).unwrap_err();
        unlink(&name).unwrap();
        assert!(is_io(&e, io::ErrorKind::AlreadyExists), "{e:?}");
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        assert_eq!(e.object_name(), Some(name.as_str()));
        assert_eq!(
            e.to_string(),
            format!("shared memory object \"{name}\": File exists (os error 17)")
        );
        for e in [
            ShmMutex::<u32>::open(&name).unwrap_err(),
            unlink(&name).unwrap_err(),
        ] {
            assert!(is_io(&e, io::ErrorKind::NotFound), "{e:?}");
            assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
            assert!(e.to_string().contains(&format!("{name:?}")), "{e}");
        }
        // The name is not wrapped twice, and `source` reaches the OS error.
        let e = e_about_twice(&name);
        assert_eq!(e.to_string().matches(&name).count(), 1, "{e}");
    }

    fn e_about_twice(name: &str) -> ShmError {
        let e = ShmError::from(io::Error::from_raw_os_error(libc::EACCES));
        let e = e.about(name).about(name);
        let src = std::error::Error::source(&e).unwrap();
        let io = src.downcast_ref::<io::Error>().unwrap();
        assert_eq!(io.raw_os_error(), Some(libc::EACCES));
        e
    }

    #[test]
    fn mode_is_exact_and_checked() {
        let name = uniq("mode");
        let opts = OpenOptions::new().mode(0o604);
        let m = ShmMutex::create_with(&name, 1u32, Config::default(), opts).unwrap();
        let cname = shm_name(&name).unwrap();
        // SAFETY: a NUL-terminated name.
        let fd = Fd(unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0) });
        // SAFETY: a zeroed stat buffer for fstat to fill.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: our descriptor, a valid buffer.
        assert_eq!(unsafe { libc::fstat(fd.0, &mut st) }, 0);
        unlink(&name).unwrap();
        assert_eq!(st.st_mode & 0o7777, 0o604);
        drop(m);
        for bad in [0o1600, 0o4600, 0o10000] {
            let e =
                ShmMutex::create_with(&name, 1u32, Config::default(), opts.mode(bad)).unwrap_err();
            assert!(matches!(e.cause(), ShmError::InvalidConfig(_)), "{bad:o}");
            assert_eq!(e.object_name(), Some(name.as_str()));
        }
        // Nothing was created.
        let e = ShmMutex::<u32>::open(&name).unwrap_err();
        assert!(is_io(&e, io::ErrorKind::NotFound), "{e:?}");
    }

    #[test]
    fn dot_names_are_invalid() {
        for n in [".", "..", "/.", "/.."] {
            for e in [
                shm_name(n).unwrap_err(),
                ShmMutex::create(n, 0u32, Config::default()).unwrap_err(),
                ShmMutex::<u32>::open(n).unwrap_err(),
                unlink(n).unwrap_err(),
            ] {
                assert!(matches!(e.cause(), ShmError::InvalidName), "{n}: {e:?}");
                assert_eq!(e.object_name(), Some(n));
                assert_eq!(
                    e.to_string(),
                    format!(
                        "shared memory object {n:?}: invalid shared memory name: \".\" and \
                         \"..\" name a directory, not an object"
                    )
                );
            }
        }
        // Names that merely contain dots stay valid.
        assert!(shm_name("...").is_ok());
        assert!(shm_name(".a").is_ok());
    }

    /// Every invalid name says which rule it breaks.
    #[test]
    fn invalid_names_say_which_rule() {
        let long = "a".repeat(251);
        for (name, rule) in [
            ("", "empty"),
            ("/", "empty"),
            ("a/b", "'/'"),
            ("/a/b", "'/'"),
            (long.as_str(), "250 bytes"),
            ("a\0b", "NUL"),
            (".", "directory"),
            ("/..", "directory"),
        ] {
            let e = ShmMutex::<u32>::open(name).unwrap_err();
            assert!(
                matches!(e.cause(), ShmError::InvalidName),
                "{name:?}: {e:?}"
            );
            assert_eq!(e.object_name(), Some(name));
            let msg = e.to_string();
            assert!(msg.contains(rule), "{name:?}: {msg}");
        }
        assert!(shm_name(&"a".repeat(250)).is_ok());
    }

    #[test]
    fn open_of_an_object_smaller_than_the_header_is_too_small_at_once() {
        for len in [1, 32, HEADER_SIZE - 1] {
            let name = uniq(&format!("small{len}"));
            let _fd = raw_object(&name, len);
            let t = Instant::now();
            let r = ShmMutex::<u32>::open_timeout(&name, Duration::from_secs(2));
            let took = t.elapsed();
            ShmMutex::<u32>::unlink(&name).unwrap();
            let e = r.unwrap_err();
            match e.cause() {
                ShmError::TooSmall { needed, actual } => {
                    assert_eq!((*needed, *actual), (HEADER_SIZE, len));
                }
                other => panic!("{len} bytes: {other:?}"),
            }
            assert_eq!(e.object_name(), Some(name.as_str()), "{e}");
            assert!(took < Duration::from_millis(500), "{len} bytes: {took:?}");
        }
        // An empty object may be a creator between `shm_open` and `ftruncate`: waited for.
        let name = uniq("empty");
        let _fd = raw_object(&name, 0);
        let e = ShmMutex::<u32>::open_timeout(&name, Duration::from_millis(20)).unwrap_err();
        ShmMutex::<u32>::unlink(&name).unwrap();
        assert!(matches!(e.cause(), ShmError::InitTimeout), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "shared memory object {name:?}: timed out waiting for the shared region to be \
                 initialised"
            )
        );
    }

    #[test]
    fn open_timeout_max_does_not_overflow() {
        let name = uniq("tmax");
        let a = ShmMutex::create(&name, 7u32, Config::default()).unwrap();
        let b = ShmMutex::<u32>::open_timeout(&name, Duration::MAX).unwrap();
        ShmMutex::<u32>::unlink(&name).unwrap();
        assert_eq!(*b.lock().unwrap(), 7);
        // A timed lock with the largest timeout, or a deadline far away, waits like `lock`.
        for far in [false, true] {
            std::thread::scope(|s| {
                let (tx, rx) = std::sync::mpsc::channel();
                let a = &a;
                s.spawn(move || {
                    let g = a.lock().unwrap();
                    tx.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(30));
                    drop(g);
                });
                rx.recv().unwrap();
                let r = if far {
                    b.try_lock_until(Instant::now() + Duration::from_secs(1 << 62))
                } else {
                    b.try_lock_for(Duration::MAX)
                };
                assert!(r.is_ok());
            });
        }
    }

    #[test]
    fn object_of_another_user_is_refused_unless_allowed() {
        let name = uniq("owner");
        let a = ShmMutex::create(&name, 7u32, Config::default()).unwrap();
        let cname = shm_name(&name).unwrap();
        // SAFETY: a NUL-terminated name.
        let fd = Fd(unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) });
        assert!(fd.0 >= 0);
        // Hand the object to `nobody` (needs CAP_CHOWN: skipped without it).
        // SAFETY: our descriptor.
        if unsafe { libc::fchown(fd.0, 65534, 65534) } != 0 {
            ShmMutex::<u32>::unlink(&name).unwrap();
            eprintln!("skipped: fchown needs CAP_CHOWN");
            return;
        }
        let refused = ShmMutex::<u32>::open(&name);
        let refused_too = ShmMutex::open_or_create(&name, 0u32, Config::default());
        let allowed = ShmMutex::<u32>::open_with(&name, OpenOptions::new().allow_other_owner(true));
        ShmMutex::<u32>::unlink(&name).unwrap();
        match refused {
            Err(e @ ShmError::NotOwner { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&name) && msg.contains("65534"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            refused_too,
            Err(ShmError::NotOwner {
                owner_uid: 65534,
                ..
            })
        ));
        *allowed.unwrap().lock().unwrap() += 1;
        assert_eq!(*a.lock().unwrap(), 8);
    }
}
