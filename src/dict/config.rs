//! [`DictConfig`]: how a dictionary is made.

use super::layout::{Geometry, PAGE};
use crate::shm::{Config, ShmError};

/// The most shards a dictionary has.
pub(crate) const MAX_SHARDS: u32 = 1024;

/// How a dictionary is made: its number of shards and its locks' sizes.
///
/// ```
/// use gomutex::{dict::{DictConfig, ShmDict}, shm::Config};
/// let cfg = DictConfig::new().shards(4).lock(Config::new().participants(16));
/// let d = ShmDict::anonymous_with(1 << 20, cfg)?;
/// assert_eq!(d.shards(), 4);
/// assert!(d.capacity() <= 1 << 20);
/// # Ok::<(), gomutex::shm::ShmError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DictConfig {
    /// Independent parts, each a lock and a zone of `capacity / shards` bytes (rounded down
    /// to 4096); a key lives in the one its hash picks. Default 1 (nginx's single lock per
    /// zone); at most 1024.
    pub shards: u32,
    /// The sizes of each shard's lock.
    pub lock: Config,
}

impl Default for DictConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl DictConfig {
    /// One shard, the lock's default [`Config`].
    pub const fn new() -> Self {
        Self {
            shards: 1,
            lock: Config::new(),
        }
    }

    /// This configuration with [`shards`](Self::shards) set to `n`.
    #[must_use]
    pub const fn shards(self, n: u32) -> Self {
        Self { shards: n, ..self }
    }

    /// This configuration with the locks' sizes `cfg`.
    #[must_use]
    pub const fn lock(self, cfg: Config) -> Self {
        Self { lock: cfg, ..self }
    }

    /// Each shard's zone for a dictionary of `capacity` bytes.
    pub(crate) fn zone(&self, capacity: usize) -> Result<Geometry, ShmError> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(ShmError::InvalidConfig(
                "DictConfig::shards: a dictionary has 1 to 1024 shards",
            ));
        }
        let zone = if self.shards == 1 {
            capacity
        } else {
            capacity / self.shards as usize / PAGE * PAGE
        };
        Geometry::new(zone).ok_or(ShmError::InvalidConfig(
            "a dictionary's capacity must be at least ShmDict::MIN_CAPACITY per shard and at \
             most 64 GiB per shard",
        ))
    }
}
