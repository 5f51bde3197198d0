//! Multi-process tests of `gomutex::shm::ShmCondvar` (issue 11, item 1).
//!
//! `harness = false`, like `shm_process`: the tests run one after another on the main thread,
//! so the process is single-threaded whenever it forks. Run one with
//! `cargo test --test shm_condvar -- <name> --exact`. The kill test runs for
//! `GOMUTEX_CONDVAR_KILL_SECS` seconds (default 3).

use gomutex::shm::{
    commit_store, Config, LockError, Mapping, MappingLayout, ShmCondvar, ShmMutex, ShmSafe,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;
use common::procs::{self, fork, wait_limit};
use common::shmtest::header_u32;
use common::torture::{self, Kills, Rng};

// ------------------------------------------------------------------ helpers

/// Wait until `n` processes sleep in the region's own condition variable (its sleepers hint).
fn until_sleeping<T: ShmSafe>(m: &ShmMutex<T>, n: u32) {
    common::poll_until(
        Duration::from_secs(10),
        Duration::from_micros(200),
        || format!("{n} condvar sleeper(s)"),
        || header_u32(m, SLEEPERS).load(SeqCst) >= n,
    );
}

/// Whether `f` panics (without printing the panic).
fn panics(f: impl FnOnce()) -> bool {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = catch_unwind(AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    r.is_err()
}

// ------------------------------------------------------------------ the queue

const CAP: u64 = 4;

/// A bounded FIFO of the numbers 1, 2, 3, …: item `k` is pushed as the `k`-th push, so a push
/// is `buf[tail % CAP] = tail + 1; tail += 1` and a pop checks `buf[head % CAP] == head + 1`.
/// Each commits with its last store: an owner killed in the section leaves nothing half-done.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Queue {
    buf: [u64; CAP as usize],
    head: u64,
    tail: u64,
    /// Producers stop once `tail` reaches it, consumers once `head` does.
    limit: u64,
    /// Pops that found another value than `head + 1`.
    errors: u64,
    /// Owner deaths reported to the workers (through `lock` or `wait`).
    owner_died: u64,
}
// SAFETY: repr(C), u64s only; every bit pattern is a valid `Queue`.
unsafe impl ShmSafe for Queue {}

/// Count an owner death reported to a queue worker (through `lock` or `wait`).
fn count_death(q: &mut Queue) {
    q.owner_died += 1;
}

/// The queue's condition variables: "not full" (producers wait) and "not empty" (consumers
/// wait); the same one twice for a single condition variable.
type Cvs<'a> = (ShmCondvar<'a, Queue>, ShmCondvar<'a, Queue>);

/// Notify the other side: `notify_all` if `all`, else `notify_one`.
fn notify(cv: &ShmCondvar<'_, Queue>, all: bool) {
    if all {
        cv.notify_all();
    } else {
        cv.notify_one();
    }
}

/// Push until `tail` reaches `limit`; `all` chooses `notify_all` (else `notify_one`).
fn producer(m: &ShmMutex<Queue>, (not_full, not_empty): Cvs<'_>, all: bool) -> i32 {
    loop {
        let g = m.lock_or_repair(count_death);
        let mut g = not_full.wait_while_or_repair(
            g,
            |q| q.tail - q.head >= CAP && q.tail < q.limit,
            count_death,
        );
        if g.tail >= g.limit {
            drop(g);
            // Let the others see the end.
            not_full.notify_all();
            not_empty.notify_all();
            return 0;
        }
        let t = g.tail;
        g.buf[(t % CAP) as usize] = t + 1;
        commit_store(&mut g.tail, t + 1);
        drop(g);
        notify(&not_empty, all);
    }
}

/// Pop until `head` reaches `limit`, checking every item.
fn consumer(m: &ShmMutex<Queue>, (not_full, not_empty): Cvs<'_>, all: bool) -> i32 {
    loop {
        let g = m.lock_or_repair(count_death);
        let mut g = not_empty.wait_while_or_repair(
            g,
            |q| q.head == q.tail && q.head < q.limit,
            count_death,
        );
        if g.head >= g.limit {
            drop(g);
            not_full.notify_all();
            not_empty.notify_all();
            return 0;
        }
        let h = g.head;
        if g.buf[(h % CAP) as usize] != h + 1 {
            g.errors += 1;
        }
        commit_store(&mut g.head, h + 1);
        drop(g);
        notify(&not_full, all);
    }
}

/// A queue's mutex in a fresh anonymous mapping, with places for two condition variables.
fn queue_mapping(q: Queue) -> (Mapping, ShmMutex<Queue>, [usize; 2]) {
    let cfg = Config::default();
    let mut plan = MappingLayout::new();
    let at = plan.mutex::<Queue>(cfg).unwrap();
    let cvs = [plan.condvar(), plan.condvar()];
    let map = Mapping::anonymous(plan.len()).unwrap();
    let m = ShmMutex::init_in(&map, at, q, cfg).unwrap();
    (map, m, cvs)
}

/// The queue's condition variables: two placed in the mapping, or the region's own twice.
fn queue_cvs<'a>(
    map: &'a Mapping,
    m: &'a ShmMutex<Queue>,
    at: [usize; 2],
    placed: bool,
) -> Cvs<'a> {
    if placed {
        (
            m.condvar_in(map, at[0]).unwrap(),
            m.condvar_in(map, at[1]).unwrap(),
        )
    } else {
        (m.condvar(), m.condvar())
    }
}

