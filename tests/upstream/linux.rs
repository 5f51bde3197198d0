//! The cases of `upstream` (module docs of `main.rs`).
// Without the test-only `__crash-points` feature (a build of the published crate) the cases
// that arm crash points are compiled out: their helpers are then unused.
#![cfg_attr(
    not(feature = "__crash-points"),
    allow(dead_code, unused_imports, unused_variables, unused_mut)
)]

use gomutex::upstream::{Peer, PickError, UpstreamConfig, UpstreamZone};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

#[path = "../common/mod.rs"]
mod common;
use common::anon::AnonShared;
use common::procs::{fork, wait_limit};

#[path = "deaths.rs"]
mod deaths;
#[path = "snapshot.rs"]
mod snapshot;
#[path = "torture.rs"]
mod torture;

const LIMIT: Duration = Duration::from_secs(30);

fn zone(peers: &[Peer]) -> UpstreamZone {
    UpstreamZone::anonymous_with(peers, UpstreamConfig::new().processes(16)).unwrap()
}

/// In a child: be killed when the test process dies (a failing case must leave no child
/// waiting for ever).
fn die_with_parent() {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of the calling process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
}

/// Run `f` in `n` children at once (child `i` gets `i`); each must exit 0.
fn in_children(n: usize, f: impl Fn(usize) + Copy) {
    let pids: Vec<_> = (0..n)
        .map(|i| {
            fork(move || {
                f(i);
                0
            })
        })
        .collect();
    for pid in pids {
        assert_eq!(wait_limit(pid, LIMIT, "child"), 0);
    }
}

/// No connection counted, no row owned, once the rows of the processes gone are given back
/// (the children leave with `_exit`, without dropping their handles: as if killed).
fn assert_idle(z: &UpstreamZone) {
    z.recover();
    let d = z.diagnostics();
    let conns: Vec<u32> = d.peers.iter().map(|p| p.conns).collect();
    assert!(conns.iter().all(|&c| c == 0), "connections left: {conns:?}");
    assert_eq!(d.processes, 0, "rows left: {d:?}");
}

/// nginx's example (weights 5, 1, 1 give a a b a c a a) when every pick is made by another
/// process: the sequence is the zone's, not each process's.
fn sequence_across_processes() {
    let z = zone(&[Peer::new("a").weight(5), Peer::new("b"), Peer::new("c")]);
    let side = AnonShared::counters(8);
    for k in 0..7 {
        in_children(1, |_| {
            let s = z.pick().unwrap();
            side.at(k).store(s.peer() as u64, SeqCst);
        });
    }
    let seq: String = (0..7)
        .map(|k| ["a", "b", "c"][side.at(k).load(SeqCst) as usize])
        .collect();
    assert_eq!(seq, "aabacaa");
    assert_idle(&z);
}

/// 4 processes × 900 concurrent picks at 5:3:1: exactly 2000, 1200 and 400 (3600 picks are
/// 400 rounds of the zone's 9-pick cycle, whatever the interleaving).
fn exact_shares_across_processes() {
    let z = zone(&[
        Peer::new("a").weight(5),
        Peer::new("b").weight(3),
        Peer::new("c"),
    ]);
    let side = AnonShared::counters(3);
    in_children(4, |_| {
        for _ in 0..900 {
            let s = z.pick().unwrap();
            side.at(s.peer()).fetch_add(1, SeqCst);
        }
    });
    let got: Vec<u64> = (0..3).map(|i| side.at(i).load(SeqCst)).collect();
    assert_eq!(got, [2000, 1200, 400]);
    assert_eq!(z.diagnostics().epoch, 3600);
    assert_idle(&z);
}

