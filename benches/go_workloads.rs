//! Go's `sync/mutex_test.go` workloads, in process, for `gomutex::Mutex`, `std::sync::Mutex`
//! and `parking_lot::Mutex` (Go 1.19 `src/sync/mutex_test.go`).
//!
//! This is the grain-based harness (Go's `RunParallel` with a fixed iteration budget); the
//! steady-contention one, which loops until a stop flag, is `steady.rs`.
//!
//! * Seven criterion groups, one per Go benchmark (`Uncontended`, `Mutex`, `MutexSlack`,
//!   `MutexWork`, `MutexWorkSlack`, `MutexNoSpin`, `MutexSpin`), each with the lines
//!   `gomutex`, `std`, `parking_lot`. Every workload is written once ([`run_workload`]),
//!   generic over the small `Lock` trait of `common.rs`.
//! * Time per iteration is Go's ns/op: **wall time / all operations of all threads**. Like
//!   `testing.B.RunParallel`, `parallelism × available_parallelism()` threads share the
//!   `iters` budget through an atomic counter handed out in grains of ~100 µs (sized from the
//!   previous sample, clamped to 1..=10 000). Threads are spawned before the clock starts and
//!   released by a barrier; the wall time runs from the first thread's start to the last
//!   thread's end.
//! * After the groups, Go's `TestMutexFairness` scenario runs as a measurement (criterion
//!   cannot report a maximum) and prints a table `fairness: <lock> worst=… total=…`; it is
//!   also written to `<criterion dir>/fairness.json` for `scripts/bench_summary.py`.
//!
//! Adaptations (documented, deliberate):
//! * `MutexNoSpin` yields with `std::thread::yield_now()` instead of Go's spawn-a-goroutine
//!   channel dance (a thread spawn per iteration would measure `clone(2)`, not the lock).
//! * Work outside the lock goes through `std::hint::black_box` so LLVM cannot delete it (see
//!   `common::go_work`).
//! * `Uncontended` gives each thread its own heap-allocated `#[repr(align(128))]` mutex; the
//!   shared mutex of the other workloads sits in a 128-byte-aligned slot too, and the work
//!   outside the lock is one out-of-line function that all locks call (`common.rs` says why).
//!
//! Knobs (environment):
//! * `GOMUTEX_BENCH_PLOTS=1`: criterion's HTML/SVG report (off by default: plotting costs
//!   more than measuring);
//! * `GOMUTEX_FAIRNESS_ROUNDS` (default 5);
//! * `GOMUTEX_FAIRNESS_CAP_MS` (default 10 000): the greedy thread gives up after this long,
//!   so a starving lock cannot hang the run (Go's test fails at 10 s); a lock that hits the
//!   cap skips its remaining rounds.
//!
//! A filter argument skips the fairness table unless "fairness" contains it;
//! `cargo test --benches` runs one short round (cap 1 s).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{measurement::WallTime, BenchmarkGroup, Criterion};

mod common;
use common::{env_or, go_work, local_array, procs, stride4_increment, target_dir, Lock, Padded};

// ---------------------------------------------------------------------------------------------
// The three locks behind one interface.

/// The data guarded by the shared mutex (Go's `acc0`, `acc1`).
#[derive(Default)]
struct Acc {
    acc0: u64,
    acc1: u64,
}

type GoMutex = gomutex::Mutex<Acc>;
type StdMutex = std::sync::Mutex<Acc>;
type PlMutex = parking_lot::Mutex<Acc>;

// ---------------------------------------------------------------------------------------------
// testing.B.RunParallel, for threads.

