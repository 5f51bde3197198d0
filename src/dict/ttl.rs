//! Time to live: expiry instants in milliseconds on `CLOCK_MONOTONIC`, one clock for every
//! process of the machine (unlike `Instant`, whose values a process cannot hand to another),
//! and `flush_all` as one sequence number: an entry written at or before the flush is expired.

use super::layout::*;
use super::redo::ZoneTx;
use std::time::Duration;

/// Milliseconds on `CLOCK_MONOTONIC` (never 0: 0 means "never expires" in an entry).
pub(crate) fn now_ms() -> u64 {
    (crate::shm::seam::mono_ns() / 1_000_000).max(1)
}

/// The expiry word for a TTL given now: `None` or zero never expires (lua_shared_dict's
/// `exptime` 0); another TTL under 1 ms is 1 ms (so a TTL meant to expire does).
pub(crate) fn expiry(ttl: Option<Duration>, now: u64) -> u64 {
    match ttl {
        None => 0,
        Some(d) if d.is_zero() => 0,
        Some(d) => {
            let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
            now.saturating_add(ms)
        }
    }
}

/// Whether entry `e` is expired at `now` (its TTL passed, or `flush_all` came after it).
pub(crate) fn expired(tx: &ZoneTx<'_>, e: usize, now: u64) -> bool {
    let exp = tx.r64(e + E_EXPIRES);
    (exp != 0 && exp <= now) || tx.r64(e + E_SEQ) <= tx.r64(H_FLUSH_SEQ)
}

/// Time left of entry `e` (live at `now`): `None` if it never expires.
pub(crate) fn left(tx: &ZoneTx<'_>, e: usize, now: u64) -> Option<Duration> {
    match tx.r64(e + E_EXPIRES) {
        0 => None,
        exp => Some(Duration::from_millis(exp.saturating_sub(now))),
    }
}
