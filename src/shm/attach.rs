//! Turning memory into a trusted [`Region`]: `mmap`/`munmap` of shared memory, the checks every
//! attach makes before it trusts a header (placement, version, layout, type, a lock in use),
//! and the initialisation that publishes one.

use super::config::Config;
use super::error::ShmError;
use super::layout::{
    self, Header, Layout, ParticipantSlot, HEADER_SIZE, LAYOUT_VERSION, MAGIC, REGION_ALIGN,
};
use super::region::Region;
use super::types::ShmSafe;
use core::mem::{align_of, size_of};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering::*};

/// The alignment a region holding `T` must start on: the value sits at an offset aligned to
/// `max(REGION_ALIGN, align_of::<T>())` from the start, so an over-aligned `T` (up to the 4096
/// `Layout` accepts) is only aligned if the start is too.
pub(super) fn region_align<T>() -> usize {
    REGION_ALIGN.max(align_of::<T>())
}

fn check_base<T>(base: *const u8) -> Result<(), ShmError> {
    let required = region_align::<T>();
    if base.is_null() || !(base as usize).is_multiple_of(required) {
        return Err(ShmError::Misaligned {
            addr: base as usize,
            required,
            offset: None,
        });
    }
    Ok(())
}

/// [`ShmError::VersionMismatch`] unless a header's `version` is [`LAYOUT_VERSION`], then
/// [`ShmError::Corrupt`]`(what)` unless its `header_size` is `expected`.
pub(super) fn check_version(
    version: &AtomicU32,
    header_size: &AtomicU32,
    expected: usize,
    what: &'static str,
) -> Result<(), ShmError> {
    let found = version.load(Relaxed);
    if found != LAYOUT_VERSION {
        return Err(ShmError::VersionMismatch {
            found,
            expected: LAYOUT_VERSION,
        });
    }
    if header_size.load(Relaxed) as usize != expected {
        return Err(ShmError::Corrupt(what));
    }
    Ok(())
}

pub(super) fn validate<T>(base: *const u8, len: usize) -> Result<Layout, ShmError> {
    check_base::<T>(base)?;
    if len < HEADER_SIZE {
        return Err(ShmError::TooSmall {
            needed: HEADER_SIZE,
            actual: len,
        });
    }
    // SAFETY: `base` is aligned and at least a header long (checked); we only load atomics.
    let h = unsafe { &*(base as *const Header) };
    let magic = h.magic.load(Acquire);
    if magic == 0 {
        return Err(ShmError::Uninitialised);
    }
    if magic != MAGIC {
        return Err(ShmError::BadMagic {
            found: magic,
            expected: MAGIC,
        });
    }
    check_version(&h.version, &h.header_size, HEADER_SIZE, "header size")?;
    let (vs, va) = (h.value_size.load(Relaxed), h.value_align.load(Relaxed));
    if vs != size_of::<T>() as u64 || va as usize != align_of::<T>() {
        return Err(ShmError::ValueMismatch {
            expected_size: size_of::<T>(),
            expected_align: align_of::<T>(),
            found_size: vs,
            found_align: va,
        });
    }
    let (name, hash) = layout::type_ident::<T>();
    let found_hash = h.type_hash.load(Relaxed);
    if found_hash != hash {
        return Err(ShmError::TypeMismatch {
            expected: name,
            found: layout::unpack_name(h.type_name.each_ref().map(|w| w.load(Relaxed))),
            found_hash,
        });
    }
    let layout = Layout::new(
        h.participants.load(Relaxed),
        h.waiter_slots.load(Relaxed),
        size_of::<T>(),
        align_of::<T>(),
    )
    .ok_or(ShmError::Corrupt("slot counts"))?;
    if layout.participants < 2 {
        // Every region has at least one participant slot plus the spare slot; with
        // fewer, every lock call would spin for 2 s and panic (`register`).
        return Err(ShmError::Corrupt("participant count"));
    }
    if h.total_size.load(Relaxed) != layout.total_size as u64
        || h.value_offset.load(Relaxed) != layout.value_offset as u64
    {
        return Err(ShmError::Corrupt("sizes do not add up"));
    }
    if len < layout.total_size {
        return Err(ShmError::TooSmall {
            needed: layout.total_size,
            actual: len,
        });
    }
    Ok(layout)
}

