//! Passes over the whole dictionary (`keys`, `flush_expired`, `flush_all`) across processes:
//! a process stopped between two slices of a pass holds no lock, so a writer goes on, and
//! what the pass returns or frees stays what its docs promise; a process killed there leaves
//! a whole dictionary, some of the pass done and the rest as it was.
// Without the test-only `__crash-points` feature (a build of the published crate) the cases
// that arm crash points are compiled out: their helpers are then unused.
#![cfg_attr(
    not(feature = "__crash-points"),
    allow(dead_code, unused_imports, unused_variables, unused_mut)
)]

use crate::linux::common::procs::{fork, reap, signal, wait_limit, wait_stopped};
use crate::linux::common::torture;
use gomutex::__crash as crash;
use gomutex::dict::{DictConfig, ShmDict};
use std::collections::HashSet;
use std::time::Duration;

/// How long a child may take before it counts as deadlocked.
const LIMIT: Duration = Duration::from_secs(60);

/// Fork a child that runs `pass` and stops between its first two slices; while it is stopped
/// (holding no lock), `inspect` runs here and `write` in another child, which must finish: a
/// pass that held a lock there would leave it waiting (then `wait_limit` fails the test).
/// Then the first child goes on. Both must exit 0.
#[cfg(feature = "__crash-points")]
fn writer_between_slices(
    what: &str,
    pass: impl FnOnce() -> i32,
    inspect: impl FnOnce(),
    write: impl FnOnce() -> i32,
) {
    let pid = fork(|| {
        crash::stop_at(crash::DICT_SLICE);
        pass()
    });
    wait_stopped(pid);
    inspect();
    let writer = fork(write);
    assert_eq!(wait_limit(writer, LIMIT, what), 0, "{what}: the writer");
    signal(pid, libc::SIGCONT);
    assert_eq!(wait_limit(pid, LIMIT, what), 0, "{what}: the pass");
}

/// `keys` stopped between two slices while another process deletes keys, adds keys and
/// updates (in place and beside the old entry) keys that stay: every key that stayed is
/// returned exactly once, nothing twice, nothing that never was.
#[cfg(feature = "__crash-points")]
pub fn keys_lets_a_writer_in_between_slices() {
    const STAY: usize = 30_000;
    const GO: usize = 2_000;
    let d = ShmDict::anonymous(16 << 20).unwrap();
    for i in 0..STAY {
        d.set(format!("s{i:05}"), &[1u8; 16][..], None, 0).unwrap();
    }
    for i in 0..GO {
        d.set(format!("d{i:04}"), "x", None, 0).unwrap();
    }
    writer_between_slices(
        "keys",
        || {
            let keys = d.keys(0).unwrap();
            let mut seen = HashSet::new();
            for k in &keys {
                if !seen.insert(k.clone()) || !matches!(k[0], b's' | b'd' | b'n') {
                    eprintln!("keys: {:?} twice or unknown", String::from_utf8_lossy(k));
                    return 1;
                }
            }
            let stayed = keys.iter().filter(|k| k[0] == b's').count();
            if stayed != STAY {
                eprintln!("keys: {stayed} of the {STAY} keys that stayed");
                return 2;
            }
            0
        },
        || {},
        || {
            for i in 0..GO {
                d.delete(format!("d{i:04}")).unwrap();
                d.set(format!("n{i:04}"), "y", None, 0).unwrap();
                d.set(format!("s{:05}", i * 7 % STAY), &[2u8; 100][..], None, 0)
                    .unwrap();
                d.set(format!("s{:05}", i * 13 % STAY), &[3u8; 16][..], None, 0)
                    .unwrap();
            }
            0
        },
    );
    d.check().unwrap();
    assert_eq!(d.keys(0).unwrap().len(), STAY + GO);
}

/// Expired entries of the `flush_expired` cases.
const N: usize = 5_000;

/// A dictionary of `N` expired entries `e0`, `e1`, …, `also(d, i)` run after each is stored;
/// its LRU tail a live entry, so that the writes free no expired entry themselves.
fn expired<R>(also: impl Fn(&ShmDict, usize) -> R) -> ShmDict {
    let d = ShmDict::anonymous(16 << 20).unwrap();
    d.set("first", "v", None, 0).unwrap();
    for i in 0..N {
        d.set(format!("e{i}"), "v", Some(Duration::from_millis(1)), 0)
            .unwrap();
        also(&d, i);
    }
    std::thread::sleep(Duration::from_millis(5));
    d
}