/// Run `op` `iters` times in total over `threads` threads, each with its own state from
/// `make_state` (built before the clock starts). Returns wall time: first start to last end.
fn run_parallel<S, MS, OP>(
    threads: usize,
    iters: u64,
    grain: u64,
    make_state: MS,
    op: OP,
) -> Duration
where
    MS: Fn() -> S + Sync,
    OP: Fn(&mut S) + Sync,
{
    let next = AtomicU64::new(0);
    let barrier = Barrier::new(threads);
    let (make_state, op, next, barrier) = (&make_state, &op, &next, &barrier);
    let spans: Vec<(Instant, Instant)> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let mut state = make_state();
                    barrier.wait();
                    let start = Instant::now();
                    // pb.Next(): take `grain` iterations at a time from the shared budget.
                    loop {
                        let n = next.fetch_add(grain, Ordering::Relaxed) + grain;
                        let take = if n <= iters {
                            grain
                        } else if n < iters + grain {
                            iters + grain - n
                        } else {
                            break;
                        };
                        for _ in 0..take {
                            op(&mut state);
                        }
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let start = spans.iter().map(|s| s.0).min().unwrap();
    let end = spans.iter().map(|s| s.1).max().unwrap();
    end.duration_since(start)
}

/// Go's grain: iterations that last ~100 µs at the previous sample's rate, in 1..=10 000.
fn grain(prev: Option<(u64, Duration)>) -> u64 {
    match prev {
        Some((n, d)) if d.as_nanos() > 0 => {
            (100_000u128 * u128::from(n) / d.as_nanos()).clamp(1, 10_000) as u64
        }
        _ => 1,
    }
}

// ---------------------------------------------------------------------------------------------
// The workloads of sync/mutex_test.go, each written once.

#[derive(Clone, Copy)]
enum Workload {
    /// BenchmarkMutexUncontended: a private padded mutex per thread, empty critical section.
    Uncontended,
    /// BenchmarkMutex / MutexSlack / MutexWork / MutexWorkSlack: one shared mutex, empty
    /// critical section; with `work`, 100 × `foo *= 2; foo /= 2` outside the lock.
    Shared { work: bool },
    /// BenchmarkMutexNoSpin: 1 in 4 iterations locks; the others touch 32 KiB and yield.
    NoSpin,
    /// BenchmarkMutexSpin: every iteration locks, then touches 128 KiB outside the lock.
    Spin,
}

#[inline(always)]
fn critical(acc: &mut Acc) {
    acc.acc0 = acc.acc0.wrapping_sub(100);
    acc.acc1 = acc.acc1.wrapping_add(100);
}

#[allow(clippy::disallowed_names)] // `foo` is Go's name for the work variable.
fn run_workload<L: Lock<Acc>>(w: Workload, threads: usize, iters: u64, grain: u64) -> Duration {
    match w {
        Workload::Uncontended => run_parallel(
            threads,
            iters,
            grain,
            || Box::new(Padded(L::new(Acc::default()))),
            |mu| mu.0.with(|_| ()),
        ),
        Workload::Shared { work } => {
            let mu = &Padded(L::new(Acc::default())).0;
            run_parallel(
                threads,
                iters,
                grain,
                || 0i64,
                |foo| {
                    mu.with(|_| ());
                    if work {
                        *foo = go_work(*foo);
                    }
                },
            )
        }
        Workload::NoSpin => {
            let mu = &Padded(L::new(Acc::default())).0;
            run_parallel(
                threads,
                iters,
                grain,
                || (0u64, local_array(4 << 10)),
                |(i, data)| {
                    if *i % 4 == 0 {
                        mu.with(critical);
                    } else {
                        stride4_increment(data);
                        // Adaptation of Go's channel yield (see the module docs).
                        thread::yield_now();
                    }
                    *i += 1;
                },
            )
        }
        Workload::Spin => {
            let mu = &Padded(L::new(Acc::default())).0;
            run_parallel(
                threads,
                iters,
                grain,
                || local_array(16 << 10),
                |data| {
                    mu.with(critical);
                    stride4_increment(data);
                },
            )
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Criterion groups.

fn line<L: Lock<Acc>>(g: &mut BenchmarkGroup<'_, WallTime>, id: &str, w: Workload, threads: usize) {
    // Outside the closure: criterion calls it afresh for every sample, and the grain must be
    // sized from the previous sample (as Go sizes it from the previous b.N run).
    let mut prev = None;
    g.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let d = run_workload::<L>(w, threads, iters, grain(prev));
            prev = Some((iters, d));
            d
        })
    });
}

