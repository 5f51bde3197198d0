//! The bytes of a shared region: identical for every process and every build.
//!
//! ```text
//! offset 0      Header (448 bytes, 64-aligned): identity (magic, version, sizes) and flags;
//!               the lock's 64-bit state word alone on its cache line (offset 64); the
//!               internal journal lock, token counters, probe timestamps, the condition
//!               variable's words (offset 128); the recovery log (offset 192); the value's
//!               type (hash and name, offset 416)
//! 448           participants × ParticipantSlot (64 bytes each): identity + accounting of each process
//! ...           waiter_slots × WaiterSlot (64 bytes each): one futex word per sleeping thread
//! stats_offset  participants × StatsRow (128 bytes each): the lock statistics each process
//!               counts (`ShmMutex::stats`), one row per participant slot
//! value_offset  T (aligned to max(64, align_of::<T>()))
//! total_size    (a multiple of 64)
//! ```
//!
//! Every field is a fixed-width atomic (`AtomicU32`/`AtomicU64`, whose size and alignment are
//! the same on every Linux target), at an offset checked by the `const` assertions below, so a
//! 32-bit and a 64-bit process agree on the layout. Nothing in the region is a pointer: slots
//! and owners are indices.

use core::mem::{align_of, size_of};
use core::sync::atomic::{AtomicU32, AtomicU64};

/// `b"GoMutex"` plus a trailing 1: the first 8 bytes of an initialised region. Written last by
/// the initialiser, so a region with this magic is fully initialised.
pub const MAGIC: u64 = u64::from_le_bytes(*b"GoMutex\x01");
/// The layout version. Bumped on any change of the bytes below (or of what a lock's own words
/// in its value mean: 9 made `ShmRwLock`'s high-water mark a map of its readers).
pub const LAYOUT_VERSION: u32 = 9;
/// `b"GoMutMap"`: the first 8 bytes of a named [`Mapping`](super::Mapping)'s object once its
/// creator has initialised what it holds. Written last.
pub const MAP_MAGIC: u64 = u64::from_le_bytes(*b"GoMutMap");
/// The bytes before a named mapping's contents: its header, padded to a page so the contents
/// keep the alignment of a fresh mapping.
pub(crate) const MAP_HEADER_SIZE: usize = 4096;

/// The header of a named mapping's object (offset 0; its contents start at
/// [`MAP_HEADER_SIZE`]).
#[repr(C)]
pub(crate) struct MapHeader {
    /// [`MAP_MAGIC`] once published (stored last, with release ordering).
    pub magic: AtomicU64,
    /// [`LAYOUT_VERSION`].
    pub version: AtomicU32,
    /// [`MAP_HEADER_SIZE`].
    pub header_size: AtomicU32,
    /// The length of the contents (the [`MappingLayout`](super::MappingLayout)'s).
    pub len: AtomicU64,
}

/// Required alignment of a region's first byte.
pub const REGION_ALIGN: usize = 64;
/// Most participants or waiter slots a region may have.
pub const MAX_SLOTS: u32 = 1 << 16;

/// Waiter slot states (the slot's futex word).
pub(crate) const SLOT_FREE: u32 = 0;
pub(crate) const SLOT_QUEUED: u32 = 1;
pub(crate) const SLOT_TOKEN_NORMAL: u32 = 2;
pub(crate) const SLOT_TOKEN_HANDOFF: u32 = 3;
/// Queued, but passed over by deliveries: its token was passed on because its sleeper did not
/// pick it up in time (stopped, exec'd, not running). The sleeper, if it runs again, sets it
/// back to `SLOT_QUEUED` (lock-free) and goes on waiting.
pub(crate) const SLOT_PARKED: u32 = 4;

/// Slot classes: Go's re-queued waiters are served before first-time sleepers.
pub(crate) const CLASS_BACK: u32 = 0;
pub(crate) const CLASS_FRONT: u32 = 1;

/// One redo-log entry: store `value` into `target` (see `journal::Target`).
#[repr(C)]
pub(crate) struct LogEntry {
    pub target: AtomicU32,
    pub _pad: u32,
    pub value: AtomicU64,
}

/// Entries one journal transaction may hold.
pub(crate) const LOG_ENTRIES: usize = 12;

/// The redo log of the journal lock's holder (see `journal`).
#[repr(C)]
pub(crate) struct Log {
    /// 0 empty, 1 committed.
    pub state: AtomicU32,
    pub n: AtomicU32,
    pub has_word: AtomicU32,
    pub _pad: u32,
    pub word_old: AtomicU64,
    pub word_new: AtomicU64,
    pub entries: [LogEntry; LOG_ENTRIES],
}

