//! Poisoning, exactly as `std::sync` does it: a guard remembers whether its thread was already
//! panicking when it locked; if the thread starts panicking while holding the guard, dropping
//! the guard marks the lock poisoned.

use std::sync::{LockResult, PoisonError};
use std::thread;

/// What a guard remembers about its thread at lock time (copied into a mapped guard).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Guard {
    panicking: bool,
}

/// Where a lock keeps its poison flag: a bit of a word it has anyway ([`crate::RawMutex`]'s wait
/// queue word, so that `Mutex<()>` is 8 bytes; [`crate::RawRwLock`]'s state word, so that
/// `RwLock<()>` is 16).
pub(crate) trait Poison {
    /// Whether poisoned.
    fn get(&self) -> bool;
    /// Mark poisoned.
    fn set(&self);
    /// Clear the mark.
    fn clear(&self);

    /// Called right after locking: `Ok` unless poisoned.
    #[inline]
    fn guard(&self) -> LockResult<Guard> {
        guard_seen(self.get())
    }

    /// Called right before unlocking.
    #[inline]
    fn done(&self, guard: &Guard) {
        if !guard.panicking && thread::panicking() {
            self.set();
        }
    }
}

/// [`Poison::guard`] for a lock whose flag was read as it was locked (`poisoned`).
#[inline]
pub(crate) fn guard_seen(poisoned: bool) -> LockResult<Guard> {
    map_result(
        poisoned,
        Guard {
            panicking: thread::panicking(),
        },
    )
}

/// `Ok(t)` or `Err(PoisonError::new(t))` depending on `poisoned`.
#[inline]
pub(crate) fn map_result<T>(poisoned: bool, t: T) -> LockResult<T> {
    if poisoned {
        Err(PoisonError::new(t))
    } else {
        Ok(t)
    }
}
