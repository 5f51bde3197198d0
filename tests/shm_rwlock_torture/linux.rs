//! The kill torture of `shm_rwlock_torture` (module docs of `main.rs`).

use gomutex::shm::{Config, ShmRwLock, TryLockError};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;
use common::anon::AnonShared;
use common::procs::{fork, mono_ns};
use common::torture::{self, Kills, Rng};

const WORKERS: usize = 6;
/// Threads per worker process: 1, 2 or 3 (per-process read counts with several threads).
fn threads(w: usize) -> usize {
    1 + w % 3
}
const MAX_THREADS: usize = 3;

// Side mapping indices.
const STOP: usize = 0;
const VIOLATIONS: usize = 1;
const WRITER_REPORTS: usize = 2;
const READER_REPORTS: usize = 3;
const POISONED: usize = 4;
const READS: usize = 5; // + w: completed read sections (progress)
const PHASE: usize = 16; // + w * MAX_THREADS + t
const DONE: usize = 64; // + w: committed writes
const SIDE_LEN: usize = 128;

/// Phases a worker thread announces (read by the supervisor after it reaped the worker).
const IDLE: u64 = 0;
const READ_LOCKING: u64 = 1;
const READING: u64 = 2;
const WRITE_LOCKING: u64 = 3;
const WRITING: u64 = 4;
const UNLOCKING: u64 = 5;
const PHASES: [&str; 6] = [
    "idle",
    "read-locking",
    "reading",
    "write-locking",
    "writing",
    "unlocking",
];

type Data = [u64; 4];

/// Sum of the workers' committed writes.
fn done_sum(side: &AnonShared) -> u64 {
    (0..WORKERS).map(|w| side.at(DONE + w).load(SeqCst)).sum()
}

fn reads_sum(side: &AnonShared) -> u64 {
    (0..WORKERS).map(|w| side.at(READS + w).load(SeqCst)).sum()
}

/// Hold a section a while: usually not at all, sometimes a spin, rarely a sleep.
fn hold(rng: &mut Rng) {
    match rng.below(20) {
        0 => std::thread::sleep(Duration::from_micros(100)),
        1..=4 => {
            for _ in 0..rng.below(2_000) {
                std::hint::spin_loop();
            }
        }
        _ => {}
    }
}

fn violation(side: &AnonShared, what: &str, g: &Data, sum: u64) {
    eprintln!(
        "VIOLATION: {what}: a {} b {} marker {} done {sum}",
        g[0], g[1], g[2]
    );
    side.at(VIOLATIONS).fetch_add(1, SeqCst);
}

type Phase = std::sync::atomic::AtomicU64;

fn read_op(l: &ShmRwLock<Data>, side: &AnonShared, w: usize, rng: &mut Rng, phase: &Phase) {
    phase.store(READ_LOCKING, SeqCst);
    let op = rng.below(10);
    let r = if op < 6 {
        l.read().map_err(TryLockError::from)
    } else if op < 8 {
        l.try_read()
    } else {
        l.try_read_for(Duration::from_micros(rng.below(2_000)))
    };
    let (g, told) = match r {
        Ok(g) => (g, false),
        Err(TryLockError::OwnerDied(g)) => (g, true),
        Err(TryLockError::Poisoned(g)) => {
            side.at(POISONED).fetch_add(1, SeqCst);
            (g, true)
        }
        Err(TryLockError::WouldBlock) => {
            phase.store(IDLE, SeqCst);
            return;
        }
    };
    phase.store(READING, SeqCst);
    let sum = done_sum(side);
    let seen = *g;
    if told {
        side.at(READER_REPORTS).fetch_add(1, SeqCst);
    } else if seen[2] != 0 || seen[0] != seen[1] || seen[0] != sum {
        violation(side, "clean read", &seen, sum);
    }
    hold(rng);
    // Nothing changes under a read lock.
    if *g != seen || done_sum(side) != sum {
        violation(side, "changed under a read lock", &g, sum);
    }
    side.at(READS + w).fetch_add(1, SeqCst);
    phase.store(UNLOCKING, SeqCst);
    drop(g);
    phase.store(IDLE, SeqCst);
}

