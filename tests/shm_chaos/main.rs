//! Kill chaos for `gomutex::shm` (issue conditions of the deadlock under kills: fewer waiter
//! slots than waiters, two-thread workers, random kills and crash points, a stall watchdog).
//!
//! `harness = false`: the supervisor is single-threaded, so forking workers is safe. Knobs and
//! the long-run command are in `linux.rs`'s docs.
//!
//! Linux only (fork, futexes in shared memory, `gomutex::shm`): the code is in `linux.rs`;
//! elsewhere this binary runs nothing.

#[cfg(target_os = "linux")]
mod linux;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("shm_chaos: Linux only, 0 tests");
        libtest_mimic::run(&libtest_mimic::Arguments::from_args(), Vec::new()).exit();
    }
}
