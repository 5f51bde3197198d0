//! Lookups under a shard's read side, across processes: two readers inside one shard at once,
//! a reader killed inside a lookup, a reader after a writer's death in the middle of an update.
//! Each race window is made with a crash point (`stop_at` / `crash_at` at `DICT_READING` or a
//! writer's point), never by timing.

use crate::linux::common::procs::{self, fork, reap, wait_limit};
use crate::linux::common::torture;
use gomutex::__crash as crash;
use gomutex::dict::{OwnedValue, ShmDict, Value};
use std::time::Duration;

/// How long a child doing one lookup or update may take (a deadlock otherwise).
const LIMIT: Duration = Duration::from_secs(10);

fn value_of(d: &ShmDict, k: &str) -> Option<Vec<u8>> {
    d.get(k).unwrap().map(|i| match i.value {
        OwnedValue::Bytes(b) => b,
        OwnedValue::Int(n) => n.to_le_bytes().to_vec(),
    })
}

/// A reader stopped inside a lookup (holding the shard's read side) does not keep another
/// process's lookup on the same shard out: both hold the read side at once. Under an
/// exclusive lock the second reader waits for the first, and the test fails at its limit.
pub fn two_readers_inside_one_shard() {
    let d = ShmDict::anonymous(1 << 16).unwrap();
    d.set("k", "v", None, 0).unwrap();
    let first = fork(|| {
        crash::stop_at(crash::DICT_READING);
        i32::from(value_of(&d, "k").as_deref() != Some(&b"v"[..]))
    });
    procs::wait_stopped(first);
    // The first reader is inside its lookup: another process reads (a get, a borrowed
    // get_with, a ttl) and finishes.
    let second = fork(|| {
        let ok = value_of(&d, "k").as_deref() == Some(&b"v"[..])
            && d.get_with("k", |v, _| matches!(v, Value::Bytes(b"v"))) == Ok(Some(true))
            && d.ttl("k") == Ok(None);
        i32::from(!ok)
    });
    assert_eq!(
        wait_limit(second, LIMIT, "a reader beside a reader"),
        0,
        "the second reader"
    );
    procs::signal(first, libc::SIGCONT);
    assert_eq!(wait_limit(first, LIMIT, "the first reader"), 0);
    // And the writer side is free again.
    d.set("k", "w", None, 0).unwrap();
    assert_eq!(value_of(&d, "k").as_deref(), Some(&b"w"[..]));
    d.check().unwrap();
}

/// A reader killed inside a lookup changes nothing, and its hold of the read side is given
/// back as the lock gives back a dead reader's (found by the writer waiting for it, without a
/// supervisor's `force_unlock`): a writer then proceeds.
pub fn reader_killed_inside_a_lookup() {
    for shards in [1, 4] {
        let cfg = gomutex::dict::DictConfig::new().shards(shards);
        let d = ShmDict::anonymous_with(1 << 18, cfg).unwrap();
        d.set("k", "v", None, 0).unwrap();
        let before = d.check().unwrap();
        let reader = fork(|| {
            crash::crash_at(crash::DICT_READING);
            let _ = d.get("k");
            1 // not reached: the reader dies inside
        });
        assert!(
            torture::killed(reap(reader)),
            "the reader did not die inside"
        );
        // A writer, in a process of its own so that a wedged lock fails the test at its limit.
        let writer = fork(|| i32::from(d.set("k", "new", None, 0).is_err()));
        assert_eq!(
            wait_limit(writer, LIMIT, "a writer after a dead reader"),
            0,
            "shards {shards}"
        );
        assert_eq!(value_of(&d, "k").as_deref(), Some(&b"new"[..]));
        let after = d.check().unwrap();
        assert_eq!(after.entries, before.entries, "shards {shards}");
        assert_eq!(d.stats().replayed, 0, "a reader has nothing to replay");
    }
}

/// A writer killed at each point of an update (a new entry beside the old one, and a value of
/// the same size written in place), and no supervisor: the next process to look the key up is
/// a reader. It sees the old value if the writer died before its commit, the new one after
/// (the reader repairs first: it replays the record as the next writer would), never half of
/// each; the record is replayed once.
pub fn reader_after_a_writer_died_mid_update() {
    let points = crate::linux::UPDATE_POINTS;
    // (old, new): a new entry of another size, or 40 bytes written over 40 in place.
    let updates: [(&[u8], &[u8]); 2] = [(&[1u8; 24], &[2u8; 300]), (&[3u8; 40], &[4u8; 40])];
    for (old, new) in updates {
        for (point, committed) in points {
            let d = ShmDict::anonymous(1 << 18).unwrap();
            for i in 0..50 {
                d.set(format!("other{i}"), &[i as u8; 32][..], None, 0)
                    .unwrap();
            }
            d.set("k", old, None, 0).unwrap();
            let writer = fork(|| {
                crash::crash_at(point);
                d.set("k", new, None, 0).unwrap();
                0
            });
            let st = reap(writer);
            let reached = torture::killed(st);
            let what = format!("{} bytes over {} at point {point}", new.len(), old.len());
            if !reached {
                // Not a point of this update (an in-place one has no new entry, a new entry
                // no in-place plan): it completed.
                assert_eq!(procs::exit_code(st), 0, "{what}");
                continue;
            }
            let reader = fork(|| {
                let seen = value_of(&d, "k");
                let borrowed = d.get_with("k", |v, _| match v {
                    Value::Bytes(b) => b.to_vec(),
                    Value::Int(_) => Vec::new(),
                });
                let want = if committed { new } else { old };
                i32::from(seen.as_deref() != Some(want) || borrowed != Ok(Some(want.to_vec())))
            });
            assert_eq!(
                wait_limit(reader, LIMIT, "a reader after a dead writer"),
                0,
                "{what}: the reader saw neither the old value nor the new, or the wrong one"
            );
            assert_eq!(d.stats().replayed, u64::from(committed), "{what}");
            let want = if committed { new } else { old };
            assert_eq!(value_of(&d, "k").as_deref(), Some(want), "{what}");
            d.check().unwrap_or_else(|e| panic!("{what}: {e}"));
            for i in 0..50 {
                let k = format!("other{i}");
                assert_eq!(value_of(&d, &k), Some(vec![i as u8; 32]), "{what}: {k}");
            }
        }
    }
}
