//! Memory: flushes, eviction (expired first, LRU with a second chance), fragmentation, the
//! largest transactions.

use super::*;

#[test]
fn flush_all_then_flush_expired_frees_everything() {
    let d = dict(1 << 20);
    let free0 = d.free_space();
    for i in 0..1000 {
        d.set(format!("key{i}"), &vec![1u8; i % 300], None, 0)
            .unwrap();
    }
    assert!(d.free_space() < free0);
    assert_eq!(d.keys(0).unwrap().len(), 1000);
    assert_eq!(d.keys(10).unwrap().len(), 10);
    d.flush_all().unwrap();
    assert!(d.get("key1").unwrap().is_none());
    assert!(d.keys(0).unwrap().is_empty());
    d.set("after", "1", None, 0).unwrap();
    assert_eq!(d.keys(0).unwrap(), vec![b"after".to_vec()]);
    // That write freed the 2 expired entries at the LRU tail first (lua_shared_dict's rule).
    assert_eq!(d.stats().entries, 999);
    assert_eq!(d.flush_expired(10).unwrap(), 10);
    assert_eq!(d.flush_expired(0).unwrap(), 988);
    assert!(d.delete("after").unwrap());
    assert_eq!(d.free_space(), free0, "every page back, merged");
    let r = ok(&d);
    assert_eq!((r.entries, r.slab_pages, r.used_bytes), (0, 0, 0));
}

#[test]
fn fill_flush_refill_gives_the_same_count() {
    let d = dict(256 << 10);
    let fill = |d: &ShmDict| {
        let mut n = 0;
        while d
            .safe_add(format!("entry-{n:06}"), &[n as u8; 40][..], None, 0)
            .is_ok()
        {
            n += 1;
        }
        n
    };
    let first = fill(&d);
    assert!(first > 1000, "{first}");
    // Full for entries of this size class (same key length) without evicting.
    assert_eq!(
        d.safe_set("entry-999999", &[0u8; 40][..], None, 0),
        Err(DictError::NoMemory)
    );
    ok(&d);
    d.flush_all().unwrap();
    assert_eq!(d.flush_expired(0).unwrap(), first);
    assert_eq!(ok(&d).entries, 0);
    assert_eq!(fill(&d), first);
    ok(&d);
}