/// The region header.
///
/// Four 64-byte lines, grouped by who touches them how often:
///
/// * **0, identity and flags**: written once by the initialiser; the owner-died and poison
///   flags, read after every acquisition, are written only on a death, a panic or
///   `mark_consistent`. Read-mostly: every core keeps a shared copy.
/// * **64, the state word**, alone with counters written only by recovery. Every lock and
///   unlock moves this line between cores; nothing else hot lives on it, so journal
///   transactions, probes and token traffic do not steal it from the fast paths. In a region
///   mapped at a 128-byte boundary (every mapping this crate makes is page-aligned) its
///   128-byte buddy, which adjacent-line prefetchers fetch with it, is the read-mostly line 0.
/// * **128, the slow path**: the journal lock, stored tokens, the overflow futex word, the
///   ticket counter, probe timestamps, the condition variable (`ShmCondvar`).
/// * **192, the redo log**, written by the journal lock's holder.
#[repr(C, align(64))]
pub(crate) struct Header {
    // --- identity: written once by the initialiser, read-only afterwards ---
    /// [`MAGIC`] once initialised (stored last, with release ordering).
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub header_size: AtomicU32,
    pub total_size: AtomicU64,
    pub participants: AtomicU32,
    pub waiter_slots: AtomicU32,
    pub value_offset: AtomicU64,
    pub value_size: AtomicU64,
    pub value_align: AtomicU32,
    // --- flags: read after every acquisition, rarely written ---
    /// Set when the lock was taken back from a dead owner; cleared by `mark_consistent`.
    pub owner_died: AtomicU32,
    /// Set when an owner panicked while holding the lock; cleared by `mark_consistent`.
    pub poisoned: AtomicU32,
    /// A [`ShmRwLock`](super::ShmRwLock)'s write-phase word (`rwlock`): the phase number and
    /// its flags, beside the flags every reader loads after entering. 0 in a mutex's region.
    pub rw_state: AtomicU32,
    // --- the lock (offset 64): its own cache line ---
    /// Low 32 bits: Go's state word. High 32 bits: owner participant index + 1 while LOCKED.
    pub state: AtomicU64,
    /// Owners found dead so far (written only by recovery).
    pub owner_deaths: AtomicU64,
    /// Recovery counters (diagnostics only, written only by recovery), indexed by [`rec`].
    pub rec: [AtomicU64; 6],
    // --- the slow path (offset 128) ---
    /// The journal lock: holder participant index + 1, bit 31 = contended.
    pub jlock: AtomicU32,
    /// Normal-mode wake-up tokens released while nobody slept.
    pub stored_normal: AtomicU32,
    /// Hand-off tokens released while nobody slept.
    pub stored_handoff: AtomicU32,
    /// Bumped when a token is stored: waiters without a slot sleep on it.
    pub overflow_seq: AtomicU32,
    /// Waiters sleeping on `overflow_seq` (a hint).
    pub overflow_waiters: AtomicU32,
    /// Non-zero while some participant gave up an obligation it could not hand back through
    /// the journal by its deadline (a queue slot, a registration, `WOKEN`; see
    /// `queue::settle_abandoned`): the next journal-lock holder settles it.
    pub abandoned: AtomicU32,
    /// FIFO order of queued waiters.
    pub next_ticket: AtomicU64,
    /// Last owner probe (`CLOCK_MONOTONIC` ns).
    pub probe_at: AtomicU64,
    /// Last full participant scan (`CLOCK_MONOTONIC` ns).
    pub scan_at: AtomicU64,
    /// The condition variable's futex word (`ShmCondvar`): bumped by every notify.
    pub cv_seq: AtomicU32,
    /// `cv_seq` as of the last `notify_all` (plus one): a woken waiter that started waiting
    /// before it passes one wake-up on (wake one and chain).
    pub cv_all: AtomicU32,
    /// Threads inside a condvar wait (a hint: notifies skip the `futex` call at 0). The sum
    /// of the participants' `cv_waiting`: recovery takes a dead process's share back (a death
    /// between the two counts leaves it one too high, which only costs a system call per
    /// notify).
    pub cv_sleepers: AtomicU32,
    pub _pad2: u32,
    // --- offset 192 ---
    pub log: Log,
    // --- offset 416: the value's type, written once by the initialiser ---
    /// FNV-1a hash of the value type's name (module paths left out), size and alignment.
    pub type_hash: AtomicU64,
    /// The first 24 bytes of that name, zero-padded (little-endian words): what an error
    /// about another type shows.
    pub type_name: [AtomicU64; 3],
}

