// Without the test-only `__crash-points` feature (a build of the published crate) the cases
// that arm crash points are compiled out: their helpers are then unused.
#![cfg_attr(
    not(feature = "__crash-points"),
    allow(dead_code, unused_imports, unused_variables, unused_mut)
)]
use gomutex::__crash as crash;
use gomutex::dict::{DictError, OwnedValue, ShmDict};
use std::time::Duration;

#[path = "../common/mod.rs"]
pub(crate) mod common;
use common::procs::{self, fork, reap};
use common::torture;

// ------------------------------------------------------------------ crash points

const POINTS: [(u32, &str); 8] = [
    (crash::DICT_ENTRY_WRITTEN, "entry written"),
    (crash::DICT_IN_PLACE, "planned in place"),
    (crash::DICT_LOGGED, "record written"),
    (crash::DICT_COMMITTED, "committed"),
    (crash::DICT_HALF_APPLIED, "half applied"),
    (crash::DICT_APPLIED, "applied"),
    (crash::DICT_BETWEEN, "between transactions"),
    (crash::DICT_SLICE, "between slices"),
];

/// The points of one update (a new entry beside the old one, or a value written in place),
/// and whether the update is committed when the writer dies there.
pub(crate) const UPDATE_POINTS: [(u32, bool); 6] = [
    (crash::DICT_ENTRY_WRITTEN, false),
    (crash::DICT_IN_PLACE, false),
    (crash::DICT_LOGGED, false),
    (crash::DICT_COMMITTED, true),
    (crash::DICT_HALF_APPLIED, true),
    (crash::DICT_APPLIED, true),
];

fn bytes(d: &ShmDict, k: &str) -> Option<Vec<u8>> {
    d.get_stale(k).unwrap().map(|i| match i.value {
        OwnedValue::Bytes(b) => b,
        OwnedValue::Int(n) => format!("int:{n}").into_bytes(),
    })
}

/// How many of `keys` have an entry, live or expired.
fn stale_left(d: &ShmDict, keys: &[&str]) -> usize {
    keys.iter().filter(|k| bytes(d, k).is_some()).count()
}

fn live(d: &ShmDict, k: &str) -> Option<Vec<u8>> {
    d.get(k).unwrap().map(|i| match i.value {
        OwnedValue::Bytes(b) => b,
        OwnedValue::Int(n) => format!("int:{n}").into_bytes(),
    })
}

/// One operation under test: how to set up the dictionary, the operation (run in a child
/// armed with a crash point), which points it reaches, and what the dictionary must show
/// after the child died at a point (`committed`: whether the first transaction committed).
struct Case {
    name: &'static str,
    setup: fn(&ShmDict),
    op: fn(&ShmDict),
    reaches: &'static [u32],
    /// The state before the operation's first commit and after it, as the checks see it.
    before: fn(&ShmDict) -> bool,
    after: fn(&ShmDict) -> bool,
}

const ALL: &[u32] = &[
    crash::DICT_ENTRY_WRITTEN,
    crash::DICT_LOGGED,
    crash::DICT_COMMITTED,
    crash::DICT_HALF_APPLIED,
    crash::DICT_APPLIED,
];
const NO_ENTRY: &[u32] = &[
    crash::DICT_LOGGED,
    crash::DICT_COMMITTED,
    crash::DICT_HALF_APPLIED,
    crash::DICT_APPLIED,
];
const ONE_WORD: &[u32] = &[
    crash::DICT_LOGGED,
    crash::DICT_COMMITTED,
    crash::DICT_APPLIED,
];
/// An update of the same size, written in place.
const IN_PLACE: &[u32] = &[
    crash::DICT_IN_PLACE,
    crash::DICT_LOGGED,
    crash::DICT_COMMITTED,
    crash::DICT_HALF_APPLIED,
    crash::DICT_APPLIED,
];
const MULTI: &[u32] = &[
    crash::DICT_LOGGED,
    crash::DICT_COMMITTED,
    crash::DICT_HALF_APPLIED,
    crash::DICT_APPLIED,
    crash::DICT_BETWEEN,
];
const MULTI_STORE: &[u32] = &[
    crash::DICT_ENTRY_WRITTEN,
    crash::DICT_LOGGED,
    crash::DICT_COMMITTED,
    crash::DICT_HALF_APPLIED,
    crash::DICT_APPLIED,
    crash::DICT_BETWEEN,
];

