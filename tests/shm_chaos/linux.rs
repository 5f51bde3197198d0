//! Chaos harness for `gomutex::shm`: the conditions under which a kill torture once wedged the
//! lock (a starvation-mode hand-off left undelivered while ten waiters slept): more worker
//! threads than waiter slots, two-thread processes, plain `lock()` mixed with `try_lock_for`
//! and `try_lock`, SIGKILLs every 1–8 ms, a supervisor that respawns the victims and calls
//! `force_unlock` (never, always, or at random, by round), and a participant table small enough
//! that the spare "guest" slot is used.
//!
//! A third of the respawned workers are armed with a random `gomutex::__crash::crash_at` point, so
//! they die inside the journal and the hand-off windows that random kills rarely hit (with the
//! test-only `__crash-points` feature, on in this repository's builds; without it, as in a build
//! of the published crate, only the random kills).
//!
//! A watchdog fails the run when no critical section completes for a while, after dumping
//! `diagnostics()`, the raw accounting of every participant and waiter slot, and what each
//! worker thread is blocked in.
//!
//! Environment (all optional):
//!
//! * `GOMUTEX_CHAOS_SECS`: seconds per round (default 2);
//! * `GOMUTEX_CHAOS_ROUNDS`: rounds (default 3: one per `force_unlock` policy);
//! * `GOMUTEX_CHAOS_SEED`: the first round's seed (default: from the clock; printed), round
//!   `i` uses `seed + i`;
//! * `GOMUTEX_CHAOS_STALL_SECS`: the watchdog's "no progress" limit (default 3);
//! * `GOMUTEX_CHAOS_JANITOR=1`: the supervisor also calls `recover()` after every kill (an
//!   exploration aid: a live participant that never dies hides the "every participant slot
//!   held by the dead" window, so other windows show up).
//!
//! Before the chaos, `dead_guest_borrower` replays that window deterministically (the found
//! cause of the wedge: every regular participant slot and the spare guest slot held by dead
//! processes, so no live process could recover anything).
//!
//! The long run (out of CI; many minutes across seeds):
//!
//! ```text
//! GOMUTEX_CHAOS_SECS=20 GOMUTEX_CHAOS_ROUNDS=45 nice -n 10 \
//!     cargo test --release --test shm_chaos
//! ```
//!
//! `harness = false`: the supervisor is single-threaded, so forking workers is safe.
// Without the test-only `__crash-points` feature (a build of the published crate) the cases
// that arm crash points are compiled out: their helpers are then unused.
#![cfg_attr(
    not(feature = "__crash-points"),
    allow(dead_code, unused_imports, unused_variables, unused_mut)
)]

use gomutex::shm::{Config, ShmMutex, TryLockError};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;
use common::anon::AnonShared;
use common::procs::{fork, mono_ns, reap};
use common::torture::{self, env_u64, Death, Kills, Rng};

const WORKERS: usize = 6;
/// Threads per worker process: odd workers run two (9 threads for 4 waiter slots).
fn threads(w: usize) -> usize {
    1 + w % 2
}
const MAX_THREADS: usize = 2;
const CFG: Config = Config::new().participants(8).waiter_slots(4);

// Side mapping indices.
const STOP: usize = 0;
const VIOLATIONS: usize = 1;
const REPORTS: usize = 2;
const LAST_KILL_NS: usize = 3;
const REC_MAX: usize = 4;
const REC_SUM: usize = 5;
const REC_N: usize = 6;
const SEED: usize = 7;
const PHASE: usize = 16; // + w * MAX_THREADS + t
const DONE: usize = 64; // + w
const SIDE_LEN: usize = 128;

/// `gomutex::__crash::crash_at` points: 1..=CRASH_POINTS, the lock's from the journal's
/// (`LOG_COMMITTED`, 1) to a sleeper's token (`TOKEN_TAKEN`).
#[cfg(feature = "__crash-points")]
const CRASH_POINTS: u32 = gomutex::__crash::TOKEN_TAKEN;
#[cfg(not(feature = "__crash-points"))]
const CRASH_POINTS: u32 = 6;