/// One participating process.
#[repr(C, align(64))]
pub(crate) struct ParticipantSlot {
    /// `(start time << 24) | pid`; 0 = free.
    pub ident: AtomicU64,
    /// Waiter registrations of this process counted in the state word (or consumed by a token
    /// in flight to nobody in particular; see `queue`).
    pub registered: AtomicU32,
    /// 1 if a thread of this process owns the `WOKEN` bit.
    pub woken: AtomicU32,
    /// Normal-mode wake-ups this process owes (between its waking CAS and its release).
    pub owes_normal: AtomicU32,
    /// Hand-offs this process owes (between its starving unlock and its release).
    pub owes_handoff: AtomicU32,
    /// Hand-offs delivered to this process whose receiver has not taken ownership yet.
    pub handoff: AtomicU32,
    /// Waiter registrations this process gave up without the journal lock (a deadline passed
    /// while the journal lock was held by a stalled process), written lock-free; `ab_reg_done`
    /// of them were settled (under the journal lock). Likewise for `WOKEN`.
    pub ab_reg_posted: AtomicU32,
    /// The inode of this process's pidfd on kernels with pidfs (unique per process for the
    /// boot), 0 if unknown: tells a pid reused within one start-time tick apart.
    pub pidfs_ino: AtomicU64,
    pub ab_reg_done: AtomicU32,
    pub ab_woken_posted: AtomicU32,
    pub ab_woken_done: AtomicU32,
    /// Threads of this process inside a condvar wait (its share of `Header::cv_sleepers`,
    /// which recovery subtracts when it frees the slot of a dead process).
    pub cv_waiting: AtomicU32,
    /// A [`ShmRwLock`](super::ShmRwLock)'s read locks held by this process's threads: the
    /// authoritative count (no shared reader count exists), so recovery takes a dead
    /// process's reads back exactly.
    pub rw_reads: AtomicU32,
    /// Threads of this process queued for a read lock behind a writer (`rwlock`): the next
    /// writer lets them in first.
    pub rw_waiting: AtomicU32,
}

/// One sleeping waiter.
#[repr(C, align(64))]
pub(crate) struct WaiterSlot {
    /// The futex word: `SLOT_*`.
    pub state: AtomicU32,
    /// Owning participant index.
    pub participant: AtomicU32,
    /// `CLASS_*`.
    pub class: AtomicU32,
    /// 1 once its sleeper left without the journal lock (deadline passed while a stalled
    /// process held it); the next journal-lock holder frees the slot, passing on any token.
    pub abandoned: AtomicU32,
    /// FIFO order within the class.
    pub ticket: AtomicU64,
    /// When a token was put in this slot (`CLOCK_MONOTONIC` ns; advisory): a token not picked
    /// up for long is passed on.
    pub token_at: AtomicU64,
    pub _pad: [u64; 4],
}

/// The lock statistics counted under one participant slot (`ShmMutex::stats` sums them).
///
/// Only the process in the slot writes its row, so the counting costs no cache-line traffic
/// between processes. Line 0 is written by the lock's holder while it holds the lock, with a
/// plain load and store (the lock orders every holder's writes, in every process); line 1 by
/// the slow paths with `fetch_add` (a thread that does not hold the lock). A row is never
/// cleared while the region lives: a process that takes over a dead one's slot counts on top
/// of what it left, so the sums only grow.
#[repr(C, align(64))]
pub(crate) struct StatsRow {
    // --- line 0: written by the lock's holder ---
    /// Acquisitions (every `lock`, `try_lock*` that succeeded, condvar re-acquisition).
    pub acquisitions: AtomicU64,
    /// Acquisitions that did not succeed at once and went through Go's `lockSlow`.
    pub contended: AtomicU64,
    /// Those of them that slept: from the first sleep to the last wake-up, ns summed
    /// (`CLOCK_MONOTONIC`, the starvation rule's reads; spinning is not timed).
    pub wait_ns: AtomicU64,
    /// The longest of those sleeps (ns).
    pub wait_max_ns: AtomicU64,
    /// Acquisitions told that the previous owner died (`LockError::OwnerDied`).
    pub owner_died_reported: AtomicU64,
    /// Condvar waits begun (the waiter holds the lock then).
    pub cv_waits: AtomicU64,
    /// Condvar waits that timed out (counted once the lock is held again).
    pub cv_timeouts: AtomicU64,
    /// Contended acquisitions that slept (what `wait_ns` sums over).
    pub slept: AtomicU64,
    // --- line 1: written with `fetch_add` on the slow paths ---
    /// Switches into starvation mode (a waiter that waited over 1 ms set `STARVING`).
    pub starvation_entries: AtomicU64,
    /// Dead participants this slot's processes recovered.
    pub recoveries: AtomicU64,
    /// Condvar notifies (`notify_one`, `notify_all`).
    pub cv_notifies: AtomicU64,
    // `ShmRwLock`'s (`RwLockStats`; spare, so zero, in a `ShmMutex`'s region and in regions
    // made before they were counted: the bytes and `LAYOUT_VERSION` are unchanged).
    /// Read locks that found a writer in the way and waited.
    pub rw_read_waits: AtomicU64,
    /// Time those waited (ns, `CLOCK_MONOTONIC`).
    pub rw_read_wait_ns: AtomicU64,
    /// The longest of them (ns; `fetch_max`).
    pub rw_read_wait_max_ns: AtomicU64,
    /// Write locks that waited for readers (inside, or queued before them).
    pub rw_write_waits: AtomicU64,
    /// Time those waited (ns).
    pub rw_write_wait_ns: AtomicU64,
}

