//! Adversarial cases of `shm_rwlock`: deaths at each of the lock's crash points and while
//! queued, `force_unlock`, `try_*` against stopped holders, deadlines, inherited guards,
//! header validation and participant-slot reuse. Every window is built step by step (crash
//! and stop points, SIGSTOP, polling the diagnostics), so it is reached on every run.

use super::{assert_quiescent, until, LIMIT};
use gomutex::shm::{
    Config, LockError, Mapping, MappingLayout, ShmError, ShmMutex, ShmRwLock, ShmRwLockWriteGuard,
    TryLockError,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use super::common::anon::AnonShared;
use super::common::procs::{fork, kill9, mono_ns, signal, wait_limit, wait_stopped};

use gomutex::__crash::{RW_DOWNGRADING, RW_PENDING, RW_QUEUED, RW_READ_COUNTED, RW_UNLOCKING};

/// `rw_state`'s flag for a writer asleep waiting for readers (`src/shm/rwlock/mod.rs`), and the
/// word's offset in the region header (`src/shm/layout.rs` asserts it).
const WSLEEP: u32 = 4;
const RW_STATE_AT: usize = 60;

const KILLED: i32 = 128 + libc::SIGKILL;

type V = [u64; 2];

/// A lock in a mapping this test can look into (for `rw_state`, and byte comparisons).
struct Fixture {
    map: Mapping,
    at: usize,
    l: ShmRwLock<V>,
}

impl Fixture {
    fn new(cfg: Config) -> Self {
        let mut plan = MappingLayout::new();
        let at = plan.rwlock::<V>(cfg).unwrap();
        let map = Mapping::anonymous(plan.len()).unwrap();
        let l = ShmRwLock::init_in(&map, at, [0; 2], cfg).unwrap();
        Self { map, at, l }
    }

    /// The lock's `rw_state` word.
    fn rw_state(&self) -> u32 {
        assert!(self.at + RW_STATE_AT + 4 <= self.map.len());
        // SAFETY: in bounds (checked), 4-aligned (the header is 64-aligned and the offset is a
        // multiple of 4), and the lock only ever accesses this word atomically.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(self.at + RW_STATE_AT).cast()) }
            .load(SeqCst)
    }

    /// A writer (another process) is asleep waiting for the readers inside to leave.
    fn until_writer_sleeps(&self) {
        until("writer asleep, pending", || {
            self.l.diagnostics().write_pending && self.rw_state() & WSLEEP != 0
        });
    }
}

/// A writer child: adds 1 to both words; exits 0 on `Ok`, 1 on `OwnerDied`, 2 otherwise.
fn writer_child(l: &ShmRwLock<V>) -> libc::pid_t {
    fork(|| match l.write() {
        Ok(mut g) => {
            g[0] += 1;
            g[1] += 1;
            0
        }
        Err(LockError::OwnerDied(mut g)) => {
            g[0] += 1;
            g[1] += 1;
            g.mark_consistent();
            1
        }
        Err(_) => 2,
    })
}

/// A reader child: exits with the value it saw (consistent, below 100) on `Ok`, 100 + it on
/// `OwnerDied`, 99 on a torn value or poison.
fn reader_child(l: &ShmRwLock<V>) -> libc::pid_t {
    fork(|| {
        let code = |g: &V| if g[0] == g[1] { g[0] as i32 } else { 99 };
        match l.read() {
            Ok(g) => code(&g),
            Err(LockError::OwnerDied(g)) => 100 + code(&g),
            Err(_) => 99,
        }
    })
}

/// A child that takes `reads` read locks, says so in `flag`, and waits to be killed.
fn holding_reader(l: &ShmRwLock<V>, reads: usize, flag: &AtomicU64) -> libc::pid_t {
    let pid = fork(|| {
        let _g: Vec<_> = (0..reads).map(|_| l.read().unwrap()).collect();
        flag.store(1, SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    until("the reader inside", || flag.load(SeqCst) == 1);
    pid
}

/// A child that takes the write lock, says so in `flag`, and waits to be killed.
fn holding_writer(l: &ShmRwLock<V>, flag: &AtomicU64) -> libc::pid_t {
    let pid = fork(|| {
        let mut g = l.write().unwrap();
        g[0] += 1; // half an update: the next acquirers must be told
        flag.store(1, SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    until("the writer inside", || flag.load(SeqCst) == 1);
    pid
}

/// The write lock, which must (or must not) report a dead writer; repaired and marked
/// consistent if it does.
fn write_expect<'a>(
    l: &'a ShmRwLock<V>,
    owner_died: bool,
    what: &str,
) -> ShmRwLockWriteGuard<'a, V> {
    match l.write() {
        Ok(g) if !owner_died => g,
        Err(LockError::OwnerDied(mut g)) if owner_died => {
            g[1] = g[0];
            g.mark_consistent();
            g
        }
        other => panic!(
            "{what}: expected owner_died = {owner_died}, got {:?}",
            other.map(|g| *g)
        ),
    }
}

/// After a death: the next writer (told of a dead writer if `reported`) and reader succeed,
/// the counts are exact, nothing is left, and the writers' mutex counted `deaths` owner deaths.
fn after_death(f: &Fixture, reported: bool, deaths: u64, expect: u64, what: &str) {
    let mut w = write_expect(&f.l, reported, what);
    assert_eq!(*w, [expect; 2], "{what}");
    w[0] += 1;
    w[1] += 1;
    drop(w);
    assert_eq!(*f.l.read().expect("repaired"), [expect + 1; 2], "{what}");
    f.l.recover();
    assert_quiescent(&f.l);
    let d = f.l.diagnostics();
    assert_eq!(d.writers.owner_deaths, deaths, "{what}: {d:?}");
}

/// A process killed at each of the lock's own crash points, and a writer killed while it waits
/// for departing readers: no waiter is stuck, the counts are exact afterwards, the next writer
/// and reader get in, and `OwnerDied` is reported exactly when the dead process held the
/// writers' mutex.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
pub fn killed_at_rw_crash_points() {
    // 8, with a writer waiting: a reader dies counted, before it looked at `rw_state`. The
    // waiting writer must find the dead count and get in.
    {
        let f = Fixture::new(Config::default());
        let r = f.l.read().unwrap();
        let w = writer_child(&f.l);
        f.until_writer_sleeps();
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_READ_COUNTED);
            drop(f.l.read());
            3
        });
        assert_eq!(
            wait_limit(k, LIMIT, "point 8"),
            KILLED,
            "point 8 not reached"
        );
        drop(r);
        assert_eq!(wait_limit(w, LIMIT, "writer after point 8"), 0);
        after_death(&f, false, 0, 1, "point 8, writer waiting");
    }
    // 8, no writer yet: the count stays until a writer comes and reaps it.
    {
        let f = Fixture::new(Config::default());
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_READ_COUNTED);
            drop(f.l.read());
            3
        });
        assert_eq!(
            wait_limit(k, LIMIT, "point 8"),
            KILLED,
            "point 8 not reached"
        );
        assert_eq!(
            f.l.diagnostics().readers,
            1,
            "the dead count, not reaped yet"
        );
        after_death(&f, false, 0, 0, "point 8, writer later");
    }
    // 9: a reader dies queued behind a waiting writer. Its queue count stays (the writer waits
    // for readers inside, not queued ones) until the next writer reaps it; a live reader queued
    // beside it still comes in after the writer.
    {
        let f = Fixture::new(Config::default());
        let r = f.l.read().unwrap();
        let w = writer_child(&f.l);
        f.until_writer_sleeps();
        let live = reader_child(&f.l);
        until("the live reader queued", || {
            f.l.diagnostics().queued_readers == 1
        });
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_QUEUED);
            drop(f.l.read());
            3
        });
        assert_eq!(
            wait_limit(k, LIMIT, "point 9"),
            KILLED,
            "point 9 not reached"
        );
        // The live reader's periodic scan (`probe`) may have reaped the dead one already.
        let queued = f.l.diagnostics().queued_readers;
        assert!(queued == 2 || queued == 1, "{queued}");
        drop(r);
        assert_eq!(wait_limit(w, LIMIT, "writer after point 9"), 0);
        assert_eq!(wait_limit(live, LIMIT, "queued reader"), 1);
        after_death(&f, false, 0, 1, "point 9");
    }
    // 10: a writer dies with `PENDING` set and the writers' mutex held, readers inside. A
    // reader queued behind the dead phase ends it (told `OwnerDied`) without any writer.
    {
        let f = Fixture::new(Config::default());
        let r = f.l.read().unwrap();
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_PENDING);
            drop(f.l.write());
            3
        });
        assert_eq!(
            wait_limit(k, LIMIT, "point 10"),
            KILLED,
            "point 10 not reached"
        );
        assert!(f.l.diagnostics().write_pending);
        let q = reader_child(&f.l);
        assert_eq!(wait_limit(q, LIMIT, "reader behind a dead phase"), 100);
        assert!(!f.l.diagnostics().write_pending);
        drop(r);
        after_death(&f, true, 1, 0, "point 10, a reader ends the phase");
    }
    // 10 again: the next writer ends the dead phase.
    {
        let f = Fixture::new(Config::default());
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_PENDING);
            drop(f.l.write());
            3
        });
        assert_eq!(
            wait_limit(k, LIMIT, "point 10"),
            KILLED,
            "point 10 not reached"
        );
        assert!(matches!(f.l.try_read(), Err(TryLockError::WouldBlock)));
        after_death(&f, true, 1, 0, "point 10, the next writer ends the phase");
    }
    // 11: a writer dies after ending its phase, still holding the writers' mutex. The reader
    // queued behind it is admitted (the update was complete); the next writer is told.
    {
        let f = Fixture::new(Config::default());
        let flags = AnonShared::counters(2);
        let (inside, go) = (flags.at(0), flags.at(1));
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_UNLOCKING);
            let mut g = f.l.write().unwrap();
            g[0] += 1;
            g[1] += 1;
            inside.store(1, SeqCst);
            while go.load(SeqCst) == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
            drop(g);
            3
        });
        until("the writer inside", || inside.load(SeqCst) == 1);
        let q = reader_child(&f.l);
        until("the reader queued", || {
            f.l.diagnostics().queued_readers == 1
        });
        go.store(1, SeqCst);
        assert_eq!(
            wait_limit(k, LIMIT, "point 11"),
            KILLED,
            "point 11 not reached"
        );
        // Admitted by the phase's end, before or after its writer was found dead.
        let seen = wait_limit(q, LIMIT, "reader behind point 11");
        assert!(seen == 1 || seen == 101, "{seen}");
        // Not repaired by the first writer: readers are told too from then on.
        match f.l.write() {
            Err(LockError::OwnerDied(g)) => drop(g),
            other => panic!("point 11: writer not told: {:?}", other.map(|g| *g)),
        }
        match f.l.read() {
            Err(LockError::OwnerDied(g)) => assert_eq!(*g, [1, 1]),
            other => panic!("point 11: readers not told: {:?}", other.map(|g| *g)),
        }
        after_death(&f, true, 1, 1, "point 11");
    }
    // A writer SIGKILLed while it waits for departing readers, a reader queued behind it.
    {
        let f = Fixture::new(Config::default());
        let r = f.l.read().unwrap();
        let w = writer_child(&f.l);
        f.until_writer_sleeps();
        let q = reader_child(&f.l);
        until("the reader queued", || {
            f.l.diagnostics().queued_readers == 1
        });
        kill9(w);
        assert_eq!(wait_limit(w, LIMIT, "waiting writer"), KILLED);
        // It held the writers' mutex: the queued reader is told.
        assert_eq!(wait_limit(q, LIMIT, "reader behind a killed writer"), 100);
        assert_eq!(f.l.diagnostics().readers, 1);
        drop(r);
        after_death(&f, true, 1, 0, "writer killed waiting for readers");
    }
}

