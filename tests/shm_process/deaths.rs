//! Owner deaths and their reports: detected by a waiter, a poller or `force_unlock`, repaired
//! with `lock_or_repair`; waiters killed in the queue; panics, `fork` and leaked guards while
//! holding; a stopped owner that is alive.

use super::common;
use super::common::anon::AnonShared;
use super::common::procs::{fork, kill9, wait, wait_limit};
use super::common::shmtest::{assert_quiescent, ok};
use super::fork_holder;
use gomutex::shm::{LockError, ShmMutex, ShmMutexGuard, TryLockError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// The holder is SIGKILLed mid-update; a waiter (no supervisor) takes over within a bounded
/// time and is told, and keeps being told until it marks the data consistent.
pub fn owner_death_detected_by_waiter() {
    let m = ShmMutex::anonymous([0u64; 2]).unwrap();
    let victim = fork_holder(&m, false, |v| v[0] += 1); // torn: b not updated
                                                        // A waiter in another process blocks on the lock, then the holder dies.
    let waiter = fork(|| match m.lock() {
        Err(LockError::OwnerDied(g)) => {
            assert_eq!(g[0], g[1] + 1, "saw the torn update");
            // Do not repair: the next owner must be told too.
            drop(g);
            0
        }
        Ok(_) => 2,
        Err(LockError::Poisoned(_)) => 3,
    });
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    kill9(victim);
    assert_eq!(wait(waiter), 0, "waiter was not told the owner died");
    let took = t.elapsed();
    println!("    waiter took over {took:?} after the kill (no supervisor)");
    assert!(took < Duration::from_secs(2), "detection took {took:?}");
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    // Still reported to the next owner (the flag persists until mark_consistent).
    match m.lock() {
        Err(LockError::OwnerDied(mut g)) => {
            g[1] = g[0];
            g.mark_consistent();
        }
        other => panic!("not reported again: {:?}", other.map(|_| ())),
    }
    assert!(ok(m.lock())[0] == 1);
    let d = m.diagnostics();
    assert_eq!(d.owner_deaths, 1);
    assert!(!d.owner_died);
    m.recover();
    assert_quiescent(&m);
}

/// A supervisor that reaped the owner calls force_unlock: the lock is free at once, the next
/// owner is told. force_unlock of a pid that did not hold it returns false.
pub fn force_unlock_after_waitpid() {
    let m = ShmMutex::anonymous(7u32).unwrap();
    let victim = fork_holder(&m, false, |_| {});
    assert!(!m.force_unlock(victim as u32), "alive: must be left alone");
    assert!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)));
    kill9(victim);
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    let t = Instant::now();
    assert!(m.force_unlock(victim as u32), "it held the lock");
    match m.try_lock() {
        Err(TryLockError::OwnerDied(g)) => g.mark_consistent(),
        other => panic!("{:?}", other.map(|_| ())),
    }
    println!("    force_unlock + try_lock took {:?}", t.elapsed());
    assert!(!m.force_unlock(victim as u32), "already recovered");
    let idle = fork(|| 0);
    assert_eq!(wait(idle), 0);
    assert!(!m.force_unlock(idle as u32), "never held it");
    assert!(matches!(m.try_lock(), Ok(g) if *g == 7));
    assert_quiescent(&m);
}

/// `lock_or_repair` after an owner killed mid-update: the repair runs once, on the value the
/// dead owner left, and later owners get a clean lock. `force_unlock` takes the `pid_t`
/// `fork` returned as it is.
pub fn lock_or_repair_after_owner_death() {
    let m = ShmMutex::anonymous([5u64, 5]).unwrap();
    let victim = fork_holder(&m, false, |v| v[0] += 1); // half of a two-word update
    kill9(victim);
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    assert!(m.force_unlock(victim), "it held the lock");
    let mut repaired = 0;
    let g = m.lock_or_repair(|v| {
        repaired += 1;
        assert_eq!(*v, [6, 5]);
        v[0] = v[1];
    });
    assert_eq!(*g, [5, 5]);
    drop(g);
    assert_eq!(*m.lock_or_repair(|_| repaired += 1), [5, 5]);
    assert_eq!(repaired, 1);
    assert!(!m.owner_died() && !m.is_poisoned());
    assert!(m.lock().is_ok());
    assert!(!m.force_unlock(-1), "no pid");
    assert_quiescent(&m);
}

