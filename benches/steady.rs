//! Steady-contention harness: Go's seven `sync.Mutex` workloads (Go 1.19
//! `src/sync/mutex_test.go`), one of ours, and a Mutex + Condvar producer/consumer queue, for
//! `gomutex`, `std` and `parking_lot`, printed as one markdown table.
//!
//! **Mutex workloads.** T threads (T = `available_parallelism()` × Go's `SetParallelism`) each
//! loop `{ lock; counter += 1; unlock }` plus the workload's extra until a stop flag is set
//! after a fixed wall time; ns/op = wall time / all operations of all threads. No iteration
//! budget, no grains: every thread contends for the whole run (the grain-based harness, closer
//! to Go's `RunParallel`, is `go_workloads.rs`). The workloads:
//!
//! | name | threads | loop body |
//! |---|---|---|
//! | MutexPinned | 1 × P | as Mutex, each thread pinned to its own CPU (not Go's; runs first, see `WORKLOADS`) |
//! | Uncontended | 1 × P | a lock of its own per thread (128-byte aligned) |
//! | Mutex | 1 × P | one shared lock |
//! | MutexSlack | 10 × P | one shared lock |
//! | MutexWork | 1 × P | shared lock, then 100 × `foo *= 2; foo /= 2` outside it |
//! | MutexWorkSlack | 10 × P | as MutexWork |
//! | MutexNoSpin | 4 × P | 1 in 4 iterations locks; the others touch 32 KiB and yield |
//! | MutexSpin | 1 × P | lock, then touch 128 KiB outside it |
//!
//! (P = CPUs. MutexNoSpin yields with `thread::yield_now()` where Go starts a goroutine and
//! waits on a channel; every iteration is an op, as in Go.) Each lock's counter must equal the
//! number of its acquisitions at the end, or the run fails. Every lock sits in a
//! 128-byte-aligned slot of its own, and the work outside it is one out-of-line function that
//! all locks call (`common.rs` says why: inlined copies ran at different speeds).
//!
//! **Condvar queue** (after parking_lot's `webkit_queue_test`): producers push
//! `items / producers` items each into a bounded `VecDeque` behind one mutex, waiting on a
//! "not full" condvar; consumers pop, waiting on "not empty"; a waker notifies outside the
//! lock, with `notify_one` every time (`one`) or `notify_all` only on the empty→non-empty and
//! full→non-full transitions (`all`). ns/item = wall time / items; the consumers' count and sum
//! of the items must be exact.
//!
//! **Rounds.** Every case runs `rounds` times per lock, the locks alternating within a round
//! (the first lock rotates from round to round), so load on a shared machine hits all of them
//! alike; the table shows medians. All samples also go to a JSON file for
//! `scripts/bench_summary.py`.
//!
//! `cargo bench --bench steady [-- FILTER…]` (FILTER: substrings of case names such as
//! `MutexWork` or `condvar/10p1c1s`; `=NAME` matches one name exactly). Environment:
//! `STEADY_DURATION_MS` (default 500), `STEADY_ROUNDS` (default 5), `STEADY_ITEMS` (condvar
//! items per run, default 20 000: the one-slot cases cost 10–60 µs per item), `STEADY_JSON`
//! (default `<target dir>/steady.json`), `STEADY_LOCKS` (comma-separated locks to run, default
//! all three: `gomutex,parking_lot` skips std, which is 2–4× slower than both and takes most of
//! the time), and the loaded mode: `STEADY_BUSY=N` forks N busy-looping processes (a shell's
//! `while :; do :; done`) at the start of every round, after its line round-trip probe, and
//! kills them at its end (`STEADY_BUSY_SESSION=own`: each loop in a session and scheduling
//! group of its own; see `common::BusyLoops`). The table's header and the JSON say the load.
//! Without `--bench` (`cargo test --benches`): every case once, 10 ms / 4 000 items, every
//! thread doing at least 200 ops, counters checked, no JSON.

mod common;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use common::{
    allowed_cpus, alternate, busy_from_env, env_or, fmt_busy, fmt_round_trips, go_work,
    local_array, median, paired_ratio, pin_nth, procs, selected, steady, stride4_increment,
    target_dir, Args, Lock, Padded,
};