/// A reader killed while queued (seen queued first), and a writer killed while queued on the
/// writers' mutex: nobody else is held up, nothing is reported, the counts end exact.
pub fn killed_while_queued() {
    // A reader.
    let f = Fixture::new(Config::default());
    let mut w = f.l.write().unwrap();
    let k = reader_child(&f.l);
    until("reader queued", || f.l.diagnostics().queued_readers == 1);
    let live = reader_child(&f.l);
    until("a second reader queued", || {
        f.l.diagnostics().queued_readers == 2
    });
    kill9(k);
    assert_eq!(wait_limit(k, LIMIT, "queued reader"), KILLED);
    // The live reader's periodic scan (`probe`) may have reaped it already.
    let queued = f.l.diagnostics().queued_readers;
    assert!(queued == 2 || queued == 1, "{queued}");
    w[0] = 5;
    w[1] = 5;
    drop(w);
    assert_eq!(wait_limit(live, LIMIT, "live queued reader"), 5);
    // The next writer waits for the queue to empty: it must reap the dead reader's count.
    after_death(&f, false, 0, 5, "reader killed queued");

    // A writer.
    let f = Fixture::new(Config::default());
    let w = f.l.write().unwrap();
    let k = writer_child(&f.l);
    until("writer queued on the writers' mutex", || {
        f.l.diagnostics().writers.waiters == 1
    });
    let live = writer_child(&f.l);
    until("a second writer queued", || {
        f.l.diagnostics().writers.waiters == 2
    });
    kill9(k);
    assert_eq!(wait_limit(k, LIMIT, "queued writer"), KILLED);
    drop(w);
    assert_eq!(wait_limit(live, LIMIT, "live queued writer"), 0);
    after_death(&f, false, 0, 1, "writer killed queued");
}

