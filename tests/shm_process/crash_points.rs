//! Deaths in windows too narrow for random kills, made deterministic with the test-only crash
//! points.

use super::common;
use super::common::anon::AnonShared;
use super::common::procs::{self, fork, wait, wait_limit};
use super::common::shmtest::{assert_quiescent, ok};
use gomutex::shm::{Config, LockError, Mapping, MappingLayout, ShmMutex, ShmMutexGuard};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

/// Deaths in windows too narrow for random kills to hit, made deterministic with the
/// test-only crash points: a process SIGKILLs itself (1) with the journal lock held and its
/// redo log committed before the state-word CAS, (2) after the CAS, (3) after applying,
/// (4) owing a normal-mode wake-up, (5) owing a hand-off, (6) right after taking its token.
/// Each window is built step by step, so it is reached on every run: a holder `H` and a
/// sleeper `W` that the parent sees queued (in the diagnostics) before anyone unlocks; for
/// (5) `W` stops after its normal wake-up while `H` relocks, so that it wakes to a held lock
/// after more than 1 ms and switches the lock to starvation mode. Then `W` and a third process
/// contend: they must finish, the data must be exact, the lock quiescent, and the recovery
/// counters must show the window was repaired.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
pub fn crash_points() {
    use gomutex::__crash::*;
    const WOKEN: u32 = 2;
    const STARVING: u32 = 4;
    // In the journal: W dies registering as a waiter.
    let journal = |p| matches!(p, LOG_COMMITTED | WORD_CHANGED | APPLIED);
    for point in [
        LOG_COMMITTED,
        WORD_CHANGED,
        APPLIED,
        OWES_WAKEUP,
        OWES_HANDOFF,
        TOKEN_TAKEN,
    ] {
        let what = format!("crash point {point}");
        let m = ShmMutex::anonymous([0u64; 2]).unwrap();
        // 0: sections done; 1: the holder's phase (1 holds, 2 relocked); 2: the parent's go
        // (1 unlock, 2 unlock again).
        let f = AnonShared::counters(3);
        let (done, phase, go) = (f.at(0), f.at(1), f.at(2));
        let section = |g: &mut [u64; 2]| -> bool {
            if g[0] != g[1] || g[0] != done.load(SeqCst) {
                return false;
            }
            g[0] += 1;
            std::hint::black_box(&mut *g);
            g[1] += 1;
            done.fetch_add(1, SeqCst);
            true
        };
        let work = |first: Option<ShmMutexGuard<'_, [u64; 2]>>, iters: u64| -> i32 {
            let mut first = first;
            for i in 0..iters {
                let mut g = match first.take().map(Ok).unwrap_or_else(|| m.lock()) {
                    Ok(g) => g,
                    Err(LockError::OwnerDied(g)) => {
                        // The dead process died inside the lock code, not in a section: the
                        // data is intact, but we must be told anyway.
                        g.mark_consistent();
                        g
                    }
                    Err(LockError::Poisoned(_)) => return 7,
                };
                if !section(&mut g) {
                    return 8;
                }
                if i % 4 == 0 {
                    // Hold it a while: queueing, and starvation mode.
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            0
        };
        let wait_go = |v: u64| {
            while go.load(SeqCst) < v {
                std::thread::sleep(Duration::from_micros(50));
            }
        };
        let until = |cond: &dyn Fn(&gomutex::shm::Diagnostics) -> bool, step: &str| {
            common::poll_until(
                Duration::from_secs(10),
                Duration::from_micros(100),
                || format!("{what}: {step}: {:?}", m.diagnostics()),
                || cond(&m.diagnostics()),
            )
        };
        let queued = |d: &gomutex::shm::Diagnostics| d.waiters == 1 && d.queued_slots == 1;
        let unlocker = matches!(point, OWES_WAKEUP | OWES_HANDOFF);
        // H: holds the lock until told; for 4 and 5 it is the armed one (it dies unlocking).
        let h = fork(|| {
            let g = ok(m.lock());
            phase.store(1, SeqCst);
            wait_go(1);
            if point == OWES_WAKEUP {
                gomutex::__crash::crash_at(point);
            }
            drop(g);
            if point == OWES_HANDOFF {
                // Relock while W, woken, is stopped; then unlock in starvation mode.
                let g = ok(m.lock());
                gomutex::__crash::crash_at(point);
                phase.store(2, SeqCst);
                wait_go(2);
                drop(g);
            }
            if unlocker {
                return 3; // the crash point was not reached
            }
            work(None, 1_500)
        });
        poll_until_set(phase, 1, &what);
        // W: queues behind H; for 1, 2, 3 and 6 it is the armed one (it dies waiting).
        let w = fork(|| {
            match point {
                OWES_WAKEUP => {}
                OWES_HANDOFF => gomutex::__crash::stop_at(TOKEN_TAKEN),
                _ => gomutex::__crash::crash_at(point),
            }
            let g = m.lock();
            if !unlocker {
                return 3; // the crash point was not reached
            }
            match g {
                Ok(g) => work(Some(g), 1_500),
                Err(LockError::OwnerDied(g)) => {
                    g.mark_consistent();
                    work(Some(g), 1_500)
                }
                Err(LockError::Poisoned(_)) => 7,
            }
        });
        let armed = if unlocker { h } else { w };
        let (survivor, sdesc) = if unlocker { (w, "W") } else { (h, "H") };
        if journal(point) {
            // W dies registering as a waiter, inside the journal.
            assert_eq!(
                wait_limit(w, Duration::from_secs(20), &what),
                128 + libc::SIGKILL,
                "{what}: never reached"
            );
        } else {
            // W is asleep in the queue, and nobody is awake to take the lock but H.
            until(&|d| queued(d) && d.state & WOKEN == 0, "W queued");
        }
        if point == OWES_HANDOFF {
            // W has slept over 1 ms: woken now it finds the lock held again and starves.
            std::thread::sleep(Duration::from_millis(3));
            go.store(1, SeqCst);
            procs::wait_stopped(w);
            poll_until_set(phase, 2, &what);
            procs::signal(w, libc::SIGCONT);
            until(&|d| queued(d) && d.state & STARVING != 0, "W starving");
            go.store(2, SeqCst);
        } else {
            go.store(1, SeqCst);
        }
        // A third process contends with the survivor (and meets the repair first).
        let other = fork(|| work(None, 1_500));
        if !journal(point) {
            assert_eq!(
                wait_limit(armed, Duration::from_secs(20), &what),
                128 + libc::SIGKILL,
                "{what}: never reached"
            );
        }
        for (p, who) in [(survivor, sdesc), (other, "other")] {
            assert_eq!(
                wait_limit(p, Duration::from_secs(20), &what),
                0,
                "{what}: {who}"
            );
        }
        m.recover();
        let g = match m.lock() {
            Ok(g) => g,
            Err(LockError::OwnerDied(g)) => {
                g.mark_consistent();
                g
            }
            Err(e) => panic!("{what}: {e}"),
        };
        let d = done.load(SeqCst);
        assert!(
            g[0] == d && g[1] == d && d == 3_000,
            "{what}: data {:?} done {d}",
            *g
        );
        drop(g);
        assert_quiescent(&m);
        let diag = m.diagnostics();
        assert_eq!(diag.participants, 1, "{what}: {diag:?}");
        let rc = diag.recovery;
        println!(
            "    point {point}: {rc:?}, owner deaths {}",
            diag.owner_deaths
        );
        let exercised = match point {
            LOG_COMMITTED => rc.journal_takeovers >= 1,
            WORD_CHANGED | APPLIED => rc.journal_takeovers >= 1 && rc.journal_replays >= 1,
            OWES_WAKEUP | OWES_HANDOFF => rc.owed_wakeups_delivered >= 1,
            _ => rc.dead_woken_cleared + rc.handoffs_passed_on >= 1,
        };
        assert!(exercised, "{what}: window not exercised: {rc:?}");
    }
}

/// Wait (bounded) until a flag of the test's shared counters reaches `v`.
fn poll_until_set(flag: &std::sync::atomic::AtomicU64, v: u64, what: &str) {
    common::poll_until(
        Duration::from_secs(10),
        Duration::from_micros(100),
        || format!("{what}: flag {v}"),
        || flag.load(SeqCst) >= v,
    );
}

/// A process that dies while dropping a handle, as the handle gives its idle participant slot
/// back, leaves nothing wedged: recovery (which needs the journal lock) finishes, and the slot
/// is free again.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
pub fn death_while_releasing_participant_slot() {
    let cfg = Config::new().participants(4).waiter_slots(4);
    let mut plan = MappingLayout::new();
    let at = plan.mutex::<u64>(cfg).unwrap();
    let map = Mapping::anonymous(plan.len()).unwrap();
    let m = ShmMutex::init_in(&map, at, 0u64, cfg).unwrap();
    *ok(m.lock()) += 1; // the parent's participant slot
    let k = fork(|| {
        let h = ShmMutex::<u64>::attach_in(&map, at).unwrap();
        *ok(h.lock()) += 1; // the child's own slot
        gomutex::__crash::crash_at(gomutex::__crash::RELEASING_SELF);
        drop(h);
        0
    });
    assert_eq!(wait(k), 128 + libc::SIGKILL, "crash point 7 never reached");
    // In a child, so that a wedged journal lock fails the test instead of hanging it.
    let checker = fork(|| {
        m.recover();
        let d = m.diagnostics();
        // The parent's slot and this checker's (it registered to recover); the dead one's is free.
        if d.participants == 2 && *ok(m.lock()) == 2 {
            0
        } else {
            eprintln!("after recovery: {d:?}");
            1
        }
    });
    assert_eq!(
        wait_limit(
            checker,
            Duration::from_secs(10),
            "recovery after a death in drop"
        ),
        0
    );
}
