//! Running: the shared region, the children's loops, one run, and the rounds.

use crate::common::{alternate, fmt_opt, fmt_round_trips, go_work, pin_nth, BusyLoops, ShmBox};
use crate::locks::{Count, ProcLock};
use crate::{Config, Workload, MAX_PROCS};
use std::hint::black_box;
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Pads its content to a cache line of its own.
#[repr(C, align(64))]
pub struct Line<T>(pub T);

/// What a child reports back.
#[repr(C)]
pub struct Slot {
    pub ops: AtomicU64,
    pub worst_wait_ns: AtomicU64,
    pub waits_over_1ms: AtomicU64,
    /// CLOCK_MONOTONIC (system-wide) when the child stopped.
    pub end_ns: AtomicU64,
    /// Ops that incremented the counter (all of them but the rw workloads' reads).
    pub writes: AtomicU64,
    /// The longest write op (timed rw runs), as `worst_wait_ns`.
    pub worst_write_ns: AtomicU64,
}

/// The control block and results of one run, shared by parent and children.
#[repr(C)]
pub struct Region {
    pub ready: Line<AtomicU32>,
    /// start (0 → 1), stop (0 → 1): written once each by the parent, read by every child.
    pub start: Line<(AtomicU32, AtomicU32)>,
    /// The data the lock protects: a plain, non-atomic counter, and (rw workloads) its shadow
    /// copy, written by the writers after the counter and compared by the readers.
    pub counter: Line<std::cell::UnsafeCell<[u64; 2]>>,
    pub slots: [Line<Slot>; MAX_PROCS],
}

pub fn mono_ns() -> u64 {
    let mut ts = MaybeUninit::<libc::timespec>::uninit();
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, ts.as_mut_ptr()) };
    assert_eq!(r, 0, "clock_gettime");
    // SAFETY: clock_gettime succeeded and filled `ts`.
    let ts = unsafe { ts.assume_init() };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The child's side of a run. Never returns: exits with `_exit` (0 = ok, 101 = panic) so no
/// destructor of the parent's objects (IPC_RMID, unlink, munmap…) runs in the child.
pub fn child<L: ProcLock>(
    lock: &mut L,
    region: &Region,
    idx: usize,
    work: Workload,
    min_ops: u64,
    timing: bool,
) -> ! {
    let res = panic::catch_unwind(AssertUnwindSafe(|| {
        lock.attach().expect("attach after fork");
        region.ready.0.fetch_add(1, Ordering::SeqCst);
        while region.start.0 .0.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let tally = match work.write_pct() {
            None => mutex_loop(lock, region, work, min_ops, timing),
            Some(pct) => rw_loop(lock, region, idx, pct, min_ops, timing),
        };
        if L::COUNT == Count::Private {
            // SAFETY: the counter is an aligned u64 in the mapping, which outlives the child;
            // in a floor run every process only ever adds to it atomically, here.
            unsafe { AtomicU64::from_ptr(region.counter.0.get().cast::<u64>()) }
                .fetch_add(tally.own, Ordering::Relaxed);
        }
        let slot = &region.slots[idx].0;
        slot.ops.store(tally.ops, Ordering::Relaxed);
        slot.writes.store(tally.writes, Ordering::Relaxed);
        slot.worst_write_ns
            .store(tally.worst_write.as_nanos() as u64, Ordering::Relaxed);
        slot.worst_wait_ns
            .store(tally.worst.as_nanos() as u64, Ordering::Relaxed);
        slot.waits_over_1ms.store(tally.over_1ms, Ordering::Relaxed);
        slot.end_ns.store(mono_ns(), Ordering::Release);
    }));
    // SAFETY: _exit is always safe to call; it skips atexit handlers and destructors on purpose.
    unsafe { libc::_exit(if res.is_ok() { 0 } else { 101 }) }
}

/// What a child's loop counted and timed, for its [`Slot`].
#[derive(Default)]
pub struct Tally {
    pub ops: u64,
    pub writes: u64,
    /// A floor's ops, counted in the process's own memory (added to the counter at the end).
    pub own: u64,
    pub worst: Duration,
    pub worst_write: Duration,
    pub over_1ms: u64,
}

