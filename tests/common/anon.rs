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
}

impl AnonShared {
    /// A fresh zero-filled, page-aligned shared mapping of `len` bytes (at least one).
    pub fn new(len: usize) -> io::Result<Self> {
        let map = Mapping::anonymous(len.max(1)).map_err(io::Error::other)?;
        Ok(Self { map })
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
        self.map
            .shared_slice::<AtomicU64>(0, self.len() / 8)
            .expect("a page-aligned mapping of atomics")
    }
}
