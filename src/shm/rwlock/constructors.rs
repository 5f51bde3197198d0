//! Every way to get a [`ShmRwLock`], as [`ShmMutex`](crate::shm::ShmMutex) has them: an
//! anonymous region, a named object, memory the caller mapped, a place in a
//! [`Mapping`](crate::shm::Mapping) (and its offset there, [`MappingLayout::rwlock`]).

use super::*;

impl<T: ShmSafe> ShmRwLock<T> {
    /// The bytes a region with this configuration takes (to size a [`Mapping`] by hand).
    ///
    /// ```
    /// use gomutex::shm::{Config, ShmRwLock};
    /// assert!(ShmRwLock::<u64>::required_size(Config::default())? > 0);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn required_size(cfg: Config) -> Result<usize, ShmError> {
        ShmMutex::<RwBody<T>>::required_size(cfg)
    }

    /// A new lock in an anonymous shared mapping, default [`Config`]; children created with
    /// `fork()` afterwards share it.
    ///
    /// ```
    /// let lock = gomutex::shm::ShmRwLock::anonymous(5u32)?;
    /// assert_eq!(*lock.read().unwrap(), 5);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn anonymous(value: T) -> Result<Self, ShmError> {
        Self::anonymous_with(value, Config::default())
    }

    /// [`anonymous`](Self::anonymous) with explicit sizes.
    ///
    /// ```
    /// use gomutex::shm::{Config, ShmRwLock};
    /// let lock = ShmRwLock::anonymous_with(0u8, Config::default().participants(8))?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn anonymous_with(value: T, cfg: Config) -> Result<Self, ShmError> {
        ShmMutex::anonymous_with(Self::body(value), cfg).map(Self::wrap)
    }

    /// Create a named lock (`shm_open` with `O_CREAT | O_EXCL`, visible under `/dev/shm`), as
    /// [`ShmMutex::create`]; fails if the name exists.
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, ShmRwLock};
    /// let name = format!("/gomutex-doc-rw-create-{}", std::process::id());
    /// let lock = ShmRwLock::create(&name, 1u64, Config::default())?;
    /// let other = ShmRwLock::<u64>::open(&name)?; // e.g. in another process
    /// *lock.write().unwrap() += 1;
    /// assert_eq!(*other.read().unwrap(), 2);
    /// unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn create(name: &str, value: T, cfg: Config) -> Result<Self, ShmError> {
        ShmMutex::create(name, Self::body(value), cfg).map(Self::wrap)
    }

    /// Open a named lock another process created, validating its header (magic, version,
    /// sizes, value type) and writing nothing if anything is off, as [`ShmMutex::open`]. A
    /// [`ShmMutex`] region of the same name is refused ([`ShmError::ValueMismatch`]).
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, ShmError, ShmMutex, ShmRwLock};
    /// let name = format!("/gomutex-doc-rw-open-{}", std::process::id());
    /// let _m = ShmMutex::create(&name, 0u64, Config::default())?;
    /// assert!(matches!(ShmRwLock::<u64>::open(&name), Err(ShmError::Object { .. })));
    /// unlink(&name)?;
    /// # Ok::<(), ShmError>(())
    /// ```
    pub fn open(name: &str) -> Result<Self, ShmError> {
        ShmMutex::open(name).map(Self::wrap)
    }

    /// Open the named lock, or create it with `value` if it does not exist; `true` if this
    /// call created it (as [`ShmMutex::open_or_create`]).
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, ShmRwLock};
    /// let name = format!("/gomutex-doc-rw-ooc-{}", std::process::id());
    /// let (a, created) = ShmRwLock::open_or_create(&name, 3u32, Config::default())?;
    /// let (b, again) = ShmRwLock::open_or_create(&name, 9u32, Config::default())?;
    /// assert!(created && !again);
    /// assert_eq!(*b.read().unwrap(), 3);
    /// drop(a);
    /// unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open_or_create(name: &str, value: T, cfg: Config) -> Result<(Self, bool), ShmError> {
        ShmMutex::open_or_create(name, Self::body(value), cfg).map(|(m, c)| (Self::wrap(m), c))
    }

    /// Initialise a lock at `offset` of `map` (an offset from
    /// [`MappingLayout::rwlock`](super::MappingLayout::rwlock)), as [`ShmMutex::init_in`].
    ///
    /// ```
    /// use gomutex::shm::{Config, Mapping, MappingLayout, ShmRwLock};
    /// let mut plan = MappingLayout::new();
    /// let at = plan.rwlock::<u64>(Config::default())?;
    /// let map = Mapping::anonymous(plan.len())?;
    /// let lock = ShmRwLock::init_in(&map, at, 3u64, Config::default())?;
    /// let again = ShmRwLock::<u64>::attach_in(&map, at)?;
    /// assert_eq!(*again.read().unwrap(), 3);
    /// # drop(lock);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn init_in(map: &Mapping, offset: usize, value: T, cfg: Config) -> Result<Self, ShmError> {
        ShmMutex::init_in(map, offset, Self::body(value), cfg).map(Self::wrap)
    }

    /// Attach to the lock at `offset` of `map`, validating its header and writing nothing if it
    /// is wrong, as [`ShmMutex::attach_in`].
    pub fn attach_in(map: &Mapping, offset: usize) -> Result<Self, ShmError> {
        ShmMutex::attach_in(map, offset).map(Self::wrap)
    }
}

