//! nginx's upstream `zone` across worker processes: [`UpstreamZone`], the peers of an
//! upstream with their weights, passive health checks and connection limits in shared memory,
//! so that every process balancing over them follows one smooth weighted round-robin and one
//! view of which peers failed, robust to a process killed at any instruction.
//!
//! (Documented on [`UpstreamZone`]; `examples/upstream.rs` runs it across forked workers, one
//! of them killed holding connections: `cargo run --release --example upstream`.)

mod layout;
mod pick;
mod rows;
mod rules;
#[cfg(test)]
mod tests;

pub use self::layout::{MAX_NAME, MAX_PEERS};
pub use self::pick::{PeerSlot, Tried};

use self::layout::{Header, Parts, Plan, MAGIC, VERSION};
use self::rules::{Conf, State};
use crate::shm::{Mapping, OpenOptions, ShmError, ShmMutex};
use core::fmt;
use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Duration;

/// One peer of an upstream: nginx's `server` directive with its parameters (and nginx's
/// defaults: `weight=1 max_fails=1 fail_timeout=10s`, no `max_conns`).
///
/// ```
/// use gomutex::upstream::Peer;
/// use std::time::Duration;
/// // server 10.0.0.1:8080 weight=5 max_fails=3 fail_timeout=30s max_conns=100;
/// let a = Peer::new("10.0.0.1:8080")
///     .weight(5)
///     .max_fails(3)
///     .fail_timeout(Duration::from_secs(30))
///     .max_conns(100);
/// let spare = Peer::new("10.0.0.9:8080").backup(true);
/// assert_eq!(a.name(), "10.0.0.1:8080");
/// # let _ = spare;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    name: String,
    conf: Conf,
    down: bool,
}

impl Peer {
    /// A peer named `name` (an address, or any label up to [`MAX_NAME`] bytes: the zone keeps
    /// it for [`UpstreamZone::diagnostics`] and for processes that open the zone by name),
    /// with nginx's defaults.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            conf: Conf {
                weight: 1,
                max_fails: 1,
                fail_timeout_ms: 10_000,
                max_conns: 0,
                backup: false,
            },
            down: false,
        }
    }

    /// `weight=`: its share of the picks among the available peers of its tier (at least 1).
    #[must_use]
    pub fn weight(mut self, weight: u32) -> Self {
        self.conf.weight = weight;
        self
    }

    /// `max_fails=`: after this many failures (within `fail_timeout`) the peer is skipped for
    /// `fail_timeout`; 0 never skips it.
    #[must_use]
    pub fn max_fails(mut self, n: u32) -> Self {
        self.conf.max_fails = n;
        self
    }

    /// `fail_timeout=`: the window of `max_fails` and how long a failed peer is skipped
    /// (millisecond resolution; nginx's is the second).
    #[must_use]
    pub fn fail_timeout(mut self, d: Duration) -> Self {
        self.conf.fail_timeout_ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// `max_conns=`: at most this many connections open to the peer at once, over every
    /// process of the zone; 0 (the default) for no limit.
    #[must_use]
    pub fn max_conns(mut self, n: u32) -> Self {
        self.conf.max_conns = n;
        self
    }

    /// `backup`: picked only when every primary peer is unavailable (down, failed or full).
    #[must_use]
    pub fn backup(mut self, backup: bool) -> Self {
        self.conf.backup = backup;
        self
    }

    /// `down`: never picked (until [`UpstreamZone::set_down`] says otherwise).
    #[must_use]
    pub fn down(mut self, down: bool) -> Self {
        self.down = down;
        self
    }

    /// The name given to [`new`](Self::new).
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Sizes fixed when a zone is made (fields may be added: build one with
/// [`UpstreamConfig::new`] and the setters).
///
/// ```
/// use gomutex::upstream::UpstreamConfig;
/// let cfg = UpstreamConfig::new().processes(8);
/// assert_eq!(cfg.processes, 8);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// How many processes may pick at once (each owns a row of connection counts while it
    /// lives or keeps its handle). Default 64; 1 to 4096.
    pub processes: u32,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl UpstreamConfig {
    /// The default: 64 processes.
    pub const fn new() -> Self {
        Self { processes: 64 }
    }

    /// This configuration for `n` processes.
    #[must_use]
    pub const fn processes(self, n: u32) -> Self {
        Self { processes: n }
    }
}

/// Why [`UpstreamZone::pick`] found no peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PickError {
    /// Every peer (primary and backup) is down, skipped for its failures, full, or already
    /// tried: nginx's "no live upstreams" (`NGX_BUSY`).
    NoLivePeer,
    /// Every process row is owned by a live process ([`UpstreamConfig::processes`]).
    NoProcessSlot {
        /// The zone's number of rows.
        processes: u32,
    },
}

impl fmt::Display for PickError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PickError::NoLivePeer => f.write_str("no live upstreams"),
            PickError::NoProcessSlot { processes } => write!(
                f,
                "every one of the upstream zone's {processes} process rows is in use"
            ),
        }
    }
}

