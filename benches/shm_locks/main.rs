//! Cross-process lock benchmark: lock/unlock across forked processes, every lock in one run.
//!
//! Locks: gomutex's `shm::ShmMutex`, pthread mutexes with PTHREAD_PROCESS_SHARED (plain,
//! robust, robust + priority inheritance), a POSIX unnamed semaphore, a SysV semaphore
//! (SEM_UNDO), `flock` and `fcntl(F_SETLKW)`. Each lives in (or is named from) memory mapped
//! `MAP_SHARED | MAP_ANONYMOUS` before `fork`, or is a temp file that every child opens on its
//! own after `fork`. Each of N children loops until a stop flag the parent sets after a fixed
//! wall time (the steady-contention method of `steady.rs`): take the lock, increment a shared
//! non-atomic counter, release, then optionally do Go's `MutexWork` work (100 ×
//! `foo *= 2; foo /= 2`) outside the lock. At the end the counter must equal the sum of the
//! per-process op counts: a lock that loses updates fails the run. With work, two floors run
//! in the same rotation: `floor`, the same loop with a private lock per process (nobody waits),
//! which no shared lock can beat by more than an uncontended lock/unlock, and `atomic`, one
//! `fetch_add` on the shared counter per op in place of the lock (its line crosses CPUs as a
//! lock word's does, nobody waits). Where the locks sit on a floor, the work or the line sets
//! the pace and their ratios say nothing about the locks.
//!
//! Readers-writer locks (workloads `rw1`, `rw10`): gomutex's `shm::ShmRwLock` against
//! `pthread_rwlock_t` with PTHREAD_PROCESS_SHARED, glibc's default kind (prefers readers: a
//! writer waits while any reader holds or takes the lock) and
//! `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP` (new readers wait behind a waiting writer, as
//! `ShmRwLock`'s do). Each process loops: with probability 1 % (`rw1`) or 10 % (`rw10`) take
//! the write lock and increment the counter and a shadow copy of it in the same line, else take
//! the read lock and read both (a reader that finds them different saw a half-done write: the
//! run fails). The choice comes from a per-process LCG seeded by the process's index, so every
//! lock sees the same sequence of reads and writes. The floors run beside: `floor` takes its
//! private mutex for reads and writes alike, `atomic` does one `fetch_add` per op (of 1 for a
//! write, of 0 for a read: every op moves the line), which `ShmRwLock`'s readers, counting on a
//! line of their own process, need not. A process stuck behind readers shows in the min share,
//! and the timed run reports the worst write wait beside the worst wait of any op.
//!
//! Reader death (`rwkill`, after the loops; `rounds` trials per lock, alternating): a reader
//! takes the read lock and stops, a writer asks for the write lock and sleeps in it, and the
//! parent kills the reader (SIGKILL) and reaps it, repairing nothing: reported is the writer's
//! delay from the kill to its write lock. A pthread rwlock has no robust kind, so its writer
//! gives up after a cap (1 s; 20 ms in the smoke run); gomutex's must get in (10 s cap).
//!
//! Each configuration (process count, workload) runs every lock `rounds` times untimed, the
//! locks alternating within a round (the first one rotating from round to round, so load on a
//! shared machine hits all alike), then once timed; each run on a fresh lock:
//! * the **untimed** runs, no clock read in the loop, give (median run)
//!   * ns/op — wall time (start signal to the last child's last op) / all ops of all children,
//!   * min/max share — the smallest and largest per-process fraction of all ops (fair: 1/N);
//! * a **timed** run gives the worst wait — the longest lock() + critical section + unlock()
//!   any child saw, minus the cost of one `Instant::now()`.
//!
//! Why two runs: on this VM an `Instant::now()` costs 20–80 ns, as much as a whole
//! uncontended lock/unlock. The first version stamped around every `lock()` in the one run;
//! its ns/op were mostly clock reads (over half of the profile's samples were in
//! `clock_gettime`) and one read sat inside every critical section, lengthening it. The timed
//! run now reads the clock once per op (twice with work), never inside the critical section:
//! each op's interval runs from just before `lock()` to just after `unlock()`. Its ns/op goes
//! to the JSON only.
//!
//! `cargo bench --bench shm_locks [-- FILTER…] [--duration-ms N] [--rounds N] [--procs 1,2,8]
//! [--workloads none,work,rw1,rw10,rwkill] [--no-timing] [--pin]` runs the full bench (cargo
//! passes `--bench`; defaults 500 ms per run, 5 rounds); without `--bench` (`cargo test --benches`) it does a short smoke
//! run (10 ms, one round) that still checks every counter. Environment:
//! `SHM_LOCKS_DURATION_MS`, `SHM_LOCKS_ROUNDS`, `SHM_LOCKS_PROCS`, `SHM_LOCKS_WORKLOADS`,
//! `SHM_LOCKS_FILTER` (comma-separated substrings of `lock/Np/workload`; `=ID`: exactly ID, as in
//! the other benches: `common::selected`), `SHM_LOCKS_TIMING=0`,
//! `SHM_LOCKS_PIN=1` (`--pin`: child `i` pinned to the `i`-th allowed CPU, round robin, as
//! prefork servers pin their workers),
//! and `SHM_LOCKS_JSON=path` for the results as JSON (default for the full bench:
//! `<target dir>/shm_locks.json`, read by `scripts/bench_summary.py`). Loaded mode:
//! `SHM_LOCKS_BUSY=N` (`--busy N`) forks N busy-looping processes (a shell's
//! `while :; do :; done`) at the start of every round, after its line round-trip probe, killed
//! at its end and before the timed runs' round (which gets its own); `SHM_LOCKS_BUSY_SESSION=own`
//! puts each in a session and scheduling group of its own (`common::BusyLoops`). The table's
//! header and the JSON say the load.
//!
//! The files: `main.rs` (configuration), `locks.rs` (the locks under test and the floors),
//! `run.rs` (the shared region, the children's loops, a run, the rounds), `death.rs` (reader
//! death), `report.rs` (the table and the JSON).

