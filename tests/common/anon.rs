//! One anonymous shared mapping, `mmap(MAP_SHARED | MAP_ANONYMOUS)`, unmapped on drop: zeroed,
//! page-aligned memory that every process forked after its creation shares (and on which the
//! kernel keys futexes by shared page, not by address space).
//!
//! Self-contained (std and libc only): `benches/common.rs` includes it with `#[path]` for its
//! `ShmBox`.

#![allow(dead_code)]

use std::io;
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicU64;

/// An anonymous `MAP_SHARED` mapping of `len` bytes, unmapped when dropped.
#[derive(Debug)]
pub struct AnonShared {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; what is stored in it, and how it is
// accessed concurrently, is up to the user of the raw pointer (or atomics, for `u64s`).
unsafe impl Send for AnonShared {}
// SAFETY: as for `Send`; `&AnonShared` only hands out a raw pointer and atomics.
unsafe impl Sync for AnonShared {}

impl AnonShared {
    /// A fresh zero-filled, page-aligned shared mapping of `len` bytes (at least one).
    pub fn new(len: usize) -> io::Result<Self> {
        let len = len.max(1);
        // SAFETY: a new anonymous mapping at an address the kernel picks; no existing memory
        // is touched.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).expect("mmap returned null");
        Ok(Self { ptr, len })
    }

    /// A mapping of `n` zeroed `AtomicU64`s (see [`AnonShared::u64s`]); panics if mmap fails.
    pub fn counters(n: usize) -> Self {
        Self::new(n * 8).expect("mmap(MAP_SHARED | MAP_ANONYMOUS)")
    }

    /// Start of the mapping (page-aligned); valid for `len()` bytes while `self` lives.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The `i`th of the mapping's `AtomicU64`s (panics if out of bounds).
    pub fn at(&self, i: usize) -> &AtomicU64 {
        &self.u64s()[i]
    }

    /// The mapping as `len() / 8` atomics.
    pub fn u64s(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned, live while `self` is, and zero bytes are a valid
        // AtomicU64; every access through the slice is atomic. Callers that also write through
        // `as_ptr` must not do so at these bytes concurrently.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), self.len / 8) }
    }
}

impl Drop for AnonShared {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; borrows of it end with `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