impl Tally {
    /// One more op that ended at `now` and began at `start` (a timed run), a write or not.
    #[inline]
    pub fn time(&mut self, start: Instant, now: Instant, write: bool) {
        let took = now - start;
        self.worst = self.worst.max(took);
        if write {
            self.worst_write = self.worst_write.max(took);
        }
        self.over_1ms += u64::from(took > Duration::from_millis(1));
    }
}

/// The mutex workloads' loop (`none`, `work`): every op takes the lock and adds one, then does
/// the work, if any. A loop of its own, as tight as the one before the readers-writer
/// workloads came: one shared with them (a per-op read-or-write choice and the shadow copy)
/// cost every mutex row ~20 instructions an op, a third of pthread's uncontended lock and
/// unlock (docs/benchmarks.md, "The lock statistics' cost"). Not inlined into the child, so
/// that the compiler inlines the locks into it.
#[inline(never)]
pub fn mutex_loop<L: ProcLock>(
    lock: &L,
    region: &Region,
    work: Workload,
    min_ops: u64,
    timing: bool,
) -> Tally {
    let stop = &region.start.0 .1;
    let counter = region.counter.0.get().cast::<u64>();
    let mut t = Tally::default();
    let mut x = 1i64;
    // One clock read per op, never inside the critical section: an op's interval runs from
    // just before lock() (the previous op's end, or the end of its work) to just after
    // unlock().
    let mut t0 = timing.then(Instant::now);
    loop {
        match L::COUNT {
            Count::Locked => lock.with_lock(|| {
                // SAFETY: the lock under test serialises every access to the counter (that is
                // what the final count checks); the mapping outlives the child.
                unsafe { *counter += 1 };
            }),
            Count::Private => lock.with_lock(|| t.own += 1),
            Count::Atomic => {
                // SAFETY: the counter is an aligned u64 in the mapping, which outlives the
                // child; in an atomic-floor run every process only adds to it atomically.
                _ = unsafe { AtomicU64::from_ptr(counter) }.fetch_add(1, Ordering::Relaxed);
            }
        }
        t.ops += 1;
        if let Some(start) = t0 {
            let now = Instant::now();
            t.time(start, now, true);
            t0 = Some(now);
        }
        if work == Workload::Work {
            x = go_work(x);
            if t0.is_some() {
                t0 = Some(Instant::now());
            }
        }
        if t.ops >= min_ops && stop.load(Ordering::Relaxed) != 0 {
            break;
        }
    }
    black_box(x);
    t.writes = t.ops;
    t
}

/// The readers-writer workloads' loop (`rw1`, `rw10`): `pct` % of the ops, chosen by the
/// process's [`Lcg`], add one to the counter and its shadow copy under the write lock, the
/// others read both under the read lock (and fail the run if they differ). Nothing outside the
/// lock.
#[inline(never)]
pub fn rw_loop<L: ProcLock>(
    lock: &L,
    region: &Region,
    idx: usize,
    pct: u32,
    min_ops: u64,
    timing: bool,
) -> Tally {
    let stop = &region.start.0 .1;
    let counter = region.counter.0.get().cast::<u64>();
    // SAFETY: the second u64 of the same array, in bounds.
    let shadow = unsafe { counter.add(1) };
    let mut lcg = Lcg::new(idx);
    let mut t = Tally::default();
    let mut torn = 0u64;
    // As in `mutex_loop`: one clock read per op, outside the critical section.
    let mut t0 = timing.then(Instant::now);
    loop {
        // Decided before the clock's interval matters (a few ns, the same for every lock).
        let write = lcg.percent() < pct;
        match L::COUNT {
            Count::Locked if write => lock.with_lock(|| {
                // SAFETY: the lock under test serialises every write (what the final count
                // checks); the mapping outlives the child.
                unsafe {
                    *counter += 1;
                    *shadow = *counter;
                }
            }),
            Count::Locked => lock.with_read(|| {
                // SAFETY: under the read lock no writer is inside (what the shadow comparison
                // checks); the mapping outlives the child.
                let (a, b) = unsafe { (*counter, *shadow) };
                torn += u64::from(a != b);
                black_box(a);
            }),
            Count::Private if write => lock.with_lock(|| t.own += 1),
            Count::Private => lock.with_read(|| {
                black_box(t.own);
            }),
            Count::Atomic => {
                // SAFETY: as in `mutex_loop`.
                let c = unsafe { AtomicU64::from_ptr(counter) };
                // A read adds 0, opaquely (an `add 0` the compiler knows may become a fenced
                // load, which would not move the line).
                let by = if write { 1 } else { black_box(0) };
                _ = c.fetch_add(by, Ordering::Relaxed);
            }
        }
        t.ops += 1;
        t.writes += u64::from(write);
        if let Some(start) = t0 {
            let now = Instant::now();
            t.time(start, now, write);
            t0 = Some(now);
        }
        if t.ops >= min_ops && stop.load(Ordering::Relaxed) != 0 {
            break;
        }
    }
    assert_eq!(torn, 0, "a reader saw a half-done write");
    t
}

