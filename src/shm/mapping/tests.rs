//! Placement, claims, type identity and named mappings.

use super::*;
use crate::shm::{ShmMutex, REGION_ALIGN};
use core::sync::atomic::Ordering::SeqCst;

#[test]
fn placement_is_checked() {
    let cfg = Config::new().participants(2).waiter_slots(2);
    let size = ShmMutex::<u64>::required_size(cfg).unwrap();
    let map = Mapping::anonymous(2 * size + 100).unwrap();
    // Past the end, misaligned, overflowing.
    assert!(matches!(
        ShmMutex::init_in(&map, 2 * size, 0u64, cfg),
        Err(ShmError::TooSmall { .. })
    ));
    assert!(matches!(
        ShmMutex::init_in(&map, 8, 0u64, cfg),
        Err(ShmError::Misaligned { .. })
    ));
    assert!(matches!(
        ShmMutex::init_in(&map, usize::MAX - 3, 0u64, cfg),
        Err(ShmError::TooSmall { .. })
    ));
    for off in [usize::MAX, map.len(), map.len() - 1] {
        assert!(ShmMutex::<u64>::attach_in(&map, off).is_err(), "{off}");
    }
    let a = ShmMutex::init_in(&map, size, 1u64, cfg).unwrap();
    // Overlaps are refused while `a` lives: before, inside, same start.
    for off in [size - REGION_ALIGN, size, size + REGION_ALIGN] {
        let r = ShmMutex::init_in(&map, off, 0u64, cfg);
        assert!(matches!(r, Err(ShmError::InvalidConfig(_))), "{off}: {r:?}");
    }
    assert!(matches!(
        ShmMutex::<u64>::attach_in(&map, size - REGION_ALIGN),
        Err(ShmError::InvalidConfig(_))
    ));
    let b = ShmMutex::<u64>::attach_in(&map, size).unwrap();
    drop(a);
    // Still claimed by `b`.
    assert!(ShmMutex::init_in(&map, size, 0u64, cfg).is_err());
    *b.lock().unwrap() += 1;
    drop(b);
    // Free again: may be reused, and the one below it too.
    let c = ShmMutex::init_in(&map, size, 7u64, cfg).unwrap();
    let d = ShmMutex::init_in(&map, 0, 8u64, cfg).unwrap();
    drop(map);
    assert_eq!((*c.lock().unwrap(), *d.lock().unwrap()), (7, 8));
}

#[test]
fn shared_values_are_checked() {
    use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
    let cfg = Config::new().participants(2).waiter_slots(2);
    let size = ShmMutex::<u64>::required_size(cfg).unwrap();
    let map = Mapping::anonymous(2 * size).unwrap();
    let m = ShmMutex::init_in(&map, 0, 1u64, cfg).unwrap();
    // Inside the lock, misaligned, past the end.
    assert!(matches!(
        map.shared::<AtomicU64>(8),
        Err(ShmError::InvalidConfig(_))
    ));
    assert!(matches!(
        map.shared::<AtomicU64>(size + 4),
        Err(ShmError::Misaligned { required: 8, .. })
    ));
    assert!(matches!(
        map.shared::<AtomicU64>(2 * size - 4),
        Err(ShmError::TooSmall { .. })
    ));
    let a = map.shared::<[AtomicU32; 2]>(size).unwrap();
    a[1].store(7, Relaxed);
    // The same type at the same offset again: the same value; anything else overlapping
    // it is refused, and so is a lock region over it, even with no reference left.
    assert_eq!(
        map.shared::<[AtomicU32; 2]>(size).unwrap()[1].load(Relaxed),
        7
    );
    assert!(map.shared::<AtomicU64>(size).is_err());
    assert!(map.shared::<AtomicU32>(size + 4).is_err());
    drop(m);
    assert!(ShmMutex::init_in(&map, size, 0u64, cfg).is_err());
    // The region below is free again once its handle is gone.
    let m = ShmMutex::init_in(&map, 0, 2u64, cfg).unwrap();
    assert_eq!(*m.lock().unwrap(), 2);
}