// ------------------------------------------------------------------ tests

/// Timed waits time out; a notify from another process wakes an untimed wait; `wait_while`
/// and `wait_timeout_while` see the predicate.
fn basics() {
    let m = ShmMutex::anonymous(0u32).unwrap();
    let cv = m.condvar();
    let t = Instant::now();
    let (g, r) = cv
        .wait_timeout(m.lock().unwrap(), Duration::from_millis(30))
        .unwrap();
    assert!(r.timed_out());
    assert!(t.elapsed() >= Duration::from_millis(30));
    let (g, r) = cv
        .wait_timeout_while(g, Duration::from_millis(25), |v| *v == 0)
        .unwrap();
    assert!(r.timed_out());
    drop(g);

    let child = fork(|| {
        std::thread::sleep(Duration::from_millis(20));
        *m.lock().unwrap() = 7;
        cv.notify_one();
        0
    });
    let t = Instant::now();
    let (g, r) = cv
        .wait_timeout_while(m.lock().unwrap(), Duration::from_secs(10), |v| *v != 7)
        .unwrap();
    assert!(!r.timed_out());
    assert_eq!(*g, 7);
    drop(g);
    println!("  woken by another process after {:.2?}", t.elapsed());
    assert_eq!(wait_limit(child, Duration::from_secs(10), "notifier"), 0);

    // A guard of another mutex is refused.
    let other = ShmMutex::anonymous(0u32).unwrap();
    assert!(panics(|| {
        let _ = cv.wait(other.lock().unwrap());
    }));
    assert!(!other.is_locked() && !m.is_locked());
    let _ = format!("{cv:?}");
}

/// 3 producer and 3 consumer processes move 12 000 items through a 4-slot queue; every item
/// arrives once, in order. With the region's condvar for both conditions: once with
/// `notify_all` (chained wake-ups), once with `notify_one` (a wake-up may reach the wrong
/// side, and the 10 ms re-check must keep it going); then with "not full" and "not empty"
/// placed in the mapping, with `notify_one` (each wake-up reaches the right side).
fn queue_exact() {
    for (placed, all) in [(false, true), (false, false), (true, false)] {
        let n = 12_000;
        let (map, m, at) = queue_mapping(Queue {
            limit: n,
            ..Queue::default()
        });
        let cvs = queue_cvs(&map, &m, at, placed);
        let t = Instant::now();
        let mut kids = Vec::new();
        for _ in 0..3 {
            kids.push(fork(|| producer(&m, cvs, all)));
            kids.push(fork(|| consumer(&m, cvs, all)));
        }
        for k in kids {
            assert_eq!(wait_limit(k, Duration::from_secs(60), "queue worker"), 0);
        }
        let g = m.lock().unwrap();
        assert_eq!((g.head, g.tail, g.errors, g.owner_died), (n, n, 0, 0));
        println!(
            "  {}, {}: {n} items in {:.2?}",
            if placed {
                "two placed condvars"
            } else {
                "one condvar"
            },
            if all { "notify_all" } else { "notify_one" },
            t.elapsed()
        );
    }
}