/// Polling users (try_lock only, like an accept lock) recover from a dead owner too.
pub fn try_lock_polling_detects_dead_owner() {
    let m = ShmMutex::anonymous(0u32).unwrap();
    let victim = fork(|| {
        std::mem::forget(ok(m.lock()));
        // SAFETY: die holding the lock.
        unsafe { libc::raise(libc::SIGKILL) };
        0
    });
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    let t = Instant::now();
    loop {
        match m.try_lock() {
            Err(TryLockError::OwnerDied(g)) => {
                g.mark_consistent();
                break;
            }
            Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_micros(200)),
            other => panic!("{:?}", other.map(|_| ())),
        }
        assert!(t.elapsed() < Duration::from_secs(2), "never recovered");
    }
    println!("    polling try_lock recovered after {:?}", t.elapsed());
}

/// Waiters killed while queued leave the count and the queue; the survivor still gets the
/// lock.
pub fn queued_waiters_killed() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let g = ok(m.lock());
    let kids: Vec<_> = (0..4)
        .map(|_| {
            fork(|| {
                *ok(m.lock()) += 1;
                0
            })
        })
        .collect();
    common::poll_until(
        Duration::from_secs(5),
        Duration::from_millis(1),
        || format!("4 queued: {:?}", m.diagnostics()),
        || m.diagnostics().queued_slots >= 4,
    );
    assert_eq!(m.diagnostics().waiters, 4);
    for &k in &kids[..3] {
        kill9(k);
        assert_eq!(wait(k), 128 + libc::SIGKILL);
    }
    // Recovery by the scan every waiter runs (no supervisor): wait for it.
    let t = Instant::now();
    common::poll_until(
        Duration::from_secs(2),
        Duration::from_millis(1),
        || format!("no phantom waiters: {:?}", m.diagnostics()),
        || {
            let d = m.diagnostics();
            d.waiters == 1 && d.queued_slots == 1
        },
    );
    println!("    dead waiters removed after {:?}", t.elapsed());
    drop(g);
    assert_eq!(wait(kids[3]), 0);
    assert_eq!(*ok(m.lock()), 1);
    assert_quiescent(&m);
    // The survivor left with _exit, keeping its participant slot: a scan reclaims it.
    assert_eq!(m.recover(), 1);
    assert_eq!(m.diagnostics().participants, 1);
}

/// A panic while holding the lock poisons it, across processes too.
pub fn panic_poisons() {
    // The panics below are intended: keep their messages out of the test output.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    type Hook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send>;
    struct Restore(Option<Hook>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(h) = self.0.take() {
                std::panic::set_hook(h);
            }
        }
    }
    let _restore = Restore(Some(hook));
    let m = ShmMutex::anonymous(0u32).unwrap();
    let child = fork(|| {
        let _g = ok(m.lock());
        panic!("poison it");
    });
    assert_eq!(wait(child), 101);
    assert!(m.is_poisoned());
    match m.lock() {
        Err(LockError::Poisoned(g)) => g.mark_consistent(),
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(!m.is_poisoned());
    // Same process, another thread.
    std::thread::scope(|s| {
        let _ = s
            .spawn(|| {
                let _g = ok(m.lock());
                panic!("poison again");
            })
            .join();
    });
    assert!(matches!(m.try_lock(), Err(TryLockError::Poisoned(_))));
    m.clear_poison();
    assert!(m.try_lock().is_ok());
}

/// Fork while holding: the child does not own the lock, cannot take it, and dropping its copy
/// of the guard does not release the parent's lock.
pub fn fork_while_holding() {
    let m = ShmMutex::anonymous(1u32).unwrap();
    let g = ok(m.lock());
    let parent = std::process::id();
    let child = fork(|| {
        assert!(!g.is_owner(), "child believes it owns the lock");
        assert!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)));
        assert!(m
            .try_lock_for(Duration::from_millis(30))
            .is_err_and(|e| matches!(e, TryLockError::WouldBlock)));
        assert_eq!(m.diagnostics().owner_pid, Some(parent));
        // The value is the parent's to touch: reaching it through the inherited guard panics.
        std::panic::set_hook(Box::new(|_| {}));
        assert!(catch_unwind(AssertUnwindSafe(|| *g)).is_err());
        let _ = std::panic::take_hook();
        // Drop the child's copy of the guard: must not release the parent's lock.
        // SAFETY: a bitwise copy in the child's own memory; the original is never dropped
        // here (the child leaves with _exit).
        drop(unsafe { std::ptr::read(&g) });
        assert!(m.is_locked(), "dropping the inherited guard unlocked");
        0
    });
    assert_eq!(wait(child), 0);
    assert!(g.is_owner());
    assert!(m.is_locked(), "the child released the parent's lock");
    assert_eq!(m.diagnostics().owner_pid, Some(parent));
    drop(g);
    assert!(!m.is_locked());
    assert!(m.try_lock().is_ok());
    m.recover();
    assert_quiescent(&m);
}