/// A shared value lent out at the start of a (former) region: its header is still valid,
/// but `attach_in` there must not make a lock (whose value is written non-atomically)
/// over bytes lent out as atomics.
#[test]
fn attach_in_refuses_a_shared_value_at_the_same_offset() {
    use core::sync::atomic::AtomicU64;
    let cfg = Config::new().participants(2).waiter_slots(2);
    let n = ShmMutex::<u64>::required_size(cfg).unwrap().div_ceil(8);
    let map = Mapping::anonymous(n * 8).unwrap();
    drop(ShmMutex::init_in(&map, 0, 1u64, cfg).unwrap());
    let lent = map.shared_slice::<AtomicU64>(0, n).unwrap();
    let r = ShmMutex::<u64>::attach_in(&map, 0);
    assert!(matches!(r, Err(ShmError::InvalidConfig(_))), "{r:?}");
    assert_eq!(lent.len(), n);
}

#[test]
fn shared_slices_are_checked() {
    use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
    let cfg = Config::new().participants(2).waiter_slots(2);
    let mut plan = MappingLayout::new();
    let lock = plan.mutex::<u64>(cfg).unwrap();
    let one = plan.shared::<AtomicU32>();
    let at = plan.shared_slice::<AtomicU64>(5);
    assert_eq!((at % 8, plan.len()), (0, at + 40));
    let map = Mapping::anonymous(plan.len()).unwrap();
    let m = ShmMutex::init_in(&map, lock, 1u64, cfg).unwrap();
    let s = map.shared_slice::<AtomicU64>(at, 5).unwrap();
    s[4].store(9, Relaxed);
    // The same element type and range again: the same values.
    assert_eq!(
        map.shared_slice::<AtomicU64>(at, 5).unwrap()[4].load(Relaxed),
        9
    );
    // One value is a slice of one, of the same type.
    map.shared::<AtomicU32>(one).unwrap().store(3, Relaxed);
    assert_eq!(
        map.shared_slice::<AtomicU32>(one, 1).unwrap()[0].load(Relaxed),
        3
    );
    // Other lengths, element types or array types over the same bytes are refused, and so
    // are the lock's bytes, a misaligned start, the end and an overflowing length.
    for r in [
        map.shared_slice::<AtomicU64>(at, 4).map(|_| ()),
        map.shared_slice::<AtomicU64>(at + 8, 4).map(|_| ()),
        map.shared_slice::<AtomicU32>(at, 10).map(|_| ()),
        map.shared::<[AtomicU64; 5]>(at).map(|_| ()),
        map.shared_slice::<AtomicU64>(8, 1).map(|_| ()),
    ] {
        assert!(matches!(r, Err(ShmError::InvalidConfig(_))), "{r:?}");
    }
    assert!(matches!(
        map.shared_slice::<AtomicU64>(at + 4, 1),
        Err(ShmError::Misaligned { required: 8, .. })
    ));
    assert!(matches!(
        map.shared_slice::<AtomicU64>(at, 6),
        Err(ShmError::TooSmall { .. })
    ));
    assert!(matches!(
        map.shared_slice::<AtomicU64>(at, usize::MAX / 4),
        Err(ShmError::TooSmall { .. })
    ));
    // Empty: no bytes, so nothing to check against the claims, and nothing claimed.
    assert!(map.shared_slice::<AtomicU64>(at, 0).unwrap().is_empty());
    drop(m);
    assert!(ShmMutex::init_in(&map, lock, 2u64, cfg).is_ok());
}

impl Mapping {
    /// A copy of the mapping's bytes.
    fn shared_bytes(&self) -> Vec<u8> {
        // SAFETY: our mapping, for `len` bytes; nobody writes it during these tests.
        unsafe { core::slice::from_raw_parts(self.as_ptr(), self.len()) }.to_vec()
    }
}

