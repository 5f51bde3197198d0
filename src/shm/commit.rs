//! The commit point of a crash-consistent update: [`commit_store`].

use core::sync::atomic::Ordering::Release;
use core::sync::atomic::{AtomicI16, AtomicI32, AtomicI8, AtomicIsize};
#[cfg(target_pointer_width = "64")]
use core::sync::atomic::{AtomicI64, AtomicU64};
use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU8, AtomicUsize};

/// Write `value` to `place` as the **commit point** of an update made under a [`ShmMutex`]
/// lock: everything written before it in program order is in memory first, and it is written
/// in one store. So a process killed at any instant leaves either the old value, with none of
/// the update visible through it, or the new one with all of it.
///
/// A plain assignment gives neither promise: the compiler may move earlier writes to the
/// locked data after it (nothing in a single thread tells it the order matters), or split it.
/// This is a `Release` atomic store through the exclusive reference (no extra cost on x86; the
/// reference is exclusive, so no other thread reads `place` meanwhile, and other processes
/// read it only under the lock, after the owner's death has made all its stores visible).
///
/// The idiom: build the new state where readers do not look yet (a free slot, the other of
/// two copies), then publish it by updating one word with `commit_store`. After an owner death
/// ([`LockError::OwnerDied`]) there is nothing to repair: the update either happened or not.
///
/// ```
/// use gomutex::shm::{commit_store, ShmMutex, ShmSafe};
///
/// #[derive(Clone, Copy, Default)]
/// #[repr(C)]
/// struct Log { entries: [u64; 8], len: u64 }
/// // SAFETY: repr(C), u64s only, every bit pattern valid.
/// unsafe impl ShmSafe for Log {}
///
/// let m = ShmMutex::anonymous(Log::default())?;
/// let mut log = m.lock_or_repair(|_| {}); // a death never leaves a half-written entry
/// let n = log.len;
/// log.entries[n as usize] = 42; // invisible until the commit
/// commit_store(&mut log.len, n + 1); // the commit: one store, after the entry
/// assert_eq!((log.len, log.entries[0]), (1, 42));
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
///
/// [`ShmMutex`]: super::ShmMutex
/// [`LockError::OwnerDied`]: super::LockError::OwnerDied
pub fn commit_store<W: CommitWord>(place: &mut W, value: W) {
    W::store_release(place, value);
}

/// A value [`commit_store`] writes in one store: the fixed-width integers (64-bit ones on
/// 64-bit targets) and `usize`/`isize`. Sealed.
///
/// ```
/// let mut len = 0u32;
/// gomutex::shm::commit_store(&mut len, 3); // u8..u64, i8..i64, usize, isize
/// assert_eq!(len, 3);
/// ```
pub trait CommitWord: Copy + sealed::Sealed {
    /// The release store (see [`commit_store`]).
    #[doc(hidden)]
    fn store_release(place: &mut Self, value: Self);
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! commit_word {
    ($($t:ty => $a:ty),* $(,)?) => { $(
        impl sealed::Sealed for $t {}
        impl CommitWord for $t {
            #[inline]
            fn store_release(place: &mut Self, value: Self) {
                const { assert!(align_of::<$t>() == align_of::<$a>()) };
                // SAFETY: `place` is valid, and aligned for the atomic (same size and, checked
                // at compile time, the same alignment as the integer); it is borrowed
                // exclusively, so nothing else accesses it during the store.
                unsafe { <$a>::from_ptr(place) }.store(value, Release);
            }
        }
    )* };
}
commit_word!(
    u8 => AtomicU8, u16 => AtomicU16, u32 => AtomicU32, usize => AtomicUsize,
    i8 => AtomicI8, i16 => AtomicI16, i32 => AtomicI32, isize => AtomicIsize,
);
#[cfg(target_pointer_width = "64")]
commit_word!(u64 => AtomicU64, i64 => AtomicI64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_the_value() {
        let (mut a, mut b, mut c) = (0u64, -1i8, 7usize);
        commit_store(&mut a, u64::MAX);
        commit_store(&mut b, 5);
        commit_store(&mut c, 0);
        assert_eq!((a, b, c), (u64::MAX, 5, 0));
    }
}
