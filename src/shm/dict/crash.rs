//! Crash points inside the dictionary's operations, for tests (armed with
//! `gomutex::shm::__crash_at`; compiled to nothing without the test-only `__crash-points`
//! feature). Not part of the API.

/// A new entry is written in free memory; its transaction is not committed.
pub const ENTRY_WRITTEN: u32 = 101;
/// The redo record's pairs are written; the commit store is not made.
pub const LOGGED: u32 = 102;
/// Committed; nothing applied.
pub const COMMITTED: u32 = 103;
/// Committed; half of the writes applied.
pub const HALF_APPLIED: u32 = 104;
/// Everything applied; the record not cleared.
pub const APPLIED: u32 = 105;
/// An update of the same size is planned in place (its new words in the transaction); not
/// committed.
pub const IN_PLACE: u32 = 107;
/// Between two transactions of one operation (an eviction before a store, an entry of
/// `flush_expired`).
pub const BETWEEN: u32 = 106;

#[inline]
pub(crate) fn point(p: u32) {
    crate::shm::sys::crash_point(p);
}
