//! Readers-writer locks in the steady-contention style: Go's five `RWMutex` workloads (Go 1.19
//! `src/sync/rwmutex_test.go`) and a writer-fairness scenario, for `gomutex::RwLock`,
//! `std::sync::RwLock` and `parking_lot::RwLock`, printed as markdown tables.
//!
//! **Go's workloads.** T threads loop Go's body until a stop flag is set after a fixed wall
//! time; ns/op = wall time / all operations of all threads (as `steady.rs`; no grains):
//!
//! | name | threads | loop body |
//! |---|---|---|
//! | Uncontended | 1 × P | a lock of its own per thread (128-byte aligned): read, read, unlock, unlock, write, unlock |
//! | Write100 | 1 × P, 10 × P | one shared lock: every 100th op an empty write, the others an empty read |
//! | Write10 | 1 × P, 10 × P | as Write100, every 10th op a write |
//! | WorkWrite100 | 1 × P, 10 × P | as Write100, the reads doing 100 × `foo *= 2; foo /= 2` inside the read lock |
//! | WorkWrite10 | 1 × P, 10 × P | as WorkWrite100, every 10th op a write |
//! | ReadOnly | 1 × P, 10 × P | as Write100 with no write: readers only, always overlapping |
//! | WorkReadOnly | 1 × P | as WorkWrite100 with no write |
//! | Write10000 | 1 × P | as Write100, every 10 000th op a write |
//! | WriteAll | 1 × P | as Write100, every op a write |
//!
//! (P = CPUs; 10 × P is Go's `GOMAXPROCS=10`-style slack, called `Slack` as in steady's table.
//! The last four rows are not Go's: the read-mostly end, where a lock whose readers share one
//! word pays a line transfer per read lock and per unlock, and the write-only end.)
//! The writers count their writes under the lock, which must equal the threads' own tally.
//! Floors beside the shared-lock rows, in the same rotation: `floor`, the same loop with a
//! `std::sync::RwLock` of its own per thread (nobody waits, no line moves); `atomic`, one
//! shared `fetch_add` per op in place of the lock (the line moves, nobody waits); and
//! `atomic2`, a shared `fetch_add` before and `fetch_sub` after each read and nothing for a
//! write: a read lock's two atomic operations on one shared word, with nobody ever waiting.
//!
//! **Writer fairness.** One or four readers hold the read lock 50 µs each (spinning on the
//! clock) in a loop, back to back; one writer wants the write lock 20 times, 1 ms apart
//! (sleeping 1 ms plus a random 0–50 µs between, so that its arrivals do not fall into step
//! with the readers' sections). Reported: the writer's worst single wait (median over rounds,
//! and the maximum). A writer that has waited `RWLOCK_FAIRNESS_CAP_MS` (default 10 000) for
//! one write ends the round (the readers stop, so it gets the lock), so a starving lock cannot
//! hang the run.
//!
//! **Rounds.** Every case runs `rounds` times per contender, alternating within a round (the
//! first contender rotates from round to round); tables show medians, and ratios are medians
//! of the per-round ratios. The cache-line round trip between the first two CPUs is probed
//! before each round and printed with that round's gomutex / best; the table also gives
//! gomutex / best over the near rounds (round trip below [`FAR_NS`], ~60–150 ns) and over the
//! far ones (~300 ns) apart, since a read-mostly row's ratio depends on the placement (a probe
//! of [`STOLEN_NS`] or more was preempted, and its round counts as neither).
//!
//! `cargo bench --bench rwlock [-- FILTER…]` (substrings of case names; `=NAME` exact).
//! Environment: `RWLOCK_DURATION_MS` (default 500), `RWLOCK_ROUNDS` (default 5),
//! `RWLOCK_FAIRNESS_ROUNDS` (default 3). Without `--bench` (`cargo test --benches`): every
//! case once, 10 ms, at least 200 ops per thread, counters checked; fairness with 3 writes.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use common::{
    alternate, env_or, fmt_round_trips, go_work, median, paired_ratio, procs, selected, steady,
    Args, Padded,
};

