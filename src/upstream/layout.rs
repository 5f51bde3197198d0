//! The zone's bytes: one [`Mapping`] holding a header, the zone lock (a [`ShmMutex`] whose
//! value is the commit epoch), the peers' configuration, two copies of their state (the epoch's
//! low bit names the live one) and the processes' connection rows.
//!
//! ```text
//! [ Header | ShmMutex<u64> (epoch) | Conf × peers | State × 2 × peers | Row × rows |
//!   conns: u32 × peers × rows (peer-major: one peer's counts are contiguous) ]
//! ```
//!
//! Everything is atomics lent out by [`Mapping::shared_slice`]: no `unsafe` reaches the
//! memory. The writes to the spare copy and to the rows are made under the zone lock; the
//! lock orders them between processes, and the epoch's release store (`commit_store`) orders
//! them before the commit in the holder, for a death.

use super::rules::{Conf, State};
use crate::shm::{Config, Mapping, MappingLayout, ShmError, ShmMutex, ShmShared};
use core::sync::atomic::Ordering::Relaxed;
use core::sync::atomic::{AtomicI64, AtomicU32, AtomicU64};

/// "GoUpstrm": the zone header's magic.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"GoUpstrm");
/// The zone layout's version (this file's drawing).
pub(crate) const VERSION: u32 = 1;
/// The most peers a zone holds (a try set is a 64-bit mask, as nginx's `tried` word).
pub const MAX_PEERS: usize = 64;
/// The longest peer name, in bytes.
pub const MAX_NAME: usize = 64;
/// The most process rows a zone holds.
pub(crate) const MAX_ROWS: u32 = 4096;

/// The zone header, at offset 0: what an opener needs to find everything else.
#[repr(C)]
pub(crate) struct Header {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub peers: AtomicU32,
    pub rows: AtomicU32,
    _pad: AtomicU32,
    /// `CLOCK_MONOTONIC` ms of the last scan for dead rows started by a full peer (rate limit).
    pub last_scan_ms: AtomicU64,
    /// Rows of dead processes given back (diagnostics).
    pub repaired: AtomicU64,
    /// Connection slots of dead processes given back (diagnostics).
    pub conns_returned: AtomicU64,
}

/// A peer's configuration as stored (fixed once the zone is published).
#[repr(C)]
pub(crate) struct SharedConf {
    pub weight: AtomicU32,
    pub max_fails: AtomicU32,
    pub max_conns: AtomicU32,
    /// Bit 0: backup.
    pub flags: AtomicU32,
    pub fail_timeout_ms: AtomicU64,
    pub name_len: AtomicU64,
    pub name: [AtomicU64; MAX_NAME / 8],
}

/// A peer's state as stored: one of the two copies.
#[repr(C)]
pub(crate) struct SharedState {
    pub current_weight: AtomicI64,
    pub effective_weight: AtomicI64,
    pub fails: AtomicU32,
    pub down: AtomicU32,
    pub accessed: AtomicU64,
    pub checked: AtomicU64,
}

/// A process's row: who owns it. Its connection counts are in the `conns` array.
///
/// Invariant (as `shm`'s participant slots): `ino` is 0 or the pidfs inode of the process
/// `ident` names; a freed row has no connections counted.
#[repr(C)]
pub(crate) struct Row {
    /// The owner's identity (pid and start time); 0 = free.
    pub ident: AtomicU64,
    /// The owner's pidfs inode (0 = unknown), stored by the owner after its claim.
    pub ino: AtomicU64,
}

// SAFETY: `#[repr(C)]` structs of fixed-width atomics (and arrays of them) only: the same
// layout in every process, every bit pattern (zeroes included) a valid value, every change an
// atomic operation through `&Self`, no pointers. (The same for the three below.)
unsafe impl ShmShared for Header {}
// SAFETY: as above.
unsafe impl ShmShared for SharedConf {}
// SAFETY: as above.
unsafe impl ShmShared for SharedState {}
// SAFETY: as above.
unsafe impl ShmShared for Row {}

/// Where each part lies, for `peers` peers and `rows` rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub peers: usize,
    pub rows: usize,
    pub lock_cfg: Config,
    pub lock: usize,
    pub conf: usize,
    pub state: usize,
    pub row: usize,
    pub conns: usize,
    pub layout: MappingLayout,
}