/// Entries of the cases of passes over the dictionary: more than one slice visits in the
/// crash points' 256 KiB zone.
const PASS: usize = 1500;

/// How many of the entries `e0 .. e{PASS}` are left.
fn expired_left(d: &ShmDict) -> usize {
    (0..PASS)
        .filter(|i| d.get_stale(format!("e{i}")).unwrap().is_some())
        .count()
}

const MULTI_SLICES: &[u32] = &[
    crash::DICT_LOGGED,
    crash::DICT_COMMITTED,
    crash::DICT_HALF_APPLIED,
    crash::DICT_APPLIED,
    crash::DICT_BETWEEN,
    crash::DICT_SLICE,
];

/// Fill `d` with 200-byte values under keys `f00000`, `f00001`, … (oldest first).
fn fill_200(d: &ShmDict) {
    let mut n = 0;
    while d
        .safe_add(format!("f{n:05}"), &[1u8; 200][..], None, 0)
        .is_ok()
    {
        n += 1;
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "set (new key)",
            setup: |d| {
                d.set("other", "o", None, 0).unwrap();
            },
            op: |d| {
                d.set("k", "new", None, 1).unwrap();
            },
            reaches: ALL,
            before: |d| bytes(d, "k").is_none(),
            after: |d| {
                live(d, "k").as_deref() == Some(b"new") && d.get("k").unwrap().unwrap().flags == 1
            },
        },
        Case {
            name: "set (replace, another size class)",
            setup: |d| {
                d.set("k", "old", None, 0).unwrap();
                d.set("other", "o", None, 0).unwrap();
            },
            op: |d| {
                d.set("k", &[9u8; 3000][..], None, 0).unwrap();
            },
            reaches: ALL,
            before: |d| live(d, "k").as_deref() == Some(b"old"),
            after: |d| live(d, "k") == Some(vec![9u8; 3000]),
        },
        Case {
            name: "add",
            setup: |_| {},
            op: |d| {
                d.add("k", "new", None, 0).unwrap();
            },
            reaches: ALL,
            before: |d| bytes(d, "k").is_none(),
            after: |d| live(d, "k").as_deref() == Some(b"new"),
        },
        Case {
            // Another size (two words): written beside the old entry.
            name: "replace",
            setup: |d| {
                d.set("k", "old", None, 0).unwrap();
            },
            op: |d| {
                d.replace("k", "a newer one", None, 0).unwrap();
            },
            reaches: ALL,
            before: |d| live(d, "k").as_deref() == Some(b"old"),
            after: |d| live(d, "k").as_deref() == Some(b"a newer one"),
        },
        Case {
            name: "replace (the same size: in place)",
            setup: |d| {
                d.set("k", "old", None, 0).unwrap();
                d.set("other", "o", None, 0).unwrap();
            },
            op: |d| {
                d.replace("k", "newer", None, 3).unwrap();
            },
            reaches: IN_PLACE,
            before: |d| {
                live(d, "k").as_deref() == Some(b"old") && d.get("k").unwrap().unwrap().flags == 0
            },
            after: |d| {
                live(d, "k").as_deref() == Some(b"newer")
                    && d.get("k").unwrap().unwrap().flags == 3
                    && live(d, "other").is_some()
            },
        },
        Case {
            name: "set (in place: bytes to a number, a TTL)",
            setup: |d| {
                d.set("k", &[7u8; 8][..], None, 0).unwrap();
            },
            op: |d| {
                d.set("k", 42i64, Some(Duration::from_secs(60)), 0).unwrap();
            },
            reaches: IN_PLACE,
            before: |d| live(d, "k") == Some(vec![7u8; 8]) && d.ttl("k") == Ok(None),
            after: |d| live(d, "k").as_deref() == Some(b"int:42") && d.ttl("k").unwrap().is_some(),
        },
        Case {
            name: "set (in place over a flushed entry)",
            setup: |d| {
                d.set("k", "old", None, 0).unwrap();
                d.flush_all().unwrap();
            },
            op: |d| {
                d.set("k", "new", None, 0).unwrap();
            },
            reaches: IN_PLACE,
            before: |d| live(d, "k").is_none() && bytes(d, "k").as_deref() == Some(b"old"),
            after: |d| live(d, "k").as_deref() == Some(b"new"),
        },
        Case {
            name: "update (in place, freeing an expired entry at the LRU tail)",
            setup: |d| {
                // "gone" at the LRU tail, expiring only once "k" is stored.
                d.set("gone", "v", None, 0).unwrap();
                d.update("k", None, |_| ((), Some([1u8; 24]))).unwrap();
                d.expire("gone", Some(Duration::from_millis(1))).unwrap();
                std::thread::sleep(Duration::from_millis(3));
            },
            op: |d| {
                d.update("k", None, |_| ((), Some([2u8; 24]))).unwrap();
            },
            reaches: IN_PLACE,
            before: |d| live(d, "k") == Some(vec![1u8; 24]) && bytes(d, "gone").is_some(),
            after: |d| live(d, "k") == Some(vec![2u8; 24]) && bytes(d, "gone").is_none(),
        },
        Case {
            name: "delete",
            setup: |d| {
                d.set("k", "old", None, 0).unwrap();
                d.set("other", "o", None, 0).unwrap();
            },
            op: |d| {
                assert!(d.delete("k").unwrap());
            },
            reaches: NO_ENTRY,
            before: |d| live(d, "k").as_deref() == Some(b"old"),
            after: |d| bytes(d, "k").is_none() && live(d, "other").is_some(),
        },
        Case {
            name: "incr (existing)",
            setup: |d| {
                d.set("k", 5i64, None, 0).unwrap();
                d.set("other", "o", None, 0).unwrap();
            },
            op: |d| {
                assert_eq!(d.incr("k", 1, None, None).unwrap().value, 6);
            },
            // One store in place: no transaction, no point to die at.
            reaches: &[],
            before: |d| d.get("k").unwrap().unwrap().value == OwnedValue::Int(5),
            after: |d| d.get("k").unwrap().unwrap().value == OwnedValue::Int(6),
        },
        Case {
            name: "incr (initialised)",
            setup: |_| {},
            op: |d| {
                d.incr("k", 1, Some(10), Some(Duration::from_secs(60)))
                    .unwrap();
            },
            reaches: ALL,
            before: |d| bytes(d, "k").is_none(),
            after: |d| {
                d.get("k").unwrap().unwrap().value == OwnedValue::Int(11)
                    && d.ttl("k").unwrap().is_some()
            },
        },
        Case {
            name: "expire",
            setup: |d| {
                d.set("k", "v", None, 0).unwrap();
            },
            op: |d| {
                d.expire("k", Some(Duration::from_secs(3600))).unwrap();
            },
            reaches: ONE_WORD,
            before: |d| d.ttl("k") == Ok(None),
            after: |d| d.ttl("k").unwrap().is_some(),
        },
        Case {
            // A hit is one store into its entry, no transaction: no point to die at.
            name: "get (marks used)",
            setup: |d| {
                d.set("k", "v", None, 0).unwrap();
                d.set("other", "o", None, 0).unwrap();
            },
            op: |d| {
                assert!(d.get("k").unwrap().is_some());
            },
            reaches: &[],
            before: |d| d.__lru_keys() == [b"other".to_vec(), b"k".to_vec()],
            after: |d| d.__lru_keys() == [b"other".to_vec(), b"k".to_vec()],
        },
        Case {
            name: "flush_all",
            setup: |d| {
                d.set("k", "v", None, 0).unwrap();
            },
            op: |d| d.flush_all().unwrap(),
            reaches: ONE_WORD,
            before: |d| live(d, "k").is_some(),
            after: |d| live(d, "k").is_none() && bytes(d, "k").is_some(),
        },
        Case {
            name: "flush_expired",
            setup: |d| {
                // "live" at the LRU tail: a write's freeing of expired entries at the tail
                // (however slow this setup runs) stops there.
                d.set("live", "v", None, 0).unwrap();
                for k in ["a", "b", "c"] {
                    d.set(k, "v", Some(Duration::from_millis(1)), 0).unwrap();
                }
                std::thread::sleep(Duration::from_millis(3));
            },
            op: |d| {
                assert_eq!(d.flush_expired(0).unwrap(), 3);
            },
            reaches: MULTI,
            // The first transaction frees one expired entry (the first the pass over the
            // index meets: the order of the buckets, the zone's hash); the others stay until
            // theirs.
            before: |d| stale_left(d, &["a", "b", "c"]) == 3,
            after: |d| stale_left(d, &["a", "b", "c"]) == 2 && live(d, "live").is_some(),
        },
        Case {
            name: "flush_expired (a pass of several slices)",
            setup: |d| {
                d.set("live", "v", None, 0).unwrap();
                for i in 0..PASS {
                    d.set(format!("e{i}"), "v", Some(Duration::from_millis(1)), 0)
                        .unwrap();
                }
                std::thread::sleep(Duration::from_millis(3));
            },
            op: |d| {
                assert_eq!(d.flush_expired(0).unwrap(), PASS);
            },
            reaches: MULTI_SLICES,
            before: |d| expired_left(d) == PASS,
            // Killed in the first transaction or after it: one entry freed; between two
            // slices: those of the first slice. The rest as they were.
            after: |d| (1..PASS).contains(&expired_left(d)) && live(d, "live").is_some(),
        },
        Case {
            name: "keys (a pass of several slices)",
            setup: |d| {
                for i in 0..PASS {
                    d.set(format!("e{i}"), "v", None, 0).unwrap();
                }
            },
            op: |d| {
                assert_eq!(d.keys(0).unwrap().len(), PASS);
            },
            // It only reads: between two slices is its one point.
            reaches: &[crash::DICT_SLICE],
            before: |d| d.keys(0).unwrap().len() == PASS,
            after: |d| d.keys(0).unwrap().len() == PASS,
        },
        Case {
            name: "lpush (new list)",
            setup: |d| {
                d.set("other", "o", None, 0).unwrap();
            },
            op: |d| {
                assert_eq!(d.lpush("k", b"a").unwrap(), 1);
            },
            reaches: ALL,
            before: |d| d.get_stale("k").unwrap().is_none(),
            after: |d| d.llen("k") == Ok(1),
        },
        Case {
            name: "rpush (existing list)",
            setup: |d| {
                d.rpush("k", b"a").unwrap();
            },
            op: |d| {
                assert_eq!(d.rpush("k", [5u8; 3000]).unwrap(), 2);
            },
            reaches: ALL,
            before: |d| d.llen("k") == Ok(1),
            after: |d| {
                d.llen("k") == Ok(2) && {
                    let last = d.rpop("k").unwrap();
                    d.rpush("k", last.as_deref().unwrap()).unwrap();
                    last == Some(vec![5u8; 3000])
                }
            },
        },
        Case {
            name: "lpop",
            setup: |d| {
                d.rpush("k", b"a").unwrap();
                d.rpush("k", b"b").unwrap();
            },
            op: |d| {
                assert_eq!(d.lpop("k").unwrap().as_deref(), Some(&b"a"[..]));
            },
            // In place: the list's bounds, one word (it is the LRU head already).
            reaches: ONE_WORD,
            before: |d| d.llen("k") == Ok(2),
            after: |d| d.llen("k") == Ok(1),
        },
        Case {
            name: "lpop (a list at the size limit, in a full zone: in place)",
            setup: |d| {
                // The first item alone takes 16 pages, then both the 32-page block; then the
                // rest of the zone is filled.
                let a = 16 * 4096 - 72;
                d.rpush("k", vec![1u8; a]).unwrap();
                d.rpush("k", vec![2u8; d.max_value_len() - 8 - 16 - a])
                    .unwrap();
                let mut n = 0;
                while d
                    .safe_add(format!("o{n:03}"), &[3u8; 1000][..], None, 0)
                    .is_ok()
                {
                    n += 1;
                }
                assert_eq!(d.free_space(), 0);
            },
            op: |d| {
                assert_eq!(d.lpop("k").unwrap(), Some(vec![1u8; 16 * 4096 - 72]));
            },
            // The bounds and the move to the LRU head, one transaction; nothing allocated.
            reaches: NO_ENTRY,
            before: |d| d.llen("k") == Ok(2) && d.stats().evicted == 0,
            after: |d| {
                d.llen("k") == Ok(1)
                    && d.stats().evicted == 0
                    && d.__lru_keys().first() == Some(&b"k".to_vec())
            },
        },
        Case {
            name: "rpop (the last item: the key goes)",
            setup: |d| {
                d.rpush("k", b"a").unwrap();
                d.set("other", "o", None, 0).unwrap();
            },
            op: |d| {
                assert_eq!(d.rpop("k").unwrap().as_deref(), Some(&b"a"[..]));
            },
            reaches: NO_ENTRY,
            before: |d| d.llen("k") == Ok(1),
            after: |d| d.get_stale("k").unwrap().is_none() && live(d, "other").is_some(),
        },
        Case {
            name: "set (evicting)",
            setup: |d| {
                fill_200(d);
            },
            op: |d| {
                assert!(d.set("f-new0", &[2u8; 200][..], None, 0).unwrap() >= 1);
            },
            reaches: MULTI_STORE,
            // The first transaction evicts the LRU tail, "f00000".
            before: |d| live(d, "f00000").is_some() && bytes(d, "f-new0").is_none(),
            after: |d| live(d, "f00000").is_none() && bytes(d, "f-new0").is_none(),
        },
        Case {
            name: "set (evicting past a used tail)",
            setup: |d| {
                fill_200(d);
                assert!(d.get("f00000").unwrap().is_some());
            },
            op: |d| {
                assert!(d.set("f-new0", &[2u8; 200][..], None, 0).unwrap() >= 1);
            },
            reaches: MULTI_STORE,
            // The first transaction gives the used tail, "f00000", its second chance: it moves
            // to the head (then "f00001" is evicted, then the entry stored).
            before: |d| d.__lru_keys().last() == Some(&b"f00000".to_vec()),
            after: |d| {
                d.__lru_keys().first() == Some(&b"f00000".to_vec()) && bytes(d, "f-new0").is_none()
            },
        },
        Case {
            name: "set (emptying a page of another size class)",
            setup: |d| {
                // Every page holds 32 of the oldest entries and 32 new ones: the 64 evictions
                // from the LRU tail would free no page.
                let mut n = 0;
                while d.safe_add(format!("k{n:05}"), 7i64, None, 0).is_ok() {
                    n += 1;
                }
                for i in (1..n).step_by(2) {
                    d.delete(format!("k{i:05}")).unwrap();
                }
                for j in 0..n / 2 {
                    d.safe_add(format!("n{j:05}"), 7i64, None, 0).unwrap();
                }
                assert_eq!(d.free_space(), 0);
            },
            op: |d| {
                assert_eq!(d.set("big", &[2u8; 200][..], None, 0).unwrap(), 64);
            },
            reaches: MULTI_STORE,
            // The first transaction frees the tail's page's first entry, "k00000" (or all 64).
            before: |d| live(d, "k00000").is_some() && bytes(d, "big").is_none(),
            after: |d| live(d, "k00000").is_none() && bytes(d, "big").is_none(),
        },
    ]
}