/// Two processes hand a turn back and forth 5 000 times each with `notify_one`, four
/// processes pass it round 1 500 times each with `notify_all`: a notify racing a wait must
/// never be lost. A lost wake-up would cost a 10 ms re-check; the figures show there are
/// (next to) none.
fn notify_races() {
    #[derive(Clone, Copy)]
    #[repr(C)]
    struct Turn {
        turn: u64,
    }
    // SAFETY: repr(C), one u64.
    unsafe impl ShmSafe for Turn {}

    for (procs, rounds, all) in [(2u64, 5_000u64, false), (4, 1_500, true)] {
        let m = ShmMutex::anonymous(Turn { turn: 0 }).unwrap();
        let t = Instant::now();
        let kids: Vec<_> = (0..procs)
            .map(|me| {
                let m = &m;
                fork(move || {
                    let cv = m.condvar();
                    for _ in 0..rounds {
                        let g = m.lock_or_repair(|_| {});
                        let mut g = cv.wait_while_or_repair(g, |t| t.turn % procs != me, |_| {});
                        g.turn += 1;
                        drop(g);
                        if all {
                            cv.notify_all();
                        } else {
                            cv.notify_one();
                        }
                    }
                    0
                })
            })
            .collect();
        for k in kids {
            assert_eq!(wait_limit(k, Duration::from_secs(60), "turn taker"), 0);
        }
        let turns = procs * rounds;
        assert_eq!(m.lock().unwrap().turn, turns);
        let el = t.elapsed();
        println!(
            "  {procs} processes, {}: {turns} turns in {el:.2?} ({:.1} µs a turn)",
            if all { "notify_all" } else { "notify_one" },
            el.as_secs_f64() * 1e6 / turns as f64
        );
        // 10 ms for every lost wake-up: even one in ten lost would exceed this.
        assert!(
            el < Duration::from_millis(turns / 10 * 10),
            "turns too slow: wake-ups lost?"
        );
    }
}

/// Six processes wait (untimed) for a flag; one `notify_all` wakes all of them through the
/// chain.
fn notify_all_wakes_everyone() {
    #[derive(Clone, Copy)]
    #[repr(C)]
    struct S {
        ready: u64,
        go: u64,
    }
    // SAFETY: repr(C), u64s only.
    unsafe impl ShmSafe for S {}
    let m = ShmMutex::anonymous(S { ready: 0, go: 0 }).unwrap();
    let cv = m.condvar();
    let kids: Vec<_> = (0..6)
        .map(|_| {
            fork(|| {
                let mut g = m.lock().unwrap();
                g.ready += 1;
                let g = cv.wait_while(g, |s| s.go == 0).unwrap();
                assert_eq!(g.go, 1);
                0
            })
        })
        .collect();
    // Every waiter read the condvar's counter under the lock before `ready` counts it.
    let t = Instant::now();
    while m.lock().unwrap().ready < 6 {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(1));
    }
    until_sleeping(&m, 6);
    let t = Instant::now();
    m.lock().unwrap().go = 1;
    cv.notify_all();
    for k in kids {
        assert_eq!(wait_limit(k, Duration::from_secs(10), "waiter"), 0);
    }
    println!("  6 waiters woken and exited in {:.2?}", t.elapsed());
}

/// The condvar's words in the header: sequence, last broadcast, sleepers hint.
const SEQ: usize = 176;
const ALL: usize = 180;
const SLEEPERS: usize = 184;
// The offsets above are layout version 4's, unchanged in 5 (which added the value's type)
// 6 (which added the statistics rows after the waiter slots), 7 (the readers-writer lock's
// words, in what was padding), 8 (a statistics count in a spare word of the rows) and 9 (the
// readers-writer lock's words in its value).
const _: () = assert!(gomutex::shm::LAYOUT_VERSION == 9, "header offsets changed");

