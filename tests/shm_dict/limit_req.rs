//! `gomutex::dict::RateLimiter` across forked workers: the rate holds on a clock the test
//! moves, and a worker killed while updating a bucket leaves it old or new.
// Without the test-only `__crash-points` feature (a build of the published crate) the cases
// that arm crash points are compiled out: their helpers are then unused.
#![cfg_attr(
    not(feature = "__crash-points"),
    allow(dead_code, unused_imports, unused_variables, unused_mut)
)]

use crate::linux::common::anon::AnonShared;
use crate::linux::common::procs::{self, fork, reap};
use crate::linux::common::torture;
use gomutex::__crash as crash;
use gomutex::dict::{Decision, RateLimiter, ShmDict};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

/// A key's bucket as stored: (last ms, excess in thousandths).
fn bucket(l: &RateLimiter, key: &str) -> Option<(u64, i64)> {
    l.dict()
        .get_with(key, |v, _| match v {
            gomutex::dict::Value::Bytes(b) if b.len() == 16 => Some((
                u64::from_le_bytes(b[..8].try_into().unwrap()),
                i64::from_le_bytes(b[8..].try_into().unwrap()),
            )),
            _ => None,
        })
        .unwrap()?
}

/// Two workers send 3 requests of one key at every tick of a shared clock, the clock moving a
/// millisecond only when both have sent theirs: at 100 r/s (burst 0) exactly one request per
/// 10 ms is accepted over both. A read-then-write that let the workers lose each other's
/// updates would accept more.
pub fn rate_across_two_workers() {
    const TICKS: u64 = 2_000;
    let l = RateLimiter::new(ShmDict::anonymous(64 << 10).unwrap(), 100, 0)
        .unwrap()
        .nodelay();
    // [clock, seen 0, seen 1, accepted 0, accepted 1, rejected 0, rejected 1]
    let book = AnonShared::counters(8);
    book.at(0).store(1, SeqCst);
    let pids: Vec<_> = (0..2)
        .map(|w| {
            let (l, book) = (&l, &book);
            fork(move || loop {
                let t = book.at(0).load(SeqCst);
                if t > TICKS {
                    return 0;
                }
                if book.at(1 + w).load(SeqCst) == t {
                    std::thread::yield_now();
                    continue;
                }
                for _ in 0..3 {
                    match l.check_at("k", t) {
                        Decision::Allowed => book.at(3 + w).fetch_add(1, SeqCst),
                        Decision::Rejected => book.at(5 + w).fetch_add(1, SeqCst),
                        Decision::Delay(d) => panic!("nodelay delayed {d:?}"),
                    };
                }
                book.at(1 + w).store(t, SeqCst);
            })
        })
        .collect();
    for t in 1..=TICKS {
        while (1..3).any(|i| book.at(i).load(SeqCst) != t) {
            std::thread::yield_now();
        }
        book.at(0).store(t + 1, SeqCst);
    }
    for pid in pids {
        assert_eq!(procs::exit_code(reap(pid)), 0, "a worker failed");
    }
    let accepted = book.at(3).load(SeqCst) + book.at(4).load(SeqCst);
    let rejected = book.at(5).load(SeqCst) + book.at(6).load(SeqCst);
    // Ticks 1..=2000 ms: accepted at 1, 11, ..., 1991.
    assert_eq!(accepted, TICKS / 10, "accepted over both workers");
    assert_eq!(accepted + rejected, TICKS * 6);
    l.dict().check().unwrap();
}

/// A worker killed at each crash point of its bucket update (a new key, then an existing
/// one) leaves the bucket as it was or as updated, never torn; another worker then goes on
/// and is counted from whichever it finds.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
pub fn worker_killed_while_updating_its_bucket() {
    let points = crate::linux::UPDATE_POINTS;
    for (point, committed) in points {
        for existing in [false, true] {
            // A new key's entry is written beside; an existing one's bucket in place.
            if (point == crash::DICT_ENTRY_WRITTEN && existing)
                || (point == crash::DICT_IN_PLACE && !existing)
            {
                continue;
            }
            let ctx = format!("point {point}, existing key {existing}");
            let l = RateLimiter::new(ShmDict::anonymous(64 << 10).unwrap(), 10, 5)
                .unwrap()
                .nodelay();
            if existing {
                assert_eq!(l.check_at("k", 1_000), Decision::Allowed);
            }
            let old = bucket(&l, "k");
            let new = Some((1_000, if existing { 1_000 } else { 0 }));
            let pid = fork(|| {
                gomutex::__crash::crash_at(point);
                l.check_at("k", 1_000);
                0
            });
            let st = reap(pid);
            assert!(
                torture::killed(st),
                "{ctx}: the worker did not die at the point ({})",
                procs::exit_code(st)
            );
            // Another worker goes on, finding the dead one's lock (the robust mutex).
            let seen = AnonShared::counters(2);
            let other = fork(|| {
                let b = bucket(&l, "k");
                let (last, excess) = b.unwrap_or((0, -1));
                seen.at(0).store(last, SeqCst);
                seen.at(1).store(excess as u64, SeqCst);
                match l.check_at("k", 1_000) {
                    Decision::Allowed => 0,
                    _ => 1,
                }
            });
            let code = procs::wait_limit(other, Duration::from_secs(30), "the other worker");
            assert_eq!(code, 0, "{ctx}: the other worker was not allowed");
            let found = match (seen.at(0).load(SeqCst), seen.at(1).load(SeqCst) as i64) {
                (_, -1) => None,
                b => Some(b),
            };
            assert!(found == old || found == new, "{ctx}: torn bucket {found:?}");
            // The update is one transaction (a new key's store, or an existing bucket's
            // words in place): the window was reached.
            assert_eq!(found == new, committed, "{ctx}: {found:?}");
            let after = bucket(&l, "k").unwrap();
            assert_eq!(after.1, found.map_or(0, |b| b.1 + 1_000), "{ctx}");
            l.dict().check().unwrap();
        }
    }
}

/// Two workers start together and each sends one request of every key of a list, in the
/// same order, all at one instant of the test's clock (burst 0): exactly one request per key
/// passes. A read and a write in separate lock holds lets both pass when the workers meet on
/// a key (they contend for the same lock, so they run interleaved).
pub fn one_request_per_key_passes_across_workers() {
    const KEYS: u64 = 20_000;
    let l = RateLimiter::new(ShmDict::anonymous(4 << 20).unwrap(), 1, 0)
        .unwrap()
        .nodelay();
    // [go, ready, accepted]
    let book = AnonShared::counters(4);
    let pids: Vec<_> = (0..2)
        .map(|_| {
            let (l, book) = (&l, &book);
            fork(move || {
                book.at(1).fetch_add(1, SeqCst);
                while book.at(0).load(SeqCst) == 0 {
                    std::hint::spin_loop();
                }
                for k in 0..KEYS {
                    if l.check_at(k.to_le_bytes(), 1_000) == Decision::Allowed {
                        book.at(2).fetch_add(1, SeqCst);
                    }
                }
                0
            })
        })
        .collect();
    while book.at(1).load(SeqCst) < 2 {
        std::thread::yield_now();
    }
    book.at(0).store(1, SeqCst);
    for pid in pids {
        assert_eq!(procs::exit_code(reap(pid)), 0, "a worker failed");
    }
    assert_eq!(l.dict().stats().evicted, 0, "the zone must hold every key");
    assert_eq!(book.at(2).load(SeqCst), KEYS, "requests passed");
}