// ---------------------------------------------------------------------------------------------
// Configuration

struct Config {
    test: bool,
    duration: Duration,
    rounds: usize,
    fairness_rounds: usize,
    fairness_writes: usize,
    fairness_cap: Duration,
    min_ops: u64,
    filters: Vec<String>,
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
                fairness_rounds: 1,
                fairness_writes: 3,
                fairness_cap: Duration::from_secs(2),
                min_ops: 200,
                filters,
            };
        }
        Config {
            test,
            duration: Duration::from_millis(env_or("RWLOCK_DURATION_MS", 500)),
            rounds: env_or("RWLOCK_ROUNDS", 5usize).max(1),
            fairness_rounds: env_or("RWLOCK_FAIRNESS_ROUNDS", 3usize).max(1),
            fairness_writes: 20,
            fairness_cap: Duration::from_millis(env_or("RWLOCK_FAIRNESS_CAP_MS", 10_000)),
            min_ops: 0,
            filters,
        }
    }

    fn selected(&self, name: &str) -> bool {
        selected(&self.filters, name)
    }
}

const LOCKS: [&str; 3] = ["gomutex", "std", "parking_lot"];
/// The floors, in their table columns' order (`floor`, `atomic`, `atomic2`).
const FLOORS: [Floor; 3] = [Floor::Own, Floor::Atomic, Floor::Atomic2];

// ---------------------------------------------------------------------------------------------
// The three locks behind one interface

/// Read-lock and run `f`, or write-lock and run `f`: the three locks, so every workload is
/// written once.
trait RwBench<T>: Send + Sync {
    fn new(value: T) -> Self;
    fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R;
    fn write<R>(&self, f: impl FnOnce(&mut T) -> R) -> R;
    /// Go's Uncontended body: two nested read locks, then a write lock.
    fn read_read_write(&self, f: impl FnOnce(&mut T));
}

macro_rules! std_like {
    ($t:ident, [$($read:tt)*], [$($write:tt)*]) => {
        impl<T: Send + Sync> RwBench<T> for $t<T> {
            fn new(value: T) -> Self {
                $t::new(value)
            }
            #[inline]
            fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
                f(&self.$($read)*)
            }
            #[inline]
            fn write<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
                f(&mut self.$($write)*)
            }
            #[inline]
            fn read_read_write(&self, f: impl FnOnce(&mut T)) {
                let a = self.$($read)*;
                let b = self.$($read)*;
                drop(b);
                drop(a);
                f(&mut self.$($write)*);
            }
        }
    };
}

type GoRw<T> = gomutex::RwLock<T>;
type StdRw<T> = std::sync::RwLock<T>;
type PlRw<T> = parking_lot::RwLock<T>;

std_like!(GoRw, [read().unwrap()], [write().unwrap()]);
std_like!(StdRw, [read().unwrap()], [write().unwrap()]);
std_like!(PlRw, [read()], [write()]);

// ---------------------------------------------------------------------------------------------
// Go's RWMutex workloads

#[derive(Clone, Copy)]
enum Kind {
    Uncontended,
    /// Go's `benchmarkRWMutex(localWork, writeRatio)`; `work` is 0 or 100 (`go_work`).
    Shared {
        work: bool,
        write_ratio: u64,
    },
}

/// `write_ratio` of the read-only workloads: no op is a write.
const NO_WRITES: u64 = u64::MAX;