/// A notifier killed after its bump but before its `futex` wake (played here by bumping the
/// header's condvar word directly), and a broadcast whose chain breaks at once (the same, with
/// the broadcast mark set): untimed sleepers still return, within the 10 ms re-check.
fn notifier_death_loses_no_wakeup() {
    for (waiters, broadcast) in [(1, false), (4, true)] {
        let m = ShmMutex::anonymous(0u64).unwrap();
        let cv = m.condvar();
        let kids: Vec<_> = (0..waiters)
            .map(|_| {
                fork(|| {
                    let mut g = m.lock().unwrap();
                    *g += 1;
                    let g = cv.wait_while(g, |v| *v < 1000).unwrap();
                    assert_eq!(*g, 1000);
                    0
                })
            })
            .collect();
        let t = Instant::now();
        while *m.lock().unwrap() < waiters {
            assert!(t.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(1));
        }
        until_sleeping(&m, waiters as u32);
        *m.lock().unwrap() = 1000;
        let t = Instant::now();
        let seq = header_u32(&m, SEQ);
        if broadcast {
            header_u32(&m, ALL).store(seq.load(SeqCst).wrapping_add(1), SeqCst);
        }
        seq.fetch_add(1, SeqCst); // ... and the notifier dies here: no futex wake
        for k in kids {
            assert_eq!(wait_limit(k, Duration::from_secs(10), "waiter"), 0);
        }
        let el = t.elapsed();
        println!("  {waiters} sleeper(s), no wake-up sent: all back in {el:.2?}");
        assert!(el < Duration::from_secs(1), "{el:?}");
    }
}

/// Wait until the value under `m` is at least 1: a waiter set it so under the lock, just
/// before its wait read the condition variable's counter (so any notify or death from now on
/// reaches it).
fn until_ready(m: &ShmMutex<u64>) {
    common::poll_until(
        Duration::from_secs(10),
        Duration::from_micros(200),
        || "the waiter registered".into(),
        || matches!(m.try_lock(), Ok(g) if *g >= 1),
    );
}

/// A mutex for `u64` in a fresh mapping, with a place for a condition variable.
fn flag_mapping() -> (Mapping, ShmMutex<u64>, usize) {
    let mut plan = MappingLayout::new();
    let at = plan.mutex::<u64>(Config::default()).unwrap();
    let cv = plan.condvar();
    let map = Mapping::anonymous(plan.len()).unwrap();
    let m = ShmMutex::init_in(&map, at, 0u64, Config::default()).unwrap();
    (map, m, cv)
}

/// A process that makes the condition true and dies before it notifies — after its unlock, or
/// still holding the lock — does not leave the waiters asleep: sleepers probe every 10 ms
/// (also when every process sleeps in the condvar) and the recovery of a dead participant
/// notifies all, the region's condvar and those placed beside it. Holding: the waiter gets
/// `OwnerDied`.
fn death_before_notify_wakes_waiters() {
    for placed in [false, true] {
        for holding in [false, true] {
            let (map, m, at) = flag_mapping();
            let cv = if placed {
                m.condvar_in(&map, at).unwrap()
            } else {
                m.condvar()
            };
            let waiter = fork(|| {
                let mut g = m.lock().unwrap();
                *g = 1;
                match cv.wait_while(g, |v| *v < 2) {
                    Ok(g) if !holding && *g == 2 => 0,
                    Err(LockError::OwnerDied(g)) if holding && *g == 2 => 0,
                    _ => 2,
                }
            });
            until_ready(&m);
            let notifier = fork(|| {
                let mut g = m.lock().unwrap();
                *g = 2;
                if !holding {
                    drop(g);
                } else {
                    std::mem::forget(g);
                }
                // SAFETY: die before the notify.
                unsafe { libc::raise(libc::SIGKILL) };
                0
            });
            let t = Instant::now();
            assert_eq!(
                wait_limit(notifier, Duration::from_secs(10), "notifier"),
                128 + libc::SIGKILL
            );
            assert_eq!(wait_limit(waiter, Duration::from_secs(10), "waiter"), 0);
            println!(
                "  {} condvar, notifier died {}: waiter back {:.2?} after",
                if placed { "placed" } else { "region's" },
                if holding {
                    "holding the lock"
                } else {
                    "after its unlock"
                },
                t.elapsed()
            );
        }
    }
}

/// A waiter re-acquiring the lock after its owner was SIGKILLed gets `OwnerDied` from `wait`,
/// as `lock` would report it, and later waits are `Ok` once it marked the data consistent.
fn wait_reports_owner_died() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let cv = m.condvar();
    let waiter = fork(|| {
        let mut g = m.lock().unwrap();
        *g = 1;
        let r = cv.wait_while(g, |v| *v < 2);
        let Err(LockError::OwnerDied(g)) = r else {
            return 2;
        };
        g.mark_consistent();
        drop(g);
        let (g, r) = cv
            .wait_timeout(m.lock().unwrap(), Duration::from_millis(5))
            .unwrap();
        assert!(r.timed_out());
        assert_eq!(*g, 2);
        0
    });
    until_ready(&m);
    let killer = fork(|| {
        let mut g = m.lock().unwrap();
        *g = 2;
        cv.notify_one();
        // SAFETY: kill ourselves while holding the lock.
        unsafe { libc::raise(libc::SIGKILL) };
        drop(g);
        0
    });
    assert_eq!(
        wait_limit(killer, Duration::from_secs(10), "killer"),
        128 + libc::SIGKILL
    );
    assert_eq!(wait_limit(waiter, Duration::from_secs(10), "waiter"), 0);
    assert!(m.lock().is_ok());
}

