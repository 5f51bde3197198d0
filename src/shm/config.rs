//! [`Config`]: the sizes fixed when a region is created.

#[cfg(doc)]
use super::error::ShmError;

/// Sizes fixed when a region is created (fields may be added: build one with
/// [`Config::new`] and the setters).
///
/// ```
/// use gomutex::shm::{Config, ShmMutex};
/// let cfg = Config::new().participants(8).waiter_slots(4);
/// assert_eq!((cfg.participants, cfg.waiter_slots), (8, 4));
/// assert_eq!(Config::new(), Config::default());
/// let m = ShmMutex::anonymous_with(0u32, cfg)?;
/// *m.lock().unwrap() += 1;
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// How many processes may use the lock at once (each takes one participant slot for as
    /// long as it lives or keeps its handle). Default 64; at most 65535.
    pub participants: u32,
    /// How many threads may sleep in the FIFO queue at once. Further waiters still work but
    /// wait outside the queue (see the module docs). Default 64; at most 65536.
    pub waiter_slots: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

impl Config {
    /// The defaults: 64 participants, 64 waiter slots.
    ///
    /// ```
    /// use gomutex::shm::{Config, ShmMutex};
    /// let small = Config::new().participants(4).waiter_slots(4);
    /// assert!(ShmMutex::<u64>::required_size(small)? < ShmMutex::<u64>::required_size(Config::new())?);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub const fn new() -> Self {
        Self {
            participants: 64,
            waiter_slots: 64,
        }
    }

    /// These sizes with [`participants`](Self::participants) set to `n` (1..=65535; a
    /// region made with another value fails with [`ShmError::InvalidConfig`]).
    #[must_use]
    pub const fn participants(self, n: u32) -> Self {
        Self {
            participants: n,
            ..self
        }
    }

    /// These sizes with [`waiter_slots`](Self::waiter_slots) set to `n` (at most 65536;
    /// a region made with more fails with [`ShmError::InvalidConfig`]).
    #[must_use]
    pub const fn waiter_slots(self, n: u32) -> Self {
        Self {
            waiter_slots: n,
            ..self
        }
    }
}