/// `flush_expired` stopped between two slices while another process adds live keys: it frees
/// every expired entry (each there for the whole call) and nothing else.
#[cfg(feature = "__crash-points")]
pub fn flush_expired_lets_a_writer_in_between_slices() {
    let d = expired(|d, i| d.set(format!("l{i}"), "v", None, 0).unwrap());
    writer_between_slices(
        "flush_expired",
        || match d.flush_expired(0).unwrap() {
            N => 0,
            n => {
                eprintln!("flush_expired: {n} freed of {N}");
                1
            }
        },
        || {},
        || {
            for i in 0..N {
                d.set(format!("w{i}"), "v", None, 0).unwrap();
            }
            0
        },
    );
    d.check().unwrap();
    for i in 0..N {
        assert!(d.get_stale(format!("e{i}")).unwrap().is_none(), "e{i}");
        assert!(d.get(format!("l{i}")).unwrap().is_some(), "l{i}");
        assert!(d.get(format!("w{i}")).unwrap().is_some(), "w{i}");
    }
    assert_eq!(d.stats().entries as usize, 2 * N + 1);
}

/// Keys of the `flush_all` cases, in 4 shards.
const FLUSHED: usize = 4_000;

fn four_shards() -> ShmDict {
    let d = ShmDict::anonymous_with(4 << 20, DictConfig::new().shards(4)).unwrap();
    for i in 0..FLUSHED {
        d.set(format!("k{i}"), "v", None, 0).unwrap();
    }
    d
}

/// The keys `k*` without a live entry.
fn flushed(d: &ShmDict) -> HashSet<usize> {
    (0..FLUSHED)
        .filter(|i| d.get(format!("k{i}")).unwrap().is_none())
        .collect()
}

/// `flush_all` of 4 shards stopped after the first: that shard's keys are flushed, the others'
/// live; another process stores every key again; the pass goes on and flushes the other
/// shards: exactly the keys of the first shard survive (stored after it was flushed).
#[cfg(feature = "__crash-points")]
pub fn flush_all_lets_a_writer_in_between_shards() {
    let d = four_shards();
    let mut first = HashSet::new();
    writer_between_slices(
        "flush_all",
        || {
            d.flush_all().unwrap();
            0
        },
        || {
            first = flushed(&d);
            assert!(
                (1..FLUSHED).contains(&first.len()),
                "{} flushed by the first slice",
                first.len()
            );
        },
        || {
            for i in 0..FLUSHED {
                d.set(format!("k{i}"), "w", None, 0).unwrap();
            }
            0
        },
    );
    let now = flushed(&d);
    let live: HashSet<usize> = (0..FLUSHED).filter(|i| !now.contains(i)).collect();
    assert_eq!(
        live, first,
        "the first shard's keys, stored again, survive; no other"
    );
    d.check().unwrap();
}

/// A process killed between two slices holds no lock and leaves a whole dictionary:
/// `flush_all` some shards flushed and the rest intact, `flush_expired` some expired entries
/// freed and the rest there; a second call does the rest.
#[cfg(feature = "__crash-points")]
pub fn passes_killed_between_slices() {
    let kill = |d: &ShmDict, pass: fn(&ShmDict)| {
        let pid = fork(|| {
            crash::crash_at(crash::DICT_SLICE);
            pass(d);
            0
        });
        assert!(
            torture::killed(reap(pid)),
            "the child did not die between slices"
        );
        assert!(!d.force_unlock(pid), "it died holding a lock");
        d.check().unwrap();
    };
    let d = four_shards();
    kill(&d, |d| d.flush_all().unwrap());
    let n = flushed(&d).len();
    assert!((1..FLUSHED).contains(&n), "{n} flushed: some, not all");
    assert_eq!(d.stats().entries as usize, FLUSHED);
    d.flush_all().unwrap();
    assert_eq!(flushed(&d).len(), FLUSHED);
    d.check().unwrap();

    let d = expired(|_, _| 0);
    kill(&d, |d| {
        d.flush_expired(0).unwrap();
    });
    let left = d.stats().entries as usize - 1;
    assert!((1..N).contains(&left), "{left} left: some freed, not all");
    assert_eq!(d.flush_expired(0).unwrap(), left);
    assert_eq!(d.stats().entries, 1);
    d.check().unwrap();
}