/// Issue 22, item 8: a consumer dies holding the lock while a producer waits for room in a
/// full queue. `wait_while` returns `OwnerDied` with the queue still full: the pattern the
/// docs once showed (`.unwrap_or_else(|e| e.into_inner())`, then push) overwrites an item;
/// `wait_while_or_repair` repairs, re-checks, waits on, and every item arrives.
fn owner_death_in_a_full_queue() {
    /// The docs' former `push`.
    fn push_old(m: &ShmMutex<Queue>, v: u64) {
        let cv = m.condvar();
        let g = m.lock_or_repair(|_| {});
        let mut q = cv
            .wait_while(g, |q| q.tail - q.head == CAP)
            .unwrap_or_else(|e| e.into_inner());
        let t = q.tail;
        q.buf[(t % CAP) as usize] = v;
        q.tail = t + 1;
        drop(q);
        cv.notify_all();
    }
    /// The docs' `push` now.
    fn push(m: &ShmMutex<Queue>, v: u64) {
        let cv = m.condvar();
        let g = m.lock_or_repair(|_| {});
        let mut q = cv.wait_while_or_repair(g, |q| q.tail - q.head == CAP, |_| {});
        let t = q.tail;
        q.buf[(t % CAP) as usize] = v;
        commit_store(&mut q.tail, t + 1);
        drop(q);
        cv.notify_all();
    }
    for old in [true, false] {
        let m = ShmMutex::anonymous(Queue {
            buf: [1, 2, 3, 4],
            tail: CAP,
            ..Queue::default()
        })
        .unwrap();
        let producer = fork(|| {
            if old {
                push_old(&m, 5);
            } else {
                push(&m, 5);
            }
            0
        });
        until_sleeping(&m, 1);
        // A consumer that dies in its section, before it pops anything.
        let consumer = fork(|| {
            std::mem::forget(m.lock());
            // SAFETY: die holding the lock.
            unsafe { libc::raise(libc::SIGKILL) };
            0
        });
        assert_eq!(
            wait_limit(consumer, Duration::from_secs(10), "consumer"),
            128 + libc::SIGKILL
        );
        let what = if old {
            "old pattern"
        } else {
            "wait_while_or_repair"
        };
        if old {
            assert_eq!(wait_limit(producer, Duration::from_secs(10), what), 0);
            let q = m.lock_or_repair(|_| {});
            println!(
                "  old pattern: buf {:?}, tail - head = {}",
                q.buf,
                q.tail - q.head
            );
            assert_eq!((q.buf, q.tail - q.head), ([5, 2, 3, 4], 5), "the loss");
            continue;
        }
        // The producer waits on after the death (the queue is full); it pushes once there is
        // room, and every item comes out in order.
        until_sleeping(&m, 1);
        let cv = m.condvar();
        let mut got = Vec::new();
        while got.len() < 5 {
            let g = m.lock_or_repair(|_| {});
            let mut q = cv
                .wait_timeout_while_or_repair(
                    g,
                    Duration::from_secs(10),
                    |q| q.head == q.tail,
                    |_| {},
                )
                .0;
            assert!(q.head < q.tail, "{what}: nothing to pop: {got:?}");
            let h = q.head;
            got.push(q.buf[(h % CAP) as usize]);
            commit_store(&mut q.head, h + 1);
            drop(q);
            cv.notify_all();
        }
        assert_eq!(wait_limit(producer, Duration::from_secs(10), what), 0);
        assert_eq!(got, [1, 2, 3, 4, 5], "{what}");
        println!("  wait_while_or_repair: {got:?}");
    }
}