// ---------------------------------------------------------------------------------------------
// Configuration

struct Config {
    test: bool,
    duration: Duration,
    rounds: usize,
    items: usize,
    /// Every thread does at least this many ops, even past the stop flag (test mode).
    min_ops: u64,
    filters: Vec<String>,
    json: Option<PathBuf>,
    /// Which of `LOCKS` run (`STEADY_LOCKS`); the floors always do.
    locks: [bool; LOCKS.len()],
    /// Busy-looping processes beside every round, and whether each has a session of its own.
    busy: (usize, bool),
}

impl Config {
    fn from_env_and_args() -> Config {
        let Args { bench, filters, .. } = Args::get();
        let test = !bench;
        if test {
            return Config {
                test,
                duration: Duration::from_millis(10),
                rounds: 1,
                items: 4_000,
                min_ops: 200,
                filters,
                json: None,
                locks: [true; LOCKS.len()],
                busy: (0, false),
            };
        }
        let locks = match std::env::var("STEADY_LOCKS") {
            Ok(v) if !v.trim().is_empty() => {
                let names: Vec<&str> = v.split(',').map(str::trim).collect();
                for n in &names {
                    assert!(
                        LOCKS.contains(n),
                        "STEADY_LOCKS: unknown lock {n:?} ({LOCKS:?})"
                    );
                }
                LOCKS.map(|l| names.contains(&l))
            }
            _ => [true; LOCKS.len()],
        };
        Config {
            test,
            locks,
            busy: busy_from_env("STEADY"),
            duration: Duration::from_millis(env_or("STEADY_DURATION_MS", 500)),
            rounds: env_or("STEADY_ROUNDS", 5usize).max(1),
            items: env_or("STEADY_ITEMS", 20_000usize).max(1),
            min_ops: 0,
            filters,
            json: Some(
                std::env::var_os("STEADY_JSON")
                    .map_or_else(|| target_dir().join("steady.json"), PathBuf::from),
            ),
        }
    }

    fn selected(&self, name: &str) -> bool {
        selected(&self.filters, name)
    }
}

const LOCKS: [&str; 3] = ["gomutex", "std", "parking_lot"];

type GoMutex<T> = gomutex::Mutex<T>;
type StdMutex<T> = std::sync::Mutex<T>;
type PlMutex<T> = parking_lot::Mutex<T>;

// ---------------------------------------------------------------------------------------------
// Go's mutex workloads

/// What every lock guards: the op counter (checked) and Go's `acc0`, `acc1`.
#[derive(Default)]
struct Guarded {
    count: u64,
    acc0: u64,
    acc1: u64,
}

#[inline(always)]
fn count(g: &mut Guarded) {
    g.count += 1;
}

/// `acc0 -= 100; acc1 += 100` (`MutexNoSpin`, `MutexSpin`), and the count.
#[inline(always)]
fn count_acc(g: &mut Guarded) {
    g.count += 1;
    g.acc0 = g.acc0.wrapping_sub(100);
    g.acc1 = g.acc1.wrapping_add(100);
}

#[derive(Clone, Copy)]
enum Kind {
    Uncontended,
    /// One lock shared by all threads; Go's work outside it or not; each thread pinned to its
    /// own CPU (round robin) or free to move.
    Shared {
        work: bool,
        pinned: bool,
    },
    NoSpin,
    Spin,
}

/// The workloads: name, body, Go's `SetParallelism`. Go's seven, and first one of ours.
const WORKLOADS: [(&str, Kind, usize); 8] = [
    // Not Go's: `Mutex` with each thread pinned to its own CPU, as thread-per-core servers
    // run. First, so that its threads are the process's first lock users: the spin policy
    // reads the CPU count once, and a count taken from a pinned thread once turned spinning
    // off for every later case (gomutex 41–63 ns/op here instead of 6).
    ("MutexPinned", PINNED, 1),
    ("Uncontended", Kind::Uncontended, 1),
    ("Mutex", SHARED, 1),
    ("MutexSlack", SHARED, 10),
    ("MutexWork", WORK, 1),
    ("MutexWorkSlack", WORK, 10),
    ("MutexNoSpin", Kind::NoSpin, 4),
    ("MutexSpin", Kind::Spin, 1),
];

