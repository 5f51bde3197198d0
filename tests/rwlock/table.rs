//! Readers through the slot table (a biased lock), and the lock_api traits (whose upgradable
//! and recursive reads meet the table).

use super::*;
// ---------------------------------------------------------------------------------------------
// Readers through the slot table (a biased lock)

/// Taken by the tests that need a slot of the table, and by the one that claims them all.
static TABLE: StdMutex<()> = StdMutex::new(());

fn table_tests() -> std::sync::MutexGuard<'static, ()> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A read lock through the table: released by its token.
fn table_read(l: &RawRwLock) -> gomutex::rwalgo::ReadToken {
    let t = l.read_token();
    assert!(
        t.in_table(),
        "a biased lock's reader did not enter the table"
    );
    t
}

/// Run `f` while another thread holds a read lock of `l` (through its word).
fn beside_a_reader(l: &RwLock<()>, f: impl FnOnce()) {
    let (inside, done) = (Barrier::new(2), AtomicBool::new(false));
    thread::scope(|s| {
        s.spawn(|| {
            let g = l.read().unwrap();
            inside.wait();
            wait_for("the main thread", || done.load(SeqCst));
            drop(g);
        });
        inside.wait();
        f();
        done.store(true, SeqCst);
    });
}

/// The fourth read that finds another thread's reader inside biases the lock; from then on a
/// reader enters the table and writes nothing in the lock's word. A thread's own recursive
/// reads do not count.
#[test]
fn overlapping_reads_bias_the_lock_and_readers_enter_the_table() {
    let _table = table_tests();
    let l = RwLock::new(());
    {
        let held = l.read().unwrap();
        for _ in 0..10 {
            drop(l.read().unwrap());
        }
        drop(held);
    }
    assert!(!l.raw().is_biased(), "biased by recursive reads");
    beside_a_reader(&l, || {
        for i in 0..3 {
            assert!(!l.raw().is_biased(), "biased after {i} overlaps");
            drop(l.read().unwrap());
        }
        drop(l.read().unwrap()); // the fourth overlap biases
    });
    assert!(l.raw().is_biased());
    let before = l.raw().state();
    let g = l.read().unwrap();
    // Counted in the table, not in the word.
    assert_eq!(l.raw().state(), before);
    // This thread's slot is taken: a second read goes through the word.
    let held = l.read().unwrap();
    assert_eq!(l.raw().state() >> 42, 1);
    assert_eq!(l.raw().readers(), 2);
    assert!(matches!(l.try_write(), Err(TryLockError::WouldBlock)));
    drop((g, held));
    assert_eq!(l.raw().readers(), 0);
    assert!(l.try_write().is_ok());
    assert_quiescent(l.raw());
}

/// A lock never read concurrently never biases, so its reads never touch the table.
#[test]
fn a_lock_never_read_concurrently_never_enters_the_table() {
    let l = RwLock::new(0);
    for i in 0..1000 {
        let t = l.raw().read_token();
        assert!(!t.in_table());
        // SAFETY: read-locked just above.
        unsafe { l.raw().unlock_read_token(t) };
        if i % 10 == 0 {
            *l.write().unwrap() += 1;
        }
    }
    assert!(!l.raw().is_biased());
    assert_quiescent(l.raw());
}

/// Against a reader in the table: `try_write` fails at once (it never waits), `try_read`
/// succeeds; once it leaves, `try_write` succeeds.
#[test]
fn try_write_fails_against_a_table_reader_without_blocking() {
    let _table = table_tests();
    let l = RawRwLock::new();
    assert!(l.bias());
    let t = table_read(&l);
    for _ in 0..1000 {
        assert!(!l.try_write());
    }
    assert!(l.is_locked() && !l.is_locked_exclusive());
    let t2 = l.try_read_token().unwrap();
    // SAFETY: both read-locked above.
    unsafe { l.unlock_read_token(t2) };
    // SAFETY: as above.
    unsafe { l.unlock_read_token(t) };
    assert!(l.try_write());
    // SAFETY: write-locked just above.
    unsafe { l.unlock_write() };
    assert_quiescent(&l);
}