/// Issue 22, item 11: condition variables placed in a mapping are bound to their mutex, in
/// every process: another mutex (here, or in a child) is refused, as is a mutex outside the
/// mapping; a guard of another mutex panics (nothing is unlocked); the binding holds after
/// the binder exits.
fn placed_condvars_are_bound() {
    let cfg = Config::default();
    let mut plan = MappingLayout::new();
    let (a_at, b_at) = (
        plan.mutex::<u64>(cfg).unwrap(),
        plan.mutex::<u64>(cfg).unwrap(),
    );
    let (cv1, cv2) = (plan.condvar(), plan.condvar());
    let map = Mapping::anonymous(plan.len()).unwrap();
    let a = ShmMutex::init_in(&map, a_at, 0u64, cfg).unwrap();
    let b = ShmMutex::init_in(&map, b_at, 0u64, cfg).unwrap();
    // A child binds cv1 to `a` and exits; the binding is in the mapping.
    let child = fork(|| {
        let a = ShmMutex::<u64>::attach_in(&map, a_at).unwrap();
        i32::from(a.condvar_in(&map, cv1).is_err())
    });
    assert_eq!(wait_limit(child, Duration::from_secs(10), "binder"), 0);
    assert!(matches!(
        b.condvar_in(&map, cv1),
        Err(gomutex::shm::ShmError::InvalidConfig(_))
    ));
    let on_a = a.condvar_in(&map, cv1).unwrap();
    // cv2 bound by `b` here: a child's `a` is refused.
    let on_b = b.condvar_in(&map, cv2).unwrap();
    let child = fork(|| i32::from(a.condvar_in(&map, cv2).is_ok()));
    assert_eq!(wait_limit(child, Duration::from_secs(10), "other mutex"), 0);
    // Out of bounds, misaligned, or over a lock region.
    assert!(a.condvar_in(&map, map.len()).is_err());
    assert!(a.condvar_in(&map, cv1 + 4).is_err());
    assert!(a.condvar_in(&map, a_at).is_err());
    // A mutex outside the mapping.
    let outside = ShmMutex::anonymous(0u64).unwrap();
    assert!(outside.condvar_in(&map, cv1).is_err());
    // A guard of another mutex: a panic, both locks left as they were.
    assert!(panics(|| {
        let _ = on_a.wait(b.lock().unwrap());
    }));
    assert!(!a.is_locked() && !b.is_locked());
    assert!(b.is_poisoned()); // its guard was dropped by the panic
    b.clear_poison();
    // They work: a timed wait times out, a notify from a child wakes the right waiter.
    let (g, r) = on_b
        .wait_timeout(b.lock().unwrap(), Duration::from_millis(5))
        .unwrap();
    assert!(r.timed_out());
    drop(g);
    let child = fork(|| {
        let mut g = a.lock().unwrap();
        *g = 1;
        let g = on_a.wait_while(g, |v| *v < 2).unwrap();
        i32::from(*g != 2)
    });
    until_ready(&a);
    *a.lock().unwrap() = 2;
    on_a.notify_one();
    assert_eq!(
        wait_limit(child, Duration::from_secs(10), "placed waiter"),
        0
    );
    let _ = format!("{on_a:?}");
}

/// The kill test: 3 producers and 3 consumers run the queue (`notify_all`, and `notify_one`
/// in odd-numbered incarnations) while the parent SIGKILLs a random one every 0.5–5 ms
/// (waiters asleep, notifiers between their bump and their wake-up, owners mid-section),
/// reaps it (`force_unlock` for half of the kills, the rest left to detection) and starts a
/// new one. Then it sets the end and the workers must finish with every item delivered once,
/// in order. Once with the region's condvar for both conditions, once with "not full" and
/// "not empty" placed in the mapping.
fn kills_under_load() {
    for placed in [false, true] {
        kills_under_load_with(placed);
    }
}