/// Refuse to initialise a region over one in use: `base` (aligned, `avail` bytes of it mapped,
/// at least a header) holds a header and a live process is registered in its participant
/// table ([`ShmError::RegionInUse`]), or a header this build cannot read the table of
/// (another layout version, a corrupt header: it may be in use). Zeroed memory, garbage, and
/// a region whose participants are all gone may be overwritten. Loads only: writes nothing.
///
/// A process registers on its first lock call and leaves when its handle is dropped: a handle
/// that never locked is not seen.
pub(super) fn check_not_in_use(base: *const u8, avail: usize) -> Result<(), ShmError> {
    debug_assert!(avail >= HEADER_SIZE && (base as usize).is_multiple_of(REGION_ALIGN));
    // SAFETY: aligned and at least a header long (the caller's checks); atomics only.
    let h = unsafe { &*(base as *const Header) };
    if h.magic.load(Acquire) != MAGIC {
        return Ok(());
    }
    check_version(&h.version, &h.header_size, HEADER_SIZE, "header size")?;
    let n = h.participants.load(Relaxed) as usize;
    if n == 0
        || n > layout::MAX_SLOTS as usize
        || HEADER_SIZE + n * layout::PARTICIPANT_SLOT_SIZE > avail
    {
        return Err(ShmError::Corrupt(
            "participant table (not within the mapping)",
        ));
    }
    for i in 0..n {
        // SAFETY: slot `i` lies in the mapping (checked) at a 64-aligned offset; atomics only.
        let p = unsafe {
            &*(base.add(HEADER_SIZE + i * layout::PARTICIPANT_SLOT_SIZE) as *const ParticipantSlot)
        };
        let ident = p.ident.load(SeqCst);
        if ident != 0 && !p.dead(ident) {
            return Err(ShmError::RegionInUse {
                pid: super::identity::ident_pid(ident),
            });
        }
    }
    Ok(())
}

pub(super) fn layout_for<T>(cfg: Config) -> Result<Layout, ShmError> {
    if cfg.participants == 0 || cfg.participants >= layout::MAX_SLOTS {
        return Err(ShmError::InvalidConfig(
            "Config::participants must be in 1..=65535",
        ));
    }
    if cfg.waiter_slots > layout::MAX_SLOTS {
        return Err(ShmError::InvalidConfig(
            "Config::waiter_slots must be at most 65536",
        ));
    }
    // One extra participant slot is the spare slot a process borrows to reclaim dead
    // participants when the table is full.
    Layout::new(
        cfg.participants + 1,
        cfg.waiter_slots,
        size_of::<T>(),
        align_of::<T>(),
    )
    .ok_or(ShmError::InvalidConfig(
        "the lock's value type is aligned to more than 4096 bytes, or too large",
    ))
}

/// Initialise a region at `base` (checked: aligned, big enough).
///
/// # Safety
/// `base..base+len` is writable memory nobody else uses until this returns; except that if
/// `zeroed` (it is known to hold only zeros: a new anonymous mapping, a new `ftruncate`d
/// object), others may already load its atomics (an opener polling for the magic).
pub(super) unsafe fn init_region<T: ShmSafe>(
    base: *mut u8,
    len: usize,
    value: T,
    cfg: Config,
    zeroed: bool,
) -> Result<Region, ShmError> {
    let layout = layout_for::<T>(cfg)?;
    check_base::<T>(base)?;
    if len < layout.total_size {
        return Err(ShmError::TooSmall {
            needed: layout.total_size,
            actual: len,
        });
    }
    if !zeroed {
        // SAFETY: writable and ours alone (caller's contract), `total_size <= len`.
        unsafe { core::ptr::write_bytes(base, 0, layout.total_size) };
    }
    // SAFETY: aligned, in bounds; zeroed memory is a valid all-atomics header (its padding
    // fields are never written, so others' `&Header` to it see no change).
    let h = unsafe { &*(base as *const Header) };
    h.version.store(LAYOUT_VERSION, Relaxed);
    h.header_size.store(HEADER_SIZE as u32, Relaxed);
    h.total_size.store(layout.total_size as u64, Relaxed);
    h.participants.store(layout.participants, Relaxed);
    h.waiter_slots.store(layout.waiter_slots, Relaxed);
    h.value_offset.store(layout.value_offset as u64, Relaxed);
    h.value_size.store(size_of::<T>() as u64, Relaxed);
    h.value_align.store(align_of::<T>() as u32, Relaxed);
    let (name, hash) = layout::type_ident::<T>();
    h.type_hash.store(hash, Relaxed);
    for (w, v) in h.type_name.iter().zip(layout::pack_name(&name)) {
        w.store(v, Relaxed);
    }
    // SAFETY: the value offset is in bounds (layout) and aligned for T: it is a multiple of
    // `align_of::<T>()` from a base aligned to it (`check_base`).
    unsafe { core::ptr::write(base.add(layout.value_offset).cast::<T>(), value) };
    // Publish: everything above happens-before any attach that sees the magic.
    h.magic.store(MAGIC, Release);
    // SAFETY: initialised above with this layout; the caller keeps it mapped.
    Ok(unsafe { Region::new(NonNull::new_unchecked(base), layout) })
}
