//! The locks under test behind one trait ([`ProcLock`]), and the floors.

use crate::common::ShmBox;
use gomutex::shm::{LockError, ShmMutex, ShmRwLock};
use std::ffi::{c_int, c_void, CString};
use std::io::{self, Write};
use std::mem::{self, MaybeUninit};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A lock shared by forked processes, as the measurement loop sees it. Created in the parent
/// before `fork`; `attach` runs in each child after `fork` (for locks whose state is per open
/// file description or per process, or that register on first use).
pub trait ProcLock {
    /// How a process counts its ops: under this lock in the shared counter (every real lock),
    /// or as one of the floors.
    const COUNT: Count = Count::Locked;
    fn attach(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Run `f` holding the lock (a closure, so guard-based and lock/unlock-based locks fit);
    /// for a readers-writer lock, the write lock.
    fn with_lock(&self, f: impl FnOnce());
    /// Run `f` holding the read lock (a mutex: the lock).
    #[inline]
    fn with_read(&self, f: impl FnOnce()) {
        self.with_lock(f)
    }
}

/// A C-style lock with separate lock and unlock calls (everything but gomutex).
pub trait RawLock {
    fn attach(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn lock(&self);
    fn unlock(&self);
}

impl<L: RawLock> ProcLock for L {
    fn attach(&mut self) -> io::Result<()> {
        RawLock::attach(self)
    }
    #[inline]
    fn with_lock(&self, f: impl FnOnce()) {
        self.lock();
        f();
        self.unlock();
    }
}

/// Calls `f` (a libc call returning -1 on error) until it succeeds or fails with something
/// other than EINTR; panics with the OS error then.
pub fn errno_call(what: &str, mut f: impl FnMut() -> c_int) {
    loop {
        if f() != -1 {
            return;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            panic!("{what}: {e}");
        }
    }
}

pub fn pthread_check(what: &str, r: c_int) {
    assert!(r == 0, "{what}: {}", io::Error::from_raw_os_error(r));
}

#[derive(Clone, Copy, PartialEq)]
pub enum PthreadKind {
    Plain,
    Robust,
    /// Robust + PTHREAD_PRIO_INHERIT: what APR (Apache's default accept mutex) uses on Linux; a
    /// PI futex, so the kernel hands a contended lock to the top waiter.
    RobustPi,
}

/// `pthread_mutex_t` with PTHREAD_PROCESS_SHARED (and optionally ROBUST / PRIO_INHERIT).
pub struct PthreadMutex {
    pub m: ShmBox<libc::pthread_mutex_t>,
    pub robust: bool,
}

impl PthreadMutex {
    pub fn new(kind: PthreadKind) -> io::Result<Self> {
        // SAFETY: a zeroed pthread_mutex_t is valid storage for pthread_mutex_init.
        let m = unsafe { ShmBox::<libc::pthread_mutex_t>::zeroed()? };
        let mut attr = MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        // SAFETY: attr is initialised by pthread_mutexattr_init before any other use and
        // destroyed after pthread_mutex_init; `m` points to shared, writable, aligned storage.
        unsafe {
            pthread_check(
                "mutexattr_init",
                libc::pthread_mutexattr_init(attr.as_mut_ptr()),
            );
            let a = attr.as_mut_ptr();
            pthread_check(
                "setpshared",
                libc::pthread_mutexattr_setpshared(a, libc::PTHREAD_PROCESS_SHARED),
            );
            if kind != PthreadKind::Plain {
                pthread_check(
                    "setrobust",
                    libc::pthread_mutexattr_setrobust(a, libc::PTHREAD_MUTEX_ROBUST),
                );
            }
            if kind == PthreadKind::RobustPi {
                pthread_check(
                    "setprotocol",
                    libc::pthread_mutexattr_setprotocol(a, libc::PTHREAD_PRIO_INHERIT),
                );
            }
            pthread_check("mutex_init", libc::pthread_mutex_init(m.as_ptr(), a));
            libc::pthread_mutexattr_destroy(a);
        }
        Ok(Self {
            m,
            robust: kind != PthreadKind::Plain,
        })
    }