/// `max_conns=3` on `a` across 6 processes: three processes holding a slot each fill it for
/// a fourth; and under 6 × 2000 concurrent picks, each holding its slot a while, no process
/// ever sees a fourth connection on `a`.
fn max_conns_across_processes() {
    let z = zone(&[Peer::new("a").max_conns(3), Peer::new("b")]);
    // Deterministic part: 3 holders (a, b, a, b, a: the holders are the a's), then a fourth.
    let side = AnonShared::counters(8);
    let holders: Vec<_> = (0..3)
        .map(|_| {
            fork(|| {
                die_with_parent();
                let mut kept = Vec::new();
                loop {
                    let s = z.pick().unwrap();
                    if s.peer() == 0 {
                        kept.push(s);
                        break;
                    }
                }
                side.at(0).fetch_add(1, SeqCst);
                while side.at(1).load(SeqCst) == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
                drop(kept);
                0
            })
        })
        .collect();
    common::poll_until(
        LIMIT,
        Duration::from_micros(200),
        || "holders".into(),
        || side.at(0).load(SeqCst) == 3,
    );
    let full = z.diagnostics().peers[0].conns;
    let fourth = fork(|| {
        for _ in 0..5 {
            assert_eq!(z.pick().unwrap().peer(), 1, "a is full");
        }
        0
    });
    let fourth = wait_limit(fourth, LIMIT, "fourth");
    // The holders leave before anything is asserted (a failure must not orphan them).
    side.at(1).store(1, SeqCst);
    for pid in holders {
        assert_eq!(wait_limit(pid, LIMIT, "holder"), 0);
    }
    assert_eq!(
        (full, fourth),
        (3, 0),
        "a's connections, the fourth process's exit"
    );
    assert_idle(&z);

    // Concurrent part: each process counts its connections to a in a shared counter while it
    // holds them (raised after the pick, lowered before the report).
    const IN_USE: usize = 2;
    const MOST: usize = 3;
    in_children(6, |i| {
        let mut rng = common::torture::Rng::new(0x9e37_79b9 + i as u64);
        for _ in 0..2000 {
            let s = z.pick().unwrap();
            if s.peer() == 0 {
                let now = side.at(IN_USE).fetch_add(1, SeqCst) + 1;
                side.at(MOST).fetch_max(now, SeqCst);
                for _ in 0..rng.below(2000) {
                    std::hint::spin_loop();
                }
                side.at(IN_USE).fetch_sub(1, SeqCst);
            }
            drop(s);
        }
    });
    let most = side.at(MOST).load(SeqCst);
    eprintln!("most connections seen on a: {most}");
    assert!(
        (1..=3).contains(&most),
        "{most} connections to a (max_conns=3)"
    );
    assert_idle(&z);
}

/// A failure reported by one process is seen by every other: after `max_fails` failures in
/// two processes, a third skips the peer for `fail_timeout`, and a success reported by
/// another after the peer was checked again clears them.
fn health_shared_across_processes() {
    let z = zone(&[
        Peer::new("a")
            .max_fails(2)
            .fail_timeout(Duration::from_millis(300)),
        Peer::new("b"),
    ]);
    for _ in 0..2 {
        in_children(1, |_| loop {
            let s = z.pick().unwrap();
            if s.peer() == 0 {
                s.failure();
                break;
            }
        });
    }
    let d = z.diagnostics();
    assert_eq!((d.peers[0].fails, d.peers[0].effective_weight), (2, 1));
    in_children(1, |_| {
        // Skipped while its last failure is within fail_timeout (checked as the picks go:
        // only the picks made within it are required to be b's).
        let t = std::time::Instant::now();
        for _ in 0..20 {
            let s = z.pick().unwrap();
            if t.elapsed() < Duration::from_millis(250) {
                assert_eq!(s.peer(), 1);
            }
        }
    });
    std::thread::sleep(Duration::from_millis(350));
    // Checked again after fail_timeout: it answers, in another process.
    in_children(1, |_| loop {
        let s = z.pick().unwrap();
        if s.peer() == 0 {
            s.success();
            break;
        }
    });
    assert_eq!(z.diagnostics().peers[0].fails, 0);
    assert_idle(&z);
}

