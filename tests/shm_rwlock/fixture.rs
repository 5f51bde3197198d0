//! What the adversarial cases share: a lock in a mapping the test can look into, the lock's
//! crash points, and the children the cases fork (writers, readers, holders).

use super::common::procs::{fork, wait_limit};
use super::{assert_quiescent, until, LIMIT};
use gomutex::shm::{Config, LockError, Mapping, MappingLayout, ShmRwLock, ShmRwLockWriteGuard};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

/// The crash points of `ShmRwLock` (`src/crash.rs`).
pub(super) use gomutex::__crash::{
    RW_DOWNGRADING, RW_PENDING, RW_QUEUED, RW_READ_COUNTED, RW_UNLOCKING,
};

/// `rw_state`'s flag for a writer asleep waiting for readers (`src/shm/rwlock/mod.rs`), and the
/// word's offset in the region header (`src/shm/layout.rs` asserts it).
pub(super) const WSLEEP: u32 = 4;
pub(super) const RW_STATE_AT: usize = 60;

pub(super) const KILLED: i32 = 128 + libc::SIGKILL;

pub(super) type V = [u64; 2];

/// A lock in a mapping this test can look into (for `rw_state`, and byte comparisons).
pub(super) struct Fixture {
    pub(super) map: Mapping,
    pub(super) at: usize,
    pub(super) l: ShmRwLock<V>,
}

impl Fixture {
    pub(super) fn new(cfg: Config) -> Self {
        let mut plan = MappingLayout::new();
        let at = plan.rwlock::<V>(cfg).unwrap();
        let map = Mapping::anonymous(plan.len()).unwrap();
        let l = ShmRwLock::init_in(&map, at, [0; 2], cfg).unwrap();
        Self { map, at, l }
    }

    /// The lock's `rw_state` word.
    pub(super) fn rw_state(&self) -> u32 {
        assert!(self.at + RW_STATE_AT + 4 <= self.map.len());
        // SAFETY: in bounds (checked), 4-aligned (the header is 64-aligned and the offset is a
        // multiple of 4), and the lock only ever accesses this word atomically.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(self.at + RW_STATE_AT).cast()) }
            .load(SeqCst)
    }

    /// A writer (another process) is asleep waiting for the readers inside to leave.
    pub(super) fn until_writer_sleeps(&self) {
        until("writer asleep, pending", || {
            self.l.diagnostics().write_pending && self.rw_state() & WSLEEP != 0
        });
    }
}

/// A writer child: adds 1 to both words; exits 0 on `Ok`, 1 on `OwnerDied`, 2 otherwise.
pub(super) fn writer_child(l: &ShmRwLock<V>) -> libc::pid_t {
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
pub(super) fn reader_child(l: &ShmRwLock<V>) -> libc::pid_t {
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
pub(super) fn holding_reader(l: &ShmRwLock<V>, reads: usize, flag: &AtomicU64) -> libc::pid_t {
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
pub(super) fn holding_writer(l: &ShmRwLock<V>, flag: &AtomicU64) -> libc::pid_t {
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
pub(super) fn write_expect<'a>(
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
pub(super) fn after_death(f: &Fixture, reported: bool, deaths: u64, expect: u64, what: &str) {
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

/// Run `f` in a child that must finish within `LIMIT` (a blocked `try_*` fails the test
/// instead of hanging it); it returns 0 on success.
pub(super) fn in_child(what: &str, f: impl FnOnce() -> i32) {
    let c = fork(f);
    assert_eq!(wait_limit(c, LIMIT, what), 0, "{what}");
}
