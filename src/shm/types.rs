//! What may live in shared memory: [`ShmSafe`] (plain data, behind a lock), [`ShmBool`], and
//! [`ShmShared`] for data shared without a lock.

use core::fmt;
use core::sync::atomic::{AtomicI16, AtomicI32, AtomicI64, AtomicI8};
use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8};

/// Data that processes may share **without a lock**, through `&T` in every process at once
/// (see [`Mapping::shared`](super::Mapping::shared)): counters, flags and heartbeats read and
/// written with atomic operations.
///
/// # Safety
///
/// Implement it only for types that
///
/// * have the same layout in every process that maps the region (see [`ShmSafe`]: fixed-width
///   atomics, arrays of them, `#[repr(C)]` structs of them),
/// * are valid for **every** bit pattern, all zeroes included (a fresh mapping is zero-filled
///   and a process killed mid-update leaves whatever it wrote),
/// * are only ever changed through atomic operations on `&T` (so no plain fields beside the
///   atomics, and no `Cell`: another process may access the same bytes at the same time),
/// * contain no pointers or other per-process handles.
///
/// The fixed-width atomics (`AtomicU8`..`AtomicU64`, `AtomicI8`..`AtomicI64`) and arrays of
/// `ShmShared` types implement it. For a struct of them:
///
/// ```
/// use gomutex::shm::ShmShared;
/// use std::sync::atomic::{AtomicU32, AtomicU64};
///
/// #[repr(C)]
/// struct Stats {
///     requests: AtomicU64,
///     workers: AtomicU32,
/// }
/// // SAFETY: repr(C), only fixed-width atomics: any bit pattern is valid, every change atomic.
/// unsafe impl ShmShared for Stats {}
/// ```
///
/// With the `derive` feature, `#[derive(ShmShared)]` writes that impl without `unsafe`, and
/// refuses at compile time a struct without `#[repr(C)]` (or `#[repr(transparent)]`), an enum
/// or union, or a field whose type is not `ShmShared` (a plain `u64` beside the atomics, an
/// `AtomicUsize`…; the error points at the field):
///
/// ```
/// # #[cfg(feature = "derive")] {
/// use gomutex::shm::{Mapping, MappingLayout, ShmShared};
/// use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
///
/// #[derive(ShmShared)]
/// #[repr(C)]
/// struct Stats {
///     requests: AtomicU64,
///     workers: [AtomicU32; 4],
/// }
///
/// let mut plan = MappingLayout::new();
/// let at = plan.shared::<Stats>();
/// let map = Mapping::anonymous(plan.len())?;
/// map.shared::<Stats>(at)?.workers[1].fetch_add(1, Relaxed);
/// # }
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be shared between processes without a lock: it is not `ShmShared`",
    label = "not `ShmShared`",
    note = "lock-free shared data is fixed-width atomics (`AtomicU8`..`AtomicU64`, `AtomicI8`..`AtomicI64`) and arrays of them: for `AtomicUsize` use `AtomicU64`, for `AtomicBool` an `AtomicU8`",
    note = "for a struct of them: `#[derive(ShmShared)]` (gomutex's feature `derive`) on a `#[repr(C)]` struct, or an `unsafe impl ShmShared` under its safety contract",
    note = "plain data (`u64`, `ShmBool`, your `ShmSafe` structs) is shared behind a lock: `ShmMutex` or `ShmRwLock`"
)]
pub unsafe trait ShmShared: Sync + 'static {}

macro_rules! shm_shared {
    ($($t:ty),*) => { $(
        // SAFETY: a fixed-width atomic: its integer's layout, every bit pattern valid, only
        // changed atomically through `&self`.
        unsafe impl ShmShared for $t {}
    )* };
}
shm_shared!(AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicI8, AtomicI16, AtomicI32, AtomicI64);
// SAFETY: an array of such data is such data, with a layout fixed by its element.
unsafe impl<T: ShmShared, const N: usize> ShmShared for [T; N] {}

/// A `bool` that may live in shared memory: one byte, `0` is `false` and **any** other value
/// `true`, so every bit pattern is valid (which `bool` is not: an owner killed mid-update, or a
/// peer, may leave any byte, and reading a `bool` holding 2 is undefined behaviour). Compare
/// and convert through [`get`](Self::get); `==` compares the truth values.
///
/// ```
/// use gomutex::shm::{ShmBool, ShmMutex, ShmSafe};
///
/// #[derive(Clone, Copy, Default)]
/// #[repr(C)]
/// struct Board {
///     jobs: u32,
///     go: ShmBool,
///     _pad: [u8; 3],
/// }
/// // SAFETY: repr(C), fixed-width integers and `ShmBool`, every bit pattern valid.
/// unsafe impl ShmSafe for Board {}
///
/// let m = ShmMutex::anonymous(Board::default())?;
/// m.lock().unwrap().go.set(true);
/// assert!(m.lock().unwrap().go.get());
/// assert_eq!(ShmBool::from(true), ShmBool::new(true));
/// assert!(!bool::from(ShmBool::default()));
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub struct ShmBool(u8);

