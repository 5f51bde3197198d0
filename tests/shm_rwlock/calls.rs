//! The calls that must not block or must give up in time: `try_*` and the timed calls against
//! stopped holders, deadlines, a queued reader asleep while a writer waits; guards inherited
//! across `fork`; header validation that writes nothing.

use super::common::anon::AnonShared;
use super::common::procs::{fork, kill9, mono_ns, signal, wait_limit, wait_stopped};
use super::common::shm_name;
use super::fixture::{
    holding_reader, in_child, reader_child, write_expect, Fixture, KILLED, RW_PENDING, V,
};
use super::{assert_quiescent, until, LIMIT};
use gomutex::shm::{Config, Mapping, MappingLayout, ShmError, ShmMutex, ShmRwLock, TryLockError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// `try_read`/`try_write` and the timed calls all give up: for a child of the caller.
fn all_try_calls_give_up(l: &ShmRwLock<V>, what: &str) {
    in_child(what, || {
        let short = Duration::from_millis(20);
        let r = [
            matches!(l.try_read(), Err(TryLockError::WouldBlock)),
            matches!(l.try_write(), Err(TryLockError::WouldBlock)),
            matches!(l.try_read_for(short), Err(TryLockError::WouldBlock)),
            matches!(l.try_write_for(short), Err(TryLockError::WouldBlock)),
        ];
        let d = l.diagnostics();
        // The timed reader left the queue; the timed writer the writers' mutex.
        let left = d.queued_readers == 0 && d.writers.waiters == 0;
        i32::from(!(r.iter().all(|&b| b) && left))
    });
}

/// `try_read`/`try_write` never block, whoever holds the lock and whatever state it is
/// stopped in; the timed calls give up at their deadlines and leave nothing behind, including
/// a timed writer that gives up with readers queued behind it; releases racing the deadlines
/// let the waiter in.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
pub fn try_calls_never_block_and_deadlines() {
    let f = Fixture::new(Config::default());
    let l = &f.l;
    let flags = AnonShared::counters(4);
    // A stopped writer holding the write lock.
    let go = flags.at(1);
    let w = fork(|| {
        let mut g = l.write().unwrap();
        g[0] += 1;
        g[1] += 1;
        flags.at(0).store(1, SeqCst);
        while go.load(SeqCst) == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
        drop(g);
        0
    });
    until("writer inside", || flags.at(0).load(SeqCst) == 1);
    signal(w, libc::SIGSTOP);
    wait_stopped(w);
    all_try_calls_give_up(l, "stopped writer inside");
    go.store(1, SeqCst);
    signal(w, libc::SIGCONT);
    assert_eq!(wait_limit(w, LIMIT, "writer"), 0);

    // A writer stopped with `PENDING` just set, a reader inside.
    let r = l.read().unwrap();
    let w = fork(|| {
        gomutex::__crash::stop_at(RW_PENDING);
        drop(l.write().unwrap());
        0
    });
    wait_stopped(w);
    assert!(l.diagnostics().write_pending);
    all_try_calls_give_up(l, "writer stopped at PENDING");
    signal(w, libc::SIGCONT);
    f.until_writer_sleeps();
    drop(r);
    assert_eq!(wait_limit(w, LIMIT, "writer"), 0);

    // A stopped reader inside: readers get in, writers do not (and leave no phase behind).
    let k = holding_reader(l, 1, flags.at(2));
    signal(k, libc::SIGSTOP);
    wait_stopped(k);
    in_child("stopped reader inside", || {
        let short = Duration::from_millis(20);
        let ok = l.try_read().is_ok()
            && matches!(l.try_write(), Err(TryLockError::WouldBlock))
            && matches!(l.try_write_for(short), Err(TryLockError::WouldBlock))
            && !l.diagnostics().write_pending
            && l.try_read_for(short).is_ok();
        i32::from(!ok)
    });
    kill9(k);
    assert_eq!(wait_limit(k, LIMIT, "stopped reader"), KILLED);
    drop(write_expect(l, false, "after the stopped reader"));

    // A timed writer gives up with a reader queued behind it: the reader is let in. The writer
    // stops right after `PENDING`, until its deadline has passed.
    let r = l.read().unwrap();
    let deadline_ns = flags.at(3);
    let w = fork(|| {
        let deadline = Instant::now() + Duration::from_millis(50);
        // Stored after: the deadline is at most 50 ms after this.
        deadline_ns.store(mono_ns() + 50_000_000, SeqCst);
        gomutex::__crash::stop_at(RW_PENDING);
        match l.try_write_until(deadline) {
            Err(TryLockError::WouldBlock) => 0,
            _ => 1,
        }
    });
    wait_stopped(w);
    let q = reader_child(l);
    until("reader queued behind the timed writer", || {
        l.diagnostics().queued_readers == 1
    });
    until("the timed writer's deadline passed", || {
        mono_ns() > deadline_ns.load(SeqCst)
    });
    signal(w, libc::SIGCONT);
    assert_eq!(wait_limit(w, LIMIT, "timed writer"), 0, "it gave up");
    assert_eq!(wait_limit(q, LIMIT, "reader behind it"), 1);
    let d = l.diagnostics();
    assert!(!d.write_pending && d.readers == 1, "{d:?}");
    // A timed reader gives up while the write lock is held: it leaves the queue.
    drop(r);
    let g = l.write().unwrap();
    let q = fork(|| match l.try_read_for(Duration::from_millis(30)) {
        Err(TryLockError::WouldBlock) => 0,
        _ => 1,
    });
    // The write lock is held for the child's whole life: it queues and must time out.
    assert_eq!(wait_limit(q, LIMIT, "timed reader"), 0);
    assert_eq!(l.diagnostics().queued_readers, 0);
    // Releases racing the deadlines: a timed reader queued behind a writer, a timed writer
    // waiting for a reader; each gets in when the holder lets go.
    let q = fork(|| match l.try_read_for(LIMIT) {
        Ok(v) => i32::from(*v != [3, 3]),
        _ => 2,
    });
    until("timed reader queued", || {
        l.diagnostics().queued_readers == 1
    });
    let mut g = g;
    g[0] = 3;
    g[1] = 3;
    drop(g);
    assert_eq!(wait_limit(q, LIMIT, "timed reader"), 0);
    let r = l.read().unwrap();
    let w = fork(|| match l.try_write_for(LIMIT) {
        Ok(mut v) => {
            v[0] += 1;
            v[1] += 1;
            0
        }
        _ => 1,
    });
    f.until_writer_sleeps();
    drop(r);
    assert_eq!(wait_limit(w, LIMIT, "timed writer"), 0);
    assert_eq!(*l.read().unwrap(), [4, 4]);
    l.recover();
    assert_quiescent(l);
}

/// Guards inherited across `fork()` hold nothing: the child's copies do not own, reaching the
/// value through them panics, dropping them releases nothing.
pub fn guards_inherited_across_fork() {
    let f = Fixture::new(Config::default());
    let l = &f.l;
    let quiet = |f: &dyn Fn()| {
        std::panic::set_hook(Box::new(|_| {}));
        let r = catch_unwind(AssertUnwindSafe(f));
        let _ = std::panic::take_hook();
        r.is_err()
    };
    let r = l.read().unwrap();
    let c = fork(|| {
        let ok = !r.is_owner()
            && quiet(&|| {
                std::hint::black_box(r[0]);
            })
            && l.diagnostics().readers == 1
            && l.try_read().is_ok();
        // SAFETY: a bitwise copy in the child's own memory; the original is never dropped
        // here (the child leaves with _exit).
        drop(unsafe { std::ptr::read(&r) });
        let d = l.diagnostics();
        i32::from(!(ok && d.readers == 1))
    });
    assert_eq!(wait_limit(c, LIMIT, "child with a read guard"), 0);
    assert!(r.is_owner());
    assert_eq!(
        l.diagnostics().readers,
        1,
        "the child released the parent's read"
    );
    drop(r);
    assert_eq!(l.diagnostics().readers, 0);

    let mut w = l.write().unwrap();
    w[0] = 1;
    let c = fork(|| {
        let ok = !w.is_owner()
            && quiet(&|| {
                std::hint::black_box(w[0]);
            })
            && matches!(l.try_read(), Err(TryLockError::WouldBlock))
            && matches!(l.try_write(), Err(TryLockError::WouldBlock));
        // SAFETY: as above.
        drop(unsafe { std::ptr::read(&w) });
        let d = l.diagnostics();
        let held =
            d.write_pending && d.writers.owner_pid == Some(std::os::unix::process::parent_id());
        i32::from(!(ok && held && l.try_read().is_err()))
    });
    assert_eq!(wait_limit(c, LIMIT, "child with the write guard"), 0);
    assert!(w.is_owner());
    let d = l.diagnostics();
    assert!(
        d.write_pending && d.writers.owner_pid == Some(std::process::id()),
        "{d:?}"
    );
    w[1] = 1;
    drop(w);
    assert_eq!(*l.read().unwrap(), [1, 1]);
    l.recover();
    assert_quiescent(l);
}

/// The bytes of a mapping (nobody writes it meanwhile).
fn bytes(map: &Mapping) -> Vec<u8> {
    // SAFETY: the whole mapping, readable; no process writes it during the comparison.
    unsafe { std::slice::from_raw_parts(map.as_ptr(), map.len()) }.to_vec()
}

/// A `ShmMutex` region does not open or attach as a `ShmRwLock`, nor the other way round, nor
/// a `ShmRwLock<u64>` as a `ShmRwLock<u32>`; nothing is written.
pub fn header_validation_writes_nothing() {
    let cfg = Config::default();
    // Placed in one mapping.
    let mut plan = MappingLayout::new();
    let (am, ar) = (
        plan.mutex::<u64>(cfg).unwrap(),
        plan.rwlock::<u64>(cfg).unwrap(),
    );
    let map = Mapping::anonymous(plan.len()).unwrap();
    let m = ShmMutex::init_in(&map, am, 1u64, cfg).unwrap();
    let l = ShmRwLock::init_in(&map, ar, 2u64, cfg).unwrap();
    drop(m.lock().unwrap());
    drop(l.write().unwrap());
    let before = bytes(&map);
    let Err(e) = ShmRwLock::<u64>::attach_in(&map, am) else {
        panic!("mutex as rwlock")
    };
    println!("    a ShmMutex attached as a ShmRwLock: {e}");
    let Err(e) = ShmMutex::<u64>::attach_in(&map, ar) else {
        panic!("rwlock as mutex")
    };
    println!("    a ShmRwLock attached as a ShmMutex: {e}");
    assert!(ShmRwLock::<u32>::attach_in(&map, ar).is_err(), "u64 as u32");
    assert!(ShmRwLock::<[u64; 2]>::attach_in(&map, ar).is_err());
    assert!(
        bytes(&map) == before,
        "a refused attach wrote to the mapping"
    );
    assert_eq!((*m.lock().unwrap(), *l.read().unwrap()), (1, 2));

    // Named objects.
    let (nm, nr) = (shm_name("rwhdr-m"), shm_name("rwhdr-r"));
    let m = ShmMutex::create(&nm, 1u64, cfg).unwrap();
    let l = ShmRwLock::create(&nr, 2u64, cfg).unwrap();
    let file = |n: &str| std::fs::read(format!("/dev/shm{n}")).unwrap();
    let (bm, br) = (file(&nm), file(&nr));
    let Err(e) = ShmRwLock::<u64>::open(&nm) else {
        panic!("mutex opened as rwlock")
    };
    assert!(!matches!(e.cause(), ShmError::Uninitialised), "{e:?}");
    println!("    a named ShmMutex opened as a ShmRwLock: {e}");
    assert!(
        ShmMutex::<u64>::open(&nr).is_err(),
        "rwlock opened as mutex"
    );
    assert!(ShmRwLock::<u64>::open_or_create(&nm, 0, cfg).is_err());
    assert!(ShmMutex::<u64>::open_or_create(&nr, 0, cfg).is_err());
    assert!(ShmRwLock::<u32>::open(&nr).is_err());
    assert!(file(&nm) == bm && file(&nr) == br, "a refused open wrote");
    assert_eq!((*m.lock().unwrap(), *l.read().unwrap()), (1, 2));
    gomutex::shm::unlink(&nm).unwrap();
    gomutex::shm::unlink(&nr).unwrap();
}

/// CPU time (user + system, in clock ticks) a process has used so far.
fn cpu_ticks(pid: libc::pid_t) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command's closing parenthesis: fields 3.. (utime and stime are 14 and 15).
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(2)
        .map(|x| x.parse().unwrap())
        .collect();
    f[0] + f[1]
}

