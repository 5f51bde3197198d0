//! Multi-process tests of `gomutex::shm::ShmMutex::stats` (issue 26, item 3): the counts move
//! as each scenario says.
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
        eprintln!("shm_stats: Linux only, 0 tests");
        libtest_mimic::run(&libtest_mimic::Arguments::from_args(), Vec::new()).exit();
    }
}