/// A writer behind a reader in the table moves it into the word's count (folding), sleeps,
/// and is woken by that reader leaving through the word; the reader's data is the writer's
/// to change only after.
#[test]
fn a_writer_folds_a_table_reader_and_is_woken_by_it() {
    let _table = table_tests();
    let l = Arc::new(RwLock::new(0));
    assert!(l.raw().bias());
    let r = l.read().unwrap();
    assert_eq!(l.raw().state(), 0, "the reader is in the table");
    let w = {
        let l = l.clone();
        thread::spawn(move || *l.write().unwrap() = 1)
    };
    // Folded: counted in the word now (rwword's layout: readers from bit 42).
    wait_for("the writer to fold the reader", || {
        l.raw().state() >> 42 == 1
    });
    wait_for("the writer to sleep", || l.raw().parked() == 1);
    assert_eq!(*r, 0);
    drop(r);
    join_within(LIMIT, vec![w]);
    assert_eq!(*l.read().unwrap(), 1);
    assert_quiescent(l.raw());
}

/// A timed writer behind a table reader gives up as a ghost; the reader's exit ends its phase.
#[test]
fn a_timed_writer_behind_a_table_reader_finishes_as_a_ghost() {
    let _table = table_tests();
    let l = Arc::new(RwLock::new(0));
    assert!(l.raw().bias());
    let r = l.read().unwrap();
    assert!(matches!(
        l.try_write_for(Duration::from_millis(5)),
        Err(TryLockError::WouldBlock)
    ));
    assert!(matches!(l.try_read(), Err(TryLockError::WouldBlock)));
    drop(r);
    assert!(l.try_write().is_ok());
    assert_quiescent(l.raw());
}

/// Writes that find nobody in the table four times in a row take the bias away; readers that
/// overlap again bring it back.
#[test]
fn idle_revocations_unbias_and_overlaps_bias_again() {
    let _table = table_tests();
    let l = RwLock::new(());
    assert!(l.raw().bias());
    for _ in 0..3 {
        drop(l.write().unwrap());
        assert!(l.raw().is_biased());
    }
    drop(l.write().unwrap());
    assert!(!l.raw().is_biased());
    beside_a_reader(&l, || {
        for _ in 0..4 {
            drop(l.read().unwrap());
        }
    });
    assert!(l.raw().is_biased());
    // A write that finds a reader in the table keeps the bias.
    let r = l.read().unwrap();
    let l2 = &l;
    thread::scope(|s| {
        let w = s.spawn(move || drop(l2.write().unwrap()));
        wait_for("the writer to fold the reader", || {
            l2.raw().state() >> 42 == 1
        });
        drop(r);
        w.join().unwrap();
    });
    assert!(l.raw().is_biased());
    assert_quiescent(l.raw());
}