    /// Lock; returns true when the previous owner died holding it (EOWNERDEAD), after marking
    /// the mutex consistent again. Inline, as gomutex's `lock` is: the loop measures the
    /// locks, not a call into the bench's wrapper (which the compiler made or not by whim).
    #[inline(always)]
    pub fn lock_recover(&self) -> bool {
        // SAFETY: the mutex was initialised in `new` and stays mapped while `self` lives.
        let r = unsafe { libc::pthread_mutex_lock(self.m.as_ptr()) };
        if r == libc::EOWNERDEAD && self.robust {
            // SAFETY: we own the mutex (EOWNERDEAD means acquired) and it is robust.
            let r = unsafe { libc::pthread_mutex_consistent(self.m.as_ptr()) };
            pthread_check("pthread_mutex_consistent", r);
            return true;
        }
        pthread_check("pthread_mutex_lock", r);
        false
    }
}

impl RawLock for PthreadMutex {
    fn lock(&self) {
        self.lock_recover();
    }
    fn unlock(&self) {
        // SAFETY: initialised mutex, held by this thread (the bench loop pairs lock/unlock).
        let r = unsafe { libc::pthread_mutex_unlock(self.m.as_ptr()) };
        pthread_check("pthread_mutex_unlock", r);
    }
}

impl Drop for PthreadMutex {
    fn drop(&mut self) {
        // SAFETY: initialised and unlocked (all children have exited); destroyed once.
        unsafe { libc::pthread_mutex_destroy(self.m.as_ptr()) };
    }
}

/// POSIX unnamed semaphore (`sem_init(pshared = 1, value = 1)`) in the shared mapping.
pub struct PosixSem {
    pub s: ShmBox<libc::sem_t>,
}

impl PosixSem {
    pub fn new() -> io::Result<Self> {
        // SAFETY: zeroed storage is valid input to sem_init.
        let s = unsafe { ShmBox::<libc::sem_t>::zeroed()? };
        // SAFETY: `s` is shared, writable and aligned for a sem_t.
        if unsafe { libc::sem_init(s.as_ptr(), 1, 1) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { s })
    }
}

impl RawLock for PosixSem {
    fn lock(&self) {
        // SAFETY: initialised process-shared semaphore, mapped while `self` lives.
        errno_call("sem_wait", || unsafe { libc::sem_wait(self.s.as_ptr()) });
    }
    fn unlock(&self) {
        // SAFETY: as above.
        errno_call("sem_post", || unsafe { libc::sem_post(self.s.as_ptr()) });
    }
}

impl Drop for PosixSem {
    fn drop(&mut self) {
        // SAFETY: initialised, no waiters left (children have exited); destroyed once.
        unsafe { libc::sem_destroy(self.s.as_ptr()) };
    }
}

/// `union semun` for semctl's variadic fourth argument.
#[repr(C)]
union Semun {
    val: c_int,
    _buf: *mut c_void,
}

/// SysV semaphore set of one, value 1, operated with SEM_UNDO (the kernel undoes a dead
/// holder's -1); removed with IPC_RMID when dropped.
pub struct SysvSem {
    pub id: c_int,
}

impl SysvSem {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall wrapper, no pointers.
        let id = unsafe { libc::semget(libc::IPC_PRIVATE, 1, libc::IPC_CREAT | 0o600) };
        if id == -1 {
            return Err(io::Error::last_os_error());
        }
        let this = Self { id };
        // SAFETY: SETVAL takes a `union semun` by value, passed as declared by the C API.
        if unsafe { libc::semctl(id, 0, libc::SETVAL, Semun { val: 1 }) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(this)
    }

