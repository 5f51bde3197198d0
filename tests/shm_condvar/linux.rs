//! Multi-process tests of `gomutex::shm::ShmCondvar` (issue 11, item 1).
//!
//! `harness = false`, like `shm_process`: the tests run one after another on the main thread,
//! so the process is single-threaded whenever it forks. Run one with
//! `cargo test --test shm_condvar -- <name substring>`. The kill test runs for
//! `GOMUTEX_CONDVAR_KILL_SECS` seconds (default 3).

use gomutex::shm::{LockError, ShmCondvar, ShmMutex, ShmMutexGuard, ShmSafe};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;
use common::procs::{self, fork, kill9, wait_limit};
use common::shmtest::header_u32;

// ------------------------------------------------------------------ helpers

/// `wait_while` that goes on waiting after an owner death, running `repair` on the value and
/// marking it consistent (as `ShmMutex::lock_or_repair` does for `lock`): every critical
/// section below commits with one store, so a dead owner leaves nothing to undo.
fn wait_repairing<'a, T: ShmSafe>(
    cv: &ShmCondvar<'a, T>,
    mut g: ShmMutexGuard<'a, T>,
    mut cond: impl FnMut(&mut T) -> bool,
    mut repair: impl FnMut(&mut T),
) -> ShmMutexGuard<'a, T> {
    loop {
        match cv.wait_while(g, &mut cond) {
            Ok(g) => return g,
            Err(e) => {
                g = e.into_guard();
                repair(&mut g);
                g.mark_consistent();
            }
        }
    }
}