impl std::error::Error for PickError {}

/// nginx's upstream zone (`upstream backend { zone backend 64k; server ...; }`) shared by
/// processes: the peers with their weights, passive health checks (`max_fails`,
/// `fail_timeout`), connection limits (`max_conns`), backups and `down`, and nginx's smooth
/// weighted round-robin over them, in one shared mapping. Every process that picks from the
/// zone follows the same sequence (the processes together keep the weights, not each on its
/// own), sees the same failures, and counts its connections against the same limits.
///
/// ```
/// use gomutex::upstream::{Peer, UpstreamZone};
///
/// let zone = UpstreamZone::anonymous(&[
///     Peer::new("a").weight(5),
///     Peer::new("b"),
///     Peer::new("c"),
/// ])?; // before fork(): the children share it
/// let mut seq = String::new();
/// for _ in 0..7 {
///     let slot = zone.pick()?; // counts a connection to the peer until reported
///     seq.push_str(zone.name(slot.peer()));
///     slot.success(); // or slot.failure(): the passive health check
/// }
/// assert_eq!(seq, "aabacaa"); // nginx's smooth weighted round-robin
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # The rules (nginx's)
///
/// From `src/http/ngx_http_upstream_round_robin.c`:
///
/// * **A pick** (`ngx_http_upstream_get_peer`) adds every available peer's effective weight to
///   its current weight, takes the peer with the largest, and subtracts the total of the
///   effective weights from it. A peer is available unless it is `down`, has failed
///   `max_fails` times with its last check within `fail_timeout`, or has `max_conns`
///   connections. Backups are picked only when no primary peer is available
///   (`ngx_http_upstream_get_round_robin_peer`'s `failed:`), and a zone with one primary peer
///   and no backup never skips it for its failures (nginx's `peers->single`).
/// * **A report** (`ngx_http_upstream_free_round_robin_peer`): a failure counts, stamps the
///   peer checked, and lowers its effective weight by `weight / max_fails` (it climbs back by
///   one per pick); a success after a check since the last failure clears the failures. So a
///   failed peer is skipped for `fail_timeout`, then tried once: if that succeeds it is back,
///   if it fails it is skipped again.
/// * **Retries** within one request skip the peers already tried ([`Tried`],
///   [`pick_untried`](Self::pick_untried): nginx's `tried` bitmap).
///
/// # Deaths
///
/// One [`ShmMutex`] guards the state. A pick or a report copies the live state, applies the
/// rule to the copy and commits it by one store of the epoch
/// ([`commit_store`](crate::shm::commit_store)): a process killed under the lock leaves the
/// old state or the new one, never a mix, and the next holder has nothing to repair.
/// Connections are counted per process, in a row the process owns by its identity (pid and
/// start time, judged alive or dead as the locks judge their participants), and a peer's count
/// is the sum of its column: a dead process's row is given back whole, so its connections are
/// returned exactly.
///
/// | a process dies … | it leaves | repaired by |
/// |---|---|---|
/// | mid-pick, before the commit | the old state; its row may count the connection | its row, given back |
/// | after the commit | the pick made (the sequence moved on); a connection nobody uses | its row, given back |
/// | holding connection slots | its row's counts | its row, given back |
/// | mid-report of a failure | the old state: the failure not counted | its row, given back |
/// | giving back another's row | a row half zeroed, still owned by the dead | the next repair zeroes it again |
/// | holding the zone lock | the lock held by a dead owner | the lock's own recovery (`OwnerDied`, nothing to repair) |
///
/// A dead process's row is given back by whoever comes first: a picker that finds a peer
/// full (at most every 10 ms machine-wide), a process taking its first row, [`recover`]
/// (`UpstreamZone::recover`), or a supervisor's [`force_release`](Self::force_release)`(pid)`
/// after `waitpid`. Until then its connections still count against `max_conns` (as a dead
/// owner holds a lock until found).
///
/// [`recover`]: Self::recover
///
/// # Limits
///
/// * Up to [`MAX_PEERS`] (64) peers, names up to [`MAX_NAME`] bytes.
/// * Memory grows with processes × peers, not processes²: one lock region for
///   `processes + 8` participants (about 250 bytes each), 176 bytes per peer, and
///   16 + 4 × peers bytes per process — 21 KB for 64 processes and 3 peers, 227 KiB for 1024
///   ([`required_size`](Self::required_size)).
/// * The peers are fixed when the zone is made (nginx's zone without its API); `down` can be
///   changed ([`set_down`](Self::set_down)).
/// * The shared-memory lock's limits apply: one pid namespace, a stopped process is alive.
/// * A process forked from a picker takes its own row on its first pick; slots it inherited
///   are its parent's (dropping them there does nothing).
pub struct UpstreamZone {
    lock: ShmMutex<u64>,
    /// The parts of `map`, borrowed for as long as `map` lives (see [`UpstreamZone::parts`]).
    parts: Parts<'static>,
    plan: Plan,
    /// The peers' configuration and names (fixed once the zone is published).
    confs: Vec<Conf>,
    names: Vec<String>,
    /// This handle's row: `(fork generation << 32) | (row + 1)`; 0 = none.
    row: AtomicU64,
    // Last: dropped after `lock` (which keeps its own handle on the mapping anyway).
    map: Mapping,
}