/// Name, body, thread multiplier (× P).
const WORKLOADS: [(&str, Kind, usize); 14] = [
    ("Uncontended", Kind::Uncontended, 1),
    ("Write100", shared(false, 100), 1),
    ("Write100Slack", shared(false, 100), 10),
    ("Write10", shared(false, 10), 1),
    ("Write10Slack", shared(false, 10), 10),
    ("WorkWrite100", shared(true, 100), 1),
    ("WorkWrite100Slack", shared(true, 100), 10),
    ("WorkWrite10", shared(true, 10), 1),
    ("WorkWrite10Slack", shared(true, 10), 10),
    ("ReadOnly", shared(false, NO_WRITES), 1),
    ("ReadOnlySlack", shared(false, NO_WRITES), 10),
    ("WorkReadOnly", shared(true, NO_WRITES), 1),
    ("Write10000", shared(false, 10_000), 1),
    ("WriteAll", shared(false, 1), 1),
];

const fn shared(work: bool, write_ratio: u64) -> Kind {
    Kind::Shared { work, write_ratio }
}

/// A thread's state: Go's `foo` (its op counter too) and its writes.
#[derive(Default)]
struct Local {
    foo: i64,
    writes: u64,
}

/// One iteration of Go's `benchmarkRWMutex` body on `l` (a write every `ratio`-th op).
#[inline(always)]
#[allow(clippy::disallowed_names)] // `foo` is Go's name
fn go_rw_op<L: RwBench<u64>>(l: &L, s: &mut Local, work: bool, ratio: u64) {
    s.foo += 1;
    if (s.foo as u64).is_multiple_of(ratio) {
        l.write(|n| *n += 1);
        s.writes += 1;
    } else {
        let foo = s.foo;
        s.foo = l.read(|_| if work { go_work(foo) } else { foo });
    }
}

/// One run of one workload on `L`: ns/op, after checking the write counts.
fn run_workload<L: RwBench<u64>>(name: &str, kind: Kind, threads: usize, cfg: &Config) -> f64 {
    let (d, min) = (cfg.duration, cfg.min_ops);
    let (wall, ops) = match kind {
        Kind::Uncontended => {
            let (wall, res) = steady(
                threads,
                d,
                min,
                |_| Box::new(Padded(L::new(0u64))),
                |l| l.0.read_read_write(|n| *n += 1),
            );
            for (ops, l) in &res {
                assert_eq!(l.0.read(|n| *n), *ops, "{name}: lost updates");
            }
            (wall, res.iter().map(|r| r.0).sum::<u64>())
        }
        Kind::Shared { work, write_ratio } => {
            let l = &Padded(L::new(0u64)).0;
            let (wall, res) = steady(
                threads,
                d,
                min,
                |_| Local::default(),
                |s| go_rw_op(l, s, work, write_ratio),
            );
            let writes: u64 = res.iter().map(|r| r.1.writes).sum();
            assert_eq!(l.read(|n| *n), writes, "{name}: lost updates");
            (wall, res.iter().map(|r| r.0).sum::<u64>())
        }
    };
    wall.as_nanos() as f64 / ops as f64
}

/// The floors of a shared-lock workload.
#[derive(Clone, Copy)]
enum Floor {
    /// A `std::sync::RwLock` of its own per thread: nobody waits, no line moves.
    Own,
    /// One shared `fetch_add` per op in place of the lock: the line moves, nobody waits.
    Atomic,
    /// A shared `fetch_add` before each read and a `fetch_sub` after it, nothing for a write:
    /// the least a read lock on one shared word costs (Go's `RLock` and `RUnlock` when no
    /// writer is pending), with nobody ever waiting.
    Atomic2,
}

