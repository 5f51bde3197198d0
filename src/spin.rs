//! The spin policy: when a contender may spin instead of sleeping, and what a spin round does.
//!
//! Go's `sync.Mutex` spins through `runtime_canSpin`/`runtime_doSpin` (Go 1.19
//! `src/runtime/proc.go`, `sync_runtime_canSpin` and `procyield`): at most [`ROUNDS`] rounds,
//! only on a multi-core machine, and only while this P's run queue is empty: a goroutine does
//! not burn a CPU that another goroutine is waiting for. Each of Go's rounds is 30 `PAUSE`s.
//!
//! Threads have no run queue to look at. The analogue here ([`spin_round`]): a newcomer starts
//! each round by offering its CPU (`sched_yield`), which lets a thread waiting for that CPU run
//! (often the holder, or a thread with work to do) and otherwise returns at once; a contender
//! that owns `WOKEN` (a woken waiter, or a newcomer that announced itself) spins Go's round
//! unchanged. Under `--cfg gomutex_loom` a contender spins [`LOOM_ROUNDS`] round of one yield,
//! to keep the state space small.
//!
//! Every switch between the real policy and the loom one is in this file, so the algorithm
//! ([`crate::algo`]) reads without `cfg`s.

use std::time::Duration;

/// Go's `active_spin`: the most spin rounds a contender makes before it sleeps (per wake-up).
#[cfg_attr(gomutex_loom, allow(dead_code))]
pub(crate) const ROUNDS: u32 = 4;
/// Go's `active_spin_cnt`: `PAUSE` hints in a round of a contender that owns `WOKEN`
/// (`procyield(30)`).
#[cfg_attr(gomutex_loom, allow(dead_code))]
pub(crate) const HINTS_PER_ROUND: u32 = 30;
/// `PAUSE` hints after the yield in a round of any other contender: an uncontended yield plus
/// these is about Go's round in length, so the lock word is read no more often than Go reads it.
#[cfg_attr(gomutex_loom, allow(dead_code))]
pub(crate) const HINTS_AFTER_YIELD: u32 = 10;
/// Spin rounds per wake-up under loom.
#[cfg_attr(not(gomutex_loom), allow(dead_code))]
pub(crate) const LOOM_ROUNDS: u32 = 1;
/// How often a timed-out waiter that may not leave the waiter count yet looks again whether it
/// may (it is waiting for a token that is a few instructions from being sent; see
/// `algo::wait_for_token_or_leave`).
pub(crate) const TOKEN_RECHECK: Duration = Duration::from_micros(50);

/// Should a contender spin in round `iter` (counted from 0 since it last woke)? For a lock
/// whose contenders may be other processes (`across_processes`), "multi-core" means the
/// machine's CPUs, otherwise this process's ([`multicore`]).
#[inline]
pub(crate) fn can_spin(iter: u32, across_processes: bool) -> bool {
    #[cfg(gomutex_loom)]
    {
        let _ = across_processes;
        iter < LOOM_ROUNDS
    }
    #[cfg(not(gomutex_loom))]
    {
        // The coherence model stands for a many-core machine, whatever this one has.
        iter < ROUNDS && (cfg!(gomutex_coherence) || multicore(across_processes))
    }
}

/// One spin round of a contender that `owns_woken` (`WOKEN` is its own: a waiter an unlock
/// woke, or a newcomer that announced itself) or not; one yield to loom's scheduler under loom.
///
/// Go's round is `procyield(30)`, 30 blind `PAUSE`s, made only while no other goroutine waits
/// for the CPU. A newcomer's round here is a `sched_yield` and then [`HINTS_AFTER_YIELD`]
/// `PAUSE`s: where threads outnumber the CPUs the yield hands the CPU to a thread that can use
/// it, and where they do not it costs what Go's round does.
///
/// The owner of `WOKEN` keeps Go's [`HINTS_PER_ROUND`] `PAUSE`s and never gives its CPU away:
/// while it owns `WOKEN` unlocks wake nobody, and every waiter that has slept is such an owner
/// when it spins, the contender Go's 1 ms rule protects, for which a yield on a loaded machine
/// can cost a whole time slice.
///
/// No round touches the lock word: a spinner that polls it pulls the cache line away from the
/// holder, which then pays a transfer on its unlock and on its next lock. The caller reads the
/// word once after the round. (What these rules were measured against, and the variants tried
/// under load: `docs/benchmarks.md`, "The spin round".)
#[inline]
pub(crate) fn spin_round(owns_woken: bool) {
    #[cfg(gomutex_loom)]
    {
        let _ = owns_woken;
        crate::sync::spin_loop(); // loom's is a yield
    }
    #[cfg(not(gomutex_loom))]
    {
        let hints = if owns_woken {
            HINTS_PER_ROUND
        } else {
            crate::sync::yield_now();
            HINTS_AFTER_YIELD
        };
        for _ in 0..hints {
            crate::sync::spin_loop();
        }
    }
}

