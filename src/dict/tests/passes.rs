//! Passes over the whole dictionary in slices (`keys`, `flush_expired`): every key once
//! whatever is written between two slices, each slice bounded, expired entries alone freed.

use super::*;
use std::collections::HashSet;

/// `keys` of shard 0 of `d` driven slice by slice, `between(n)` run after the `n`th slice
/// when another follows (no lock held then): the keys, the slices, the largest slice.
fn keys_by_slices(d: &ShmDict, mut between: impl FnMut(usize)) -> (Vec<Vec<u8>>, usize, usize) {
    let s = &d.shards[0];
    let (mut out, mut n, mut largest) = (Vec::new(), 0, 0);
    let mut at = Some(ops::Cursor::START);
    while let Some(c) = at {
        let (keys, next) = ShmDict::keys_slice(s, c, 0).unwrap();
        largest = largest.max(keys.len());
        out.extend(keys);
        at = next;
        n += 1;
        if at.is_some() {
            between(n);
        }
    }
    (out, n, largest)
}

/// Entries a slice may visit: its work over an entry's cost, and the last bucket's chain
/// (far shorter than this in a zone filled by the seeded hash).
const SLICE_ENTRIES: usize = ops::SLICE_WORK / 8 + 64;

#[test]
fn keys_returns_every_key_once_whatever_is_written_between_slices() {
    let d = dict(8 << 20);
    let stay: Vec<String> = (0..20_000).map(|i| format!("s{i:05}")).collect();
    for k in &stay {
        d.set(k, &[1u8; 16][..], None, 0).unwrap();
    }
    for i in 0..2000 {
        d.set(format!("d{i:04}"), "x", None, 0).unwrap();
    }
    let mut round = 0;
    let (got, slices, largest) = keys_by_slices(&d, |_| {
        // Between two slices: deletes, new keys, and updates of the keys that stay (beside
        // the old entry, and in place), in buckets before and after the cursor.
        for j in 0..20 {
            let i = round * 20 + j;
            if i < 2000 {
                d.delete(format!("d{i:04}")).unwrap();
            }
            d.set(format!("n{i:05}"), "y", None, 0).unwrap();
            let k = &stay[(i * 7919) % stay.len()];
            d.set(k, &[2u8; 100][..], None, 0).unwrap();
            let k = &stay[(i * 104_729) % stay.len()];
            d.set(k, &[3u8; 16][..], None, 0).unwrap();
        }
        round += 1;
    });
    assert!(slices > 10, "{slices} slices: the test needs several");
    assert!(largest <= SLICE_ENTRIES, "{largest} keys in one slice");
    let mut seen = HashSet::new();
    for k in &got {
        assert!(
            seen.insert(k.clone()),
            "{:?} returned twice",
            String::from_utf8_lossy(k)
        );
        assert!(matches!(k[0], b's' | b'd' | b'n'), "{k:?}");
    }
    for k in &stay {
        assert!(
            seen.contains(k.as_bytes()),
            "{k} stayed for the whole pass: missed"
        );
    }
    // And `keys` itself: everything, once.
    let all: HashSet<Vec<u8>> = d.keys(0).unwrap().into_iter().collect();
    assert_eq!(all.len(), d.stats().entries as usize);
    ok(&d);
}

#[test]
fn keys_in_slices_with_a_bound_across_shards() {
    let (cfg, need, map) = four_shards(4 << 20);
    let _ = need;
    let d = ShmDict::init_in(&map, 0, 4 << 20, cfg).unwrap();
    for i in 0..10_000 {
        d.set(format!("k{i}"), "v", None, 0).unwrap();
    }
    for max in [1, 7, 300, 2500, 9999, 10_000, 20_000] {
        let got = d.keys(max).unwrap();
        assert_eq!(got.len(), max.min(10_000), "keys({max})");
        assert_eq!(
            got.iter().collect::<HashSet<_>>().len(),
            got.len(),
            "keys({max})"
        );
    }
    let mut all = d.keys(0).unwrap();
    all.sort();
    let mut want: Vec<Vec<u8>> = (0..10_000).map(|i| format!("k{i}").into_bytes()).collect();
    want.sort();
    assert_eq!(all, want);
}

#[test]
fn flush_expired_frees_only_expired_entries_in_bounded_slices() {
    let d = dict(8 << 20);
    // A live entry at the LRU tail: the writes below free no expired entry themselves.
    d.set("first", "v", None, 0).unwrap();
    for i in 0..12_000 {
        let ttl = match i % 3 {
            0 => Some(Duration::from_millis(1)),
            1 => Some(Duration::from_secs(600)),
            _ => None,
        };
        d.set(format!("k{i:05}"), "v", ttl, 0).unwrap();
    }
    std::thread::sleep(Duration::from_millis(5));
    let s = &d.shards[0];
    let (mut freed, mut slices, mut largest) = (0, 0, 0);
    let mut at = Some(ops::Cursor::START);
    while let Some(c) = at {
        let before = freed;
        at = s
            .with(|z, now| z.flush_expired_slice(c, 0, &mut freed, now))
            .unwrap();
        largest = largest.max(freed - before);
        slices += 1;
        // Between two slices: a new entry that stays (maybe behind the cursor, maybe ahead).
        d.set(format!("x{slices}"), "v", Some(Duration::from_secs(600)), 0)
            .unwrap();
    }
    assert!(slices > 10, "{slices} slices");
    assert!(
        largest <= ops::SLICE_WORK / 32 + 64,
        "{largest} freed in one slice"
    );
    assert_eq!(freed, 4000);
    for i in 0..12_000 {
        let k = format!("k{i:05}");
        match i % 3 {
            0 => assert!(d.get_stale(&k).unwrap().is_none(), "{k} expired: freed"),
            _ => assert!(d.get(&k).unwrap().is_some(), "{k} live: kept"),
        }
    }
    for n in 1..=slices {
        assert!(d.get(format!("x{n}")).unwrap().is_some(), "x{n} live: kept");
    }
    assert_eq!(d.stats().entries as usize, 8001 + slices);
    ok(&d);
    // Through the API, with a bound, then the rest.
    for i in 0..50 {
        d.expire(format!("k{:05}", 3 * i + 1), Some(Duration::from_millis(1)))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(d.flush_expired(1).unwrap(), 1);
    assert_eq!(d.flush_expired(0).unwrap(), 49);
    assert_eq!(d.stats().entries as usize, 8001 + slices - 50);
    ok(&d);
}