fn group(c: &mut Criterion, name: &str, w: Workload, parallelism: usize) {
    let threads = parallelism * procs();
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    line::<GoMutex>(&mut g, "gomutex", w, threads);
    line::<StdMutex>(&mut g, "std", w, threads);
    line::<PlMutex>(&mut g, "parking_lot", w, threads);
    g.finish();
}

fn go_workloads(c: &mut Criterion) {
    group(c, "Uncontended", Workload::Uncontended, 1);
    group(c, "Mutex", Workload::Shared { work: false }, 1);
    group(c, "MutexSlack", Workload::Shared { work: false }, 10);
    group(c, "MutexWork", Workload::Shared { work: true }, 1);
    group(c, "MutexWorkSlack", Workload::Shared { work: true }, 10);
    group(c, "MutexNoSpin", Workload::NoSpin, 4);
    group(c, "MutexSpin", Workload::Spin, 1);
}

// ---------------------------------------------------------------------------------------------
// TestMutexFairness as a measurement.

struct Round {
    /// The victim's longest single wait for the lock.
    worst: Duration,
    /// The victim's whole run: 10 × (sleep 100 µs, lock, unlock).
    total: Duration,
    /// Acquisitions by the greedy thread meanwhile.
    greedy_locks: u64,
    /// The greedy thread hit the cap before the victim was done.
    capped: bool,
}

fn fairness_round<L: Lock<Acc>>(cap: Duration) -> Round {
    let mu = &Padded(L::new(Acc::default())).0;
    let stop = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    let t0 = Instant::now();
    thread::scope(|s| {
        let greedy = s.spawn(|| {
            let mut n = 0u64;
            loop {
                mu.with(|_| {
                    started.store(true, Ordering::Relaxed);
                    thread::sleep(Duration::from_micros(100));
                });
                n += 1;
                if stop.load(Ordering::Relaxed) {
                    return (n, false);
                }
                if t0.elapsed() > cap {
                    return (n, true);
                }
            }
        });
        // Unlike Go's test, make sure the greedy thread is running before the victim starts,
        // or a slow thread spawn lets the victim finish before there is any contention.
        while !started.load(Ordering::Relaxed) {
            thread::yield_now();
        }
        let start = Instant::now();
        let mut worst = Duration::ZERO;
        for _ in 0..10 {
            thread::sleep(Duration::from_micros(100));
            let t = Instant::now();
            mu.with(|_| ());
            worst = worst.max(t.elapsed());
        }
        let total = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        let (greedy_locks, capped) = greedy.join().unwrap();
        Round {
            worst,
            total,
            greedy_locks,
            capped,
        }
    })
}

struct FairnessRow {
    lock: &'static str,
    rounds: Vec<Round>,
    skipped: usize,
}