fn kills_under_load_with(placed: bool) {
    let secs = torture::env_u64("GOMUTEX_CONDVAR_KILL_SECS").unwrap_or(3);
    let (map, m, at) = queue_mapping(Queue {
        limit: u64::MAX,
        ..Queue::default()
    });
    let cvs = queue_cvs(&map, &m, at, placed);
    let spawn = |i: usize, gen: u64| {
        let all = gen.is_multiple_of(2);
        if i < 3 {
            fork(|| producer(&m, cvs, all))
        } else {
            fork(|| consumer(&m, cvs, all))
        }
    };
    let mut gen = 0;
    let mut kids: Vec<libc::pid_t> = (0..6).map(|i| spawn(i, 0)).collect();
    let mut rng = Rng::new(procs::mono_ns() ^ u64::from(std::process::id()));
    let (mut kills, mut forced, mut forced_true) = ([0u64; 2], 0u64, 0u64);
    let (mut max_stall, mut long_stalls) = (Duration::ZERO, 0u64);
    let (mut last_head, mut last_move) = (0u64, Instant::now());
    // A random worker SIGKILLed every 0.5–5 ms; no item moved for 10 s is a stall.
    let every = Kills {
        pause_us: (500, 4_500),
        one_in: 1,
        own_deaths: false,
        stall: Duration::from_secs(10),
    };
    torture::kill_loop(
        &mut kids,
        &mut rng,
        Instant::now() + Duration::from_secs(secs),
        every,
        |i, _| {
            gen += 1;
            spawn(i, gen)
        },
        |_, _| (),
        |i, pid, _, rng| {
            if rng.below(2) == 0 {
                forced += 1;
                forced_true += m.force_unlock(pid) as u64;
            }
            kills[(i >= 3) as usize] += 1;
            Ok(())
        },
        || {
            // Progress, read without blocking the workers for long.
            if let Ok(g) = m.try_lock_for(Duration::from_millis(50)) {
                if g.head != last_head {
                    last_head = g.head;
                    let stall = last_move.elapsed();
                    long_stalls += (stall > Duration::from_millis(100)) as u64;
                    max_stall = max_stall.max(stall);
                    last_move = Instant::now();
                }
            } else if let Err(gomutex::shm::TryLockError::OwnerDied(g)) = m.try_lock() {
                drop(g); // leave the report to a worker
            }
            [last_head]
        },
        |_, _| {},
    )
    .unwrap_or_else(|why| panic!("{why}"));
    max_stall = max_stall.max(last_move.elapsed());
    let moved_under_kills = last_head;
    // The end: 2 000 more items, then everybody stops.
    let limit = {
        let mut g = m.lock_or_repair(|_| {});
        g.limit = g.tail + 2_000;
        g.limit
    };
    cvs.0.notify_all();
    cvs.1.notify_all();
    let t = Instant::now();
    for k in kids {
        assert_eq!(
            wait_limit(k, Duration::from_secs(30), "worker after the kills"),
            0
        );
    }
    // Every worker reaped: a scan frees the dead participants' slots and takes their condvar
    // waits out of the sleepers hint.
    m.recover();
    let sleepers = header_u32(&m, SLEEPERS).load(SeqCst);
    let g = m.lock_or_repair(|_| {});
    println!(
        "  {}, {secs} s: {moved_under_kills} items moved under {} kills ({} producers, {} consumers); \
         force_unlock {forced} (true {forced_true}); owner deaths reported {}; \
         longest stall {max_stall:.2?} ({long_stalls} over 100 ms); the remaining {} items and exit in {:.2?}; \
         condvar sleepers hint after recovery {sleepers}",
        if placed { "two placed condvars" } else { "one condvar" },
        kills[0] + kills[1],
        kills[0],
        kills[1],
        g.owner_died,
        limit - moved_under_kills.min(limit),
        t.elapsed(),
    );
    assert_eq!(g.errors, 0, "an item arrived twice or out of order");
    assert_eq!((g.head, g.tail), (limit, limit));
    assert!(moved_under_kills > 0);
    // Only a kill between a wait's two counts leaves one behind.
    assert!(
        sleepers as u64 <= 1 + (kills[0] + kills[1]) / 20,
        "{sleepers}"
    );
    drop(g);
    let d = m.diagnostics();
    assert_eq!((d.waiters, d.queued_slots, d.state & 7), (0, 0, 0), "{d:?}");
}

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[
        ("basics", basics),
        ("queue_exact", queue_exact),
        ("notify_races", notify_races),
        ("notify_all_wakes_everyone", notify_all_wakes_everyone),
        (
            "notifier_death_loses_no_wakeup",
            notifier_death_loses_no_wakeup,
        ),
        ("wait_reports_owner_died", wait_reports_owner_died),
        (
            "death_before_notify_wakes_waiters",
            death_before_notify_wakes_waiters,
        ),
        ("owner_death_in_a_full_queue", owner_death_in_a_full_queue),
        ("placed_condvars_are_bound", placed_condvars_are_bound),
        ("kills_under_load", kills_under_load),
    ];
    procs::run_cases("shm_condvar", &args, tests);
}