/// Go's `Mutex` body: one shared lock, no work, threads free to move.
const SHARED: Kind = Kind::Shared {
    work: false,
    pinned: false,
};
/// Go's `MutexWork` body: the shared lock, then Go's work outside it.
const WORK: Kind = Kind::Shared {
    work: true,
    pinned: false,
};
/// `Mutex`, each thread pinned to its own CPU.
const PINNED: Kind = Kind::Shared {
    work: false,
    pinned: true,
};

/// One run of one workload on lock `L`: ns/op, after checking every counter.
#[allow(clippy::disallowed_names)] // `foo` is Go's name for the work variable
fn run_workload<L: Lock<Guarded>>(name: &str, kind: Kind, threads: usize, cfg: &Config) -> f64 {
    let (d, min) = (cfg.duration, cfg.min_ops);
    let (wall, ops) = match kind {
        Kind::Uncontended => {
            let (wall, res) = steady(
                threads,
                d,
                min,
                |_| Box::new(Padded(L::new(Guarded::default()))),
                |mu| mu.0.with(count),
            );
            for (ops, mu) in &res {
                assert_eq!(mu.0.with(|g| g.count), *ops, "{name}: lost updates");
            }
            (wall, res.iter().map(|r| r.0).sum())
        }
        Kind::Shared { work, pinned } => {
            let mu = &Padded(L::new(Guarded::default())).0;
            let cpus = if pinned { allowed_cpus() } else { Vec::new() };
            let (wall, res) = steady(
                threads,
                d,
                min,
                |i| {
                    pin_nth(&cpus, i);
                    0i64
                },
                |foo| {
                    mu.with(count);
                    if work {
                        *foo = go_work(*foo);
                    }
                },
            );
            let ops = res.iter().map(|r| r.0).sum();
            assert_eq!(mu.with(|g| g.count), ops, "{name}: lost updates");
            (wall, ops)
        }
        Kind::NoSpin => {
            let mu = &Padded(L::new(Guarded::default())).0;
            let (wall, res) = steady(
                threads,
                d,
                min,
                |_| (0u64, 0u64, local_array(4 << 10)),
                |(i, locked, data)| {
                    if *i % 4 == 0 {
                        mu.with(count_acc);
                        *locked += 1;
                    } else {
                        stride4_increment(data);
                        thread::yield_now();
                    }
                    *i += 1;
                },
            );
            let locked = res.iter().map(|r| r.1 .1).sum();
            assert_eq!(mu.with(|g| g.count), locked, "{name}: lost updates");
            (wall, res.iter().map(|r| r.0).sum())
        }
        Kind::Spin => {
            let mu = &Padded(L::new(Guarded::default())).0;
            let (wall, res) = steady(
                threads,
                d,
                min,
                |_| local_array(16 << 10),
                |data| {
                    mu.with(count_acc);
                    stride4_increment(data);
                },
            );
            let ops = res.iter().map(|r| r.0).sum();
            assert_eq!(mu.with(|g| g.count), ops, "{name}: lost updates");
            (wall, ops)
        }
    };
    wall.as_nanos() as f64 / ops as f64
}

/// A thread's state in a floor run: a lock of its own and the workload's local data.
struct Alone {
    mu: Box<Padded<StdMutex<Guarded>>>,
    foo: i64,
    i: u64,
    locked: u64,
    data: Box<[u64]>,
}

/// The two lower bounds a lock is measured against ([`run_floor`]).
#[derive(Clone, Copy, PartialEq)]
enum Floor {
    /// Every thread locks a `std` mutex of its own: nobody waits and no cache line moves
    /// between CPUs. How fast this machine runs the work right now.
    Private,
    /// One shared atomic counter, one `fetch_add` per op in place of lock/unlock: its cache
    /// line crosses CPUs as a lock word's does, but nobody waits for a holder. Any lock needs
    /// at least this one read-modify-write of a shared line per acquisition.
    Atomic,
}

