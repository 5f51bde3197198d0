//! Where a dictionary lives: attaching, names, shards, placement in a mapping.

use super::*;

#[test]
fn attach_validates_and_writes_nothing() {
    let cfg = DictConfig::new();
    let need = ShmDict::required_size(1 << 16, cfg).unwrap();
    let map = Mapping::anonymous(need).unwrap();
    assert!(matches!(
        ShmDict::attach_in(&map, 0),
        Err(ShmError::Uninitialised)
    ));
    assert!(matches!(
        ShmDict::init_in(&map, 100, 1 << 16, cfg),
        Err(ShmError::Misaligned { .. })
    ));
    assert!(matches!(
        ShmDict::init_in(&map, 4096, 1 << 16, cfg),
        Err(ShmError::TooSmall { .. })
    ));
    assert!(matches!(
        ShmDict::init_in(&map, 0, 1000, cfg),
        Err(ShmError::InvalidConfig(_))
    ));
    // SAFETY: reading our own fresh mapping.
    let all_zero = unsafe { core::slice::from_raw_parts(map.as_ptr(), need) }
        .iter()
        .all(|&b| b == 0);
    assert!(all_zero, "a refused init wrote nothing");
    let a = ShmDict::init_in(&map, 0, 1 << 16, cfg).unwrap();
    a.set("x", "y", None, 0).unwrap();
    let b = ShmDict::attach_in(&map, 0).unwrap();
    assert_eq!(bytes(&b, "x").as_deref(), Some(&b"y"[..]));
    // A wrong magic is refused.
    let zone = need - (1 << 16);
    // SAFETY: the zone's first byte, in our mapping.
    unsafe { *map.as_ptr().add(zone) ^= 1 };
    drop(b);
    assert!(matches!(
        ShmDict::attach_in(&map, 0),
        Err(ShmError::BadMagic { .. })
    ));
    // SAFETY: as above.
    unsafe { *map.as_ptr().add(zone) ^= 1 };
    ok(&a);
}

