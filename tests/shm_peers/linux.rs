//! Multi-process tests of `gomutex::shm` with peers that stall, exec, or write nonsense into
//! the region (issue 13): every call with a deadline returns by it, a wake-up that is not picked
//! up passes on, a full participant table is an error.
//!
//! `harness = false`, like `shm_process`: the tests run one after another on the main thread,
//! so the process is single-threaded whenever it forks. Run one with
//! `cargo test --test shm_peers -- <name> --exact`.

use gomutex::shm::{Config, ShmError, ShmMutex, TryLockError};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;
use common::anon::AnonShared;
use common::procs::{self, fork, signal, wait_limit, wait_stopped};
use common::shmtest::{assert_quiescent, header_u32, ok};

// ------------------------------------------------------------------ helpers

/// Wait (bounded) until `cond` holds.
fn until(what: &str, cond: impl Fn() -> bool) {
    common::poll_until(
        Duration::from_secs(5),
        Duration::from_micros(200),
        || what.into(),
        cond,
    );
}

const STATE_OFFSET: usize = 64;
const JLOCK_OFFSET: usize = 128;

// ------------------------------------------------------------------ tests

/// Issue 13, item 1: a process stopped while it holds the internal journal lock (here: inside
/// its waiter registration) must not hold up anybody's deadline. A queued `try_lock_for(300 ms)`
/// and a fresh `try_lock_for(20 ms)` return on time, and everything they gave up is settled
/// once the stopped process continues.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
fn stopped_journal_holder_keeps_deadlines() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let g = ok(m.lock());
    let times = AnonShared::counters(2);
    let timed = fork(|| {
        let t = Instant::now();
        if !matches!(
            m.try_lock_for(Duration::from_millis(300)),
            Err(TryLockError::WouldBlock)
        ) {
            return 2;
        }
        times.at(0).store(t.elapsed().as_micros() as u64, SeqCst);
        let t = Instant::now();
        if !matches!(
            m.try_lock_for(Duration::from_millis(20)),
            Err(TryLockError::WouldBlock)
        ) {
            return 3;
        }
        times.at(1).store(t.elapsed().as_micros() as u64, SeqCst);
        0
    });
    until("the timed waiter queued", || {
        m.diagnostics().queued_slots == 1
    });
    let stopped = fork(|| {
        // Stop with the journal lock held, the registration's redo log committed.
        gomutex::__crash::stop_at(gomutex::__crash::LOG_COMMITTED);
        *ok(m.lock()) += 1;
        0
    });
    wait_stopped(stopped);
    let code = wait_limit(timed, Duration::from_secs(3), "timed waiter");
    let (a, b) = (times.at(0).load(SeqCst), times.at(1).load(SeqCst));
    println!("    try_lock_for(300 ms) took {a} us, try_lock_for(20 ms) took {b} us");
    assert_eq!(code, 0);
    assert!((300_000..450_000).contains(&a), "{a} us");
    assert!((20_000..150_000).contains(&b), "{b} us");
    signal(stopped, libc::SIGCONT);
    drop(g);
    assert_eq!(wait_limit(stopped, Duration::from_secs(3), "stopped"), 0);
    assert_eq!(*ok(m.lock()), 1);
    m.recover();
    assert_quiescent(&m);
}

/// Issue 13, item 2: a queued waiter that is stopped when the unlock wakes it must not keep the
/// free lock from the waiter behind it; when it continues it waits in its place and gets the
/// lock later.
fn stopped_waiter_passes_wakeup_on() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let g = ok(m.lock());
    let got = AnonShared::counters(1);
    let first = fork(|| {
        *ok(m.lock()) += 1;
        0
    });
    until("first queued", || m.diagnostics().queued_slots == 1);
    let second = fork(|| {
        *ok(m.lock()) += 1;
        got.at(0).store(1, SeqCst);
        0
    });
    until("second queued", || m.diagnostics().queued_slots == 2);
    signal(first, libc::SIGSTOP);
    wait_stopped(first);
    let t = Instant::now();
    drop(g);
    until("second got the lock", || got.at(0).load(SeqCst) == 1);
    let e = t.elapsed();
    println!("    the waiter behind the stopped one got the lock after {e:?}");
    assert!(e < Duration::from_millis(300), "{e:?}");
    assert_eq!(wait_limit(second, Duration::from_secs(3), "second"), 0);
    signal(first, libc::SIGCONT);
    assert_eq!(wait_limit(first, Duration::from_secs(3), "first"), 0);
    assert_eq!(*ok(m.lock()), 2);
    m.recover();
    assert_quiescent(&m);
}

