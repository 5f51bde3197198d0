//! Plain-data helpers for values in shared memory.

use super::ShmSafe;
use core::fmt;

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