/// `force_unlock(pid)` after `waitpid`: the dead process's reads and write lock are released
/// by the call itself (the waiters that could have found them are stopped meanwhile), and it
/// returns whether the process held anything.
pub fn force_unlock_after_waitpid() {
    // Reads: two of them, a writer waiting for them (stopped, so it cannot reap them itself).
    let f = Fixture::new(Config::default());
    let flags = AnonShared::counters(2);
    let k = holding_reader(&f.l, 2, flags.at(0));
    let w = writer_child(&f.l);
    f.until_writer_sleeps();
    signal(w, libc::SIGSTOP);
    wait_stopped(w);
    assert!(!f.l.force_unlock(k), "alive: left alone");
    assert_eq!(f.l.diagnostics().readers, 2);
    kill9(k);
    assert_eq!(wait_limit(k, LIMIT, "reader"), KILLED);
    assert_eq!(f.l.diagnostics().readers, 2, "nobody has looked yet");
    assert!(f.l.force_unlock(k), "it held reads");
    assert_eq!(f.l.diagnostics().readers, 0, "released by the call");
    assert!(!f.l.force_unlock(k), "already released");
    let t = Instant::now();
    signal(w, libc::SIGCONT);
    assert_eq!(wait_limit(w, LIMIT, "writer"), 0);
    println!("    the writer got in {:?} after SIGCONT", t.elapsed());
    after_death(&f, false, 0, 1, "force_unlock of a reader");

    // The write lock, a reader queued behind it (stopped, so it cannot recover the writer).
    let f = Fixture::new(Config::default());
    let k = holding_writer(&f.l, flags.at(1));
    let q = reader_child(&f.l);
    until("reader queued", || f.l.diagnostics().queued_readers == 1);
    signal(q, libc::SIGSTOP);
    wait_stopped(q);
    assert!(!f.l.force_unlock(k), "alive: left alone");
    kill9(k);
    assert_eq!(wait_limit(k, LIMIT, "writer"), KILLED);
    let d = f.l.diagnostics();
    assert!(
        d.write_pending && d.writers.owner_pid == Some(k as u32),
        "{d:?}"
    );
    assert!(f.l.force_unlock(k), "it held the write lock");
    let d = f.l.diagnostics();
    assert!(!d.write_pending && d.writers.owner_pid.is_none(), "{d:?}");
    assert!(!f.l.force_unlock(k), "already released");
    // Readers get in at once, and are told; the queued one comes first, then a writer.
    match f.l.try_read() {
        Err(TryLockError::OwnerDied(g)) => assert_eq!(*g, [1, 0]),
        other => panic!("{:?}", other.map(|g| *g)),
    }
    signal(q, libc::SIGCONT);
    assert_eq!(
        wait_limit(q, LIMIT, "queued reader"),
        199,
        "it saw [1, 0], told"
    );
    match f.l.try_write() {
        Err(TryLockError::OwnerDied(mut g)) => {
            g[1] = g[0];
            g.mark_consistent();
        }
        other => panic!("{:?}", other.map(|g| *g)),
    }
    after_death(&f, false, 1, 1, "force_unlock of a writer");

    // Nothing held: false.
    let idle = fork(|| {
        drop(f.l.read().unwrap());
        0
    });
    assert_eq!(wait_limit(idle, LIMIT, "idle"), 0);
    assert!(!f.l.force_unlock(idle), "held nothing");
    assert!(!f.l.force_unlock(-1), "no pid");
    f.l.recover();
    assert_quiescent(&f.l);
}

