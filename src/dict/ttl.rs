//! Time to live: expiry instants in milliseconds on `CLOCK_MONOTONIC`, one clock for every
//! process of the machine (unlike `Instant`, whose values a process cannot hand to another),
//! and `flush_all` as one sequence number: an entry written at or before the flush is expired.
//!
//! The clock is read once per operation, and only if the operation needs it ([`Now`]): an
//! entry that never expires is checked without it (a clock read costs about as much as the
//! rest of a lookup).

use super::layout::*;
use core::cell::Cell;
use std::time::Duration;

/// Milliseconds on `CLOCK_MONOTONIC` (never 0: 0 means "never expires" in an entry).
pub(crate) fn now_ms() -> u64 {
    (crate::shm::seam::mono_ns() / 1_000_000).max(1)
}

/// The time of one operation: read from the clock the first time it is asked for, then the
/// same for the rest of the operation.
#[derive(Debug, Default)]
pub(crate) struct Now(Cell<u64>);

impl Now {
    /// A time not read yet.
    pub(crate) fn lazy() -> Self {
        Self(Cell::new(0))
    }

    /// The time `ms` (a reading the caller made of the same clock; 0 is taken as 1).
    pub(crate) fn at(ms: u64) -> Self {
        Self(Cell::new(ms.max(1)))
    }

    /// Milliseconds on `CLOCK_MONOTONIC`, as first read by this operation.
    #[inline]
    pub(crate) fn ms(&self) -> u64 {
        match self.0.get() {
            0 => self.read(),
            t => t,
        }
    }

    #[cold]
    #[inline(never)]
    fn read(&self) -> u64 {
        let t = now_ms();
        self.0.set(t);
        t
    }
}

/// The expiry word for a TTL given now: `None` or zero never expires (lua_shared_dict's
/// `exptime` 0); another TTL under 1 ms is 1 ms (so a TTL meant to expire does).
pub(crate) fn expiry(ttl: Option<Duration>, now: &Now) -> u64 {
    match ttl {
        None => 0,
        Some(d) if d.is_zero() => 0,
        Some(d) => {
            let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
            now.ms().saturating_add(ms)
        }
    }
}

/// Whether entry `e` is expired at `now` (its TTL passed, or `flush_all` came after it). The
/// clock is read only for an entry with a TTL.
#[inline]
pub(crate) fn expired(tx: &impl Words, e: usize, now: &Now) -> bool {
    let exp = tx.r64(e + E_EXPIRES);
    tx.r64(e + E_SEQ) <= tx.r64(H_FLUSH_SEQ) || (exp != 0 && exp <= now.ms())
}

/// Time left of entry `e` (live at `now`): `None` if it never expires.
pub(crate) fn left(tx: &impl Words, e: usize, now: &Now) -> Option<Duration> {
    match tx.r64(e + E_EXPIRES) {
        0 => None,
        exp => Some(Duration::from_millis(exp.saturating_sub(now.ms()))),
    }
}