#[path = "../common.rs"]
mod common;
mod death;
mod locks;
mod report;
mod run;

use common::{allowed_cpus, busy_from_env, selected, target_dir, Args};
use death::{bench_reader_death, print_deaths};
use locks::{
    check_pthread_robust_recovery, AtomicFloor, Fcntl, Flock, Floor, GoShm, GoShmRw, PosixSem,
    PthreadKind, PthreadMutex, PthreadRw, SysvSem,
};
use report::{print_table, write_json};
use run::{bench_all, contender, floor_work, mutex_work, only, rw_work};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Upper bound on the process count of one run (size of the result table in shared memory).
pub const MAX_PROCS: usize = 64;

// ---------------------------------------------------------------------------------------------
// Configuration

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Workload {
    /// lock; counter += 1; unlock — nothing else (Go's BenchmarkMutex).
    None,
    /// ... then 100 × `foo *= 2; foo /= 2` outside the lock (Go's BenchmarkMutexWork).
    Work,
    /// Readers-writer: 1 % of the ops write (counter += 1 under the write lock), the others
    /// read it under the read lock; nothing outside the lock.
    Rw1,
    /// As `Rw1`, 10 % writes.
    Rw10,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::None => "none",
            Workload::Work => "work",
            Workload::Rw1 => "rw1",
            Workload::Rw10 => "rw10",
        }
    }
    fn parse(s: &str) -> Workload {
        match s {
            "none" => Workload::None,
            "work" => Workload::Work,
            "rw1" => Workload::Rw1,
            "rw10" => Workload::Rw10,
            _ => panic!("unknown workload {s:?} (none, work, rw1, rw10)"),
        }
    }
    /// The percentage of writes of a readers-writer workload; `None`: a mutex workload.
    fn write_pct(self) -> Option<u32> {
        match self {
            Workload::None | Workload::Work => None,
            Workload::Rw1 => Some(1),
            Workload::Rw10 => Some(10),
        }
    }
}

