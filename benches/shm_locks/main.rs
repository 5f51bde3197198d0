//! Cross-process lock benchmark: lock/unlock across forked processes, every lock in one run.
//!
//! Locks: gomutex's `shm::ShmMutex`, pthread mutexes with PTHREAD_PROCESS_SHARED (plain,
//! robust, robust + priority inheritance), a POSIX unnamed semaphore, a SysV semaphore
//! (SEM_UNDO), `flock` and `fcntl(F_SETLKW)`. Each lives in (or is named from) memory mapped
//! `MAP_SHARED | MAP_ANONYMOUS` before `fork`, or is a temp file that every child opens on its
//! own after `fork`. Each of N children loops until a stop flag the parent sets after a fixed
//! wall time (the steady-contention method of `steady.rs`): take the lock, increment a shared
//! non-atomic counter, release, then optionally do Go's `MutexWork` work (100 ×
//! `foo *= 2; foo /= 2`) outside the lock. At the end the counter must equal the sum of the
//! per-process op counts: a lock that loses updates fails the run. With work, two floors run
//! in the same rotation: `floor`, the same loop with a private lock per process (nobody waits),
//! which no shared lock can beat by more than an uncontended lock/unlock, and `atomic`, one
//! `fetch_add` on the shared counter per op in place of the lock (its line crosses CPUs as a
//! lock word's does, nobody waits). Where the locks sit on a floor, the work or the line sets
//! the pace and their ratios say nothing about the locks.
//!
//! Readers-writer locks (workloads `rw1`, `rw10`): gomutex's `shm::ShmRwLock` against
//! `pthread_rwlock_t` with PTHREAD_PROCESS_SHARED, glibc's default kind (prefers readers: a
//! writer waits while any reader holds or takes the lock) and
//! `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP` (new readers wait behind a waiting writer, as
//! `ShmRwLock`'s do). Each process loops: with probability 1 % (`rw1`) or 10 % (`rw10`) take
//! the write lock and increment the counter and a shadow copy of it in the same line, else take
//! the read lock and read both (a reader that finds them different saw a half-done write: the
//! run fails). The choice comes from a per-process LCG seeded by the process's index, so every
//! lock sees the same sequence of reads and writes. The floors run beside: `floor` takes its
//! private mutex for reads and writes alike, `atomic` does one `fetch_add` per op (of 1 for a
//! write, of 0 for a read: every op moves the line), which `ShmRwLock`'s readers, counting on a
//! line of their own process, need not. A process stuck behind readers shows in the min share,
//! and the timed run reports the worst write wait beside the worst wait of any op.
//!
//! Reader death (`rwkill`, after the loops; `rounds` trials per lock, alternating): a reader
//! takes the read lock and stops, a writer asks for the write lock and sleeps in it, and the
//! parent kills the reader (SIGKILL) and reaps it, repairing nothing: reported is the writer's
//! delay from the kill to its write lock. A pthread rwlock has no robust kind, so its writer
//! gives up after a cap (1 s; 20 ms in the smoke run); gomutex's must get in (10 s cap).
//!
//! Each configuration (process count, workload) runs every lock `rounds` times untimed, the
//! locks alternating within a round (the first one rotating from round to round, so load on a
//! shared machine hits all alike), then once timed; each run on a fresh lock:
//! * the **untimed** runs, no clock read in the loop, give (median run)
//!   * ns/op — wall time (start signal to the last child's last op) / all ops of all children,
//!   * min/max share — the smallest and largest per-process fraction of all ops (fair: 1/N);
//! * a **timed** run gives the worst wait — the longest lock() + critical section + unlock()
//!   any child saw, minus the cost of one `Instant::now()`.
//!
//! Why two runs: on this VM an `Instant::now()` costs 20–80 ns, as much as a whole
//! uncontended lock/unlock. The first version stamped around every `lock()` in the one run;
//! its ns/op were mostly clock reads (over half of the profile's samples were in
//! `clock_gettime`) and one read sat inside every critical section, lengthening it. The timed
//! run now reads the clock once per op (twice with work), never inside the critical section:
//! each op's interval runs from just before `lock()` to just after `unlock()`. Its ns/op goes
//! to the JSON only.
//!
//! `cargo bench --bench shm_locks [-- FILTER…] [--duration-ms N] [--rounds N] [--procs 1,2,8]
//! [--workloads none,work,rw1,rw10,rwkill] [--no-timing] [--pin]` runs the full bench (cargo
//! passes `--bench`; defaults 500 ms per run, 5 rounds); without `--bench` (`cargo test --benches`) it does a short smoke
//! run (10 ms, one round) that still checks every counter. Environment:
//! `SHM_LOCKS_DURATION_MS`, `SHM_LOCKS_ROUNDS`, `SHM_LOCKS_PROCS`, `SHM_LOCKS_WORKLOADS`,
//! `SHM_LOCKS_FILTER` (comma-separated substrings of `lock/Np/workload`), `SHM_LOCKS_TIMING=0`,
//! `SHM_LOCKS_PIN=1` (`--pin`: child `i` pinned to the `i`-th allowed CPU, round robin, as
//! prefork servers pin their workers),
//! and `SHM_LOCKS_JSON=path` for the results as JSON (default for the full bench:
//! `<target dir>/shm_locks.json`, read by `scripts/bench_summary.py`). Loaded mode:
//! `SHM_LOCKS_BUSY=N` (`--busy N`) forks N busy-looping processes (a shell's
//! `while :; do :; done`) at the start of every round, after its line round-trip probe, killed
//! at its end and before the timed runs' round (which gets its own); `SHM_LOCKS_BUSY_SESSION=own`
//! puts each in a session and scheduling group of its own (`common::BusyLoops`). The table's
//! header and the JSON say the load.

use gomutex::shm::{LockError, ShmMutex, ShmRwLock};

#[path = "../common.rs"]
mod common;
use common::{
    allowed_cpus, busy_from_env, fmt_busy, fmt_round_trips, go_work, line_round_trip_ns, median,
    paired_ratio, pin_nth, target_dir, BusyLoops, ShmBox,
};
use std::ffi::{c_int, c_void, CString};
use std::hint::black_box;
use std::io::{self, Write};
use std::mem::{self, MaybeUninit};
use std::os::unix::ffi::OsStrExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Upper bound on the process count of one run (size of the result table in shared memory).
const MAX_PROCS: usize = 64;

// ---------------------------------------------------------------------------------------------
// Shared memory

/// Pads its content to a cache line of its own.
#[repr(C, align(64))]
struct Line<T>(T);

/// What a child reports back.
#[repr(C)]
struct Slot {
    ops: AtomicU64,
    worst_wait_ns: AtomicU64,
    waits_over_1ms: AtomicU64,
    /// CLOCK_MONOTONIC (system-wide) when the child stopped.
    end_ns: AtomicU64,
    /// Ops that incremented the counter (all of them but the rw workloads' reads).
    writes: AtomicU64,
    /// The longest write op (timed rw runs), as `worst_wait_ns`.
    worst_write_ns: AtomicU64,
}

