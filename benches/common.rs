//! What the bench binaries share: the in-process locks behind one trait, Go's `MutexWork`
//! body, the steady loop, a zero-filled `MAP_SHARED | MAP_ANONYMOUS` mapping, the command line
//! and the alternating rounds ([`Args`], [`alternate`]), and small helpers. Each binary
//! includes this file with `mod common;` and uses a part of it.

#![allow(dead_code)] // every bench binary uses a different part of this module

use std::hint::black_box;
use std::io;
use std::marker::PhantomData;
use std::mem;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// The in-process locks under test.

/// Lock, run `f` on the guarded data, unlock: `gomutex::Mutex`, `std::sync::Mutex` and
/// `parking_lot::Mutex` behind one interface, so every workload is written once.
pub trait Lock<T>: Send + Sync {
    /// A new, unlocked lock holding `value`.
    fn new(value: T) -> Self;
    /// Lock, run `f`, unlock.
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R;
}

impl<T: Send> Lock<T> for gomutex::Mutex<T> {
    fn new(value: T) -> Self {
        gomutex::Mutex::new(value)
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.lock().unwrap())
    }
}

impl<T: Send> Lock<T> for std::sync::Mutex<T> {
    fn new(value: T) -> Self {
        std::sync::Mutex::new(value)
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.lock().unwrap())
    }
}

impl<T: Send> Lock<T> for parking_lot::Mutex<T> {
    fn new(value: T) -> Self {
        parking_lot::Mutex::new(value)
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.lock())
    }
}

/// Aligns (and so pads) its content to 128 bytes: a lock with a cache-line pair of its own
/// (Go's `PaddedMutex` in `BenchmarkMutexUncontended`).
#[repr(align(128))]
pub struct Padded<L>(pub L);

// ---------------------------------------------------------------------------------------------
// Go's work outside the lock.
//
// Both work functions are `#[inline(never)]`: every lock's loop calls the same machine code at
// the same address. Inlined, each lock's copy of a work loop landed wherever the linker put that
// lock's code, and on this project's AMD EPYC machines a tight loop that straddles a 64-byte
// boundary ran ~1.6× slower than one that does not: `MutexSpin`'s 17-byte `stride4_increment`
// loop made whichever lock drew a straddling copy 1.6–2.5× slower than the others, and which
// lock that was changed with unrelated edits to the bench (perf put 98 % of the samples on the
// loop, 0.03 % in the lock). `go_work` the same way: one build ran `MutexWork` at 28 ns/op with
// gomutex's and parking_lot's copies and 36 with std's; with the one shared copy all three run
// at 36. The call costs ~1 ns against 70 ns–1.5 µs of work.

/// Go's `MutexWork` body (Go 1.19 `src/sync/mutex_test.go`, `benchmarkMutex`):
/// `for i := 0; i < 100; i++ { foo *= 2; foo /= 2 }` on Go's `int`.
///
/// One `black_box` per step keeps LLVM from folding the loop (which Go's compiler does not);
/// it spills `foo` to the stack each step, a store-forwarding round trip Go does not pay, so
/// the loop costs somewhat more than Go's. Not inlined (see above).
#[inline(never)]
#[allow(clippy::disallowed_names)] // `foo` is Go's name
pub fn go_work(mut foo: i64) -> i64 {
    for _ in 0..100 {
        foo = black_box(foo) * 2;
        foo /= 2;
    }
    foo
}

/// A per-thread array of `len` u64s, pre-touched so page faults are not timed.
pub fn local_array(len: usize) -> Box<[u64]> {
    let mut data = vec![0u64; len].into_boxed_slice();
    stride4_increment(&mut data);
    data
}

/// `for i := 0; i < len(data); i += 4 { data[i]++ }` (`MutexNoSpin`, `MutexSpin`), kept
/// observable. Not inlined (see above).
#[inline(never)]
pub fn stride4_increment(data: &mut [u64]) {
    for x in data.iter_mut().step_by(4) {
        *x += 1;
    }
    black_box(data);
}

// ---------------------------------------------------------------------------------------------
// Shared memory for forked processes.

/// The tests' anonymous `MAP_SHARED` mapping (on `gomutex::shm::Mapping`).
#[path = "../tests/common/anon.rs"]
mod anon;

/// One `T` in its own `mmap(MAP_SHARED | MAP_ANONYMOUS)` mapping, zero-filled, so processes
/// forked after creating it see the same memory (and the kernel keys futexes on it by shmem
/// page, not by address space). Unmapped when dropped.
pub struct ShmBox<T> {
    map: anon::AnonShared,
    /// As a `NonNull<T>`: neither `Send` nor `Sync` whatever `T` is.
    _t: PhantomData<NonNull<T>>,
}

