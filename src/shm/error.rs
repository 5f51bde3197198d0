//! The errors of the shared-memory lock: why a region could not be set up ([`ShmError`]), and
//! why a lock call returned its guard inside an error ([`LockError`], [`TryLockError`]).

#[cfg(doc)]
use super::layout::{LAYOUT_VERSION, REGION_ALIGN};
use super::layout::{MAGIC, MAP_MAGIC};
use core::fmt;
use std::io;

/// What a magic number says the memory holds, for [`ShmError::BadMagic`]'s message.
struct MagicKind(u64);

impl fmt::Display for MagicKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        match m {
            MAGIC => write!(
                f,
                "a gomutex lock's region (ShmMutex, ShmRwLock; magic {m:#018x})"
            ),
            MAP_MAGIC => write!(
                f,
                "a named gomutex Mapping (ShmDict, RateLimiter, Mapping::create; magic {m:#018x})"
            ),
            _ => {
                let b = m.to_le_bytes();
                if b.iter().all(|c| c.is_ascii_graphic()) {
                    let text: String = b.iter().map(|&c| char::from(c)).collect();
                    write!(f, "data starting with {text:?} (magic {m:#018x})")
                } else {
                    write!(f, "unknown data (first 8 bytes {m:#018x})")
                }
            }
        }
    }
}