/// A slot inherited across `fork` is the parent's: the child's drop gives nothing back, and
/// the child takes its own row.
fn inherited_slot_is_the_parents() {
    let z = zone(&[Peer::new("only").max_conns(1)]);
    let s = z.pick().unwrap();
    in_children(1, |_| {
        // The inherited slot, dropped in the child.
        let inherited = unsafe_copy(&s);
        drop(inherited);
        assert_eq!(z.diagnostics().peers[0].conns, 1, "the parent's connection");
        assert_eq!(z.pick().unwrap_err(), PickError::NoLivePeer);
        assert_eq!(z.diagnostics().processes, 2, "the child has its own row");
    });
    z.recover(); // the child's row (it exited without dropping its handle)
    assert_eq!(z.diagnostics().peers[0].conns, 1);
    drop(s);
    assert_eq!(z.diagnostics().peers[0].conns, 0);
    drop(z);
}

/// A bitwise copy of the parent's slot in the child (what the child owns after `fork`: the
/// same bytes; the parent's copy is never dropped in the child, which `_exit`s).
fn unsafe_copy<'a>(s: &gomutex::upstream::PeerSlot<'a>) -> gomutex::upstream::PeerSlot<'a> {
    // SAFETY: in a forked child, where the parent's `s` is never dropped (the child leaves
    // with `_exit`): this copy is the child's only owner of those bytes.
    unsafe { std::ptr::read(s) }
}

/// `Mapping`-backed named zone opened by a child by name.
fn named_zone_across_processes() {
    let name = format!("/gomutex-test-upstream-{}", std::process::id());
    let peers = [Peer::new("a").weight(2), Peer::new("b")];
    let z = UpstreamZone::create(&name, &peers, UpstreamConfig::new().processes(4)).unwrap();
    let side = AnonShared::counters(4);
    in_children(1, |_| {
        let o = UpstreamZone::open(&name).unwrap();
        for k in 0..3 {
            side.at(k).store(o.pick().unwrap().peer() as u64, SeqCst);
        }
    });
    gomutex::shm::unlink(&name).unwrap();
    let seq: Vec<u64> = (0..3).map(|k| side.at(k).load(SeqCst)).collect();
    assert_eq!(seq, [0, 1, 0]);
    assert_eq!(z.diagnostics().epoch, 3);
}

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[
        ("sequence_across_processes", sequence_across_processes),
        (
            "exact_shares_across_processes",
            exact_shares_across_processes,
        ),
        ("max_conns_across_processes", max_conns_across_processes),
        (
            "health_shared_across_processes",
            health_shared_across_processes,
        ),
        (
            "inherited_slot_is_the_parents",
            inherited_slot_is_the_parents,
        ),
        ("named_zone_across_processes", named_zone_across_processes),
        (
            "dead_holder_found_by_a_picker",
            deaths::dead_holder_found_by_a_picker,
        ),
        (
            "dead_holder_found_by_a_newcomer",
            deaths::dead_holder_found_by_a_newcomer,
        ),
        (
            "force_release_after_waitpid",
            deaths::force_release_after_waitpid,
        ),
        #[cfg(feature = "__crash-points")]
        ("killed_mid_pick", deaths::killed_mid_pick),
        #[cfg(feature = "__crash-points")]
        (
            "killed_after_commit_holding_the_lock",
            deaths::killed_after_commit_holding_the_lock,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "killed_mid_failure_report",
            deaths::killed_mid_failure_report,
        ),
        #[cfg(feature = "__crash-points")]
        ("killed_claiming_a_row", deaths::killed_claiming_a_row),
        #[cfg(feature = "__crash-points")]
        ("killed_giving_back_a_row", deaths::killed_giving_back_a_row),
        (
            "snapshot_torn_reads_never_seen",
            snapshot::snapshot_torn_reads_never_seen,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "snapshot_writer_killed_mid_publish",
            snapshot::snapshot_writer_killed_mid_publish,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "snapshot_reader_stopped_mid_read_blocks_nobody",
            snapshot::snapshot_reader_stopped_mid_read_blocks_nobody,
        ),
        ("kill_torture", torture::kill_torture),
    ];
    common::procs::run_cases("upstream", &args, tests);
}
