//! Picking a peer and reporting on it: the rules of `rules.rs` run on a copy of the committed
//! state under the zone lock, the result written to the spare copy and committed by one store
//! of the epoch; [`PeerSlot`], a connection counted in this process's row until reported.

use super::rules::{self, State};
use super::{now_ms, PickError, UpstreamZone};
use crate::crash;
use crate::shm::seam::{self, fork_generation};
use crate::shm::{commit_store, ShmMutexGuard};
use core::fmt;
use core::sync::atomic::Ordering::{Relaxed, SeqCst};

/// How often (at most, machine-wide) a picker that finds a peer full looks for dead
/// processes whose rows hold its connections.
const SCAN_EVERY_MS: u64 = 10;

/// The peers a request has tried (nginx's `tried` bitmap): [`UpstreamZone::pick_untried`]
/// skips them and adds the one it picks.
///
/// ```
/// use gomutex::upstream::Tried;
/// let mut t = Tried::new();
/// t.insert(3);
/// assert!(t.contains(3) && !t.contains(0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tried(u64);

impl Tried {
    /// None tried.
    pub const fn new() -> Self {
        Self(0)
    }

    /// Mark `peer` tried (peers from [`MAX_PEERS`](super::MAX_PEERS) on are ignored).
    pub fn insert(&mut self, peer: usize) {
        if peer < 64 {
            self.0 |= 1 << peer;
        }
    }

    /// Whether `peer` was tried.
    pub fn contains(&self, peer: usize) -> bool {
        peer < 64 && self.0 & (1 << peer) != 0
    }
}

/// A connection to a picked peer, counted against its `max_conns` in every process until it
/// is reported: [`success`](Self::success), [`failure`](Self::failure), or dropped (a
/// success, as nginx frees a peer without `NGX_PEER_FAILED`). A slot inherited across
/// `fork()` is the parent's: reporting or dropping it in the child does nothing.
#[must_use = "a slot counts a connection until it is reported or dropped"]
pub struct PeerSlot<'z> {
    zone: &'z UpstreamZone,
    peer: usize,
    row: usize,
    generation: u32,
}

impl fmt::Debug for PeerSlot<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerSlot")
            .field("peer", &self.peer)
            .field("name", &self.zone.name(self.peer))
            .finish()
    }
}

impl PeerSlot<'_> {
    /// The peer picked (its index in the zone's peers).
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// The peer answered: release the connection, and clear the peer's failures if it was
    /// checked since it last failed.
    pub fn success(self) {
        // Drop reports a success.
    }

    /// The peer failed (refused, timed out, answered an error nginx's `proxy_next_upstream`
    /// would count): release the connection and count the failure.
    pub fn failure(self) {
        self.report_at(true, now_ms());
    }

    /// Report at `now` (ms of the zone's clock).
    pub(crate) fn report_at(self, failure: bool, now: u64) {
        let me = core::mem::ManuallyDrop::new(self);
        me.release(failure, now);
    }

    fn release(&self, failure: bool, now: u64) {
        if self.generation != fork_generation() {
            return; // the parent's slot
        }
        let z = self.zone;
        let p = z.parts();
        let mut g = z.locked();
        let epoch = *g;
        let c = p.conn(self.peer, self.row);
        c.store(c.load(Relaxed).saturating_sub(1), Relaxed);
        // The common report, a success that clears no failure, changes no state: one peer
        // read, no copy.
        let st = p.state[z.live(epoch) + self.peer].load();
        let clears = st.fails != 0 && rules::clears_fails(&st);
        if !failure && !clears {
            return;
        }
        z.with_state(epoch, |st| {
            if rules::free_peer(&z.confs, st, self.peer, failure, now) {
                z.store(epoch.wrapping_add(1), st);
                crash::point(crash::REPORT_WRITTEN);
                commit_store(&mut *g, epoch.wrapping_add(1));
            }
        });
    }
}

impl Drop for PeerSlot<'_> {
    fn drop(&mut self) {
        self.release(false, now_ms());
    }
}

