//! `gomutex::shm::ShmSnapshot` across processes (issue 37's reload piece): readers never see
//! a mix of two versions while the writer is SIGKILLed at random; a writer killed between
//! writing its copy and publishing leaves the old value; a reader stopped in the middle of a
//! read blocks no writer.

use super::common::anon::AnonShared;
use super::common::procs::{fork, kill9, reap, signal, wait_limit, wait_stopped};
use super::common::torture::Rng;
use super::LIMIT;
use gomutex::{__crash as crash, shm::ShmSnapshot};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// Version `v`'s value: `v % 300 + 1` bytes, each `v as u8`.
fn value(v: u64) -> Vec<u8> {
    vec![v as u8; (v % 300 + 1) as usize]
}

/// Whether `bytes` is version `v`'s value.
fn whole(v: u64, bytes: &[u8]) -> bool {
    v == 0 && bytes.is_empty() || bytes == value(v)
}

/// A writer publishing versions' values as fast as it can while SIGKILLed every 0.2–2 ms and
/// respawned; three readers check every read is one version's value, and that versions never
/// go back.
pub fn snapshot_torn_reads_never_seen() {
    let snap = ShmSnapshot::anonymous(512).unwrap();
    let side = AnonShared::counters(16);
    const STOP: usize = 0;
    const TORN: usize = 1;
    const READS: usize = 2; // + reader
    const BACKWARDS: usize = 8;
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (snap, side) = (&snap, &side);
            fork(move || {
                let (mut last, mut buf) = (0, Vec::new());
                while side.at(STOP).load(SeqCst) == 0 {
                    let v = snap.read_into(&mut buf);
                    if !whole(v, &buf) {
                        side.at(TORN).fetch_add(1, SeqCst);
                    }
                    if v < last {
                        side.at(BACKWARDS).fetch_add(1, SeqCst);
                    }
                    last = v;
                    side.at(READS + r).fetch_add(1, SeqCst);
                }
                0
            })
        })
        .collect();
    let writer = |snap: &ShmSnapshot| loop {
        // The next version is the one after the last published (a killed writer's may not be).
        let v = snap.version() + 1;
        assert_eq!(snap.publish(&value(v)).unwrap(), v);
    };
    let mut rng = Rng::new(super::common::procs::mono_ns());
    let end = Instant::now() + Duration::from_secs(1);
    let mut kills = 0;
    while Instant::now() < end {
        let pid = fork(|| writer(&snap));
        std::thread::sleep(Duration::from_micros(200 + rng.below(1800)));
        kill9(pid);
        reap(pid);
        kills += 1;
    }
    side.at(STOP).store(1, SeqCst);
    for pid in readers {
        assert_eq!(wait_limit(pid, LIMIT, "reader"), 0);
    }
    let reads: u64 = (0..3).map(|r| side.at(READS + r).load(SeqCst)).sum();
    eprintln!(
        "{reads} reads of {} versions under {kills} writer kills",
        snap.version()
    );
    assert_eq!(side.at(TORN).load(SeqCst), 0, "a read mixed two versions");
    assert_eq!(
        side.at(BACKWARDS).load(SeqCst),
        0,
        "a reader saw an older version"
    );
    assert!(reads > 0 && kills > 0);
    let (v, bytes) = snap.read();
    assert!(whole(v, &bytes));
    // The publish lock was taken back from every writer killed holding it.
    assert_eq!(snap.publish(b"after").unwrap(), v + 1);
}

/// A writer killed after writing its copy, before publishing: the old value, and the next
/// publish is whole.
pub fn snapshot_writer_killed_mid_publish() {
    let snap = ShmSnapshot::anonymous(64).unwrap();
    assert_eq!(snap.publish(b"old").unwrap(), 1);
    let pid = fork(|| {
        gomutex::__crash::crash_at(crash::SNAPSHOT_WRITTEN);
        let _ = snap.publish(b"half-published");
        0
    });
    assert_eq!(wait_limit(pid, LIMIT, "writer"), 128 + libc::SIGKILL);
    assert_eq!(snap.read(), (1, b"old".to_vec()));
    assert_eq!(snap.publish(b"new").unwrap(), 2);
    assert_eq!(snap.read(), (2, b"new".to_vec()));
}

/// A reader stopped in the middle of its copy blocks no writer; continued, it finds its copy
/// rewritten and reads again: the latest version, whole.
pub fn snapshot_reader_stopped_mid_read_blocks_nobody() {
    let snap = ShmSnapshot::anonymous(512).unwrap();
    snap.publish(&value(1)).unwrap();
    let side = AnonShared::counters(2);
    let pid = fork(|| {
        gomutex::__crash::stop_at(crash::SNAPSHOT_COPIED);
        let (v, bytes) = snap.read();
        side.at(0).store(v, SeqCst);
        i32::from(!whole(v, &bytes))
    });
    wait_stopped(pid);
    let t = Instant::now();
    for v in 2..=101 {
        assert_eq!(snap.publish(&value(v)).unwrap(), v);
    }
    eprintln!("100 publishes beside a stopped reader in {:?}", t.elapsed());
    signal(pid, libc::SIGCONT);
    assert_eq!(wait_limit(pid, LIMIT, "reader"), 0, "a mixed read");
    assert_eq!(side.at(0).load(SeqCst), 101);
}
