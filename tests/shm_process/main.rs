//! Multi-process tests of `gomutex::shm`.
//!
//! `harness = false`: this binary runs its tests one after another on its main thread, so the
//! process is single-threaded whenever it forks (threads used by a test are joined before the
//! next fork). Children made with `fork` run ordinary Rust code and leave with `_exit`.
//! Unrelated processes are made by re-executing this binary with `--shm-child ...`.
//!
//! Run one test with `cargo test --test shm_process -- <name substring>`.
//!
//! Linux only (fork, futexes in shared memory, `gomutex::shm`): the tests are in `linux.rs`;
//! elsewhere this binary runs nothing.

#[cfg(target_os = "linux")]
mod linux;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    println!("shm_process: Linux only, 0 tests");
}
