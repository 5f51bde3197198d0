//! Which process is which, for the shared-memory lock: the caller's pid (cached, and reset in
//! a forked child), its fork generation, the identity a participant slot records (pid plus
//! start time, and the pidfs inode), and a liveness probe (`/proc/<pid>/stat`, pidfds) that
//! tells a reused pid apart.
//!
//! Everything on the lock and recovery paths here is allocation-free and uses only
//! async-signal-safe calls (`open`, `read`, `close`, `kill`, `getpid`, and the raw system calls
//! `pidfd_open`, `fstat`, `fstatfs`), so a child forked from a multi-threaded process may use
//! the lock.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Once;

/// The cached pid of this process; 0 = not known yet (or reset in a forked child).
static PID: AtomicU32 = AtomicU32::new(0);
/// This process's identity (`make_ident(pid, start time)`), cached; reset in a forked child.
static SELF_START: AtomicU64 = AtomicU64::new(0);
/// This process's pidfs inode ([`self_pidfs_ino`]): 0 = not known yet (or reset in a forked
/// child), [`NO_PIDFS`] = none.
static SELF_INO: AtomicU64 = AtomicU64::new(0);
const NO_PIDFS: u64 = u64::MAX;
static ATFORK: Once = Once::new();
/// This process's fork generation ([`fork_generation`]); 0 = not known yet.
static GEN: AtomicU32 = AtomicU32::new(0);

extern "C" fn after_fork_in_child() {
    PID.store(0, Ordering::Relaxed);
    SELF_START.store(0, Ordering::Relaxed);
    SELF_INO.store(0, Ordering::Relaxed);
    // One more than the parent's (never 0, which means "not known").
    let g = GEN.load(Ordering::Relaxed).wrapping_add(1);
    GEN.store(g.max(1), Ordering::Relaxed);
}