const IDLE: u64 = 0;
const LOCKING: u64 = 1;
const IN_CS: u64 = 2;
const UNLOCKING: u64 = 3;
const PHASE_NAMES: [&str; 4] = ["idle", "locking", "in section", "unlocking"];

/// The test's bookkeeping: `SIDE_LEN` counters in a shared mapping (not the lock's region).
struct Side(AnonShared);
impl Side {
    fn new() -> Self {
        Side(AnonShared::counters(SIDE_LEN))
    }
    fn at(&self, i: usize) -> &AtomicU64 {
        self.0.at(i)
    }
    fn done_sum(&self) -> u64 {
        (0..WORKERS).map(|w| self.at(DONE + w).load(SeqCst)).sum()
    }
}

type Data = [u64; 4];

fn worker_thread(m: &ShmMutex<Data>, side: &Side, w: usize, t: usize) {
    let pid = u64::from(std::process::id());
    let phase = side.at(PHASE + w * MAX_THREADS + t);
    let mut rng = Rng::new(side.at(SEED).load(SeqCst) ^ (pid << 8) ^ t as u64);
    while side.at(STOP).load(SeqCst) == 0 {
        phase.store(LOCKING, SeqCst);
        let r = match rng.below(100) {
            0..=44 => m.lock().map_err(TryLockError::from),
            45..=89 => m.try_lock_for(Duration::from_micros(rng.below(3_000))),
            _ => m.try_lock(),
        };
        let mut g = match r {
            Ok(g) => {
                let sum = side.done_sum();
                if g[2] != 0 || g[0] != g[1] || g[0] != sum {
                    eprintln!(
                        "VIOLATION: clean acquisition saw marker {} a {} b {} done {sum}",
                        g[2], g[0], g[1]
                    );
                    side.at(VIOLATIONS).fetch_add(1, SeqCst);
                }
                g
            }
            Err(TryLockError::OwnerDied(mut g)) => {
                side.at(REPORTS).fetch_add(1, SeqCst);
                let dt = mono_ns().saturating_sub(side.at(LAST_KILL_NS).load(SeqCst));
                side.at(REC_MAX).fetch_max(dt, SeqCst);
                side.at(REC_SUM).fetch_add(dt, SeqCst);
                side.at(REC_N).fetch_add(1, SeqCst);
                let sum = side.done_sum();
                g[0] = sum;
                g[1] = sum;
                g[2] = 0;
                g.mark_consistent();
                g
            }
            Err(TryLockError::Poisoned(_)) => {
                eprintln!("VIOLATION: poisoned without a panic");
                side.at(VIOLATIONS).fetch_add(1, SeqCst);
                phase.store(IDLE, SeqCst);
                continue;
            }
            Err(TryLockError::WouldBlock) => {
                phase.store(IDLE, SeqCst);
                continue;
            }
        };
        phase.store(IN_CS, SeqCst);
        g[2] = pid;
        g[0] += 1;
        match rng.below(20) {
            0 => std::thread::sleep(Duration::from_micros(rng.below(300))),
            1..=5 => {
                for _ in 0..rng.below(3_000) {
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
        if rng.below(6) == 0 {
            std::thread::sleep(Duration::from_micros(rng.below(100)));
        }
    }
    phase.store(IDLE, SeqCst);
}

/// Fork worker `w`; it SIGKILLs itself at crash point `crash` (0: none) of the lock's slow paths.
fn spawn_worker(m: &ShmMutex<Data>, side: &Side, w: usize, crash: u32) -> libc::pid_t {
    // The supervisor is single-threaded, so it may fork.
    fork(|| {
        #[cfg(feature = "__crash-points")]
        gomutex::__crash::crash_at(crash);
        std::thread::scope(|s| {
            for t in 1..threads(w) {
                s.spawn(move || worker_thread(m, side, w, t));
            }
            worker_thread(m, side, w, 0);
        });
        0
    })
}

/// The region's raw accounting (layout version 2; best effort, for the failure report only).
fn raw_dump(m: &ShmMutex<Data>) {
    if gomutex::shm::LAYOUT_VERSION != 2 {
        return;
    }
    let (base, _) = m.as_ptr_len();
    let u32_at = |off: usize| {
        // SAFETY: within the mapped region (offsets of layout version 2), read atomically.
        unsafe { (*(base.add(off) as *const std::sync::atomic::AtomicU32)).load(SeqCst) }
    };
    let u64_at = |off: usize| {
        // SAFETY: as above.
        unsafe { (*(base.add(off) as *const AtomicU64)).load(SeqCst) }
    };
    let (np, ns) = (u32_at(24) as usize, u32_at(28) as usize);
    eprintln!(
        "raw: state {:#018x} jlock {:#x} stored normal {} handoff {} overflow seq {} waiters {} \
         log state {} n {}",
        u64_at(64),
        u32_at(128),
        u32_at(132),
        u32_at(136),
        u32_at(140),
        u32_at(144),
        u32_at(192),
        u32_at(196)
    );
    for i in 0..np {
        let o = gomutex::shm::HEADER_SIZE + i * 64;
        let ident = u64_at(o);
        eprintln!(
            "raw: participant {i}: pid {} registered {} woken {} owes normal {} owes handoff {} \
             handoff {}",
            ident & 0xff_ffff,
            u32_at(o + 8),
            u32_at(o + 12),
            u32_at(o + 16),
            u32_at(o + 20),
            u32_at(o + 24)
        );
    }
    for i in 0..ns {
        let o = gomutex::shm::HEADER_SIZE + np * 64 + i * 64;
        eprintln!(
            "raw: slot {i} at {:#x}: state {} proc {} class {} ticket {}",
            base as usize + o,
            u32_at(o),
            u32_at(o + 4),
            u32_at(o + 8),
            u64_at(o + 16)
        );
    }
}

/// What every thread of the live workers is doing (its phase, and its system call: a futex
/// wait shows the address it sleeps on).
fn thread_dump(side: &Side, pids: &[libc::pid_t]) {
    for (w, &pid) in pids.iter().enumerate() {
        let phases: Vec<&str> = (0..threads(w))
            .map(|t| PHASE_NAMES[side.at(PHASE + w * MAX_THREADS + t).load(SeqCst) as usize])
            .collect();
        eprintln!("worker {w} pid {pid}: phases {phases:?}");
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let p = t.path();
            let sc = std::fs::read_to_string(p.join("syscall")).unwrap_or_default();
            let wchan = std::fs::read_to_string(p.join("wchan")).unwrap_or_default();
            eprintln!(
                "    tid {}: syscall {} wchan {wchan}",
                t.file_name().to_string_lossy(),
                sc.trim()
            );
        }
    }
}

#[derive(Default)]
struct Totals {
    secs: f64,
    kills: u64,
    forced: u64,
    done: u64,
    reports: u64,
    rec_max_ns: u64,
}

/// One round; `Err` describes a failure (after its dump).
fn round(
    seed: u64,
    secs: u64,
    stall: Duration,
    force_policy: u64,
    tot: &mut Totals,
) -> Result<(), String> {
    let m = ShmMutex::anonymous_with([0u64; 4], CFG).unwrap();
    let side = Side::new();
    side.at(SEED).store(seed, SeqCst);
    let mut rng = Rng::new(seed);
    let mut pids: Vec<libc::pid_t> = (0..WORKERS)
        .map(|w| spawn_worker(&m, &side, w, 0))
        .collect();
    // The crash point each worker is armed with (0: none), set when it is spawned.
    let armed: [Cell<u32>; WORKERS] = Default::default();
    // Exploration aid: a live participant that recovers everything it can after every kill.
    let janitor = env_u64("GOMUTEX_CHAOS_JANITOR") == Some(1);
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let (mut forced, mut crashes) = (0u64, [0u64; CRASH_POINTS as usize + 1]);
    let report = |why: &str, pids: &[libc::pid_t]| {
        eprintln!("FAILED (seed {seed}): {why}");
        eprintln!("diagnostics: {:?}", m.diagnostics());
        raw_dump(&m);
        thread_dump(&side, pids);
    };
    let fail = |why: String| -> Result<(), String> {
        report(&why, &[]);
        Err(why)
    };
    // Every 1–8 ms one random SIGKILL, and the workers that reached their armed crash point.
    let chaos = Kills {
        pause_us: (1_000, 7_000),
        one_in: 1,
        own_deaths: true,
        stall,
    };
    let kills = torture::kill_loop(
        &mut pids,
        &mut rng,
        end,
        chaos,
        |w, rng| {
            // A third of the workers die at a crash point (windows too narrow for kills).
            armed[w].set(if cfg!(feature = "__crash-points") && rng.below(3) == 0 {
                1 + rng.below(u64::from(CRASH_POINTS)) as u32
            } else {
                0
            });
            spawn_worker(&m, &side, w, armed[w].get())
        },
        |_, _| side.at(LAST_KILL_NS).store(mono_ns(), SeqCst),
        |w, pid, how, rng| {
            if let Death::Own = how {
                crashes[armed[w].get() as usize] += 1;
            }
            for t in 0..threads(w) {
                side.at(PHASE + w * MAX_THREADS + t).store(IDLE, SeqCst);
            }
            let force = match force_policy {
                0 => false,
                1 => true,
                _ => rng.below(2) == 0,
            };
            if force {
                forced += 1;
                m.force_unlock(pid as u32);
            }
            if janitor {
                m.recover();
            }
            Ok(())
        },
        || [side.done_sum()],
        report,
    )?
    .kills;
    side.at(STOP).store(1, SeqCst);
    // A worker armed with a crash point may reach it while stopping.
    torture::wait_for_exit(
        &pids,
        stall.max(torture::STOP_LIMIT),
        |w, st| (armed[w].get() != 0 && torture::killed(st)) || torture::exited_0(st),
        report,
    )?;
    // The workers left with _exit, keeping their participant slots.
    m.recover();
    let g = match m.try_lock() {
        Ok(g) => g,
        Err(TryLockError::OwnerDied(g)) => g,
        Err(e) => return fail(format!("final try_lock: {e:?}")),
    };
    let done = side.done_sum();
    if g[2] == 0 && (g[0] != done || g[1] != done) {
        return fail(format!("final data {:?}, done {done}", *g));
    }
    g.mark_consistent();
    drop(g);
    let d = m.diagnostics();
    if d.state != 0
        || d.queued_slots != 0
        || d.stored_tokens != 0
        || d.registered_waiters != 0
        || d.in_flight != 0
        || d.participants != 1
    {
        return fail(format!("not quiescent at the end: {d:?}"));
    }
    let violations = side.at(VIOLATIONS).load(SeqCst);
    if violations != 0 {
        return fail(format!("{violations} violations"));
    }
    if done == 0 || kills == 0 {
        return fail("no work or no kills".into());
    }
    let reports = side.at(REPORTS).load(SeqCst);
    let rec_n = side.at(REC_N).load(SeqCst);
    let rec_max = side.at(REC_MAX).load(SeqCst);
    let elapsed = start.elapsed().as_secs_f64();
    let rc = d.recovery;
    println!(
        "    seed {seed:#018x} force_unlock {}: {elapsed:.1} s, {done} sections, {kills} kills, \
         crash points {:?}, {reports} OwnerDied (recovery mean {:.1?} max {:.1?}), takeovers {} \
         replays {} dead waiters {} dead WOKEN {} owed {} hand-offs passed on {}",
        ["never", "always", "random"][force_policy as usize],
        &crashes[1..],
        Duration::from_nanos(side.at(REC_SUM).load(SeqCst) / rec_n.max(1)),
        Duration::from_nanos(rec_max),
        rc.journal_takeovers,
        rc.journal_replays,
        rc.dead_waiters_removed,
        rc.dead_woken_cleared,
        rc.owed_wakeups_delivered,
        rc.handoffs_passed_on
    );
    tot.secs += elapsed;
    tot.kills += kills + crashes.iter().sum::<u64>();
    tot.forced += forced;
    tot.done += done;
    tot.reports += reports;
    tot.rec_max_ns = tot.rec_max_ns.max(rec_max);
    Ok(())
}

/// The window of the wedge this harness was written for, made deterministic: every regular
/// participant slot is held by a dead process (here the one slot of `participants: 1`, by an
/// owner that died holding the lock), and the newcomer that borrowed the guest slot to recover
/// it was killed there (at crash point `crash`, inside the recovery, holding the journal lock).
/// A third process must still get the lock (told `OwnerDied`) at once; it used to find no
/// participant slot it could use, and nobody alive could recover one.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
fn dead_guest(crash: u32) -> Result<(), String> {
    let m =
        ShmMutex::anonymous_with([0u64; 4], Config::new().participants(1).waiter_slots(4)).unwrap();
    let m = &m;
    // A: takes the only regular slot and dies holding the lock.
    let a = fork(|| {
        std::mem::forget(m.lock());
        // SAFETY: raising a signal at ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
        1
    });
    let st = reap(a);
    if !torture::killed(st) {
        return Err(format!("owner: status {st:#x}"));
    }
    // B: borrows the guest slot to recover A and dies inside that recovery.
    let b = fork(|| {
        gomutex::__crash::crash_at(crash);
        let _ = m.try_lock();
        2
    });
    let st = reap(b);
    if !torture::killed(st) {
        return Err(format!(
            "guest borrower did not reach crash point {crash}: {st:#x}"
        ));
    }
    // C: must get the lock, and be told of A's death.
    let t0 = Instant::now();
    let c = fork(|| match m.try_lock_for(Duration::from_secs(10)) {
        Err(TryLockError::OwnerDied(g)) => {
            g.mark_consistent();
            0
        }
        Ok(_) => 3,
        Err(_) => 4,
    });
    let st = reap(c);
    let took = t0.elapsed();
    if !torture::exited_0(st) {
        return Err(format!(
            "newcomer after a dead guest borrower (crash point {crash}): status {st:#x} after \
             {took:.1?}; {:?}",
            m.diagnostics()
        ));
    }
    if took > Duration::from_secs(1) {
        return Err(format!("newcomer took {took:.1?} (crash point {crash})"));
    }
    Ok(())
}

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[
        #[cfg(feature = "__crash-points")]
        ("dead_guest_borrower_crash_point_1", || {
            dead_guest_borrower(gomutex::__crash::LOG_COMMITTED)
        }),
        #[cfg(feature = "__crash-points")]
        ("dead_guest_borrower_crash_point_2", || {
            dead_guest_borrower(gomutex::__crash::WORD_CHANGED)
        }),
        #[cfg(feature = "__crash-points")]
        ("dead_guest_borrower_crash_point_3", || {
            dead_guest_borrower(gomutex::__crash::APPLIED)
        }),
        ("kill_chaos", kill_chaos),
    ];
    common::procs::run_cases("shm_chaos", &args, tests);
}

#[cfg(feature = "__crash-points")]
/// [`dead_guest`] with a crash point inside the guest borrower's recovery: 1 log committed,
/// 2 word changed, 3 applied.
fn dead_guest_borrower(crash: u32) {
    dead_guest(crash).unwrap_or_else(|e| panic!("{e}"));
}

fn kill_chaos() {
    let secs = env_u64("GOMUTEX_CHAOS_SECS").unwrap_or(2);
    let rounds = env_u64("GOMUTEX_CHAOS_ROUNDS").unwrap_or(3);
    let stall = Duration::from_secs(env_u64("GOMUTEX_CHAOS_STALL_SECS").unwrap_or(3));
    let seed =
        env_u64("GOMUTEX_CHAOS_SEED").unwrap_or_else(|| mono_ns() ^ u64::from(std::process::id()));
    println!("\n    {rounds} rounds of {secs} s, {WORKERS} workers, {CFG:?}, first seed {seed:#x}");
    let mut tot = Totals::default();
    for i in 0..rounds {
        let s = seed.wrapping_add(i);
        if let Err(why) = round(s, secs, stall, i % 3, &mut tot) {
            println!(
                "    reproduce: GOMUTEX_CHAOS_SEED={s:#x} GOMUTEX_CHAOS_ROUNDS=1 (force_unlock \
                 policy {} = round index mod 3)",
                i % 3
            );
            panic!("{why}");
        }
    }
    println!(
        "    total: {:.0} s, {} sections, {} kills ({} force_unlock), {} OwnerDied, max recovery \
         {:.1?}",
        tot.secs,
        tot.done,
        tot.kills,
        tot.forced,
        tot.reports,
        Duration::from_nanos(tot.rec_max_ns)
    );
}
