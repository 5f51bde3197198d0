// Without the test-only `__crash-points` feature (a build of the published crate) the cases
// that arm crash points are compiled out: their helpers are then unused.
#![cfg_attr(
    not(feature = "__crash-points"),
    allow(dead_code, unused_imports, unused_variables, unused_mut)
)]
use gomutex::shm::{ShmMutex, ShmMutexGuard, ShmSafe};
use std::time::Duration;

#[path = "../common/mod.rs"]
mod common;
use common::anon::AnonShared;
use common::procs::{self, fork};
use common::shmtest::ok;
#[path = "attach.rs"]
mod attach;
#[path = "crash_points.rs"]
mod crash_points;
#[path = "deaths.rs"]
mod deaths;
#[path = "named.rs"]
mod named;
#[path = "pid_reuse.rs"]
mod pid_reuse;
#[path = "sharing.rs"]
mod sharing;

// ------------------------------------------------------------------ helpers

use std::sync::atomic::Ordering::SeqCst;

/// Fork a child that takes `m`, applies `update` to the value (e.g. half of a two-word update),
/// keeps the lock (through its guard, or a leaked one if `leak`) and sleeps until killed.
/// Returns its pid once it holds the lock.
fn fork_holder<T: ShmSafe>(m: &ShmMutex<T>, leak: bool, update: impl FnOnce(&mut T)) -> i32 {
    let flags = AnonShared::counters(1);
    let pid = fork(|| {
        let mut g = ok(m.lock());
        update(&mut g);
        let _kept = if leak {
            ShmMutexGuard::leak(g);
            None
        } else {
            Some(g)
        };
        flags.at(0).store(1, SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    while flags.at(0).load(SeqCst) == 0 {
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(m.diagnostics().owner_pid, Some(pid as u32));
    pid
}

// ------------------------------------------------------------------ runner

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--shm-child") {
        std::process::exit(named::child_main(&args[1..]));
    }
    let tests: &[(&str, fn())] = &[
        ("exclusion_8_processes", sharing::exclusion_8_processes),
        ("threads_and_processes", sharing::threads_and_processes),
        ("fairness_two_processes", sharing::fairness_two_processes),
        (
            "named_unrelated_processes",
            named::named_unrelated_processes,
        ),
        (
            "named_open_or_create_race",
            named::named_open_or_create_race,
        ),
        (
            "named_mapping_unrelated_processes",
            named::named_mapping_unrelated_processes,
        ),
        (
            "bad_attach_writes_nothing",
            attach::bad_attach_writes_nothing,
        ),
        (
            "several_locks_in_one_mapping",
            attach::several_locks_in_one_mapping,
        ),
        (
            "init_in_refuses_a_lock_another_process_uses",
            attach::init_in_refuses_a_lock_another_process_uses,
        ),
        (
            "owner_death_detected_by_waiter",
            deaths::owner_death_detected_by_waiter,
        ),
        (
            "force_unlock_after_waitpid",
            deaths::force_unlock_after_waitpid,
        ),
        (
            "lock_or_repair_after_owner_death",
            deaths::lock_or_repair_after_owner_death,
        ),
        (
            "try_lock_polling_detects_dead_owner",
            deaths::try_lock_polling_detects_dead_owner,
        ),
        ("queued_waiters_killed", deaths::queued_waiters_killed),
        ("panic_poisons", deaths::panic_poisons),
        ("fork_while_holding", deaths::fork_while_holding),
        ("leaked_guard", deaths::leaked_guard),
        (
            "stopped_owner_not_taken_over",
            deaths::stopped_owner_not_taken_over,
        ),
        #[cfg(feature = "__crash-points")]
        ("crash_points", crash_points::crash_points),
        ("slot_exhaustion", sharing::slot_exhaustion),
        ("participants_reclaimed", sharing::participants_reclaimed),
        #[cfg(feature = "__crash-points")]
        (
            "death_while_releasing_participant_slot",
            crash_points::death_while_releasing_participant_slot,
        ),
        (
            "timed_lock_cross_process",
            sharing::timed_lock_cross_process,
        ),
        ("debug_and_guard", sharing::debug_and_guard),
        (
            "reused_pid_does_not_inherit_registration",
            pid_reuse::reused_pid_does_not_inherit_registration,
        ),
        (
            "reused_pid_does_not_own_inherited_guard",
            pid_reuse::reused_pid_does_not_own_inherited_guard,
        ),
    ];
    procs::run_cases("shm_process", &args, tests);
}