impl Plan {
    pub(crate) fn new(peers: usize, rows: u32) -> Result<Self, ShmError> {
        if peers == 0 || peers > MAX_PEERS {
            return Err(ShmError::InvalidConfig(
                "an upstream zone holds 1 to 64 peers",
            ));
        }
        if rows == 0 || rows > MAX_ROWS {
            return Err(ShmError::InvalidConfig(
                "an upstream zone serves 1 to 4096 processes",
            ));
        }
        // Every process that picks registers with the zone lock; a few more for monitors
        // and supervisors that only read or repair.
        let lock_cfg = Config::new()
            .participants(rows + 8)
            .waiter_slots((rows + 8).min(64));
        let mut plan = MappingLayout::new();
        let header = plan.shared::<Header>();
        debug_assert_eq!(header, 0);
        let lock = plan.mutex::<u64>(lock_cfg)?;
        let conf = plan.shared_slice::<SharedConf>(peers);
        let state = plan.shared_slice::<SharedState>(2 * peers);
        let row = plan.shared_slice::<Row>(rows as usize);
        let conns = plan.shared_slice::<AtomicU32>(peers * rows as usize);
        Ok(Self {
            peers,
            rows: rows as usize,
            lock_cfg,
            lock,
            conf,
            state,
            row,
            conns,
            layout: plan,
        })
    }
}

impl SharedConf {
    pub(crate) fn load(&self) -> Conf {
        Conf {
            weight: self.weight.load(Relaxed),
            max_fails: self.max_fails.load(Relaxed),
            fail_timeout_ms: self.fail_timeout_ms.load(Relaxed),
            max_conns: self.max_conns.load(Relaxed),
            backup: self.flags.load(Relaxed) & 1 != 0,
        }
    }

    pub(crate) fn store(&self, c: &Conf, name: &[u8]) {
        self.weight.store(c.weight, Relaxed);
        self.max_fails.store(c.max_fails, Relaxed);
        self.fail_timeout_ms.store(c.fail_timeout_ms, Relaxed);
        self.max_conns.store(c.max_conns, Relaxed);
        self.flags.store(u32::from(c.backup), Relaxed);
        let name = &name[..name.len().min(MAX_NAME)];
        let mut words = [0u8; MAX_NAME];
        words[..name.len()].copy_from_slice(name);
        for (w, chunk) in self.name.iter().zip(words.chunks_exact(8)) {
            w.store(
                u64::from_le_bytes(chunk.try_into().expect("8 bytes")),
                Relaxed,
            );
        }
        self.name_len.store(name.len() as u64, Relaxed);
    }

    /// The name (what a peer wrote there, cut at `MAX_NAME`, invalid UTF-8 replaced).
    pub(crate) fn name(&self) -> String {
        let mut bytes = [0u8; MAX_NAME];
        for (w, chunk) in self.name.iter().zip(bytes.chunks_exact_mut(8)) {
            chunk.copy_from_slice(&w.load(Relaxed).to_le_bytes());
        }
        let len = (self.name_len.load(Relaxed) as usize).min(MAX_NAME);
        String::from_utf8_lossy(&bytes[..len]).into_owned()
    }
}

impl SharedState {
    pub(crate) fn load(&self) -> State {
        State {
            current_weight: self.current_weight.load(Relaxed),
            effective_weight: self.effective_weight.load(Relaxed),
            fails: self.fails.load(Relaxed),
            down: self.down.load(Relaxed) != 0,
            accessed: self.accessed.load(Relaxed),
            checked: self.checked.load(Relaxed),
        }
    }

    pub(crate) fn store(&self, s: &State) {
        self.current_weight.store(s.current_weight, Relaxed);
        self.effective_weight.store(s.effective_weight, Relaxed);
        self.fails.store(s.fails, Relaxed);
        self.down.store(u32::from(s.down), Relaxed);
        self.accessed.store(s.accessed, Relaxed);
        self.checked.store(s.checked, Relaxed);
    }
}

/// The zone's parts, lent out by a mapping as shared slices.
#[derive(Clone, Copy)]
pub(crate) struct Parts<'m> {
    pub header: &'m Header,
    pub conf: &'m [SharedConf],
    pub state: &'m [SharedState],
    pub rows: &'m [Row],
    pub conns: &'m [AtomicU32],
}

impl Plan {
    /// The parts in `map` (checked by [`Mapping::shared_slice`]: in bounds, aligned, over no
    /// lock region).
    pub(crate) fn parts<'m>(&self, map: &'m Mapping) -> Result<Parts<'m>, ShmError> {
        Ok(Parts {
            header: map.shared::<Header>(0)?,
            conf: map.shared_slice::<SharedConf>(self.conf, self.peers)?,
            state: map.shared_slice::<SharedState>(self.state, 2 * self.peers)?,
            rows: map.shared_slice::<Row>(self.row, self.rows)?,
            conns: map.shared_slice::<AtomicU32>(self.conns, self.peers * self.rows)?,
        })
    }

    /// The zone lock, made in `map` (its creator's call).
    pub(crate) fn init_lock(&self, map: &Mapping) -> Result<ShmMutex<u64>, ShmError> {
        ShmMutex::init_in(map, self.lock, 0u64, self.lock_cfg)
    }
}