/// Register [`after_fork_in_child`] (once per program; children inherit it).
fn watch_forks() {
    ATFORK.call_once(|| {
        // SAFETY: registering a handler that only stores to atomics (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

/// Which process this is, to the memory it may have inherited: one more than its parent's
/// generation, counted by a `pthread_atfork` child handler (no system call). What a process
/// records in its own memory (a handle's cached registration, a guard) is copied only into its
/// descendants by `fork`, whose generations are all larger, so comparing generations tells
/// "made by this process" from "inherited", also in a descendant that got a dead ancestor's
/// pid (pids are reused). Never 0. (Wraps after 2^32 nested forks; a raw `clone`/`SYS_fork`
/// child bypasses the handler and must not use the lock, see the module docs.)
#[inline]
pub(crate) fn fork_generation() -> u32 {
    let g = GEN.load(Ordering::Relaxed);
    if g != 0 {
        return g;
    }
    fork_generation_slow()
}

#[cold]
fn fork_generation_slow() -> u32 {
    // The handler is in place before any value is returned, so every later fork counts.
    watch_forks();
    let _ = GEN.compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed);
    GEN.load(Ordering::Relaxed)
}

/// This process's pid, cached without a syscall per call. A `pthread_atfork` child handler
/// resets the cache, so a child made with `fork(3)` sees its own pid. (A child made with a raw
/// `clone`/`SYS_fork` syscall bypasses the handler and must not use the lock; see the module
/// docs.)
#[inline]
pub(crate) fn current_pid() -> u32 {
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    current_pid_slow()
}

#[cold]
fn current_pid_slow() -> u32 {
    watch_forks();
    // SAFETY: getpid has no preconditions.
    let p = unsafe { libc::getpid() } as u32;
    PID.store(p, Ordering::Relaxed);
    p
}

/// Bits of a participant identity that hold the pid (Linux pids are < 2^22).
pub(crate) const PID_BITS: u32 = 24;
const PID_MASK: u64 = (1 << PID_BITS) - 1;

/// A participant identity: the pid plus the process start time (`/proc/<pid>/stat` field 22,
/// clock ticks since boot), which tells a reused pid apart. Never 0.
pub(crate) fn make_ident(pid: u32, start: u64) -> u64 {
    (start << PID_BITS) | (u64::from(pid) & PID_MASK)
}

/// The pid inside an identity.
pub(crate) fn ident_pid(ident: u64) -> u32 {
    (ident & PID_MASK) as u32
}

fn ident_start(ident: u64) -> u64 {
    ident >> PID_BITS
}

/// This process's identity.
pub(crate) fn self_ident() -> u64 {
    let pid = current_pid();
    let cached = SELF_START.load(Ordering::Relaxed);
    if cached != 0 && ident_pid(cached) == pid {
        return cached;
    }
    let start = match read_stat(pid) {
        Stat::Found { start, .. } => start,
        // /proc not mounted or hidden: fall back to start time 0 (pid reuse then goes undetected
        // for this process; documented).
        _ => 0,
    };
    let id = make_ident(pid, start);
    SELF_START.store(id, Ordering::Relaxed);
    id
}

/// `PIDFS_MAGIC` (`include/uapi/linux/magic.h`): the file system of pidfds since Linux 6.9.
const PIDFS_MAGIC: u64 = 0x5049_4446;

/// What a pidfd says about a pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PidIno {
    /// The pidfs inode of the process that has the pid now: unique for the boot, never reused
    /// (`pidfd_open(2)`; pidfs, Linux 6.9+).
    Ino(u64),
    /// `pidfd_open` said `ESRCH`: no such process.
    Gone,
    /// No answer: no pidfs (older kernel: every pidfd shares one anonymous inode), no
    /// `pidfd_open` (before 5.3, or refused by a seccomp filter), out of descriptors, a pid
    /// that is not a thread-group leader (`EINVAL`), ...
    Unknown,
}

/// The pidfs inode of `pid` (see [`PidIno`]).
fn pidfs_ino(pid: u32) -> PidIno {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => PidIno::Gone,
            _ => PidIno::Unknown,
        };
    }
    let fd = fd as libc::c_int;
    // SAFETY: all-zero `statfs`/`stat` are valid out-parameters; `fd` is ours, closed once.
    let ino = unsafe {
        let mut sfs: libc::statfs = core::mem::zeroed();
        let mut st: libc::stat = core::mem::zeroed();
        let ino = if libc::fstatfs(fd, &mut sfs) == 0
            && sfs.f_type as u64 == PIDFS_MAGIC
            && libc::fstat(fd, &mut st) == 0
        {
            PidIno::Ino(st.st_ino as u64)
        } else {
            PidIno::Unknown
        };
        libc::close(fd);
        ino
    };
    match ino {
        PidIno::Ino(0 | NO_PIDFS) => PidIno::Unknown,
        other => other,
    }
}

/// This process's pidfs inode, to record in its participant slot (`ParticipantSlot::pidfs_ino`);
/// 0 if the kernel has no pidfs (or `pidfd_open` is not allowed).
pub(crate) fn self_pidfs_ino() -> u64 {
    let pid = current_pid();
    let cached = SELF_INO.load(Ordering::Relaxed);
    if cached != 0 {
        return if cached == NO_PIDFS { 0 } else { cached };
    }
    let ino = match pidfs_ino(pid) {
        PidIno::Ino(i) => i,
        _ => NO_PIDFS,
    };
    SELF_INO.store(ino, Ordering::Relaxed);
    if ino == NO_PIDFS {
        0
    } else {
        ino
    }
}

/// What `/proc/<pid>/stat` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stat {
    /// No such process.
    NotFound,
    /// Exists but cannot be read (e.g. `hidepid`).
    Unreadable,
    /// Process state letter (field 3), number of threads (field 20) and start time
    /// (field 22).
    Found { state: u8, threads: u64, start: u64 },
}