/// A child killed at every crash point of every operation: the dictionary passes `check()`,
/// and shows the state before the operation if the child died before its commit, after it if
/// it died after (completed by the next holder: `stats().replayed`). Every point an operation
/// should reach is reached (the child dies there), and only those.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
fn crash_points_every_operation() {
    for case in cases() {
        for &(point, what) in &POINTS {
            let d = ShmDict::anonymous(256 << 10).unwrap();
            (case.setup)(&d);
            d.check().unwrap();
            let replayed = d.stats().replayed;
            let pid = fork(|| {
                gomutex::__crash::crash_at(point);
                (case.op)(&d);
                0
            });
            let st = reap(pid);
            let reached = case.reaches.contains(&point);
            let ctx = format!("{} at {what}", case.name);
            if reached {
                assert!(
                    torture::killed(st),
                    "{ctx}: the child did not die at the point ({})",
                    procs::exit_code(st)
                );
                // Between two slices of a pass the child holds no lock.
                assert_eq!(
                    d.force_unlock(pid),
                    point != crash::DICT_SLICE,
                    "{ctx}: whether it died holding the lock"
                );
            } else {
                assert_eq!(
                    procs::exit_code(st),
                    0,
                    "{ctx}: not a point of this operation"
                );
            }
            if let Err(e) = d.check() {
                panic!("{ctx}: {e}");
            }
            if !reached {
                // The child completed the operation (its own assertions passed: exit 0).
                continue;
            }
            let committed = matches!(
                point,
                crash::DICT_COMMITTED | crash::DICT_HALF_APPLIED | crash::DICT_APPLIED
            ) || point == crash::DICT_BETWEEN
                || point == crash::DICT_SLICE
                || (point == crash::DICT_ENTRY_WRITTEN
                    && case.reaches.contains(&crash::DICT_BETWEEN));
            if committed {
                assert!(
                    (case.after)(&d),
                    "{ctx}: not the state after the operation's commit"
                );
            } else {
                assert!(
                    (case.before)(&d),
                    "{ctx}: not the state before the operation: {:?}",
                    d.__lru_keys()
                );
            }
            let was_replayed = matches!(
                point,
                crash::DICT_COMMITTED | crash::DICT_HALF_APPLIED | crash::DICT_APPLIED
            );
            assert_eq!(
                d.stats().replayed,
                replayed + u64::from(was_replayed),
                "{ctx}: replay count"
            );
            d.check().unwrap();
        }
    }
}