/// A floor of a workload with work outside the lock (`MutexWork`, `MutexWorkSlack`,
/// `MutexNoSpin`, `MutexSpin`; `None` for the others): the same threads and loop body, with
/// the lock replaced as [`Floor`] says. It moves with the vCPU placement as the locks do (the
/// same rotation measures all of them). No lock beats `Private` by more than one uncontended
/// lock/unlock, nor `Atomic` by more than it gains from keeping the line on one CPU for a few
/// ops in a row: where the locks sit on a floor, the work or the line sets the pace and their
/// ratios say nothing about the locks.
fn run_floor(name: &str, kind: Kind, threads: usize, cfg: &Config, floor: Floor) -> Option<f64> {
    let array = match kind {
        Kind::Shared { work: true, .. } => 0,
        Kind::NoSpin => 4 << 10,
        Kind::Spin => 16 << 10,
        Kind::Uncontended | Kind::Shared { work: false, .. } => return None,
    };
    let shared = Padded(AtomicU64::new(0));
    let tick = |a: &mut Alone| {
        match floor {
            Floor::Private => a.mu.0.with(count),
            Floor::Atomic => _ = shared.0.fetch_add(1, Ordering::Relaxed),
        }
        a.locked += 1;
    };
    let (wall, res) = steady(
        threads,
        cfg.duration,
        cfg.min_ops,
        |_| Alone {
            mu: Box::new(Padded(StdMutex::new(Guarded::default()))),
            foo: 0,
            i: 0,
            locked: 0,
            data: local_array(array),
        },
        // The workload's body (`run_workload`'s), `kind` a constant the branch predictor learns.
        |a| match kind {
            Kind::NoSpin => {
                if a.i % 4 == 0 {
                    tick(a);
                } else {
                    stride4_increment(&mut a.data);
                    thread::yield_now();
                }
                a.i += 1;
            }
            Kind::Spin => {
                tick(a);
                stride4_increment(&mut a.data);
            }
            _ => {
                tick(a);
                a.foo = go_work(a.foo);
            }
        },
    );
    let locked: u64 = res.iter().map(|r| r.1.locked).sum();
    let counted = match floor {
        Floor::Private => res.iter().map(|r| r.1.mu.0.with(|g| g.count)).sum(),
        Floor::Atomic => shared.0.load(Ordering::Relaxed),
    };
    assert_eq!(counted, locked, "{name} floor: lost updates");
    let ops: u64 = res.iter().map(|r| r.0).sum();
    Some(wall.as_nanos() as f64 / ops as f64)
}

// ---------------------------------------------------------------------------------------------
// Condvar producer/consumer queue

/// The queue all producers and consumers share (behind the lock under test).
struct Queue {
    items: VecDeque<u64>,
    /// False once every producer is done: consumers drain the queue, then leave.
    producing: bool,
    /// Consumers' tally, checked at the end.
    consumed: u64,
    sum: u64,
}

/// The two condvars of the queue.
#[derive(Clone, Copy)]
enum Cv {
    NotEmpty = 0,
    NotFull = 1,
}

/// A mutex with two condvars, as the producer/consumer loop sees it.
trait CondLock: Send + Sync {
    fn new(q: Queue) -> Self;
    /// Lock; wait on `cv` until `ready`; then run `f` and unlock.
    fn wait_then<R>(
        &self,
        cv: Cv,
        ready: impl Fn(&Queue) -> bool,
        f: impl FnOnce(&mut Queue) -> R,
    ) -> R;
    fn notify(&self, cv: Cv, all: bool);
}

/// `std::sync` and gomutex share the API, so one macro implements both.
macro_rules! std_like_cond_lock {
    ($name:ident, $mutex:ty, $condvar:ty) => {
        struct $name {
            m: $mutex,
            cv: [$condvar; 2],
        }

        impl CondLock for $name {
            fn new(q: Queue) -> Self {
                Self {
                    m: <$mutex>::new(q),
                    cv: [<$condvar>::new(), <$condvar>::new()],
                }
            }
            #[inline]
            fn wait_then<R>(
                &self,
                cv: Cv,
                ready: impl Fn(&Queue) -> bool,
                f: impl FnOnce(&mut Queue) -> R,
            ) -> R {
                let mut g = self.m.lock().unwrap();
                while !ready(&g) {
                    g = self.cv[cv as usize].wait(g).unwrap();
                }
                f(&mut g)
            }
            #[inline]
            fn notify(&self, cv: Cv, all: bool) {
                if all {
                    self.cv[cv as usize].notify_all();
                } else {
                    self.cv[cv as usize].notify_one();
                }
            }
        }
    };
}