impl ShmBool {
    /// `b` as a byte (1 or 0).
    ///
    /// ```
    /// use gomutex::shm::ShmBool;
    /// assert!(bool::from(ShmBool::new(true)));
    /// ```
    pub const fn new(b: bool) -> Self {
        Self(b as u8)
    }

    /// Whether the byte is non-zero.
    pub const fn get(self) -> bool {
        self.0 != 0
    }

    /// Store `b` (as 1 or 0).
    pub fn set(&mut self, b: bool) {
        self.0 = b as u8;
    }

    /// The raw byte (any value: only `0` is `false`).
    pub const fn to_byte(self) -> u8 {
        self.0
    }
}

// SAFETY: one byte, every bit pattern valid, no pointers; same layout everywhere (transparent u8).
unsafe impl ShmSafe for ShmBool {}

impl From<bool> for ShmBool {
    fn from(b: bool) -> Self {
        Self::new(b)
    }
}

impl From<ShmBool> for bool {
    fn from(b: ShmBool) -> Self {
        b.get()
    }
}

impl PartialEq for ShmBool {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for ShmBool {}

impl core::hash::Hash for ShmBool {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.get().hash(state);
    }
}

impl fmt::Debug for ShmBool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
    }
}

/// Plain data that may live in memory shared between processes.
///
/// # Safety
///
/// Implement it only for types that
///
/// * have the same layout in every process that maps the region (primitives, arrays of them,
///   `#[repr(C)]` structs of them; not `usize`/`isize`, whose width differs between 32- and
///   64-bit processes, nor `u128`/`i128`, whose alignment changed between compiler versions),
/// * contain no pointers, references, file descriptors or other per-process handles,
/// * are valid for **every** bit pattern (an owner killed mid-update leaves whatever bytes it
///   had written; the next owner must be able to read them): no `bool`, `char`, enums or
///   `NonZero*` (for a flag, use [`ShmBool`]).
///
/// For a `#[repr(C)]` struct of such fields, a one-line `unsafe impl` is all it takes:
///
/// ```
/// use gomutex::shm::{ShmMutex, ShmSafe};
///
/// #[derive(Clone, Copy, Debug, Default)]
/// #[repr(C)]
/// struct Stats {
///     requests: u64,
///     errors: u32,
///     last_worker: u32,
/// }
/// // SAFETY: repr(C), only fixed-width integers, every bit pattern is a valid `Stats`.
/// unsafe impl ShmSafe for Stats {}
///
/// let m = ShmMutex::anonymous(Stats::default())?;
/// m.lock().unwrap().requests += 1;
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
///
/// With the `derive` feature, `#[derive(ShmSafe)]` writes that impl without `unsafe`, and
/// refuses at compile time what would break the contract: a struct without `#[repr(C)]` (or
/// `#[repr(transparent)]`), an enum or union, or a field whose type is not `ShmSafe` (`bool`,
/// `usize`, a pointer…; the error points at the field):
///
/// ```
/// # #[cfg(feature = "derive")] {
/// use gomutex::shm::{ShmBool, ShmMutex, ShmSafe};
///
/// #[derive(Clone, Copy, Default, ShmSafe)]
/// #[repr(C)]
/// struct Stats {
///     requests: u64,
///     errors: [u32; 4],
///     draining: ShmBool,
/// }
///
/// let m = ShmMutex::anonymous(Stats::default())?;
/// m.lock().unwrap().errors[2] += 1;
/// # }
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot live in shared memory: it is not `ShmSafe`",
    label = "not `ShmSafe`",
    note = "for a `bool` use `gomutex::shm::ShmBool`; for `usize`/`isize` use `u64`/`i64` (the same width in 32- and 64-bit processes); no pointers, references, `char`, enums or `String`/`Vec`",
    note = "for your own struct: `#[derive(ShmSafe)]` (gomutex's feature `derive`) on a `#[repr(C)]` struct of `ShmSafe` fields, or an `unsafe impl ShmSafe` under its safety contract"
)]
pub unsafe trait ShmSafe: Copy + Send + Sync + 'static {}

macro_rules! shm_safe {
    ($($t:ty),*) => { $(
        // SAFETY: fixed-width primitive, no pointers, every bit pattern valid.
        unsafe impl ShmSafe for $t {}
    )* };
}
shm_safe!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64, ());
// SAFETY: an array of plain data is plain data, with a layout fixed by its element.
unsafe impl<T: ShmSafe, const N: usize> ShmSafe for [T; N] {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_non_zero_byte_is_true() {
        for byte in 0..=u8::MAX {
            // SAFETY: transparent over u8, valid for every byte (the point of the type).
            let b: ShmBool = unsafe { core::mem::transmute(byte) };
            assert_eq!(b.get(), byte != 0);
            assert_eq!(b.to_byte(), byte);
            assert_eq!(b == ShmBool::new(true), byte != 0);
            assert_eq!(format!("{b:?}"), format!("{}", byte != 0));
        }
        let mut b = ShmBool::default();
        b.set(true);
        assert_eq!(b.to_byte(), 1);
        b.set(false);
        assert_eq!(b.to_byte(), 0);
        assert_eq!(core::mem::size_of::<ShmBool>(), 1);
    }
}