/// Workers forked from one parent count per-client hits with `incr`: the sums are exact, and
/// evictions of a small zone are reported, never silent.
fn counters_of_forked_workers() {
    let d = ShmDict::anonymous(1 << 20).unwrap();
    let pids: Vec<i32> = (0..4)
        .map(|w| {
            fork(|| {
                for i in 0..5000u64 {
                    let c = (i * 7 + w) % 50;
                    if d.incr(format!("client:{c}"), 1, Some(0), None).is_err() {
                        return 1;
                    }
                }
                0
            })
        })
        .collect();
    for p in pids {
        assert_eq!(procs::exit_code(reap(p)), 0);
    }
    let total: i64 = (0..50)
        .map(|c| {
            d.get(format!("client:{c}"))
                .unwrap()
                .unwrap()
                .value
                .as_int()
                .unwrap()
        })
        .sum();
    assert_eq!(total, 20_000);
    assert_eq!(
        d.incr("client:0", i64::MAX, None, None),
        Err(DictError::Overflow)
    );
    d.check().unwrap();
}

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[
        ("counters_of_forked_workers", counters_of_forked_workers),
        #[cfg(feature = "__crash-points")]
        ("crash_points_every_operation", crash_points_every_operation),
        #[cfg(feature = "__crash-points")]
        (
            "two_readers_inside_one_shard",
            crate::readers::two_readers_inside_one_shard,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "reader_killed_inside_a_lookup",
            crate::readers::reader_killed_inside_a_lookup,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "reader_after_a_writer_died_mid_update",
            crate::readers::reader_after_a_writer_died_mid_update,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "keys_lets_a_writer_in_between_slices",
            crate::passes::keys_lets_a_writer_in_between_slices,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "flush_expired_lets_a_writer_in_between_slices",
            crate::passes::flush_expired_lets_a_writer_in_between_slices,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "flush_all_lets_a_writer_in_between_shards",
            crate::passes::flush_all_lets_a_writer_in_between_shards,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "passes_killed_between_slices",
            crate::passes::passes_killed_between_slices,
        ),
        ("kill_torture", crate::torture::kill_torture),
        ("corruption_fuzz", crate::corrupt::corruption_fuzz),
        (
            "limit_req_rate_across_two_workers",
            crate::limit_req::rate_across_two_workers,
        ),
        (
            "limit_req_one_request_per_key_passes_across_workers",
            crate::limit_req::one_request_per_key_passes_across_workers,
        ),
        #[cfg(feature = "__crash-points")]
        (
            "limit_req_worker_killed_while_updating_its_bucket",
            crate::limit_req::worker_killed_while_updating_its_bucket,
        ),
    ];
    procs::run_cases("shm_dict", &args, tests);
}
