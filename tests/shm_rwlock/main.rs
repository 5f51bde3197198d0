//! Multi-process tests of `gomutex::shm::ShmRwLock`: readers overlap, a writer excludes
//! everyone, writer preference and the batch order across processes, and every kind of death
//! (a reader holding reads, a writer holding the lock, either killed at the protocol's crash
//! points) repaired with exact counts afterwards.
//!
//! `harness = false`, like `shm_process`: the tests run one after another on the main thread,
//! so the process is single-threaded whenever it forks. Linux only: the tests are in
//! `linux.rs` and its modules (`deaths`, `calls`, `downgrade`, sharing `fixture`); elsewhere
//! this binary runs nothing.

#[cfg(target_os = "linux")]
mod linux;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("shm_rwlock: Linux only, 0 tests");
        libtest_mimic::run(&libtest_mimic::Arguments::from_args(), Vec::new()).exit();
    }
}