/// A floor of a shared-lock workload (`None` for Uncontended): the same threads and body, on
/// the floor's stand-in for the lock.
fn run_floor(name: &str, kind: Kind, threads: usize, cfg: &Config, floor: Floor) -> Option<f64> {
    let Kind::Shared { work, write_ratio } = kind else {
        return None;
    };
    let shared = Padded(AtomicU64::new(0));
    let (wall, res) = steady(
        threads,
        cfg.duration,
        cfg.min_ops,
        |_| (Local::default(), Box::new(Padded(StdRw::new(0u64)))),
        |(s, own)| match floor {
            Floor::Own => go_rw_op(&own.0, s, work, write_ratio),
            Floor::Atomic => {
                s.foo += 1;
                shared.0.fetch_add(1, Ordering::Relaxed);
                if (s.foo as u64).is_multiple_of(write_ratio) {
                    s.writes += 1;
                } else if work {
                    s.foo = go_work(s.foo);
                }
            }
            Floor::Atomic2 => {
                s.foo += 1;
                if (s.foo as u64).is_multiple_of(write_ratio) {
                    s.writes += 1;
                } else {
                    shared.0.fetch_add(1, Ordering::SeqCst);
                    if work {
                        s.foo = go_work(s.foo);
                    }
                    shared.0.fetch_sub(1, Ordering::SeqCst);
                }
            }
        },
    );
    let ops: u64 = res.iter().map(|r| r.0).sum();
    match floor {
        Floor::Own => {
            let writes: u64 = res.iter().map(|r| r.1 .0.writes).sum();
            let counted: u64 = res.iter().map(|r| RwBench::read(&r.1 .1 .0, |n| *n)).sum();
            assert_eq!(counted, writes, "{name} floor: lost updates");
        }
        Floor::Atomic => assert_eq!(
            shared.0.load(Ordering::Relaxed),
            ops,
            "{name} atomic floor: lost updates"
        ),
        Floor::Atomic2 => assert_eq!(
            shared.0.load(Ordering::Relaxed),
            0,
            "{name} atomic2 floor: lost updates"
        ),
    }
    Some(wall.as_nanos() as f64 / ops as f64)
}

// ---------------------------------------------------------------------------------------------
// Writer fairness