/// A memfd of `len` bytes.
fn memfd(len: usize) -> std::fs::File {
    use std::os::fd::FromRawFd;
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"gomutex-unit".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
    // SAFETY: a fresh descriptor nobody else owns.
    let f = unsafe { std::fs::File::from_raw_fd(fd) };
    f.set_len(len as u64).unwrap();
    f
}

/// Two mappings of one memfd in one process: `init_in` through the second must not
/// overwrite the lock a handle placed through the first holds, or is registered with.
#[test]
fn init_in_refuses_a_live_lock_through_another_mapping() {
    let cfg = Config::new().participants(2).waiter_slots(2);
    let len = ShmMutex::<u64>::required_size(cfg).unwrap();
    let f = memfd(len);
    let (m1, m2) = (Mapping::from_fd(&f).unwrap(), Mapping::from_fd(&f).unwrap());
    let a = ShmMutex::init_in(&m1, 0, 1u64, cfg).unwrap();
    let g = a.lock().unwrap();
    let me = std::process::id();
    let r = ShmMutex::init_in(&m2, 0, 2u64, cfg);
    assert!(
        matches!(r, Err(ShmError::RegionInUse { pid }) if pid == me),
        "init_in over a held lock: {r:?}"
    );
    drop(g);
    // Registered (it locked once), not holding: still in use.
    let before = m2.shared_bytes();
    let r = ShmMutex::init_in(&m2, 0, 2u64, cfg);
    assert!(
        matches!(r, Err(ShmError::RegionInUse { pid }) if pid == me),
        "init_in over a lock in use: {r:?}"
    );
    assert!(m2.shared_bytes() == before, "a refused init_in wrote");
    // Another layout version: it cannot tell, so it refuses too.
    let f2 = memfd(len);
    let m3 = Mapping::from_fd(&f2).unwrap();
    drop(ShmMutex::init_in(&m3, 0, 0u64, cfg).unwrap());
    // SAFETY: the version field of a region nobody uses, in our mapping.
    unsafe { (*m3.as_ptr().add(8).cast::<core::sync::atomic::AtomicU32>()).store(1, SeqCst) };
    let r = ShmMutex::init_in(&m3, 0, 0u64, cfg);
    assert!(
        matches!(r, Err(ShmError::VersionMismatch { found: 1, .. })),
        "{r:?}"
    );
    assert_eq!(*a.lock().unwrap(), 1);
    drop(a);
    // Nobody uses it any more: it may be initialised anew.
    let b = ShmMutex::init_in(&m2, 0, 3u64, cfg).unwrap();
    assert_eq!(*b.lock().unwrap(), 3);
}

