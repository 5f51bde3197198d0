//! Lists: pushes, pops, types, and pops in a full zone.

use super::*;

#[test]
fn lists_push_pop_and_types() {
    let d = dict(1 << 18);
    assert_eq!(d.llen("l"), Ok(0));
    assert_eq!(d.lpop("l"), Ok(None));
    assert_eq!(d.rpush("l", b"b"), Ok(1));
    assert_eq!(d.lpush("l", b""), Ok(2));
    assert_eq!(d.rpush("l", vec![7u8; 1000]), Ok(3));
    assert_eq!(d.lpush("l", b"a"), Ok(4));
    assert_eq!(d.llen("l"), Ok(4));
    assert_eq!(ok(&d).entries, 1);
    // A list is no scalar, a scalar no list.
    assert_eq!(d.get("l"), Err(DictError::WrongType));
    assert_eq!(d.get_with("l", |_, _| ()), Err(DictError::WrongType));
    assert_eq!(d.incr("l", 1, None, None), Err(DictError::NotANumber));
    d.set("s", "x", None, 0).unwrap();
    assert_eq!(d.lpush("s", b"x"), Err(DictError::WrongType));
    assert_eq!(d.rpop("s"), Err(DictError::WrongType));
    assert_eq!(d.llen("s"), Err(DictError::WrongType));
    assert_eq!(d.keys(0).unwrap().len(), 2);
    // It keeps its TTL across pushes; expired, it is no list any more.
    d.expire("l", Some(Duration::from_secs(60))).unwrap();
    assert_eq!(d.rpush("l", b"c"), Ok(5));
    assert!(d.ttl("l").unwrap().is_some());
    assert_eq!(d.lpop("l").unwrap().as_deref(), Some(&b"a"[..]));
    assert_eq!(d.rpop("l").unwrap().as_deref(), Some(&b"c"[..]));
    assert_eq!(d.rpop("l").unwrap(), Some(vec![7u8; 1000]));
    assert_eq!(d.lpop("l").unwrap().as_deref(), Some(&b""[..]));
    ok(&d);
    assert_eq!(d.rpop("l").unwrap().as_deref(), Some(&b"b"[..]));
    assert_eq!(d.llen("l"), Ok(0));
    assert!(
        d.get_stale("l").unwrap().is_none(),
        "an empty list's key is gone"
    );
    // set replaces a list by a scalar.
    d.rpush("m", b"1").unwrap();
    d.set("m", "v", None, 0).unwrap();
    assert_eq!(bytes(&d, "m").as_deref(), Some(&b"v"[..]));
    // Bounded by the largest value, with nothing changed when refused.
    let max = d.max_value_len_for(1);
    assert!(matches!(
        d.rpush("b", vec![0u8; max]),
        Err(DictError::ValueTooLarge { .. })
    ));
    // 8 bytes of list header and 4 of item length.
    assert_eq!(d.rpush("b", vec![0u8; max - 12]), Ok(1));
    assert!(matches!(
        d.rpush("b", b""),
        Err(DictError::ValueTooLarge { .. })
    ));
    assert_eq!(d.llen("b"), Ok(1));
    let r = ok(&d);
    assert_eq!(r.entries, 3);
    // check() walks a list's encoding.
    let s = &d.shards[0];
    let e = entry_of(&d, b"b");
    s.mem.st32(e + layout::E_VALUE, u32::MAX);
    assert!(matches!(d.check(), Err(DictError::Corrupt(_))));
    assert!(matches!(d.rpop("b"), Err(DictError::Corrupt(_))));
}

/// A pop of a list at the size limit, in a full zone, succeeds and evicts nothing: it shrinks
/// the list in place (issue 33: `NoMemory`, the shorter list being written beside the old one,
/// for which a full zone has no room).
#[test]
fn pops_of_a_list_at_the_size_limit_need_no_memory() {
    let d = dict(64 << 10);
    let max = d.max_value_len_for(1);
    // Two items filling the largest block (pages 0-7 of 12; the first one alone took 8-11),
    // then the rest of the zone.
    let (a, b) = (4 * 4096 - 72, max - 16 - (4 * 4096 - 72));
    assert_eq!(d.rpush("l", vec![0u8; a]), Ok(1));
    assert_eq!(d.rpush("l", vec![2u8; b]), Ok(2));
    let mut others = 0;
    while d
        .safe_add(format!("o{others}"), &[5u8; 1000][..], None, 0)
        .is_ok()
    {
        others += 1;
    }
    assert!(others > 0 && d.free_space() == 0, "{others}");
    let before = d.stats();
    assert_eq!(d.lpop("l"), Ok(Some(vec![0u8; a])));
    assert_eq!(d.llen("l"), Ok(1));
    d.lpush("l", b"x").unwrap_err(); // no room beside it: a push copies
    assert_eq!(d.rpop("l"), Ok(Some(vec![2u8; b])));
    assert_eq!(d.llen("l"), Ok(0));
    ok(&d);
    assert_eq!(d.stats().evicted, before.evicted);
    for i in 0..others {
        assert!(d.get(format!("o{i}")).unwrap().is_some(), "{i}");
    }
    // The last item took the list's memory with it.
    assert_eq!(d.get_stale("l"), Ok(None));
    assert_eq!(d.free_space(), 8 * 4096);
    // A push after pops stores the list compacted.
    let (c, others) = (1000, d.stats().used_bytes);
    for i in 0..3u8 {
        d.rpush("m", vec![i; c]).unwrap();
    }
    assert_eq!(d.lpop("m"), Ok(Some(vec![0u8; c])));
    assert_eq!(d.rpop("m"), Ok(Some(vec![2u8; c])));
    assert_eq!(d.rpush("m", b"y"), Ok(2));
    assert_eq!(
        d.stats().used_bytes - others,
        1280,
        "a page before; 1017 bytes now"
    );
    assert_eq!(d.lpop("m"), Ok(Some(vec![1u8; c])));
    assert_eq!(d.lpop("m"), Ok(Some(b"y".to_vec())));
    ok(&d);
}