/// Go's HammerRWMutex through the table: token reads on a biased lock (blocking and with
/// deadlines) against two writers; exclusion checked in every critical section.
#[test]
fn hammer_through_the_table() {
    let _table = table_tests();
    let n = if cfg!(miri) { 20 } else { 2000 };
    for (readers, timed) in [(1, false), (3, false), (10, false), (3, true), (10, true)] {
        let l = Arc::new(RawRwLock::new());
        assert!(l.bias());
        let activity = Arc::new(AtomicI32::new(0));
        let entered = Arc::new(AtomicUsize::new(0));
        let spawn = |writer: bool| {
            let (l, activity, entered) = (l.clone(), activity.clone(), entered.clone());
            thread::spawn(move || {
                if !writer {
                    // One read through the table, for sure: the writers' idle revocations may
                    // unbias the lock before this thread starts.
                    loop {
                        l.bias();
                        let t = l.read_token();
                        let in_table = t.in_table();
                        // SAFETY: read-locked just above.
                        unsafe { l.unlock_read_token(t) };
                        if in_table {
                            entered.fetch_add(1, SeqCst);
                            break;
                        }
                    }
                }
                for i in 0..n {
                    let short = Duration::from_micros(20);
                    let token = if writer {
                        let ok = if timed {
                            l.try_write_for(short)
                        } else {
                            l.write();
                            true
                        };
                        if !ok {
                            continue;
                        }
                        None
                    } else {
                        let t = if timed {
                            l.try_read_token_until(Instant::now().checked_add(short))
                        } else if i % 7 == 0 {
                            l.try_read_token()
                        } else {
                            Some(l.read_token())
                        };
                        let Some(t) = t else { continue };
                        if t.in_table() {
                            entered.fetch_add(1, SeqCst);
                        }
                        Some(t)
                    };
                    let delta = if writer { 10000 } else { 1 };
                    let v = activity.fetch_add(delta, SeqCst) + delta;
                    if writer {
                        assert_eq!(v, 10000, "wlock({v})");
                    } else {
                        assert!((1..10000).contains(&v), "rlock({v})");
                    }
                    for _ in 0..100 {
                        std::hint::spin_loop();
                    }
                    activity.fetch_sub(delta, SeqCst);
                    match token {
                        // SAFETY: write-locked above.
                        None => unsafe { l.unlock_write() },
                        // SAFETY: read-locked above, where the token says.
                        Some(t) => unsafe { l.unlock_read_token(t) },
                    }
                }
            })
        };
        let mut handles = vec![spawn(true), spawn(true)];
        handles.extend((0..readers).map(|_| spawn(false)));
        join_within(LIMIT, handles);
        assert_eq!(activity.load(SeqCst), 0);
        assert!(entered.load(SeqCst) > 0, "no read went through the table");
        assert_eq!(l.readers(), 0);
        assert_quiescent(&l);
    }
}

/// More readers at once than the table has slots: the rest read through the word, and a
/// writer waits for all of them.
#[test]
fn more_readers_than_slots_read_through_the_word() {
    let _table = table_tests();
    let n = gomutex::rwtable::SLOTS + 8;
    let l = Arc::new(RwLock::new(0));
    assert!(l.raw().bias());
    let (inside, out) = (Arc::new(Barrier::new(n + 1)), Arc::new(Barrier::new(n + 1)));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (l, inside, out) = (l.clone(), inside.clone(), out.clone());
            thread::spawn(move || {
                let g = l.read().unwrap();
                inside.wait();
                out.wait();
                *g
            })
        })
        .collect();
    inside.wait();
    assert_eq!(l.raw().readers(), n as u64);
    assert!(l.raw().state() >> 42 >= 8, "at least 8 readers had no slot");
    let w = {
        let l = l.clone();
        thread::spawn(move || *l.write().unwrap() = 1)
    };
    wait_for("the writer to announce itself", || {
        l.raw().is_locked_exclusive()
    });
    out.wait();
    assert!(join_within(LIMIT, handles).iter().all(|v| *v == 0));
    join_within(LIMIT, vec![w]);
    assert_eq!(*l.read().unwrap(), 1);
    assert_quiescent(l.raw());
}

/// A thread gives its slot back when it exits: many more threads than slots, one after the
/// other, each enter the table.
#[test]
fn exiting_threads_give_their_slots_back() {
    let _table = table_tests();
    let l = Arc::new(RawRwLock::new());
    assert!(l.bias());
    for _ in 0..gomutex::rwtable::SLOTS * 2 {
        let l = l.clone();
        let in_table = thread::spawn(move || {
            let t = l.read_token();
            let in_table = t.in_table();
            // SAFETY: read-locked just above.
            unsafe { l.unlock_read_token(t) };
            in_table
        })
        .join()
        .unwrap();
        assert!(in_table, "the table ran out of slots");
    }
}

// ---------------------------------------------------------------------------------------------
// lock_api

