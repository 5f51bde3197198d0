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
//! [--workloads none,work] [--no-timing] [--pin]` runs the full bench (cargo passes `--bench`; defaults
//! 500 ms per run, 5 rounds); without `--bench` (`cargo test --benches`) it does a short smoke
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

use gomutex::shm::{LockError, ShmMutex};

mod common;
use common::{
    allowed_cpus, busy_from_env, fmt_busy, fmt_round_trips, go_work, line_round_trip_ns,
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
}

/// The control block and results of one run, shared by parent and children.
#[repr(C)]
struct Region {
    ready: Line<AtomicU32>,
    /// start (0 → 1), stop (0 → 1): written once each by the parent, read by every child.
    start: Line<(AtomicU32, AtomicU32)>,
    /// The data the lock protects: a plain, non-atomic counter.
    counter: Line<std::cell::UnsafeCell<u64>>,
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
    /// Run `f` holding the lock (a closure, so guard-based and lock/unlock-based locks fit).
    fn with_lock(&self, f: impl FnOnce());
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
    /// the mutex consistent again.
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
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::None => "none",
            Workload::Work => "work",
        }
    }
    fn parse(s: &str) -> Workload {
        match s {
            "none" => Workload::None,
            "work" => Workload::Work,
            _ => panic!("unknown workload {s:?} (none, work)"),
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
}

fn list<T>(s: &str, f: impl Fn(&str) -> T) -> Vec<T> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(f)
        .collect()
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
            workloads: vec![Workload::None, Workload::Work],
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
        };
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let Some(v) = env("SHM_LOCKS_DURATION_MS") {
            cfg.duration = Duration::from_millis(v.parse().expect("SHM_LOCKS_DURATION_MS"));
        }
        if let Some(v) = env("SHM_LOCKS_PROCS") {
            cfg.procs = parse_procs(&v);
        }
        if let Some(v) = env("SHM_LOCKS_WORKLOADS") {
            cfg.workloads = list(&v, Workload::parse);
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
                "--workloads" => cfg.workloads = list(&value(&a), Workload::parse),
                "--json" => cfg.json = Some(PathBuf::from(value(&a))),
                "--no-timing" => cfg.timing = false,
                "--pin" => cfg.pin = allowed_cpus(),
                "--busy" => cfg.busy.0 = value(&a).parse().expect("--busy N"),
                "-h" | "--help" => {
                    println!(
                        "shm_locks [FILTER…] [--duration-ms N] [--rounds N] [--procs 1,2,8] \
                         [--workloads none,work] [--json PATH] [--no-timing] [--pin] [--busy N]\n\
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
        let stop = &region.start.0 .1;
        let counter = region.counter.0.get();
        let mut ops = 0u64;
        let mut worst = Duration::ZERO;
        let mut over_1ms = 0u64;
        let mut x = 1i64;
        // One clock read per op, never inside the critical section: an op's interval runs
        // from just before lock() (the previous op's end, or the end of its work) to just
        // after unlock().
        let mut t0 = timing.then(Instant::now);
        let mut own = 0u64;
        loop {
            match L::COUNT {
                Count::Locked => lock.with_lock(|| {
                    // SAFETY: the lock under test serialises every access to the counter (that
                    // is what the final count checks); the mapping outlives the child.
                    unsafe { *counter += 1 };
                }),
                Count::Private => lock.with_lock(|| own += 1),
                Count::Atomic => {
                    // SAFETY: the counter is an aligned u64 in the mapping, which outlives the
                    // child; in an atomic-floor run every process only adds to it atomically.
                    _ = unsafe { AtomicU64::from_ptr(counter) }.fetch_add(1, Ordering::Relaxed)
                }
            }
            ops += 1;
            if let Some(start) = t0 {
                let now = Instant::now();
                let took = now - start;
                worst = worst.max(took);
                over_1ms += u64::from(took > Duration::from_millis(1));
                t0 = Some(now);
            }
            if work == Workload::Work {
                x = go_work(x);
                if t0.is_some() {
                    t0 = Some(Instant::now());
                }
            }
            if ops >= min_ops && stop.load(Ordering::Relaxed) != 0 {
                break;
            }
        }
        black_box(x);
        if L::COUNT == Count::Private {
            // SAFETY: the counter is an aligned u64 in the mapping, which outlives the child;
            // in a floor run every process only ever adds to it atomically, here.
            unsafe { AtomicU64::from_ptr(counter) }.fetch_add(own, Ordering::Relaxed);
        }
        let slot = &region.slots[idx].0;
        slot.ops.store(ops, Ordering::Relaxed);
        slot.worst_wait_ns
            .store(worst.as_nanos() as u64, Ordering::Relaxed);
        slot.waits_over_1ms.store(over_1ms, Ordering::Relaxed);
        slot.end_ns.store(mono_ns(), Ordering::Release);
    }));
    // SAFETY: _exit is always safe to call; it skips atexit handlers and destructors on purpose.
    unsafe { libc::_exit(if res.is_ok() { 0 } else { 101 }) }
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
    // SAFETY: every child has exited, so nobody else touches the counter any more.
    let counter = unsafe { *region.counter.0.get() };
    assert_eq!(
        counter,
        total_ops,
        "{name}/{procs}p/{}: the lock lost updates",
        work.name()
    );
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
    Run {
        wall_ns: end_ns.saturating_sub(start_ns),
        total_ops,
        per_proc,
        worst_wait_ns: timing.then(|| worst.saturating_sub(cfg.clock_overhead.as_nanos() as u64)),
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

/// `c`, run only with work outside the lock (the floors: without work they measure nothing).
fn with_work_only(c: Contender) -> Contender {
    let run = c.run;
    Contender {
        name: c.name,
        run: Box::new(move |cfg, procs, work, timing| {
            (work == Workload::Work)
                .then(|| run(cfg, procs, work, timing))
                .flatten()
        }),
    }
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
                    "{}: {:.1} ns/op median of {} ({}), timed run: {} ns/op, worst wait {} µs, \
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
                    fmt_round_trips(&row.round_trip_ns)
                );
                rows.push(row);
            }
        }
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
    println!();
    println!(
        "| lock | procs | work | ns/op | vs pthread | min/max share | worst wait µs | line RT ns |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for r in rows {
        let med = r.median();
        let (min, max) = med.share();
        let ns = |row: &Row| row.plain.iter().map(Run::ns_per_op).collect::<Vec<_>>();
        let pthread = rows
            .iter()
            .find(|p| p.lock == "pthread" && p.procs == r.procs && p.work == r.work)
            .map(|p| paired_ratio(&ns(r), &ns(p)));
        println!(
            "| {} | {} | {} | {:.1} | {} | {:.1}% / {:.1}% | {} | {} |",
            r.lock,
            r.procs,
            r.work.name(),
            med.ns_per_op(),
            pthread.map_or_else(|| "–".to_owned(), |x| format!("{x:.2}")),
            min * 100.0,
            max * 100.0,
            fmt_opt(r.worst_wait_us(), "–"),
            fmt_round_trips(&r.round_trip_ns)
        );
    }
}