/// A length past the object's end is refused before anything is mapped (touching it would
/// raise `SIGBUS`).
#[test]
fn from_fd_len_past_the_end_is_refused() {
    let f = memfd(4096);
    match Mapping::from_fd_len(&f, 8192) {
        Err(ShmError::TooSmall {
            needed: 8192,
            actual: 4096,
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(Mapping::from_fd_len(&f, 4096).unwrap().len(), 4096);
    assert_eq!(Mapping::from_fd_len(&f, 100).unwrap().len(), 100);
}

/// A region of `u32` is not a region of `f32` or `i32`, though they have its layout.
#[test]
fn another_type_of_the_same_layout_is_refused() {
    let cfg = Config::new().participants(2).waiter_slots(2);
    let map = Mapping::anonymous(ShmMutex::<u32>::required_size(cfg).unwrap()).unwrap();
    let a = ShmMutex::init_in(&map, 0, 7u32, cfg).unwrap();
    /// A `u32` by another name.
    #[derive(Clone, Copy)]
    #[repr(transparent)]
    struct W(#[allow(dead_code)] u32);
    // SAFETY: a `u32`.
    unsafe impl ShmSafe for W {}
    for (e, other) in [
        (ShmMutex::<f32>::attach_in(&map, 0).err(), "f32"),
        (ShmMutex::<i32>::attach_in(&map, 0).err(), "i32"),
        (ShmMutex::<[W; 1]>::attach_in(&map, 0).err(), "[W; 1]"),
    ] {
        let e = e.unwrap_or_else(|| panic!("attached as {other}"));
        let msg = e.to_string();
        assert!(
            msg.contains("`u32`") && msg.contains(&format!("`{other}`")),
            "{msg}"
        );
        assert!(
            matches!(&e, ShmError::TypeMismatch { expected, found, .. }
                if expected == other && found == "u32"),
            "{e:?}"
        );
    }
    assert_eq!(
        *ShmMutex::<u32>::attach_in(&map, 0).unwrap().lock().unwrap(),
        7
    );
    drop(a);
}

/// A misaligned offset is reported as misaligned (with the offset and the alignment),
/// also where the region would not fit either.
#[test]
fn misaligned_offset_says_so() {
    let cfg = Config::new().participants(2).waiter_slots(2);
    let mut plan = MappingLayout::new();
    plan.mutex::<u64>(cfg).unwrap();
    let map = Mapping::anonymous(plan.len()).unwrap();
    let e = ShmMutex::init_in(&map, 8, 0u64, cfg).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("offset 8") && msg.contains("64 bytes"),
        "{msg}"
    );
    let e = ShmMutex::<u64>::attach_in(&map, 8).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("offset 8") && msg.contains("64 bytes"),
        "{msg}"
    );
}

fn uniq(tag: &str) -> String {
    format!("/gomutex-unit-map-{tag}-{}", std::process::id())
}

fn is_kind(e: &ShmError, kind: io::ErrorKind) -> bool {
    matches!(e.cause(), ShmError::Io(io) if io.kind() == kind)
}

/// A named mapping is published once `init` has returned: an opener that starts while
/// `init` runs waits for it, then finds the locks initialised.
#[test]
fn named_mapping_is_published_after_init() {
    let cfg = Config::new().participants(4).waiter_slots(4);
    let mut plan = MappingLayout::new();
    let (a, b) = (
        plan.mutex::<u64>(cfg).unwrap(),
        plan.mutex::<u32>(cfg).unwrap(),
    );
    let name = uniq("publish");
    let (tx, rx) = std::sync::mpsc::channel();
    let opener = std::thread::spawn({
        let name = name.clone();
        move || {
            rx.recv().unwrap();
            let map = Mapping::open(&name).unwrap();
            let m = ShmMutex::<u32>::attach_in(&map, b).unwrap();
            let v = *m.lock().unwrap();
            v
        }
    });
    let map = Mapping::create(&name, &plan, |map| {
        ShmMutex::init_in(map, a, 1u64, cfg)?;
        tx.send(()).unwrap();
        // The opener is polling meanwhile (it maps the object, sees no magic, retries).
        std::thread::sleep(std::time::Duration::from_millis(30));
        ShmMutex::init_in(map, b, 2u32, cfg)?;
        Ok(())
    })
    .unwrap();
    assert_eq!(opener.join().unwrap(), 2);
    assert_eq!((map.len(), map.as_ptr() as usize % 4096), (plan.len(), 0));
    let e = Mapping::create(&name, &plan, |_| Ok(())).unwrap_err();
    assert!(is_kind(&e, io::ErrorKind::AlreadyExists), "{e:?}");
    assert_eq!(e.object_name(), Some(name.as_str()));
    // Not a lock region: ShmMutex::open refuses it, as Mapping::open refuses a region.
    let e = ShmMutex::<u64>::open(&name).unwrap_err();
    assert!(
        matches!(
            e.cause(),
            ShmError::BadMagic {
                found: MAP_MAGIC,
                ..
            }
        ),
        "{e:?}"
    );
    // The message names both kinds: what is there, and what the call wanted.
    let text = e.to_string();
    assert!(
        text.contains("holds a named gomutex Mapping") && text.contains("not a gomutex lock"),
        "{text}"
    );
    crate::shm::unlink(&name).unwrap();
    let m = ShmMutex::create(&name, 0u64, cfg).unwrap();
    let e = Mapping::open(&name).unwrap_err();
    assert!(matches!(e.cause(), ShmError::BadMagic { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("holds a gomutex lock's region") && text.contains("not a named gomutex"),
        "{text}"
    );
    crate::shm::unlink(&name).unwrap();
    drop(m);
}

/// A failing or panicking `init` leaves no name behind; an empty layout is refused.
#[test]
fn named_mapping_init_failure_removes_the_name() {
    let cfg = Config::new().participants(2).waiter_slots(2);
    let mut plan = MappingLayout::new();
    let at = plan.mutex::<u64>(cfg).unwrap();
    let name = uniq("fail");
    let e = Mapping::create(&name, &plan, |map| {
        ShmMutex::init_in(map, at + 8, 0u64, cfg).map(drop) // misaligned
    })
    .unwrap_err();
    assert!(matches!(e.cause(), ShmError::Misaligned { .. }), "{e:?}");
    assert_eq!(e.object_name(), Some(name.as_str()));
    let r = std::panic::catch_unwind(|| Mapping::create(&name, &plan, |_| panic!("in init")));
    assert!(r.is_err());
    let e = Mapping::open(&name).unwrap_err();
    assert!(is_kind(&e, io::ErrorKind::NotFound), "{e:?}");
    let e = Mapping::create(&name, &MappingLayout::new(), |_| Ok(())).unwrap_err();
    assert!(matches!(e.cause(), ShmError::InvalidConfig(_)), "{e:?}");
    let e = Mapping::open(&name).unwrap_err();
    assert!(is_kind(&e, io::ErrorKind::NotFound), "{e:?}");
}

/// Racing `open_or_create`: exactly one creator runs `init`, everybody shares its lock;
/// an existing mapping smaller than the caller's layout is refused.
#[test]
fn named_mapping_open_or_create_race() {
    let cfg = Config::new().participants(8).waiter_slots(8);
    let mut plan = MappingLayout::new();
    let at = plan.mutex::<u64>(cfg).unwrap();
    let name = uniq("race");
    let inits = core::sync::atomic::AtomicU32::new(0);
    let created: usize = std::thread::scope(|s| {
        let ts: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let (map, created) = Mapping::open_or_create(&name, &plan, |map| {
                        inits.fetch_add(1, SeqCst);
                        ShmMutex::init_in(map, at, 0u64, cfg).map(drop)
                    })
                    .unwrap();
                    let m = ShmMutex::<u64>::attach_in(&map, at).unwrap();
                    for _ in 0..100 {
                        *m.lock().unwrap() += 1;
                    }
                    usize::from(created)
                })
            })
            .collect();
        ts.into_iter().map(|t| t.join().unwrap()).sum()
    });
    assert_eq!((created, inits.load(SeqCst)), (1, 1));
    let map = Mapping::open(&name).unwrap();
    assert_eq!(
        *ShmMutex::<u64>::attach_in(&map, at)
            .unwrap()
            .lock()
            .unwrap(),
        400
    );
    let mut bigger = plan.clone();
    bigger.reserve(64, 64);
    let e = Mapping::open_or_create(&name, &bigger, |_| Ok(())).unwrap_err();
    assert!(matches!(e.cause(), ShmError::TooSmall { .. }), "{e:?}");
    crate::shm::unlink(&name).unwrap();
}