impl UpstreamZone {
    /// Pick a peer for a new request (nginx's `ngx_http_upstream_get_round_robin_peer`): the
    /// next of the smooth weighted round-robin among the available primary peers, or among the
    /// backups if no primary is available. The slot counts a connection to it until reported.
    ///
    /// ```
    /// use gomutex::upstream::{Peer, PickError, UpstreamZone};
    /// let zone = UpstreamZone::anonymous(&[Peer::new("a").max_conns(1), Peer::new("b").backup(true)])?;
    /// let first = zone.pick()?;
    /// let second = zone.pick()?; // a is full: the backup
    /// assert_eq!((first.peer(), second.peer()), (0, 1));
    /// zone.set_down(1, true);
    /// assert_eq!(zone.pick().unwrap_err(), PickError::NoLivePeer);
    /// drop(first);
    /// assert_eq!(zone.pick()?.peer(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pick(&self) -> Result<PeerSlot<'_>, PickError> {
        self.pick_untried(&mut Tried::new())
    }

    /// [`pick`](Self::pick) for a retry of a request: skip the peers in `tried`, and add the
    /// one picked.
    ///
    /// ```
    /// use gomutex::upstream::{Peer, PickError, Tried, UpstreamZone};
    /// let zone = UpstreamZone::anonymous(&[Peer::new("a"), Peer::new("b"), Peer::new("c")])?;
    /// let mut tried = Tried::new();
    /// let mut order = Vec::new();
    /// loop {
    ///     match zone.pick_untried(&mut tried) {
    ///         Ok(slot) => { order.push(slot.peer()); slot.failure() } // "connection refused"
    ///         Err(PickError::NoLivePeer) => break, // every peer tried
    ///         Err(e) => return Err(e.into()),
    ///     }
    /// }
    /// assert_eq!(order, [0, 1, 2]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pick_untried(&self, tried: &mut Tried) -> Result<PeerSlot<'_>, PickError> {
        self.pick_at(tried, now_ms())
    }

    pub(crate) fn pick_at(&self, tried: &mut Tried, now: u64) -> Result<PeerSlot<'_>, PickError> {
        let generation = fork_generation();
        let row = self.my_row(generation)?;
        let p = self.parts();
        let mut g = self.locked();
        let epoch = *g;
        let conns = |i: usize| p.conns_of(i);
        // A full peer may be full of a dead process's connections.
        let full = (0..self.peers()).any(|i| rules::full(&self.confs[i], || conns(i)));
        if full && now.saturating_sub(p.header.last_scan_ms.load(Relaxed)) >= SCAN_EVERY_MS {
            p.header.last_scan_ms.store(now, Relaxed);
            p.repair(None, None);
        }
        let peer = self.with_state(epoch, |st| {
            let peer = rules::get_round_robin_peer(&self.confs, st, tried.0, &conns, now)?;
            self.store(epoch.wrapping_add(1), st);
            Some(peer)
        });
        let peer = peer.ok_or(PickError::NoLivePeer)?;
        let c = p.conn(peer, row);
        c.store(c.load(Relaxed).saturating_add(1), Relaxed);
        crash::point(crash::PICK_WRITTEN);
        commit_store(&mut *g, epoch.wrapping_add(1));
        crash::point(crash::PICK_COMMITTED);
        drop(g);
        tried.insert(peer);
        Ok(PeerSlot {
            zone: self,
            peer,
            row,
            generation,
        })
    }

    /// Apply `f` to a copy of the state and commit it if `f` says it changed.
    pub(super) fn update(&self, f: impl FnOnce(&[rules::Conf], &mut [State]) -> bool) {
        let mut g = self.locked();
        let epoch = *g;
        self.with_state(epoch, |st| {
            if f(&self.confs, st) {
                self.store(epoch.wrapping_add(1), st);
                commit_store(&mut *g, epoch.wrapping_add(1));
            }
        });
    }

    /// The zone lock. A holder that died left the state committed or not, never half: there
    /// is nothing to repair.
    pub(super) fn locked(&self) -> ShmMutexGuard<'_, u64> {
        self.lock.lock_or_repair(|_| {})
    }

    /// Where the copy of `epoch` starts.
    pub(super) fn live(&self, epoch: u64) -> usize {
        (epoch & 1) as usize * self.peers()
    }

    /// Run `f` on a copy of the state committed at `epoch` (on the stack for up to 8 peers:
    /// the copy is a good part of a pick's cost).
    fn with_state<R>(&self, epoch: u64, f: impl FnOnce(&mut [State]) -> R) -> R {
        let (p, at, n) = (self.parts(), self.live(epoch), self.peers());
        let load = |st: &mut [State]| {
            for (i, s) in st.iter_mut().enumerate() {
                *s = p.state[at + i].load();
            }
        };
        if n <= 8 {
            let mut st = [State::default(); 8];
            load(&mut st[..n]);
            f(&mut st[..n])
        } else {
            let mut st = vec![State::default(); n];
            load(&mut st);
            f(&mut st)
        }
    }

    /// Write `st` to the copy `epoch` will name (the spare one, before its commit).
    fn store(&self, epoch: u64, st: &[State]) {
        let (p, at) = (self.parts(), self.live(epoch));
        for (i, s) in st.iter().enumerate() {
            p.state[at + i].store(s);
        }
    }

    /// This handle's row in this process, claimed on first use.
    fn my_row(&self, generation: u32) -> Result<usize, PickError> {
        let cached = self.row.load(Relaxed);
        if cached != 0 && (cached >> 32) as u32 == generation {
            return Ok((cached & 0xffff_ffff) as usize - 1);
        }
        self.claim(generation, cached)
    }

    #[cold]
    fn claim(&self, generation: u32, cached: u64) -> Result<usize, PickError> {
        let p = self.parts();
        // A newcomer gives back the rows of dead processes first (and so makes room).
        let g = self.locked();
        p.repair(None, None);
        drop(g);
        let r = p.claim_row().ok_or(PickError::NoProcessSlot {
            processes: p.rows.len() as u32,
        })?;
        let mine = (u64::from(generation) << 32) | (r as u64 + 1);
        match self.row.compare_exchange(cached, mine, SeqCst, SeqCst) {
            Ok(_) => Ok(r),
            Err(_) => {
                // Another thread of this process claimed one first: give ours back, use its.
                let g = self.locked();
                p.free_row(r, seam::self_ident());
                drop(g);
                self.my_row(generation)
            }
        }
    }
}

impl Drop for UpstreamZone {
    fn drop(&mut self) {
        let cached = self.row.load(Relaxed);
        if cached != 0 && (cached >> 32) as u32 == fork_generation() {
            // Every slot borrowed this handle, so all are reported: the row counts nothing
            // (unless a slot was leaked, whose connection is given back here).
            let r = (cached & 0xffff_ffff) as usize - 1;
            let g = self.locked();
            self.parts().free_row(r, seam::self_ident());
            drop(g);
        }
    }
}