#[test]
fn named_create_open_and_refusals() {
    let name = format!("/gomutex-unit-dict-{}", std::process::id());
    let (a, created) = ShmDict::open_or_create(&name, 1 << 16, DictConfig::new()).unwrap();
    assert!(created);
    let (b, created) = ShmDict::open_or_create(&name, 1 << 16, DictConfig::new()).unwrap();
    assert!(!created);
    let e = ShmDict::create(&name, 1 << 16, DictConfig::new()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    assert_eq!(e.object_name(), Some(name.as_str()));
    a.set("k", "v", None, 0).unwrap();
    assert!(b.get("k").unwrap().is_some());
    crate::shm::unlink(&name).unwrap();
    let e = ShmDict::open(&name).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    // A lock's object is no (named mapping of a) dictionary: refused, nothing written.
    let m = ShmMutex::create(&name, 0u64, Config::default()).unwrap();
    let e = ShmDict::open(&name).unwrap_err();
    assert!(matches!(e.cause(), ShmError::BadMagic { .. }), "{e:?}");
    assert_eq!(*m.lock().unwrap(), 0);
    crate::shm::unlink(&name).unwrap();
    // A named mapping of something else: the dictionary's own headers refuse it.
    let mut plan = MappingLayout::new();
    plan.mutex::<u32>(Config::default()).unwrap();
    plan.reserve(1 << 16, 4096);
    let other = Mapping::create(&name, &plan, |map| {
        ShmMutex::init_in(map, 0, 0u32, Config::default()).map(drop)
    })
    .unwrap();
    let e = ShmDict::open(&name).unwrap_err();
    assert!(matches!(e.cause(), ShmError::ValueMismatch { .. }), "{e:?}");
    assert_eq!(e.object_name(), Some(name.as_str()));
    drop(other);
    crate::shm::unlink(&name).unwrap();
    assert!(matches!(
        ShmDict::create(&name, 10, DictConfig::new())
            .unwrap_err()
            .cause(),
        ShmError::InvalidConfig(_)
    ));
    assert_eq!(
        ShmDict::open(&name).unwrap_err().raw_os_error(),
        Some(libc::ENOENT),
        "a refused create leaves no object"
    );
}

#[test]
fn shards_split_the_keys_and_attach_validates_them() {
    let cap = 1 << 20;
    let (cfg, _, map) = four_shards(cap);
    let a = ShmDict::init_in(&map, 0, cap, cfg).unwrap();
    let b = ShmDict::attach_in(&map, 0).unwrap();
    assert_eq!((a.shards(), b.shards()), (4, 4));
    assert_eq!(a.capacity(), cap);
    for i in 0..2000 {
        a.set(format!("k{i}"), i as i64, None, 0).unwrap();
    }
    for i in 0..2000 {
        assert_eq!(
            b.get(format!("k{i}")).unwrap().unwrap().value,
            OwnedValue::Int(i)
        );
    }
    // Every shard got a share.
    for s in a.shards.iter() {
        let n = s.with(|z, _| z.m.ld64(layout::H_COUNT)).unwrap();
        assert!((300..700).contains(&n), "{n}");
    }
    assert_eq!(ok(&b).entries, 2000);
    assert_eq!(a.keys(0).unwrap().len(), 2000);
    assert_eq!(a.keys(1500).unwrap().len(), 1500);
    b.flush_all().unwrap();
    assert_eq!(a.flush_expired(100).unwrap(), 100);
    assert_eq!(a.flush_expired(0).unwrap(), 1900);
    ok(&a);
    assert!(matches!(
        ShmDict::anonymous_with(1 << 16, DictConfig::new().shards(0)),
        Err(ShmError::InvalidConfig(_))
    ));
    assert!(matches!(
        ShmDict::anonymous_with(1 << 16, DictConfig::new().shards(8)),
        Err(ShmError::InvalidConfig(_))
    ));
}

/// `init_in` checks every shard's place before it writes any: a range of the mapping in use
/// in shard 0's zone (here a shared counter) is refused with nothing written, not after the
/// other shards were made (found by a review: shards 1 to 3 were written).
#[test]
fn init_in_with_shards_validates_everything_first() {
    use std::sync::atomic::AtomicU64;
    let cap = 1 << 20;
    let (cfg, need, map) = four_shards(cap);
    let stride = need / 4;
    // In use by a shared value, in shard 0's zone; then, in another case, shard 3's lock.
    for at in [stride - 4096, 3 * stride] {
        let map = Mapping::anonymous(need).unwrap();
        map.shared::<AtomicU64>(at).unwrap();
        assert!(matches!(
            ShmDict::init_in(&map, 0, cap, cfg),
            Err(ShmError::InvalidConfig(_))
        ));
        // SAFETY: reading our own fresh mapping.
        let all_zero = unsafe { core::slice::from_raw_parts(map.as_ptr(), need) }
            .iter()
            .all(|&b| b == 0);
        assert!(all_zero, "{at:#x}: a refused init wrote nothing");
    }
    // Over a dictionary in use in this process: refused too, and it keeps working.
    let a = ShmDict::init_in(&map, 0, cap, cfg).unwrap();
    a.set("k", "v", None, 0).unwrap();
    assert!(ShmDict::init_in(&map, 0, cap, cfg).is_err());
    assert_eq!(bytes(&a, "k").as_deref(), Some(&b"v"[..]));
    ok(&a);
}

/// `open_or_create` of an existing dictionary with another capacity or shard count refuses
/// it, naming both (issue 33: "too small" for a larger one, the old one silently for a
/// smaller one); the same geometry opens it.
#[test]
fn open_or_create_refuses_another_geometry() {
    let name = format!("/gomutex-unit-dict-geom-{}", std::process::id());
    let cfg = DictConfig::new().shards(2);
    let (a, created) = ShmDict::open_or_create(&name, 1 << 18, cfg).unwrap();
    assert!(created);
    let asks = [
        (1 << 19, cfg),
        (1 << 17, cfg),
        (1 << 18, DictConfig::new()),
        (1 << 18, DictConfig::new().shards(4)),
    ];
    for (cap, c) in asks {
        let e = ShmDict::open_or_create(&name, cap, c)
            .map(drop)
            .unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(e.cause(), ShmError::DictMismatch { .. }),
            "{cap} {c:?}: {text}"
        );
        assert_eq!(e.object_name(), Some(name.as_str()));
        assert!(
            text.contains(&format!("{} bytes in 2 shards", 1 << 18))
                && text.contains(&format!("{cap} bytes in {} shard", c.shards)),
            "{text}"
        );
    }
    let (b, created) = ShmDict::open_or_create(&name, 1 << 18, cfg).unwrap();
    assert!(!created);
    a.set("k", "v", None, 0).unwrap();
    assert!(b.get("k").unwrap().is_some());
    crate::shm::unlink(&name).unwrap();
}