impl<T> ShmBox<T> {
    /// A zero-filled shared `T`.
    ///
    /// # Safety
    /// All-zero bytes must be a valid `T` (atomics, integers, C structs the caller initialises).
    pub unsafe fn zeroed() -> io::Result<Self> {
        assert!(
            mem::align_of::<T>() <= 4096,
            "mmap gives page alignment only"
        );
        Ok(Self {
            map: anon::AnonShared::new(mem::size_of::<T>())?,
            _t: PhantomData,
        })
    }

    /// The mapping's address (for C APIs and for writes through `UnsafeCell`-free types).
    pub fn as_ptr(&self) -> *mut T {
        self.map.as_ptr().cast()
    }
}

impl<T> std::ops::Deref for ShmBox<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the page-aligned mapping holds `size_of::<T>()` bytes and is live while
        // `self` is, zeroed() required zero to be a valid T, and we only hand out shared
        // references (mutation goes through atomics/UnsafeCell or through raw pointers from
        // `as_ptr`).
        unsafe { &*self.as_ptr() }
    }
}

// ---------------------------------------------------------------------------------------------
// Controlled load: busy-looping processes beside a round.

/// `n` processes that do nothing but loop (a shell's `while :; do :; done`), forked when made
/// and killed (SIGKILL) and reaped when dropped: the controlled load of the benches' loaded
/// mode. Processes, not threads of the benchmark, so they compete for the CPUs as another
/// program would, not as more threads of the process under test. Each dies with its parent
/// (`PR_SET_PDEATHSIG`), so an aborted bench leaves none behind.
///
/// With `own_session` each loop calls `setsid()` first: under autogroup scheduling (Linux's
/// `sched_autogroup_enabled`, see sched(7)) it is then a scheduling group of its own, as a
/// program started from another terminal or service is, and takes about a whole CPU whatever
/// the bench's thread count; without it the loop shares the bench's group, as one started as a
/// background job of the same shell does, and gets a thread's share of it.
pub struct BusyLoops {
    pids: Vec<libc::pid_t>,
}

impl BusyLoops {
    /// Fork `n` busy loops (none for 0). Call it while this process runs one thread only
    /// (between runs): the children run nothing but a loop, but a fork beside running threads
    /// would still copy their state mid-operation.
    pub fn start(n: usize, own_session: bool) -> io::Result<BusyLoops> {
        let mut loops = BusyLoops { pids: Vec::new() };
        for _ in 0..n {
            // SAFETY: the child only calls async-signal-safe functions (prctl, setsid,
            // getppid, _exit) and then loops; it never returns into the parent's code.
            match unsafe { libc::fork() } {
                -1 => return Err(io::Error::last_os_error()),
                0 => busy_child(own_session),
                pid => loops.pids.push(pid),
            }
        }
        Ok(loops)
    }
}