/// A reader queued behind a writer keeps sleeping when the writer then goes to sleep itself
/// (setting `WSLEEP` in the word the reader sleeps on): it must not spin until the phase ends.
/// The window (reader queued between the writer's `PENDING` and its `WSLEEP`) is built with
/// the writer stopped at `PENDING`; then the reader's CPU time is sampled over a hold. A
/// sleeping reader wakes once per 10 ms tick and uses next to nothing; the check's margin
/// (a 25th of the hold) only bounds how much a spinning reader escapes detection.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
pub fn queued_reader_sleeps_while_writer_waits() {
    let f = Fixture::new(Config::default());
    let l = &f.l;
    let r = l.read().unwrap();
    let w = fork(|| {
        gomutex::__crash::stop_at(RW_PENDING);
        drop(l.write().unwrap());
        0
    });
    wait_stopped(w);
    let q = reader_child(l);
    until("reader queued", || l.diagnostics().queued_readers == 1);
    signal(w, libc::SIGCONT);
    f.until_writer_sleeps();
    let hold = Duration::from_millis(500);
    let ticks_per_s = {
        // SAFETY: sysconf has no preconditions.
        let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        assert!(t > 0);
        t as u64
    };
    let before = cpu_ticks(q);
    let t = Instant::now();
    std::thread::sleep(hold);
    let used = cpu_ticks(q) - before;
    let window = t.elapsed();
    let allowed = (window.as_millis() as u64 * ticks_per_s / 1000) / 25;
    println!("    the queued reader used {used} ticks in {window:?} (allowed {allowed})");
    drop(r);
    assert_eq!(wait_limit(w, LIMIT, "writer"), 0);
    assert_eq!(wait_limit(q, LIMIT, "reader"), 0);
    assert!(
        used <= allowed,
        "the queued reader spun: {used} ticks of CPU in {window:?}"
    );
    l.recover();
    assert_quiescent(l);
}