/// Issue 13, item 2: a process that execs while one of its threads is queued never picks up
/// the wake-up; the waiter behind it gets the free lock within a bounded time.
fn execd_waiter_passes_wakeup_on() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let g = ok(m.lock());
    let got = AnonShared::counters(1);
    let execd = fork(|| {
        let m = &m;
        std::thread::scope(|s| {
            s.spawn(move || {
                let _g = m.lock();
            });
            until("thread queued", || m.diagnostics().queued_slots >= 1);
            let prog = c"/bin/sleep";
            let args = [prog.as_ptr(), c"3".as_ptr(), std::ptr::null()];
            // SAFETY: NUL-terminated strings and argument vector.
            unsafe { libc::execv(prog.as_ptr(), args.as_ptr()) };
            101
        })
    });
    until("exec'd waiter queued", || m.diagnostics().queued_slots == 1);
    let second = fork(|| {
        *ok(m.lock()) += 1;
        got.at(0).store(1, SeqCst);
        0
    });
    until("second queued", || m.diagnostics().queued_slots == 2);
    // Let the exec happen.
    let exe = format!("/proc/{execd}/comm");
    until("exec done", || {
        std::fs::read_to_string(&exe).is_ok_and(|c| c.trim() == "sleep")
    });
    let t = Instant::now();
    drop(g);
    until("second got the lock", || got.at(0).load(SeqCst) == 1);
    let e = t.elapsed();
    println!("    the waiter behind the exec'd one got the lock after {e:?}");
    assert!(e < Duration::from_millis(500), "{e:?}");
    assert_eq!(wait_limit(second, Duration::from_secs(3), "second"), 0);
    signal(execd, libc::SIGKILL);
    wait_limit(execd, Duration::from_secs(3), "exec'd");
    m.recover();
    assert_eq!(*ok(m.lock()), 1);
    m.recover();
    assert_quiescent(&m);
}

/// Issue 13, item 7: a journal-lock word naming no participant (written by a faulty peer) is
/// taken over, so timed calls return on time and later calls work.
fn jlock_word_out_of_range() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let g = ok(m.lock());
    header_u32(&m, JLOCK_OFFSET).store(1000, SeqCst);
    let k = fork(|| {
        let t = Instant::now();
        let r = m.try_lock_for(Duration::from_millis(30));
        let e = t.elapsed();
        if !matches!(r, Err(TryLockError::WouldBlock)) || e > Duration::from_millis(200) {
            return 2;
        }
        *ok(m.lock()) += 1;
        0
    });
    std::thread::sleep(Duration::from_millis(100));
    drop(g);
    assert_eq!(
        wait_limit(k, Duration::from_secs(3), "jlock out of range"),
        0
    );
    assert_eq!(*ok(m.lock()), 1);
}