fn run_json(r: &Run) -> String {
    let (min, max) = r.share();
    let per: Vec<String> = r.per_proc.iter().map(u64::to_string).collect();
    format!(
        "{{\"wall_ns\": {}, \"total_ops\": {}, \"ns_per_op\": {:.2}, \"per_process_ops\": [{}], \
         \"min_share\": {:.4}, \"max_share\": {:.4}, \"worst_wait_us\": {}, \
         \"waits_over_1ms\": {}}}",
        r.wall_ns,
        r.total_ops,
        r.ns_per_op(),
        per.join(", "),
        min,
        max,
        fmt_opt(r.worst_wait_ns.map(|ns| ns as f64 / 1e3), "null"),
        r.waits_over_1ms
            .map_or_else(|| "null".to_owned(), |n| n.to_string()),
    )
}

fn write_json(cfg: &Config, rows: &[Row], path: &Path) -> io::Result<()> {
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
    let locks = [
        contender("gomutex-shm", GoShm::new),
        contender("pthread", || PthreadMutex::new(Plain)),
        contender("pthread-robust", || PthreadMutex::new(Robust)),
        contender("pthread-robust-pi", || PthreadMutex::new(RobustPi)),
        contender("posix-sem", PosixSem::new),
        contender("sysv-sem", SysvSem::new),
        contender("flock", Flock::new),
        contender("fcntl", Fcntl::new),
        with_work_only(contender("floor", || Ok(Floor::default()))),
        with_work_only(contender("atomic", || Ok(AtomicFloor))),
    ];
    let mut rows = Vec::new();
    bench_all(&locks, &cfg, &mut rows);
    let rows = &rows;
    assert!(
        !rows.is_empty() || !cfg.filters.is_empty(),
        "no lock could be benchmarked"
    );
    print_table(&cfg, rows);
    if let Some(path) = &cfg.json {
        write_json(&cfg, rows, path).expect("write JSON");
        eprintln!("shm_locks: JSON written to {}", path.display());
    }
}