/// Why a region could not be created, opened or attached. Attaching never writes to the
/// region when it fails.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShmError {
    /// The memory is smaller than the region needs.
    TooSmall {
        /// Bytes the region needs.
        needed: usize,
        /// Bytes available.
        actual: usize,
    },
    /// The memory does not start on a [`REGION_ALIGN`]-byte boundary (or on an
    /// `align_of::<T>()`-byte one, if `T` is aligned more strictly: the value's offset in the
    /// region is only aligned relative to its start).
    Misaligned {
        /// Its address.
        addr: usize,
        /// The alignment required.
        required: usize,
        /// Its offset in the [`Mapping`](super::Mapping), for the calls that take one
        /// (`None` for a raw pointer).
        offset: Option<usize>,
    },
    /// No region was initialised here (the magic number is 0), or the creator has not finished.
    Uninitialised,
    /// Something else lives here: the first 8 bytes are not the expected magic number
    /// ([`MAGIC`] for a lock's region, [`MAP_MAGIC`](super::MAP_MAGIC) for a named
    /// [`Mapping`](super::Mapping), which [`ShmDict`](crate::dict::ShmDict) and
    /// [`RateLimiter`](crate::dict::RateLimiter) objects are). `Display` names what each magic number
    /// belongs to.
    BadMagic {
        /// What was found.
        found: u64,
        /// What the call expected.
        expected: u64,
    },
    /// A region of another layout version (another release of this crate).
    VersionMismatch {
        /// Version found in the header.
        found: u32,
        /// [`LAYOUT_VERSION`].
        expected: u32,
    },
    /// The region holds a value of another type than `T`, with the same size and alignment
    /// (e.g. `f32` where a `u32` is expected). Types are told apart by their name without
    /// module paths ([`core::any::type_name`], whose text the compiler does not promise to
    /// keep: processes built by different compiler releases may disagree on a generic type's
    /// name), its size and its alignment.
    TypeMismatch {
        /// The name of `T` (module paths left out).
        expected: String,
        /// The start of the name the creator recorded (at most 24 bytes).
        found: String,
        /// The creator's type hash (of its full name, size and alignment).
        found_hash: u64,
    },
    /// `init_in` found a lock in use there: its header is valid and a live process is
    /// registered with it (and may hold it). Overwriting it would break mutual exclusion.
    RegionInUse {
        /// A live participant's pid.
        pid: u32,
    },
    /// The region holds a value of another size or alignment than `T`.
    ValueMismatch {
        /// `size_of::<T>()`.
        expected_size: usize,
        /// `align_of::<T>()`.
        expected_align: usize,
        /// Size recorded in the header.
        found_size: u64,
        /// Alignment recorded in the header.
        found_align: u32,
    },
    /// The header is inconsistent (e.g. its sizes do not add up).
    Corrupt(&'static str),
    /// The configuration is out of range.
    InvalidConfig(&'static str),
    /// A shared-memory name must be 1..=250 bytes, without NUL or `/` after the leading `/`,
    /// and not `.` or `..`. The `Display` of the [`Object`](Self::Object) it comes in says
    /// which rule the name breaks.
    InvalidName,
    /// A named region's creator did not finish initialising it in time: it is still at it, or
    /// it died (or its initialisation failed) before publishing the object. A name left behind
    /// that way stays until someone removes it ([`unlink`](super::unlink)) and creates it
    /// again.
    InitTimeout,
    /// Every participant slot of the region is held by a live process (see
    /// [`Config::participants`](super::Config::participants), default 64).
    NoParticipantSlot {
        /// The region's participant slots (its `Config::participants`).
        participants: u32,
    },
    /// [`ShmDict::open_or_create`](crate::dict::ShmDict::open_or_create) found a dictionary made
    /// with another capacity or number of shards than it was asked for: refused rather than
    /// opened with sizes the caller did not choose (nginx refuses a zone redeclared with
    /// another size too).
    DictMismatch {
        /// The capacity asked for, in bytes.
        capacity: usize,
        /// The shards asked for.
        shards: u32,
        /// The existing dictionary's capacity ([`ShmDict::capacity`](crate::dict::ShmDict::capacity)).
        found_capacity: usize,
        /// Its shards.
        found_shards: u32,
    },
    /// A system call failed; [`ShmError::raw_os_error`] gives the `errno`.
    Io(io::Error),
    /// What went wrong with the named shared-memory object `name` (every error of the calls
    /// that take a name comes wrapped in this, [`NotOwner`](Self::NotOwner) aside, which
    /// names it itself). `Display` reads e.g. `shared memory object "/board": File exists (os
    /// error 17)`; match on [`cause`](ShmError::cause) for the error without the name:
    ///
    /// ```
    /// use gomutex::shm::{ShmError, ShmMutex};
    /// use std::io::ErrorKind;
    /// let e = ShmMutex::<u32>::open("/gomutex-doc-no-such-object").unwrap_err();
    /// assert!(matches!(e.cause(), ShmError::Io(io) if io.kind() == ErrorKind::NotFound));
    /// assert_eq!(e.object_name(), Some("/gomutex-doc-no-such-object"));
    /// ```
    Object {
        /// The object's name (with its leading `/`, as given if it was invalid).
        name: String,
        /// What went wrong (never itself an `Object`).
        error: Box<ShmError>,
    },
    /// A named object exists but belongs to another user: refused, since whoever can write
    /// it controls the lock (see [`OpenOptions::allow_other_owner`](super::OpenOptions)).
    NotOwner {
        /// The object's name (with its leading `/`).
        name: String,
        /// Its owner.
        owner_uid: u32,
        /// This process's effective uid.
        uid: u32,
    },
}

impl fmt::Display for ShmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShmError::TooSmall { needed, actual } => write!(
                f,
                "shared region too small: {actual} bytes, {needed} needed"
            ),
            ShmError::Misaligned {
                addr,
                required,
                offset: None,
            } => write!(
                f,
                "shared region at {addr:#x} is not aligned to {required} bytes"
            ),
            ShmError::Misaligned {
                required,
                offset: Some(offset),
                ..
            } => write!(
                f,
                "offset {offset} in the mapping is not aligned to {required} bytes"
            ),
            ShmError::Uninitialised => write!(f, "shared region is not initialised"),
            ShmError::BadMagic { found, expected } => write!(
                f,
                "this memory holds {}, not {}",
                MagicKind(*found),
                MagicKind(*expected)
            ),
            ShmError::VersionMismatch { found, expected } => write!(
                f,
                "shared region has layout version {found}, this build uses {expected}"
            ),
            ShmError::ValueMismatch {
                expected_size,
                expected_align,
                found_size,
                found_align,
            } => write!(
                f,
                "shared region holds a value of size {found_size} / align {found_align}, \
                 expected size {expected_size} / align {expected_align}"
            ),
            ShmError::TypeMismatch {
                expected,
                found,
                found_hash,
            } => {
                write!(f, "shared region holds ")?;
                if found.is_empty() {
                    write!(f, "a value of another type")?;
                } else {
                    write!(f, "a `{found}`")?;
                }
                write!(
                    f,
                    " (type hash {found_hash:#018x}), expected a `{expected}` (of the same size \
                     and alignment)"
                )
            }
            ShmError::RegionInUse { pid } => write!(
                f,
                "a shared region in use is there (process {pid} is registered with its lock): \
                 initialising it again would break the lock"
            ),
            ShmError::Corrupt(what) => write!(f, "shared region header is corrupt: {what}"),
            ShmError::InvalidConfig(what) => write!(f, "invalid configuration: {what}"),
            ShmError::InvalidName => write!(f, "invalid shared memory name"),
            ShmError::InitTimeout => write!(
                f,
                "timed out waiting for the shared region to be initialised: its creator has not \
                 published it (still initialising, or it died or failed before finishing); if \
                 no process is creating it, remove the name (shm::unlink) and create it again"
            ),
            ShmError::NoParticipantSlot { participants } => write!(
                f,
                "all {participants} participant slots of the shared region are used by live \
                 processes (Config::participants)"
            ),
            ShmError::DictMismatch {
                capacity,
                shards,
                found_capacity,
                found_shards,
            } => write!(
                f,
                "a dictionary of {found_capacity} bytes in {found_shards} {} is there, one of \
                 {capacity} bytes in {shards} {} was asked for: refused (ShmDict::open opens it \
                 as it is; unlink it to make it anew)",
                plural(*found_shards, "shard"),
                plural(*shards, "shard"),
            ),
            ShmError::Io(e) => write!(f, "shared memory: {e}"),
            ShmError::Object { name, error } => match &**error {
                // "shared memory object "/x": shared memory: …" would say it twice.
                ShmError::Io(e) => write!(f, "shared memory object {name:?}: {e}"),
                ShmError::InvalidName => write!(
                    f,
                    "shared memory object {name:?}: invalid shared memory name: {}",
                    name_rule_broken(name).unwrap_or("refused by the system")
                ),
                e => write!(f, "shared memory object {name:?}: {e}"),
            },
            ShmError::NotOwner {
                name,
                owner_uid,
                uid,
            } => write!(
                f,
                "shared memory object {name:?} is owned by uid {owner_uid}, not by this \
                 process's uid {uid}: refused (anyone who can write it controls the lock; \
                 OpenOptions::allow_other_owner trusts it)"
            ),
        }
    }
}