    pub fn op(&self, delta: i16) {
        let mut op = libc::sembuf {
            sem_num: 0,
            sem_op: delta,
            sem_flg: libc::SEM_UNDO as i16,
        };
        // SAFETY: `op` is one valid sembuf for a set we created with one semaphore.
        errno_call("semop", || unsafe { libc::semop(self.id, &mut op, 1) });
    }
}

impl RawLock for SysvSem {
    fn lock(&self) {
        self.op(-1);
    }
    fn unlock(&self) {
        self.op(1);
    }
}

impl Drop for SysvSem {
    fn drop(&mut self) {
        // SAFETY: removes the set we created; IPC_RMID takes no fourth argument.
        unsafe { libc::semctl(self.id, 0, libc::IPC_RMID) };
    }
}

/// A temp file that each child opens for itself after `fork` (flock locks belong to the open
/// file description, fcntl locks to the process). The parent only creates and removes it.
pub struct LockFile {
    pub path: PathBuf,
    pub fd: c_int,
}

impl LockFile {
    pub fn new(tag: &str) -> io::Result<Self> {
        let path = std::env::temp_dir().join(format!(
            "gomutex-shm_locks-{}-{tag}.lock",
            std::process::id()
        ));
        std::fs::File::create(&path)?;
        Ok(Self { path, fd: -1 })
    }

    pub fn open(path: &Path) -> io::Result<c_int> {
        let c = CString::new(path.as_os_str().as_bytes()).expect("temp path has no NUL");
        // SAFETY: `c` is a NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(fd)
    }