/// Read `/proc/<pid>/stat` without allocating.
pub(crate) fn read_stat(pid: u32) -> Stat {
    let mut path = [0u8; 32];
    let prefix = b"/proc/";
    path[..prefix.len()].copy_from_slice(prefix);
    let mut n = prefix.len();
    let mut digits = [0u8; 10];
    let mut d = 0;
    let mut v = pid;
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        path[n] = digits[d];
        n += 1;
    }
    let suffix = b"/stat\0";
    path[n..n + suffix.len()].copy_from_slice(suffix);
    // SAFETY: `path` is NUL-terminated.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) => Stat::NotFound,
            _ => Stat::Unreadable,
        };
    }
    let mut buf = [0u8; 1024];
    let mut len = 0usize;
    let mut err = None;
    while len < buf.len() {
        // SAFETY: reading into the unused tail of our own buffer.
        let r = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if r < 0 {
            let e = std::io::Error::last_os_error().raw_os_error();
            if e == Some(libc::EINTR) {
                continue;
            }
            err = e;
            break;
        }
        if r == 0 {
            break;
        }
        len += r as usize;
    }
    // SAFETY: `fd` is ours and open.
    unsafe { libc::close(fd) };
    if len == 0 {
        // ESRCH (or EOF): the process went away between open and read. Any other error
        // (ENOMEM, EIO, ...) proves nothing: presume alive.
        return match err {
            None | Some(libc::ESRCH) => Stat::NotFound,
            Some(_) => Stat::Unreadable,
        };
    }
    parse_stat(&buf[..len]).unwrap_or(Stat::Unreadable)
}