/// A lock held through a leaked guard (`ShmMutexGuard::leak`) is held like any other: a
/// process that dies with it is recovered (by a waiter's owner-death detection, or by
/// `force_unlock`), the next owner gets `OwnerDied`, and the flag stays until marked
/// consistent. `unlock_leaked` releases it from any thread of the holder, does nothing in a
/// forked child or where the lock is not held, and keeps the owner-died flag a leaked guard
/// was taken with.
pub fn leaked_guard() {
    let m = ShmMutex::anonymous([0u64; 2]).unwrap();
    // Dies holding a leaked guard, mid-update; a waiter detects it.
    let victim = fork_holder(&m, true, |v| v[0] += 1);
    let waiter = fork(|| match m.lock() {
        Err(LockError::OwnerDied(g)) => {
            assert_eq!(*g, [1, 0], "saw the torn update");
            // Leak it unrepaired: the flag must survive the leak and the raw unlock.
            ShmMutexGuard::leak(g);
            // SAFETY: this thread leaked the guard just now and holds no other.
            i32::from(!unsafe { m.unlock_leaked() }) * 2
        }
        Ok(_) => 3,
        Err(LockError::Poisoned(_)) => 4,
    });
    std::thread::sleep(Duration::from_millis(20));
    kill9(victim);
    assert_eq!(wait_limit(waiter, Duration::from_secs(5), "waiter"), 0);
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    assert!(m.owner_died(), "the flag did not survive the leaked guard");
    assert_eq!(*m.lock_or_repair(|v| v[1] = v[0]), [1, 1]);
    assert!(!m.owner_died());

    // Reaped by a supervisor: force_unlock releases a leaked guard's lock at once.
    let victim = fork(|| {
        ShmMutexGuard::leak(ok(m.lock()));
        0
    });
    assert_eq!(wait(victim), 0);
    assert!(m.is_locked(), "the exited child still holds it");
    assert!(m.force_unlock(victim), "it held the lock");
    match m.try_lock() {
        Err(TryLockError::OwnerDied(g)) => g.mark_consistent(),
        other => panic!("{:?}", other.map(|_| ())),
    }

    // Held here through a leaked guard: a forked child does not hold it (its unlock_leaked
    // does nothing), another thread of this process may release it.
    ShmMutexGuard::leak(ok(m.lock()));
    let child = fork(|| {
        // SAFETY: the child holds no guard; the call must see that the lock is not its own.
        let released = unsafe { m.unlock_leaked() };
        i32::from(released || !m.is_locked())
    });
    assert_eq!(wait(child), 0, "the child released the parent's lock");
    assert!(m.is_locked());
    std::thread::scope(|s| {
        // SAFETY: this process holds the lock through the guard leaked above, and no other.
        s.spawn(|| assert!(unsafe { m.unlock_leaked() }));
    });
    assert!(!m.is_locked());
    // SAFETY: no guard of `m` is alive or leaked: a no-op.
    let released = unsafe { m.unlock_leaked() };
    assert!(!released, "not held: nothing to release");
    assert_eq!(*ok(m.lock()), [1, 1]);
    assert!(!m.owner_died() && !m.is_poisoned());
    m.recover();
    assert_quiescent(&m);
}

/// A stopped (SIGSTOP) owner is alive: never taken over, force_unlock leaves it alone.
pub fn stopped_owner_not_taken_over() {
    let m = ShmMutex::anonymous(0u32).unwrap();
    let flags = AnonShared::counters(1);
    let holder = fork(|| {
        let mut g = ok(m.lock());
        flags.at(0).store(1, SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        *g += 1;
        0
    });
    while flags.at(0).load(SeqCst) == 0 {
        std::thread::sleep(Duration::from_micros(100));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(holder, libc::SIGSTOP) };
    assert!(matches!(
        m.try_lock_for(Duration::from_millis(100)),
        Err(TryLockError::WouldBlock)
    ));
    assert!(!m.force_unlock(holder as u32));
    assert_eq!(m.recover(), 0);
    assert_eq!(m.diagnostics().owner_pid, Some(holder as u32));
    // SAFETY: as above.
    unsafe { libc::kill(holder, libc::SIGCONT) };
    assert_eq!(wait(holder), 0);
    assert_eq!(*ok(m.lock()), 1, "the stopped owner finished its section");
    assert!(!m.diagnostics().owner_died);
}
