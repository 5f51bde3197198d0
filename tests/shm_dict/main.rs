//! Multi-process tests of `gomutex::dict::ShmDict`: a death at every crash point of every
//! operation, readers sharing a shard (and dying, or meeting a dead writer's update), passes
//! over the whole dictionary stopped and killed between two slices (`passes.rs`), and a kill
//! torture of writers and readers against a reference model.
//!
//! `harness = false`: the cases run one after another on the main thread, so the process is
//! single-threaded whenever it forks. Run one with `cargo test --test shm_dict -- <name> --exact`.
//! `GOMUTEX_DICT_TORTURE_SECS` sets the torture's length (default 12 s); `corrupt.rs` says how
//! to repeat a round of the corruption fuzz.
//!
//! Linux only: the tests are in `linux.rs` (the crash points), `torture.rs`, `passes.rs`,
//! `readers.rs`, `limit_req.rs` and `corrupt.rs`; elsewhere this binary runs nothing.

#[cfg(target_os = "linux")]
mod corrupt;
#[cfg(target_os = "linux")]
mod limit_req;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod passes;
#[cfg(all(target_os = "linux", feature = "__crash-points"))]
mod readers;
#[cfg(target_os = "linux")]
mod torture;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("shm_dict: Linux only, 0 tests");
        libtest_mimic::run(&libtest_mimic::Arguments::from_args(), Vec::new()).exit();
    }
}
