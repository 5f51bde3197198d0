//! Named dictionaries, for unrelated processes: a named [`Mapping`] (`shm_open`, published by
//! its own header once the dictionary is made) holding the dictionary at offset 0.

use super::config::DictConfig;
use super::ShmDict;
use crate::shm::{Mapping, MappingLayout, OpenOptions, ShmError};

/// The mapping's contents: the dictionary, from offset 0.
fn plan(capacity: usize, cfg: DictConfig) -> Result<MappingLayout, ShmError> {
    let mut plan = MappingLayout::new();
    plan.reserve(ShmDict::required_size(capacity, cfg)?, 4096);
    Ok(plan)
}

/// `e` about the object `name` (as the named mapping's own errors are).
fn about(name: &str, e: ShmError) -> ShmError {
    crate::shm::seam::about(e, &format!("/{}", name.strip_prefix('/').unwrap_or(name)))
}

impl ShmDict {
    /// Create a named dictionary (a named [`Mapping`]: `shm_open(name, O_CREAT | O_EXCL)`,
    /// mode 0600) of `capacity` bytes of zones. Fails with `Io(AlreadyExists)` if the name
    /// exists; `name` may omit the leading `/`; errors name the object. Openers wait until it
    /// is made.
    ///
    /// ```
    /// use gomutex::{dict::{DictConfig, ShmDict}, shm};
    /// let name = format!("/gomutex-doc-dict-{}", std::process::id());
    /// let a = ShmDict::create(&name, 1 << 20, DictConfig::new())?;
    /// let b = ShmDict::open(&name)?; // another process would do this
    /// shm::unlink(&name)?;
    /// a.set("k", "v", None, 0).unwrap();
    /// assert!(b.get("k").unwrap().is_some());
    /// # Ok::<(), shm::ShmError>(())
    /// ```
    pub fn create(name: &str, capacity: usize, cfg: DictConfig) -> Result<Self, ShmError> {
        Self::create_with(name, capacity, cfg, OpenOptions::new())
    }

    /// [`create`](Self::create) with the object's permissions from [`OpenOptions::mode`].
    pub fn create_with(
        name: &str,
        capacity: usize,
        cfg: DictConfig,
        opts: OpenOptions,
    ) -> Result<Self, ShmError> {
        let plan = plan(capacity, cfg).map_err(|e| about(name, e))?;
        let mut made = None;
        Mapping::create_with(name, &plan, opts, |map| {
            made = Some(Self::init_in(map, 0, capacity, cfg)?);
            Ok(())
        })?;
        Ok(made.expect("init ran"))
    }

    /// Open an existing named dictionary, waiting up to 1 s for its creator to finish.
    /// Refuses an object owned by another user ([`ShmError::NotOwner`]); see
    /// [`open_with`](Self::open_with).
    pub fn open(name: &str) -> Result<Self, ShmError> {
        Self::open_with(name, OpenOptions::new())
    }

    /// Open an existing named dictionary ([`Mapping::open_with`]'s errors: `Io(NotFound)`,
    /// [`ShmError::NotOwner`], [`ShmError::InitTimeout`]…), validating the locks' and zones'
    /// headers; nothing is written if one is wrong.
    pub fn open_with(name: &str, opts: OpenOptions) -> Result<Self, ShmError> {
        let map = Mapping::open_with(name, opts)?;
        Self::attach_in(&map, 0).map_err(|e| about(name, e))
    }

    /// Open the named dictionary, or create it with `capacity` bytes of zones if it does not
    /// exist; `true` if this call created it. Race-free: exactly one of several concurrent
    /// callers creates.
    ///
    /// An existing dictionary made with another capacity or number of shards than `capacity`
    /// and `cfg` make is refused with [`ShmError::DictMismatch`], which names both: its sizes
    /// are the caller's choice, so opening one of other sizes would hide a changed
    /// configuration (as nginx refuses a zone declared again with another size).
    /// [`open`](Self::open) takes a dictionary as it is.
    ///
    /// ```
    /// use gomutex::{dict::{DictConfig, ShmDict}, shm::{self, ShmError}};
    /// let name = format!("/gomutex-doc-dict-ooc-{}", std::process::id());
    /// let (_a, created) = ShmDict::open_or_create(&name, 1 << 20, DictConfig::new())?;
    /// assert!(created);
    /// let e = ShmDict::open_or_create(&name, 2 << 20, DictConfig::new()).unwrap_err();
    /// assert!(matches!(e.cause(), ShmError::DictMismatch { found_capacity: 1048576, .. }));
    /// shm::unlink(&name)?;
    /// # Ok::<(), ShmError>(())
    /// ```
    pub fn open_or_create(
        name: &str,
        capacity: usize,
        cfg: DictConfig,
    ) -> Result<(Self, bool), ShmError> {
        let plan = plan(capacity, cfg).map_err(|e| about(name, e))?;
        let zone = cfg.zone(capacity).map_err(|e| about(name, e))?.len;
        let mut made = None;
        let opened = Mapping::open_or_create(name, &plan, |map| {
            made = Some(Self::init_in(map, 0, capacity, cfg)?);
            Ok(())
        });
        let d = match opened {
            Ok((_, true)) => return Ok((made.expect("init ran"), true)),
            Ok((map, false)) => Self::attach_in(&map, 0).map_err(|e| about(name, e))?,
            // Smaller than this geometry needs: say what it is, if it is a dictionary.
            Err(e) if matches!(e.cause(), ShmError::TooSmall { .. }) => {
                Self::open(name).map_err(|_| e)?
            }
            Err(e) => return Err(e),
        };
        if d.shards[0].g.len != zone || d.shards() != cfg.shards as usize {
            let e = ShmError::DictMismatch {
                capacity,
                shards: cfg.shards,
                found_capacity: d.capacity(),
                found_shards: d.shards() as u32,
            };
            return Err(about(name, e));
        }
        Ok((d, false))
    }
}
