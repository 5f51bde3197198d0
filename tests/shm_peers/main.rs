//! Multi-process tests of `gomutex::shm` with peers that stall, exec, or write nonsense into
//! the region: every call with a deadline returns by it, a wake-up that is not picked up passes
//! on, a full participant table is an error.
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
        eprintln!("shm_peers: Linux only, 0 tests");
        libtest_mimic::run(&libtest_mimic::Arguments::from_args(), Vec::new()).exit();
    }
}