/// Indices of [`Header::rec`], one per field of the public `RecoveryCounts`, named as it is.
pub(crate) mod rec {
    /// The journal lock was taken over from a dead holder.
    pub(crate) const JOURNAL_TAKEOVERS: usize = 0;
    /// A dead holder's committed journal transaction was completed.
    pub(crate) const JOURNAL_REPLAYS: usize = 1;
    /// Waiter registrations of dead processes removed from the count.
    pub(crate) const DEAD_WAITERS_REMOVED: usize = 2;
    /// `WOKEN` bits owned by dead processes cleared.
    pub(crate) const DEAD_WOKEN_CLEARED: usize = 3;
    /// Wake-ups and hand-offs a dead unlocker owed, delivered on its behalf.
    pub(crate) const OWED_WAKEUPS_DELIVERED: usize = 4;
    /// Hand-offs received by a dead waiter, passed on to the next.
    pub(crate) const HANDOFFS_PASSED_ON: usize = 5;
}

/// Size of the header.
pub const HEADER_SIZE: usize = size_of::<Header>();
pub(crate) const PARTICIPANT_SLOT_SIZE: usize = size_of::<ParticipantSlot>();
pub(crate) const WAITER_SLOT_SIZE: usize = size_of::<WaiterSlot>();
pub(crate) const STATS_ROW_SIZE: usize = size_of::<StatsRow>();

const _: () = {
    assert!(HEADER_SIZE == 448);
    assert!(PARTICIPANT_SLOT_SIZE == 64);
    assert!(WAITER_SLOT_SIZE == 64);
    assert!(STATS_ROW_SIZE == 128);
    assert!(core::mem::offset_of!(StatsRow, starvation_entries) == 64);
    assert!(align_of::<Header>() == REGION_ALIGN);
    assert!(core::mem::offset_of!(Header, value_align) == 48);
    assert!(core::mem::offset_of!(Header, owner_died) == 52);
    assert!(core::mem::offset_of!(Header, poisoned) == 56);
    // The state word starts its own line; the rest of that line is written only by recovery.
    assert!(core::mem::offset_of!(Header, state) == 64);
    assert!(core::mem::offset_of!(Header, owner_deaths) == 72);
    assert!(core::mem::offset_of!(Header, rec) == 80);
    assert!(core::mem::offset_of!(Header, jlock) == 128);
    assert!(core::mem::offset_of!(Header, next_ticket) == 152);
    assert!(core::mem::offset_of!(Header, probe_at) == 160);
    assert!(core::mem::offset_of!(Header, scan_at) == 168);
    assert!(core::mem::offset_of!(Header, cv_seq) == 176);
    assert!(core::mem::offset_of!(Header, cv_all) == 180);
    assert!(core::mem::offset_of!(Header, cv_sleepers) == 184);
    assert!(core::mem::offset_of!(Header, log) == 192);
    assert!(core::mem::offset_of!(Header, type_hash) == 416);
    assert!(core::mem::offset_of!(Header, type_name) == 424);
    assert!(core::mem::offset_of!(ParticipantSlot, pidfs_ino) == 32);
    assert!(core::mem::offset_of!(ParticipantSlot, cv_waiting) == 52);
    assert!(core::mem::offset_of!(ParticipantSlot, rw_reads) == 56);
    assert!(core::mem::offset_of!(Header, rw_state) == 60);
    assert!(core::mem::offset_of!(WaiterSlot, token_at) == 24);
    assert!(size_of::<Log>() == 32 + 16 * LOG_ENTRIES);
    assert!(size_of::<AtomicU64>() == 8 && align_of::<AtomicU64>() == 8);
};