/// One round of the fairness scenario on `L` with `readers` readers: the writer's worst single
/// wait, in µs.
fn run_fairness<L: RwBench<u64>>(readers: usize, cfg: &Config) -> f64 {
    let l = &Padded(L::new(0u64)).0;
    let stop = &AtomicBool::new(false);
    let barrier = &Barrier::new(readers + 1);
    let base = Instant::now();
    // When the writer started waiting (ns since `base`, + 1), or 0 while it does not wait.
    let waiting_since = &AtomicU64::new(0);
    let cap = cfg.fairness_cap;
    thread::scope(|s| {
        for _ in 0..readers {
            s.spawn(move || {
                barrier.wait();
                while !stop.load(Ordering::Relaxed) {
                    l.read(|_| {
                        let t0 = Instant::now();
                        while t0.elapsed() < Duration::from_micros(50) {
                            std::hint::spin_loop();
                        }
                    });
                    // The cap: a writer starved this long ends the round.
                    let since = waiting_since.load(Ordering::Relaxed);
                    if since != 0 && base.elapsed() > Duration::from_nanos(since - 1) + cap {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
        barrier.wait();
        let mut worst = Duration::ZERO;
        let mut jitter = base.elapsed().as_nanos() as u64 | 1;
        for _ in 0..cfg.fairness_writes {
            // 1 ms plus 0–50 µs: a fixed gap can fall into step with the readers' 50 µs
            // sections (parking_lot's writer then waited at most 5–25 µs in 20 writes, less
            // than half a section), and the lock's figure becomes the alignment's.
            jitter = jitter
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            thread::sleep(Duration::from_micros(1_000 + (jitter >> 33) % 51));
            let t0 = Instant::now();
            waiting_since.store((t0 - base).as_nanos() as u64 + 1, Ordering::Relaxed);
            l.write(|n| *n += 1);
            let w = t0.elapsed();
            waiting_since.store(0, Ordering::Relaxed);
            worst = worst.max(w);
            if stop.load(Ordering::Relaxed) {
                eprintln!("fairness: the writer waited past the cap ({cap:?}); round ended");
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        worst.as_secs_f64() * 1e6
    })
}

// ---------------------------------------------------------------------------------------------
// Rounds and tables

/// Runs `run(entry)` `rounds` times for every entry (`LOCKS` then `FLOORS`; `None`: the case
/// has no such entry), rotating the order from round to round. Returns the samples per entry
/// and each round's round trip (`None` in test mode or with one CPU).
fn rounds(
    cfg: &Config,
    rounds: usize,
    entries: usize,
    run: impl Fn(usize) -> Option<f64>,
) -> (Vec<Vec<f64>>, Vec<Option<f64>>) {
    let mut samples = vec![Vec::new(); entries];
    let rt = alternate(rounds, entries, !cfg.test, (0, false), |_, entry| {
        samples[entry].extend(run(entry))
    });
    (samples, rt)
}

/// A round whose probed round trip is at least this (ns) ran in the far placement (~300 ns on
/// this machine's two vCPUs), one below it in the near one (~60–150 ns).
const FAR_NS: f64 = 200.0;
/// A probe at least this long (ns) was preempted (a loaded machine): its round's placement is
/// unknown, and the round counts as neither near nor far.
const STOLEN_NS: f64 = 1000.0;

/// The rounds' round trips as the benches print them (`min–max`).
fn fmt_rt(rt: &[Option<f64>]) -> String {
    fmt_round_trips(&rt.iter().flatten().copied().collect::<Vec<_>>())
}

fn fmt_ns(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// `gomutex / min(std, parking_lot)` in each round.
fn ratios_to_best(s: &[Vec<f64>]) -> Vec<f64> {
    s[0].iter()
        .zip(s[1].iter().zip(&s[2]))
        .map(|(g, (a, b))| g / a.min(*b))
        .collect()
}

/// The median of `ratios` over the rounds in the far (`far`) or near placement, as `x.xx (n)`
/// with n the number of such rounds, or `–`.
fn placement_ratio(ratios: &[f64], rt: &[Option<f64>], far: bool) -> String {
    let picked: Vec<f64> = ratios
        .iter()
        .zip(rt)
        .filter(|(_, t)| t.is_some_and(|t| t < STOLEN_NS && (t >= FAR_NS) == far))
        .map(|(r, _)| *r)
        .collect();
    if picked.is_empty() {
        "–".into()
    } else {
        format!("{:.2} ({})", median(&picked), picked.len())
    }
}

/// Each round's round trip and gomutex / best, as `RT ns: ratio` pairs.
fn fmt_per_round(ratios: &[f64], rt: &[Option<f64>]) -> String {
    let each: Vec<String> = ratios
        .iter()
        .zip(rt)
        .map(|(r, t)| match t {
            Some(t) => format!("{t:.0} ns: {r:.2}"),
            None => format!("–: {r:.2}"),
        })
        .collect();
    each.join(", ")
}

fn main() {
    let cfg = Config::from_env_and_args();
    if cfg.test {
        eprintln!("rwlock: test mode (no --bench): every case once, short runs, counters checked");
    }
    let p = procs();
    let mut table = Vec::new();
    for (name, kind, mult) in WORKLOADS {
        if !cfg.selected(name) {
            continue;
        }
        let threads = mult * p;
        let (s, rt) = rounds(&cfg, cfg.rounds, LOCKS.len() + FLOORS.len(), |e| match e {
            0 => Some(run_workload::<GoRw<u64>>(name, kind, threads, &cfg)),
            1 => Some(run_workload::<StdRw<u64>>(name, kind, threads, &cfg)),
            2 => Some(run_workload::<PlRw<u64>>(name, kind, threads, &cfg)),
            f => run_floor(name, kind, threads, &cfg, FLOORS[f - LOCKS.len()]),
        });
        let m = |i: usize| median(&s[i]);
        let r = |i: usize| {
            if s[i].is_empty() {
                "–".to_string()
            } else {
                format!("{:.2}", paired_ratio(&s[0], &s[i]))
            }
        };
        let per_round = ratios_to_best(&s);
        eprintln!(
            "{name}: gomutex {:.1}, std {:.1}, parking_lot {:.1}, floor {}, atomic {}, atomic2 {}; \
             per round (line RT: gomutex/best) {}",
            m(0),
            m(1),
            m(2),
            fmt_ns(m(3)),
            fmt_ns(m(4)),
            fmt_ns(m(5)),
            fmt_per_round(&per_round, &rt)
        );
        table.push(format!(
            "| {name} | {threads} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_ns(m(0)),
            fmt_ns(m(1)),
            fmt_ns(m(2)),
            fmt_ns(m(3)),
            fmt_ns(m(4)),
            fmt_ns(m(5)),
            median(&per_round),
            placement_ratio(&per_round, &rt, false),
            placement_ratio(&per_round, &rt, true),
            r(2),
            r(1),
            r(3),
            r(4),
            r(5),
            fmt_rt(&rt)
        ));
    }
    let mut fair = Vec::new();
    for readers in [1, 4] {
        let name = format!("fairness/{readers}r");
        if !cfg.selected(&name) {
            continue;
        }
        let (s, rt) = rounds(&cfg, cfg.fairness_rounds, LOCKS.len(), |e| {
            Some(match e {
                0 => run_fairness::<GoRw<u64>>(readers, &cfg),
                1 => run_fairness::<StdRw<u64>>(readers, &cfg),
                _ => run_fairness::<PlRw<u64>>(readers, &cfg),
            })
        });
        let max = |i: usize| s[i].iter().copied().fold(f64::NAN, f64::max);
        let cell = |i: usize| format!("{} ({})", fmt_ns(median(&s[i])), fmt_ns(max(i)));
        eprintln!("{name}: worst waits µs {s:?}; line RT {} ns", fmt_rt(&rt));
        fair.push(format!(
            "| {readers} | {} | {} | {} | {:.2} | {} |",
            cell(0),
            cell(1),
            cell(2),
            paired_ratio(&s[0], &s[2]),
            fmt_rt(&rt)
        ));
    }
    assert!(
        !table.is_empty() || !fair.is_empty() || !cfg.filters.is_empty(),
        "no case ran"
    );
    if !table.is_empty() {
        println!();
        println!(
            "rwlock, Go's RWMutex workloads: {} ms per run, {} round(s), contenders alternating, \
             {p} CPUs; medians, ns per op; ratios: medians of per-round ratios; best = \
             min(std, parking_lot); floor: a std RwLock per thread; atomic: one shared \
             fetch_add per op in place of the lock; atomic2: a shared fetch_add and fetch_sub \
             around each read, nothing for a write; near / far: gomutex/best over the rounds \
             whose line round trip was below {FAR_NS} / {FAR_NS}–{STOLEN_NS} ns (rounds; a \
             longer probe was preempted); line RT: cache-line round trip (min–max)",
            cfg.duration.as_millis(),
            cfg.rounds
        );
        println!();
        println!(
            "| case | threads | gomutex | std | parking_lot | floor | atomic | atomic2 | \
             gomutex/best | near | far | gomutex/parking_lot | gomutex/std | gomutex/floor | \
             gomutex/atomic | gomutex/atomic2 | line RT ns |"
        );
        println!(
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for row in &table {
            println!("{row}");
        }
    }
    if !fair.is_empty() {
        println!();
        println!(
            "rwlock, writer fairness: readers hold 50 µs back to back, one writer wants the lock \
             {} times 1 ms apart (+0–50 µs); the writer's worst single wait in µs, median over {} round(s) \
             (max in parentheses)",
            cfg.fairness_writes, cfg.fairness_rounds
        );
        println!();
        println!("| readers | gomutex | std | parking_lot | gomutex/parking_lot | line RT ns |");
        println!("|---|---:|---:|---:|---:|---:|");
        for row in &fair {
            println!("{row}");
        }
    }
}