// SAFETY: the shared parts are atomics (`Sync`), reached through references into a mapping
// this value keeps alive; everything else is `Send + Sync`.
unsafe impl Send for UpstreamZone {}
// SAFETY: as above.
unsafe impl Sync for UpstreamZone {}

impl fmt::Debug for UpstreamZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamZone")
            .field("peers", &self.plan.peers)
            .field("processes", &self.plan.rows)
            .finish_non_exhaustive()
    }
}

impl UpstreamZone {
    /// The bytes a zone of `peers` peers with `cfg` takes (what [`anonymous_with`] maps, and
    /// a named zone's contents).
    ///
    /// ```
    /// use gomutex::upstream::{UpstreamConfig, UpstreamZone};
    /// let small = UpstreamZone::required_size(3, UpstreamConfig::new().processes(4))?;
    /// let big = UpstreamZone::required_size(3, UpstreamConfig::new())?;
    /// assert!(small < big && big < 32 << 10);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    ///
    /// [`anonymous_with`]: Self::anonymous_with
    pub fn required_size(peers: usize, cfg: UpstreamConfig) -> Result<usize, ShmError> {
        Ok(Plan::new(peers, cfg.processes)?.layout.len())
    }

    /// A zone of `peers` in a new anonymous shared mapping (`mmap(MAP_SHARED |
    /// MAP_ANONYMOUS)`), for up to 64 processes: children made with `fork()` afterwards share
    /// it.
    pub fn anonymous(peers: &[Peer]) -> Result<Self, ShmError> {
        Self::anonymous_with(peers, UpstreamConfig::new())
    }