#[cfg(feature = "lock_api")]
#[test]
fn lock_api_rwlock_has_parking_lots_api() {
    use lock_api::{RwLock, RwLockWriteGuard};
    let l: RwLock<RawRwLock, Vec<i32>> = RwLock::new(vec![1]);
    l.write().push(2);
    {
        let a = l.read();
        let b = l.try_read().unwrap();
        assert_eq!(a.len() + b.len(), 4);
        assert!(l.try_write().is_none() && l.is_locked() && !l.is_locked_exclusive());
    }
    let w = l.try_write_for(Duration::from_millis(5)).unwrap();
    assert!(l.is_locked_exclusive() && l.try_read_for(Duration::from_millis(1)).is_none());
    let r = RwLockWriteGuard::downgrade(w);
    assert!(l.try_read().is_some() && l.try_write().is_none());
    drop(r);
    assert!(l
        .try_write_until(Instant::now() + Duration::from_millis(5))
        .is_some());
    assert!(!l.is_locked());
    // SAFETY: the raw lock is only inspected, never unlocked through.
    assert_quiescent(unsafe { l.raw() });
}

/// `RawRwLockFair`: a fair write unlock hands the lock to the writer queued first, so the
/// releasing thread's `try_write` right after fails (an unfair one lets it barge back in);
/// `bump_exclusive` with nobody waiting keeps the lock.
#[cfg(feature = "lock_api")]
#[test]
fn lock_api_fair_write_unlock_hands_off_to_the_queued_writer() {
    use lock_api::{RwLock, RwLockWriteGuard};
    let l: Arc<RwLock<RawRwLock, u32>> = Arc::new(RwLock::new(0));
    let mut w = l.write();
    RwLockWriteGuard::bump(&mut w);
    *w += 1;
    let go = Arc::new(AtomicBool::new(false));
    let b = {
        let (l, go) = (l.clone(), go.clone());
        thread::spawn(move || {
            let mut g = l.write();
            *g += 1;
            wait_for("the go-ahead", || go.load(SeqCst));
        })
    };
    // SAFETY: the raw lock is only inspected, never unlocked through.
    let raw = unsafe { l.raw() };
    wait_for("the writer to queue", || raw.writers() >> 3 == 1);
    RwLockWriteGuard::unlock_fair(w);
    assert!(
        l.try_write().is_none(),
        "the releasing thread barged back in"
    );
    go.store(true, SeqCst);
    join_within(LIMIT, vec![b]);
    assert_eq!(*l.read(), 2);
    // SAFETY: the raw lock is only inspected, never unlocked through.
    assert_quiescent(unsafe { l.raw() });
}

/// `RawRwLockUpgrade`: one upgradable reader beside plain readers, excluding writers and other
/// upgradable readers; `try_upgrade` fails while another reader is inside; `upgrade` waits
/// for the readers inside (one through the table, folded) and keeps new ones out; the
/// downgrades.
#[cfg(feature = "lock_api")]
#[test]
fn lock_api_upgradable_reads() {
    let _table = table_tests();
    use lock_api::{RwLock, RwLockUpgradableReadGuard, RwLockWriteGuard};
    let l: Arc<RwLock<RawRwLock, u32>> = Arc::new(RwLock::new(0));
    // SAFETY: the raw lock is only inspected (and biased), never unlocked through.
    let raw = unsafe { l.raw() };
    let u = l.upgradable_read();
    let r = l.read();
    assert!(l.try_upgradable_read().is_none() && l.try_write().is_none());
    let u = RwLockUpgradableReadGuard::try_upgrade(u).unwrap_err();
    drop(r);
    // Upgrade and downgrade without anyone else.
    let w = RwLockUpgradableReadGuard::try_upgrade(u).unwrap();
    assert!(l.try_read().is_none());
    let u = RwLockWriteGuard::downgrade_to_upgradable(w);
    assert_eq!(*l.read() + *u, 0);
    drop(RwLockUpgradableReadGuard::downgrade(u));
    assert!(l.try_upgradable_read().is_some());
    // A blocking upgrade behind a reader in the table, which it folds.
    assert!(raw.bias());
    let u = l.upgradable_read();
    let r = {
        let t = raw.read_token();
        assert!(t.in_table());
        t
    };
    let up = {
        let l = l.clone();
        thread::spawn(move || {
            let u = l.upgradable_read();
            let mut w = RwLockUpgradableReadGuard::upgrade(u);
            *w += 1;
        })
    };
    drop(u);
    wait_for("the upgrade to fold the table reader", || {
        raw.state() >> 42 == 1 && raw.is_locked_exclusive()
    });
    assert!(l.try_read().is_none(), "a reader got in beside the upgrade");
    // SAFETY: read-locked above, where the token says.
    unsafe { raw.unlock_read_token(r) };
    join_within(LIMIT, vec![up]);
    assert_eq!(*l.read(), 1);
    assert_quiescent(raw);
}