/// An object that is not a published mapping: too small for the header at once, never
/// published within the timeout, or another user's: errors, nothing written.
#[test]
fn named_mapping_open_checks() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let name = uniq("raw");
    let cname = std::ffi::CString::new(name.clone()).unwrap();
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe {
        libc::shm_open(
            cname.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600,
        )
    };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor nobody else owns.
    let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.set_len(100).unwrap();
    let e = Mapping::open(&name).unwrap_err();
    assert!(
        matches!(
            e.cause(),
            ShmError::TooSmall {
                needed: 4097,
                actual: 100
            }
        ),
        "{e:?}"
    );
    f.set_len(8192).unwrap();
    let opts = OpenOptions::new().timeout(std::time::Duration::from_millis(20));
    let e = Mapping::open_with(&name, opts).unwrap_err();
    assert!(matches!(e.cause(), ShmError::InitTimeout), "{e:?}");
    // Another user's object (needs CAP_CHOWN: skipped without it).
    // SAFETY: our descriptor.
    if unsafe { libc::fchown(fd, 65534, 65534) } == 0 {
        let e = Mapping::open(&name).unwrap_err();
        assert!(
            matches!(
                e,
                ShmError::NotOwner {
                    owner_uid: 65534,
                    ..
                }
            ),
            "{e:?}"
        );
        let opts = opts.allow_other_owner(true);
        let e = Mapping::open_with(&name, opts).unwrap_err();
        assert!(matches!(e.cause(), ShmError::InitTimeout), "{e:?}");
    }
    let mut back = vec![1u8; 8192];
    use std::os::unix::fs::FileExt;
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back.iter().all(|&b| b == 0), "open wrote");
    crate::shm::unlink(&name).unwrap();
}