    pub fn attach(&mut self) -> io::Result<()> {
        assert_eq!(self.fd, -1, "attach once, after fork");
        self.fd = Self::open(&self.path)?;
        Ok(())
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        if self.fd != -1 {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(self.fd) };
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `flock(LOCK_EX)` on a temp file.
pub struct Flock(pub LockFile);

impl Flock {
    pub fn new() -> io::Result<Self> {
        LockFile::new("flock").map(Self)
    }
}

impl RawLock for Flock {
    fn attach(&mut self) -> io::Result<()> {
        self.0.attach()
    }
    fn lock(&self) {
        // SAFETY: plain syscall on our descriptor.
        errno_call("flock", || unsafe { libc::flock(self.0.fd, libc::LOCK_EX) });
    }
    fn unlock(&self) {
        // SAFETY: as above.
        errno_call("flock", || unsafe { libc::flock(self.0.fd, libc::LOCK_UN) });
    }
}

/// `fcntl(F_SETLKW)` whole-file write lock (POSIX record lock, owned by the process).
pub struct Fcntl(pub LockFile);

impl Fcntl {
    pub fn new() -> io::Result<Self> {
        LockFile::new("fcntl").map(Self)
    }

    pub fn set(&self, cmd: c_int, ty: c_int) {
        // SAFETY: an all-zero `struct flock` is valid; we set the fields that matter.
        let mut fl: libc::flock = unsafe { mem::zeroed() };
        fl.l_type = ty as i16;
        fl.l_whence = libc::SEEK_SET as i16;
        // l_start = 0, l_len = 0: from the start to the end of the file, i.e. the whole file.
        fl.l_start = 0;
        fl.l_len = 0;
        // SAFETY: `fl` is a valid struct flock for F_SETLK/F_SETLKW on our descriptor.
        errno_call("fcntl", || unsafe { libc::fcntl(self.0.fd, cmd, &fl) });
    }
}

impl RawLock for Fcntl {
    fn attach(&mut self) -> io::Result<()> {
        self.0.attach()
    }
    fn lock(&self) {
        self.set(libc::F_SETLKW, libc::F_WRLCK);
    }
    fn unlock(&self) {
        self.set(libc::F_SETLK, libc::F_UNLCK);
    }
}

/// gomutex's shared-memory mutex (`gomutex::shm::ShmMutex`) in its own anonymous `MAP_SHARED`
/// mapping, created before fork. It guards `()`: the counter lives in the bench's region, as
/// for every other lock.
pub struct GoShm(pub ShmMutex<()>);

impl GoShm {
    pub fn new() -> io::Result<Self> {
        ShmMutex::anonymous(()).map(Self).map_err(io::Error::other)
    }
}

impl ProcLock for GoShm {
    fn attach(&mut self) -> io::Result<()> {
        // A process registers as a participant on its first lock: do that before the clock
        // starts, so the first timed wait is not a registration.
        self.with_lock(|| {});
        Ok(())
    }
    #[inline]
    fn with_lock(&self, f: impl FnOnce()) {
        let guard = match self.0.lock() {
            Ok(g) => g,
            // Nobody dies here, but the owner-died state must never be swallowed: clear it
            // explicitly, as a real user would after repairing the data.
            Err(LockError::OwnerDied(g)) => {
                g.mark_consistent();
                g
            }
            Err(e) => panic!("gomutex shm lock: {e}"),
        };
        f();
        drop(guard);
    }
}

/// `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP` of glibc's `<pthread.h>` (the `libc` crate
/// has `pthread_rwlockattr_setkind_np` but not the constant for glibc).
pub const PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP: c_int = 2;

/// `pthread_rwlock_t` with PTHREAD_PROCESS_SHARED: glibc's default kind (prefers readers) or,
/// with `prefer_writer`, `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`.
pub struct PthreadRw {
    pub l: ShmBox<libc::pthread_rwlock_t>,
}

impl PthreadRw {
    pub fn new(prefer_writer: bool) -> io::Result<Self> {
        // SAFETY: a zeroed pthread_rwlock_t is valid storage for pthread_rwlock_init.
        let l = unsafe { ShmBox::<libc::pthread_rwlock_t>::zeroed()? };
        let mut attr = MaybeUninit::<libc::pthread_rwlockattr_t>::uninit();
        // SAFETY: attr is initialised by pthread_rwlockattr_init before any other use and
        // destroyed after pthread_rwlock_init; `l` points to shared, writable, aligned storage.
        unsafe {
            pthread_check(
                "rwlockattr_init",
                libc::pthread_rwlockattr_init(attr.as_mut_ptr()),
            );
            let a = attr.as_mut_ptr();
            pthread_check(
                "rwlockattr_setpshared",
                libc::pthread_rwlockattr_setpshared(a, libc::PTHREAD_PROCESS_SHARED),
            );
            if prefer_writer {
                pthread_check(
                    "rwlockattr_setkind_np",
                    libc::pthread_rwlockattr_setkind_np(
                        a,
                        PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP,
                    ),
                );
            }
            pthread_check("rwlock_init", libc::pthread_rwlock_init(l.as_ptr(), a));
            libc::pthread_rwlockattr_destroy(a);
        }
        Ok(Self { l })
    }

    pub fn unlock(&self) {
        // SAFETY: initialised lock, held by this thread (the bench loop pairs lock/unlock).
        let r = unsafe { libc::pthread_rwlock_unlock(self.l.as_ptr()) };
        pthread_check("pthread_rwlock_unlock", r);
    }
}

impl ProcLock for PthreadRw {
    #[inline]
    fn with_lock(&self, f: impl FnOnce()) {
        // SAFETY: the lock was initialised in `new` and stays mapped while `self` lives.
        let r = unsafe { libc::pthread_rwlock_wrlock(self.l.as_ptr()) };
        pthread_check("pthread_rwlock_wrlock", r);
        f();
        self.unlock();
    }
    #[inline]
    fn with_read(&self, f: impl FnOnce()) {
        // SAFETY: as above.
        let r = unsafe { libc::pthread_rwlock_rdlock(self.l.as_ptr()) };
        pthread_check("pthread_rwlock_rdlock", r);
        f();
        self.unlock();
    }
}

impl Drop for PthreadRw {
    fn drop(&mut self) {
        // SAFETY: initialised and unlocked (all children have exited); destroyed once.
        unsafe { libc::pthread_rwlock_destroy(self.l.as_ptr()) };
    }
}

/// gomutex's shared-memory readers-writer lock (`gomutex::shm::ShmRwLock`) in its own anonymous
/// `MAP_SHARED` mapping, created before fork; it guards `()`, the counter lives in the bench's
/// region (as for `GoShm`).
pub struct GoShmRw(pub ShmRwLock<()>);

impl GoShmRw {
    pub fn new() -> io::Result<Self> {
        ShmRwLock::anonymous(()).map(Self).map_err(io::Error::other)
    }
}

impl ProcLock for GoShmRw {
    fn attach(&mut self) -> io::Result<()> {
        // Register as a participant (and in the readers' high-water mark) before the clock
        // starts.
        self.with_read(|| {});
        Ok(())
    }
    #[inline]
    fn with_lock(&self, f: impl FnOnce()) {
        let guard = match self.0.write() {
            Ok(g) => g,
            // As for `GoShm`: nobody dies here, but never swallow the state.
            Err(LockError::OwnerDied(g)) => {
                g.mark_consistent();
                g
            }
            Err(e) => panic!("gomutex shm rwlock write: {e}"),
        };
        f();
        drop(guard);
    }
    #[inline]
    fn with_read(&self, f: impl FnOnce()) {
        let guard = match self.0.read() {
            Ok(g) => g,
            Err(e) => panic!("gomutex shm rwlock read: {e}"),
        };
        f();
        drop(guard);
    }
}

/// How the child loop counts an op ([`ProcLock::COUNT`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// `counter += 1` under the lock under test.
    Locked,
    /// Under a private lock, in the process's own memory; added to the counter at the end.
    Private,
    /// One `fetch_add` on the shared counter, no lock.
    Atomic,
}

/// Not a shared lock: the floor. Each process locks a process-private `std` mutex of its own
/// (created before fork, so every child has its own copy; never contended) and counts in its
/// own memory: the same loop with nobody to wait for, i.e. how fast this machine runs the
/// work outside the lock right now. No shared lock beats it by more than one uncontended
/// lock/unlock; where the locks sit on it, the work sets the pace. With work only.
#[derive(Default)]
pub struct Floor(pub std::sync::Mutex<()>);

impl ProcLock for Floor {
    const COUNT: Count = Count::Private;
    #[inline]
    fn with_lock(&self, f: impl FnOnce()) {
        let _own = self.0.lock().expect("floor: private mutex poisoned");
        f();
    }
}

/// Not a lock: the other floor. Every op is one `fetch_add` on the shared counter, whose cache
/// line then crosses CPUs as a lock word's does, but nobody waits for a holder. Any lock needs
/// at least this one read-modify-write of a shared line per acquisition; where the locks sit on
/// it, moving the line sets the pace. With work only.
pub struct AtomicFloor;

impl ProcLock for AtomicFloor {
    const COUNT: Count = Count::Atomic;
    /// Never called: the child loop counts with a `fetch_add` instead.
    fn with_lock(&self, f: impl FnOnce()) {
        f();
    }
}

/// A robust pthread mutex whose owner died holding it must come back as EOWNERDEAD, once, and
/// then work normally: the path `lock()` takes for the robust variants.
pub fn check_pthread_robust_recovery() {
    let m = PthreadMutex::new(PthreadKind::Robust).expect("robust mutex");
    io::stdout().flush().ok();
    // SAFETY: single-threaded process (see main); the child only locks and `_exit`s.
    match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", io::Error::last_os_error()),
        0 => {
            let died = m.lock_recover();
            // SAFETY: leave while holding the lock, skipping destructors on purpose.
            unsafe { libc::_exit(if died { 1 } else { 0 }) }
        }
        pid => {
            let mut status = 0;
            // SAFETY: our own child, valid out-pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, 0) };
            assert_eq!(r, pid);
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        }
    }
    assert!(m.lock_recover(), "robust mutex: dead owner not reported");
    m.unlock();
    assert!(
        !m.lock_recover(),
        "robust mutex: still inconsistent after consistent()"
    );
    m.unlock();
}