pub struct Config {
    smoke: bool,
    duration: Duration,
    procs: Vec<usize>,
    workloads: Vec<Workload>,
    filters: Vec<String>,
    /// Every child does at least this many ops, even past the deadline (smoke: make every
    /// process contend; bench: 0).
    min_ops: u64,
    json: Option<PathBuf>,
    /// Untimed runs per configuration and lock (the table shows the median).
    rounds: usize,
    /// After the untimed runs of each configuration, do a timed run (one `Instant::now()` per
    /// op, two with work) for the worst wait. Off: untimed runs only.
    timing: bool,
    /// Cost of one `Instant::now()`, subtracted from the worst wait.
    clock_overhead: Duration,
    /// Pin child `i` to the `i`-th CPU this process may use (round robin), as prefork servers
    /// pin their workers (nginx's `worker_cpu_affinity`). Empty: children free to move.
    pin: Vec<usize>,
    /// Busy-looping processes beside every round, and whether each has a session of its own.
    busy: (usize, bool),
    /// Run the reader-death case (`rwkill` in the workload list).
    reader_death: bool,
}

fn list<T>(s: &str, f: impl Fn(&str) -> T) -> Vec<T> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(f)
        .collect()
}

/// The workload list, and whether it names `rwkill` (the reader-death case, not a loop).
fn parse_workloads(s: &str) -> (Vec<Workload>, bool) {
    let names = list(s, str::to_owned);
    let kill = names.iter().any(|n| n == "rwkill");
    let loops = names
        .iter()
        .filter(|n| *n != "rwkill")
        .map(|n| Workload::parse(n))
        .collect();
    (loops, kill)
}

fn parse_procs(s: &str) -> Vec<usize> {
    list(s, |p| {
        let n: usize = p.parse().expect("--procs: comma-separated counts");
        assert!(
            (1..=MAX_PROCS).contains(&n),
            "process count 1..={MAX_PROCS}"
        );
        n
    })
}

impl Config {
    fn from_env_and_args() -> Config {
        let args = Args::parse(&[
            "--duration-ms",
            "--procs",
            "--rounds",
            "--workloads",
            "--json",
            "--busy",
        ]);
        let smoke = !args.bench;
        let mut cfg = Config {
            smoke,
            duration: Duration::from_millis(if smoke { 10 } else { 500 }),
            procs: if smoke { vec![2, 3] } else { vec![1, 2, 8] },
            workloads: vec![
                Workload::None,
                Workload::Work,
                Workload::Rw1,
                Workload::Rw10,
            ],
            filters: Vec::new(),
            min_ops: if smoke { 200 } else { 0 },
            // The full bench always writes its JSON (for scripts/bench_summary.py).
            json: std::env::var_os("SHM_LOCKS_JSON")
                .map(PathBuf::from)
                .or_else(|| (!smoke).then(|| target_dir().join("shm_locks.json"))),
            rounds: if smoke { 1 } else { 5 },
            timing: true,
            clock_overhead: Duration::ZERO,
            pin: Vec::new(),
            busy: if smoke {
                (0, false)
            } else {
                busy_from_env("SHM_LOCKS")
            },
            reader_death: true,
        };
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let Some(v) = env("SHM_LOCKS_DURATION_MS") {
            cfg.duration = Duration::from_millis(v.parse().expect("SHM_LOCKS_DURATION_MS"));
        }
        if let Some(v) = env("SHM_LOCKS_PROCS") {
            cfg.procs = parse_procs(&v);
        }
        if let Some(v) = env("SHM_LOCKS_WORKLOADS") {
            (cfg.workloads, cfg.reader_death) = parse_workloads(&v);
        }
        if let Some(v) = env("SHM_LOCKS_FILTER") {
            cfg.filters = list(&v, str::to_owned);
        }
        if let Some(v) = env("SHM_LOCKS_ROUNDS") {
            cfg.rounds = v.parse::<usize>().expect("SHM_LOCKS_ROUNDS").max(1);
        }
        if let Some(v) = env("SHM_LOCKS_TIMING") {
            cfg.timing = v != "0";
        }
        if env("SHM_LOCKS_PIN").is_some_and(|v| v != "0") {
            cfg.pin = allowed_cpus();
        }
        cfg.filters.extend(args.filters);
        for (flag, value) in &args.flags {
            let v = value.as_deref().unwrap_or_default();
            match flag.as_str() {
                "--duration-ms" => {
                    cfg.duration = Duration::from_millis(v.parse().expect("--duration-ms N"));
                }
                "--procs" => cfg.procs = parse_procs(v),
                "--rounds" => cfg.rounds = v.parse::<usize>().expect("--rounds N").max(1),
                "--workloads" => (cfg.workloads, cfg.reader_death) = parse_workloads(v),
                "--json" => cfg.json = Some(PathBuf::from(v)),
                "--no-timing" => cfg.timing = false,
                "--pin" => cfg.pin = allowed_cpus(),
                "--busy" => cfg.busy.0 = v.parse().expect("--busy N"),
                "-h" | "--help" => {
                    println!(
                        "shm_locks [FILTER…] [--duration-ms N] [--rounds N] [--procs 1,2,8] \
                         [--workloads none,work,rw1,rw10,rwkill] [--json PATH] [--no-timing] [--pin] [--busy N]\n\
                         FILTER: substring of lock/Np/workload, e.g. pthread/8p or fcntl"
                    );
                    std::process::exit(0);
                }
                // libtest-style flags cargo may forward (--nocapture, --quiet …): ignore.
                s => eprintln!("shm_locks: ignoring flag {s}"),
            }
        }
        cfg
    }