    /// [`anonymous`](Self::anonymous) with `cfg`'s sizes.
    ///
    /// ```
    /// use gomutex::upstream::{Peer, UpstreamConfig, UpstreamZone};
    /// let zone = UpstreamZone::anonymous_with(&[Peer::new("a")], UpstreamConfig::new().processes(4))?;
    /// assert_eq!(zone.peers(), 1);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn anonymous_with(peers: &[Peer], cfg: UpstreamConfig) -> Result<Self, ShmError> {
        let plan = plan_for(peers, cfg)?;
        let map = Mapping::anonymous(plan.layout.len())?;
        let lock = init(&map, &plan, peers)?;
        Self::wrap(map, plan, lock)
    }

    /// Create the named zone `name` (a named [`Mapping`]: `shm_open(O_CREAT | O_EXCL)`, mode
    /// 0600) for unrelated processes; they [`open`](Self::open) it. Fails with
    /// `Io(AlreadyExists)` if the name exists.
    ///
    /// ```
    /// use gomutex::upstream::{Peer, UpstreamConfig, UpstreamZone};
    /// let name = format!("/gomutex-doc-upstream-{}", std::process::id());
    /// let peers = [Peer::new("10.0.0.1:80").weight(2), Peer::new("10.0.0.2:80")];
    /// let made = UpstreamZone::create(&name, &peers, UpstreamConfig::new())?;
    /// let other = UpstreamZone::open(&name)?; // in another process
    /// gomutex::shm::unlink(&name)?;
    /// let picked: Vec<usize> = (0..3).map(|i| {
    ///     let z = if i % 2 == 0 { &made } else { &other };
    ///     z.pick().unwrap().peer()
    /// }).collect();
    /// assert_eq!(picked, [0, 1, 0]); // one sequence for both
    /// assert_eq!(other.name(1), "10.0.0.2:80");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create(name: &str, peers: &[Peer], cfg: UpstreamConfig) -> Result<Self, ShmError> {
        Self::create_with(name, peers, cfg, OpenOptions::new())
    }

    /// [`create`](Self::create) with the object's permissions from [`OpenOptions::mode`].
    pub fn create_with(
        name: &str,
        peers: &[Peer],
        cfg: UpstreamConfig,
        opts: OpenOptions,
    ) -> Result<Self, ShmError> {
        let plan = plan_for(peers, cfg)?;
        let mut lock = None;
        let map = Mapping::create_with(name, &plan.layout, opts, |map| {
            lock = Some(init(map, &plan, peers)?);
            Ok(())
        })?;
        Self::wrap(map, plan, lock.expect("init ran"))
    }

    /// Open the named zone `name` made by [`create`](Self::create) (in any process), waiting
    /// up to 1 s for its creator; its peers are the creator's.
    pub fn open(name: &str) -> Result<Self, ShmError> {
        Self::open_with(name, OpenOptions::new())
    }

    /// [`open`](Self::open) with explicit [`OpenOptions`].
    pub fn open_with(name: &str, opts: OpenOptions) -> Result<Self, ShmError> {
        Self::attach(Mapping::open_with(name, opts)?)
    }

    /// Open the named zone, or create it with `peers` if it does not exist; `true` if this
    /// call created it. Race-free: exactly one of several concurrent callers creates. An
    /// existing zone with other peers (or another size) is [`ShmError::InvalidConfig`]: as
    /// nginx refuses a zone declared again differently.
    ///
    /// ```
    /// use gomutex::upstream::{Peer, UpstreamConfig, UpstreamZone};
    /// let name = format!("/gomutex-doc-upstream-ooc-{}", std::process::id());
    /// let peers = [Peer::new("a"), Peer::new("b")];
    /// let (_a, created) = UpstreamZone::open_or_create(&name, &peers, UpstreamConfig::new())?;
    /// let (_b, again) = UpstreamZone::open_or_create(&name, &peers, UpstreamConfig::new())?;
    /// assert!(created && !again);
    /// assert!(UpstreamZone::open_or_create(&name, &peers[..1], UpstreamConfig::new()).is_err());
    /// gomutex::shm::unlink(&name)?;
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn open_or_create(
        name: &str,
        peers: &[Peer],
        cfg: UpstreamConfig,
    ) -> Result<(Self, bool), ShmError> {
        let plan = plan_for(peers, cfg)?;
        let mut lock = None;
        let (map, created) = match Mapping::open_or_create(name, &plan.layout, |map| {
            lock = Some(init(map, &plan, peers)?);
            Ok(())
        }) {
            Err(e) if matches!(e.cause(), ShmError::TooSmall { .. }) => {
                return Err(ShmError::InvalidConfig(
                    "the upstream zone exists with other peers or sizes",
                ))
            }
            r => r?,
        };
        if created {
            return Ok((Self::wrap(map, plan, lock.expect("init ran"))?, true));
        }
        let z = Self::attach(map)?;
        let same = z.plan == plan
            && peers.iter().enumerate().all(|(i, p)| {
                z.parts.conf[i].load() == p.conf && z.parts.conf[i].name().as_bytes() == cut(p)
            });
        if !same {
            return Err(ShmError::InvalidConfig(
                "the upstream zone exists with other peers or sizes",
            ));
        }
        Ok((z, false))
    }

    /// A published zone in `map`: its header read and checked, the lock attached.
    fn attach(map: Mapping) -> Result<Self, ShmError> {
        let h = map.shared::<Header>(0)?;
        let magic = h.magic.load(SeqCst);
        if magic != MAGIC {
            return Err(ShmError::BadMagic {
                found: magic,
                expected: MAGIC,
            });
        }
        if h.version.load(Relaxed) != VERSION {
            return Err(ShmError::Corrupt("upstream zone layout version"));
        }
        let plan = Plan::new(h.peers.load(Relaxed) as usize, h.rows.load(Relaxed))
            .map_err(|_| ShmError::Corrupt("upstream zone header"))?;
        if map.len() < plan.layout.len() {
            return Err(ShmError::TooSmall {
                needed: plan.layout.len(),
                actual: map.len(),
            });
        }
        let lock = ShmMutex::<u64>::attach_in(&map, plan.lock)?;
        Self::wrap(map, plan, lock)
    }

    fn wrap(map: Mapping, plan: Plan, lock: ShmMutex<u64>) -> Result<Self, ShmError> {
        let parts = plan.parts(&map)?;
        // SAFETY: the references point into `map`'s memory, which stays mapped at the same
        // address for as long as `map` (kept in the same value, dropped last) lives; they are
        // handed out only by `parts()`, bounded by a borrow of `self`.
        let parts = unsafe { core::mem::transmute::<Parts<'_>, Parts<'static>>(parts) };
        Ok(Self {
            lock,
            confs: parts.conf.iter().map(|c| c.load()).collect(),
            names: parts.conf.iter().map(|c| c.name()).collect(),
            parts,
            plan,
            row: AtomicU64::new(0),
            map,
        })
    }

    /// The zone's shared parts, for as long as `self` is borrowed.
    fn parts(&self) -> Parts<'_> {
        self.parts
    }

    /// The number of peers (backups included); peers are numbered from 0 in the order given.
    pub fn peers(&self) -> usize {
        self.plan.peers
    }

    /// Peer `peer`'s name.
    ///
    /// # Panics
    ///
    /// If `peer` is not below [`peers`](Self::peers).
    pub fn name(&self, peer: usize) -> &str {
        self.names[peer].as_str()
    }

    /// The mapping the zone lives in (to share it another way, or see its size).
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    /// Mark peer `peer` down (never picked) or up again, for every process (nginx's `down`,
    /// changed at run time as nginx's API does). Committed like a pick.
    ///
    /// ```
    /// use gomutex::upstream::{Peer, UpstreamZone};
    /// let zone = UpstreamZone::anonymous(&[Peer::new("a"), Peer::new("b")])?;
    /// zone.set_down(0, true);
    /// assert!((0..4).all(|_| zone.pick().unwrap().peer() == 1));
    /// zone.set_down(0, false);
    /// assert_eq!(zone.diagnostics().peers[0].down, false);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// If `peer` is not below [`peers`](Self::peers).
    pub fn set_down(&self, peer: usize, down: bool) {
        assert!(peer < self.peers(), "no peer {peer}");
        self.update(|_, st| {
            let changed = st[peer].down != down;
            st[peer].down = down;
            changed
        });
    }

    /// Give back now what the process `pid` left, if it is gone: its row's connections (the
    /// count returned) and the zone lock if it died holding it. For a supervisor right after
    /// it reaped `pid` with `waitpid` (as [`ShmMutex::force_unlock`]); harmless for a live pid.
    ///
    /// ```
    /// use gomutex::upstream::{Peer, UpstreamZone};
    /// let zone = UpstreamZone::anonymous(&[Peer::new("a").max_conns(1)])?;
    /// // SAFETY: the child only picks and dies.
    /// let pid = unsafe { libc::fork() };
    /// if pid == 0 {
    ///     std::mem::forget(zone.pick().unwrap()); // holds the one connection...
    ///     unsafe { libc::_exit(0) }; // ...and exits without giving it back
    /// }
    /// unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    /// assert_eq!(zone.diagnostics().peers[0].conns, 1);
    /// assert_eq!(zone.force_release(pid), 1);
    /// assert_eq!(zone.diagnostics().peers[0].conns, 0);
    /// assert!(zone.pick().is_ok());
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn force_release(&self, pid: impl TryInto<u32>) -> u64 {
        let Ok(pid) = pid.try_into() else {
            return 0;
        };
        self.lock.force_unlock(pid);
        let g = self.locked();
        let (_, conns) = self.parts().repair(Some(pid), None);
        drop(g);
        conns
    }

    /// Look for dead processes now and give back their rows (normally done by pickers that
    /// find a peer full, and by newcomers). Returns how many rows were given back.
    pub fn recover(&self) -> usize {
        self.lock.recover();
        let g = self.locked();
        let (rows, _) = self.parts().repair(None, None);
        drop(g);
        rows
    }

    /// A snapshot of every peer's state and the zone's counts, taken under the zone lock.
    ///
    /// ```
    /// use gomutex::upstream::{Peer, UpstreamZone};
    /// use std::time::Duration;
    /// let zone = UpstreamZone::anonymous(&[
    ///     Peer::new("a").max_fails(1).fail_timeout(Duration::from_secs(60)),
    ///     Peer::new("b"),
    /// ])?;
    /// let s = zone.pick()?;
    /// assert_eq!(s.peer(), 0);
    /// s.failure();
    /// let d = zone.diagnostics();
    /// assert_eq!((d.peers[0].fails, d.peers[0].unavailable), (1, true));
    /// assert_eq!(zone.pick()?.peer(), 1); // a is skipped for a minute
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn diagnostics(&self) -> UpstreamDiagnostics {
        self.diagnostics_at(now_ms())
    }

    /// [`diagnostics`](Self::diagnostics) with `unavailable` judged at `now` (ms of the
    /// zone's clock).
    pub(crate) fn diagnostics_at(&self, now: u64) -> UpstreamDiagnostics {
        let p = self.parts();
        let g = self.locked();
        let epoch = *g;
        let live = self.live(epoch);
        let single = rules::single(&self.confs);
        let peers = (0..self.peers())
            .map(|i| {
                let (c, s) = (self.confs[i], p.state[live + i].load());
                PeerStatus {
                    name: self.names[i].clone(),
                    weight: c.weight,
                    max_fails: c.max_fails,
                    fail_timeout: Duration::from_millis(c.fail_timeout_ms),
                    max_conns: c.max_conns,
                    backup: c.backup,
                    down: s.down,
                    current_weight: s.current_weight,
                    effective_weight: s.effective_weight,
                    fails: s.fails,
                    unavailable: rules::failed(&c, &s, now) && !single,
                    conns: p.conns_of(i),
                }
            })
            .collect();
        drop(g);
        UpstreamDiagnostics {
            peers,
            epoch,
            processes: p.rows_in_use(),
            rows_given_back: p.header.repaired.load(Relaxed),
            conns_given_back: p.header.conns_returned.load(Relaxed),
        }
    }
}