/// Run `f` in a child that must finish within `LIMIT` (a blocked `try_*` fails the test
/// instead of hanging it); it returns 0 on success.
fn in_child(what: &str, f: impl FnOnce() -> i32) {
    let c = fork(f);
    assert_eq!(wait_limit(c, LIMIT, what), 0, "{what}");
}

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
    let pid = std::process::id();
    let (nm, nr) = (
        format!("/gomutex-test-rwhdr-m-{pid}"),
        format!("/gomutex-test-rwhdr-r-{pid}"),
    );
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

/// A dead reader's participant slot reused by a new process: the newcomer's counts start at 0
/// and the dead process's reads never come back.
pub fn dead_reader_slot_reused() {
    // Two participant slots: this process's, and one for the children in turn.
    let f = Fixture::new(Config::new().participants(2).waiter_slots(2));
    let l = &f.l;
    drop(l.read().unwrap()); // this process takes its slot
    let flags = AnonShared::counters(4);
    for round in 0..3 {
        let k = holding_reader(l, 2, flags.at(round));
        kill9(k);
        assert_eq!(wait_limit(k, LIMIT, "reader"), KILLED);
        assert_eq!(l.diagnostics().readers, 2, "round {round}: not reaped yet");
        // The newcomer finds no free slot but the dead reader's: it recovers and takes it.
        let n = fork(|| {
            let g = l.read().unwrap();
            let inside = l.diagnostics().readers;
            drop(g);
            let after = l.diagnostics().readers;
            // The dead reads do not hold a writer up either.
            let w = l.try_write().is_ok();
            i32::from(!(inside == 1 && after == 0 && w))
        });
        assert_eq!(wait_limit(n, LIMIT, "newcomer"), 0, "round {round}");
        assert_eq!(l.diagnostics().readers, 0, "round {round}");
        println!(
            "    round {round}: {} participant slots taken",
            l.diagnostics().writers.participants
        );
    }
    l.recover();
    drop(write_expect(l, false, "after the reused slots"));
    assert_quiescent(l);
    assert_eq!(l.diagnostics().writers.participants, 1);
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

// --- downgrade ---

/// A writer downgrades across processes, with a reader queued behind its phase and a writer
/// asleep on the writers' mutex: the reader comes in and sees the write; the writer, handed
/// the writers' mutex by the downgrade's unlock, waits for the downgraded read lock (the value
/// stays the one written before the downgrade), as does another process's `try_write`; both
/// get in once it is dropped.
pub fn downgrade_lets_readers_in_and_keeps_writers_out() {
    let f = Fixture::new(Config::default());
    let mut w = f.l.write().unwrap();
    let q = reader_child(&f.l);
    until("the reader queued", || {
        f.l.diagnostics().queued_readers == 1
    });
    let w2 = writer_child(&f.l);
    until("the writer asleep on the writers' mutex", || {
        f.l.diagnostics().writers.queued_slots == 1
    });
    w[0] = 5;
    w[1] = 5;
    let r = ShmRwLockWriteGuard::downgrade(w);
    assert_eq!(wait_limit(q, LIMIT, "reader queued behind the writer"), 5);
    f.until_writer_sleeps();
    in_child("try_write against a downgraded read lock", || {
        i32::from(!matches!(f.l.try_write(), Err(TryLockError::WouldBlock)))
    });
    assert_eq!(
        *r,
        [5, 5],
        "a writer got in beside the downgraded read lock"
    );
    assert_eq!(f.l.diagnostics().readers, 1);
    drop(r);
    assert_eq!(wait_limit(w2, LIMIT, "writer after the downgraded read"), 0);
    assert_eq!(*f.l.read().unwrap(), [6, 6]);
    assert_quiescent(&f.l);
}

/// A writer killed in the middle of `downgrade` (`RW_DOWNGRADING`: its read counted, its
/// phase still pending, the writers' mutex held): a reader queued behind it ends the dead
/// phase and comes in, told `OwnerDied`; the dead count is zeroed with the rest of what the
/// process left; the next writer is told too, and the counts end exact. And a downgraded
/// reader killed after the downgrade is an ordinary dead reader (nothing reported).
pub fn killed_while_downgrading() {
    // The window itself: stopped at point 12, the downgrader is counted as a reader while it
    // still holds the writers' mutex with its phase pending (so no writer can come between).
    {
        let f = Fixture::new(Config::default());
        let k = fork(|| {
            gomutex::__crash::stop_at(RW_DOWNGRADING);
            let g = f.l.write().unwrap();
            drop(ShmRwLockWriteGuard::downgrade(g));
            0
        });
        wait_stopped(k);
        let d = f.l.diagnostics();
        assert_eq!(
            (d.readers, d.write_pending, d.writers.owner_pid),
            (1, true, Some(k as u32)),
            "{d:?}"
        );
        signal(k, libc::SIGCONT);
        assert_eq!(wait_limit(k, LIMIT, "continued downgrader"), 0);
        assert_quiescent(&f.l);
    }
    {
        let f = Fixture::new(Config::default());
        let flags = AnonShared::counters(2);
        let (inside, go) = (flags.at(0), flags.at(1));
        let k = fork(|| {
            gomutex::__crash::crash_at(RW_DOWNGRADING);
            let mut g = f.l.write().unwrap();
            g[0] += 1;
            g[1] += 1;
            inside.store(1, SeqCst);
            while go.load(SeqCst) == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
            drop(ShmRwLockWriteGuard::downgrade(g));
            3
        });
        until("the writer inside", || inside.load(SeqCst) == 1);
        let q = reader_child(&f.l);
        until("the reader queued", || {
            f.l.diagnostics().queued_readers == 1
        });
        go.store(1, SeqCst);
        assert_eq!(
            wait_limit(k, LIMIT, "point 12"),
            KILLED,
            "point 12 not reached"
        );
        assert_eq!(wait_limit(q, LIMIT, "reader behind point 12"), 101);
        after_death(&f, true, 1, 1, "point 12");
    }
    {
        let f = Fixture::new(Config::default());
        let flag = AnonShared::counters(1);
        let flag = flag.at(0);
        let k = fork(|| {
            let mut g = f.l.write().unwrap();
            g[0] += 1;
            g[1] += 1;
            let _r = ShmRwLockWriteGuard::downgrade(g);
            flag.store(1, SeqCst);
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        until("the downgraded reader inside", || flag.load(SeqCst) == 1);
        assert_eq!(f.l.diagnostics().readers, 1);
        kill9(k);
        assert_eq!(wait_limit(k, LIMIT, "downgraded reader"), KILLED);
        after_death(&f, false, 0, 1, "killed holding a downgraded read");
    }
}
