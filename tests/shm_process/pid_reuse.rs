//! Pid reuse: a process that inherited a handle or a guard from a dead ancestor and got that
//! ancestor's pid is not that ancestor. Each case runs in a pid namespace of its own (with its
//! own `/proc`), where nothing but the test forks, so writing `ns_last_pid` before a `fork`
//! gives the child exactly the pid wanted. Needs root (`unshare(CLONE_NEWPID | CLONE_NEWNS)`);
//! elsewhere the cases print why they are skipped and pass.

use super::common::anon::AnonShared;
use super::common::procs::{exit_code, fork, reap, wait};
use gomutex::shm::{LockError, ShmMutex, TryLockError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// Exit code of the namespace's first process when the namespace cannot be made.
const NO_NAMESPACE: i32 = 77;

/// Run `f` as pid 1 of a new pid namespace that has its own `/proc` (the lock reads
/// `/proc/<pid>/stat` with the pids of its own namespace). `None` if the namespace cannot be
/// made (not root, or refused by a sandbox); otherwise `f`'s exit code.
fn in_pid_namespace(f: impl FnOnce() -> i32) -> Option<i32> {
    let outer = fork(|| {
        // SAFETY: plain system calls in a single-threaded child; the results are checked.
        unsafe {
            if libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS) != 0 {
                return NO_NAMESPACE;
            }
            // Our mounts must not propagate to the host's mount namespace.
            if libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                core::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                core::ptr::null(),
            ) != 0
            {
                return NO_NAMESPACE;
            }
        }
        // The first child is pid 1 of the new namespace: it mounts that namespace's /proc.
        let init = fork(|| {
            // SAFETY: as above.
            let r = unsafe {
                libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    core::ptr::null(),
                )
            };
            if r != 0 || std::process::id() != 1 {
                return NO_NAMESPACE;
            }
            f()
        });
        wait(init)
    });
    match wait(outer) {
        NO_NAMESPACE => None,
        code => Some(code),
    }
}

/// Inside [`in_pid_namespace`]: fork a child that gets exactly `pid` (free by now), running
/// `f`. Nothing else forks in the namespace, so the next pid is `ns_last_pid + 1`.
fn fork_as(pid: i32, f: impl FnOnce() -> i32) -> i32 {
    std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1))
        .expect("write ns_last_pid");
    let child = fork(f);
    assert_eq!(child, pid, "the child did not get the pid wanted");
    child
}

/// Skip message for a case that needs a pid namespace.
fn skipped(name: &str) {
    println!("  {name}: skipped (needs root for unshare(CLONE_NEWPID | CLONE_NEWNS))");
}

/// Wait (bounded) until pid `pid` names no process: reaped by its parent.
fn until_gone(pid: i32) {
    let t = Instant::now();
    // SAFETY: signal 0 only checks existence.
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "{pid} still there");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Issue 22, defect 1. P registers with a lock, forks C (which never uses it) and exits; C
/// forks G, which gets P's pid and inherits P's handle, cached registration included. G is not
/// P: it registers as itself, so when it holds the lock nobody takes the lock from it as
/// from the dead P, and its unlock releases its own lock.
pub fn reused_pid_does_not_inherit_registration() {
    let code = in_pid_namespace(|| {
        let m = ShmMutex::anonymous(0u64).unwrap();
        // 0: G holds the lock; 1: G may unlock.
        let flags = AnonShared::counters(2);
        let p = fork_as(2, || {
            m.join().unwrap(); // registered: the handle caches P's participant slot
            fork(|| {
                until_gone(2); // P exited and was reaped: its pid is free
                               // Another start-time tick than P's: only the fix, not the clock, tells them apart.
                std::thread::sleep(Duration::from_millis(20));
                let g = fork_as(2, || {
                    let mut guard = m.lock().unwrap_or_else(LockError::into_inner);
                    *guard += 1;
                    flags.at(0).store(1, SeqCst);
                    while flags.at(1).load(SeqCst) == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    drop(guard);
                    0
                });
                wait(g)
            });
            0 // leave at once, registered and without dropping the handle
        });
        assert_eq!(wait(p), 0);
        let t = Instant::now();
        while flags.at(0).load(SeqCst) == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "G never locked");
            std::thread::sleep(Duration::from_micros(200));
        }
        // Recover the dead P now: its slot held nothing, so G's lock stays G's.
        m.recover();
        let stolen = match m.try_lock() {
            Err(TryLockError::WouldBlock) => 0,
            Ok(_) | Err(TryLockError::OwnerDied(_)) | Err(TryLockError::Poisoned(_)) => 1,
        };
        flags.at(1).store(1, SeqCst);
        // C (pid 3) reports G's exit code.
        let c = reap_any();
        assert_eq!(c, 0, "G (or C) failed: {c}");
        assert!(!m.is_locked());
        assert_eq!(*m.lock().unwrap(), 1);
        stolen
    });
    match code {
        None => skipped("reused_pid_does_not_inherit_registration"),
        Some(c) => assert_eq!(
            c, 0,
            "the lock held by a reused pid was taken as the dead's"
        ),
    }
}

