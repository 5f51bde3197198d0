//! Unit tests of [`ShmAcceptMutex`](super::ShmAcceptMutex): the accept protocol on the
//! shared-memory lock, across `fork()` and a holder's death.

use super::*;
use crate::accept::{AcceptLock, Config};
/// Across processes: a child takes the shm accept lock and dies holding it; the parent, as
/// a supervisor, reaps it and force-unlocks; the next holder is told the owner died.
#[test]
fn shm_force_unlock_after_death_reports_owner_died() {
    let lock = ShmMutex::anonymous(()).unwrap();
    // SAFETY: the child only takes the lock and leaves with _exit (no allocation-heavy or
    // lock-taking std code of other threads runs in it).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut a = AcceptLock::new(ShmAcceptMutex::new(&lock), Config::nginx());
        let code = if a.begin_iteration(false).armed { 0 } else { 1 };
        std::mem::forget(a); // die holding it
                             // SAFETY: leaving the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    assert!(lock.is_locked(), "the dead child still holds it");
    assert!(ForceUnlock::force_unlock(&lock, pid));
    assert!(!ForceUnlock::force_unlock(&lock, pid), "only once");
    let mut b = AcceptLock::new(ShmAcceptMutex::new(&lock), Config::nginx());
    assert!(b.begin_iteration(false).armed);
    b.end_accept_phase();
    assert!(b.begin_iteration(false).armed);
    b.end_accept_phase();
    assert_eq!(b.stats().owner_died, 1, "told once, then marked consistent");
    assert_eq!(b.stats().acquisitions, 2);
}

/// `ShmAcceptMutex` used through the trait directly: it holds the lock without a guard
/// between `try_lock` and `unlock`, `unlock` through a handle that holds nothing does
/// nothing, dropping a holding handle releases, and so does another thread's `unlock`.
#[test]
fn shm_accept_mutex_holds_between_calls() {
    let lock = ShmMutex::anonymous(()).unwrap();
    let a = ShmAcceptMutex::new(&lock);
    let b = ShmAcceptMutex::new(&lock);
    assert_eq!(AcceptMutex::try_lock(&a), Some(Acquired::Clean));
    assert!(format!("{a:?}").contains("held: true"), "{a:?}");
    assert_eq!(AcceptMutex::try_lock(&b), None);
    assert_eq!(b.lock_for(Duration::from_millis(2)), None);
    // SAFETY: `b` holds nothing: a no-op by design (the contract is the caller's business).
    unsafe { b.unlock() };
    assert!(
        lock.is_locked(),
        "a handle that holds nothing released the lock"
    );
    std::thread::scope(|s| {
        // SAFETY: `a` holds the lock; moved to another thread of the same process to release.
        s.spawn(move || unsafe { a.unlock() });
    });
    assert!(!lock.is_locked());
    assert_eq!(b.lock_for(Duration::from_millis(2)), Some(Acquired::Clean));
    drop(b);
    assert!(!lock.is_locked(), "dropping a holding handle must release");
    assert!(!lock.is_poisoned() && !lock.owner_died());
}

/// A `ShmAcceptMutex` copied into a child by `fork()` while the parent held the lock through
/// it holds nothing in the child: dropping it there must not release the lock the child
/// later holds through a live guard of its own (nor trip "acquired twice").
#[test]
fn shm_accept_mutex_inherited_across_fork_holds_nothing() {
    let lock = ShmMutex::anonymous(0u64).unwrap();
    let a = ShmAcceptMutex::new(&lock);
    assert_eq!(AcceptMutex::try_lock(&a), Some(Acquired::Clean));
    // SAFETY: the child only takes and checks the lock and leaves with _exit (no
    // allocation-heavy or lock-taking std code of other threads runs in it).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // Waits for the parent's release below.
        let g = lock.lock().unwrap();
        drop(a);
        let mut code = if lock.is_locked() { 0 } else { 1 };
        drop(g);
        let b = ShmAcceptMutex::new(&lock);
        if AcceptMutex::try_lock(&b) != Some(Acquired::Clean) {
            code |= 2;
        }
        drop(b);
        if lock.is_locked() {
            code |= 4;
        }
        // SAFETY: leaving the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: `a` holds the lock (acquired above, in this process).
    unsafe { a.unlock() };
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "{status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "1: the inherited handle released the child's lock; 2, 4: a second handle failed"
    );
    assert!(!lock.is_locked());
}

/// Issue 22, defect 3: an `AcceptLock` copied by `fork()` in the middle of an accept phase
/// holds nothing in the child: it reports no lock, its next iteration loses to the parent
/// (and disarms the sockets it inherited armed), and ending the phase or dropping it releases
/// nothing. The parent still holds the lock throughout.
#[test]
#[cfg_attr(
    miri,
    ignore = "a MAP_SHARED mapping and fork(): Miri supports neither"
)]
fn accept_lock_forked_mid_phase_holds_nothing() {
    let lock = ShmMutex::anonymous(()).unwrap();
    let mut a = AcceptLock::new(ShmAcceptMutex::new(&lock), Config::nginx());
    assert!(a.begin_iteration(false).armed && a.holds_lock());
    // SAFETY: the child only uses the lock and leaves with _exit (no allocation-heavy or
    // lock-taking std code of other threads runs in it).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut code = 0;
        if a.holds_lock() {
            code |= 1;
        }
        let d = a.begin_iteration(false);
        if d.armed || a.holds_lock() {
            code |= 2;
        }
        if !d.changed || a.is_armed() {
            code |= 4;
        }
        a.end_accept_phase();
        drop(a);
        if !lock.is_locked() {
            code |= 8;
        }
        // SAFETY: leaving the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "{status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "1: the child's copy held the lock; 2: it armed; 4: it kept the sockets armed; \
         8: it released the parent's lock"
    );
    assert!(a.holds_lock() && lock.is_locked());
    a.end_accept_phase();
    assert!(!lock.is_locked());
}
