//! Named POSIX shared-memory objects: the name rules, `shm_open` with [`OpenOptions`] (the
//! wait for an object another process is creating, whose objects to accept, the mode of a new
//! one), [`unlink`], and the create / open / open-or-create steps every named kind shares.

use super::error::name_rule_broken;
use super::error::ShmError;
use super::sys::map_shared;
use std::ffi::{CStr, CString};
use std::io;
use std::time::{Duration, Instant};

pub(super) fn shm_name(name: &str) -> Result<CString, ShmError> {
    if name_rule_broken(name).is_some() {
        return Err(ShmError::InvalidName.about(name));
    }
    let bare = name.strip_prefix('/').unwrap_or(name);
    CString::new(format!("/{bare}")).map_err(|_| ShmError::InvalidName.about(name))
}

struct Fd(libc::c_int);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// How [`ShmMutex::open_with`](crate::shm::ShmMutex::open_with), [`ShmMutex::create_with`](crate::shm::ShmMutex::create_with) and
/// [`ShmMutex::open_or_create_with`](crate::shm::ShmMutex::open_or_create_with) treat a named region: the wait for an existing one and
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
/// [`create`](crate::shm::ShmMutex::create) of the name makes a new object. Fails with `Io(NotFound)` (inside
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
            "OpenOptions::mode must be permission bits (at most 0o777)",
        ));
    }
    let size = libc::off_t::try_from(len).map_err(|_| {
        ShmError::InvalidConfig("the shared memory object would be larger than off_t allows")
    })?;
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
    /// Removes the name we created unless disarmed (on every failure, also an unwind), and
    /// only while it still names our object: an opener that gave up waiting for us may have
    /// removed it and published an object of its own under it.
    struct Unlink<'a>(Option<&'a CStr>, &'a Fd);
    impl Drop for Unlink<'_> {
        fn drop(&mut self) {
            if let Some(n) = self.0 {
                if names(n, self.1) {
                    // SAFETY: a NUL-terminated name, which named our object just now.
                    unsafe { libc::shm_unlink(n.as_ptr()) };
                }
            }
        }
    }
    let mut unlink = Unlink(Some(cname), &fd);
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

/// The device and inode of an open descriptor, `None` if `fstat` fails.
fn identity(fd: libc::c_int) -> Option<(libc::dev_t, libc::ino_t)> {
    // SAFETY: a zeroed stat buffer for fstat to fill.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: a descriptor the caller holds open, a valid buffer.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Whether `cname` names the object open as `fd` now (not another object made under the name
/// since). `false` when in doubt: a name left behind is recoverable (it can be removed),
/// another process's object removed is not.
fn names(cname: &CStr, fd: &Fd) -> bool {
    // SAFETY: a NUL-terminated name; opened read-only to be looked at, closed below.
    let other = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0) };
    if other < 0 {
        return false;
    }
    let other = Fd(other);
    let ours = identity(fd.0);
    ours.is_some() && ours == identity(other.0)
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
    let deadline = crate::clock::deadline_after(opts.timeout);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::{Config, ShmMutex, HEADER_SIZE};
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
                 initialised: its creator has not published it (still initialising, or it died \
                 or failed before finishing); if no process is creating it, remove the name \
                 (shm::unlink) and create it again"
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