/// The control block and results of one run, shared by parent and children.
#[repr(C)]
struct Region {
    ready: Line<AtomicU32>,
    /// start (0 → 1), stop (0 → 1): written once each by the parent, read by every child.
    start: Line<(AtomicU32, AtomicU32)>,
    /// The data the lock protects: a plain, non-atomic counter, and (rw workloads) its shadow
    /// copy, written by the writers after the counter and compared by the readers.
    counter: Line<std::cell::UnsafeCell<[u64; 2]>>,
    slots: [Line<Slot>; MAX_PROCS],
}

fn mono_ns() -> u64 {
    let mut ts = MaybeUninit::<libc::timespec>::uninit();
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, ts.as_mut_ptr()) };
    assert_eq!(r, 0, "clock_gettime");
    // SAFETY: clock_gettime succeeded and filled `ts`.
    let ts = unsafe { ts.assume_init() };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// ---------------------------------------------------------------------------------------------
// The locks

/// A lock shared by forked processes, as the measurement loop sees it. Created in the parent
/// before `fork`; `attach` runs in each child after `fork` (for locks whose state is per open
/// file description or per process, or that register on first use).
trait ProcLock {
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
trait RawLock {
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
fn errno_call(what: &str, mut f: impl FnMut() -> c_int) {
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

fn pthread_check(what: &str, r: c_int) {
    assert!(r == 0, "{what}: {}", io::Error::from_raw_os_error(r));
}

#[derive(Clone, Copy, PartialEq)]
enum PthreadKind {
    Plain,
    Robust,
    /// Robust + PTHREAD_PRIO_INHERIT: what APR (Apache's default accept mutex) uses on Linux; a
    /// PI futex, so the kernel hands a contended lock to the top waiter.
    RobustPi,
}

/// `pthread_mutex_t` with PTHREAD_PROCESS_SHARED (and optionally ROBUST / PRIO_INHERIT).
struct PthreadMutex {
    m: ShmBox<libc::pthread_mutex_t>,
    robust: bool,
}

impl PthreadMutex {
    fn new(kind: PthreadKind) -> io::Result<Self> {
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
    fn lock_recover(&self) -> bool {
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
struct PosixSem {
    s: ShmBox<libc::sem_t>,
}

impl PosixSem {
    fn new() -> io::Result<Self> {
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
struct SysvSem {
    id: c_int,
}

impl SysvSem {
    fn new() -> io::Result<Self> {
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

    fn op(&self, delta: i16) {
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
struct LockFile {
    path: PathBuf,
    fd: c_int,
}

impl LockFile {
    fn new(tag: &str) -> io::Result<Self> {
        let path = std::env::temp_dir().join(format!(
            "gomutex-shm_locks-{}-{tag}.lock",
            std::process::id()
        ));
        std::fs::File::create(&path)?;
        Ok(Self { path, fd: -1 })
    }

    fn open(path: &Path) -> io::Result<c_int> {
        let c = CString::new(path.as_os_str().as_bytes()).expect("temp path has no NUL");
        // SAFETY: `c` is a NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(fd)
    }

    fn attach(&mut self) -> io::Result<()> {
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
struct Flock(LockFile);

impl Flock {
    fn new() -> io::Result<Self> {
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
struct Fcntl(LockFile);

impl Fcntl {
    fn new() -> io::Result<Self> {
        LockFile::new("fcntl").map(Self)
    }

    fn set(&self, cmd: c_int, ty: c_int) {
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
struct GoShm(ShmMutex<()>);

impl GoShm {
    fn new() -> io::Result<Self> {
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
const PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP: c_int = 2;

/// `pthread_rwlock_t` with PTHREAD_PROCESS_SHARED: glibc's default kind (prefers readers) or,
/// with `prefer_writer`, `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`.
struct PthreadRw {
    l: ShmBox<libc::pthread_rwlock_t>,
}

impl PthreadRw {
    fn new(prefer_writer: bool) -> io::Result<Self> {
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

    fn unlock(&self) {
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
struct GoShmRw(ShmRwLock<()>);

impl GoShmRw {
    fn new() -> io::Result<Self> {
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
enum Count {
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
struct Floor(std::sync::Mutex<()>);

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
struct AtomicFloor;

impl ProcLock for AtomicFloor {
    const COUNT: Count = Count::Atomic;
    /// Never called: the child loop counts with a `fetch_add` instead.
    fn with_lock(&self, f: impl FnOnce()) {
        f();
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration

#[derive(Clone, Copy, PartialEq, Debug)]
enum Workload {
    /// lock; counter += 1; unlock — nothing else (Go's BenchmarkMutex).
    None,
    /// ... then 100 × `foo *= 2; foo /= 2` outside the lock (Go's BenchmarkMutexWork).
    Work,
    /// Readers-writer: 1 % of the ops write (counter += 1 under the write lock), the others
    /// read it under the read lock; nothing outside the lock.
    Rw1,
    /// As `Rw1`, 10 % writes.
    Rw10,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::None => "none",
            Workload::Work => "work",
            Workload::Rw1 => "rw1",
            Workload::Rw10 => "rw10",
        }
    }
    fn parse(s: &str) -> Workload {
        match s {
            "none" => Workload::None,
            "work" => Workload::Work,
            "rw1" => Workload::Rw1,
            "rw10" => Workload::Rw10,
            _ => panic!("unknown workload {s:?} (none, work, rw1, rw10)"),
        }
    }
    /// The percentage of writes of a readers-writer workload; `None`: a mutex workload.
    fn write_pct(self) -> Option<u32> {
        match self {
            Workload::None | Workload::Work => None,
            Workload::Rw1 => Some(1),
            Workload::Rw10 => Some(10),
        }
    }
}

struct Config {
    smoke: bool,
    duration: Duration,
    procs: Vec<usize>,
    workloads: Vec<Workload>,
    filters: Vec<String>,
    /// Every child does at least this many ops, even past the deadline (smoke: make every
    /// process contend; bench: 0).
    min_ops: u64,
    json: Option<PathBuf>,
    /// Untimed runs per configuration and lock (the table shows the median).
    rounds: usize,
    /// After the untimed runs of each configuration, do a timed run (one `Instant::now()` per
    /// op, two with work) for the worst wait. Off: untimed runs only.
    timing: bool,
    /// Cost of one `Instant::now()`, subtracted from the worst wait.
    clock_overhead: Duration,
    /// Pin child `i` to the `i`-th CPU this process may use (round robin), as prefork servers
    /// pin their workers (nginx's `worker_cpu_affinity`). Empty: children free to move.
    pin: Vec<usize>,
    /// Busy-looping processes beside every round, and whether each has a session of its own.
    busy: (usize, bool),
    /// Run the reader-death case (`rwkill` in the workload list).
    reader_death: bool,
}

fn list<T>(s: &str, f: impl Fn(&str) -> T) -> Vec<T> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(f)
        .collect()
}

/// The workload list, and whether it names `rwkill` (the reader-death case, not a loop).
fn parse_workloads(s: &str) -> (Vec<Workload>, bool) {
    let names = list(s, str::to_owned);
    let kill = names.iter().any(|n| n == "rwkill");
    let loops = names
        .iter()
        .filter(|n| *n != "rwkill")
        .map(|n| Workload::parse(n))
        .collect();
    (loops, kill)
}

fn parse_procs(s: &str) -> Vec<usize> {
    list(s, |p| {
        let n: usize = p.parse().expect("--procs: comma-separated counts");
        assert!(
            (1..=MAX_PROCS).contains(&n),
            "process count 1..={MAX_PROCS}"
        );
        n
    })
}

impl Config {
    fn from_env_and_args() -> Config {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let smoke = !args.iter().any(|a| a == "--bench");
        let mut cfg = Config {
            smoke,
            duration: Duration::from_millis(if smoke { 10 } else { 500 }),
            procs: if smoke { vec![2, 3] } else { vec![1, 2, 8] },
            workloads: vec![
                Workload::None,
                Workload::Work,
                Workload::Rw1,
                Workload::Rw10,
            ],
            filters: Vec::new(),
            min_ops: if smoke { 200 } else { 0 },
            // The full bench always writes its JSON (for scripts/bench_summary.py).
            json: std::env::var_os("SHM_LOCKS_JSON")
                .map(PathBuf::from)
                .or_else(|| (!smoke).then(|| target_dir().join("shm_locks.json"))),
            rounds: if smoke { 1 } else { 5 },
            timing: true,
            clock_overhead: Duration::ZERO,
            pin: Vec::new(),
            busy: if smoke {
                (0, false)
            } else {
                busy_from_env("SHM_LOCKS")
            },
            reader_death: true,
        };
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let Some(v) = env("SHM_LOCKS_DURATION_MS") {
            cfg.duration = Duration::from_millis(v.parse().expect("SHM_LOCKS_DURATION_MS"));
        }
        if let Some(v) = env("SHM_LOCKS_PROCS") {
            cfg.procs = parse_procs(&v);
        }
        if let Some(v) = env("SHM_LOCKS_WORKLOADS") {
            (cfg.workloads, cfg.reader_death) = parse_workloads(&v);
        }
        if let Some(v) = env("SHM_LOCKS_FILTER") {
            cfg.filters = list(&v, str::to_owned);
        }
        if let Some(v) = env("SHM_LOCKS_ROUNDS") {
            cfg.rounds = v.parse::<usize>().expect("SHM_LOCKS_ROUNDS").max(1);
        }
        if let Some(v) = env("SHM_LOCKS_TIMING") {
            cfg.timing = v != "0";
        }
        if env("SHM_LOCKS_PIN").is_some_and(|v| v != "0") {
            cfg.pin = allowed_cpus();
        }
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            let mut value =
                |flag: &str| it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
            match a.as_str() {
                "--bench" => {}
                "--duration-ms" => {
                    let v = value(&a);
                    cfg.duration = Duration::from_millis(v.parse().expect("--duration-ms N"));
                }
                "--procs" => cfg.procs = parse_procs(&value(&a)),
                "--rounds" => {
                    let v = value(&a);
                    cfg.rounds = v.parse::<usize>().expect("--rounds N").max(1);
                }
                "--workloads" => (cfg.workloads, cfg.reader_death) = parse_workloads(&value(&a)),
                "--json" => cfg.json = Some(PathBuf::from(value(&a))),
                "--no-timing" => cfg.timing = false,
                "--pin" => cfg.pin = allowed_cpus(),
                "--busy" => cfg.busy.0 = value(&a).parse().expect("--busy N"),
                "-h" | "--help" => {
                    println!(
                        "shm_locks [FILTER…] [--duration-ms N] [--rounds N] [--procs 1,2,8] \
                         [--workloads none,work,rw1,rw10,rwkill] [--json PATH] [--no-timing] [--pin] [--busy N]\n\
                         FILTER: substring of lock/Np/workload, e.g. pthread/8p or fcntl"
                    );
                    std::process::exit(0);
                }
                // libtest-style flags cargo may forward (--nocapture, --quiet …): ignore.
                s if s.starts_with('-') => eprintln!("shm_locks: ignoring flag {s}"),
                s => cfg.filters.push(s.to_owned()),
            }
        }
        cfg
    }

    fn selected(&self, id: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| id.contains(f.as_str()))
    }
}

/// The cheapest observed `Instant::now()`: what each timed interval (from one clock read to
/// the next) carries on top of lock() + critical section + unlock().
fn clock_overhead() -> Duration {
    (0..10_000)
        .map(|_| {
            let a = Instant::now();
            let b = Instant::now();
            b - a
        })
        .min()
        .unwrap_or_default()
}

/// fork() is only sound here because nothing else runs in this process: check it.
fn assert_single_threaded() {
    let n = std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1);
    assert_eq!(n, 1, "shm_locks forks: it must run single-threaded");
}

// ---------------------------------------------------------------------------------------------
// Running

/// The child's side of a run. Never returns: exits with `_exit` (0 = ok, 101 = panic) so no
/// destructor of the parent's objects (IPC_RMID, unlink, munmap…) runs in the child.
fn child<L: ProcLock>(
    lock: &mut L,
    region: &Region,
    idx: usize,
    work: Workload,
    min_ops: u64,
    timing: bool,
) -> ! {
    let res = panic::catch_unwind(AssertUnwindSafe(|| {
        lock.attach().expect("attach after fork");
        region.ready.0.fetch_add(1, Ordering::SeqCst);
        while region.start.0 .0.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let tally = match work.write_pct() {
            None => mutex_loop(lock, region, work, min_ops, timing),
            Some(pct) => rw_loop(lock, region, idx, pct, min_ops, timing),
        };
        if L::COUNT == Count::Private {
            // SAFETY: the counter is an aligned u64 in the mapping, which outlives the child;
            // in a floor run every process only ever adds to it atomically, here.
            unsafe { AtomicU64::from_ptr(region.counter.0.get().cast::<u64>()) }
                .fetch_add(tally.own, Ordering::Relaxed);
        }
        let slot = &region.slots[idx].0;
        slot.ops.store(tally.ops, Ordering::Relaxed);
        slot.writes.store(tally.writes, Ordering::Relaxed);
        slot.worst_write_ns
            .store(tally.worst_write.as_nanos() as u64, Ordering::Relaxed);
        slot.worst_wait_ns
            .store(tally.worst.as_nanos() as u64, Ordering::Relaxed);
        slot.waits_over_1ms.store(tally.over_1ms, Ordering::Relaxed);
        slot.end_ns.store(mono_ns(), Ordering::Release);
    }));
    // SAFETY: _exit is always safe to call; it skips atexit handlers and destructors on purpose.
    unsafe { libc::_exit(if res.is_ok() { 0 } else { 101 }) }
}

/// What a child's loop counted and timed, for its [`Slot`].
#[derive(Default)]
struct Tally {
    ops: u64,
    writes: u64,
    /// A floor's ops, counted in the process's own memory (added to the counter at the end).
    own: u64,
    worst: Duration,
    worst_write: Duration,
    over_1ms: u64,
}

impl Tally {
    /// One more op that ended at `now` and began at `start` (a timed run), a write or not.
    #[inline]
    fn time(&mut self, start: Instant, now: Instant, write: bool) {
        let took = now - start;
        self.worst = self.worst.max(took);
        if write {
            self.worst_write = self.worst_write.max(took);
        }
        self.over_1ms += u64::from(took > Duration::from_millis(1));
    }
}

/// The mutex workloads' loop (`none`, `work`): every op takes the lock and adds one, then does
/// the work, if any. A loop of its own, as tight as the one before the readers-writer
/// workloads came: one shared with them (a per-op read-or-write choice and the shadow copy)
/// cost every mutex row ~20 instructions an op, as much as pthread's whole uncontended
/// lock/unlock (docs/benchmarks.md, "The lock statistics' cost").
#[inline(never)]
fn mutex_loop<L: ProcLock>(
    lock: &L,
    region: &Region,
    work: Workload,
    min_ops: u64,
    timing: bool,
) -> Tally {
    let stop = &region.start.0 .1;
    let counter = region.counter.0.get().cast::<u64>();
    let mut t = Tally::default();
    let mut x = 1i64;
    // One clock read per op, never inside the critical section: an op's interval runs from
    // just before lock() (the previous op's end, or the end of its work) to just after
    // unlock().
    let mut t0 = timing.then(Instant::now);
    loop {
        match L::COUNT {
            Count::Locked => lock.with_lock(|| {
                // SAFETY: the lock under test serialises every access to the counter (that is
                // what the final count checks); the mapping outlives the child.
                unsafe { *counter += 1 };
            }),
            Count::Private => lock.with_lock(|| t.own += 1),
            Count::Atomic => {
                // SAFETY: the counter is an aligned u64 in the mapping, which outlives the
                // child; in an atomic-floor run every process only adds to it atomically.
                _ = unsafe { AtomicU64::from_ptr(counter) }.fetch_add(1, Ordering::Relaxed);
            }
        }
        t.ops += 1;
        if let Some(start) = t0 {
            let now = Instant::now();
            t.time(start, now, true);
            t0 = Some(now);
        }
        if work == Workload::Work {
            x = go_work(x);
            if t0.is_some() {
                t0 = Some(Instant::now());
            }
        }
        if t.ops >= min_ops && stop.load(Ordering::Relaxed) != 0 {
            break;
        }
    }
    black_box(x);
    t.writes = t.ops;
    t
}

/// The readers-writer workloads' loop (`rw1`, `rw10`): `pct` % of the ops, chosen by the
/// process's [`Lcg`], add one to the counter and its shadow copy under the write lock, the
/// others read both under the read lock (and fail the run if they differ). Nothing outside the
/// lock.
#[inline(never)]
fn rw_loop<L: ProcLock>(
    lock: &L,
    region: &Region,
    idx: usize,
    pct: u32,
    min_ops: u64,
    timing: bool,
) -> Tally {
    let stop = &region.start.0 .1;
    let counter = region.counter.0.get().cast::<u64>();
    // SAFETY: the second u64 of the same array, in bounds.
    let shadow = unsafe { counter.add(1) };
    let mut lcg = Lcg::new(idx);
    let mut t = Tally::default();
    let mut torn = 0u64;
    // As in `mutex_loop`: one clock read per op, outside the critical section.
    let mut t0 = timing.then(Instant::now);
    loop {
        // Decided before the clock's interval matters (a few ns, the same for every lock).
        let write = lcg.percent() < pct;
        match L::COUNT {
            Count::Locked if write => lock.with_lock(|| {
                // SAFETY: the lock under test serialises every write (what the final count
                // checks); the mapping outlives the child.
                unsafe {
                    *counter += 1;
                    *shadow = *counter;
                }
            }),
            Count::Locked => lock.with_read(|| {
                // SAFETY: under the read lock no writer is inside (what the shadow comparison
                // checks); the mapping outlives the child.
                let (a, b) = unsafe { (*counter, *shadow) };
                torn += u64::from(a != b);
                black_box(a);
            }),
            Count::Private if write => lock.with_lock(|| t.own += 1),
            Count::Private => lock.with_read(|| {
                black_box(t.own);
            }),
            Count::Atomic => {
                // SAFETY: as in `mutex_loop`.
                let c = unsafe { AtomicU64::from_ptr(counter) };
                // A read adds 0, opaquely (an `add 0` the compiler knows may become a fenced
                // load, which would not move the line).
                let by = if write { 1 } else { black_box(0) };
                _ = c.fetch_add(by, Ordering::Relaxed);
            }
        }
        t.ops += 1;
        t.writes += u64::from(write);
        if let Some(start) = t0 {
            let now = Instant::now();
            t.time(start, now, write);
            t0 = Some(now);
        }
        if t.ops >= min_ops && stop.load(Ordering::Relaxed) != 0 {
            break;
        }
    }
    assert_eq!(torn, 0, "a reader saw a half-done write");
    t
}

/// A cheap per-process random sequence (Knuth's MMIX LCG), seeded by the process's index: the
/// same reads and writes, in the same order, for every lock.
struct Lcg(u64);

impl Lcg {
    fn new(idx: usize) -> Self {
        Lcg((idx as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
    /// The next number in 0..100 (from the high bits, the LCG's good ones).
    #[inline]
    fn percent(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 32) % 100) as u32
    }
}

/// Forked children of one run; dropping it kills (SIGKILL) and reaps whoever is still there,
/// so a panic in the parent leaves no stray process holding a lock.
struct Children {
    pids: Vec<libc::pid_t>,
}

impl Children {
    /// Reap exited children without blocking; panic if one failed (after taking every reaped
    /// pid off the list, so `drop` never signals a pid that may have been reused).
    fn reap(&mut self, lock: &str) {
        let mut failed = None;
        self.pids.retain(|&pid| {
            let mut status = 0;
            // SAFETY: `pid` is our own child; `status` is a valid out-pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == 0 {
                return true;
            }
            if r != pid {
                failed = Some(format!("waitpid({pid}): {}", io::Error::last_os_error()));
            } else if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                failed = Some(format!("child {pid} failed (wait status {status:#x})"));
            }
            false
        });
        if let Some(msg) = failed {
            panic!("{lock}: {msg}");
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for &pid in &self.pids {
            // SAFETY: `pid` is our own un-reaped child, so the id cannot have been reused.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, ptr::null_mut(), 0);
            }
        }
    }
}

/// What one fixed-duration run measured.
#[derive(Debug)]
struct Run {
    wall_ns: u64,
    total_ops: u64,
    per_proc: Vec<u64>,
    /// Longest lock() + critical section + unlock(), clock cost subtracted (timed runs only).
    worst_wait_ns: Option<u64>,
    /// Ops whose interval exceeded 1 ms (timed runs only).
    waits_over_1ms: Option<u64>,
    /// Ops that wrote (all ops of a mutex workload).
    writes: u64,
    /// The longest write op (timed rw runs only), clock cost subtracted.
    worst_write_ns: Option<u64>,
}

impl Run {
    fn ns_per_op(&self) -> f64 {
        self.wall_ns as f64 / self.total_ops as f64
    }
    fn share(&self) -> (f64, f64) {
        let t = self.total_ops as f64;
        let min = *self.per_proc.iter().min().unwrap() as f64;
        let max = *self.per_proc.iter().max().unwrap() as f64;
        (min / t, max / t)
    }
}

/// One line of the table: ns/op and shares from the untimed runs (one per round), the worst
/// wait from the timed one.
struct Row {
    lock: &'static str,
    procs: usize,
    work: Workload,
    /// The untimed runs, one per round.
    plain: Vec<Run>,
    timed: Option<Run>,
    /// `common::line_round_trip_ns` probed before each round of this configuration (shared
    /// by every lock of the configuration: they alternate within a round).
    round_trip_ns: Vec<f64>,
}

impl Row {
    /// The untimed run with the median ns/op (the upper one of an even count).
    fn median(&self) -> &Run {
        let mut runs: Vec<&Run> = self.plain.iter().collect();
        runs.sort_by(|a, b| a.ns_per_op().total_cmp(&b.ns_per_op()));
        runs[runs.len() / 2]
    }
    fn worst_wait_us(&self) -> Option<f64> {
        let ns = self.timed.as_ref()?.worst_wait_ns?;
        Some(ns as f64 / 1e3)
    }
    fn worst_write_us(&self) -> Option<f64> {
        let ns = self.timed.as_ref()?.worst_write_ns?;
        Some(ns as f64 / 1e3)
    }
}

/// One run: fork `procs` children on `lock`, let them go for the configured duration, check
/// the counter, and collect the figures.
fn run_one<L: ProcLock>(
    name: &'static str,
    lock: &mut L,
    cfg: &Config,
    procs: usize,
    work: Workload,
    timing: bool,
) -> Run {
    // SAFETY: Region is atomics, an UnsafeCell<u64> and padding: all-zero is valid.
    let region = unsafe { ShmBox::<Region>::zeroed() }.expect("mmap");
    io::stdout().flush().ok();
    io::stderr().flush().ok();
    let mut kids = Children { pids: Vec::new() };
    for idx in 0..procs {
        // SAFETY: this process is single-threaded (checked in main), so the child may run
        // arbitrary code; it leaves only through `_exit`.
        match unsafe { libc::fork() } {
            -1 => panic!("fork: {}", io::Error::last_os_error()),
            0 => {
                pin_nth(&cfg.pin, idx);
                child(lock, &region, idx, work, cfg.min_ops, timing)
            }
            pid => kids.pids.push(pid),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while region.ready.0.load(Ordering::SeqCst) < procs as u32 {
        kids.reap(name);
        assert!(
            Instant::now() < deadline,
            "{name}: children never got ready"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let start_ns = mono_ns();
    region.start.0 .0.store(1, Ordering::Release);
    std::thread::sleep(cfg.duration);
    region.start.0 .1.store(1, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kids.pids.is_empty() {
        kids.reap(name);
        assert!(
            Instant::now() < deadline,
            "{name}/{procs}p/{}: children still running 30 s after stop (hung lock?)",
            work.name()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let slots = &region.slots[..procs];
    let per_proc: Vec<u64> = slots
        .iter()
        .map(|s| s.0.ops.load(Ordering::Relaxed))
        .collect();
    let total_ops: u64 = per_proc.iter().sum();
    let writes: u64 = slots
        .iter()
        .map(|s| s.0.writes.load(Ordering::Relaxed))
        .sum();
    // SAFETY: every child has exited, so nobody else touches the counter any more.
    let [counter, shadow] = unsafe { *region.counter.0.get() };
    assert_eq!(
        counter,
        writes,
        "{name}/{procs}p/{}: the lock lost updates",
        work.name()
    );
    if work.write_pct().is_some() && L::COUNT == Count::Locked {
        assert_eq!(shadow, counter, "{name}/{procs}p/{}: shadow", work.name());
    }
    assert!(per_proc.iter().all(|&n| n >= cfg.min_ops.max(1)));
    let end_ns = slots
        .iter()
        .map(|s| s.0.end_ns.load(Ordering::Acquire))
        .max()
        .unwrap();
    let worst = slots
        .iter()
        .map(|s| s.0.worst_wait_ns.load(Ordering::Relaxed))
        .max()
        .unwrap();
    let clock = cfg.clock_overhead.as_nanos() as u64;
    let worst_write = slots
        .iter()
        .map(|s| s.0.worst_write_ns.load(Ordering::Relaxed))
        .max()
        .unwrap();
    Run {
        wall_ns: end_ns.saturating_sub(start_ns),
        total_ops,
        per_proc,
        writes,
        worst_write_ns: (timing && work.write_pct().is_some())
            .then(|| worst_write.saturating_sub(clock)),
        worst_wait_ns: timing.then(|| worst.saturating_sub(clock)),
        waits_over_1ms: timing.then(|| {
            slots
                .iter()
                .map(|s| s.0.waits_over_1ms.load(Ordering::Relaxed))
                .sum()
        }),
    }
}

/// A lock under test: its name and a function that builds a fresh one and runs it once (a
/// fresh lock per run, so a run never inherits another's state, e.g. a poisoned or
/// mis-counted semaphore). `None`: the lock cannot be created here (said on stderr).
struct Contender {
    name: &'static str,
    run: Box<RunFn>,
}

/// `(config, processes, workload, timed)` → one run on a fresh lock.
type RunFn = dyn Fn(&Config, usize, Workload, bool) -> Option<Run>;

fn contender<L: ProcLock>(
    name: &'static str,
    make: impl Fn() -> io::Result<L> + 'static,
) -> Contender {
    Contender {
        name,
        run: Box::new(move |cfg, procs, work, timing| match make() {
            Ok(mut lock) => Some(run_one(name, &mut lock, cfg, procs, work, timing)),
            Err(e) => {
                eprintln!("{name}: skipped, cannot create the lock: {e}");
                None
            }
        }),
    }
}

/// `c`, run only for the workloads `wanted` accepts (the floors: with work or the rw workloads,
/// without either they measure nothing; the mutexes: the mutex workloads; the rwlocks: the rw
/// workloads).
fn only(wanted: fn(Workload) -> bool, c: Contender) -> Contender {
    let run = c.run;
    Contender {
        name: c.name,
        run: Box::new(move |cfg, procs, work, timing| {
            wanted(work)
                .then(|| run(cfg, procs, work, timing))
                .flatten()
        }),
    }
}

/// The mutex workloads.
fn mutex_work(w: Workload) -> bool {
    w.write_pct().is_none()
}

/// The readers-writer workloads.
fn rw_work(w: Workload) -> bool {
    w.write_pct().is_some()
}

/// Where the floors mean something: with work outside the lock, or the rw workloads.
fn floor_work(w: Workload) -> bool {
    w == Workload::Work || rw_work(w)
}

/// Every selected (procs, workload) configuration: `cfg.rounds` untimed runs per lock, the
/// locks alternating within a round (the first one rotating from round to round) so that load
/// on a shared machine hits all of them alike, then one timed run per lock.
fn bench_all(locks: &[Contender], cfg: &Config, rows: &mut Vec<Row>) {
    for &procs in &cfg.procs {
        for &work in &cfg.workloads {
            let id = |name: &str| format!("{name}/{procs}p/{}", work.name());
            let chosen: Vec<&Contender> =
                locks.iter().filter(|c| cfg.selected(&id(c.name))).collect();
            let mut plain: Vec<Vec<Run>> = chosen.iter().map(|_| Vec::new()).collect();
            let mut round_trip_ns = Vec::new();
            for r in 0..cfg.rounds {
                // Threads, joined before any fork below; only where figures count (the probe
                // spins two pinned threads for a few ms).
                if !cfg.smoke {
                    round_trip_ns.extend(line_round_trip_ns());
                }
                // After the probe (which measures where the CPUs are, not the load); killed
                // when the round ends.
                let _busy = BusyLoops::start(cfg.busy.0, cfg.busy.1).expect("fork a busy loop");
                for k in 0..chosen.len() {
                    let i = (r + k) % chosen.len();
                    if r > 0 && plain[i].is_empty() {
                        continue; // could not be created in round 0
                    }
                    if let Some(run) = (chosen[i].run)(cfg, procs, work, false) {
                        plain[i].push(run);
                    }
                }
            }
            for (c, plain) in chosen.iter().zip(plain) {
                if plain.is_empty() {
                    continue;
                }
                let timed = if cfg.timing {
                    let _busy = BusyLoops::start(cfg.busy.0, cfg.busy.1).expect("fork a busy loop");
                    (c.run)(cfg, procs, work, true)
                } else {
                    None
                };
                let row = Row {
                    lock: c.name,
                    procs,
                    work,
                    plain,
                    timed,
                    round_trip_ns: round_trip_ns.clone(),
                };
                eprintln!(
                    "{}: {:.1} ns/op median of {} ({}), timed run: {} ns/op, worst wait {} µs{}, \
                     line round trip {} ns",
                    id(c.name),
                    row.median().ns_per_op(),
                    row.plain.len(),
                    row.plain
                        .iter()
                        .map(|r| format!("{:.1}", r.ns_per_op()))
                        .collect::<Vec<_>>()
                        .join(" "),
                    fmt_opt(row.timed.as_ref().map(Run::ns_per_op), "-"),
                    fmt_opt(row.worst_wait_us(), "-"),
                    row.worst_write_us()
                        .map_or_else(String::new, |w| format!(" (a write {w:.1} µs)")),
                    fmt_round_trips(&row.round_trip_ns)
                );
                rows.push(row);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reader death

/// A readers-writer lock for the reader-death case: the write lock, given up after `cap`.
trait DeathLock: ProcLock {
    /// Take the write lock, waiting at most `cap`; whether it was taken (and released again).
    fn write_within(&self, cap: Duration) -> bool;
}

impl DeathLock for GoShmRw {
    fn write_within(&self, cap: Duration) -> bool {
        // A reader's death tells nobody anything (only a writer's does): any guard is a win.
        !matches!(
            self.0.try_write_for(cap),
            Err(gomutex::shm::TryLockError::WouldBlock)
        )
    }
}

extern "C" {
    /// glibc's (POSIX's) timed write lock; the `libc` crate does not declare it for Linux.
    fn pthread_rwlock_timedwrlock(
        lock: *mut libc::pthread_rwlock_t,
        abstime: *const libc::timespec,
    ) -> c_int;
}

impl DeathLock for PthreadRw {
    fn write_within(&self, cap: Duration) -> bool {
        let mut now = MaybeUninit::<libc::timespec>::uninit();
        // SAFETY: valid out-pointer; CLOCK_REALTIME (the clock of `abstime`) always exists.
        let r = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, now.as_mut_ptr()) };
        assert_eq!(r, 0, "clock_gettime");
        // SAFETY: clock_gettime succeeded and filled `now`.
        let now = unsafe { now.assume_init() };
        let ns = now.tv_nsec as u64 + cap.subsec_nanos() as u64;
        let at = libc::timespec {
            tv_sec: now.tv_sec
                + cap.as_secs() as libc::time_t
                + (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as _,
        };
        // SAFETY: initialised lock, mapped while `self` lives; `at` is a valid timespec.
        match unsafe { pthread_rwlock_timedwrlock(self.l.as_ptr(), &at) } {
            0 => {
                self.unlock();
                true
            }
            libc::ETIMEDOUT => false,
            r => panic!(
                "pthread_rwlock_timedwrlock: {}",
                io::Error::from_raw_os_error(r)
            ),
        }
    }
}

/// One lock's reader-death trials: the writer's delay after the kill, per trial (`None`: it had
/// not got the lock when the cap ran out).
struct Death {
    lock: &'static str,
    cap: Duration,
    delays: Vec<Option<Duration>>,
}

/// One trial: a reader takes the read lock and stops; a writer asks for the write lock and
/// sleeps in it; the parent kills the reader (SIGKILL) and reaps it, as a supervisor would, but
/// repairs nothing (no `force_unlock`): the lock's own recovery must let the writer in. The
/// writer's delay runs from just before `kill` to just after its write lock returned.
///
/// The kill comes `settle` after the writer asked: gomutex's writer looks for dead readers every
/// 10 ms of its wait, so trials spread `settle` over a tick (a fixed one would measure one phase
/// of the writer's ticks, every time).
fn death_trial<L: DeathLock>(lock: &mut L, cap: Duration, settle: Duration) -> Option<Duration> {
    // SAFETY: Region is atomics, an UnsafeCell and padding: all-zero is valid.
    let region = unsafe { ShmBox::<Region>::zeroed() }.expect("mmap");
    let stage = &region.ready.0;
    let wait_stage = |n: u32, kids: &mut Children| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while stage.load(Ordering::SeqCst) < n {
            kids.reap("reader death");
            assert!(
                Instant::now() < deadline,
                "reader death: child never got ready"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    io::stdout().flush().ok();
    io::stderr().flush().ok();
    let mut kids = Children { pids: Vec::new() };
    // SAFETY: single-threaded process (checked in main); the child leaves only by `_exit` or
    // by being killed.
    let reader = match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", io::Error::last_os_error()),
        0 => {
            _ = lock.attach();
            lock.with_read(|| {
                stage.store(1, Ordering::SeqCst);
                loop {
                    // SAFETY: plain syscall; waits for the SIGKILL.
                    unsafe { libc::pause() };
                }
            });
            // SAFETY: _exit is always safe to call.
            unsafe { libc::_exit(1) }
        }
        pid => pid,
    };
    kids.pids.push(reader);
    wait_stage(1, &mut kids);
    // SAFETY: as above.
    match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", io::Error::last_os_error()),
        0 => {
            let ok = lock.attach().is_ok() && {
                stage.store(2, Ordering::SeqCst);
                lock.write_within(cap)
            };
            if ok {
                region.slots[0].0.end_ns.store(mono_ns(), Ordering::SeqCst);
            }
            // SAFETY: _exit is always safe to call.
            unsafe { libc::_exit(0) }
        }
        pid => kids.pids.push(pid),
    }
    wait_stage(2, &mut kids);
    // Let the writer get to sleep in its write lock.
    std::thread::sleep(settle);
    let killed_ns = mono_ns();
    // SAFETY: our own un-reaped child.
    unsafe { libc::kill(reader, libc::SIGKILL) };
    let mut status = 0;
    // SAFETY: our own child, valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(reader, &mut status, 0) }, reader);
    kids.pids.retain(|&p| p != reader);
    let deadline = Instant::now() + cap + Duration::from_secs(30);
    while !kids.pids.is_empty() {
        kids.reap("reader death");
        assert!(
            Instant::now() < deadline,
            "reader death: the writer hung past its cap"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let got = region.slots[0].0.end_ns.load(Ordering::SeqCst);
    (got != 0).then(|| Duration::from_nanos(got.saturating_sub(killed_ns)))
}

/// A reader-death contender: name, cap, and a function making a fresh lock and running a trial.
struct DeathCase {
    name: &'static str,
    cap: Duration,
    /// `(cap, settle)` → the writer's delay (see [`death_trial`]).
    trial: Box<dyn Fn(Duration, Duration) -> Option<Duration>>,
}

fn death_case<L: DeathLock>(
    name: &'static str,
    cap: Duration,
    make: impl Fn() -> io::Result<L> + 'static,
) -> DeathCase {
    DeathCase {
        name,
        cap,
        trial: Box::new(move |cap, settle| death_trial(&mut make().expect(name), cap, settle)),
    }
}

/// The reader-death case, `cfg.rounds` trials per lock, the locks alternating. gomutex's writer
/// waits up to 10 s (it must get in: a miss fails the run), pthread's (which no one can recover:
/// POSIX has no robust rwlock) up to 1 s (smoke: 20 ms).
fn bench_reader_death(cfg: &Config) -> Vec<Death> {
    let pcap = Duration::from_millis(if cfg.smoke { 20 } else { 1000 });
    let cases = [
        death_case("gomutex-shm-rw", Duration::from_secs(10), GoShmRw::new),
        death_case("pthread-rw", pcap, || PthreadRw::new(false)),
        death_case("pthread-rw-wp", pcap, || PthreadRw::new(true)),
    ];
    let cases: Vec<&DeathCase> = cases
        .iter()
        .filter(|c| cfg.selected(&format!("{}/rwkill", c.name)))
        .collect();
    let mut out: Vec<Death> = cases
        .iter()
        .map(|c| Death {
            lock: c.name,
            cap: c.cap,
            delays: Vec::new(),
        })
        .collect();
    for r in 0..cfg.rounds {
        for k in 0..cases.len() {
            let i = (r + k) % cases.len();
            // 20 ms and a fraction of 10 ms that spreads the rounds evenly over a tick.
            let settle = Duration::from_millis(20)
                + Duration::from_millis(10) * r as u32 / cfg.rounds as u32;
            let d = (cases[i].trial)(cases[i].cap, settle);
            out[i].delays.push(d);
        }
    }
    for d in &out {
        eprintln!(
            "{}/rwkill: writer delays after the reader's death: {} ms",
            d.lock,
            d.delays
                .iter()
                .map(|x| x.map_or_else(
                    || format!(">{}", d.cap.as_millis()),
                    |x| format!("{:.2}", x.as_secs_f64() * 1e3)
                ))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    if let Some(g) = out.iter().find(|d| d.lock == "gomutex-shm-rw") {
        assert!(
            g.delays.iter().all(Option::is_some),
            "gomutex-shm-rw: a writer never got the lock after a reader died"
        );
    }
    out
}

fn print_deaths(deaths: &[Death]) {
    if deaths.is_empty() {
        return;
    }
    println!();
    println!(
        "reader death: a reader holds the read lock, a writer waits for the write lock, the \
         reader is killed (SIGKILL, reaped, nothing repaired): the writer's delay from the kill"
    );
    println!();
    println!("| lock | trials | writer delay median ms | max ms |");
    println!("|---|---:|---:|---:|");
    for d in deaths {
        let got: Vec<f64> = d
            .delays
            .iter()
            .flatten()
            .map(|x| x.as_secs_f64() * 1e3)
            .collect();
        let (med, max) = if got.len() == d.delays.len() {
            (
                format!("{:.2}", median(&got)),
                format!("{:.2}", got.iter().copied().fold(0.0, f64::max)),
            )
        } else {
            let never = format!(
                "never within {} ms ({} of {})",
                d.cap.as_millis(),
                d.delays.len() - got.len(),
                d.delays.len()
            );
            (never, "–".to_owned())
        };
        println!("| {} | {} | {med} | {max} |", d.lock, d.delays.len());
    }
}

/// A robust pthread mutex whose owner died holding it must come back as EOWNERDEAD, once, and
/// then work normally: the path `lock()` takes for the robust variants.
fn check_pthread_robust_recovery() {
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

/// `v` with one decimal, or `none` when there is no value.
fn fmt_opt(v: Option<f64>, none: &str) -> String {
    v.map_or_else(|| none.to_owned(), |v| format!("{v:.1}"))
}

fn print_table(cfg: &Config, rows: &[Row]) {
    println!();
    println!(
        "shm_locks: {} ms per run, {} round(s) with the locks alternating, {} CPUs; work = 100 × \
         (foo *= 2; foo /= 2) outside the lock; ns/op: median of the untimed runs, shares from \
         that run; vs pthread: median of the per-round ratios to pthread's ns/op (runs of one round \
         are seconds apart, so they share the vCPU placement)",
        cfg.duration.as_millis(),
        cfg.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    if cfg.timing {
        println!(
            "worst wait: from a second, timed run: longest lock() + critical section + unlock() \
             of any process, one Instant::now() per op outside the lock (≈ {} ns, subtracted)",
            cfg.clock_overhead.as_nanos()
        );
    } else {
        println!("--no-timing: no timed runs, so no worst wait");
    }
    println!("load: {}", fmt_busy(cfg.busy.0, cfg.busy.1));
    if !cfg.pin.is_empty() {
        println!(
            "--pin: child i pinned to CPU {:?}[i % {}]",
            cfg.pin,
            cfg.pin.len()
        );
    }
    println!(
        "line RT: cache-line round trip between the first two CPUs, probed before each round \
         (it moves on a VM, and contended figures move with it)"
    );
    let ns = |row: &Row| row.plain.iter().map(Run::ns_per_op).collect::<Vec<_>>();
    // The median per-round ratio of `r` to the lock `base` in the same configuration.
    let vs = |r: &Row, base: &str| {
        rows.iter()
            .find(|p| p.lock == base && p.procs == r.procs && p.work == r.work)
            .map_or_else(
                || "–".to_owned(),
                |p| format!("{:.2}", paired_ratio(&ns(r), &ns(p))),
            )
    };
    let share = |r: &Row| {
        let (min, max) = r.median().share();
        format!("{:.1}% / {:.1}%", min * 100.0, max * 100.0)
    };
    let (mutex_rows, rw_rows): (Vec<&Row>, Vec<&Row>) =
        rows.iter().partition(|r| mutex_work(r.work));
    if !mutex_rows.is_empty() {
        println!();
        println!(
            "| lock | procs | work | ns/op | vs pthread | min/max share | worst wait µs | line RT ns |"
        );
        println!("|---|---:|---|---:|---:|---:|---:|---:|");
        for r in mutex_rows {
            println!(
                "| {} | {} | {} | {:.1} | {} | {} | {} | {} |",
                r.lock,
                r.procs,
                r.work.name(),
                r.median().ns_per_op(),
                vs(r, "pthread"),
                share(r),
                fmt_opt(r.worst_wait_us(), "–"),
                fmt_round_trips(&r.round_trip_ns)
            );
        }
    }
    if !rw_rows.is_empty() {
        println!();
        println!(
            "rw: pthread-rw = glibc's default kind (prefers readers), pthread-rw-wp = \
             PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP; worst wait: any op / a write op"
        );
        println!();
        println!(
            "| lock | procs | work | ns/op | vs pthread-rw | vs pthread-rw-wp | min/max share | \
             worst wait µs (any / write) | line RT ns |"
        );
        println!("|---|---:|---|---:|---:|---:|---:|---:|---:|");
        for r in rw_rows {
            println!(
                "| {} | {} | {} | {:.1} | {} | {} | {} | {} / {} | {} |",
                r.lock,
                r.procs,
                r.work.name(),
                r.median().ns_per_op(),
                vs(r, "pthread-rw"),
                vs(r, "pthread-rw-wp"),
                share(r),
                fmt_opt(r.worst_wait_us(), "–"),
                fmt_opt(r.worst_write_us(), "–"),
                fmt_round_trips(&r.round_trip_ns)
            );
        }
    }
}

fn run_json(r: &Run) -> String {
    let (min, max) = r.share();
    let per: Vec<String> = r.per_proc.iter().map(u64::to_string).collect();
    format!(
        "{{\"wall_ns\": {}, \"total_ops\": {}, \"ns_per_op\": {:.2}, \"per_process_ops\": [{}], \
         \"min_share\": {:.4}, \"max_share\": {:.4}, \"worst_wait_us\": {}, \
         \"waits_over_1ms\": {}, \"writes\": {}, \"worst_write_us\": {}}}",
        r.wall_ns,
        r.total_ops,
        r.ns_per_op(),
        per.join(", "),
        min,
        max,
        fmt_opt(r.worst_wait_ns.map(|ns| ns as f64 / 1e3), "null"),
        r.waits_over_1ms
            .map_or_else(|| "null".to_owned(), |n| n.to_string()),
        r.writes,
        fmt_opt(r.worst_write_ns.map(|ns| ns as f64 / 1e3), "null"),
    )
}

fn write_json(cfg: &Config, rows: &[Row], deaths: &[Death], path: &Path) -> io::Result<()> {
    let mut out = String::from("{\n");
    out += &format!(
        "  \"duration_ms\": {},\n  \"rounds\": {},\n  \"cpus\": {},\n  \"timing\": {},\n  \"clock_overhead_ns\": {},\n  \"busy\": {},\n  \"busy_session\": \"{}\",\n  \"runs\": [\n",
        cfg.duration.as_millis(),
        cfg.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cfg.timing,
        cfg.clock_overhead.as_nanos(),
        cfg.busy.0,
        if cfg.busy.1 { "own" } else { "bench" }
    );
    for (i, r) in rows.iter().enumerate() {
        out += &format!(
            "    {{\"lock\": \"{}\", \"procs\": {}, \"work\": \"{}\", \"untimed_ns_per_op\": [{}], \
             \"line_round_trip_ns\": [{}], \"untimed\": {}, \"timed\": {}}}{}\n",
            r.lock,
            r.procs,
            r.work.name(),
            r.plain
                .iter()
                .map(|r| format!("{:.2}", r.ns_per_op()))
                .collect::<Vec<_>>()
                .join(", "),
            r.round_trip_ns
                .iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            run_json(r.median()),
            r.timed.as_ref().map_or_else(|| "null".to_owned(), run_json),
            if i + 1 < rows.len() { "," } else { "" }
        );
    }
    out += "  ],\n  \"reader_death\": [\n";
    for (i, d) in deaths.iter().enumerate() {
        out += &format!(
            "    {{\"lock\": \"{}\", \"cap_ms\": {}, \"writer_delay_ms\": [{}]}}{}\n",
            d.lock,
            d.cap.as_millis(),
            d.delays
                .iter()
                .map(|x| fmt_opt(x.map(|x| x.as_secs_f64() * 1e3), "null"))
                .collect::<Vec<_>>()
                .join(", "),
            if i + 1 < deaths.len() { "," } else { "" }
        );
    }
    out += "  ]\n}\n";
    std::fs::write(path, out)
}

fn main() {
    let mut cfg = Config::from_env_and_args();
    assert_single_threaded();
    cfg.clock_overhead = clock_overhead();
    if cfg.smoke {
        eprintln!("shm_locks: smoke run (no --bench): short runs, counters checked");
        check_pthread_robust_recovery();
    }
    use PthreadKind::*;
    let m = mutex_work;
    let locks = [
        only(m, contender("gomutex-shm", GoShm::new)),
        only(m, contender("pthread", || PthreadMutex::new(Plain))),
        only(m, contender("pthread-robust", || PthreadMutex::new(Robust))),
        only(
            m,
            contender("pthread-robust-pi", || PthreadMutex::new(RobustPi)),
        ),
        only(m, contender("posix-sem", PosixSem::new)),
        only(m, contender("sysv-sem", SysvSem::new)),
        only(m, contender("flock", Flock::new)),
        only(m, contender("fcntl", Fcntl::new)),
        only(rw_work, contender("gomutex-shm-rw", GoShmRw::new)),
        only(rw_work, contender("pthread-rw", || PthreadRw::new(false))),
        only(rw_work, contender("pthread-rw-wp", || PthreadRw::new(true))),
        only(floor_work, contender("floor", || Ok(Floor::default()))),
        only(floor_work, contender("atomic", || Ok(AtomicFloor))),
    ];
    let mut rows = Vec::new();
    bench_all(&locks, &cfg, &mut rows);
    let deaths = if cfg.reader_death {
        bench_reader_death(&cfg)
    } else {
        Vec::new()
    };
    let rows = &rows;
    assert!(
        !rows.is_empty() || !deaths.is_empty() || !cfg.filters.is_empty(),
        "no lock could be benchmarked"
    );
    print_table(&cfg, rows);
    print_deaths(&deaths);
    if let Some(path) = &cfg.json {
        write_json(&cfg, rows, &deaths, path).expect("write JSON");
        eprintln!("shm_locks: JSON written to {}", path.display());
    }
}
