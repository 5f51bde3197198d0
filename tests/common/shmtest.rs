//! Assertions and raw access shared by the shared-memory tests.

use gomutex::shm::{LockError, ShmMutex, ShmSafe};
use std::sync::atomic::AtomicU32;

/// The guard of a lock call that must not report an owner death or poisoning.
pub fn ok<G>(r: Result<G, LockError<G>>) -> G {
    match r {
        Ok(g) => g,
        Err(e) => panic!("unexpected lock error: {e}"),
    }
}

/// Assert the lock is quiescent: no waiters, nothing queued, no tokens, no accounting.
pub fn assert_quiescent<T: ShmSafe>(m: &ShmMutex<T>) {
    let d = m.diagnostics();
    assert_eq!(d.waiters, 0, "{d:?}");
    assert_eq!(d.queued_slots, 0, "{d:?}");
    assert_eq!(d.stored_tokens, 0, "{d:?}");
    assert_eq!(d.registered_waiters, 0, "{d:?}");
    assert_eq!(d.in_flight, 0, "{d:?}");
    assert_eq!(d.state & 7, 0, "{d:?}");
}

/// A word of the region's header at byte offset `off` (offsets of `src/shm/layout.rs`), for
/// tests that play a faulty peer or a dying notifier.
pub fn header_u32<T: ShmSafe>(m: &ShmMutex<T>, off: usize) -> &AtomicU32 {
    let (p, len) = m.as_ptr_len();
    assert!(off + 4 <= len && off.is_multiple_of(4));
    // SAFETY: in bounds and aligned (checked; the region is 64-aligned), a word the library
    // itself only accesses atomically; the mapping lives as long as `m`.
    unsafe { &*(p.add(off) as *const AtomicU32) }
}
