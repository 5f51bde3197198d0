//! The processes' connection rows: one row per process that picks, owned by its identity
//! (pid and start time, as `shm`'s participant slots), holding how many connections the
//! process has open to each peer. A peer's `conns` (nginx's `peer->conns`) is the sum of its
//! column. A row whose owner is dead is given back whole: its counts zeroed, then the row
//! freed — so a dead process's connections are returned exactly, whatever instant it died at.
//!
//! Who writes a row: its owner, under the zone lock (a pick's `+1`, a release's `-1`); a
//! repairer, under the zone lock, once the owner is dead (zeroes, then frees). A claim of a
//! free row is a CAS of its identity, without the lock: a free row counts nothing.

use super::layout::Parts;
use crate::crash;
use crate::shm::seam;
use core::sync::atomic::Ordering::{Relaxed, SeqCst};

impl Parts<'_> {
    /// Peer `p`'s connection count in row `r`.
    pub(crate) fn conn(&self, p: usize, r: usize) -> &core::sync::atomic::AtomicU32 {
        &self.conns[p * self.rows.len() + r]
    }

    /// Peer `p`'s connections over every row (nginx's `peer->conns`), saturating.
    pub(crate) fn conns_of(&self, p: usize) -> u32 {
        let n = self.rows.len();
        self.conns[p * n..(p + 1) * n]
            .iter()
            .fold(0u32, |a, c| a.saturating_add(c.load(Relaxed)))
    }

    /// Claim a free row for this process: its index.
    pub(crate) fn claim_row(&self) -> Option<usize> {
        let me = seam::self_ident();
        let r = self.rows.iter().position(|row| {
            row.ident.load(Relaxed) == 0
                && row.ident.compare_exchange(0, me, SeqCst, SeqCst).is_ok()
        })?;
        crash::point(crash::ROW_CLAIMED);
        self.rows[r].ino.store(seam::self_pidfs_ino(), SeqCst);
        Some(r)
    }

    /// Whether row `r`'s owner (as read: `ident`) is gone.
    fn row_dead(&self, r: usize, ident: u64) -> bool {
        let row = &self.rows[r];
        let ino = row.ino.load(SeqCst);
        let ino = if row.ident.load(SeqCst) == ident {
            ino
        } else {
            0
        };
        seam::ident_dead(ident, ino)
    }

    /// Give row `r` back if its owner is `ident`: zero its counts, then free it. Under the zone
    /// lock (or as the row's own live owner). Returns the connections it held.
    pub(crate) fn free_row(&self, r: usize, ident: u64) -> u64 {
        let mut returned = 0u64;
        for p in 0..self.conf.len() {
            returned += u64::from(self.conn(p, r).swap(0, Relaxed));
            if p == 0 {
                crash::point(crash::ROW_ZEROING);
            }
        }
        self.rows[r].ino.store(0, SeqCst);
        // A repairer killed before this CAS leaves the row to the next one: zeroing again is
        // idempotent.
        let _ = self.rows[r]
            .ident
            .compare_exchange(ident, 0, SeqCst, SeqCst);
        returned
    }

    /// Under the zone lock: give back the rows of dead processes (only those of `pid` if
    /// given; `only_with` limits the scan to rows holding connections to that peer). Returns
    /// (rows given back, connections returned).
    pub(crate) fn repair(&self, pid: Option<u32>, only_with: Option<usize>) -> (usize, u64) {
        let (mut rows, mut conns) = (0, 0);
        for r in 0..self.rows.len() {
            let ident = self.rows[r].ident.load(SeqCst);
            if ident == 0 || pid.is_some_and(|pid| seam::ident_pid(ident) != pid) {
                continue;
            }
            if only_with.is_some_and(|p| self.conn(p, r).load(Relaxed) == 0) {
                continue;
            }
            if self.row_dead(r, ident) {
                conns += self.free_row(r, ident);
                rows += 1;
            }
        }
        if rows > 0 {
            self.header.repaired.fetch_add(rows as u64, Relaxed);
            self.header.conns_returned.fetch_add(conns, Relaxed);
        }
        (rows, conns)
    }

    /// Rows owned now.
    pub(crate) fn rows_in_use(&self) -> u32 {
        self.rows
            .iter()
            .filter(|r| r.ident.load(Relaxed) != 0)
            .count() as u32
    }
}