/// Issue 13, item 7: `STARVING` with no waiter counted (a faulty peer's word): a timed call
/// queues and must return by its deadline although the count says it may not leave. (The
/// orphan repair of item 9 may clear the phantom hand-off first, and then the call gets the
/// lock: also in time.) Afterwards the lock works.
fn starving_without_waiters_keeps_deadline() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    header_u32(&m, STATE_OFFSET).store(4, SeqCst); // STARVING, not LOCKED, 0 waiters
    let k = fork(|| {
        let t = Instant::now();
        let r = m.try_lock_for(Duration::from_millis(30));
        let e = t.elapsed();
        drop(r);
        if e > Duration::from_millis(200) {
            return 2;
        }
        // The state is repaired by now or by the next full scan: the lock must be usable.
        let t = Instant::now();
        let mut g = match m.try_lock_for(Duration::from_secs(1)) {
            Ok(g) => g,
            Err(TryLockError::OwnerDied(g)) | Err(TryLockError::Poisoned(g)) => g,
            Err(TryLockError::WouldBlock) => return 3,
        };
        *g += 1;
        if t.elapsed() > Duration::from_millis(500) {
            return 4;
        }
        0
    });
    assert_eq!(
        wait_limit(k, Duration::from_secs(3), "starving, no waiters"),
        0
    );
}

/// Issue 13, item 4: with every participant slot held by a live process, registering is an
/// error at once (`join`, `attach`), and a timed call returns `WouldBlock` on time (it used
/// to panic inside the lock call after 2 s).
fn full_participant_table_is_an_error() {
    let cfg = Config::new().participants(1).waiter_slots(4); // one participant: the parent's
    let m = ShmMutex::anonymous_with(0u64, cfg).unwrap();
    m.join().unwrap();
    assert_eq!(m.diagnostics().participants, 1);
    let k = fork(|| {
        let t = Instant::now();
        let r = m.try_lock_for(Duration::from_millis(50));
        if !matches!(r, Err(TryLockError::WouldBlock)) {
            println!("    {r:?} {:?}", m.diagnostics());
            return 2;
        }
        drop(r);
        if t.elapsed() > Duration::from_millis(500) {
            return 3;
        }
        let t = Instant::now();
        match m.join() {
            Err(ShmError::NoParticipantSlot { participants: 1 }) => {}
            _ => return 4,
        }
        if t.elapsed() > Duration::from_millis(500) {
            return 5;
        }
        let (p, len) = m.as_ptr_len();
        // SAFETY: the live region `m` maps, valid for as long as `m` lives.
        match unsafe { ShmMutex::<u64>::attach(p, len) } {
            Err(e @ ShmError::NoParticipantSlot { .. }) => println!("    {e}"),
            _ => return 6,
        }
        0
    });
    assert_eq!(wait_limit(k, Duration::from_secs(5), "full table"), 0);
    *ok(m.lock()) += 1;
}

/// Field 22 of `/proc/<pid>/stat` (start time in clock ticks), if readable.
fn start_time(pid: libc::pid_t) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Whether pidfds live on pidfs (Linux 6.9+), where each process has its own inode.
fn kernel_has_pidfs() -> bool {
    // SAFETY: pidfd_open of our own pid; the fd is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) } as i32;
    if fd < 0 {
        return false;
    }
    // SAFETY: an all-zero statfs is a valid out-parameter; `fd` is ours.
    unsafe {
        let mut sfs: libc::statfs = std::mem::zeroed();
        let ok = libc::fstatfs(fd, &mut sfs) == 0 && sfs.f_type as i64 == 0x5049_4446;
        libc::close(fd);
        ok
    }
}

/// `struct clone_args` of `clone3(2)` up to `set_tid_size` (`CLONE_ARGS_SIZE_VER1`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
}

/// `clone3` a child with pid `pid` that sleeps until killed: the child's pid, or the errno.
fn clone_with_pid(pid: libc::pid_t) -> Result<libc::pid_t, i32> {
    let tid = [pid];
    let args = CloneArgs {
        exit_signal: libc::SIGCHLD as u64,
        set_tid: tid.as_ptr() as u64,
        set_tid_size: 1,
        ..Default::default()
    };
    // SAFETY: a fork-like clone (no shared memory, the child runs on a copy of our stack); the
    // test process is single-threaded, and the child makes only raw libc calls (nanosleep,
    // _exit): it never touches the lock (its glibc caches are the parent's).
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if r == 0 {
        let ts = libc::timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec; then leave without the parent's atexit work.
        unsafe {
            libc::nanosleep(&ts, std::ptr::null_mut());
            libc::_exit(0)
        }
    }
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(r as libc::pid_t)
}