fn write_op(l: &ShmRwLock<Data>, side: &AnonShared, w: usize, rng: &mut Rng, phase: &Phase) {
    phase.store(WRITE_LOCKING, SeqCst);
    let op = rng.below(10);
    let r = if op < 6 {
        l.write().map_err(TryLockError::from)
    } else if op < 8 {
        l.try_write()
    } else {
        l.try_write_for(Duration::from_micros(rng.below(2_000)))
    };
    if !matches!(r, Err(TryLockError::WouldBlock)) {
        phase.store(WRITING, SeqCst);
    }
    let sum = done_sum(side);
    let mut g = match r {
        Ok(g) => {
            if g[2] != 0 || g[0] != g[1] || g[0] != sum {
                violation(side, "clean write lock", &g, sum);
            }
            g
        }
        Err(TryLockError::OwnerDied(mut g)) => {
            side.at(WRITER_REPORTS).fetch_add(1, SeqCst);
            g[0] = sum;
            g[1] = sum;
            g[2] = 0;
            g.mark_consistent();
            g
        }
        Err(TryLockError::Poisoned(g)) => {
            side.at(POISONED).fetch_add(1, SeqCst);
            g.mark_consistent();
            g
        }
        Err(TryLockError::WouldBlock) => {
            phase.store(IDLE, SeqCst);
            return;
        }
    };
    g[2] = u64::from(std::process::id());
    g[0] += 1;
    hold(rng);
    g[1] += 1;
    side.at(DONE + w).fetch_add(1, SeqCst);
    g[2] = 0;
    phase.store(UNLOCKING, SeqCst);
    drop(g);
    phase.store(IDLE, SeqCst);
}

fn worker_thread(l: &ShmRwLock<Data>, side: &AnonShared, w: usize, t: usize) {
    let pid = u64::from(std::process::id());
    let phase = side.at(PHASE + w * MAX_THREADS + t);
    let mut rng = Rng::new(pid.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ mono_ns() ^ (t as u64 + 1));
    while side.at(STOP).load(SeqCst) == 0 {
        if rng.below(5) == 0 {
            write_op(l, side, w, &mut rng, phase);
        } else {
            read_op(l, side, w, &mut rng, phase);
        }
        if rng.below(8) == 0 {
            std::thread::sleep(Duration::from_micros(rng.below(50)));
        } else {
            for _ in 0..rng.below(500) {
                std::hint::spin_loop();
            }
        }
    }
    phase.store(IDLE, SeqCst);
}

fn spawn_worker(l: &ShmRwLock<Data>, side: &AnonShared, w: usize) -> libc::pid_t {
    // The supervisor is single-threaded, so it may fork.
    fork(|| {
        std::thread::scope(|s| {
            for t in 1..threads(w) {
                s.spawn(move || worker_thread(l, side, w, t));
            }
            worker_thread(l, side, w, 0);
        });
        0
    })
}

/// What the lock and the counters say, for a failure.
fn report(l: &ShmRwLock<Data>, side: &AnonShared) {
    eprintln!("diagnostics: {:?}", l.diagnostics());
    eprintln!(
        "done {} reads {} violations {}",
        done_sum(side),
        reads_sum(side),
        side.at(VIOLATIONS).load(SeqCst)
    );
}

fn dump(l: &ShmRwLock<Data>, side: &AnonShared, why: &str) -> ! {
    report(l, side);
    panic!("{why}");
}

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[("rwlock_kill_torture", rwlock_kill_torture)];
    common::procs::run_cases("shm_rwlock_torture", &args, tests);
}

