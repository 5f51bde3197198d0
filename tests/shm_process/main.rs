//! Multi-process tests of `gomutex::shm`.
//!
//! `harness = false`: this binary's harness is `common::procs::run_cases` (libtest-mimic, so
//! `--list`, filters, `--exact` and cargo-nextest work as with libtest), which runs the tests
//! one after another on the main thread, so the process is single-threaded whenever it forks
//! (threads used by a test are joined before the next fork). Children made with `fork` run
//! ordinary Rust code and leave with `_exit`. Unrelated processes are made by re-executing this
//! binary with `--shm-child ...`.
//!
//! Run one test with `cargo test --test shm_process -- <name> --exact`.
//!
//! Linux only (fork, futexes in shared memory, `gomutex::shm`): `linux.rs` holds the runner and
//! the shared helpers, its modules the tests by topic (`sharing`, `named`, `attach`, `deaths`,
//! `crash_points`, `pid_reuse`); elsewhere this binary runs nothing.

#[cfg(target_os = "linux")]
mod linux;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("shm_process: Linux only, 0 tests");
        libtest_mimic::run(&libtest_mimic::Arguments::from_args(), Vec::new()).exit();
    }
}