// --- the rest of ShmMutex's constructors ---

/// The constructors of [`ShmMutex`] that take options or raw memory, each that `ShmMutex`
/// constructor over the lock's region (which is a `ShmMutex` region: see the type's docs).
impl<T: ShmSafe> ShmRwLock<T> {
    /// [`create`](Self::create) with the object's permissions from [`OpenOptions::mode`], as
    /// [`ShmMutex::create_with`].
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, OpenOptions, ShmRwLock};
    /// use std::os::unix::fs::PermissionsExt;
    /// let name = format!("/gomutex-doc-rw-create-with-{}", std::process::id());
    /// let opts = OpenOptions::new().mode(0o640);
    /// let lock = ShmRwLock::create_with(&name, 0u64, Config::default(), opts)?;
    /// let mode = std::fs::metadata(format!("/dev/shm{name}"))?.permissions().mode();
    /// unlink(&name)?;
    /// assert_eq!(mode & 0o777, 0o640);
    /// # drop(lock);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_with(
        name: &str,
        value: T,
        cfg: Config,
        opts: OpenOptions,
    ) -> Result<Self, ShmError> {
        ShmMutex::create_with(name, Self::body(value), cfg, opts).map(Self::wrap)
    }

    /// [`open`](Self::open) with an explicit wait for the creator to finish initialising, as
    /// [`ShmMutex::open_timeout`].
    ///
    /// ```
    /// use gomutex::shm::ShmRwLock;
    /// use std::time::Duration;
    /// let r = ShmRwLock::<u64>::open_timeout("/gomutex-doc-rw-none", Duration::from_millis(10));
    /// assert!(r.is_err()); // NotFound: no object of that name
    /// ```
    pub fn open_timeout(name: &str, timeout: Duration) -> Result<Self, ShmError> {
        ShmMutex::open_timeout(name, timeout).map(Self::wrap)
    }

    /// [`open`](Self::open) with [`OpenOptions`] (the wait for initialisation, whether an
    /// object of another owner is accepted), as [`ShmMutex::open_with`].
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, OpenOptions, ShmRwLock};
    /// let name = format!("/gomutex-doc-rw-open-with-{}", std::process::id());
    /// let _created = ShmRwLock::create(&name, 4u32, Config::default())?;
    /// let opts = OpenOptions::new().allow_other_owner(true);
    /// let opened = ShmRwLock::<u32>::open_with(&name, opts)?;
    /// assert_eq!(*opened.read().unwrap(), 4);
    /// unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open_with(name: &str, opts: OpenOptions) -> Result<Self, ShmError> {
        ShmMutex::open_with(name, opts).map(Self::wrap)
    }

    /// [`open_or_create`](Self::open_or_create), opening as [`open_with`](Self::open_with) or
    /// creating with [`OpenOptions::mode`], as [`ShmMutex::open_or_create_with`].
    ///
    /// ```
    /// use gomutex::shm::{unlink, Config, OpenOptions, ShmRwLock};
    /// let name = format!("/gomutex-doc-rw-oocw-{}", std::process::id());
    /// let opts = OpenOptions::new().mode(0o600);
    /// let (_l, created) = ShmRwLock::open_or_create_with(&name, 0u8, Config::default(), opts)?;
    /// assert!(created);
    /// unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open_or_create_with(
        name: &str,
        value: T,
        cfg: Config,
        opts: OpenOptions,
    ) -> Result<(Self, bool), ShmError> {
        ShmMutex::open_or_create_with(name, Self::body(value), cfg, opts)
            .map(|(m, c)| (Self::wrap(m), c))
    }

    /// Remove a name: the same as the free function [`shm::unlink`](crate::shm::unlink).
    pub fn unlink(name: &str) -> Result<(), ShmError> {
        crate::shm::unlink(name)
    }

    /// Initialise a lock in memory the caller mapped, as [`ShmMutex::init_in_place`] (whose
    /// checks it makes).
    ///
    /// # Safety
    ///
    /// As for [`ShmMutex::init_in_place`]: `ptr..ptr + len` is writable `MAP_SHARED` memory
    /// that stays mapped for the life of the returned handle, and nobody else uses it until
    /// this returns.
    ///
    /// ```
    /// use gomutex::shm::{Config, Mapping, ShmRwLock};
    /// let cfg = Config::default();
    /// let map = Mapping::anonymous(ShmRwLock::<u64>::required_size(cfg)?)?;
    /// // SAFETY: `map` is MAP_SHARED, unused by anyone else, and outlives the lock.
    /// let lock = unsafe { ShmRwLock::init_in_place(map.as_ptr(), map.len(), 5u64, cfg)? };
    /// // SAFETY: the same memory, holding the lock just initialised.
    /// let again = unsafe { ShmRwLock::<u64>::attach(map.as_ptr(), map.len())? };
    /// assert_eq!(*again.read().unwrap(), 5);
    /// # drop((lock, again));
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub unsafe fn init_in_place(
        ptr: *mut u8,
        len: usize,
        value: T,
        cfg: Config,
    ) -> Result<Self, ShmError> {
        // SAFETY: the caller's contract, which is `ShmMutex::init_in_place`'s.
        unsafe { ShmMutex::init_in_place(ptr, len, Self::body(value), cfg) }.map(Self::wrap)
    }

    /// Attach to a lock initialised in memory the caller mapped, as [`ShmMutex::attach`]
    /// (validating the header, writing nothing if it is wrong).
    ///
    /// # Safety
    ///
    /// As for [`ShmMutex::attach`]: `ptr..ptr + len` is readable and writable `MAP_SHARED`
    /// memory that stays mapped for the life of the returned handle and, if it holds a valid
    /// header, is used only as this lock's region by everybody.
    pub unsafe fn attach(ptr: *mut u8, len: usize) -> Result<Self, ShmError> {
        // SAFETY: the caller's contract, which is `ShmMutex::attach`'s.
        unsafe { ShmMutex::attach(ptr, len) }.map(Self::wrap)
    }
}

// Here rather than in mapping.rs, which is below the readers-writer lock.
impl MappingLayout {
    /// The offset of a [`ShmRwLock<T>`] with this configuration, placed after everything so
    /// far, for [`ShmRwLock::init_in`] / [`attach_in`](ShmRwLock::attach_in).
    ///
    /// ```
    /// use gomutex::shm::{Config, MappingLayout, ShmRwLock};
    /// let mut plan = MappingLayout::new();
    /// assert_eq!(plan.rwlock::<u64>(Config::default())?, 0);
    /// assert_eq!(plan.len(), ShmRwLock::<u64>::required_size(Config::default())?);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn rwlock<T: ShmSafe>(&mut self, cfg: Config) -> Result<usize, ShmError> {
        self.mutex::<RwBody<T>>(cfg)
    }
}