/// A cheap per-process random sequence (Knuth's MMIX LCG), seeded by the process's index: the
/// same reads and writes, in the same order, for every lock.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn new(idx: usize) -> Self {
        Lcg((idx as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
    /// The next number in 0..100 (from the high bits, the LCG's good ones).
    #[inline]
    pub fn percent(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 32) % 100) as u32
    }
}

/// Forked children of one run; dropping it kills (SIGKILL) and reaps whoever is still there,
/// so a panic in the parent leaves no stray process holding a lock.
pub struct Children {
    pub pids: Vec<libc::pid_t>,
}

impl Children {
    /// Reap exited children without blocking; panic if one failed (after taking every reaped
    /// pid off the list, so `drop` never signals a pid that may have been reused).
    pub fn reap(&mut self, lock: &str) {
        let mut failed = None;
        self.pids.retain(|&pid| {
            let mut status = 0;
            // SAFETY: `pid` is our own child; `status` is a valid out-pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == 0 {
                return true;
            }
            if r != pid {
                failed = Some(format!("waitpid({pid}): {}", io::Error::last_os_error()));
            } else if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                failed = Some(format!("child {pid} failed (wait status {status:#x})"));
            }
            false
        });
        if let Some(msg) = failed {
            panic!("{lock}: {msg}");
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for &pid in &self.pids {
            // SAFETY: `pid` is our own un-reaped child, so the id cannot have been reused.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, ptr::null_mut(), 0);
            }
        }
    }
}

/// What one fixed-duration run measured.
#[derive(Debug)]
pub struct Run {
    pub wall_ns: u64,
    pub total_ops: u64,
    pub per_proc: Vec<u64>,
    /// Longest lock() + critical section + unlock(), clock cost subtracted (timed runs only).
    pub worst_wait_ns: Option<u64>,
    /// Ops whose interval exceeded 1 ms (timed runs only).
    pub waits_over_1ms: Option<u64>,
    /// Ops that wrote (all ops of a mutex workload).
    pub writes: u64,
    /// The longest write op (timed rw runs only), clock cost subtracted.
    pub worst_write_ns: Option<u64>,
}

impl Run {
    pub fn ns_per_op(&self) -> f64 {
        self.wall_ns as f64 / self.total_ops as f64
    }
    pub fn share(&self) -> (f64, f64) {
        let t = self.total_ops as f64;
        let min = *self.per_proc.iter().min().unwrap() as f64;
        let max = *self.per_proc.iter().max().unwrap() as f64;
        (min / t, max / t)
    }
}

/// One line of the table: ns/op and shares from the untimed runs (one per round), the worst
/// wait from the timed one.
pub struct Row {
    pub lock: &'static str,
    pub procs: usize,
    pub work: Workload,
    /// The untimed runs, one per round.
    pub plain: Vec<Run>,
    pub timed: Option<Run>,
    /// `common::line_round_trip_ns` probed before each round of this configuration (shared
    /// by every lock of the configuration: they alternate within a round).
    pub round_trip_ns: Vec<f64>,
}