fn rwlock_kill_torture() {
    let duration = torture::duration();
    println!("\n    {duration:?}, {WORKERS} workers");
    // Fewer waiter slots than the 12 worker threads: writers wait without a slot too.
    let cfg = Config::new().participants(32).waiter_slots(4);
    let l = ShmRwLock::anonymous_with([0u64; 4], cfg).unwrap();
    let side = AnonShared::counters(SIDE_LEN);
    let mut pids: Vec<libc::pid_t> = (0..WORKERS).map(|w| spawn_worker(&l, &side, w)).collect();
    let mut rng = Rng::new(0x1234_5678_9abc_def1 ^ mono_ns());
    let start = Instant::now();
    let mut by_phase = [0u64; 6];
    let (mut writing_kills, mut reading_kills) = (0u64, 0u64);
    let (mut forced, mut forced_true) = (0u64, 0u64);
    let kills = torture::kill_loop(
        &mut pids,
        &mut rng,
        start + duration,
        Kills::EVERY_FEW_MS,
        |w, _| spawn_worker(&l, &side, w),
        |_, _| (),
        |w, pid, _, rng| {
            // Phases the victim's threads were in when it died (they cannot change any more).
            let (mut writing, mut reading) = (false, false);
            for t in 0..threads(w) {
                let p = side.at(PHASE + w * MAX_THREADS + t).load(SeqCst);
                by_phase[p as usize] += 1;
                writing |= p == WRITING;
                reading |= p == READING;
                side.at(PHASE + w * MAX_THREADS + t).store(IDLE, SeqCst);
            }
            writing_kills += u64::from(writing);
            reading_kills += u64::from(reading);
            if rng.below(2) == 0 {
                forced += 1;
                forced_true += u64::from(l.force_unlock(pid));
            }
            Ok(())
        },
        // Both must move: readers alone could hide stalled writers, and the reverse.
        || [done_sum(&side), reads_sum(&side)],
        |_, _| report(&l, &side),
    )
    .unwrap_or_else(|why| panic!("{why}"))
    .kills;
    // Stop: workers leave on their own; a watchdog catches a stall.
    side.at(STOP).store(1, SeqCst);
    torture::wait_for_exit(
        &pids,
        torture::STOP_LIMIT,
        |_, st| torture::exited_0(st),
        |_, _| report(&l, &side),
    )
    .unwrap_or_else(|why| panic!("{why}"));
    // Workers exited with _exit, keeping their participant slots: reclaim them.
    l.recover();
    let mut final_report = false;
    let g = match l.try_write() {
        Ok(g) => g,
        Err(TryLockError::OwnerDied(g)) => {
            final_report = true;
            g
        }
        Err(e) => dump(&l, &side, &format!("final write lock: {e:?}")),
    };
    let done = done_sum(&side);
    let (a, b, marker) = (g[0], g[1], g[2]);
    g.mark_consistent();
    drop(g);
    let d = l.diagnostics();
    let violations = side.at(VIOLATIONS).load(SeqCst);
    let (wrep, rrep) = (
        side.at(WRITER_REPORTS).load(SeqCst),
        side.at(READER_REPORTS).load(SeqCst),
    );
    let reads = reads_sum(&side);
    let elapsed = start.elapsed();
    println!("    duration            {elapsed:.1?}");
    println!(
        "    committed writes    {done} ({:.0}/s), read sections {reads} ({:.0}/s)",
        done as f64 / elapsed.as_secs_f64(),
        reads as f64 / elapsed.as_secs_f64()
    );
    let phases: Vec<String> = PHASES
        .iter()
        .zip(by_phase)
        .map(|(n, c)| format!("{n} {c}"))
        .collect();
    println!(
        "    kills               {kills} (thread phases: {})",
        phases.join(", ")
    );
    println!("    kills in a section  writing {writing_kills}, reading {reading_kills}");
    println!("    force_unlock calls  {forced} (returned true: {forced_true})");
    println!(
        "    owner deaths        {} (writers' mutex recovered)",
        d.writers.owner_deaths
    );
    println!(
        "    OwnerDied reports   writers {wrep} (+{} at the end), readers {rrep}",
        u64::from(final_report)
    );
    println!("    final state         {d:?}");
    let mut fails = Vec::new();
    if violations != 0 {
        fails.push(format!(
            "{violations} violations (a torn or stale value without OwnerDied, or a lost update)"
        ));
    }
    if side.at(POISONED).load(SeqCst) != 0 {
        fails.push("poisoned without a panic".into());
    }
    if marker != 0 && !final_report {
        fails.push("final writer not told of a death".into());
    }
    if !final_report && (a != done || b != done) {
        fails.push(format!("final data a {a} b {b}, committed {done}"));
    }
    if d.writers.owner_deaths < writing_kills {
        fails.push(format!(
            "{writing_kills} kills inside a write section but only {} owner deaths",
            d.writers.owner_deaths
        ));
    }
    if wrep + u64::from(final_report) < writing_kills.min(1) {
        fails.push("no OwnerDied report to a writer at all".into());
    }
    if d.readers != 0 || d.queued_readers != 0 || d.write_pending {
        fails.push(format!("reads or a phase left at the end: {d:?}"));
    }
    let m = d.writers;
    if m.waiters != 0 || m.queued_slots != 0 || m.registered_waiters != 0 || m.state != 0 {
        fails.push(format!("writers' mutex not quiescent at the end: {m:?}"));
    }
    if m.participants != 1 {
        fails.push(format!(
            "{} participants left (expected only the supervisor)",
            m.participants
        ));
    }
    if done == 0 || reads == 0 || kills == 0 {
        fails.push("no writes, no reads or no kills".into());
    }
    for f in &fails {
        println!("    FAIL: {f}");
    }
    assert!(fails.is_empty(), "{}", fails.join("; "));
}
