//! One anonymous shared mapping for test bookkeeping (flags, counters, timings), on the crate's
//! own [`gomutex::shm::Mapping`] (`mmap(MAP_SHARED | MAP_ANONYMOUS)`): zeroed, page-aligned
//! memory that every process forked after its creation shares (and on which the kernel keys
//! futexes by shared page, not by address space).
//!
//! `benches/common.rs` includes it with `#[path]` for its `ShmBox`.

#![allow(dead_code)]

use gomutex::shm::Mapping;
use std::io;
use std::sync::atomic::AtomicU64;

/// An anonymous `MAP_SHARED` mapping of `len` bytes, unmapped when dropped.
#[derive(Debug)]
pub struct AnonShared {
    map: Mapping,
    /// The mapping as `len / 8` atomics, lent out once by `Mapping::shared_slice` (which
    /// takes the mapping's claim-table lock: not something to do on every counter access in
    /// the torture tests' hot loops).
    u64s: *const AtomicU64,
}

// SAFETY: the pointer is into the mapping `self` owns, read only as atomics (see `u64s`);
// `Mapping` is `Send + Sync`.
unsafe impl Send for AnonShared {}
// SAFETY: as for `Send`.
unsafe impl Sync for AnonShared {}

impl AnonShared {
    /// A fresh zero-filled, page-aligned shared mapping of `len` bytes (at least one).
    pub fn new(len: usize) -> io::Result<Self> {
        let map = Mapping::anonymous(len.max(1)).map_err(io::Error::other)?;
        let u64s = map
            .shared_slice::<AtomicU64>(0, map.len() / 8)
            .map_err(io::Error::other)?
            .as_ptr();
        Ok(Self { map, u64s })
    }

    /// A mapping of `n` zeroed `AtomicU64`s (see [`AnonShared::u64s`]); panics if mmap fails.
    pub fn counters(n: usize) -> Self {
        Self::new(n * 8).expect("mmap(MAP_SHARED | MAP_ANONYMOUS)")
    }

    /// Start of the mapping (page-aligned); valid for `len()` bytes while `self` lives.
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The `i`th of the mapping's `AtomicU64`s (panics if out of bounds).
    pub fn at(&self, i: usize) -> &AtomicU64 {
        &self.u64s()[i]
    }

    /// The mapping as `len() / 8` atomics. Callers that also write through `as_ptr` must not
    /// do so at these bytes concurrently.
    pub fn u64s(&self) -> &[AtomicU64] {
        // SAFETY: `new` got this pointer from `Mapping::shared_slice` for `len / 8` atomics,
        // and that range stays lent out as atomics while the mapping lives; `self` owns the
        // mapping, so it lives at least as long as the returned borrow.
        unsafe { std::slice::from_raw_parts(self.u64s, self.len() / 8) }
    }
}
