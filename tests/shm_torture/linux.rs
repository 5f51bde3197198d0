use gomutex::shm::{Config, ShmMutex, TryLockError};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;
use common::anon::AnonShared;
use common::procs::{fork, mono_ns};
use common::torture::{self, Death, Kills, Rng};

const WORKERS: usize = 6;
/// Threads per worker process (odd workers run two, to exercise per-process accounting).
fn threads(w: usize) -> usize {
    1 + w % 2
}
const MAX_THREADS: usize = 2;

// Side mapping indices.
const STOP: usize = 0;
const LAST_KILL_NS: usize = 1;
const REPORTS: usize = 2;
const VIOLATIONS: usize = 3;
const REC_SUM: usize = 4;
const REC_MAX: usize = 5;
const REC_N: usize = 6;
const POISONED: usize = 7;
/// 1 if the supervisor will call force_unlock for the last kill (recovery times are kept
/// apart: [REC_SUM, REC_MAX, REC_N] for waiter-side detection, +8 for force_unlock).
const LAST_KILL_FORCED: usize = 8;
const FORCED_OFS: usize = 8;
const PHASE: usize = 16; // + w * MAX_THREADS + t
const DONE: usize = 64; // + w
const SIDE_LEN: usize = 128;

/// Phases a worker thread announces (read by the supervisor after it reaped the worker).
const IDLE: u64 = 0;
const LOCKING: u64 = 1;
const IN_CS: u64 = 2;
const UNLOCKING: u64 = 3;

/// Sum of the workers' completed sections (`done[w]`).
fn done_sum(side: &AnonShared) -> u64 {
    (0..WORKERS).map(|w| side.at(DONE + w).load(SeqCst)).sum()
}

type Data = [u64; 4];

