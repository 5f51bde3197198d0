//! Attaching to memory: several locks placed in one mapping, `init_in` over a lock in use, and
//! every bad attach refused without writing a byte.

use super::common::procs::{fork, kill9, wait};
use super::common::shm_name;
use super::common::shmtest::{assert_quiescent, ok};
use super::fork_holder;
use gomutex::shm::{
    Config, LockError, Mapping, MappingLayout, ShmError, ShmMutex, ShmSafe, LAYOUT_VERSION, MAGIC,
};
use std::time::{Duration, Instant};

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
pub fn several_locks_in_one_mapping() {
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
pub fn init_in_refuses_a_lock_another_process_uses() {
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
pub fn bad_attach_writes_nothing() {
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
    let name = shm_name("bad");
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