/// `word`, or its plural if `n` is not 1.
fn plural(n: u32, word: &str) -> String {
    if n == 1 {
        word.to_string()
    } else {
        format!("{word}s")
    }
}

impl std::error::Error for ShmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.cause() {
            ShmError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for ShmError {
    fn from(e: io::Error) -> Self {
        ShmError::Io(e)
    }
}

impl ShmError {
    /// The name of the shared-memory object the failed call was about, if it was about a
    /// named one (with its leading `/`).
    ///
    /// ```
    /// use gomutex::shm::{ShmError, ShmMutex};
    /// let e = ShmMutex::<u32>::open("/gomutex-doc-no-such-object").unwrap_err();
    /// assert!(matches!(e.cause(), ShmError::Io(io) if io.kind() == std::io::ErrorKind::NotFound));
    /// assert_eq!(e.object_name(), Some("/gomutex-doc-no-such-object"));
    /// assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    /// assert_eq!(
    ///     e.to_string(),
    ///     "shared memory object \"/gomutex-doc-no-such-object\": No such file or directory (os error 2)"
    /// );
    /// ```
    pub fn object_name(&self) -> Option<&str> {
        match self {
            ShmError::Object { name, .. } | ShmError::NotOwner { name, .. } => Some(name),
            _ => None,
        }
    }

    /// The error without the object's name: for [`ShmError::Object`] the error inside it,
    /// for any other error itself. Match on this to handle an error of a named object.
    ///
    /// ```
    /// use gomutex::shm::{Config, ShmError, ShmMutex};
    /// let name = format!("/gomutex-doc-cause-{}", std::process::id());
    /// let m = ShmMutex::create(&name, 0u32, Config::default())?;
    /// let e = ShmMutex::<u64>::open(&name).unwrap_err(); // a u32 lives there
    /// assert!(matches!(e.cause(), ShmError::ValueMismatch { expected_size: 8, .. }));
    /// assert!(e.to_string().starts_with(&format!("shared memory object {name:?}: ")), "{e}");
    /// gomutex::shm::unlink(&name)?;
    /// # Ok::<(), ShmError>(())
    /// ```
    pub fn cause(&self) -> &ShmError {
        match self {
            ShmError::Object { error, .. } => error,
            e => e,
        }
    }

    /// The `errno` of a failed system call ([`ShmError::Io`], also inside
    /// [`ShmError::Object`]).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self.cause() {
            ShmError::Io(e) => e.raw_os_error(),
            _ => None,
        }
    }

    /// This error about the object `name`: wrapped in [`ShmError::Object`] unless it already
    /// names an object.
    pub(super) fn about(self, name: &str) -> Self {
        match self {
            e @ (ShmError::Object { .. } | ShmError::NotOwner { .. }) => e,
            e => ShmError::Object {
                name: name.to_owned(),
                error: Box::new(e),
            },
        }
    }
}

