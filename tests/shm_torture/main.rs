//! Kill torture test for `gomutex::shm`: workers are SIGKILLed at random points (holding,
//! waiting, spinning, inside lock/unlock), a supervisor respawns them, and the lock must
//! never deadlock, never lose a completed update, and tell the next owner about every death.
//!
//! `GOMUTEX_TORTURE_SECS` sets the duration (default 20). `harness = false`: the supervisor is
//! single-threaded, so forking workers is safe.
//!
//! Protected data: `[a, b, marker, _]`. A critical section sets `marker = pid`, does
//! `a += 1; b += 1`, adds one to its worker's count of completed sections (`done[w]`, in a
//! side mapping, written only under the lock) and clears `marker`. A section killed half-way
//! leaves `marker != 0` (and maybe `a != b`): the next owner must get `OwnerDied`, and repairs
//! with `a = b = Σ done`. An owner that gets `Ok` checks `marker == 0 && a == b == Σ done`:
//! a lost update or an unreported death would break it.
//!
//! Linux only (fork, futexes in shared memory, `gomutex::shm`): the tests are in `linux.rs`;
//! elsewhere this binary runs nothing.

#[cfg(target_os = "linux")]
mod linux;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("shm_torture: Linux only, 0 tests");
        libtest_mimic::run(&libtest_mimic::Arguments::from_args(), Vec::new()).exit();
    }
}
