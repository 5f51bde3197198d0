//! The rules in one process, with the clock given: nginx's sequences, passive health checks,
//! backups, `max_conns`, and the fork rules of rows and slots.

use super::*;
use std::time::Duration;

/// A start far from 0 (the state's "never checked").
const T0: u64 = 1_000_000_000;

fn zone(peers: &[Peer]) -> UpstreamZone {
    UpstreamZone::anonymous_with(peers, UpstreamConfig::new().processes(4)).unwrap()
}

/// Pick at `now` and report at once: the peer's name.
fn turn(z: &UpstreamZone, now: u64, failure: bool) -> Option<String> {
    let s = z.pick_at(&mut Tried::new(), now).ok()?;
    let name = z.name(s.peer()).to_string();
    s.report_at(failure, now);
    Some(name)
}

fn names(z: &UpstreamZone, n: usize, now: u64) -> String {
    (0..n).map(|_| turn(z, now, false).unwrap()).collect()
}

#[test]
fn nginx_sequence_5_1_1() {
    // nginx's comment on ngx_http_upstream_get_peer (and its docs): weights 5, 1, 1 give
    // { a, a, b, a, c, a, a }.
    let z = zone(&[Peer::new("a").weight(5), Peer::new("b"), Peer::new("c")]);
    assert_eq!(names(&z, 7, T0), "aabacaa");
    assert_eq!(names(&z, 7, T0), "aabacaa"); // and again: the weights are back at 0
    assert_eq!(z.diagnostics().epoch, 14);
}

#[test]
fn exact_shares_5_3_1() {
    let z = zone(&[
        Peer::new("a").weight(5),
        Peer::new("b").weight(3),
        Peer::new("c"),
    ]);
    let seq = names(&z, 900, T0);
    let count = |c| seq.chars().filter(|&x| x == c).count();
    assert_eq!((count('a'), count('b'), count('c')), (500, 300, 100));
    // Smooth: never more than two a's in a row at 5:3:1.
    assert!(!seq.contains("aaa"), "{}", &seq[..27]);
}

#[test]
fn failed_peer_skipped_for_fail_timeout_then_tried_once() {
    let z = zone(&[
        Peer::new("a")
            .max_fails(2)
            .fail_timeout(Duration::from_millis(1000)),
        Peer::new("b"),
    ]);
    // Two failures of a (equal weights: a, b, a, b ...).
    assert_eq!(turn(&z, T0, true).unwrap(), "a");
    assert_eq!(turn(&z, T0, false).unwrap(), "b");
    assert_eq!(z.diagnostics().peers[0].fails, 1);
    assert!(!z.diagnostics_at(T0).peers[0].unavailable); // 1 < max_fails
    assert_eq!(turn(&z, T0 + 10, true).unwrap(), "a");
    assert!(z.diagnostics_at(T0 + 10).peers[0].unavailable);
    assert!(z.diagnostics_at(T0 + 1010).peers[0].unavailable);
    assert!(!z.diagnostics_at(T0 + 1011).peers[0].unavailable);
    // Skipped while now - checked <= fail_timeout.
    assert_eq!(names(&z, 4, T0 + 1010), "bbbb");
    // After it, a takes part again (its current weight, lowered by its last pick, decides
    // when: within two picks here); it fails again: skipped for another fail_timeout.
    assert_eq!(until_a(&z, T0 + 1011, true), "ba");
    assert_eq!(names(&z, 3, T0 + 2011), "bbb");
    // Tried once more, and this time it answers: its failures are cleared.
    assert!(until_a(&z, T0 + 2012, false).ends_with('a'));
    assert_eq!(z.diagnostics().peers[0].fails, 0);
    assert!(!z.diagnostics_at(T0 + 2012).peers[0].unavailable);
    assert_eq!(names(&z, 4, T0 + 2013).matches('a').count(), 2);
}

/// Pick (a's report: `a_fails`; b's: success) until a is picked: the names.
fn until_a(z: &UpstreamZone, now: u64, a_fails: bool) -> String {
    let mut seq = String::new();
    while !seq.ends_with('a') && seq.len() < 10 {
        let s = z.pick_at(&mut Tried::new(), now).unwrap();
        let a = s.peer() == 0;
        seq.push(if a { 'a' } else { 'b' });
        s.report_at(a && a_fails, now);
    }
    seq
}

