//! The system calls the shared-memory lock makes on memory and time: shared futexes, the
//! clock every process shares (`CLOCK_MONOTONIC`), and `mmap`/`munmap` of shared memory.
//! Which process is which (pids, fork generations, liveness) is `identity.rs`.
//!
//! The futex and clock calls are allocation-free and async-signal-safe (`clock_gettime`,
//! `futex`), so a child forked from a multi-threaded process may use the lock.

use super::error::ShmError;
use core::sync::atomic::AtomicU32;
use std::io;
use std::time::Instant;

/// `FUTEX_WAIT_BITSET` without `FUTEX_PRIVATE_FLAG`: the kernel keys the wait on the backing
/// page (shmem inode + offset), so every process mapping the same object meets the same queue.
const FUTEX_WAIT_BITSET: libc::c_int = 9;
/// `FUTEX_WAKE` without `FUTEX_PRIVATE_FLAG`.
const FUTEX_WAKE: libc::c_int = 1;
/// Match any waiter (a zero bitset is `EINVAL`).
const FUTEX_BITSET_MATCH_ANY: u32 = 0xffff_ffff;

/// How a futex wait ended. Every outcome is only a hint: callers re-read the word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Returned 0: woken, or spuriously.
    Woken,
    /// `EAGAIN`: the word no longer held the expected value.
    Changed,
    /// `ETIMEDOUT`: the deadline passed.
    TimedOut,
    /// `EINTR` or anything unexpected: just retry.
    Interrupted,
}

/// Nanoseconds of `CLOCK_MONOTONIC` (the clock `Instant` uses on Linux, shared by all
/// processes of the machine).
pub(crate) fn mono_ns() -> u64 {
    let ts = mono_now();
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

fn mono_now() -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts
}

/// Sleep on `word` while it holds `expected`, until woken or until `deadline` (absolute,
/// converted to an absolute `CLOCK_MONOTONIC` time so retries never drift).
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, deadline: Option<Instant>) -> Wait {
    let abs;
    let ts_ptr = match deadline {
        None => core::ptr::null(),
        Some(d) => {
            let remaining = d.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Wait::TimedOut;
            }
            let now = mono_now();
            // (`time_t`/`c_long` are i64 on 64-bit targets and i32 on some 32-bit ones.)
            #[allow(clippy::useless_conversion)]
            let mut sec = i64::from(now.tv_sec) + remaining.as_secs() as i64;
            #[allow(clippy::useless_conversion)]
            let mut nsec = i64::from(now.tv_nsec) + i64::from(remaining.subsec_nanos());
            if nsec >= 1_000_000_000 {
                sec += 1;
                nsec -= 1_000_000_000;
            }
            abs = libc::timespec {
                tv_sec: sec as libc::time_t,
                tv_nsec: nsec as _,
            };
            &abs as *const libc::timespec
        }
    };
    // SAFETY: `word` is a live, 4-byte aligned 32-bit word (an `AtomicU32`); the timespec, if
    // any, lives until the call returns; uaddr2 is unused by FUTEX_WAIT_BITSET.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            FUTEX_WAIT_BITSET,
            expected,
            ts_ptr,
            core::ptr::null::<u32>(),
            FUTEX_BITSET_MATCH_ANY,
        )
    };
    if r == 0 {
        return Wait::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Wait::Changed,
        Some(libc::ETIMEDOUT) => Wait::TimedOut,
        _ => Wait::Interrupted,
    }
}

/// Wake up to `n` sleepers on `word` in any process.
pub(crate) fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: as in `futex_wait`; FUTEX_WAKE only reads the address as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), FUTEX_WAKE, n);
    }
}

/// A new `MAP_SHARED` mapping of `len` bytes: of the object `fd`, or anonymous if `fd < 0`.
pub(super) fn map_shared(fd: libc::c_int, len: usize) -> Result<*mut u8, ShmError> {
    let flags = if fd < 0 {
        libc::MAP_SHARED | libc::MAP_ANONYMOUS
    } else {
        libc::MAP_SHARED
    };
    // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error().into());
    }
    Ok(p.cast())
}

/// Unmap a mapping [`map_shared`] made.
pub(super) fn unmap(p: *mut u8, len: usize) {
    // SAFETY: `p..p+len` is a mapping we made and no longer use.
    unsafe { libc::munmap(p.cast(), len) };
}