#[test]
fn empty_and_bad_descriptors() {
    assert!(matches!(
        Mapping::anonymous(0),
        Err(ShmError::InvalidConfig(_))
    ));
    let f = std::fs::File::open("/dev/null").unwrap();
    assert!(matches!(
        Mapping::from_fd(&f),
        Err(ShmError::TooSmall { actual: 0, .. })
    ));
    // Read-only: mmap(PROT_WRITE, MAP_SHARED) fails with EACCES.
    let f = std::fs::File::open("/proc/self/exe").unwrap();
    let e = Mapping::from_fd(&f).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
}

/// A creator whose `init` fails or panics after an opener gave up on it (`InitTimeout`),
/// removed the name and created its own object under it, leaves the opener's object alone:
/// its clean-up removes the name only while the name is still its own.
#[test]
fn failed_init_leaves_a_newer_object_under_the_name() {
    let cfg = Config::new().participants(4).waiter_slots(4);
    let mut plan = MappingLayout::new();
    plan.mutex::<u64>(cfg).unwrap();
    for panics in [false, true] {
        let name = uniq(if panics { "stale-panic" } else { "stale-fail" });
        let (started_tx, started) = std::sync::mpsc::channel();
        let (finish, finish_rx) = std::sync::mpsc::channel::<()>();
        let creator = std::thread::spawn({
            let (name, plan) = (name.clone(), plan.clone());
            move || {
                Mapping::create(&name, &plan, move |_| {
                    started_tx.send(()).unwrap();
                    finish_rx.recv().unwrap();
                    if panics {
                        panic!("init panics after the opener took the name over");
                    }
                    Err(ShmError::Corrupt(
                        "init fails after the opener took the name over",
                    ))
                })
                .map(drop)
            }
        });
        // The creator is inside `init`: its object has the name, unpublished.
        started.recv().unwrap();
        let opts = OpenOptions::new().timeout(std::time::Duration::from_millis(5));
        let e = Mapping::open_with(&name, opts).unwrap_err();
        assert!(matches!(e.cause(), ShmError::InitTimeout), "{e:?}");
        // What the docs tell an opener to do: remove the name, create it anew (published).
        crate::shm::unlink(&name).unwrap();
        let ours = ShmMutex::create(&name, 42u64, cfg).unwrap();
        // Now the first creator fails (or panics) and cleans up.
        finish.send(()).unwrap();
        let r = creator.join();
        if panics {
            assert!(r.is_err(), "the creator's init was to panic");
        } else {
            assert!(r.unwrap().is_err(), "the creator's init was to fail");
        }
        // The name still leads to our object.
        let again = ShmMutex::<u64>::open(&name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(*again.lock().unwrap(), 42);
        crate::shm::unlink(&name).unwrap();
        drop(ours);
    }
}
