//! Readers-writer lock: a state word that can be broken, and parts over it.

use crate::harness::NeverStarving;
use gomutex::algo::{CasError, StateWord, LOCKED};
use gomutex::rwalgo::{
    BiasFault, RwParts, RwState, BIAS, IDLE_SCANS, OVERLAPS, PHASE, WRITER_PARKED,
};
use gomutex::sema::ParkSema;
use loom::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed as LoomRelaxed, Release, SeqCst};

/// How a [`ModelWord`] is broken, for the negative controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwFault {
    /// None: the orderings of gomutex's `RwWord`.
    Sound,
    /// A reader's exit (`sub_all`) is `Relaxed`: its reads no longer happen before the writer
    /// it lets in.
    RelaxedExit,
    /// A reader's exit does not see `WRITER_PARKED` (as if it never looked): the last reader
    /// leaves a sleeping writer asleep.
    ExitIgnoresParkedWriter,
    /// A reader's entry (`add_all`) does not see `PHASE`: it walks in during a write phase.
    EntryIgnoresPhase,
}

/// A readers-writer state word with gomutex's `RwWord` layout and orderings (`AcqRel`
/// read-modify-writes, `Acquire` loads; the low half as `impl StateWord for AtomicU32`), or
/// broken one way ([`RwFault`]).
pub struct ModelWord {
    a: loom::sync::atomic::AtomicU64,
    fault: RwFault,
}

impl ModelWord {
    pub fn new(fault: RwFault) -> Self {
        Self {
            a: loom::sync::atomic::AtomicU64::new(0),
            fault,
        }
    }
}

impl RwState for ModelWord {
    fn load_all(&self) -> u64 {
        self.a.load(Acquire)
    }
    fn load_all_seqcst(&self) -> u64 {
        self.a.load(SeqCst)
    }
    fn cas_all(&self, old: u64, new: u64) -> Result<u64, u64> {
        self.a.compare_exchange(old, new, AcqRel, Acquire)
    }
    fn add_all(&self, delta: u64) -> u64 {
        let prev = self.a.fetch_add(delta, AcqRel);
        if self.fault == RwFault::EntryIgnoresPhase {
            prev & !PHASE
        } else {
            prev
        }
    }
    fn sub_all(&self, delta: u64) -> u64 {
        match self.fault {
            RwFault::RelaxedExit => self.a.fetch_sub(delta, LoomRelaxed),
            RwFault::ExitIgnoresParkedWriter => self.a.fetch_sub(delta, AcqRel) & !WRITER_PARKED,
            _ => self.a.fetch_sub(delta, AcqRel),
        }
    }
    fn or_all(&self, bits: u64) -> u64 {
        self.a.fetch_or(bits, AcqRel)
    }
    fn clear_all(&self, bits: u64) -> u64 {
        self.a.fetch_and(!bits, AcqRel)
    }
}

impl StateWord for ModelWord {
    fn load(&self) -> u32 {
        self.a.load(SeqCst) as u32
    }
    fn try_acquire_fast(&self) -> bool {
        let mut v = self.a.load(SeqCst);
        while v as u32 == 0 {
            match self
                .a
                .compare_exchange(v, v | LOCKED as u64, Acquire, LoomRelaxed)
            {
                Ok(_) => return true,
                Err(cur) => v = cur,
            }
        }
        false
    }
    fn cas(&self, old: u32, new: u32) -> Result<u32, CasError> {
        let mut v = self.a.load(SeqCst);
        while v as u32 == old {
            let next = (v & !(u32::MAX as u64)) | new as u64;
            match self.a.compare_exchange(v, next, SeqCst, LoomRelaxed) {
                Ok(_) => return Ok(old),
                Err(cur) => v = cur,
            }
        }
        Err(CasError::Moved(v as u32))
    }
    fn fetch_add(&self, delta: u32) -> u32 {
        self.a.fetch_add(delta as i32 as i64 as u64, SeqCst) as u32
    }
    fn release_locked(&self) -> u32 {
        (self.a.fetch_sub(LOCKED as u64, Release) as u32).wrapping_sub(LOCKED)
    }
}

/// The parts of `gomutex::RawRwLock` (a state word, the writers' `ParkSema`, parking mocked)
/// over a [`ModelWord`], with a loom `UnsafeCell` that readers read and writers write (loom
/// reports any write not ordered with every other access). `B` picks the slot table's
/// protocol ([`bias_fault`]): 0 is the shipped one.
pub struct RwHarnessOf<const B: u8> {
    pub word: ModelWord,
    pub queue: ParkSema,
    pub cell: loom::cell::UnsafeCell<u64>,
}

/// The harness with the shipped slot-table protocol.
pub type RwHarness = RwHarnessOf<0>;

/// The slot table's protocol of [`RwHarnessOf<B>`]: 0 sound, 1 the reader checks before
/// publishing, 2 the writer scans before announcing, 3 no `SeqCst` fences and `Relaxed`
/// table accesses, 4 the writer goes on past a reader it watched without seeing it leave.
pub const fn bias_fault(b: u8) -> BiasFault {
    match b {
        0 => BiasFault::Sound,
        1 => BiasFault::CheckBeforePublish,
        2 => BiasFault::ScanBeforeAnnounce,
        3 => BiasFault::Relaxed,
        _ => BiasFault::ForgetWatched,
    }
}

impl<const B: u8> RwHarnessOf<B> {
    pub fn new(fault: RwFault) -> Self {
        Self {
            word: ModelWord::new(fault),
            queue: ParkSema::new(),
            cell: loom::cell::UnsafeCell::new(0),
        }
    }

    /// A reader's critical section: returns the value (loom checks the read is ordered after
    /// every write).
    pub fn read_cs(&self) -> u64 {
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        self.cell.with(|p| unsafe { *p })
    }

    /// A writer's critical section: one more write.
    pub fn write_cs(&self) {
        // SAFETY: a loom UnsafeCell: loom checks this access against every other.
        self.cell.with_mut(|p| unsafe { *p += 1 });
    }

    /// After all threads joined: the word 0 (but for the bias bits), the slot table empty,
    /// nobody asleep, `writes` write sections.
    pub fn assert_quiescent(&self, writes: u64) {
        assert_eq!(
            self.word.load_all() & !(BIAS | OVERLAPS | IDLE_SCANS),
            0,
            "state word not 0 at the end"
        );
        assert_eq!(gomutex::rwtable::occupied(), 0, "slots left naming a lock");
        assert_eq!(
            self.queue.stored_tokens(),
            0,
            "writers' tokens left at the end"
        );
        assert_eq!(self.read_cs(), writes, "write critical sections lost");
    }
}

impl<const B: u8> RwParts for RwHarnessOf<B> {
    const BIAS_FAULT: BiasFault = bias_fault(B);
    type Word = ModelWord;
    type Queue = ParkSema;
    type Clock = NeverStarving;
    fn word(&self) -> &ModelWord {
        &self.word
    }
    fn queue(&self) -> &ParkSema {
        &self.queue
    }
    fn key(&self) -> usize {
        &self.word as *const ModelWord as usize
    }
}