/// xorshift64*, seeded per process.
struct Rng(u64);
impl Rng {
    fn new() -> Self {
        let t = Instant::now().elapsed().as_nanos() as u64;
        Rng((std::process::id() as u64) << 32 ^ t ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
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

/// Push until `tail` reaches `limit`; `all` chooses `notify_all` (else `notify_one`).
fn producer(m: &ShmMutex<Queue>, all: bool) -> i32 {
    let cv = m.condvar();
    loop {
        let g = m.lock_or_repair(count_death);
        let mut g = wait_repairing(
            &cv,
            g,
            |q| q.tail - q.head >= CAP && q.tail < q.limit,
            count_death,
        );
        if g.tail >= g.limit {
            drop(g);
            cv.notify_all(); // let the others see the end
            return 0;
        }
        let t = g.tail;
        g.buf[(t % CAP) as usize] = t + 1;
        g.tail = t + 1;
        drop(g);
        if all {
            cv.notify_all();
        } else {
            cv.notify_one();
        }
    }
}

/// Pop until `head` reaches `limit`, checking every item.
fn consumer(m: &ShmMutex<Queue>, all: bool) -> i32 {
    let cv = m.condvar();
    loop {
        let g = m.lock_or_repair(count_death);
        let mut g = wait_repairing(
            &cv,
            g,
            |q| q.head == q.tail && q.head < q.limit,
            count_death,
        );
        if g.head >= g.limit {
            drop(g);
            cv.notify_all();
            return 0;
        }
        let h = g.head;
        if g.buf[(h % CAP) as usize] != h + 1 {
            g.errors += 1;
        }
        g.head = h + 1;
        drop(g);
        if all {
            cv.notify_all();
        } else {
            cv.notify_one();
        }
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
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ = cv.wait(other.lock().unwrap());
    }));
    std::panic::set_hook(hook);
    assert!(r.is_err());
    assert!(!other.is_locked() && !m.is_locked());
    let _ = format!("{cv:?}");
}

/// 3 producer and 3 consumer processes move 12 000 items through a 4-slot queue; every item
/// arrives once, in order. Once with `notify_all` (chained wake-ups), once with `notify_one`
/// (one condvar for both conditions: a wake-up may reach the wrong side, and the 10 ms
/// re-check must keep it going).
fn queue_exact() {
    for all in [true, false] {
        let n = 12_000;
        let m = ShmMutex::anonymous(Queue {
            limit: n,
            ..Queue::default()
        })
        .unwrap();
        let t = Instant::now();
        let mut kids = Vec::new();
        for _ in 0..3 {
            kids.push(fork(|| producer(&m, all)));
            kids.push(fork(|| consumer(&m, all)));
        }
        for k in kids {
            assert_eq!(wait_limit(k, Duration::from_secs(60), "queue worker"), 0);
        }
        let g = m.lock().unwrap();
        assert_eq!((g.head, g.tail, g.errors, g.owner_died), (n, n, 0, 0));
        println!(
            "  {}: {n} items in {:.2?}",
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
                        let mut g = wait_repairing(&cv, g, |t| t.turn % procs != me, |_| {});
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
    std::thread::sleep(Duration::from_millis(30)); // let them fall asleep
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
// The offsets above are layout version 4's, unchanged in 5 (which added the value's type).
const _: () = assert!(gomutex::shm::LAYOUT_VERSION == 5, "header offsets changed");

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
        std::thread::sleep(Duration::from_millis(30)); // asleep by now
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

/// A process that makes the condition true and dies before it notifies — after its unlock, or
/// still holding the lock — does not leave the waiters asleep: sleepers probe every 10 ms
/// (also when every process sleeps in the condvar) and the recovery of a dead participant
/// notifies all. Holding: the waiter gets `OwnerDied`.
fn death_before_notify_wakes_waiters() {
    for holding in [false, true] {
        let m = ShmMutex::anonymous(0u64).unwrap();
        let cv = m.condvar();
        let waiter = fork(|| {
            let g = m.lock().unwrap();
            match cv.wait_while(g, |v| *v == 0) {
                Ok(g) if !holding && *g == 1 => 0,
                Err(LockError::OwnerDied(g)) if holding && *g == 1 => 0,
                _ => 2,
            }
        });
        std::thread::sleep(Duration::from_millis(30));
        let notifier = fork(|| {
            let mut g = m.lock().unwrap();
            *g = 1;
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
            "  notifier died {}: waiter back {:.2?} after",
            if holding {
                "holding the lock"
            } else {
                "after its unlock"
            },
            t.elapsed()
        );
    }
}

/// A waiter re-acquiring the lock after its owner was SIGKILLed gets `OwnerDied` from `wait`,
/// as `lock` would report it, and later waits are `Ok` once it marked the data consistent.
fn wait_reports_owner_died() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let cv = m.condvar();
    let waiter = fork(|| {
        let g = m.lock().unwrap();
        let r = cv.wait_while(g, |v| *v == 0);
        let Err(LockError::OwnerDied(g)) = r else {
            return 2;
        };
        g.mark_consistent();
        drop(g);
        let (g, r) = cv
            .wait_timeout(m.lock().unwrap(), Duration::from_millis(5))
            .unwrap();
        assert!(r.timed_out());
        assert_eq!(*g, 1);
        0
    });
    std::thread::sleep(Duration::from_millis(30));
    let killer = fork(|| {
        let mut g = m.lock().unwrap();
        *g = 1;
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

/// The kill test: 3 producers and 3 consumers run the queue (`notify_all`, and `notify_one`
/// in odd-numbered incarnations) while the parent SIGKILLs a random one every 0.5–5 ms
/// (waiters asleep, notifiers between their bump and their wake-up, owners mid-section),
/// reaps it (`force_unlock` for half of the kills, the rest left to detection) and starts a
/// new one. Then it sets the end and the workers must finish with every item delivered once,
/// in order.
fn kills_under_load() {
    let secs: u64 = std::env::var("GOMUTEX_CONDVAR_KILL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let m = ShmMutex::anonymous(Queue {
        limit: u64::MAX,
        ..Queue::default()
    })
    .unwrap();
    let spawn = |i: usize, gen: u64| {
        let all = gen.is_multiple_of(2);
        if i < 3 {
            fork(|| producer(&m, all))
        } else {
            fork(|| consumer(&m, all))
        }
    };
    let mut gen = 0;
    let mut kids: Vec<libc::pid_t> = (0..6).map(|i| spawn(i, 0)).collect();
    let mut rng = Rng::new();
    let (mut kills, mut forced, mut forced_true) = ([0u64; 2], 0u64, 0u64);
    let (mut max_stall, mut long_stalls) = (Duration::ZERO, 0u64);
    let (mut last_head, mut last_move) = (0u64, Instant::now());
    let start = Instant::now();
    let mut next_kill = start;
    while start.elapsed() < Duration::from_secs(secs) {
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
        if Instant::now() >= next_kill {
            let i = rng.below(6) as usize;
            kill9(kids[i]);
            let mut st = 0;
            // SAFETY: our own child.
            unsafe { libc::waitpid(kids[i], &mut st, 0) };
            if rng.below(2) == 0 {
                forced += 1;
                forced_true += m.force_unlock(kids[i]) as u64;
            }
            kills[(i >= 3) as usize] += 1;
            gen += 1;
            kids[i] = spawn(i, gen);
            next_kill = Instant::now() + Duration::from_micros(500 + rng.below(4500));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    max_stall = max_stall.max(last_move.elapsed());
    let moved_under_kills = last_head;
    // The end: 2 000 more items, then everybody stops.
    let limit = {
        let mut g = m.lock_or_repair(|_| {});
        g.limit = g.tail + 2_000;
        g.limit
    };
    m.condvar().notify_all();
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
        "  {secs} s: {moved_under_kills} items moved under {} kills ({} producers, {} consumers); \
         force_unlock {forced} (true {forced_true}); owner deaths reported {}; \
         longest stall {max_stall:.2?} ({long_stalls} over 100 ms); the remaining {} items and exit in {:.2?}; \
         condvar sleepers hint after recovery {sleepers}",
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
        ("kills_under_load", kills_under_load),
    ];
    procs::run_cases("shm_condvar", &args, tests);
}