/// Issue 13, item 5: an owner dies and its pid is reused *within its start-time tick* (a
/// `clone3` with `set_tid`): same pid, same start time, another process. It used to be taken
/// for the dead owner, wedging the lock until the impostor exited; on kernels with pidfs the
/// pidfd inode recorded in the participant slot tells them apart.
fn pid_reused_within_tick_is_dead() {
    if !kernel_has_pidfs() {
        println!("    skipped: no pidfs (Linux < 6.9): pid + start time is all there is");
        return;
    }
    let flag = AnonShared::counters(1);
    for attempt in 1..=50 {
        let m =
            ShmMutex::anonymous_with(0u64, Config::new().participants(4).waiter_slots(4)).unwrap();
        flag.at(0).store(0, SeqCst);
        let owner = fork(|| {
            let g = ok(m.lock());
            flag.at(0).store(1, SeqCst);
            loop {
                std::hint::black_box(&g);
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        while flag.at(0).load(SeqCst) == 0 {
            std::hint::spin_loop();
        }
        let start = start_time(owner);
        signal(owner, libc::SIGKILL);
        let mut st = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(owner, &mut st, 0) };
        let imp = match clone_with_pid(owner) {
            Ok(p) => p,
            Err(e @ (libc::EPERM | libc::ENOSYS | libc::EINVAL)) => {
                println!("    skipped: clone3 with set_tid refused (errno {e})");
                return;
            }
            Err(e) => {
                println!("    attempt {attempt}: clone3 failed (errno {e}), again");
                continue;
            }
        };
        assert_eq!(imp, owner);
        let same_tick = start.is_some() && start_time(imp) == start;
        if same_tick {
            let t = Instant::now();
            let r = m.try_lock_for(Duration::from_secs(1));
            let took = t.elapsed();
            let died = matches!(r, Err(TryLockError::OwnerDied(_)));
            let what = format!("{r:?}");
            drop(r);
            signal(imp, libc::SIGKILL);
            wait_limit(imp, Duration::from_secs(5), "impostor");
            assert!(
                died,
                "a pid reused within the dead owner's start tick was taken for it: {what} after {took:?}"
            );
            println!("    attempt {attempt}: OwnerDied after {took:.2?}");
            return;
        }
        signal(imp, libc::SIGKILL);
        wait_limit(imp, Duration::from_secs(5), "impostor");
    }
    println!("    skipped: could not reuse a pid within one start-time tick in 50 attempts");
}

/// Issue 22, defect 6: a peer that clears the lock word while this process holds the lock
/// through a `ShmAcceptMutex` does not make the process panic: its next `try_lock` takes the
/// (now free) lock in place of the hold it lost, one `unlock` releases it, and the lock works
/// afterwards. An `unlock` after the hold was lost to another process releases nothing.
fn cleared_word_under_accept_mutex_does_not_panic() {
    use gomutex::accept::{AcceptMutex, Acquired, ShmAcceptMutex};
    let m = ShmMutex::anonymous(()).unwrap();
    let a = ShmAcceptMutex::new(&m);
    assert!(AcceptMutex::try_lock(&a).is_some());
    // A peer clears the word (and, if `take`, then takes the lock and dies holding it).
    let clear = |take: bool| {
        let peer = fork(|| {
            header_u32(&m, STATE_OFFSET).store(0, SeqCst);
            header_u32(&m, STATE_OFFSET + 4).store(0, SeqCst);
            if take {
                std::mem::forget(ok(m.lock()));
            }
            0
        });
        assert_eq!(wait_limit(peer, Duration::from_secs(5), "peer"), 0);
        peer
    };
    clear(false);
    assert!(!m.is_locked());
    let again =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| AcceptMutex::try_lock(&a)));
    assert!(
        matches!(again, Ok(Some(_))),
        "try_lock after a peer cleared the word"
    );
    assert!(m.is_locked());
    // SAFETY: `a` holds the lock (taken again just now).
    unsafe { a.unlock() };
    assert!(!m.is_locked());
    // Lost to another process: the stale hold releases nothing.
    assert!(AcceptMutex::try_lock(&a).is_some());
    let peer = clear(true);
    // SAFETY: `a` believes it holds the lock; the word says the peer has it.
    unsafe { a.unlock() };
    assert!(m.is_locked(), "the lost hold released the peer's lock");
    assert!(m.force_unlock(peer));
    assert_eq!(AcceptMutex::try_lock(&a), Some(Acquired::OwnerDied));
    drop(a);
    assert!(!m.is_locked());
    m.recover();
    assert_quiescent(&m);
}