/// Bytes of a type's name the header keeps.
pub(crate) const TYPE_NAME_BYTES: usize = 24;

/// `name` without module paths: `alloc::vec::Vec<core::option::Option<u8>>` is
/// `Vec<Option<u8>>`, so a type keeps its identity when its module (or the compiler's choice of
/// path) changes.
fn strip_paths(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    // Where the identifier being copied began in `out`.
    let mut ident = 0;
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.truncate(ident);
            continue;
        }
        out.push(c);
        if !(c.is_alphanumeric() || c == '_') {
            ident = out.len();
        }
    }
    out
}

/// The identity of the value type `T` a region records: its name without module paths and a
/// hash of that name, its size and its alignment (64-bit FNV-1a, the same in every build).
pub(crate) fn type_ident<T>() -> (String, u64) {
    let name = strip_paths(core::any::type_name::<T>());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let size = (size_of::<T>() as u64).to_le_bytes();
    let align = (align_of::<T>() as u64).to_le_bytes();
    for &b in name.as_bytes().iter().chain(&size).chain(&align) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    (name, h)
}

/// `name`'s first [`TYPE_NAME_BYTES`] as the header's words.
pub(crate) fn pack_name(name: &str) -> [u64; 3] {
    let mut bytes = [0u8; TYPE_NAME_BYTES];
    let n = name.len().min(TYPE_NAME_BYTES);
    bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
    core::array::from_fn(|i| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap()))
}

/// The name [`pack_name`] stored (cut at the first NUL; invalid UTF-8 replaced).
pub(crate) fn unpack_name(words: [u64; 3]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Where everything sits for given slot counts and value layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub participants: u32,
    pub waiter_slots: u32,
    pub participants_offset: usize,
    pub slots_offset: usize,
    pub stats_offset: usize,
    pub value_offset: usize,
    pub value_size: usize,
    pub value_align: usize,
    pub total_size: usize,
}

const fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

impl Layout {
    /// The layout for these counts (`None` if a count is out of range or it overflows).
    pub(crate) fn new(
        participants: u32,
        waiter_slots: u32,
        value_size: usize,
        value_align: usize,
    ) -> Option<Self> {
        if participants == 0
            || participants > MAX_SLOTS
            || waiter_slots > MAX_SLOTS
            || !value_align.is_power_of_two()
            || value_align > 4096
        {
            return None;
        }
        let participants_offset = HEADER_SIZE;
        let slots_offset = participants_offset + participants as usize * PARTICIPANT_SLOT_SIZE;
        let stats_offset = slots_offset + waiter_slots as usize * WAITER_SLOT_SIZE;
        let end = stats_offset + participants as usize * STATS_ROW_SIZE;
        let value_offset = align_up(end, value_align.max(REGION_ALIGN));
        let total_size = align_up(value_offset.checked_add(value_size)?, REGION_ALIGN);
        Some(Self {
            participants,
            waiter_slots,
            participants_offset,
            slots_offset,
            stats_offset,
            value_offset,
            value_size,
            value_align,
            total_size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_identity() {
        assert_eq!(
            strip_paths("alloc::vec::Vec<core::option::Option<u8>>"),
            "Vec<Option<u8>>"
        );
        assert_eq!(strip_paths("[my_crate::a::Stats; 4]"), "[Stats; 4]");
        assert_eq!(type_ident::<u32>().0, "u32");
        let ids = [
            type_ident::<u32>().1,
            type_ident::<i32>().1,
            type_ident::<f32>().1,
            type_ident::<[u16; 2]>().1,
            type_ident::<u64>().1,
        ];
        for (i, a) in ids.iter().enumerate() {
            assert!(ids[i + 1..].iter().all(|b| a != b), "{ids:x?}");
        }
        // The same in every build: a fixed function of the name, size and alignment.
        assert_eq!(type_ident::<u32>().1, type_ident::<u32>().1);
        let long = "VeryLongTypeNameThatDoesNotFit<u8>";
        assert_eq!(unpack_name(pack_name(long)), &long[..TYPE_NAME_BYTES]);
        assert_eq!(unpack_name(pack_name("f32")), "f32");
    }
}