std_like_cond_lock!(GoQueue, gomutex::Mutex<Queue>, gomutex::Condvar);
std_like_cond_lock!(StdQueue, std::sync::Mutex<Queue>, std::sync::Condvar);

struct PlQueue {
    m: parking_lot::Mutex<Queue>,
    cv: [parking_lot::Condvar; 2],
}

impl CondLock for PlQueue {
    fn new(q: Queue) -> Self {
        Self {
            m: parking_lot::Mutex::new(q),
            cv: [parking_lot::Condvar::new(), parking_lot::Condvar::new()],
        }
    }
    #[inline]
    fn wait_then<R>(
        &self,
        cv: Cv,
        ready: impl Fn(&Queue) -> bool,
        f: impl FnOnce(&mut Queue) -> R,
    ) -> R {
        let mut g = self.m.lock();
        while !ready(&g) {
            self.cv[cv as usize].wait(&mut g);
        }
        f(&mut g)
    }
    #[inline]
    fn notify(&self, cv: Cv, all: bool) {
        if all {
            self.cv[cv as usize].notify_all();
        } else {
            self.cv[cv as usize].notify_one();
        }
    }
}

/// A producer/consumer case: producers, consumers, queue capacity, `notify_all` style.
struct CvCase {
    producers: usize,
    consumers: usize,
    slots: usize,
    all: bool,
}

impl CvCase {
    fn name(&self) -> String {
        format!(
            "condvar/{}p{}c{}s-{}",
            self.producers,
            self.consumers,
            self.slots,
            if self.all { "all" } else { "one" }
        )
    }
}

const CV_CASES: [CvCase; 5] = [
    CvCase {
        producers: 10,
        consumers: 1,
        slots: 1,
        all: true,
    },
    CvCase {
        producers: 10,
        consumers: 1,
        slots: 1,
        all: false,
    },
    CvCase {
        producers: 1,
        consumers: 1,
        slots: 1,
        all: true,
    },
    CvCase {
        producers: 4,
        consumers: 4,
        slots: 16,
        all: false,
    },
    CvCase {
        producers: 4,
        consumers: 4,
        slots: 16,
        all: true,
    },
];