#[test]
fn eviction_takes_expired_first_then_lru() {
    let d = dict(128 << 10);
    // Fill with live entries, some touched recently.
    let n = fill_100(&d);
    // k0 is the least recently used; touch it so k1 is.
    assert!(d.get("k0").unwrap().is_some());
    // A full dict: set evicts from the LRU tail, k1 first.
    let ev = d.set("new", &[1u8; 100][..], None, 0).unwrap();
    assert!(ev >= 1, "{ev}");
    assert!(d.get("k1").unwrap().is_none());
    assert!(d.get("k0").unwrap().is_some());
    ok(&d);
    // An expired entry in the middle goes before any live one.
    d.expire(format!("k{}", n / 2), Some(Duration::from_millis(1)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let before = d.stats().evicted;
    assert_eq!(d.set("new2", &[1u8; 100][..], None, 0), Ok(0));
    assert_eq!(d.stats().evicted, before);
    assert!(d.get_stale(format!("k{}", n / 2)).unwrap().is_none());
    // safe_set never evicts a live entry.
    assert_eq!(
        d.safe_set("new3", &[1u8; 100][..], None, 0),
        Err(DictError::NoMemory)
    );
    assert!(d.get("new3").unwrap().is_none());
    ok(&d);
}

#[test]
fn churn_against_a_model_does_not_fragment() {
    // At most ~40 % of the zone is live at any time: a NoMemory would be fragmentation.
    let d = dict(2 << 20);
    let mut model: HashMap<String, Vec<u8>> = HashMap::new();
    let mut x = 0x1234_5678u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..40_000 {
        let k = format!("k{}", rnd() % 300);
        match rnd() % 10 {
            0..=5 => {
                let n = match rnd() % 20 {
                    0 => (rnd() % 20_000) as usize,
                    _ => (rnd() % 1500) as usize,
                };
                let v = vec![(i % 251) as u8; n];
                d.safe_set(&k, &v, None, 0).unwrap();
                model.insert(k, v);
            }
            6..=7 => {
                assert_eq!(d.delete(&k).unwrap(), model.remove(&k).is_some());
            }
            _ => assert_eq!(bytes(&d, &k).as_ref(), model.get(&k)),
        }
        if i % 5000 == 0 {
            ok(&d);
        }
    }
    ok(&d);
    for k in model.keys().cloned().collect::<Vec<_>>() {
        d.delete(&k).unwrap();
    }
    let r = ok(&d);
    assert_eq!((r.entries, r.slab_pages, r.large_blocks), (0, 0, 0));
    assert_eq!(
        d.free_space(),
        d.shards[0].g.npages as usize * PAGE,
        "all pages merged back"
    );
}

/// In a zone of 2^16 pages the first allocation splits 16 buddy orders, and replacing its
/// entry by a large one splits again and merges every order back: the largest plans, which
/// must fit the redo record.
#[test]
fn the_largest_plans_fit_the_redo_record() {
    let d = dict(256 << 20);
    let all = d.free_space();
    d.set("a", "x", None, 0).unwrap();
    d.set("a", &vec![1u8; 5000][..], None, 0).unwrap();
    d.set("a", "y", None, 0).unwrap();
    ok(&d);
    assert!(d.delete("a").unwrap());
    assert_eq!(d.free_space(), all, "merged back into one block per order");
    ok(&d);
}

#[test]
fn a_hit_gives_its_entry_a_second_chance_at_eviction() {
    let d = dict(128 << 10);
    let n = fill_100(&d);
    assert!(n > 2 * 16, "enough entries for several batches: {n}");
    // k0 and k1 are the oldest, but used: the first eviction skips them for k2.
    assert!(d.get("k0").unwrap().is_some() && d.get("k1").unwrap().is_some());
    assert!(d.set("new", &[1u8; 100][..], None, 0).unwrap() >= 1);
    assert!(
        d.get_stale("k2").unwrap().is_none(),
        "the oldest unused entry goes first"
    );
    assert!(d.get_stale("k0").unwrap().is_some() && d.get_stale("k1").unwrap().is_some());
    ok(&d);
    // Every entry used: a pass gives each its chance (several committed batches), then the
    // oldest, unused now, goes.
    for i in 0..n {
        let _ = d.get(format!("k{i}")).unwrap();
    }
    let _ = d.get("new").unwrap();
    assert!(d.set("new2", &[1u8; 100][..], None, 0).unwrap() >= 1);
    assert!(
        d.get_stale("k3").unwrap().is_none(),
        "the tail after the pass"
    );
    assert!(d.get_stale("new").unwrap().is_some());
    ok(&d);
}

/// Removing expired entries does not use up the budget of live evictions (nginx's rule: drop
/// the expired, then evict the least recently used until the entry fits). Here every page
/// keeps one live entry among 63 expired ones, more expired entries than the old shared budget
/// of 1089 steps: freeing them frees no page, and one live eviction (the LRU tail, alone in its
/// page once its neighbours are gone) does (found by a review: `NoMemory` instead).
#[test]
fn expired_entries_do_not_use_up_the_eviction_budget() {
    let d = dict(192 << 10);
    let n = fill_small(&d);
    assert!(n / 64 * 63 > 1100, "{n}");
    for i in (0..n).filter(|i| i % 64 != 0) {
        d.expire(format!("k{i:05}"), Some(Duration::from_millis(1)))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(5));
    // A value of another size class: it needs a free page.
    assert_eq!(d.set("big", &[1u8; 200][..], None, 0), Ok(1));
    assert!(
        d.get("k00000").unwrap().is_none(),
        "the LRU tail was evicted"
    );
    for i in (64..n).step_by(64) {
        assert!(
            d.get(format!("k{i:05}")).unwrap().is_some(),
            "{i}: live, not evicted"
        );
    }
    assert_eq!(d.stats().evicted, 1);
    ok(&d);
}

/// A store that cannot succeed evicts nothing: the entries of four aligned pages must go for a
/// value of 12000 bytes, more than the 64 live evictions one store may make, so it fails, and
/// every entry is still there (found by a review: 64 entries were lost).
#[test]
fn a_store_that_fails_evicts_nothing() {
    let d = dict(128 << 10);
    let n = fill_small(&d);
    let before = ok(&d);
    let big = vec![1u8; 12_000];
    assert_eq!(d.set("big", &big, None, 0), Err(DictError::NoMemory));
    assert_eq!(d.add("big", &big, None, 0), Err(DictError::NoMemory));
    assert_eq!(d.safe_set("big", &big, None, 0), Err(DictError::NoMemory));
    assert_eq!(d.stats().evicted, 0);
    assert_eq!(ok(&d), before);
    for i in 0..n {
        assert!(d.get(format!("k{i:05}")).unwrap().is_some(), "{i}");
    }
    // Expired entries are not freed by a failing store either.
    for i in 0..n {
        d.expire(format!("k{i:05}"), Some(Duration::from_millis(1)))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(5));
    // Still too large with everything expired? No: all of it may go now, and it fits.
    assert_eq!(d.set("big", &big, None, 0), Ok(0));
    ok(&d);
}

/// An update that does not fit beside the key's old entry fails and leaves the old entry (and
/// everything else) as it was.
#[test]
fn an_update_that_cannot_fit_beside_the_old_entry_changes_nothing() {
    let d = dict(64 << 10);
    let max = d.max_value_len_for(1);
    d.set("k", &vec![3u8; max][..], None, 0).unwrap();
    d.set("a", "1", None, 0).unwrap();
    let before = ok(&d);
    assert_eq!(
        d.set("k", &vec![4u8; max][..], None, 0),
        Err(DictError::NoMemory)
    );
    assert_eq!(ok(&d), before);
    assert_eq!(bytes(&d, "k"), Some(vec![3u8; max]));
    assert_eq!(bytes(&d, "a").as_deref(), Some(&b"1"[..]));
}

/// A hit marks an entry used, and eviction gives a used entry a second chance, not immunity:
/// a walk that spares the LRU head wraps to the tail, as CLOCK does, instead of ending there
/// (issue 33: each of these writes fitted once the head went, and failed with `NoMemory`).
#[test]
fn a_hit_on_the_newest_entry_is_a_second_chance_not_immunity() {
    // Two values of half the zone, the first read once.
    let d = dict(64 << 10);
    let n = (d.max_value_len() - 1) & !7;
    d.set("a", &vec![0u8; n], None, 0).unwrap();
    d.get("a").unwrap().unwrap();
    assert_eq!(d.set("b", &vec![0u8; n], None, 0), Ok(1));
    assert!(d.get("a").unwrap().is_none());
    ok(&d);
    // 12 one-page entries fill the 12 pages; the newest, read once, sits in the only block
    // of 8 pages with 7 older ones.
    let d = dict(64 << 10);
    assert_eq!(d.shards[0].g.npages, 12);
    for i in 0..12 {
        d.set(format!("p{i}"), &[1u8; 3000][..], None, 0).unwrap();
    }
    assert_eq!(d.free_space(), 0);
    d.get("p11").unwrap().unwrap();
    assert_eq!(d.set("big", &vec![0u8; n], None, 0), Ok(12));
    ok(&d);
    // A key updated while the only other entry, newer, was read: it must go.
    let d = dict(64 << 10);
    d.set("k", &[1u8; 3 * 4096][..], None, 0).unwrap(); // pages 8-11
    d.set("o", &[1u8; 3 * 4096][..], None, 0).unwrap(); // pages 0-3
    d.get("o").unwrap().unwrap();
    assert_eq!(d.set("k", &vec![2u8; n], None, 0), Ok(1));
    assert_eq!(bytes(&d, "k"), Some(vec![2u8; n]));
    ok(&d);
    // incr marks its entry as a hit does: the newest, an integer, in the way of the block.
    let d = dict(64 << 10);
    d.set("x", &[1u8; 3 * 4096][..], None, 0).unwrap(); // pages 8-11
    d.set("a", &[1u8; 3 * 4096][..], None, 0).unwrap(); // pages 0-3
    d.incr("n", 1, Some(0), None).unwrap(); // a slab page at 4
    d.incr("n", 1, None, None).unwrap();
    assert_eq!(d.set("b", &vec![0u8; n], None, 0), Ok(3));
    ok(&d);
}

/// A zone full of entries of one size class takes a write of another once their LRU order no
/// longer follows their pages: here every page holds 32 of the oldest entries and 32 new ones,
/// so the 64 evictions from the LRU tail free no page; the write then empties the page of the
/// tail entry (64 live entries, within the bound) instead of failing for good (issue 33:
/// `NoMemory` on every try).
#[test]
fn a_write_of_another_size_class_empties_a_page() {
    let d = dict(128 << 10);
    let n = fill_small(&d);
    assert!(n >= 4 * 64 && n.is_multiple_of(64), "{n}");
    for i in (1..n).step_by(2) {
        assert!(d.delete(format!("k{i:05}")).unwrap());
    }
    for j in 0..n / 2 {
        d.safe_add(format!("n{j:05}"), 7i64, None, 0).unwrap();
    }
    assert_eq!(d.free_space(), 0);
    let before = ok(&d);
    // An entry of the 256-byte class: it needs a free page.
    assert_eq!(d.set("big", &[1u8; 200][..], None, 0), Ok(64));
    assert!(
        d.get("k00000").unwrap().is_none(),
        "the LRU tail's page went"
    );
    let after = ok(&d);
    assert_eq!(after.entries, before.entries - 64 + 1);
    // A value of 4 pages needs 256 entries gone from an aligned run: more than a write may
    // evict, so it fails, and changes nothing.
    assert_eq!(
        d.set("huge", &[1u8; 12_000][..], None, 0),
        Err(DictError::NoMemory)
    );
    assert_eq!(ok(&d), after);
}
