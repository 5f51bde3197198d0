//! Kill torture test for `gomutex::shm::ShmRwLock`: worker processes with reader and writer
//! threads are SIGKILLed at random points (reading, writing, queued, inside the lock's own
//! bookkeeping), a supervisor respawns them (and, for half of the kills, calls `force_unlock`
//! after `waitpid`), and the lock must never stall, never lose a committed update, never show
//! a reader a writer's half-done update without telling it, and tell the next writer about
//! every death inside a write section.
//!
//! `GOMUTEX_TORTURE_SECS` sets the duration (default 20). `harness = false`: the supervisor is
//! single-threaded, so forking workers is safe.
//!
//! Protected data: `[a, b, marker, _]`. A write section sets `marker = pid`, does `a += 1`,
//! `b += 1`, adds one to its worker's count of committed writes (`done[w]`, in a side mapping,
//! written only under the write lock) and clears `marker`. A section killed half-way leaves
//! `marker != 0` (and maybe `a != b`, or `a` ahead of `Σ done`): the next writer must get
//! `OwnerDied`, and repairs with `a = b = Σ done`. A writer or reader that gets `Ok` checks
//! `marker == 0 && a == b == Σ done` (`Σ done` cannot change while it holds the lock): a lost
//! update, a torn read or an unreported death would break it.
//!
//! Linux only (fork, futexes in shared memory, `gomutex::shm`): the test is in `linux.rs`;
//! elsewhere this binary runs nothing.

#[cfg(target_os = "linux")]
mod linux;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("shm_rwlock_torture: Linux only, 0 tests");
        libtest_mimic::run(&libtest_mimic::Arguments::from_args(), Vec::new()).exit();
    }
}