fn worker_thread(m: &ShmMutex<Data>, side: &AnonShared, w: usize, t: usize) {
    let pid = u64::from(std::process::id());
    let phase = side.at(PHASE + w * MAX_THREADS + t);
    let mut rng = Rng::new(pid.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ mono_ns() ^ (t as u64 + 1));
    while side.at(STOP).load(SeqCst) == 0 {
        let op = rng.below(100);
        phase.store(LOCKING, SeqCst);
        let r = if op < 70 {
            m.lock().map_err(TryLockError::from)
        } else if op < 85 {
            m.try_lock()
        } else {
            m.try_lock_for(Duration::from_micros(rng.below(2_000)))
        };
        let mut g = match r {
            Ok(g) => {
                phase.store(IN_CS, SeqCst);
                let sum = done_sum(side);
                if g[2] != 0 || g[0] != g[1] || g[0] != sum {
                    eprintln!(
                        "VIOLATION: clean acquisition saw marker {} a {} b {} done {}",
                        g[2], g[0], g[1], sum
                    );
                    side.at(VIOLATIONS).fetch_add(1, SeqCst);
                }
                g
            }
            Err(TryLockError::OwnerDied(mut g)) => {
                phase.store(IN_CS, SeqCst);
                side.at(REPORTS).fetch_add(1, SeqCst);
                let dt = mono_ns().saturating_sub(side.at(LAST_KILL_NS).load(SeqCst));
                let o = FORCED_OFS * side.at(LAST_KILL_FORCED).load(SeqCst) as usize;
                side.at(REC_SUM + o).fetch_add(dt, SeqCst);
                side.at(REC_MAX + o).fetch_max(dt, SeqCst);
                side.at(REC_N + o).fetch_add(1, SeqCst);
                let sum = done_sum(side);
                g[0] = sum;
                g[1] = sum;
                g[2] = 0;
                g.mark_consistent();
                g
            }
            Err(TryLockError::Poisoned(g)) => {
                phase.store(IN_CS, SeqCst);
                side.at(POISONED).fetch_add(1, SeqCst);
                g.mark_consistent();
                g
            }
            Err(TryLockError::WouldBlock) => {
                phase.store(IDLE, SeqCst);
                continue;
            }
        };
        g[2] = pid;
        g[0] += 1;
        match rng.below(20) {
            0 => std::thread::sleep(Duration::from_micros(100)),
            1..=4 => {
                for _ in 0..rng.below(2_000) {
                    std::hint::spin_loop();
                }
            }
            _ => {}
        }
        g[1] += 1;
        side.at(DONE + w).fetch_add(1, SeqCst);
        g[2] = 0;
        phase.store(UNLOCKING, SeqCst);
        drop(g);
        phase.store(IDLE, SeqCst);
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

fn spawn_worker(m: &ShmMutex<Data>, side: &AnonShared, w: usize) -> libc::pid_t {
    // The supervisor is single-threaded, so it may fork.
    fork(|| {
        std::thread::scope(|s| {
            for t in 1..threads(w) {
                s.spawn(move || worker_thread(m, side, w, t));
            }
            worker_thread(m, side, w, 0);
        });
        0
    })
}

/// What the lock and the counters say, for a failure.
fn report(m: &ShmMutex<Data>, side: &AnonShared) {
    eprintln!("diagnostics: {:?}", m.diagnostics());
    eprintln!(
        "done {} reports {} violations {}",
        done_sum(side),
        side.at(REPORTS).load(SeqCst),
        side.at(VIOLATIONS).load(SeqCst)
    );
}

fn dump(m: &ShmMutex<Data>, side: &AnonShared, why: &str) -> ! {
    report(m, side);
    panic!("{why}");
}

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[("kill_torture", kill_torture)];
    common::procs::run_cases("shm_torture", &args, tests);
}

fn kill_torture() {
    let duration = torture::duration();
    println!("\n    {duration:?}, {WORKERS} workers");
    // Fewer waiter slots than the 9 worker threads: slot exhaustion happens too.
    let cfg = Config::new().participants(32).waiter_slots(8);
    let m = ShmMutex::anonymous_with([0u64; 4], cfg).unwrap();
    let side = AnonShared::counters(SIDE_LEN);
    let mut pids: Vec<libc::pid_t> = (0..WORKERS).map(|w| spawn_worker(&m, &side, w)).collect();
    let mut rng = Rng::new(0x1234_5678_9abc_def1 ^ mono_ns());
    let start = Instant::now();
    let (mut by_phase, mut holding_kills) = ([0u64; 4], 0u64);
    let (mut forced, mut forced_true) = (0u64, 0u64);
    let kills = torture::kill_loop(
        &mut pids,
        &mut rng,
        start + duration,
        Kills::EVERY_FEW_MS,
        |w, _| spawn_worker(&m, &side, w),
        |_, rng| {
            // The recovery-time figures need to know how, and when, the victim was killed.
            let force = rng.below(2) == 0;
            side.at(LAST_KILL_FORCED).store(u64::from(force), SeqCst);
            side.at(LAST_KILL_NS).store(mono_ns(), SeqCst);
            force
        },
        |w, pid, death, _| {
            let Death::Killed(force) = death else {
                unreachable!("no deaths of their own")
            };
            // Phases the victim's threads were in when it died (they cannot change any more).
            let mut holding = false;
            for t in 0..threads(w) {
                let p = side.at(PHASE + w * MAX_THREADS + t).load(SeqCst) as usize;
                by_phase[p] += 1;
                holding |= p == IN_CS as usize;
                side.at(PHASE + w * MAX_THREADS + t).store(IDLE, SeqCst);
            }
            holding_kills += u64::from(holding);
            if force {
                forced += 1;
                forced_true += u64::from(m.force_unlock(pid as u32));
            }
            Ok(())
        },
        || [done_sum(&side)],
        |_, _| report(&m, &side),
    )
    .unwrap_or_else(|why| panic!("{why}"))
    .kills;
    // Stop: workers leave on their own; a watchdog catches a deadlock.
    side.at(STOP).store(1, SeqCst);
    torture::wait_for_exit(
        &pids,
        torture::STOP_LIMIT,
        |_, st| torture::exited_0(st),
        |_, _| report(&m, &side),
    )
    .unwrap_or_else(|why| panic!("{why}"));
    // Workers exited with _exit, keeping their participant slots: reclaim them.
    m.recover();
    let mut final_report = false;
    let g = match m.try_lock() {
        Ok(g) => g,
        Err(TryLockError::OwnerDied(g)) => {
            final_report = true;
            g
        }
        Err(e) => dump(&m, &side, &format!("final lock: {e:?}")),
    };
    let done = done_sum(&side);
    let (a, b, marker) = (g[0], g[1], g[2]);
    g.mark_consistent();
    drop(g);
    let d = m.diagnostics();
    let reports = side.at(REPORTS).load(SeqCst);
    let violations = side.at(VIOLATIONS).load(SeqCst);
    let elapsed = start.elapsed();
    println!("    duration            {elapsed:.1?}");
    println!(
        "    completed sections  {done} ({:.0}/s)",
        done as f64 / elapsed.as_secs_f64()
    );
    println!("    kills               {kills} (thread phases: idle {}, locking {}, in section {}, unlocking {})",
        by_phase[0], by_phase[1], by_phase[2], by_phase[3]);
    println!("    kills in section    {holding_kills}");
    println!("    force_unlock calls  {forced} (returned true: {forced_true})");
    println!(
        "    owner deaths        {} (recovered by the lock)",
        d.owner_deaths
    );
    println!(
        "    OwnerDied reports   {reports} (+{} at the end)",
        u64::from(final_report)
    );
    for (o, how) in [(0, "waiter detection"), (FORCED_OFS, "force_unlock")] {
        let n = side.at(REC_N + o).load(SeqCst);
        println!(
            "    recovery time       {how}: {n} deaths, mean {:.2?}, max {:.2?} (kill -> next owner told)",
            Duration::from_nanos(side.at(REC_SUM + o).load(SeqCst) / n.max(1)),
            Duration::from_nanos(side.at(REC_MAX + o).load(SeqCst))
        );
    }
    let rc = d.recovery;
    println!(
        "    windows recovered   journal-lock takeovers {} (replayed {}), dead waiters removed {}, \
         dead WOKEN owners {}, owed wake-ups/hand-offs {}, hand-offs passed on {}",
        rc.journal_takeovers,
        rc.journal_replays,
        rc.dead_waiters_removed,
        rc.dead_woken_cleared,
        rc.owed_wakeups_delivered,
        rc.handoffs_passed_on
    );
    println!("    final state         {d:?}");
    let mut fails = Vec::new();
    if violations != 0 {
        fails.push(format!(
            "{violations} violations (torn state without OwnerDied, or lost update)"
        ));
    }
    if side.at(POISONED).load(SeqCst) != 0 {
        fails.push("poisoned without a panic".into());
    }
    if marker != 0 && !final_report {
        fails.push("final owner not told of a death".into());
    }
    if !final_report && (a != done || b != done) {
        fails.push(format!("final data a {a} b {b} done {done}"));
    }
    if d.owner_deaths < holding_kills {
        fails.push(format!(
            "{holding_kills} kills inside the section but only {} owner deaths recovered",
            d.owner_deaths
        ));
    }
    if d.owner_deaths > by_phase[1] + by_phase[2] + by_phase[3] {
        fails.push("more owner deaths than kills of possible holders".into());
    }
    if reports + u64::from(final_report) < holding_kills.min(1) {
        fails.push("no OwnerDied report at all".into());
    }
    if d.waiters != 0
        || d.queued_slots != 0
        || d.stored_tokens != 0
        || d.registered_waiters != 0
        || d.in_flight != 0
        || d.state != 0
    {
        fails.push(format!("not quiescent at the end: {d:?}"));
    }
    if d.participants != 1 {
        fails.push(format!(
            "{} participants left (expected only the supervisor)",
            d.participants
        ));
    }
    if done == 0 || kills == 0 {
        fails.push("no work or no kills".into());
    }
    for f in &fails {
        println!("    FAIL: {f}");
    }
    assert!(fails.is_empty(), "{}", fails.join("; "));
}