/// A busy loop's body (the child of a fork in [`BusyLoops::start`]). Never returns.
fn busy_child(own_session: bool) -> ! {
    // SAFETY: prctl, getppid, setsid and _exit are async-signal-safe and take no pointers.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if libc::getppid() == 1 {
            libc::_exit(0); // the parent died before the prctl took effect
        }
        if own_session {
            libc::setsid();
        }
    }
    let mut x = 0u64;
    loop {
        x = black_box(x.wrapping_add(1));
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for &pid in &self.pids {
            // SAFETY: `pid` is our own un-reaped child, so the id cannot have been reused.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// The loaded mode's settings from `$<prefix>_BUSY` (busy loops beside every round, default 0)
/// and `$<prefix>_BUSY_SESSION` (`own`: each loop in a session of its own; default: the
/// bench's; see [`BusyLoops`]).
pub fn busy_from_env(prefix: &str) -> (usize, bool) {
    let n = env_or(&format!("{prefix}_BUSY"), 0usize);
    let own = std::env::var(format!("{prefix}_BUSY_SESSION")).is_ok_and(|v| v == "own");
    (n, own)
}

/// How the benches print the load: `idle`, or `N busy loop(s)` and where they run.
pub fn fmt_busy(n: usize, own_session: bool) -> String {
    match (n, own_session) {
        (0, _) => "idle (no busy loop started)".to_owned(),
        (n, own) => format!(
            "{n} busy-looping process{} beside every round ({})",
            if n == 1 { "" } else { "es" },
            if own {
                "each in a session and scheduling group of its own"
            } else {
                "in the bench's session and scheduling group"
            }
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Where the two CPUs are.

/// Pinning helpers shared with the tests and examples.
use gomutex::__cpus as cpus;

/// The CPUs this thread may run on (empty where pinning is not supported), to hand to
/// [`pin_nth`] from the bench threads.
pub fn allowed_cpus() -> Vec<usize> {
    cpus::allowed_cpus()
}

/// Pin the calling thread to the `i`-th of `cpus` (round robin); nothing if `cpus` is empty.
pub fn pin_nth(cpus: &[usize], i: usize) {
    if !cpus.is_empty() {
        cpus::pin_to(Some(cpus[i % cpus.len()]));
    }
}

/// How far apart the machine's first two CPUs are, as the median round trip in ns of a value
/// bounced between two threads pinned to them (a `Release` store answered by a store the other
/// side spins for, 3 × 2000 round trips, a few ms in all). `None` with fewer than two CPUs or
/// off Linux (no pinning).
///
/// Every contended figure depends on it, and on a VM it is not fixed: the host may run the two
/// vCPUs on one core's siblings or on different dies, and change that within seconds. On
/// 2026-11-30 this machine's round trip moved between 34–65 ns and 318–384 ns, and ShmMutex /
/// pthread with 2 processes and Go's `MutexWork` loop moved with it (1.16–1.61 near, 0.59–0.77
/// far). The benches probe it before every round and print it beside their figures.
pub fn line_round_trip_ns() -> Option<f64> {
    use std::sync::atomic::{
        AtomicU64,
        Ordering::{Acquire, Release},
    };
    let (a, b) = cpus::two_cpus()?;
    const TRIPS: u64 = 2000;
    let ball = Padded(AtomicU64::new(0));
    let ball = &ball.0;
    let mut samples = Vec::new();
    for _ in 0..3 {
        ball.store(0, Release);
        let ns = std::thread::scope(|s| {
            s.spawn(|| {
                cpus::pin_to(Some(b));
                for i in 0..TRIPS {
                    while ball.load(Acquire) != 2 * i + 1 {
                        std::hint::spin_loop();
                    }
                    ball.store(2 * i + 2, Release);
                }
            });
            s.spawn(|| {
                cpus::pin_to(Some(a));
                let start = std::time::Instant::now();
                for i in 0..TRIPS {
                    ball.store(2 * i + 1, Release);
                    while ball.load(Acquire) != 2 * i + 2 {
                        std::hint::spin_loop();
                    }
                }
                start.elapsed().as_nanos() as f64 / TRIPS as f64
            })
            .join()
            .expect("round-trip probe panicked")
        });
        samples.push(ns);
    }
    Some(median(&samples))
}

/// `v` with one decimal, or `none` when there is no value.
pub fn fmt_opt(v: Option<f64>, none: &str) -> String {
    v.map_or_else(|| none.to_owned(), |v| format!("{v:.1}"))
}

/// Round-trip probes (see [`line_round_trip_ns`]) as `min–max` ns, one figure when they agree,
/// `–` when there were none (test mode, one CPU): how the benches print them.
pub fn fmt_round_trips(v: &[f64]) -> String {
    let min = v.iter().copied().reduce(f64::min);
    let max = v.iter().copied().reduce(f64::max);
    match (min, max) {
        (Some(a), Some(b)) if b - a < 0.5 => format!("{a:.0}"),
        (Some(a), Some(b)) => format!("{a:.0}–{b:.0}"),
        _ => "–".to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// The steady loop (steady.rs, rwlock.rs).

/// Runs `threads` threads, each with its own state from `make_state(index)` (built before the
/// clock starts), looping `op` until the stop flag (set `duration` after the start) and at
/// least `min_ops` times. Returns the wall time (the first thread's first op to the last
/// thread's last op) and each thread's (ops, state).
///
/// Each thread reads the clock itself, after the barrier: the main thread may get its CPU back
/// only after the workers have run for a while (20 runnable threads on 2 CPUs), and a start
/// taken there once made 10 ms test runs of `MutexWorkSlack` come out at 1.4 ns/op, below what
/// the work alone allows.
pub fn steady<S, MS, OP>(
    threads: usize,
    duration: Duration,
    min_ops: u64,
    make_state: MS,
    op: OP,
) -> (Duration, Vec<(u64, S)>)
where
    S: Send,
    MS: Fn(usize) -> S + Sync,
    OP: Fn(&mut S) + Sync,
{
    let stop = Padded(AtomicBool::new(false));
    let barrier = Barrier::new(threads + 1);
    let (make_state, op, stop, barrier) = (&make_state, &op, &stop.0, &barrier);
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                s.spawn(move || {
                    let mut state = make_state(i);
                    barrier.wait();
                    let start = Instant::now();
                    let mut ops = 0u64;
                    while ops < min_ops || !stop.load(Ordering::Relaxed) {
                        op(&mut state);
                        ops += 1;
                    }
                    (start, Instant::now(), ops, state)
                })
            })
            .collect();
        barrier.wait();
        thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let mut span: Option<(Instant, Instant)> = None;
        let results = handles
            .into_iter()
            .map(|h| {
                let (t0, t1, ops, state) = h.join().expect("bench thread panicked");
                span = Some(span.map_or((t0, t1), |(a, b)| (a.min(t0), b.max(t1))));
                (ops, state)
            })
            .collect();
        let (first, last) = span.expect("at least one thread");
        (last - first, results)
    })
}

// ---------------------------------------------------------------------------------------------
// The command line and the rounds, as every bench reads and runs them.

/// A bench binary's command line: `--bench` (which `cargo bench` passes and `cargo test
/// --benches` does not: without it the binary runs its short test mode), filters (every
/// argument that is not a flag), and the other flags, for the binary to apply.
pub struct Args {
    /// `--bench` was given: the full bench. Without it: the test mode.
    pub bench: bool,
    /// Which cases to run, as [`selected`] reads them; none: every case.
    pub filters: Vec<String>,
    /// Every other flag in order (the binary's own, and libtest's that cargo may pass on, for
    /// it to ignore), with the argument after it for the flags that take one.
    pub flags: Vec<(String, Option<String>)>,
}

impl Args {
    /// This process's arguments; the flags in `with_value` take the argument after them
    /// (panics if there is none).
    pub fn parse(with_value: &[&str]) -> Args {
        let mut args = Args {
            bench: false,
            filters: Vec::new(),
            flags: Vec::new(),
        };
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            if a == "--bench" {
                args.bench = true;
            } else if with_value.contains(&a.as_str()) {
                let v = it.next().unwrap_or_else(|| panic!("{a} needs a value"));
                args.flags.push((a, Some(v)));
            } else if a.starts_with('-') {
                args.flags.push((a, None));
            } else {
                args.filters.push(a);
            }
        }
        args
    }

    /// This process's arguments, for a binary without flags of its own.
    pub fn get() -> Args {
        Args::parse(&[])
    }
}

/// Whether the case `name` runs: no filters, or one that is a substring of `name`, or `=NAME`
/// with exactly `name`.
pub fn selected(filters: &[String], name: &str) -> bool {
    filters.is_empty()
        || filters.iter().any(|f| match f.strip_prefix('=') {
            Some(exact) => name == exact,
            None => name.contains(f.as_str()),
        })
}

/// The benches' rounds: `rounds` times, probe where the CPUs are ([`line_round_trip_ns`],
/// when `probe`: it spins two pinned threads for a few ms, so only where figures count), start
/// `busy` loops ([`BusyLoops`], after the probe, which measures placement, not load; killed
/// when the round ends), and run `run(round, entry)` for every entry once, the first entry
/// rotating from round to round, so that load on a shared machine hits all of them alike.
/// Returns each round's round trip (`None`: not probed, or the probe was preempted), so a
/// round's figures can be told near or far. Call it with one thread running (the busy loops
/// fork).
pub fn alternate(
    rounds: usize,
    entries: usize,
    probe: bool,
    busy: (usize, bool),
    mut run: impl FnMut(usize, usize),
) -> Vec<Option<f64>> {
    let mut round_trip_ns = Vec::new();
    for r in 0..rounds {
        round_trip_ns.push(if probe { line_round_trip_ns() } else { None });
        let _busy = BusyLoops::start(busy.0, busy.1).expect("fork a busy loop");
        for k in 0..entries {
            run(r, (r + k) % entries);
        }
    }
    round_trip_ns
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

/// `$name` parsed as a `T`, or `default` when unset, empty or unparsable.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `v` (mean of the middle two for an even count); NaN when empty.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median of the per-round ratios `a[r] / b[r]` (samples in round order, one per round
/// each). Taken round by round, a ratio compares runs made minutes apart at most once: on a VM
/// whose vCPU placement flips within a sitting (and every contended figure with it), the ratio
/// of two medians can compare one lock's near-placement runs with another's far ones.
pub fn paired_ratio(a: &[f64], b: &[f64]) -> f64 {
    let ratios: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    median(&ratios)
}

/// Cargo's target directory as the bench sees it: `$CARGO_TARGET_DIR`, else `target` (cargo
/// runs bench binaries in the package root, `benches/`).
pub fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| "target".into(), Into::into)
}

/// Threads the machine can run at once (Go's GOMAXPROCS).
pub fn procs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