/// Does this process (`machine`: this machine) have more than one CPU to run on? Read once
/// and cached, like Go's `ncpu` (`runtime_canSpin`'s `ncpu > 1`).
#[cfg(not(gomutex_loom))]
#[inline]
pub(crate) fn multicore(machine: bool) -> bool {
    use core::sync::atomic::{AtomicU8, Ordering::Relaxed};
    /// 0 = not yet known; else `KNOWN`, plus `PROCESS` and `MACHINE` where multi-core.
    static CORES: AtomicU8 = AtomicU8::new(0);
    const KNOWN: u8 = 1;
    const PROCESS: u8 = 2;
    const MACHINE: u8 = 4;
    let mut c = CORES.load(Relaxed);
    if c == 0 {
        let process = process_cpus();
        c = KNOWN
            | if process > 1 { PROCESS } else { 0 }
            | if machine_cpus(process) > 1 {
                MACHINE
            } else {
                0
            };
        CORES.store(c, Relaxed);
    }
    let bit = if machine { MACHINE } else { PROCESS };
    c & bit != 0
}

/// How many CPUs the machine has online (at least `process`, this process's count from
/// [`process_cpus`]), for locks shared between processes: the other
/// participants need not share this process's affinity mask (a prefork worker pinned to one
/// CPU, as nginx's `worker_cpu_affinity` pins them, has peers on the others, and spinning pays
/// off there as it does unpinned; `docs/benchmarks.md`, "Across processes: placement and the
/// spin policy"). Where every participant shares one CPU (a one-CPU cpuset) a contender
/// still makes its rounds before it sleeps: a newcomer's rounds yield the CPU
/// ([`spin_round`]), so the holder gets to run, but those of the `WOKEN` owner (Go's `PAUSE`s)
/// are spent for nothing.
#[cfg(not(gomutex_loom))]
pub(crate) fn machine_cpus(process: usize) -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        usize::try_from(online).unwrap_or(0).max(process)
    }
    #[cfg(not(target_os = "linux"))]
    process
}

/// How many CPUs the process's threads may run on: Go's `ncpu`, which Go reads from the
/// process's affinity mask at start-up (Go 1.19 `src/runtime/os_linux.go`, `getproccount`).
///
/// A library cannot read it at start-up, and on Linux `std::thread::available_parallelism`
/// answers for the *calling thread* (`sched_getaffinity(0)`, plus cgroup quotas). Asked first
/// from a thread pinned to one CPU, as in a thread-per-core server, it says 1, and the cached
/// answer would turn spinning off for the whole process (`docs/benchmarks.md`, "`MutexPinned`
/// and the CPU count"). So on Linux the main thread's mask counts as well
/// (`sched_getaffinity(getpid())`): the process's CPUs unless the program pinned its main
/// thread too. A process confined to one CPU as a whole (`taskset -c 0`) still does not spin.
#[cfg(not(gomutex_loom))]
pub(crate) fn process_cpus() -> usize {
    let this_thread = std::thread::available_parallelism().map_or(1, |n| n.get());
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `set` is a plain bit set the call fills in; the size passed is its size.
        // getpid() is the main thread's thread id, so this reads the main thread's mask.
        let main_thread = unsafe {
            let mut set: libc::cpu_set_t = core::mem::zeroed();
            if libc::sched_getaffinity(libc::getpid(), core::mem::size_of_val(&set), &mut set) == 0
            {
                usize::try_from(libc::CPU_COUNT(&set)).unwrap_or(0)
            } else {
                0
            }
        };
        this_thread.max(main_thread)
    }
    #[cfg(not(target_os = "linux"))]
    this_thread
}

#[cfg(all(test, target_os = "linux", not(gomutex_loom)))]
mod tests {
    use crate::cpus;

    /// Runs `f` on a new thread pinned to one CPU (the first it may use) and returns its result.
    fn on_pinned_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        std::thread::spawn(|| {
            let first = cpus::allowed_cpus()[0];
            cpus::pin_to(Some(first));
            f()
        })
        .join()
        .unwrap()
    }

    /// A thread pinned to one CPU still sees the process's CPUs. std's answer from that thread
    /// is 1 (its affinity mask), which, cached as the process's, turned spinning off everywhere.
    #[test]
    fn pinned_thread_counts_the_process_cpus() {
        let unpinned = super::process_cpus();
        let (std_says, we_say) = on_pinned_thread(|| {
            let std_says = std::thread::available_parallelism().map_or(1, |n| n.get());
            (std_says, super::process_cpus())
        });
        assert_eq!(
            std_says, 1,
            "the pinned thread should see one CPU of its own"
        );
        assert_eq!(
            we_say, unpinned,
            "a pinned thread counts the process's CPUs"
        );
    }

    /// The machine's count, for shared-memory locks, is the online CPUs, whatever the calling
    /// thread's mask, and never below the process's.
    #[test]
    fn machine_cpus_are_the_online_cpus() {
        let machine = || super::machine_cpus(super::process_cpus());
        // SAFETY: sysconf has no preconditions.
        let online = usize::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).unwrap();
        assert_eq!(machine(), online.max(super::process_cpus()));
        assert_eq!(on_pinned_thread(machine), machine());
    }
}
