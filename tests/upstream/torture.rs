//! The kill torture: 6 worker processes pick, hold up to 3 slots, and report successes and
//! failures at random on a zone with `max_conns`, `max_fails` and a backup, while the
//! supervisor SIGKILLs a random worker every 0.5–10.5 ms (`common::torture::kill_loop`),
//! calls `force_release` after `waitpid` for half of the kills (the rest are found by pickers
//! and newcomers), and respawns it. Checked:
//!
//! * `max_conns` across processes: each worker adds its connections to a peer to its own byte
//!   of one shared word per peer (after its pick, before its report), so one load is a
//!   consistent count; after every pick of a limited peer the picker sums the bytes of the
//!   workers not being killed (a per-worker generation, bumped before each kill, tells them)
//!   and compares with the limit.
//! * Exact counts: at the end every worker pauses holding its slots; once the dead are given
//!   back (`recover`), each peer's `conns` must equal what the live workers hold; then they
//!   report everything and leave, and the zone must be idle.
//! * No stall: picks keep being made (the kit's watchdog), and the workers leave in time.
//!
//! The longest time without a pick is measured by the workers (each pick swaps the time of
//! the last one, from any worker, for its own): the supervisor sees the count only between
//! its kills, so its view also holds every delay of its own (a slow `waitpid` or `fork`, being
//! descheduled) and is printed beside as its longest loop iteration.

use super::common::anon::AnonShared;
use super::common::procs::{fork, mono_ns};
use super::common::torture;
use super::common::torture::{Kills, Rng};
use super::{assert_idle, LIMIT};
use gomutex::upstream::{Peer, PeerSlot, PickError, UpstreamConfig, UpstreamZone};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

const WORKERS: usize = 6;
const PEERS: usize = 4;
/// The peers' `max_conns` (0: none).
const MAX_CONNS: [u64; PEERS] = [4, 6, 0, 0];

// Side mapping indices.
const STOP: usize = 0; // 1: pause holding; 2: report everything and leave
const VIOLATIONS: usize = 1;
const HELD: usize = 2; // + peer: one byte per worker
const MOST: usize = 8; // + peer: the most connections a picker counted
const PICKS: usize = 16; // + worker
const FAILURES: usize = 24; // + worker
const GEN: usize = 32; // + worker: bumped by the supervisor before it kills the worker
const PAUSED: usize = 40; // + worker
const NO_PEER: usize = 48; // + worker: picks that found no live peer
const LAST_PICK: usize = 56; // the time of the last pick (mono_ns), by any worker
const LONGEST: usize = 57; // the longest time between two picks, in ns

fn peers() -> Vec<Peer> {
    let ms = Duration::from_millis;
    vec![
        Peer::new("a")
            .weight(5)
            .max_conns(4)
            .max_fails(3)
            .fail_timeout(ms(40)),
        Peer::new("b")
            .weight(3)
            .max_conns(6)
            .max_fails(2)
            .fail_timeout(ms(20)),
        Peer::new("c").weight(1).max_fails(5).fail_timeout(ms(30)),
        Peer::new("d").backup(true).max_fails(0),
    ]
}

fn byte(word: u64, w: usize) -> u64 {
    (word >> (8 * w)) & 0xff
}

/// After a pick of limited peer `p`: the connections the workers not being killed hold.
fn check(side: &AnonShared, p: usize) {
    let gens: Vec<u64> = (0..WORKERS)
        .map(|w| side.at(GEN + w).load(SeqCst))
        .collect();
    let word = side.at(HELD + p).load(SeqCst);
    // A worker whose generation did not move around the load was alive at it (the
    // supervisor bumps it before the kill): its byte then counts at most its zone row.
    let sum: u64 = (0..WORKERS)
        .filter(|&w| side.at(GEN + w).load(SeqCst) == gens[w] && gens[w].is_multiple_of(2))
        .map(|w| byte(word, w))
        .sum();
    side.at(MOST + p).fetch_max(sum, SeqCst);
    if sum > MAX_CONNS[p] {
        eprintln!(
            "VIOLATION: {sum} connections to peer {p} (max_conns {})",
            MAX_CONNS[p]
        );
        side.at(VIOLATIONS).fetch_add(1, SeqCst);
    }
}

fn worker(z: &UpstreamZone, side: &AnonShared, w: usize, seed: u64) -> i32 {
    super::die_with_parent();
    let mut rng = Rng::new(seed);
    let mut held: Vec<PeerSlot<'_>> = Vec::new();
    let release = |s: PeerSlot<'_>, failure: bool| {
        side.at(HELD + s.peer()).fetch_sub(1 << (8 * w), SeqCst);
        if failure {
            side.at(FAILURES + w).fetch_add(1, SeqCst);
            s.failure();
        } else {
            s.success();
        }
    };
    loop {
        match side.at(STOP).load(SeqCst) {
            0 => {}
            1 => {
                side.at(PAUSED + w).store(1, SeqCst);
                while side.at(STOP).load(SeqCst) == 1 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                continue;
            }
            _ => {
                for s in held.drain(..) {
                    release(s, false);
                }
                return 0;
            }
        }
        if held.len() < 3 && rng.below(3) != 0 {
            match z.pick() {
                Ok(s) => {
                    let p = s.peer();
                    side.at(HELD + p).fetch_add(1 << (8 * w), SeqCst);
                    side.at(PICKS + w).fetch_add(1, SeqCst);
                    let now = mono_ns();
                    let last = side.at(LAST_PICK).swap(now, SeqCst);
                    if last != 0 {
                        side.at(LONGEST).fetch_max(now.saturating_sub(last), SeqCst);
                    }
                    if MAX_CONNS[p] != 0 {
                        check(side, p);
                    }
                    held.push(s);
                }
                Err(PickError::NoLivePeer) => {
                    side.at(NO_PEER + w).fetch_add(1, SeqCst);
                }
                Err(e) => panic!("{e}"),
            }
        } else if !held.is_empty() {
            let i = rng.below(held.len() as u64) as usize;
            let s = held.swap_remove(i);
            release(s, rng.below(5) == 0);
        }
        match rng.below(50) {
            0 => std::thread::sleep(Duration::from_micros(100 + rng.below(200))),
            1..=5 => {
                for _ in 0..rng.below(3000) {
                    std::hint::spin_loop();
                }
            }
            _ => {}
        }
    }
}