fn fairness_lock<L: Lock<Acc>>(lock: &'static str, rounds: usize, cap: Duration) -> FairnessRow {
    let mut row = FairnessRow {
        lock,
        rounds: Vec::new(),
        skipped: 0,
    };
    for r in 0..rounds {
        let round = fairness_round::<L>(cap);
        let capped = round.capped;
        row.rounds.push(round);
        if capped {
            // A lock that starves the victim for the whole cap will do it again; do not spend
            // another `cap` on each remaining round.
            row.skipped = rounds - r - 1;
            break;
        }
    }
    row
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn fairness(rounds: usize, cap: Duration, out: Option<PathBuf>) {
    let rows = [
        fairness_lock::<GoMutex>("gomutex", rounds, cap),
        fairness_lock::<StdMutex>("std", rounds, cap),
        fairness_lock::<PlMutex>("parking_lot", rounds, cap),
    ];
    println!();
    println!(
        "TestMutexFairness scenario: greedy {{lock; sleep 100us; unlock}} vs victim 10 x \
         {{sleep 100us; lock; unlock}}; {rounds} round(s), greedy capped at {:.0} ms",
        ms(cap)
    );
    let mut json = String::from("{\n");
    for (k, row) in rows.iter().enumerate() {
        let n = row.rounds.len() as f64;
        let worst = row.rounds.iter().map(|r| r.worst).max().unwrap();
        let total_max = row.rounds.iter().map(|r| r.total).max().unwrap();
        let total_mean = row.rounds.iter().map(|r| ms(r.total)).sum::<f64>() / n;
        let worst_mean = row.rounds.iter().map(|r| ms(r.worst)).sum::<f64>() / n;
        let greedy_mean = row
            .rounds
            .iter()
            .map(|r| r.greedy_locks as f64)
            .sum::<f64>()
            / n;
        let capped = row.rounds.iter().filter(|r| r.capped).count();
        println!(
            "fairness: {:<11} worst={:>9.3} ms (mean of round worsts {:>8.3} ms)  \
             total={:>9.3} ms max, {:>9.3} ms mean  greedy_locks/round={:>8.0}  \
             rounds={} capped={} skipped={}",
            row.lock,
            ms(worst),
            worst_mean,
            ms(total_max),
            total_mean,
            greedy_mean,
            row.rounds.len(),
            capped,
            row.skipped
        );
        json.push_str(&format!(
            "  \"{}\": {{\"worst_ms\": {:.6}, \"worst_mean_ms\": {:.6}, \"total_max_ms\": {:.6}, \
             \"total_mean_ms\": {:.6}, \"greedy_locks_mean\": {:.1}, \"rounds\": {}, \
             \"capped\": {}, \"skipped\": {}, \"cap_ms\": {:.0}}}{}\n",
            row.lock,
            ms(worst),
            worst_mean,
            ms(total_max),
            total_mean,
            greedy_mean,
            row.rounds.len(),
            capped,
            row.skipped,
            ms(cap),
            if k + 1 < rows.len() { "," } else { "" }
        ));
    }
    json.push_str("}\n");
    if let Some(dir) = out {
        let path = dir.join("fairness.json");
        if std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, json))
            .is_err()
        {
            eprintln!("fairness: could not write {}", path.display());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// main: criterion groups, then the fairness table.

/// What the command line asks of the fairness measurement (criterion keeps its mode private).
struct Args {
    test: bool,
    list: bool,
    filter: Option<String>,
}

fn args() -> Args {
    // criterion options that take a value (their value is not a filter).
    const WITH_VALUE: &[&str] = &[
        "--color",
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--plotting-backend",
        "--output-format",
        "--profile-time",
        "--format",
        "-c",
        "-s",
        "-b",
    ];
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let has = |f: &str| argv.iter().any(|a| a == f);
    let mut filter = None;
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if WITH_VALUE.contains(&a.as_str()) {
            it.next();
        } else if !a.starts_with('-') && filter.is_none() {
            filter = Some(a.clone());
        }
    }
    Args {
        // Same rule as criterion: `cargo test --benches` passes no `--bench`.
        test: !has("--bench") || has("--test"),
        list: has("--list") || has("--profile-time"),
        filter,
    }
}

fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        PathBuf::from(home)
    } else {
        target_dir().join("criterion")
    }
}

fn main() {
    let args = args();
    let mut c = Criterion::default();
    // Plotting (plotters backend, no gnuplot) costs far more than measuring here: ~20 s per
    // line on a loaded 2-core machine against 2.5 s of measurement. The numbers live in
    // estimates.json (see scripts/bench_summary.py); GOMUTEX_BENCH_PLOTS=1 brings plots back.
    if std::env::var_os("GOMUTEX_BENCH_PLOTS").is_none() {
        c = c.without_plots();
    }
    let mut c = c.configure_from_args();
    go_workloads(&mut c);
    c.final_summary();

    let wanted = args
        .filter
        .as_deref()
        .is_none_or(|f| "fairness".contains(f));
    if args.list {
        if wanted {
            println!("fairness: table (not a criterion benchmark)");
        }
    } else if wanted {
        if args.test {
            // One short round: checks it runs, never stalls `cargo test --benches`.
            fairness(1, Duration::from_secs(1), None);
        } else {
            let rounds = env_or("GOMUTEX_FAIRNESS_ROUNDS", 5usize).max(1);
            let cap = Duration::from_millis(env_or("GOMUTEX_FAIRNESS_CAP_MS", 10_000u64));
            fairness(rounds, cap, Some(criterion_dir()));
        }
    }
}