/// A snapshot of an [`UpstreamZone`] ([`UpstreamZone::diagnostics`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpstreamDiagnostics {
    /// Every peer, in the zone's order.
    pub peers: Vec<PeerStatus>,
    /// Commits so far (picks and reports that changed the state, `set_down`).
    pub epoch: u64,
    /// Process rows owned now (by live processes, or dead ones not yet found).
    pub processes: u32,
    /// Rows of dead processes given back so far.
    pub rows_given_back: u64,
    /// Connections of dead processes given back so far.
    pub conns_given_back: u64,
}

/// One peer's configuration and state in [`UpstreamDiagnostics`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerStatus {
    /// Its name.
    pub name: String,
    /// `weight=`.
    pub weight: u32,
    /// `max_fails=`.
    pub max_fails: u32,
    /// `fail_timeout=`.
    pub fail_timeout: Duration,
    /// `max_conns=` (0: none).
    pub max_conns: u32,
    /// `backup`.
    pub backup: bool,
    /// `down` (as configured, or as [`UpstreamZone::set_down`] set it).
    pub down: bool,
    /// The smooth round-robin's current weight.
    pub current_weight: i64,
    /// The effective weight (lowered by failures, back by one per pick).
    pub effective_weight: i64,
    /// Failures counted since the last success after a check.
    pub fails: u32,
    /// Skipped for its failures now (`max_fails` reached within `fail_timeout`).
    pub unavailable: bool,
    /// Connections open to it, over every process.
    pub conns: u32,
}