    fn selected(&self, id: &str) -> bool {
        selected(&self.filters, id)
    }
}

/// The cheapest observed `Instant::now()`: what each timed interval (from one clock read to
/// the next) carries on top of lock() + critical section + unlock().
fn clock_overhead() -> Duration {
    (0..10_000)
        .map(|_| {
            let a = Instant::now();
            let b = Instant::now();
            b - a
        })
        .min()
        .unwrap_or_default()
}

/// fork() is only sound here because nothing else runs in this process: check it.
fn assert_single_threaded() {
    let n = std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1);
    assert_eq!(n, 1, "shm_locks forks: it must run single-threaded");
}

fn main() {
    let mut cfg = Config::from_env_and_args();
    assert_single_threaded();
    cfg.clock_overhead = clock_overhead();
    if cfg.smoke {
        eprintln!("shm_locks: smoke run (no --bench): short runs, counters checked");
        check_pthread_robust_recovery();
    }
    use PthreadKind::*;
    let m = mutex_work;
    let locks = [
        only(m, contender("gomutex-shm", GoShm::new)),
        only(m, contender("pthread", || PthreadMutex::new(Plain))),
        only(m, contender("pthread-robust", || PthreadMutex::new(Robust))),
        only(
            m,
            contender("pthread-robust-pi", || PthreadMutex::new(RobustPi)),
        ),
        only(m, contender("posix-sem", PosixSem::new)),
        only(m, contender("sysv-sem", SysvSem::new)),
        only(m, contender("flock", Flock::new)),
        only(m, contender("fcntl", Fcntl::new)),
        only(rw_work, contender("gomutex-shm-rw", GoShmRw::new)),
        only(rw_work, contender("pthread-rw", || PthreadRw::new(false))),
        only(rw_work, contender("pthread-rw-wp", || PthreadRw::new(true))),
        only(floor_work, contender("floor", || Ok(Floor::default()))),
        only(floor_work, contender("atomic", || Ok(AtomicFloor))),
    ];
    let mut rows = Vec::new();
    bench_all(&locks, &cfg, &mut rows);
    let deaths = if cfg.reader_death {
        bench_reader_death(&cfg)
    } else {
        Vec::new()
    };
    let rows = &rows;
    assert!(
        !rows.is_empty() || !deaths.is_empty() || !cfg.filters.is_empty(),
        "no lock could be benchmarked"
    );
    print_table(&cfg, rows);
    print_deaths(&deaths);
    if let Some(path) = &cfg.json {
        write_json(&cfg, rows, &deaths, path).expect("write JSON");
        eprintln!("shm_locks: JSON written to {}", path.display());
    }
}
