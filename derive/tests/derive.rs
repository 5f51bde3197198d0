//! Structs deriving `ShmSafe` / `ShmShared`, used where gomutex asks for the traits.
#![cfg(target_os = "linux")]

use gomutex::shm::{
    Config, Mapping, MappingLayout, ShmBool, ShmError, ShmMutex, ShmSafe, ShmShared,
};
use std::sync::atomic::{AtomicI8, AtomicU32, AtomicU64, Ordering::Relaxed};

#[derive(Clone, Copy, Debug, Default, PartialEq, ShmSafe)]
#[repr(C)]
struct Stats {
    requests: u64,
    errors: u32,
    go: ShmBool,
    _pad: [u8; 3],
    latency: [f64; 2],
}

#[derive(Clone, Copy, Debug, Default, PartialEq, ShmSafe)]
#[repr(C)]
struct Tuple(i32, [i16; 2]);

#[derive(Clone, Copy, Debug, Default, PartialEq, ShmSafe)]
#[repr(C)]
struct Unit;

#[derive(Clone, Copy, Debug, Default, PartialEq, ShmSafe)]
#[repr(transparent)]
struct Pid(u32);

#[derive(Clone, Copy, Debug, Default, PartialEq, ShmSafe)]
#[repr(C, align(64))]
struct Padded {
    hits: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, ShmSafe)]
#[repr(C, packed)]
struct Packed {
    tag: u8,
    value: u32,
}

/// Nested derived structs, generics (type and const parameters) and a where clause.
#[derive(Clone, Copy, Debug, PartialEq, ShmSafe)]
#[repr(C)]
struct Table<T, const N: usize>
where
    T: Default,
{
    rows: [T; N],
    stats: Stats,
    pid: Pid,
}

/// Bounds inline and in a where clause, on different parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, ShmSafe)]
#[repr(C)]
struct Pair<A: Copy + Default, B>
where
    B: Default + Copy,
{
    a: A,
    b: B,
}

#[derive(ShmShared)]
#[repr(C)]
struct Heartbeats {
    ticks: [AtomicU64; 4],
    workers: AtomicU32,
    state: AtomicI8,
}

#[derive(ShmShared)]
#[repr(transparent)]
struct Counter(AtomicU64);

#[derive(ShmShared)]
#[repr(C, align(64))]
struct PerCore<T, const N: usize> {
    cores: [T; N],
    total: Counter,
}

#[derive(ShmShared)]
#[repr(C)]
struct Empty {}

fn is_safe<T: ShmSafe>() {}
fn is_shared<T: ShmShared>() {}

#[test]
fn derived_types_implement_the_traits() {
    is_safe::<Stats>();
    is_safe::<Tuple>();
    is_safe::<Unit>();
    is_safe::<Pid>();
    is_safe::<Padded>();
    is_safe::<Packed>();
    is_safe::<Table<u16, 3>>();
    is_safe::<Table<Tuple, 0>>();
    is_safe::<[Table<Padded, 2>; 2]>();
    is_safe::<Pair<u8, Pair<f32, Unit>>>();
    is_shared::<Heartbeats>();
    is_shared::<Counter>();
    is_shared::<PerCore<AtomicU32, 2>>();
    is_shared::<PerCore<Heartbeats, 8>>();
    is_shared::<Empty>();
    assert_eq!(align_of::<Padded>(), 64);
    assert_eq!(size_of::<Packed>(), 5);
    assert_eq!(align_of::<PerCore<AtomicU32, 2>>(), 64);
}

#[test]
fn derived_values_in_a_shm_mutex() -> Result<(), ShmError> {
    let m = ShmMutex::anonymous(Stats::default())?;
    {
        let mut g = m.lock().unwrap();
        g.requests += 1;
        g.go.set(true);
        g.latency[1] = 2.5;
    }
    let s = *m.lock().unwrap();
    assert_eq!((s.requests, s.go.get(), s.latency), (1, true, [0.0, 2.5]));

    let t = ShmMutex::anonymous(Table {
        rows: [Tuple::default(); 2],
        stats: Stats::default(),
        pid: Pid(0),
    })?;
    t.lock().unwrap().rows[1] = Tuple(-7, [1, 2]);
    t.lock().unwrap().pid = Pid(42);
    assert_eq!(
        t.lock().unwrap().rows,
        [Tuple(0, [0, 0]), Tuple(-7, [1, 2])]
    );
    assert_eq!(t.lock().unwrap().pid, Pid(42));

    let p = ShmMutex::anonymous(Packed { tag: 1, value: 7 })?;
    p.lock().unwrap().value += 1;
    assert_eq!({ p.lock().unwrap().value }, 8);
    ShmMutex::anonymous(Unit)?;
    ShmMutex::anonymous(Padded::default())?;
    let pair = ShmMutex::anonymous(Pair {
        a: 1u16,
        b: [2i64; 3],
    })?;
    pair.lock().unwrap().b[2] = -1;
    assert_eq!(
        *pair.lock().unwrap(),
        Pair {
            a: 1,
            b: [2, 2, -1]
        }
    );
    Ok(())
}

#[test]
fn derived_values_in_one_mapping() -> Result<(), ShmError> {
    let cfg = Config::new().participants(4).waiter_slots(4);
    let mut plan = MappingLayout::new();
    let lock = plan.mutex::<Stats>(cfg)?;
    let beats = plan.shared::<Heartbeats>();
    let per_core = plan.shared::<PerCore<AtomicU32, 2>>();
    let map = Mapping::anonymous(plan.len())?;

    let m = ShmMutex::init_in(&map, lock, Stats::default(), cfg)?;
    let h = map.shared::<Heartbeats>(beats)?;
    h.ticks[3].fetch_add(5, Relaxed);
    h.workers.store(2, Relaxed);
    h.state.store(-1, Relaxed);
    let c = map.shared::<PerCore<AtomicU32, 2>>(per_core)?;
    c.cores[1].fetch_add(1, Relaxed);
    c.total.0.fetch_add(1, Relaxed);
    m.lock().unwrap().requests += 1;

    // A second handle in this process sees the same values (a fresh mapping is zeroes).
    let h2 = map.shared::<Heartbeats>(beats)?;
    assert_eq!(h2.ticks[3].load(Relaxed), 5);
    assert_eq!(h2.ticks[0].load(Relaxed), 0);
    assert_eq!((h2.workers.load(Relaxed), h2.state.load(Relaxed)), (2, -1));
    assert_eq!(c.total.0.load(Relaxed), 1);
    assert_eq!(
        ShmMutex::<Stats>::attach_in(&map, lock)?
            .lock()
            .unwrap()
            .requests,
        1
    );
    Ok(())
}