/// Issue 22, defect 6, for a guard: a peer that clears the lock word (or then takes the lock
/// itself) while this process holds it through a guard does not make the guard's drop abort
/// the process ("unlock of unlocked mutex"), nor release the peer's lock: the drop leaves a
/// word it does not hold alone, and the lock works afterwards.
fn cleared_word_under_guard_does_not_abort() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    // A peer clears the word (and, if `take`, then takes the lock and dies holding it).
    let clear = |take: bool| {
        let peer = fork(|| {
            header_u32(&m, STATE_OFFSET).store(0, SeqCst);
            header_u32(&m, STATE_OFFSET + 4).store(0, SeqCst);
            if take {
                std::mem::forget(ok(m.lock()));
            }
            0
        });
        assert_eq!(wait_limit(peer, Duration::from_secs(5), "peer"), 0);
        peer
    };
    // In a child: on main the drop aborts the process.
    let k = fork(|| {
        let g = ok(m.lock());
        clear(false);
        drop(g);
        let mut code = i32::from(m.is_locked());
        *ok(m.lock()) += 1;
        let g = ok(m.lock());
        let peer = clear(true);
        drop(g);
        if !m.is_locked() || m.diagnostics().owner_pid != Some(peer as u32) {
            code |= 2; // the drop released the peer's lock
        }
        if !m.force_unlock(peer) {
            code |= 4;
        }
        match m.lock() {
            Err(gomutex::shm::LockError::OwnerDied(g)) => g.mark_consistent(),
            _ => code |= 8,
        }
        code
    });
    assert_eq!(
        wait_limit(k, Duration::from_secs(10), "guard over a cleared word"),
        0,
        "134: the drop aborted; 1: the lock stayed held; 2: the drop released the peer's lock"
    );
    assert_eq!(*ok(m.lock()), 1);
    m.recover();
    assert_quiescent(&m);
}

// ------------------------------------------------------------------ runner

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[
        #[cfg(feature = "__crash-points")]
        (
            "stopped_journal_holder_keeps_deadlines",
            stopped_journal_holder_keeps_deadlines,
        ),
        (
            "stopped_waiter_passes_wakeup_on",
            stopped_waiter_passes_wakeup_on,
        ),
        (
            "execd_waiter_passes_wakeup_on",
            execd_waiter_passes_wakeup_on,
        ),
        ("jlock_word_out_of_range", jlock_word_out_of_range),
        (
            "starving_without_waiters_keeps_deadline",
            starving_without_waiters_keeps_deadline,
        ),
        (
            "full_participant_table_is_an_error",
            full_participant_table_is_an_error,
        ),
        (
            "pid_reused_within_tick_is_dead",
            pid_reused_within_tick_is_dead,
        ),
        (
            "cleared_word_under_accept_mutex_does_not_panic",
            cleared_word_under_accept_mutex_does_not_panic,
        ),
        (
            "cleared_word_under_guard_does_not_abort",
            cleared_word_under_guard_does_not_abort,
        ),
    ];
    procs::run_cases("shm_peers", &args, tests);
}