#[cfg(feature = "lock_api_04")]
#[test]
fn lock_api_04_rwlock_works() {
    use lock_api_04::{RwLock, RwLockWriteGuard};
    let l: RwLock<RawRwLock, i32> = RwLock::new(1);
    *l.write() += 1;
    let w = l.try_write_for(Duration::from_millis(5)).unwrap();
    let r = RwLockWriteGuard::downgrade(w);
    assert_eq!(*r + *l.read(), 4);
    drop(r);
    assert!(l
        .try_read_until(Instant::now() + Duration::from_millis(5))
        .is_some());
    assert!(!l.is_locked());
    let u = l.upgradable_read();
    assert!(l.try_upgradable_read().is_none() && l.try_read().is_some());
    let mut w = lock_api_04::RwLockUpgradableReadGuard::upgrade(u);
    *w += 1;
    lock_api_04::RwLockWriteGuard::unlock_fair(w);
    assert_eq!(*l.read(), 3);
    assert!(!l.is_locked());
}

/// lock_api 0.4's recursive reads: with a writer waiting behind a reader, a plain read waits
/// (writer preference) but a recursive one enters beside the reader; with the writer inside,
/// it waits.
#[cfg(feature = "lock_api_04")]
#[test]
fn lock_api_04_recursive_read_enters_beside_readers() {
    let l: Arc<lock_api_04::RwLock<RawRwLock, u32>> = Arc::new(lock_api_04::RwLock::new(0));
    let r = l.read();
    let w = {
        let l = l.clone();
        thread::spawn(move || *l.write() += 1)
    };
    // SAFETY: the raw lock is only inspected, never unlocked through.
    let raw = unsafe { l.raw() };
    wait_for("the writer to announce itself", || {
        raw.is_locked_exclusive()
    });
    assert!(l.try_read().is_none());
    let r2 = l
        .try_read_recursive()
        .expect("a recursive read waited for the writer");
    let r3 = l.read_recursive();
    assert_eq!(*r + *r2 + *r3, 0);
    drop((r, r2, r3));
    join_within(LIMIT, vec![w]);
    let g = l.write();
    assert!(l.try_read_recursive().is_none());
    assert!(l.try_read_recursive_for(Duration::from_millis(2)).is_none());
    drop(g);
    assert_eq!(*l.read_recursive(), 1);
    assert_quiescent(raw);
}

/// Every way a read or write lock is taken reports the poison flag as std's does: the first
/// reader, a recursive read, a read beside another thread's, a read through the table, a
/// write of a lock whose word keeps overlap bits; and none once the flag is cleared. (The
/// guards read the flag off the word the lock operation saw, not off a second load.)
#[test]
fn every_read_and_write_path_reports_poison() {
    let _table = table_tests();
    let l = Arc::new(RwLock::new(()));
    {
        let l = l.clone();
        let _ = thread::spawn(move || {
            let _w = l.write().unwrap();
            panic!("poisoning the lock on purpose");
        })
        .join();
    }
    assert!(l.is_poisoned());
    {
        let first = l.read();
        let recursive = l.read();
        assert!(first.is_err() && recursive.is_err());
    }
    // A read beside another thread's: one overlap noted, not biased, and the word keeps its
    // overlap bits through the write below.
    {
        let other = l.read();
        thread::scope(|s| {
            s.spawn(|| assert!(l.read().is_err()));
        });
        drop(other);
    }
    assert!(!l.raw().is_biased());
    drop(l.write().unwrap_err().into_inner());
    assert!(l.raw().bias());
    {
        let _r = l.read().unwrap_err().into_inner();
        // Through the table: counted there, not in the word.
        assert_eq!((l.raw().state() >> 42, l.raw().readers()), (0, 1));
    }
    l.clear_poison();
    drop(l.read().unwrap());
    drop(l.write().unwrap());
    assert_quiescent(l.raw());
}