/// Reap the only child left (C, reparented children reaped on the way); its exit code.
fn reap_any() -> i32 {
    let t = Instant::now();
    loop {
        let mut st = 0;
        // SAFETY: waiting for any child of ours.
        let r = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if r == 3 {
            return exit_code(st);
        }
        assert!(r >= 0, "no child left");
        assert!(t.elapsed() < Duration::from_secs(10), "C still running");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Issue 22, defect 2. P holds the lock and forks C, which inherits the guard; P dies holding
/// it and another process (here pid 1) takes the lock over. C forks G, which gets P's pid:
/// the inherited guard is not the owner in G either (`is_owner()` false, the value not
/// reachable through it), and dropping it releases nothing.
pub fn reused_pid_does_not_own_inherited_guard() {
    let code = in_pid_namespace(|| {
        let m = ShmMutex::anonymous(7u64).unwrap();
        // 0: pid 1 holds the lock after P's death.
        let flags = AnonShared::counters(1);
        let p = fork_as(2, || {
            let guard = m.lock().unwrap();
            let g = &guard;
            fork(|| {
                while flags.at(0).load(SeqCst) == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                std::thread::sleep(Duration::from_millis(20)); // another start tick than P's
                let g = fork_as(2, || {
                    let mut code = 0;
                    if g.is_owner() {
                        code |= 1;
                    }
                    std::panic::set_hook(Box::new(|_| {}));
                    if catch_unwind(AssertUnwindSafe(|| **g)).is_ok() {
                        code |= 2;
                    }
                    let _ = std::panic::take_hook();
                    // SAFETY: a bitwise copy in G's own memory; the original is never dropped
                    // in G (it leaves with _exit).
                    drop(unsafe { std::ptr::read(g) });
                    code
                });
                wait(g)
            });
            std::mem::forget(guard);
            0 // die holding the lock
        });
        assert_eq!(reap(p), 0);
        // The supervisor's recovery right after waitpid; then pid 1 owns the lock.
        assert!(m.force_unlock(p), "{:?}", m.diagnostics());
        let held = match m.lock() {
            Err(LockError::OwnerDied(g)) => g,
            other => panic!("expected OwnerDied, got {:?}", other.map(|g| *g)),
        };
        held.mark_consistent();
        flags.at(0).store(1, SeqCst);
        let c = reap_any(); // C (pid 3) reports G's exit code
        let mut code = c;
        if !m.is_locked() || m.diagnostics().owner_pid != Some(1) {
            code |= 4; // G's drop released pid 1's lock
        }
        if code != 0 {
            // Not ours any more (G released it): unlocking would abort this process.
            std::mem::forget(held);
            return code;
        }
        assert_eq!(*held, 7);
        drop(held);
        0
    });
    match code {
        None => skipped("reused_pid_does_not_own_inherited_guard"),
        Some(c) => assert_eq!(
            c, 0,
            "1: is_owner() in G; 2: G reached the value; 4: G's drop released the lock"
        ),
    }
}