/// Why a lock call returned a guard in an error: the lock **is held** (the guard is inside),
/// but the data may be inconsistent.
pub enum LockError<G> {
    /// A previous owner died while holding the lock (like `EOWNERDEAD`). Repair the data, then
    /// call [`ShmMutexGuard::mark_consistent`](crate::shm::ShmMutexGuard::mark_consistent); until somebody does, every owner is told.
    OwnerDied(G),
    /// A previous owner panicked while holding the lock (std's poisoning).
    Poisoned(G),
}

/// std's `PoisonError` names: [`into_inner`](Self::into_inner), [`get_ref`](Self::get_ref),
/// [`get_mut`](Self::get_mut), so code written against std's lock results reads the same.
///
/// ```
/// use gomutex::shm::{LockError, ShmMutex};
/// let m = ShmMutex::anonymous(1u32)?;
/// let r: Result<_, LockError<_>> = m.lock(); // Ok here; OwnerDied/Poisoned carry the guard
/// let g = r.unwrap_or_else(LockError::into_inner);
/// assert_eq!(*g, 1);
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
impl<G> LockError<G> {
    /// The guard (the lock is held), as std's `PoisonError::into_inner`.
    pub fn into_inner(self) -> G {
        match self {
            LockError::OwnerDied(g) | LockError::Poisoned(g) => g,
        }
    }
    /// The guard, borrowed (std's `PoisonError::get_ref`).
    pub fn get_ref(&self) -> &G {
        match self {
            LockError::OwnerDied(g) | LockError::Poisoned(g) => g,
        }
    }
    /// The guard, mutably borrowed (std's `PoisonError::get_mut`).
    pub fn get_mut(&mut self) -> &mut G {
        match self {
            LockError::OwnerDied(g) | LockError::Poisoned(g) => g,
        }
    }
}

impl<G> fmt::Debug for LockError<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::OwnerDied(_) => f.write_str("OwnerDied(..)"),
            LockError::Poisoned(_) => f.write_str("Poisoned(..)"),
        }
    }
}

/// What [`LockError`] and [`TryLockError`] say about an acquired lock.
const OWNER_DIED: &str = "a previous owner of the shared mutex died while holding it";
const POISONED: &str = "a previous owner of the shared mutex panicked while holding it";

impl<G> fmt::Display for LockError<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockError::OwnerDied(_) => OWNER_DIED,
            LockError::Poisoned(_) => POISONED,
        })
    }
}

impl<G> std::error::Error for LockError<G> {}

/// Why a `try_lock*` call did not return a clean guard.
pub enum TryLockError<G> {
    /// The lock is held (or belongs to the queue in starvation mode), or the timeout passed.
    WouldBlock,
    /// Acquired; a previous owner died while holding it (see [`LockError::OwnerDied`]).
    OwnerDied(G),
    /// Acquired; a previous owner panicked while holding it.
    Poisoned(G),
}

impl<G> From<LockError<G>> for TryLockError<G> {
    fn from(e: LockError<G>) -> Self {
        match e {
            LockError::OwnerDied(g) => TryLockError::OwnerDied(g),
            LockError::Poisoned(g) => TryLockError::Poisoned(g),
        }
    }
}

impl<G> fmt::Debug for TryLockError<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryLockError::WouldBlock => f.write_str("WouldBlock"),
            TryLockError::OwnerDied(_) => f.write_str("OwnerDied(..)"),
            TryLockError::Poisoned(_) => f.write_str("Poisoned(..)"),
        }
    }
}

impl<G> fmt::Display for TryLockError<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TryLockError::WouldBlock => "the shared mutex is locked",
            TryLockError::OwnerDied(_) => OWNER_DIED,
            TryLockError::Poisoned(_) => POISONED,
        })
    }
}

impl<G> std::error::Error for TryLockError<G> {}

/// Result of [`ShmMutex::lock`](crate::shm::ShmMutex::lock).
pub type LockResult<G> = Result<G, LockError<G>>;
/// Result of [`ShmMutex::try_lock`](crate::shm::ShmMutex::try_lock) and its timed variants.
pub type TryLockResult<G> = Result<G, TryLockError<G>>;

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