/// One run of a producer/consumer case on `Q`: ns per item, after checking the tally.
fn run_queue<Q: CondLock>(c: &CvCase, items: usize) -> f64 {
    let per = (items / c.producers).max(1) as u64;
    let total = per * c.producers as u64;
    let q = Q::new(Queue {
        items: VecDeque::with_capacity(c.slots),
        producing: true,
        consumed: 0,
        sum: 0,
    });
    let (q, slots, all) = (&q, c.slots, c.all);
    let barrier = Barrier::new(c.producers + c.consumers + 1);
    let barrier = &barrier;
    let wall = thread::scope(|s| {
        for _ in 0..c.consumers {
            s.spawn(move || {
                barrier.wait();
                loop {
                    let (was_full, more) = q.wait_then(
                        Cv::NotEmpty,
                        |q| !q.items.is_empty() || !q.producing,
                        |q| {
                            let was_full = q.items.len() == slots;
                            match q.items.pop_front() {
                                Some(v) => {
                                    q.consumed += 1;
                                    q.sum += v;
                                    (was_full, true)
                                }
                                None => (false, false),
                            }
                        },
                    );
                    if !more {
                        return;
                    }
                    if !all || was_full {
                        q.notify(Cv::NotFull, all);
                    }
                }
            });
        }
        let producers: Vec<_> = (0..c.producers as u64)
            .map(|p| {
                s.spawn(move || {
                    barrier.wait();
                    for i in 0..per {
                        let was_empty = q.wait_then(
                            Cv::NotFull,
                            |q| q.items.len() < slots,
                            |q| {
                                let was_empty = q.items.is_empty();
                                q.items.push_back(p * per + i);
                                was_empty
                            },
                        );
                        if !all || was_empty {
                            q.notify(Cv::NotEmpty, all);
                        }
                    }
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for p in producers {
            p.join().expect("producer panicked");
        }
        q.wait_then(Cv::NotEmpty, |_| true, |q| q.producing = false);
        q.notify(Cv::NotEmpty, true);
        // The scope joins the consumers.
        start
    })
    .elapsed();
    let (consumed, sum) = q.wait_then(Cv::NotEmpty, |_| true, |q| (q.consumed, q.sum));
    assert_eq!(consumed, total, "{}: items lost or duplicated", c.name());
    assert_eq!(sum, total * (total - 1) / 2, "{}: wrong items", c.name());
    wall.as_nanos() as f64 / total as f64
}

// ---------------------------------------------------------------------------------------------
// Rounds, table, JSON

/// The floors measured beside the locks, in [`Row::samples`] after the locks.
const FLOORS: [(&str, Floor); 2] = [("floor", Floor::Private), ("atomic", Floor::Atomic)];

/// All samples (ns per op or item) of one case, in round order: one vector per lock in `LOCKS`
/// order, then one per floor in `FLOORS` order (empty where the case has none).
struct Row {
    name: String,
    threads: String,
    samples: [Vec<f64>; LOCKS.len() + FLOORS.len()],
    /// `common::line_round_trip_ns` probed before each round.
    round_trip_ns: Vec<f64>,
}

/// Runs `run(entry)` `rounds` times for every lock and floor (entries as in [`Row::samples`];
/// `None`: the case has no such floor), rotating the order from round to round.
fn rounds(cfg: &Config, name: String, threads: String, run: impl Fn(usize) -> Option<f64>) -> Row {
    let mut samples: [Vec<f64>; LOCKS.len() + FLOORS.len()] = Default::default();
    // Every thread of this process has been joined between two runs (the busy loops fork).
    let round_trip_ns = alternate(
        cfg.rounds,
        samples.len(),
        !cfg.test,
        cfg.busy,
        |_, entry| {
            if entry >= LOCKS.len() || cfg.locks[entry] {
                samples[entry].extend(run(entry));
            }
        },
    )
    .into_iter()
    .flatten()
    .collect::<Vec<f64>>();
    let row = Row {
        name,
        threads,
        samples,
        round_trip_ns,
    };
    eprintln!(
        "{}: {}; line round trip {} ns",
        row.name,
        LOCKS
            .iter()
            .chain(FLOORS.iter().map(|f| &f.0))
            .zip(&row.samples)
            .filter(|(_, s)| !s.is_empty())
            .map(|(l, s)| format!("{l} {:.1}", median(s)))
            .collect::<Vec<_>>()
            .join(", "),
        fmt_round_trips(&row.round_trip_ns)
    );
    row
}

fn fmt_ns(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

fn print_table(cfg: &Config, rows: &[Row]) {
    println!();
    println!(
        "steady contention: {} ms per run ({} items per condvar run), {} round(s), locks \
         alternating, {} CPUs; medians, ns per op (condvar: per item)",
        cfg.duration.as_millis(),
        cfg.items,
        cfg.rounds,
        procs()
    );
    println!("load: {}", fmt_busy(cfg.busy.0, cfg.busy.1));
    println!(
        "line RT: cache-line round trip between the first two CPUs, probed before each round \
         (min–max; it moves on a VM, and contended figures move with it)"
    );
    println!(
        "ratios: median of the per-round ratios (runs of one round are seconds apart, so they \
         share the vCPU placement)"
    );
    println!(
        "floor: the same threads and loop with a lock per thread (nobody waits); atomic: with \
         one shared fetch_add per op in place of the lock (the line moves, nobody waits); both \
         in the same rotation, for the workloads with work outside the lock. No lock beats \
         floor by more than an uncontended lock/unlock; where the locks sit on atomic, moving \
         the line sets the pace, not the lock"
    );
    println!();
    println!(
        "| case | threads | gomutex | std | parking_lot | floor | atomic | gomutex/parking_lot | \
         gomutex/std | gomutex/floor | gomutex/atomic | line RT ns |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let value = |i: usize| {
            if r.samples[i].is_empty() {
                "–".to_string()
            } else {
                fmt_ns(median(&r.samples[i]))
            }
        };
        let ratio = |i: usize| {
            if r.samples[i].is_empty() || r.samples[0].is_empty() {
                "–".to_string()
            } else {
                format!("{:.2}", paired_ratio(&r.samples[0], &r.samples[i]))
            }
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            r.threads,
            value(0),
            value(1),
            value(2),
            value(3),
            value(4),
            ratio(2),
            ratio(1),
            ratio(3),
            ratio(4),
            fmt_round_trips(&r.round_trip_ns)
        );
    }
}

fn write_json(cfg: &Config, rows: &[Row], path: &std::path::Path) -> std::io::Result<()> {
    let mut out = format!(
        "{{\n  \"duration_ms\": {},\n  \"rounds\": {},\n  \"items\": {},\n  \"cpus\": {},\n  \"busy\": {},\n  \"busy_session\": \"{}\",\n  \"cases\": [\n",
        cfg.duration.as_millis(),
        cfg.rounds,
        cfg.items,
        procs(),
        cfg.busy.0,
        if cfg.busy.1 { "own" } else { "bench" }
    );
    for (i, r) in rows.iter().enumerate() {
        let locks: Vec<String> = LOCKS
            .iter()
            .chain(FLOORS.iter().map(|f| &f.0))
            .zip(&r.samples)
            .map(|(l, s)| {
                let v: Vec<String> = s.iter().map(|x| format!("{x:.3}")).collect();
                format!("\"{l}\": [{}]", v.join(", "))
            })
            .collect();
        let rt: Vec<String> = r.round_trip_ns.iter().map(|x| format!("{x:.1}")).collect();
        out += &format!(
            "    {{\"name\": \"{}\", \"threads\": \"{}\", \"line_round_trip_ns\": [{}], {}}}{}\n",
            r.name,
            r.threads,
            rt.join(", "),
            locks.join(", "),
            if i + 1 < rows.len() { "," } else { "" }
        );
    }
    out += "  ]\n}\n";
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, out)
}

fn main() {
    let cfg = Config::from_env_and_args();
    if cfg.test {
        eprintln!("steady: test mode (no --bench): every case once, short runs, counters checked");
    }
    let mut rows = Vec::new();
    for (name, kind, par) in WORKLOADS {
        if !cfg.selected(name) {
            continue;
        }
        let threads = par * procs();
        rows.push(rounds(
            &cfg,
            name.into(),
            threads.to_string(),
            |entry| match entry {
                0 => Some(run_workload::<GoMutex<Guarded>>(name, kind, threads, &cfg)),
                1 => Some(run_workload::<StdMutex<Guarded>>(name, kind, threads, &cfg)),
                2 => Some(run_workload::<PlMutex<Guarded>>(name, kind, threads, &cfg)),
                f => run_floor(name, kind, threads, &cfg, FLOORS[f - LOCKS.len()].1),
            },
        ));
    }
    for c in &CV_CASES {
        let name = c.name();
        if !cfg.selected(&name) {
            continue;
        }
        let threads = format!("{}+{}", c.producers, c.consumers);
        rows.push(rounds(&cfg, name, threads, |entry| match entry {
            0 => Some(run_queue::<GoQueue>(c, cfg.items)),
            1 => Some(run_queue::<StdQueue>(c, cfg.items)),
            2 => Some(run_queue::<PlQueue>(c, cfg.items)),
            _ => None, // no floors here
        }));
    }
    assert!(!rows.is_empty() || !cfg.filters.is_empty(), "no case ran");
    print_table(&cfg, &rows);
    if let Some(path) = &cfg.json {
        match write_json(&cfg, &rows, path) {
            Ok(()) => eprintln!("steady: JSON written to {}", path.display()),
            Err(e) => eprintln!("steady: could not write {}: {e}", path.display()),
        }
    }
}