fn parse_stat(buf: &[u8]) -> Option<Stat> {
    // comm (field 2) may contain spaces and parentheses: fields resume after the last ')'.
    let close = buf.iter().rposition(|&b| b == b')')?;
    let mut fields = buf[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?; // field 3
    let threads = number(fields.nth(16)?)?; // field 20
    let start = number(fields.nth(1)?)?; // field 22
    Some(Stat::Found {
        state,
        threads,
        start,
    })
}

/// A decimal field of `/proc/<pid>/stat` (`None` if it is not one).
fn number(field: &[u8]) -> Option<u64> {
    let digits = field.strip_suffix(b"\n").unwrap_or(field);
    if digits.is_empty() {
        return None;
    }
    let mut v = 0u64;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

/// Is the process with this identity gone? Zombies count as gone (they run no more code);
/// a live process whose pid matches but whose start time differs is a reused pid, so the
/// identity is gone. A process that exists but whose `/proc` entry cannot be read (or is not
/// visible: `hidepid=2` answers `ENOENT` for another user's process) is presumed alive (never
/// steal from a process we cannot prove dead). A stopped process is alive.
///
/// `ino` is the pidfs inode the participant recorded ([`self_pidfs_ino`]), 0 if unknown. Start
/// times are in clock ticks (10 ms), so a pid reused within the tick its first holder started
/// in (`clone3` with `set_tid`, or a busy machine wrapping `pid_max`) looks the same in
/// `/proc`; its pidfs inode does not (each process gets its own for the boot).
///
/// `/proc/<pid>/stat` describes the thread-group leader: a leader that ended alone (the main
/// thread called `pthread_exit` or `SYS_exit`) shows `Z` while the other threads still run,
/// so a zombie is dead only when it has no other thread left (field 20 is then 1, or 0 once
/// it is being reaped).
pub(crate) fn ident_dead(ident: u64, ino: u64) -> bool {
    let pid = ident_pid(ident);
    if pid == 0 {
        return false;
    }
    if pid == current_pid() {
        // Our own pid: alive if it is really us, dead if it is a predecessor with our pid (in
        // the same start tick only its inode tells).
        if ident != self_ident() {
            return true;
        }
        let mine = self_pidfs_ino();
        return ino != 0 && mine != 0 && ino != mine;
    }
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return true;
    }
    if ino != 0 {
        // A process keeps its pid (and pidfs inode) until it is reaped: another inode behind
        // the pid now means ours has gone. (Zombies are left to the `/proc` check below.)
        match pidfs_ino(pid) {
            PidIno::Gone => return true,
            PidIno::Ino(now) if now != ino => return true,
            _ => {}
        }
    }
    // It existed just now (0 or EPERM): a missing /proc entry is hidden, or the process has
    // gone since, which the next probe's kill() will tell.
    match read_stat(pid) {
        Stat::NotFound | Stat::Unreadable => false,
        Stat::Found {
            state,
            threads,
            start,
        } => {
            (matches!(state, b'Z' | b'X' | b'x') && threads <= 1)
                || (ident_start(ident) != 0 && start != ident_start(ident))
        }
    }
}

/// Is the process with this identity stopped (`T`, job control or a signal, or `t`, traced)?
/// Such a process runs no code until it is continued.
pub(crate) fn ident_stopped(ident: u64) -> bool {
    let pid = ident_pid(ident);
    pid != 0
        && pid != current_pid()
        && matches!(read_stat(pid), Stat::Found { state: b'T' | b't', start, .. }
            if ident_start(ident) == 0 || start == ident_start(ident))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        let line = b"1234 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 19 20\n";
        assert_eq!(
            parse_stat(line),
            Some(Stat::Found {
                state: b'S',
                threads: 17,
                start: 987654
            })
        );
        // A comm that imitates the fields: only the last ')' counts.
        let line = b"7 (x) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 1 18 5) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 3 18 42 19\n";
        assert_eq!(
            parse_stat(line),
            Some(Stat::Found {
                state: b'R',
                threads: 3,
                start: 42
            })
        );
        // Truncated or non-numeric: unreadable, never a made-up start time.
        assert_eq!(parse_stat(b"1 (a) S 1 2 3"), None);
        assert_eq!(
            parse_stat(b"1 (a) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 ? 19"),
            None
        );
    }

    #[test]
    fn zombie_leader_with_live_threads_is_alive() {
        // The child's main thread leaves with SYS_exit (no unwinding) while another thread
        // keeps running: /proc shows the leader as `Z`, but the process is alive.
        extern "C" fn linger(_: *mut libc::c_void) -> *mut libc::c_void {
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 300_000_000,
            };
            // SAFETY: a valid timespec; then end the whole child process.
            unsafe {
                libc::nanosleep(&ts, core::ptr::null_mut());
                libc::_exit(0)
            }
        }
        // SAFETY: the child (of a possibly multi-threaded test process) only makes raw libc
        // calls: pthread_create, then SYS_exit of its main thread.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: a plain thread running `linger`; SYS_exit ends only the calling thread,
            // without unwinding.
            unsafe {
                let mut t: libc::pthread_t = core::mem::zeroed();
                if libc::pthread_create(&mut t, core::ptr::null(), linger, core::ptr::null_mut())
                    != 0
                {
                    libc::_exit(1);
                }
                libc::syscall(libc::SYS_exit, 0);
            }
            unreachable!();
        }
        let pid = pid as u32;
        let start = match read_stat(pid) {
            Stat::Found { start, .. } => start,
            other => panic!("{other:?}"),
        };
        let ident = make_ident(pid, start);
        let t = std::time::Instant::now();
        loop {
            match read_stat(pid) {
                Stat::Found {
                    state: b'Z',
                    threads,
                    ..
                } if threads > 1 => break,
                _ if t.elapsed() > std::time::Duration::from_millis(200) => break,
                _ => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        let ino = match pidfs_ino(pid) {
            PidIno::Ino(i) => i,
            _ => 0,
        };
        assert!(
            !ident_dead(ident, ino),
            "a process with a running thread taken for dead"
        );
        let mut st = 0;
        // SAFETY: our child.
        unsafe { libc::waitpid(pid as libc::pid_t, &mut st, 0) };
        assert!(ident_dead(ident, ino));
    }

    #[test]
    fn self_is_alive_and_ident_roundtrips() {
        let me = self_ident();
        assert_eq!(ident_pid(me), std::process::id());
        assert!(!ident_dead(me, 0));
        // Same pid, other start time: a predecessor with our pid, so dead.
        assert!(ident_dead(
            make_ident(ident_pid(me), ident_start(me) + 1),
            0
        ));
    }

    #[test]
    fn pidfs_inode_tells_processes_apart() {
        let me = self_ident();
        let ino = self_pidfs_ino();
        assert!(!ident_dead(me, ino));
        if ino == 0 {
            return; // no pidfs: nothing more to tell
        }
        // Our pid and start time with another inode: a predecessor within our start tick.
        assert!(ident_dead(me, ino + 1));
        // Another live process: alive with its own inode, dead with another one.
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = match read_stat(pid) {
            Stat::Found { start, .. } => start,
            other => panic!("{other:?}"),
        };
        let PidIno::Ino(cino) = pidfs_ino(pid) else {
            panic!("no pidfs inode for a live child")
        };
        assert_ne!(cino, ino);
        assert!(!ident_dead(make_ident(pid, start), cino));
        assert!(ident_dead(make_ident(pid, start), cino + 1));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(ident_dead(make_ident(pid, start), cino));
    }
}
