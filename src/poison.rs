//! Poisoning, exactly as `std::sync` does it: a guard remembers whether its thread was already
//! panicking when it locked; if the thread starts panicking while holding the guard, dropping
//! the guard marks the lock poisoned.

use core::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{LockResult, PoisonError};
use std::thread;

/// A lock's poison flag.
#[derive(Debug, Default)]
pub(crate) struct Flag {
    failed: AtomicBool,
}

/// What a guard remembers about its thread at lock time (copied into a mapped guard).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Guard {
    panicking: bool,
}

impl Flag {
    pub(crate) const fn new() -> Self {
        Self {
            failed: AtomicBool::new(false),
        }
    }
}

/// Where a lock keeps its poison flag: a [`Flag`] of its own, or a bit of a lock word
/// ([`crate::RawRwLock`]'s, so that `RwLock<()>` stays 16 bytes).
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
        let g = Guard {
            panicking: thread::panicking(),
        };
        if self.get() {
            Err(PoisonError::new(g))
        } else {
            Ok(g)
        }
    }

    /// Called right before unlocking.
    #[inline]
    fn done(&self, guard: &Guard) {
        if !guard.panicking && thread::panicking() {
            self.set();
        }
    }
}

impl Poison for Flag {
    #[inline]
    fn get(&self) -> bool {
        self.failed.load(Relaxed)
    }
    #[inline]
    fn set(&self) {
        self.failed.store(true, Relaxed);
    }
    #[inline]
    fn clear(&self) {
        self.failed.store(false, Relaxed);
    }
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
