//! The readers' slot table: one global table, shared by every [`RwLock`](crate::RwLock) of the
//! process, where a reader of a *biased* lock ([`BIAS`](crate::rwword::BIAS)) records itself
//! instead of adding to the lock's reader count, so that reads write no line another reader
//! writes (folly's `SharedMutex`, `folly/SharedMutex.h`; Dice and Kogan's BRAVO, USENIX ATC
//! 2019).
//!
//! * [`SLOTS`] slots, one 64-byte line each, holding the key (the state word's address) of the
//!   lock its reader holds, or 0.
//! * A thread *claims* a slot the first time it reads a biased lock (a bit in the table's
//!   claim map, on a line of its own) and keeps it until it exits; only its owner ever
//!   publishes in a slot, and only while the slot is 0. With every slot claimed, a thread reads
//!   through the word as if the lock were not biased.
//! * A writer scans the claimed slots only (the claim map, then one line per claimed slot):
//!   with two threads reading, two lines.
//!
//! The exclusion is a Dekker pair (`crate::rwalgo` has the protocol): the reader stores its key
//! into its slot, then loads the lock's word; the writer sets `PHASE` in the word, then loads
//! the slots; a `SeqCst` fence on each side between the two, so at least one sees the other. Every access of the table
//! goes through the atomics facade (`crate::sync`), which loom switches.

use crate::sync::{AtomicU64, Ordering};

/// Slots in the table: the threads that can read biased locks through it at once (the others
/// read through the locks' words). 128 lines, 8 KiB, plus one line of claims. A model under
/// loom has 4 (its threads are few, and the table is built again for every execution).
#[cfg(not(gomutex_loom))]
pub const SLOTS: usize = 128;
/// Slots in the table (loom: a few).
#[cfg(gomutex_loom)]
pub const SLOTS: usize = 4;

const CLAIM_WORDS: usize = SLOTS.div_ceil(64);

/// One slot: the key of the lock its owner holds a read lock of, or 0.
#[repr(align(64))]
struct Slot(AtomicU64);

/// The claim map, a bit per slot, on a line of its own (written when a thread claims or gives
/// back a slot, read by every revocation).
#[repr(align(64))]
struct Claims([AtomicU64; CLAIM_WORDS]);

/// The table.
pub(crate) struct Table {
    claims: Claims,
    slots: [Slot; SLOTS],
}

impl Table {
    #[cfg(not(gomutex_loom))]
    const fn new() -> Self {
        Self {
            claims: Claims([const { AtomicU64::new(0) }; CLAIM_WORDS]),
            slots: [const { Slot(AtomicU64::new(0)) }; SLOTS],
        }
    }

    #[cfg(gomutex_loom)]
    fn new() -> Self {
        Self {
            claims: Claims(core::array::from_fn(|_| AtomicU64::new(0))),
            slots: core::array::from_fn(|_| Slot(AtomicU64::new(0))),
        }
    }
}

#[cfg(not(gomutex_loom))]
static TABLE: Table = Table::new();

#[cfg(gomutex_loom)]
loom::lazy_static! {
    static ref TABLE: Table = Table::new();
}

#[inline]
fn table() -> &'static Table {
    &TABLE
}

/// [`MINE`]: this thread has not asked for a slot yet.
const UNASKED: u32 = u32::MAX;
/// [`MINE`]: this thread is exiting and gave its slot back (or never had one): no slot any
/// more.
const NONE: u32 = u32::MAX - 1;

#[cfg(not(gomutex_loom))]
std::thread_local! {
    /// This thread's slot, [`UNASKED`] (also after finding every slot claimed: it asks again
    /// next time, which reads the claim map's line, rarely written) or [`NONE`]. No destructor, so it stays readable while
    /// other thread-locals' destructors run (after [`GIVE_BACK`]'s has set it to [`NONE`]).
    static MINE: core::cell::Cell<u32> = const { core::cell::Cell::new(UNASKED) };
    /// Gives the slot back when the thread exits.
    static GIVE_BACK: GiveBack = const { GiveBack };
}

#[cfg(gomutex_loom)]
loom::thread_local! {
    /// This thread's slot (loom: reset for every execution; claims are never given back).
    static MINE: core::cell::Cell<u32> = core::cell::Cell::new(UNASKED);
    static HELD: core::cell::Cell<u64> = core::cell::Cell::new(0);
}