/// `CLOCK_MONOTONIC` in ms (the zone's time: shared by every process of the machine).
fn now_ms() -> u64 {
    crate::shm::seam::mono_ns() / 1_000_000
}

/// The peer's name as stored (cut at [`MAX_NAME`] bytes).
fn cut(p: &Peer) -> &[u8] {
    &p.name.as_bytes()[..p.name.len().min(MAX_NAME)]
}

fn plan_for(peers: &[Peer], cfg: UpstreamConfig) -> Result<Plan, ShmError> {
    if peers.iter().any(|p| p.conf.weight == 0) {
        return Err(ShmError::InvalidConfig(
            "a peer's weight must be at least 1",
        ));
    }
    if peers.iter().all(|p| p.conf.backup) {
        return Err(ShmError::InvalidConfig(
            "an upstream needs a peer that is not a backup",
        ));
    }
    Plan::new(peers.len(), cfg.processes)
}

/// Write a new zone's contents into `map` (fresh: zero-filled): the lock, the peers, both
/// state copies, the header last.
fn init(map: &Mapping, plan: &Plan, peers: &[Peer]) -> Result<ShmMutex<u64>, ShmError> {
    let lock = plan.init_lock(map)?;
    let p = plan.parts(map)?;
    for (i, peer) in peers.iter().enumerate() {
        p.conf[i].store(&peer.conf, cut(peer));
        let st = State::initial(&peer.conf, peer.down);
        p.state[i].store(&st);
        p.state[plan.peers + i].store(&st);
    }
    p.header.version.store(VERSION, Relaxed);
    p.header.peers.store(plan.peers as u32, Relaxed);
    p.header.rows.store(plan.rows as u32, Relaxed);
    p.header.magic.store(MAGIC, SeqCst);
    Ok(lock)
}
