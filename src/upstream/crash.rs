//! Crash points inside the upstream zone's operations, for tests (armed with
//! `gomutex::shm::__crash_at`; compiled to nothing without the test-only `__crash-points`
//! feature). Not part of the API.

/// A pick: the spare copy written and this process's row counted, the epoch not committed.
pub const PICK_WRITTEN: u32 = 201;
/// A pick committed, the zone lock still held.
pub const PICK_COMMITTED: u32 = 202;
/// A failure report: the spare copy written and the row's count lowered, not committed.
pub const REPORT_WRITTEN: u32 = 203;
/// A row claimed (its identity stored), its pidfs inode not yet.
pub const ROW_CLAIMED: u32 = 204;
/// A row being given back: the first peer's count zeroed, the rest and the identity not.
pub const ROW_ZEROING: u32 = 205;

#[inline]
pub(crate) fn point(p: u32) {
    crate::shm::seam::crash_point(p);
}
