//! Child processes for the multi-process tests (`harness = false` binaries that fork from a
//! single-threaded main): fork a closure, wait for it with or without a limit, signal it, and
//! run a list of named cases under libtest's command line.

use super::Deadline;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// Fork; the child runs `f` and exits with its code (101 if it panicked).
pub fn fork(f: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the callers fork only while their process is single-threaded (see each test
    // binary's module docs).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = catch_unwind(AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: leave the child at once, without the parent's atexit work.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Wait for a child; its raw `waitpid` status.
pub fn reap(pid: libc::pid_t) -> i32 {
    let mut st = 0;
    // SAFETY: our own child.
    let r = unsafe { libc::waitpid(pid, &mut st, 0) };
    assert_eq!(r, pid, "waitpid");
    st
}

/// A `waitpid` status as an exit code, or 128 + signal.
pub fn exit_code(st: i32) -> i32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        128 + libc::WTERMSIG(st)
    }
}

/// The raw `waitpid` status of a child that has exited, or `None` if it is still running
/// (`WNOHANG`).
pub fn try_reap(pid: libc::pid_t) -> Option<i32> {
    let mut st = 0;
    // SAFETY: our own child.
    let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
    (r == pid).then_some(st)
}

/// Wait for a child; its exit code, or 128 + signal.
pub fn wait(pid: libc::pid_t) -> i32 {
    exit_code(reap(pid))
}

/// Wait for a child at most `limit`; kill it (continuing it first if it is stopped) and fail
/// if it takes longer (a deadlock). Its exit code, or 128 + signal.
pub fn wait_limit(pid: libc::pid_t, limit: Duration, what: &str) -> i32 {
    let deadline = Deadline::after(limit);
    loop {
        if let Some(st) = try_reap(pid) {
            return exit_code(st);
        }
        if deadline.passed() {
            signal(pid, libc::SIGKILL);
            signal(pid, libc::SIGCONT);
            reap(pid);
            panic!("{what}: child {pid} still running after {limit:?} (deadlock?)");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Send `sig` to a child.
pub fn signal(pid: libc::pid_t, sig: i32) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, sig) };
}

/// Wait until a child has stopped (SIGSTOP, or a `gomutex::__crash::stop_at` point).
pub fn wait_stopped(pid: libc::pid_t) {
    let mut st = 0;
    // SAFETY: our own child.
    let r = unsafe { libc::waitpid(pid, &mut st, libc::WUNTRACED) };
    assert_eq!(r, pid);
    assert!(libc::WIFSTOPPED(st), "child {pid} did not stop: {st:#x}");
}

/// SIGKILL a child.
pub fn kill9(pid: libc::pid_t) {
    signal(pid, libc::SIGKILL);
}

/// Run the named cases under libtest's command line and output (libtest-mimic: `--list`,
/// filters, `--exact`, `--skip`, `--ignored`, cargo-nextest's protocol), then exit with its
/// verdict (101 if a case failed). The cases run one after another on the main thread whatever
/// `--test-threads` asks: they fork, which is safe only while the process is single-threaded,
/// and a case that kills or measures processes must not share the machine with another.
pub fn run_cases(binary: &str, args: &[String], cases: &[(&str, fn())]) -> ! {
    let mut opts = libtest_mimic::Arguments::from_iter(
        std::iter::once(binary).chain(args.iter().map(|a| a.as_str())),
    );
    if opts.test_threads.is_some_and(|n| n != 1) {
        eprintln!("{binary}: cases fork, so they run one at a time (--test-threads ignored)");
    }
    opts.test_threads = Some(1);
    let trials = cases
        .iter()
        .map(|&(name, f)| {
            libtest_mimic::Trial::test(name, move || {
                f();
                Ok(())
            })
        })
        .collect();
    libtest_mimic::run(&opts, trials).exit()
}

/// `CLOCK_MONOTONIC` in ns (the clock the lock's own timestamps use), for the tortures' stall
/// checks and seeds.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
