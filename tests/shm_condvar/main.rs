//! Multi-process tests of `gomutex::shm::ShmCondvar`: a bounded producer/consumer queue across
//! processes with an exact item count, notifications racing waits, owner death reported
//! through `wait`, and SIGKILLs of waiters and notifiers under load.
//!
//! `harness = false`, like `shm_process`. Linux only (fork, futexes in shared memory,
//! `gomutex::shm`): the tests are in `linux.rs`; elsewhere this binary runs nothing.

#[cfg(target_os = "linux")]
mod linux;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("shm_condvar: Linux only, 0 tests");
        libtest_mimic::run(&libtest_mimic::Arguments::from_args(), Vec::new()).exit();
    }
}