#[cfg(not(gomutex_loom))]
std::thread_local! {
    /// The key of the last lock this thread entered as its *first* reader (a token read
    /// through the word that found nobody inside), until that read is released (0: none).
    /// A read that finds readers inside while this names its lock is this thread's recursive
    /// read, not readers of different threads overlapping, and does not count towards
    /// biasing (Go's `Uncontended` benchmark reads twice on one thread). Written only by such
    /// a first read and its release: one store each, no count (a thread's recursive read of
    /// a lock another thread entered first does count, but readers of two threads overlap
    /// there anyway).
    static HELD: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// Whether this thread entered the lock `key` as its first reader and still holds that read
/// (a hint: the last such read only).
#[inline]
pub(crate) fn holds(key: u64) -> bool {
    HELD.with(|h| h.get() == key)
}

/// This thread entered the lock `key` as its first reader.
#[inline]
pub(crate) fn hold(key: u64) {
    HELD.with(|h| h.set(key));
}

/// This thread released the read lock [`hold`] recorded for `key` (unless a later first
/// read of another lock replaced it).
#[inline]
pub(crate) fn unhold(key: u64) {
    HELD.with(|h| {
        if h.get() == key {
            h.set(0);
        }
    });
}

/// The destructor that gives a thread's slot back.
#[cfg(not(gomutex_loom))]
struct GiveBack;

#[cfg(not(gomutex_loom))]
impl Drop for GiveBack {
    fn drop(&mut self) {
        give_back();
    }
}

/// Gives this thread's slot back (it is exiting): from then on it has none.
#[cfg(not(gomutex_loom))]
fn give_back() {
    let Ok(i) = MINE.try_with(|m| m.replace(NONE)) else {
        return;
    };
    if i >= SLOTS as u32 {
        return;
    }
    let t = table();
    let i = i as usize;
    // A slot still naming a lock belongs to a read lock this thread never released (a leaked
    // guard): it stays claimed, and every revocation keeps scanning it.
    if t.slots[i].0.load(Ordering::SeqCst) == 0 {
        t.claims.0[i / 64].fetch_and(!(1 << (i % 64)), Ordering::SeqCst);
    }
}

/// This thread's slot, claiming one the first time; `None` if every slot is claimed (then
/// asked again on the next call).
#[inline]
pub(crate) fn my_slot() -> Option<usize> {
    let i = MINE.with(|m| m.get());
    if i < SLOTS as u32 {
        return Some(i as usize);
    }
    if i == NONE {
        return None;
    }
    claim()
}

#[cold]
fn claim() -> Option<usize> {
    let t = table();
    let got = (0..CLAIM_WORDS).find_map(|w| {
        let word = &t.claims.0[w];
        let mut v = word.load(Ordering::SeqCst);
        loop {
            let free = !v
                & if SLOTS - w * 64 >= 64 {
                    u64::MAX
                } else {
                    (1 << (SLOTS - w * 64)) - 1
                };
            if free == 0 {
                return None;
            }
            let bit = free.trailing_zeros() as usize;
            match word.compare_exchange(v, v | 1 << bit, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Some(w * 64 + bit),
                Err(cur) => v = cur,
            }
        }
    });
    if let Some(i) = got {
        MINE.with(|m| m.set(i as u32));
        // Register the destructor that gives the slot back (a thread that never claims never
        // registers one).
        #[cfg(not(gomutex_loom))]
        let _ = GIVE_BACK.try_with(|_| {});
        // The coherence model gives it back as the thread's last step in the run: a
        // destructor at the thread's real exit would race with the threads still running.
        #[cfg(gomutex_coherence)]
        crate::sync::coherence::at_exit(give_back);
    }
    got
}

/// Whether slot `i` (this thread's) names no lock.
#[inline]
pub(crate) fn is_free(i: usize) -> bool {
    table().slots[i].0.load(Ordering::Relaxed) == 0
}

/// Record in slot `i` (this thread's, free) a read lock of the lock `key` (`Relaxed`: the
/// caller fences after).
#[inline]
pub(crate) fn publish(i: usize, key: u64) {
    table().slots[i].0.store(key, Ordering::Relaxed);
}

/// [`publish`], then a full `SeqCst` fence: the reader's side of the Dekker pair. On x86 one
/// `SeqCst` swap (`xchg`, a locked instruction, a full barrier there and cheaper than
/// `mfence`; crossbeam-epoch's `pin` does the same), and the caller's next load of the lock's
/// word must then be `SeqCst` too (`load_all_seqcst`, a plain load on x86): with the writer's
/// fence that makes the pair sound in the language's model, not only on x86's (Miri found a
/// race with an `Acquire` load there). Elsewhere, and under loom (which models the fence
/// exactly, not the locked instruction's barrier), the store and `fence(SeqCst)`.
#[inline]
pub(crate) fn publish_fenced(i: usize, key: u64) {
    #[cfg(all(any(target_arch = "x86", target_arch = "x86_64"), not(gomutex_loom)))]
    table().slots[i].0.swap(key, Ordering::SeqCst);
    #[cfg(not(all(any(target_arch = "x86", target_arch = "x86_64"), not(gomutex_loom))))]
    {
        publish(i, key);
        crate::sync::fence(Ordering::SeqCst);
    }
}

/// Clear slot `i` if it still names `key` (a reader releasing or withdrawing its read lock):
/// `false` if a writer moved it into the lock's reader count first. `Release` (the reader's
/// reads happen before the writer that sees the slot empty), `Acquire` on failure (the writer's
/// addition to the count happens before the reader takes its read back out of it).
#[inline]
pub(crate) fn release(i: usize, key: u64, relaxed: bool) -> bool {
    let (ok, fail) = if relaxed {
        (Ordering::Relaxed, Ordering::Relaxed)
    } else {
        (Ordering::Release, Ordering::Acquire)
    };
    table().slots[i]
        .0
        .compare_exchange(key, 0, ok, fail)
        .is_ok()
}

/// A writer taking the read lock recorded in slot `i` over into the lock's reader count
/// (folly's folding): `true` if the slot still named `key`. `AcqRel`: the writer's addition to
/// the count, before, happens before the reader's failed release, and the reader's reads
/// before the writer's writes.
#[inline]
pub(crate) fn fold(i: usize, key: u64, relaxed: bool) -> bool {
    let (ok, fail) = if relaxed {
        (Ordering::Relaxed, Ordering::Relaxed)
    } else {
        (Ordering::AcqRel, Ordering::Acquire)
    };
    table().slots[i]
        .0
        .compare_exchange(key, 0, ok, fail)
        .is_ok()
}

/// Whether slot `i` still names `key` (a writer watching a reader of its lock leave): `Acquire`
/// (the reader's reads happen before the writer's critical section), unless `relaxed`.
#[inline]
pub(crate) fn names(i: usize, key: u64, relaxed: bool) -> bool {
    let order = if relaxed {
        Ordering::Relaxed
    } else {
        Ordering::Acquire
    };
    table().slots[i].0.load(order) == key
}

/// Call `f(i)` for every claimed slot `i` that names `key`. The slots' loads are `Acquire`
/// (a slot a reader released happens before the writer's critical section), unless `relaxed`;
/// the caller's `SeqCst` fence comes before.
#[inline]
pub(crate) fn scan(key: u64, relaxed: bool, mut f: impl FnMut(usize)) {
    let order = if relaxed {
        Ordering::Relaxed
    } else {
        Ordering::Acquire
    };
    let t = table();
    for w in 0..CLAIM_WORDS {
        let mut claimed = t.claims.0[w].load(Ordering::Relaxed);
        while claimed != 0 {
            let i = w * 64 + claimed.trailing_zeros() as usize;
            claimed &= claimed - 1;
            if t.slots[i].0.load(order) == key {
                f(i);
            }
        }
    }
}

/// Slots naming `key` right now (a snapshot, for `is_locked` and tests).
pub(crate) fn count(key: u64) -> usize {
    let mut n = 0;
    scan(key, false, |_| n += 1);
    n
}

/// Slots naming any lock right now (a snapshot: 0 when no read lock is held through the
/// table; for tests and models).
pub fn occupied() -> usize {
    let t = table();
    t.slots
        .iter()
        .filter(|s| s.0.load(Ordering::SeqCst) != 0)
        .count()
}
