//! Named objects opened by unrelated processes (this binary re-executed with `--shm-child`):
//! a lock, an `open_or_create` race, and a `Mapping` holding several objects.

use super::common::shm_name;
use super::common::shmtest::{assert_quiescent, ok};
use gomutex::shm::{Config, Mapping, MappingLayout, ShmError, ShmMutex};
use std::process::Command;
use std::sync::atomic::Ordering::SeqCst;

/// Unrelated processes: children re-exec this binary and open the region by name.
pub fn named_unrelated_processes() {
    const PROCS: usize = 4;
    const ITERS: u64 = 2_000;
    let name = shm_name("named");
    let _ = ShmMutex::<[u64; 2]>::unlink(&name);
    let m = ShmMutex::create(&name, [0u64; 2], Config::default()).unwrap();
    let e = ShmMutex::create(&name, [0u64; 2], Config::default()).unwrap_err();
    assert!(
        matches!(e.cause(), ShmError::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists),
        "{e:?}"
    );
    let exe = std::env::current_exe().unwrap();
    let kids: Vec<_> = (0..PROCS)
        .map(|_| {
            Command::new(&exe)
                .args(["--shm-child", "count", &name, &ITERS.to_string()])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    assert_eq!(*ok(m.lock()), [PROCS as u64 * ITERS; 2]);
    assert_quiescent(&m);
    ShmMutex::<[u64; 2]>::unlink(&name).unwrap();
    let e = ShmMutex::<[u64; 2]>::open(&name).unwrap_err();
    assert!(
        matches!(e.cause(), ShmError::Io(io) if io.kind() == std::io::ErrorKind::NotFound),
        "{e:?}"
    );
}

/// Start `procs` unrelated processes running the child `role` on `name` for `iters` rounds
/// at once; once all succeeded, how many said they created the object.
fn race_children(procs: usize, role: &str, name: &str, iters: u64) -> usize {
    let exe = std::env::current_exe().unwrap();
    let kids: Vec<_> = (0..procs)
        .map(|_| {
            Command::new(&exe)
                .args(["--shm-child", role, name, &iters.to_string()])
                .output_spawn()
        })
        .collect();
    let mut created = 0;
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        if String::from_utf8_lossy(&out.stdout).contains("created") {
            created += 1;
        }
    }
    created
}

/// Several unrelated processes race `open_or_create` on a fresh name: exactly one creates,
/// all share the same lock.
pub fn named_open_or_create_race() {
    const PROCS: usize = 4;
    let name = shm_name("race");
    let _ = ShmMutex::<[u64; 2]>::unlink(&name);
    assert_eq!(
        race_children(PROCS, "open_or_create", &name, 500),
        1,
        "exactly one process must create"
    );
    let m = ShmMutex::<[u64; 2]>::open(&name).unwrap();
    assert_eq!(*ok(m.lock()), [PROCS as u64 * 500; 2]);
    ShmMutex::<[u64; 2]>::unlink(&name).unwrap();
}

/// The layout every process of `named_mapping_unrelated_processes` uses: two locks and a
/// lock-free counter.
fn mapping_plan() -> (MappingLayout, Config, [usize; 3]) {
    let cfg = Config::new().participants(8).waiter_slots(8);
    let mut plan = MappingLayout::new();
    let a = plan.mutex::<u64>(cfg).unwrap();
    let b = plan.mutex::<[u64; 2]>(cfg).unwrap();
    let hits = plan.shared::<std::sync::atomic::AtomicU64>();
    (plan, cfg, [a, b, hits])
}

/// Unrelated processes race `Mapping::open_or_create` on a fresh name: exactly one creates
/// (and initialises both locks), every one shares them and the counter beside them.
pub fn named_mapping_unrelated_processes() {
    const PROCS: usize = 4;
    const ITERS: u64 = 1_000;
    let name = shm_name("mapping");
    let _ = gomutex::shm::unlink(&name);
    assert_eq!(
        race_children(PROCS, "mapping", &name, ITERS),
        1,
        "exactly one process must create"
    );
    let (_, _, [a, b, hits]) = mapping_plan();
    let map = Mapping::open(&name).unwrap();
    gomutex::shm::unlink(&name).unwrap();
    let n = PROCS as u64 * ITERS;
    let (a, b) = (
        ShmMutex::<u64>::attach_in(&map, a).unwrap(),
        ShmMutex::<[u64; 2]>::attach_in(&map, b).unwrap(),
    );
    assert_eq!((*ok(a.lock()), *ok(b.lock())), (n, [n; 2]));
    let hits = map.shared::<std::sync::atomic::AtomicU64>(hits).unwrap();
    assert_eq!(hits.load(SeqCst), n);
    assert_quiescent(&a);
    assert_quiescent(&b);
}

/// Child side of `named_mapping_unrelated_processes`.
fn mapping_child(name: &str, iters: u64) -> i32 {
    let (plan, cfg, [a, b, hits]) = mapping_plan();
    let (map, created) = Mapping::open_or_create(name, &plan, |map| {
        ShmMutex::init_in(map, a, 0u64, cfg)?;
        ShmMutex::init_in(map, b, [0u64; 2], cfg)?;
        Ok(())
    })
    .unwrap();
    let a = ShmMutex::<u64>::attach_in(&map, a).unwrap();
    let b = ShmMutex::<[u64; 2]>::attach_in(&map, b).unwrap();
    let hits = map.shared::<std::sync::atomic::AtomicU64>(hits).unwrap();
    for _ in 0..iters {
        let mut ga = ok(a.lock());
        let mut gb = ok(b.lock());
        assert_eq!(gb[0], gb[1], "torn");
        gb[0] += 1;
        gb[1] += 1;
        *ga += 1;
        drop((gb, ga));
        hits.fetch_add(1, SeqCst);
    }
    if created {
        println!("created");
    }
    0
}

trait OutputSpawn {
    fn output_spawn(&mut self) -> std::process::Child;
}
impl OutputSpawn for Command {
    fn output_spawn(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped()).spawn().unwrap()
    }
}

/// Child side of the named tests.
pub fn child_main(args: &[String]) -> i32 {
    let (role, name, iters) = (&args[0], &args[1], args[2].parse::<u64>().unwrap());
    if role == "mapping" {
        return mapping_child(name, iters);
    }
    let (m, created) = match role.as_str() {
        "count" => (ShmMutex::<[u64; 2]>::open(name).unwrap(), false),
        "open_or_create" => ShmMutex::open_or_create(name, [0u64; 2], Config::default()).unwrap(),
        r => panic!("unknown child role {r}"),
    };
    for _ in 0..iters {
        let mut g = ok(m.lock());
        assert_eq!(g[0], g[1]);
        g[0] += 1;
        g[1] += 1;
    }
    if created {
        println!("created");
    }
    0
}