impl Row {
    /// The untimed run with the median ns/op (the upper one of an even count).
    pub fn median(&self) -> &Run {
        let mut runs: Vec<&Run> = self.plain.iter().collect();
        runs.sort_by(|a, b| a.ns_per_op().total_cmp(&b.ns_per_op()));
        runs[runs.len() / 2]
    }
    pub fn worst_wait_us(&self) -> Option<f64> {
        let ns = self.timed.as_ref()?.worst_wait_ns?;
        Some(ns as f64 / 1e3)
    }
    pub fn worst_write_us(&self) -> Option<f64> {
        let ns = self.timed.as_ref()?.worst_write_ns?;
        Some(ns as f64 / 1e3)
    }
}

/// One run: fork `procs` children on `lock`, let them go for the configured duration, check
/// the counter, and collect the figures.
pub fn run_one<L: ProcLock>(
    name: &'static str,
    lock: &mut L,
    cfg: &Config,
    procs: usize,
    work: Workload,
    timing: bool,
) -> Run {
    // SAFETY: Region is atomics, an UnsafeCell<u64> and padding: all-zero is valid.
    let region = unsafe { ShmBox::<Region>::zeroed() }.expect("mmap");
    io::stdout().flush().ok();
    io::stderr().flush().ok();
    let mut kids = Children { pids: Vec::new() };
    for idx in 0..procs {
        // SAFETY: this process is single-threaded (checked in main), so the child may run
        // arbitrary code; it leaves only through `_exit`.
        match unsafe { libc::fork() } {
            -1 => panic!("fork: {}", io::Error::last_os_error()),
            0 => {
                pin_nth(&cfg.pin, idx);
                child(lock, &region, idx, work, cfg.min_ops, timing)
            }
            pid => kids.pids.push(pid),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while region.ready.0.load(Ordering::SeqCst) < procs as u32 {
        kids.reap(name);
        assert!(
            Instant::now() < deadline,
            "{name}: children never got ready"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let start_ns = mono_ns();
    region.start.0 .0.store(1, Ordering::Release);
    std::thread::sleep(cfg.duration);
    region.start.0 .1.store(1, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kids.pids.is_empty() {
        kids.reap(name);
        assert!(
            Instant::now() < deadline,
            "{name}/{procs}p/{}: children still running 30 s after stop (hung lock?)",
            work.name()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let slots = &region.slots[..procs];
    let per_proc: Vec<u64> = slots
        .iter()
        .map(|s| s.0.ops.load(Ordering::Relaxed))
        .collect();
    let total_ops: u64 = per_proc.iter().sum();
    let writes: u64 = slots
        .iter()
        .map(|s| s.0.writes.load(Ordering::Relaxed))
        .sum();
    // SAFETY: every child has exited, so nobody else touches the counter any more.
    let [counter, shadow] = unsafe { *region.counter.0.get() };
    assert_eq!(
        counter,
        writes,
        "{name}/{procs}p/{}: the lock lost updates",
        work.name()
    );
    if work.write_pct().is_some() && L::COUNT == Count::Locked {
        assert_eq!(shadow, counter, "{name}/{procs}p/{}: shadow", work.name());
    }
    assert!(per_proc.iter().all(|&n| n >= cfg.min_ops.max(1)));
    let end_ns = slots
        .iter()
        .map(|s| s.0.end_ns.load(Ordering::Acquire))
        .max()
        .unwrap();
    let worst = slots
        .iter()
        .map(|s| s.0.worst_wait_ns.load(Ordering::Relaxed))
        .max()
        .unwrap();
    let clock = cfg.clock_overhead.as_nanos() as u64;
    let worst_write = slots
        .iter()
        .map(|s| s.0.worst_write_ns.load(Ordering::Relaxed))
        .max()
        .unwrap();
    Run {
        wall_ns: end_ns.saturating_sub(start_ns),
        total_ops,
        per_proc,
        writes,
        worst_write_ns: (timing && work.write_pct().is_some())
            .then(|| worst_write.saturating_sub(clock)),
        worst_wait_ns: timing.then(|| worst.saturating_sub(clock)),
        waits_over_1ms: timing.then(|| {
            slots
                .iter()
                .map(|s| s.0.waits_over_1ms.load(Ordering::Relaxed))
                .sum()
        }),
    }
}

/// A lock under test: its name and a function that builds a fresh one and runs it once (a
/// fresh lock per run, so a run never inherits another's state, e.g. a poisoned or
/// mis-counted semaphore). `None`: the lock cannot be created here (said on stderr).
pub struct Contender {
    pub name: &'static str,
    pub run: Box<RunFn>,
}

/// `(config, processes, workload, timed)` → one run on a fresh lock.
pub type RunFn = dyn Fn(&Config, usize, Workload, bool) -> Option<Run>;

pub fn contender<L: ProcLock>(
    name: &'static str,
    make: impl Fn() -> io::Result<L> + 'static,
) -> Contender {
    Contender {
        name,
        run: Box::new(move |cfg, procs, work, timing| match make() {
            Ok(mut lock) => Some(run_one(name, &mut lock, cfg, procs, work, timing)),
            Err(e) => {
                eprintln!("{name}: skipped, cannot create the lock: {e}");
                None
            }
        }),
    }
}

/// `c`, run only for the workloads `wanted` accepts (the floors: with work or the rw workloads,
/// without either they measure nothing; the mutexes: the mutex workloads; the rwlocks: the rw
/// workloads).
pub fn only(wanted: fn(Workload) -> bool, c: Contender) -> Contender {
    let run = c.run;
    Contender {
        name: c.name,
        run: Box::new(move |cfg, procs, work, timing| {
            wanted(work)
                .then(|| run(cfg, procs, work, timing))
                .flatten()
        }),
    }
}

/// The mutex workloads.
pub fn mutex_work(w: Workload) -> bool {
    w.write_pct().is_none()
}

/// The readers-writer workloads.
pub fn rw_work(w: Workload) -> bool {
    w.write_pct().is_some()
}

/// Where the floors mean something: with work outside the lock, or the rw workloads.
pub fn floor_work(w: Workload) -> bool {
    w == Workload::Work || rw_work(w)
}

/// Every selected (procs, workload) configuration: `cfg.rounds` untimed runs per lock, the
/// locks alternating within a round (the first one rotating from round to round) so that load
/// on a shared machine hits all of them alike, then one timed run per lock.
pub fn bench_all(locks: &[Contender], cfg: &Config, rows: &mut Vec<Row>) {
    for &procs in &cfg.procs {
        for &work in &cfg.workloads {
            let id = |name: &str| format!("{name}/{procs}p/{}", work.name());
            let chosen: Vec<&Contender> =
                locks.iter().filter(|c| cfg.selected(&id(c.name))).collect();
            let mut plain: Vec<Vec<Run>> = chosen.iter().map(|_| Vec::new()).collect();
            // The probe's threads are joined before any fork.
            let round_trip_ns =
                alternate(cfg.rounds, chosen.len(), !cfg.smoke, cfg.busy, |r, i| {
                    if r > 0 && plain[i].is_empty() {
                        return; // could not be created in round 0
                    }
                    if let Some(run) = (chosen[i].run)(cfg, procs, work, false) {
                        plain[i].push(run);
                    }
                })
                .into_iter()
                .flatten()
                .collect::<Vec<f64>>();
            for (c, plain) in chosen.iter().zip(plain) {
                if plain.is_empty() {
                    continue;
                }
                let timed = if cfg.timing {
                    let _busy = BusyLoops::start(cfg.busy.0, cfg.busy.1).expect("fork a busy loop");
                    (c.run)(cfg, procs, work, true)
                } else {
                    None
                };
                let row = Row {
                    lock: c.name,
                    procs,
                    work,
                    plain,
                    timed,
                    round_trip_ns: round_trip_ns.clone(),
                };
                eprintln!(
                    "{}: {:.1} ns/op median of {} ({}), timed run: {} ns/op, worst wait {} µs{}, \
                     line round trip {} ns",
                    id(c.name),
                    row.median().ns_per_op(),
                    row.plain.len(),
                    row.plain
                        .iter()
                        .map(|r| format!("{:.1}", r.ns_per_op()))
                        .collect::<Vec<_>>()
                        .join(" "),
                    fmt_opt(row.timed.as_ref().map(Run::ns_per_op), "-"),
                    fmt_opt(row.worst_wait_us(), "-"),
                    row.worst_write_us()
                        .map_or_else(String::new, |w| format!(" (a write {w:.1} µs)")),
                    fmt_round_trips(&row.round_trip_ns)
                );
                rows.push(row);
            }
        }
    }
}
