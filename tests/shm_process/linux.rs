// Without the test-only `__crash-points` feature (a build of the published crate) the cases
// that arm crash points are compiled out: their helpers are then unused.
#![cfg_attr(
    not(feature = "__crash-points"),
    allow(dead_code, unused_imports, unused_variables, unused_mut)
)]
use gomutex::shm::{
    Config, LockError, Mapping, MappingLayout, ShmError, ShmMutex, ShmMutexGuard, ShmSafe,
    TryLockError, LAYOUT_VERSION, MAGIC,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;
use common::anon::AnonShared;
use common::procs::{self, fork, kill9, wait, wait_limit};
use common::shmtest::{assert_quiescent, ok};
#[path = "pid_reuse.rs"]
mod pid_reuse;

// ------------------------------------------------------------------ helpers

use std::sync::atomic::Ordering::SeqCst;

fn uniq(tag: &str) -> String {
    format!("/gomutex-test-{tag}-{}", std::process::id())
}

/// Fork a child that takes `m`, applies `update` to the value (e.g. half of a two-word update),
/// keeps the lock (through its guard, or a leaked one if `leak`) and sleeps until killed.
/// Returns its pid once it holds the lock.
fn fork_holder<T: ShmSafe>(m: &ShmMutex<T>, leak: bool, update: impl FnOnce(&mut T)) -> i32 {
    let flags = AnonShared::counters(1);
    let pid = fork(|| {
        let mut g = ok(m.lock());
        update(&mut g);
        let _kept = if leak {
            ShmMutexGuard::leak(g);
            None
        } else {
            Some(g)
        };
        flags.at(0).store(1, SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    while flags.at(0).load(SeqCst) == 0 {
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(m.diagnostics().owner_pid, Some(pid as u32));
    pid
}

// ------------------------------------------------------------------ tests

/// Exact shared counter across 8 processes, mixing lock, try_lock and try_lock_for, with a
/// two-step update that would tear without mutual exclusion.
fn exclusion_8_processes() {
    const PROCS: usize = 8;
    const ITERS: u64 = 20_000;
    let m = ShmMutex::anonymous([0u64; 2]).unwrap();
    let kids: Vec<_> = (0..PROCS)
        .map(|k| {
            let m = &m;
            fork(move || {
                let mut done = 0;
                let mut i = 0u64;
                while done < ITERS {
                    i += 1;
                    let g = match i % 5 {
                        0 => match m.try_lock() {
                            Ok(g) => g,
                            Err(TryLockError::WouldBlock) => continue,
                            Err(e) => panic!("{e}"),
                        },
                        1 => match m.try_lock_for(Duration::from_micros(50 * (k as u64 + 1))) {
                            Ok(g) => g,
                            Err(TryLockError::WouldBlock) => continue,
                            Err(e) => panic!("{e}"),
                        },
                        _ => ok(m.lock()),
                    };
                    let mut g = g;
                    let a = g[0];
                    assert_eq!(a, g[1], "torn state seen");
                    g[0] = a + 1;
                    std::hint::black_box(&mut g);
                    g[1] = a + 1;
                    drop(g);
                    done += 1;
                }
                0
            })
        })
        .collect();
    for pid in kids {
        assert_eq!(wait(pid), 0);
    }
    let g = ok(m.lock());
    assert_eq!(*g, [PROCS as u64 * ITERS; 2]);
    drop(g);
    assert_quiescent(&m);
}

/// Threads and processes at once: 3 forked processes × 4 threads each, starting together in
/// fresh children (so the threads race to register their process), on an exact counter. Each
/// process must end up with one participant slot.
fn threads_and_processes() {
    const ITERS: u64 = 2_000;
    let m = ShmMutex::anonymous([0u64; 2]).unwrap();
    let finished = AnonShared::counters(1);
    let kids: Vec<_> = (0..3)
        .map(|_| {
            fork(|| {
                std::thread::scope(|s| {
                    for _ in 0..4 {
                        s.spawn(|| {
                            for _ in 0..ITERS {
                                let mut g = ok(m.lock());
                                assert_eq!(g[0], g[1]);
                                g[0] += 1;
                                std::hint::black_box(&mut g);
                                g[1] += 1;
                            }
                        });
                    }
                });
                // Count the slots once every child is done: a child still registering may
                // hold a second slot for an instant (its losing thread gives it back).
                finished.at(0).fetch_add(1, SeqCst);
                let t = Instant::now();
                while finished.at(0).load(SeqCst) < 3 && t.elapsed() < Duration::from_secs(20) {
                    std::thread::sleep(Duration::from_micros(200));
                }
                // The three children are registered, once each (the parent has not used the
                // lock yet).
                let n = m.diagnostics().participants;
                if n == 3 {
                    0
                } else {
                    eprintln!("participants: {n}, expected 3");
                    9
                }
            })
        })
        .collect();
    for k in kids {
        assert_eq!(wait(k), 0, "a process took more than one participant slot");
    }
    assert_eq!(*ok(m.lock()), [3 * 4 * ITERS; 2]);
    assert_quiescent(&m);
}

/// Go's TestMutexFairness across two processes: a greedy process holds the lock almost all the
/// time (sleeping 100 µs inside); the victim must still get it 10 times in a bounded time.
///
/// The victim registers as a participant (`join`) before its timed locks: registration is a
/// one-time cost of a process's first use of a lock (reading its own `/proc/<pid>/stat` for
/// its identity, ~0.1 ms here), not part of the lock's fairness; it is printed on its own.
fn fairness_two_processes() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    // 0: stop, 1: victim worst wait ns, 2: victim total ns, 3: victim registration ns
    let flags = AnonShared::counters(4);
    let greedy = fork(|| {
        while flags.at(0).load(SeqCst) == 0 {
            let g = ok(m.lock());
            std::thread::sleep(Duration::from_micros(100));
            drop(g);
        }
        0
    });
    std::thread::sleep(Duration::from_millis(5));
    let victim = fork(|| {
        let t = Instant::now();
        m.join().unwrap();
        flags.at(3).store(t.elapsed().as_nanos() as u64, SeqCst);
        let start = Instant::now();
        let mut worst = Duration::ZERO;
        for _ in 0..10 {
            std::thread::sleep(Duration::from_micros(100));
            let t = Instant::now();
            let mut g = ok(m.lock());
            worst = worst.max(t.elapsed());
            *g += 1;
        }
        flags.at(1).store(worst.as_nanos() as u64, SeqCst);
        flags.at(2).store(start.elapsed().as_nanos() as u64, SeqCst);
        0
    });
    let t = Instant::now();
    let code = wait(victim);
    flags.at(0).store(1, SeqCst);
    assert_eq!(wait(greedy), 0);
    assert_eq!(code, 0);
    let worst = Duration::from_nanos(flags.at(1).load(SeqCst));
    let total = Duration::from_nanos(flags.at(2).load(SeqCst));
    let joined = Duration::from_nanos(flags.at(3).load(SeqCst));
    println!(
        "    victim: registered in {joined:?}, then 10 locks in {total:?}, worst single wait \
         {worst:?}"
    );
    // Go allows 10 s; starvation mode makes it milliseconds.
    assert!(t.elapsed() < Duration::from_secs(10), "victim starved");
    assert_eq!(*ok(m.lock()), 10);
    assert_quiescent(&m);
}

/// Unrelated processes: children re-exec this binary and open the region by name.
fn named_unrelated_processes() {
    const PROCS: usize = 4;
    const ITERS: u64 = 2_000;
    let name = uniq("named");
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
fn named_open_or_create_race() {
    const PROCS: usize = 4;
    let name = uniq("race");
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
fn named_mapping_unrelated_processes() {
    const PROCS: usize = 4;
    const ITERS: u64 = 1_000;
    let name = uniq("mapping");
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
fn child_main(args: &[String]) -> i32 {
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

/// A region to attach to, as raw shared memory, plus a byte snapshot helper.
struct Raw(Mapping);
impl Raw {
    fn new(len: usize) -> Self {
        Self(Mapping::anonymous(len).expect("mmap"))
    }
    fn p(&self) -> *mut u8 {
        self.0.as_ptr()
    }
    fn bytes(&self) -> Vec<u8> {
        // SAFETY: our mapping, no concurrent writers in these tests.
        unsafe { std::slice::from_raw_parts(self.p(), self.0.len()) }.to_vec()
    }
    fn put_u64(&self, off: usize, v: u64) {
        assert!(off + 8 <= self.0.len());
        // SAFETY: in bounds of our mapping.
        unsafe { (self.p().add(off) as *mut u64).write_unaligned(v) }
    }
    fn put_u32(&self, off: usize, v: u32) {
        assert!(off + 4 <= self.0.len());
        // SAFETY: in bounds of our mapping.
        unsafe { (self.p().add(off) as *mut u32).write_unaligned(v) }
    }
}

/// Attach `T` at `p+off` over `len` bytes; assert `pred` on the error and that no byte of
/// the whole mapping changed.
fn attach_fails<T: ShmSafe>(
    raw: &Raw,
    off: usize,
    len: usize,
    what: &str,
    pred: impl Fn(&ShmError) -> bool,
) {
    let before = raw.bytes();
    // SAFETY: shared memory we own and keep mapped; on error nothing is kept.
    let r = unsafe { ShmMutex::<T>::attach(raw.p().add(off), len) };
    match r {
        Ok(_) => panic!("{what}: attach succeeded"),
        Err(e) => {
            assert!(pred(&e), "{what}: unexpected error {e:?}");
            // The Display is a clear message.
            assert!(!e.to_string().is_empty());
            println!("    {what}: {e}");
        }
    }
    assert!(raw.bytes() == before, "{what}: attach wrote to the region");
}

/// Several locks in one mapping, placed with `MappingLayout`: 4 processes take two of them
/// nested (exact counts, no tearing), one is SIGKILLed holding the second (only that lock
/// reports the death), and a memfd mapping, mapped again by each child at another address,
/// carries a third lock between them.
fn several_locks_in_one_mapping() {
    const PROCS: usize = 4;
    const ITERS: u64 = 5_000;
    let cfg = Config::new().participants(8).waiter_slots(8);
    let mut plan = MappingLayout::new();
    let (oa, ob) = (
        plan.mutex::<u64>(cfg).unwrap(),
        plan.mutex::<[u64; 2]>(cfg).unwrap(),
    );
    let map = Mapping::anonymous(plan.len()).unwrap();
    let a = ShmMutex::init_in(&map, oa, 0u64, cfg).unwrap();
    let b = ShmMutex::init_in(&map, ob, [0u64; 2], cfg).unwrap();
    drop(map); // the handles keep it mapped

    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"gomutex-test-map".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor nobody else owns.
    let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let clen = ShmMutex::<u64>::required_size(cfg).unwrap();
    file.set_len(2 * clen as u64).unwrap();
    let c = ShmMutex::init_in(&Mapping::from_fd(&file).unwrap(), clen, 0u64, cfg).unwrap();

    let kids: Vec<_> = (0..PROCS)
        .map(|_| {
            let (a, b, file) = (&a, &b, &file);
            fork(move || {
                // A mapping of its own, as a process that received the descriptor would make.
                let c = ShmMutex::<u64>::attach_in(&Mapping::from_fd(file).unwrap(), clen).unwrap();
                for _ in 0..ITERS {
                    let mut ga = ok(a.lock());
                    let mut gb = ok(b.lock());
                    assert_eq!(gb[0], gb[1], "torn");
                    gb[0] += 1;
                    std::hint::black_box(&mut gb);
                    gb[1] += 1;
                    drop(gb);
                    *ga += 1;
                    drop(ga);
                    *ok(c.lock()) += 1;
                }
                0
            })
        })
        .collect();
    for pid in kids {
        assert_eq!(wait(pid), 0);
    }
    let n = PROCS as u64 * ITERS;
    assert_eq!(
        (*ok(a.lock()), *ok(b.lock()), *ok(c.lock())),
        (n, [n; 2], n)
    );

    // A death holding `b` is reported by `b` alone.
    let victim = fork_holder(&b, false, |_| {});
    kill9(victim);
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    assert!(b.force_unlock(victim));
    assert!(matches!(b.lock(), Err(LockError::OwnerDied(_))));
    assert_eq!(*ok(a.lock()), n);
    assert!(!a.owner_died() && !c.owner_died());
    assert_quiescent(&a);
    assert_quiescent(&c);
}

/// `init_in` reads the header it would overwrite: a lock another process holds is refused
/// through any mapping of the object (naming that process), and may be initialised anew once
/// that process is dead.
fn init_in_refuses_a_lock_another_process_uses() {
    let cfg = Config::new().participants(4).waiter_slots(4);
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"gomutex-test-live".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor nobody else owns.
    let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    file.set_len(ShmMutex::<u64>::required_size(cfg).unwrap() as u64)
        .unwrap();
    let m = ShmMutex::init_in(&Mapping::from_fd(&file).unwrap(), 0, 5u64, cfg).unwrap();
    let holder = fork_holder(&m, false, |v| *v += 1);
    drop(m);
    let r = ShmMutex::init_in(&Mapping::from_fd(&file).unwrap(), 0, 0u64, cfg);
    assert!(
        matches!(r, Err(ShmError::RegionInUse { pid }) if pid == holder as u32),
        "{r:?}"
    );
    println!("    {}", r.unwrap_err());
    kill9(holder);
    assert_eq!(wait(holder), 128 + libc::SIGKILL);
    let m = ShmMutex::init_in(&Mapping::from_fd(&file).unwrap(), 0, 9u64, cfg).unwrap();
    assert_eq!(*ok(m.lock()), 9);
    assert!(!m.owner_died());
}

/// Every bad attach is a clear error and writes nothing.
fn bad_attach_writes_nothing() {
    let cfg = Config::default();
    let size = ShmMutex::<u64>::required_size(cfg).unwrap();
    let raw = Raw::new(size + 4096);
    // Zeroed memory: uninitialised.
    attach_fails::<u64>(&raw, 0, size, "zeroed", |e| {
        matches!(e, ShmError::Uninitialised)
    });
    // Garbage: wrong magic.
    // SAFETY: in bounds.
    unsafe { std::ptr::write_bytes(raw.p(), 0xa5, size) };
    attach_fails::<u64>(
        &raw,
        0,
        size,
        "garbage",
        |e| matches!(e, ShmError::BadMagic { found, .. } if *found == 0xa5a5_a5a5_a5a5_a5a5),
    );
    // Too small for a header.
    attach_fails::<u64>(&raw, 0, 100, "shorter than a header", |e| {
        matches!(e, ShmError::TooSmall { .. })
    });
    // Misaligned.
    attach_fails::<u64>(&raw, 8, size, "misaligned", |e| {
        matches!(e, ShmError::Misaligned { required: 64, .. })
    });
    // A real region, then damage one field at a time.
    // SAFETY: our mapping, nobody else uses it.
    let m = unsafe { ShmMutex::init_in_place(raw.p(), size, 42u64, cfg) }.unwrap();
    drop(m);
    let pristine = raw.bytes();
    // SAFETY: as above.
    let ok_attach = unsafe { ShmMutex::<u64>::attach(raw.p(), size) }.unwrap();
    assert_eq!(*ok(ok_attach.lock()), 42);
    drop(ok_attach);
    let restore = |raw: &Raw| {
        // SAFETY: in bounds.
        unsafe { std::ptr::copy_nonoverlapping(pristine.as_ptr(), raw.p(), pristine.len()) };
    };
    restore(&raw);
    attach_fails::<u64>(
        &raw,
        0,
        size - 64,
        "shorter than total",
        |e| matches!(e, ShmError::TooSmall { needed, .. } if *needed == size),
    );
    attach_fails::<u32>(&raw, 0, size, "wrong T size", |e| {
        matches!(
            e,
            ShmError::ValueMismatch {
                expected_size: 4,
                found_size: 8,
                ..
            }
        )
    });
    attach_fails::<[u32; 2]>(&raw, 0, size, "wrong T align", |e| {
        matches!(
            e,
            ShmError::ValueMismatch {
                expected_align: 4,
                found_align: 8,
                ..
            }
        )
    });
    attach_fails::<i64>(
        &raw,
        0,
        size,
        "wrong T, same size and align",
        |e| matches!(e, ShmError::TypeMismatch { expected, found, .. } if expected == "i64" && found == "u64"),
    );
    raw.put_u64(0, MAGIC ^ 1);
    attach_fails::<u64>(&raw, 0, size, "wrong magic", |e| {
        matches!(e, ShmError::BadMagic { .. })
    });
    restore(&raw);
    raw.put_u32(8, LAYOUT_VERSION + 1);
    attach_fails::<u64>(
        &raw,
        0,
        size,
        "wrong version",
        |e| matches!(e, ShmError::VersionMismatch { found, .. } if *found == LAYOUT_VERSION + 1),
    );
    restore(&raw);
    raw.put_u32(24, 5000); // participants: sizes no longer add up
    attach_fails::<u64>(&raw, 0, size, "inconsistent slot count", |e| {
        matches!(e, ShmError::Corrupt(_))
    });
    restore(&raw);
    // One participant slot (no room besides the guest), with sizes that add up for it.
    let value_offset = 448 + 64 + 64 * cfg.waiter_slots as u64;
    raw.put_u32(24, 1);
    raw.put_u64(32, value_offset);
    raw.put_u64(16, value_offset + 64);
    attach_fails::<u64>(&raw, 0, size, "one participant slot", |e| {
        matches!(e, ShmError::Corrupt("participant count"))
    });
    restore(&raw);
    // A value aligned more strictly than the region: the base must be aligned for it too.
    #[derive(Clone, Copy)]
    #[repr(C, align(128))]
    struct Wide([u64; 16]);
    // SAFETY: repr(C), only u64s.
    unsafe impl ShmSafe for Wide {}
    let wide = ShmMutex::<Wide>::required_size(cfg).unwrap();
    let raw2 = Raw::new(wide + 4096);
    attach_fails::<Wide>(&raw2, 64, wide, "base not aligned for T", |e| {
        matches!(e, ShmError::Misaligned { required: 128, .. })
    });
    let before2 = raw2.bytes();
    // SAFETY: our mapping.
    let r = unsafe { ShmMutex::init_in_place(raw2.p().add(64), wide, Wide([0; 16]), cfg) };
    assert!(matches!(r, Err(ShmError::Misaligned { required: 128, .. })));
    assert!(raw2.bytes() == before2, "failed init wrote");
    // SAFETY: our mapping, aligned for Wide.
    let m =
        unsafe { ShmMutex::init_in_place(raw2.p().add(128), wide, Wide([7; 16]), cfg) }.unwrap();
    let g = ok(m.lock());
    assert_eq!((&*g as *const Wide as usize) % 128, 0);
    assert_eq!(g.0[15], 7);
    drop(g);
    drop(m);
    // In-place init checks too, writing nothing.
    let before = raw.bytes();
    // SAFETY: our mapping.
    let r = unsafe { ShmMutex::init_in_place(raw.p().add(8), size, 1u64, cfg) };
    assert!(matches!(r, Err(ShmError::Misaligned { .. })));
    // SAFETY: our mapping.
    let r = unsafe { ShmMutex::init_in_place(raw.p(), size - 64, 1u64, cfg) };
    assert!(matches!(r, Err(ShmError::TooSmall { .. })));
    assert!(raw.bytes() == before, "failed init wrote");

    // Named: an object nobody initialises times out; one with garbage is refused. Neither
    // is written.
    let name = uniq("bad");
    let _ = ShmMutex::<u64>::unlink(&name);
    let cname = std::ffi::CString::new(name.clone()).unwrap();
    // SAFETY: creating a plain shm object for the test.
    let fd = unsafe {
        libc::shm_open(
            cname.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )
    };
    assert!(fd >= 0);
    // SAFETY: our fd.
    assert_eq!(unsafe { libc::ftruncate(fd, size as libc::off_t) }, 0);
    let t = Instant::now();
    let r = ShmMutex::<u64>::open_timeout(&name, Duration::from_millis(50));
    assert!(
        matches!(
            r.as_ref().map_err(ShmError::cause),
            Err(ShmError::InitTimeout)
        ),
        "{r:?}"
    );
    assert!(t.elapsed() >= Duration::from_millis(50));
    let garbage = vec![0x5au8; size];
    // SAFETY: writing `size` bytes of our own buffer to our fd.
    let written = unsafe { libc::pwrite(fd, garbage.as_ptr().cast(), size, 0) };
    assert_eq!(written, size as isize);
    let r = ShmMutex::<u64>::open_timeout(&name, Duration::from_millis(50));
    assert!(
        matches!(
            r.as_ref().map_err(ShmError::cause),
            Err(ShmError::BadMagic { .. })
        ),
        "{r:?}"
    );
    let mut back = vec![0u8; size];
    // SAFETY: reading into our buffer.
    unsafe { libc::pread(fd, back.as_mut_ptr().cast(), size, 0) };
    assert!(back == garbage, "open wrote to a foreign object");
    // SAFETY: our fd.
    unsafe { libc::close(fd) };
    ShmMutex::<u64>::unlink(&name).unwrap();
    let e = ShmMutex::<u64>::open("bad/name").unwrap_err();
    assert!(matches!(e.cause(), ShmError::InvalidName), "{e:?}");
    assert_eq!(e.object_name(), Some("bad/name"));
}

/// The holder is SIGKILLed mid-update; a waiter (no supervisor) takes over within a bounded
/// time and is told, and keeps being told until it marks the data consistent.
fn owner_death_detected_by_waiter() {
    let m = ShmMutex::anonymous([0u64; 2]).unwrap();
    let victim = fork_holder(&m, false, |v| v[0] += 1); // torn: b not updated
                                                        // A waiter in another process blocks on the lock, then the holder dies.
    let waiter = fork(|| match m.lock() {
        Err(LockError::OwnerDied(g)) => {
            assert_eq!(g[0], g[1] + 1, "saw the torn update");
            // Do not repair: the next owner must be told too.
            drop(g);
            0
        }
        Ok(_) => 2,
        Err(LockError::Poisoned(_)) => 3,
    });
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    kill9(victim);
    assert_eq!(wait(waiter), 0, "waiter was not told the owner died");
    let took = t.elapsed();
    println!("    waiter took over {took:?} after the kill (no supervisor)");
    assert!(took < Duration::from_secs(2), "detection took {took:?}");
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    // Still reported to the next owner (the flag persists until mark_consistent).
    match m.lock() {
        Err(LockError::OwnerDied(mut g)) => {
            g[1] = g[0];
            g.mark_consistent();
        }
        other => panic!("not reported again: {:?}", other.map(|_| ())),
    }
    assert!(ok(m.lock())[0] == 1);
    let d = m.diagnostics();
    assert_eq!(d.owner_deaths, 1);
    assert!(!d.owner_died);
    m.recover();
    assert_quiescent(&m);
}

/// A supervisor that reaped the owner calls force_unlock: the lock is free at once, the next
/// owner is told. force_unlock of a pid that did not hold it returns false.
fn force_unlock_after_waitpid() {
    let m = ShmMutex::anonymous(7u32).unwrap();
    let victim = fork_holder(&m, false, |_| {});
    assert!(!m.force_unlock(victim as u32), "alive: must be left alone");
    assert!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)));
    kill9(victim);
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    let t = Instant::now();
    assert!(m.force_unlock(victim as u32), "it held the lock");
    match m.try_lock() {
        Err(TryLockError::OwnerDied(g)) => g.mark_consistent(),
        other => panic!("{:?}", other.map(|_| ())),
    }
    println!("    force_unlock + try_lock took {:?}", t.elapsed());
    assert!(!m.force_unlock(victim as u32), "already recovered");
    let idle = fork(|| 0);
    assert_eq!(wait(idle), 0);
    assert!(!m.force_unlock(idle as u32), "never held it");
    assert!(matches!(m.try_lock(), Ok(g) if *g == 7));
    assert_quiescent(&m);
}

/// `lock_or_repair` after an owner killed mid-update: the repair runs once, on the value the
/// dead owner left, and later owners get a clean lock. `force_unlock` takes the `pid_t`
/// `fork` returned as it is.
fn lock_or_repair_after_owner_death() {
    let m = ShmMutex::anonymous([5u64, 5]).unwrap();
    let victim = fork_holder(&m, false, |v| v[0] += 1); // half of a two-word update
    kill9(victim);
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    assert!(m.force_unlock(victim), "it held the lock");
    let mut repaired = 0;
    let g = m.lock_or_repair(|v| {
        repaired += 1;
        assert_eq!(*v, [6, 5]);
        v[0] = v[1];
    });
    assert_eq!(*g, [5, 5]);
    drop(g);
    assert_eq!(*m.lock_or_repair(|_| repaired += 1), [5, 5]);
    assert_eq!(repaired, 1);
    assert!(!m.owner_died() && !m.is_poisoned());
    assert!(m.lock().is_ok());
    assert!(!m.force_unlock(-1), "no pid");
    assert_quiescent(&m);
}

/// Polling users (try_lock only, like an accept lock) recover from a dead owner too.
fn try_lock_polling_detects_dead_owner() {
    let m = ShmMutex::anonymous(0u32).unwrap();
    let victim = fork(|| {
        std::mem::forget(ok(m.lock()));
        // SAFETY: die holding the lock.
        unsafe { libc::raise(libc::SIGKILL) };
        0
    });
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    let t = Instant::now();
    loop {
        match m.try_lock() {
            Err(TryLockError::OwnerDied(g)) => {
                g.mark_consistent();
                break;
            }
            Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_micros(200)),
            other => panic!("{:?}", other.map(|_| ())),
        }
        assert!(t.elapsed() < Duration::from_secs(2), "never recovered");
    }
    println!("    polling try_lock recovered after {:?}", t.elapsed());
}

/// Waiters killed while queued leave the count and the queue; the survivor still gets the
/// lock.
fn queued_waiters_killed() {
    let m = ShmMutex::anonymous(0u64).unwrap();
    let g = ok(m.lock());
    let kids: Vec<_> = (0..4)
        .map(|_| {
            fork(|| {
                *ok(m.lock()) += 1;
                0
            })
        })
        .collect();
    common::poll_until(
        Duration::from_secs(5),
        Duration::from_millis(1),
        || format!("4 queued: {:?}", m.diagnostics()),
        || m.diagnostics().queued_slots >= 4,
    );
    assert_eq!(m.diagnostics().waiters, 4);
    for &k in &kids[..3] {
        kill9(k);
        assert_eq!(wait(k), 128 + libc::SIGKILL);
    }
    // Recovery by the scan every waiter runs (no supervisor): wait for it.
    let t = Instant::now();
    common::poll_until(
        Duration::from_secs(2),
        Duration::from_millis(1),
        || format!("no phantom waiters: {:?}", m.diagnostics()),
        || {
            let d = m.diagnostics();
            d.waiters == 1 && d.queued_slots == 1
        },
    );
    println!("    dead waiters removed after {:?}", t.elapsed());
    drop(g);
    assert_eq!(wait(kids[3]), 0);
    assert_eq!(*ok(m.lock()), 1);
    assert_quiescent(&m);
    // The survivor left with _exit, keeping its participant slot: a scan reclaims it.
    assert_eq!(m.recover(), 1);
    assert_eq!(m.diagnostics().participants, 1);
}

/// A panic while holding the lock poisons it, across processes too.
fn panic_poisons() {
    // The panics below are intended: keep their messages out of the test output.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    type Hook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send>;
    struct Restore(Option<Hook>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(h) = self.0.take() {
                std::panic::set_hook(h);
            }
        }
    }
    let _restore = Restore(Some(hook));
    let m = ShmMutex::anonymous(0u32).unwrap();
    let child = fork(|| {
        let _g = ok(m.lock());
        panic!("poison it");
    });
    assert_eq!(wait(child), 101);
    assert!(m.is_poisoned());
    match m.lock() {
        Err(LockError::Poisoned(g)) => g.mark_consistent(),
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(!m.is_poisoned());
    // Same process, another thread.
    std::thread::scope(|s| {
        let _ = s
            .spawn(|| {
                let _g = ok(m.lock());
                panic!("poison again");
            })
            .join();
    });
    assert!(matches!(m.try_lock(), Err(TryLockError::Poisoned(_))));
    m.clear_poison();
    assert!(m.try_lock().is_ok());
}

/// Fork while holding: the child does not own the lock, cannot take it, and dropping its copy
/// of the guard does not release the parent's lock.
fn fork_while_holding() {
    let m = ShmMutex::anonymous(1u32).unwrap();
    let g = ok(m.lock());
    let parent = std::process::id();
    let child = fork(|| {
        assert!(!g.is_owner(), "child believes it owns the lock");
        assert!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)));
        assert!(m
            .try_lock_for(Duration::from_millis(30))
            .is_err_and(|e| matches!(e, TryLockError::WouldBlock)));
        assert_eq!(m.diagnostics().owner_pid, Some(parent));
        // The value is the parent's to touch: reaching it through the inherited guard panics.
        std::panic::set_hook(Box::new(|_| {}));
        assert!(catch_unwind(AssertUnwindSafe(|| *g)).is_err());
        let _ = std::panic::take_hook();
        // Drop the child's copy of the guard: must not release the parent's lock.
        // SAFETY: a bitwise copy in the child's own memory; the original is never dropped
        // here (the child leaves with _exit).
        drop(unsafe { std::ptr::read(&g) });
        assert!(m.is_locked(), "dropping the inherited guard unlocked");
        0
    });
    assert_eq!(wait(child), 0);
    assert!(g.is_owner());
    assert!(m.is_locked(), "the child released the parent's lock");
    assert_eq!(m.diagnostics().owner_pid, Some(parent));
    drop(g);
    assert!(!m.is_locked());
    assert!(m.try_lock().is_ok());
    m.recover();
    assert_quiescent(&m);
}

/// A lock held through a leaked guard (`ShmMutexGuard::leak`) is held like any other: a
/// process that dies with it is recovered (by a waiter's owner-death detection, or by
/// `force_unlock`), the next owner gets `OwnerDied`, and the flag stays until marked
/// consistent. `unlock_leaked` releases it from any thread of the holder, does nothing in a
/// forked child or where the lock is not held, and keeps the owner-died flag a leaked guard
/// was taken with.
fn leaked_guard() {
    let m = ShmMutex::anonymous([0u64; 2]).unwrap();
    // Dies holding a leaked guard, mid-update; a waiter detects it.
    let victim = fork_holder(&m, true, |v| v[0] += 1);
    let waiter = fork(|| match m.lock() {
        Err(LockError::OwnerDied(g)) => {
            assert_eq!(*g, [1, 0], "saw the torn update");
            // Leak it unrepaired: the flag must survive the leak and the raw unlock.
            ShmMutexGuard::leak(g);
            // SAFETY: this thread leaked the guard just now and holds no other.
            i32::from(!unsafe { m.unlock_leaked() }) * 2
        }
        Ok(_) => 3,
        Err(LockError::Poisoned(_)) => 4,
    });
    std::thread::sleep(Duration::from_millis(20));
    kill9(victim);
    assert_eq!(wait_limit(waiter, Duration::from_secs(5), "waiter"), 0);
    assert_eq!(wait(victim), 128 + libc::SIGKILL);
    assert!(m.owner_died(), "the flag did not survive the leaked guard");
    assert_eq!(*m.lock_or_repair(|v| v[1] = v[0]), [1, 1]);
    assert!(!m.owner_died());

    // Reaped by a supervisor: force_unlock releases a leaked guard's lock at once.
    let victim = fork(|| {
        ShmMutexGuard::leak(ok(m.lock()));
        0
    });
    assert_eq!(wait(victim), 0);
    assert!(m.is_locked(), "the exited child still holds it");
    assert!(m.force_unlock(victim), "it held the lock");
    match m.try_lock() {
        Err(TryLockError::OwnerDied(g)) => g.mark_consistent(),
        other => panic!("{:?}", other.map(|_| ())),
    }

    // Held here through a leaked guard: a forked child does not hold it (its unlock_leaked
    // does nothing), another thread of this process may release it.
    ShmMutexGuard::leak(ok(m.lock()));
    let child = fork(|| {
        // SAFETY: the child holds no guard; the call must see that the lock is not its own.
        let released = unsafe { m.unlock_leaked() };
        i32::from(released || !m.is_locked())
    });
    assert_eq!(wait(child), 0, "the child released the parent's lock");
    assert!(m.is_locked());
    std::thread::scope(|s| {
        // SAFETY: this process holds the lock through the guard leaked above, and no other.
        s.spawn(|| assert!(unsafe { m.unlock_leaked() }));
    });
    assert!(!m.is_locked());
    // SAFETY: no guard of `m` is alive or leaked: a no-op.
    let released = unsafe { m.unlock_leaked() };
    assert!(!released, "not held: nothing to release");
    assert_eq!(*ok(m.lock()), [1, 1]);
    assert!(!m.owner_died() && !m.is_poisoned());
    m.recover();
    assert_quiescent(&m);
}

/// A stopped (SIGSTOP) owner is alive: never taken over, force_unlock leaves it alone.
fn stopped_owner_not_taken_over() {
    let m = ShmMutex::anonymous(0u32).unwrap();
    let flags = AnonShared::counters(1);
    let holder = fork(|| {
        let mut g = ok(m.lock());
        flags.at(0).store(1, SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        *g += 1;
        0
    });
    while flags.at(0).load(SeqCst) == 0 {
        std::thread::sleep(Duration::from_micros(100));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(holder, libc::SIGSTOP) };
    assert!(matches!(
        m.try_lock_for(Duration::from_millis(100)),
        Err(TryLockError::WouldBlock)
    ));
    assert!(!m.force_unlock(holder as u32));
    assert_eq!(m.recover(), 0);
    assert_eq!(m.diagnostics().owner_pid, Some(holder as u32));
    // SAFETY: as above.
    unsafe { libc::kill(holder, libc::SIGCONT) };
    assert_eq!(wait(holder), 0);
    assert_eq!(*ok(m.lock()), 1, "the stopped owner finished its section");
    assert!(!m.diagnostics().owner_died);
}

/// Deaths in windows too narrow for random kills to hit, made deterministic with the
/// test-only crash points: a process SIGKILLs itself (1) with the journal lock held and its
/// redo log committed before the state-word CAS, (2) after the CAS, (3) after applying,
/// (4) owing a normal-mode wake-up, (5) owing a hand-off, (6) right after taking its token.
/// Each window is built step by step, so it is reached on every run: a holder `H` and a
/// sleeper `W` that the parent sees queued (in the diagnostics) before anyone unlocks; for
/// (5) `W` stops after its normal wake-up while `H` relocks, so that it wakes to a held lock
/// after more than 1 ms and switches the lock to starvation mode. Then `W` and a third process
/// contend: they must finish, the data must be exact, the lock quiescent, and the recovery
/// counters must show the window was repaired.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
fn crash_points() {
    use gomutex::__crash::*;
    const WOKEN: u32 = 2;
    const STARVING: u32 = 4;
    // In the journal: W dies registering as a waiter.
    let journal = |p| matches!(p, LOG_COMMITTED | WORD_CHANGED | APPLIED);
    for point in [
        LOG_COMMITTED,
        WORD_CHANGED,
        APPLIED,
        OWES_WAKEUP,
        OWES_HANDOFF,
        TOKEN_TAKEN,
    ] {
        let what = format!("crash point {point}");
        let m = ShmMutex::anonymous([0u64; 2]).unwrap();
        // 0: sections done; 1: the holder's phase (1 holds, 2 relocked); 2: the parent's go
        // (1 unlock, 2 unlock again).
        let f = AnonShared::counters(3);
        let (done, phase, go) = (f.at(0), f.at(1), f.at(2));
        let section = |g: &mut [u64; 2]| -> bool {
            if g[0] != g[1] || g[0] != done.load(SeqCst) {
                return false;
            }
            g[0] += 1;
            std::hint::black_box(&mut *g);
            g[1] += 1;
            done.fetch_add(1, SeqCst);
            true
        };
        let work = |first: Option<ShmMutexGuard<'_, [u64; 2]>>, iters: u64| -> i32 {
            let mut first = first;
            for i in 0..iters {
                let mut g = match first.take().map(Ok).unwrap_or_else(|| m.lock()) {
                    Ok(g) => g,
                    Err(LockError::OwnerDied(g)) => {
                        // The dead process died inside the lock code, not in a section: the
                        // data is intact, but we must be told anyway.
                        g.mark_consistent();
                        g
                    }
                    Err(LockError::Poisoned(_)) => return 7,
                };
                if !section(&mut g) {
                    return 8;
                }
                if i % 4 == 0 {
                    // Hold it a while: queueing, and starvation mode.
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            0
        };
        let wait_go = |v: u64| {
            while go.load(SeqCst) < v {
                std::thread::sleep(Duration::from_micros(50));
            }
        };
        let until = |cond: &dyn Fn(&gomutex::shm::Diagnostics) -> bool, step: &str| {
            common::poll_until(
                Duration::from_secs(10),
                Duration::from_micros(100),
                || format!("{what}: {step}: {:?}", m.diagnostics()),
                || cond(&m.diagnostics()),
            )
        };
        let queued = |d: &gomutex::shm::Diagnostics| d.waiters == 1 && d.queued_slots == 1;
        let unlocker = matches!(point, OWES_WAKEUP | OWES_HANDOFF);
        // H: holds the lock until told; for 4 and 5 it is the armed one (it dies unlocking).
        let h = fork(|| {
            let g = ok(m.lock());
            phase.store(1, SeqCst);
            wait_go(1);
            if point == OWES_WAKEUP {
                gomutex::__crash::crash_at(point);
            }
            drop(g);
            if point == OWES_HANDOFF {
                // Relock while W, woken, is stopped; then unlock in starvation mode.
                let g = ok(m.lock());
                gomutex::__crash::crash_at(point);
                phase.store(2, SeqCst);
                wait_go(2);
                drop(g);
            }
            if unlocker {
                return 3; // the crash point was not reached
            }
            work(None, 1_500)
        });
        poll_until_set(phase, 1, &what);
        // W: queues behind H; for 1, 2, 3 and 6 it is the armed one (it dies waiting).
        let w = fork(|| {
            match point {
                OWES_WAKEUP => {}
                OWES_HANDOFF => gomutex::__crash::stop_at(TOKEN_TAKEN),
                _ => gomutex::__crash::crash_at(point),
            }
            let g = m.lock();
            if !unlocker {
                return 3; // the crash point was not reached
            }
            match g {
                Ok(g) => work(Some(g), 1_500),
                Err(LockError::OwnerDied(g)) => {
                    g.mark_consistent();
                    work(Some(g), 1_500)
                }
                Err(LockError::Poisoned(_)) => 7,
            }
        });
        let armed = if unlocker { h } else { w };
        let (survivor, sdesc) = if unlocker { (w, "W") } else { (h, "H") };
        if journal(point) {
            // W dies registering as a waiter, inside the journal.
            assert_eq!(
                wait_limit(w, Duration::from_secs(20), &what),
                128 + libc::SIGKILL,
                "{what}: never reached"
            );
        } else {
            // W is asleep in the queue, and nobody is awake to take the lock but H.
            until(&|d| queued(d) && d.state & WOKEN == 0, "W queued");
        }
        if point == OWES_HANDOFF {
            // W has slept over 1 ms: woken now it finds the lock held again and starves.
            std::thread::sleep(Duration::from_millis(3));
            go.store(1, SeqCst);
            procs::wait_stopped(w);
            poll_until_set(phase, 2, &what);
            procs::signal(w, libc::SIGCONT);
            until(&|d| queued(d) && d.state & STARVING != 0, "W starving");
            go.store(2, SeqCst);
        } else {
            go.store(1, SeqCst);
        }
        // A third process contends with the survivor (and meets the repair first).
        let other = fork(|| work(None, 1_500));
        if !journal(point) {
            assert_eq!(
                wait_limit(armed, Duration::from_secs(20), &what),
                128 + libc::SIGKILL,
                "{what}: never reached"
            );
        }
        for (p, who) in [(survivor, sdesc), (other, "other")] {
            assert_eq!(
                wait_limit(p, Duration::from_secs(20), &what),
                0,
                "{what}: {who}"
            );
        }
        m.recover();
        let g = match m.lock() {
            Ok(g) => g,
            Err(LockError::OwnerDied(g)) => {
                g.mark_consistent();
                g
            }
            Err(e) => panic!("{what}: {e}"),
        };
        let d = done.load(SeqCst);
        assert!(
            g[0] == d && g[1] == d && d == 3_000,
            "{what}: data {:?} done {d}",
            *g
        );
        drop(g);
        assert_quiescent(&m);
        let diag = m.diagnostics();
        assert_eq!(diag.participants, 1, "{what}: {diag:?}");
        let rc = diag.recovery;
        println!(
            "    point {point}: {rc:?}, owner deaths {}",
            diag.owner_deaths
        );
        let exercised = match point {
            LOG_COMMITTED => rc.journal_takeovers >= 1,
            WORD_CHANGED | APPLIED => rc.journal_takeovers >= 1 && rc.journal_replays >= 1,
            OWES_WAKEUP | OWES_HANDOFF => rc.owed_wakeups_delivered >= 1,
            _ => rc.dead_woken_cleared + rc.handoffs_passed_on >= 1,
        };
        assert!(exercised, "{what}: window not exercised: {rc:?}");
    }
}

/// Wait (bounded) until a flag of the test's shared counters reaches `v`.
fn poll_until_set(flag: &std::sync::atomic::AtomicU64, v: u64, what: &str) {
    common::poll_until(
        Duration::from_secs(10),
        Duration::from_micros(100),
        || format!("{what}: flag {v}"),
        || flag.load(SeqCst) >= v,
    );
}

/// With one waiter slot (and with none), contention still works: waiters without a slot wait
/// outside the queue.
fn slot_exhaustion() {
    for slots in [0, 1] {
        let cfg = Config::new().participants(8).waiter_slots(slots);
        let m = ShmMutex::anonymous_with([0u64; 2], cfg).unwrap();
        let kids: Vec<_> = (0..4)
            .map(|_| {
                fork(|| {
                    for _ in 0..1_000 {
                        let mut g = ok(m.lock());
                        assert_eq!(g[0], g[1]);
                        g[0] += 1;
                        std::hint::black_box(&mut g);
                        g[1] += 1;
                    }
                    0
                })
            })
            .collect();
        for k in kids {
            assert_eq!(wait(k), 0);
        }
        assert_eq!(*ok(m.lock()), [4_000; 2]);
        assert_quiescent(&m);
    }
}

/// Participant table: processes beyond its size wait for dead ones to be reclaimed.
fn participants_reclaimed() {
    let cfg = Config::new().participants(2).waiter_slots(4);
    let m = ShmMutex::anonymous_with(0u64, cfg).unwrap();
    *ok(m.lock()) += 1; // the parent takes one participant slot
    for _ in 0..5 {
        // Each child takes the other slot and dies with it; the next must reclaim it.
        let k = fork(|| {
            *ok(m.lock()) += 1;
            // SAFETY: die without dropping the handle.
            unsafe { libc::raise(libc::SIGKILL) };
            0
        });
        assert_eq!(wait(k), 128 + libc::SIGKILL);
    }
    assert_eq!(*ok(m.lock()), 6);
    m.recover();
    assert_eq!(m.diagnostics().participants, 1);
}

/// A process that dies while dropping a handle, as the handle gives its idle participant slot
/// back, leaves nothing wedged: recovery (which needs the journal lock) finishes, and the slot
/// is free again.
#[cfg(feature = "__crash-points")] // arms crash points: the test-only feature
fn death_while_releasing_participant_slot() {
    let cfg = Config::new().participants(4).waiter_slots(4);
    let mut plan = MappingLayout::new();
    let at = plan.mutex::<u64>(cfg).unwrap();
    let map = Mapping::anonymous(plan.len()).unwrap();
    let m = ShmMutex::init_in(&map, at, 0u64, cfg).unwrap();
    *ok(m.lock()) += 1; // the parent's participant slot
    let k = fork(|| {
        let h = ShmMutex::<u64>::attach_in(&map, at).unwrap();
        *ok(h.lock()) += 1; // the child's own slot
        gomutex::__crash::crash_at(gomutex::__crash::RELEASING_SELF);
        drop(h);
        0
    });
    assert_eq!(wait(k), 128 + libc::SIGKILL, "crash point 7 never reached");
    // In a child, so that a wedged journal lock fails the test instead of hanging it.
    let checker = fork(|| {
        m.recover();
        let d = m.diagnostics();
        // The parent's slot and this checker's (it registered to recover); the dead one's is free.
        if d.participants == 2 && *ok(m.lock()) == 2 {
            0
        } else {
            eprintln!("after recovery: {d:?}");
            1
        }
    });
    assert_eq!(
        wait_limit(
            checker,
            Duration::from_secs(10),
            "recovery after a death in drop"
        ),
        0
    );
}

/// Timed locks across processes.
fn timed_lock_cross_process() {
    let m = ShmMutex::anonymous(0u32).unwrap();
    let flags = AnonShared::counters(1);
    let holder = fork(|| {
        let g = ok(m.lock());
        flags.at(0).store(1, SeqCst);
        std::thread::sleep(Duration::from_millis(150));
        drop(g);
        0
    });
    while flags.at(0).load(SeqCst) == 0 {
        std::thread::sleep(Duration::from_micros(100));
    }
    let t = Instant::now();
    assert!(matches!(
        m.try_lock_for(Duration::from_millis(20)),
        Err(TryLockError::WouldBlock)
    ));
    let e = t.elapsed();
    assert!(
        e >= Duration::from_millis(20) && e < Duration::from_millis(140),
        "{e:?}"
    );
    let g = m.try_lock_until(Instant::now() + Duration::from_secs(5));
    assert!(g.is_ok());
    drop(g);
    assert_eq!(wait(holder), 0);
    m.recover();
    assert_quiescent(&m);
}

/// Debug output and guard access.
fn debug_and_guard() {
    let m = ShmMutex::anonymous([1u16, 2, 3]).unwrap();
    let s = format!("{m:?}");
    assert!(s.contains("data: [1, 2, 3]"), "{s}");
    let g: ShmMutexGuard<'_, [u16; 3]> = ok(m.lock());
    assert!(format!("{m:?}").contains("<locked>"));
    assert_eq!(format!("{g:?}"), "[1, 2, 3]");
}

// ------------------------------------------------------------------ runner

pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--shm-child") {
        std::process::exit(child_main(&args[1..]));
    }
    let tests: &[(&str, fn())] = &[
        ("exclusion_8_processes", exclusion_8_processes),
        ("threads_and_processes", threads_and_processes),
        ("fairness_two_processes", fairness_two_processes),
        ("named_unrelated_processes", named_unrelated_processes),
        ("named_open_or_create_race", named_open_or_create_race),
        (
            "named_mapping_unrelated_processes",
            named_mapping_unrelated_processes,
        ),
        ("bad_attach_writes_nothing", bad_attach_writes_nothing),
        ("several_locks_in_one_mapping", several_locks_in_one_mapping),
        (
            "init_in_refuses_a_lock_another_process_uses",
            init_in_refuses_a_lock_another_process_uses,
        ),
        (
            "owner_death_detected_by_waiter",
            owner_death_detected_by_waiter,
        ),
        ("force_unlock_after_waitpid", force_unlock_after_waitpid),
        (
            "lock_or_repair_after_owner_death",
            lock_or_repair_after_owner_death,
        ),
        (
            "try_lock_polling_detects_dead_owner",
            try_lock_polling_detects_dead_owner,
        ),
        ("queued_waiters_killed", queued_waiters_killed),
        ("panic_poisons", panic_poisons),
        ("fork_while_holding", fork_while_holding),
        ("leaked_guard", leaked_guard),
        ("stopped_owner_not_taken_over", stopped_owner_not_taken_over),
        #[cfg(feature = "__crash-points")]
        ("crash_points", crash_points),
        ("slot_exhaustion", slot_exhaustion),
        ("participants_reclaimed", participants_reclaimed),
        #[cfg(feature = "__crash-points")]
        (
            "death_while_releasing_participant_slot",
            death_while_releasing_participant_slot,
        ),
        ("timed_lock_cross_process", timed_lock_cross_process),
        ("debug_and_guard", debug_and_guard),
        (
            "reused_pid_does_not_inherit_registration",
            pid_reuse::reused_pid_does_not_inherit_registration,
        ),
        (
            "reused_pid_does_not_own_inherited_guard",
            pid_reuse::reused_pid_does_not_own_inherited_guard,
        ),
    ];
    procs::run_cases("shm_process", &args, tests);
}