pub fn kill_torture() {
    let secs = torture::duration();
    let z = UpstreamZone::anonymous_with(&peers(), UpstreamConfig::new().processes(16)).unwrap();
    let side = AnonShared::counters(64);
    let seed = mono_ns();
    eprintln!("kill torture: {secs:?}, seed {seed:#x}");
    let mut seeds = Rng::new(seed);
    let mut spawn = |w: usize| {
        let s = seeds.next();
        let (z, side) = (&z, &side);
        fork(move || worker(z, side, w, s))
    };
    let mut pids: Vec<libc::pid_t> = (0..WORKERS).map(&mut spawn).collect();
    let picks = |side: &AnonShared| {
        (0..WORKERS)
            .map(|w| side.at(PICKS + w).load(SeqCst))
            .sum::<u64>()
    };
    let (mut force, mut forced_conns) = (0u64, 0u64);
    // The supervisor's longest loop iteration (between two looks at the counts).
    let mut slowest = (Duration::ZERO, Instant::now());
    let start = Instant::now();
    let mut rng = Rng::new(seed.rotate_left(17));
    let kills = torture::kill_loop(
        &mut pids,
        &mut rng,
        start + secs,
        Kills::EVERY_FEW_MS,
        |w, _| spawn(w),
        |w, _| {
            // Odd while the worker is being killed: its byte no longer counts.
            side.at(GEN + w).fetch_add(1, SeqCst);
        },
        |w, pid, _, rng| {
            for p in 0..PEERS {
                let b = byte(side.at(HELD + p).load(SeqCst), w);
                side.at(HELD + p).fetch_sub(b << (8 * w), SeqCst);
            }
            if rng.below(2) == 0 {
                force += 1;
                forced_conns += z.force_release(pid);
            }
            // Even again: the worker spawned next starts with no connections.
            side.at(GEN + w).fetch_add(1, SeqCst);
            Ok(())
        },
        || {
            slowest = (slowest.0.max(slowest.1.elapsed()), Instant::now());
            [picks(&side)]
        },
        |_, _| {},
    )
    .unwrap_or_else(|why| panic!("{why}"))
    .kills;
    let elapsed = start.elapsed();
    let longest = Duration::from_nanos(side.at(LONGEST).load(SeqCst));
    // Pause everyone holding their slots: the zone must count exactly what they hold.
    side.at(STOP).store(1, SeqCst);
    super::common::poll_until(
        LIMIT,
        Duration::from_micros(500),
        || "pause".into(),
        || (0..WORKERS).all(|w| side.at(PAUSED + w).load(SeqCst) == 1),
    );
    z.recover();
    let d = z.diagnostics();
    // Checked after the workers are gone (a failing assertion here would leave them paused).
    let mut wrong = Vec::new();
    for p in 0..PEERS {
        let held: u64 = (0..WORKERS)
            .map(|w| byte(side.at(HELD + p).load(SeqCst), w))
            .sum();
        if u64::from(d.peers[p].conns) != held {
            wrong.push(format!(
                "peer {p}: the zone counts {}, the workers hold {held}",
                d.peers[p].conns
            ));
        }
    }
    // A worker respawned just before the pause may not have picked yet (no row).
    if d.processes as usize > WORKERS {
        wrong.push(format!(
            "{} rows owned by {WORKERS} live workers",
            d.processes
        ));
    }
    side.at(STOP).store(2, SeqCst);
    torture::wait_for_exit(
        &pids,
        torture::STOP_LIMIT,
        |_, st| torture::exited_0(st),
        |_, _| {},
    )
    .unwrap_or_else(|why| panic!("{why}"));
    assert!(wrong.is_empty(), "{wrong:?}: {d:?}");
    z.recover();
    assert_idle(&z);
    let d = z.diagnostics();
    let total = picks(&side);
    let sum = |at: usize| {
        (0..WORKERS)
            .map(|w| side.at(at + w).load(SeqCst))
            .sum::<u64>()
    };
    let most: Vec<u64> = (0..PEERS).map(|p| side.at(MOST + p).load(SeqCst)).collect();
    eprintln!(
        "{total} picks ({:.0}/s) under {kills} kills; failures reported {}; no live peer {}; \
         force_release {force} (connections {forced_conns}); rows given back {} \
         (connections {}); most connections counted {most:?} (max_conns {MAX_CONNS:?}); \
         longest time without a pick {longest:?} (the supervisor's longest loop iteration \
         {:?})",
        total as f64 / elapsed.as_secs_f64(),
        sum(FAILURES),
        sum(NO_PEER),
        d.rows_given_back,
        d.conns_given_back,
        slowest.0,
    );
    assert_eq!(side.at(VIOLATIONS).load(SeqCst), 0, "max_conns exceeded");
    assert!(kills > 0 && total > 0);
}
