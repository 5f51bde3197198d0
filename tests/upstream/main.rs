//! Multi-process tests of `gomutex::upstream::UpstreamZone`: nginx's sequence and exact
//! shares across processes, `max_conns` held across processes, passive health checks seen by
//! every process, slots inherited across `fork`, every death at the zone's crash points
//! repaired with exact counts, and a kill torture (`GOMUTEX_TORTURE_SECS`, default 20:
//! SIGKILLs while picking, holding slots and reporting failures; counts exact afterwards, no
//! stall).
//!
//! `harness = false`: the cases run one after another on the main thread, so the process is
//! single-threaded whenever it forks. Linux only: the tests are in `linux.rs`; elsewhere this
//! binary runs nothing.

#[cfg(target_os = "linux")]
mod linux;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("upstream: Linux only, 0 tests");
        libtest_mimic::run(&libtest_mimic::Arguments::from_args(), Vec::new()).exit();
    }
}