#[test]
fn effective_weight_drops_on_failure_and_recovers() {
    let z = zone(&[
        Peer::new("a").weight(4).max_fails(2),
        Peer::new("b").weight(4),
    ]);
    let s = z.pick_at(&mut Tried::new(), T0).unwrap();
    assert_eq!(s.peer(), 0);
    s.report_at(true, T0);
    // 4 - 4 / 2
    assert_eq!(z.diagnostics().peers[0].effective_weight, 2);
    names(&z, 1, T0);
    assert_eq!(z.diagnostics().peers[0].effective_weight, 3); // +1 per pick it takes part in
    names(&z, 3, T0);
    assert_eq!(z.diagnostics().peers[0].effective_weight, 4); // not above its weight
                                                              // Many failures: not below 0.
    let z = zone(&[Peer::new("a").weight(3).max_fails(1), Peer::new("b")]);
    for _ in 0..3 {
        let s = z.pick_at(&mut Tried::new(), T0).unwrap();
        let p = s.peer();
        s.report_at(p == 0, T0);
        // Clear a's failures so it stays eligible (a success after a check).
    }
    assert!(z.diagnostics().peers[0].effective_weight >= 0);
}

#[test]
fn backups_only_when_every_primary_is_unavailable() {
    let z = zone(&[
        Peer::new("a").max_fails(1),
        Peer::new("b").max_conns(1),
        Peer::new("c").backup(true),
    ]);
    assert!(!names(&z, 20, T0).contains('c'));
    z.set_down(0, true); // a down
    let held = z.pick_at(&mut Tried::new(), T0).unwrap(); // b, now full
    assert_eq!(held.peer(), 1);
    assert_eq!(names(&z, 3, T0), "ccc");
    drop(held);
    assert_eq!(names(&z, 3, T0), "bbb"); // a primary is back: no backup
    z.set_down(0, false);
    assert_eq!(turn(&z, T0, true).unwrap(), "a"); // a fails (max_fails 1)
    let held = z.pick_at(&mut Tried::new(), T0).unwrap();
    assert_eq!(z.name(held.peer()), "b");
    assert_eq!(names(&z, 2, T0), "cc");
    drop(held);
}

#[test]
fn a_single_peer_is_never_skipped_for_failures() {
    let z = zone(&[Peer::new("only").max_fails(1)]);
    for _ in 0..5 {
        assert_eq!(turn(&z, T0, true).unwrap(), "only");
    }
    assert_eq!(z.diagnostics().peers[0].fails, 0); // nginx does not count them
                                                   // But down or full: none.
    let z = zone(&[Peer::new("only").max_conns(1)]);
    let s = z.pick_at(&mut Tried::new(), T0).unwrap();
    assert_eq!(
        z.pick_at(&mut Tried::new(), T0).unwrap_err(),
        PickError::NoLivePeer
    );
    drop(s);
    z.set_down(0, true);
    assert!(z.pick_at(&mut Tried::new(), T0).is_err());
}

#[test]
fn max_conns_counts_open_slots() {
    let z = zone(&[Peer::new("a").max_conns(2), Peer::new("b")]);
    let held: Vec<_> = (0..4)
        .map(|_| z.pick_at(&mut Tried::new(), T0).unwrap())
        .collect();
    let on_a = held.iter().filter(|s| s.peer() == 0).count();
    assert_eq!(on_a, 2);
    assert_eq!(z.diagnostics().peers[0].conns, 2);
    assert_eq!(names(&z, 3, T0), "bbb"); // a full
    drop(held);
    let d = z.diagnostics();
    assert_eq!((d.peers[0].conns, d.peers[1].conns), (0, 0));
    assert!(names(&z, 3, T0).contains('a'));
}

#[test]
fn retries_skip_the_tried() {
    let z = zone(&[
        Peer::new("a").weight(3),
        Peer::new("b"),
        Peer::new("c").backup(true),
    ]);
    let mut tried = Tried::new();
    let mut order = Vec::new();
    while let Ok(s) = z.pick_at(&mut tried, T0) {
        order.push(s.peer());
    }
    // The primaries, then the backup.
    assert_eq!(order, [0, 1, 2]);
}

#[test]
fn corrupt_state_never_panics() {
    let z = zone(&[Peer::new("a").weight(2), Peer::new("b")]);
    let p = z.parts();
    for s in p.state {
        s.current_weight.store(i64::MAX, Relaxed);
        s.effective_weight.store(i64::MIN, Relaxed);
        s.fails.store(u32::MAX, Relaxed);
    }
    for c in p.conns {
        c.store(u32::MAX, Relaxed);
    }
    for i in 0..10 {
        let _ = turn(&z, T0 + i, i % 2 == 0);
    }
    let _ = z.diagnostics();
}

#[test]
fn config_checks() {
    assert!(UpstreamZone::anonymous(&[]).is_err());
    assert!(UpstreamZone::anonymous(&[Peer::new("a").weight(0)]).is_err());
    assert!(UpstreamZone::anonymous(&[Peer::new("a").backup(true)]).is_err());
    let many: Vec<_> = (0..65).map(|i| Peer::new(format!("p{i}"))).collect();
    assert!(UpstreamZone::anonymous(&many).is_err());
    assert!(UpstreamZone::anonymous(&many[..64]).is_ok());
    let long = "x".repeat(100);
    let z = zone(&[Peer::new(long)]);
    assert_eq!(z.name(0).len(), MAX_NAME);
}
