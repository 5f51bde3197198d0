//! The stats: a [`Header`] and one [`Slot`] of counters per worker, placed in the shared
//! [`Mapping`] the master creates before forking (next to the accept lock, see `lock.rs`).
//! Workers update their slot as they go (relaxed atomics), so the counts of a worker killed
//! with SIGKILL survive it; the master reads them when it reaps the worker and at shutdown.

use gomutex::accept::Load;
use gomutex::shm::{Mapping, MappingLayout, ShmError, ShmShared};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering::Relaxed};

/// `Slot::pid` of a worker the master is about to fork: it already counts as a live worker
/// with no connections, so the workers forked before it leave it its share of an early burst.
pub const STARTING: i32 = -1;

/// One worker's counters. 128-byte aligned so two workers never share a cache line.
#[repr(C, align(128))]
#[derive(Default, ShmShared)]
pub struct Slot {
    /// The worker's pid (0: never started, or reaped; [`STARTING`]: about to be forked).
    pub pid: AtomicI32,
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Requests answered.
    pub requests: AtomicU64,
    /// Wake-ups for a listening socket whose first accept found nothing (EAGAIN).
    pub wasted: AtomicU64,
    /// Wake-ups for a listening socket.
    pub accept_wakeups: AtomicU64,
    /// Accept-lock acquisitions.
    pub acquisitions: AtomicU64,
    /// Acquisitions that reported a dead previous owner.
    pub owner_died: AtomicU64,
    /// Event-loop iterations.
    pub iterations: AtomicU64,
    /// Open connections right now: what the other workers' spread rule reads. The master
    /// zeroes it (and the pid) when it reaps the worker, so a dead worker drops out.
    pub live: AtomicU64,
    /// Iterations the spread rule made the worker skip the accept lock.
    pub spread_skips: AtomicU64,
    /// Recent accepts: the count decayed with a half-life of [`RATE_HALF_LIFE`], rounded, as
    /// of the worker's last iteration (so a stale value is only ever too high). The spread
    /// rule's accept-rate input; zeroed with `live` when the worker is reaped.
    pub recent: AtomicU64,
    /// `CLOCK_MONOTONIC` in ms at the start of the worker's last event-loop iteration (0: none
    /// yet). A worker whose heartbeat is older than [`STALE_AFTER_MS`] is left out of the
    /// others' spread rule, so a stopped or hung worker cannot hold them back.
    pub heartbeat_ms: AtomicU64,
    /// Requests `--limit-req` let through.
    pub limit_passed: AtomicU64,
    /// Requests `--limit-req` answered with 503.
    pub limit_rejected: AtomicU64,
    /// The configuration generation the worker serves (`--upstream`: 1; none: 0).
    pub generation: AtomicU64,
}

/// How long a worker may go without starting an event-loop iteration before the others'
/// spread rule stops counting it (stopped with SIGSTOP, stuck in a handler, or idle in
/// `epoll_wait`: leaving an idle worker out only makes the others more willing to accept).
/// Twice nginx's `accept_mutex_delay` (500 ms), the longest a worker polls without the lock.
pub const STALE_AFTER_MS: u64 = 1000;

/// `CLOCK_MONOTONIC` in milliseconds (the same clock in every process of the machine).
pub fn mono_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Half-life of [`Slot::recent`]: long enough to average over many lock turns, short enough
/// that a respawned worker (which starts at 0) catches up within a fraction of a second.
pub const RATE_HALF_LIFE: std::time::Duration = std::time::Duration::from_millis(100);

/// The region's header.
#[repr(C, align(128))]
#[derive(Default, ShmShared)]
pub struct Header {
    /// The test hook (`PREFORK_TEST_HOLD_MS`) fired (it fires once per server).
    pub hook_taken: AtomicU32,
    /// The pid that fired it.
    pub hook_pid: AtomicI32,
    /// The counts of reaped workers, folded in by the master ([`Region::retire`]) before it
    /// respawns their slots, so the `/status` totals never drop.
    pub retired_accepted: AtomicU64,
    pub retired_requests: AtomicU64,
    pub retired_limit_passed: AtomicU64,
    pub retired_limit_rejected: AtomicU64,
    /// `SIGHUP`s whose configuration file was refused (the old one kept).
    pub failed_reloads: AtomicU64,
}

/// A snapshot of one worker's counters.
#[derive(Debug, Clone, Default)]
pub struct WorkerStats {
    pub pid: i32,
    pub slot: usize,
    pub status: String,
    pub accepted: u64,
    pub requests: u64,
    pub wasted: u64,
    pub accept_wakeups: u64,
    pub acquisitions: u64,
    pub owner_died: u64,
    pub live: u64,
    pub spread_skips: u64,
    pub limit_passed: u64,
    pub limit_rejected: u64,
}

impl Slot {
    /// Zero every counter and set the pid (the master, before forking the slot's worker:
    /// [`STARTING`]).
    pub fn reset(&self, pid: i32) {
        for c in [
            &self.accepted,
            &self.requests,
            &self.wasted,
            &self.accept_wakeups,
            &self.acquisitions,
            &self.owner_died,
            &self.iterations,
            &self.live,
            &self.spread_skips,
            &self.recent,
            &self.heartbeat_ms,
            &self.limit_passed,
            &self.limit_rejected,
            &self.generation,
        ] {
            c.store(0, Relaxed);
        }
        self.pid.store(pid, Relaxed);
    }

    /// Read the counters.
    pub fn snapshot(&self, slot: usize, status: &str) -> WorkerStats {
        WorkerStats {
            pid: self.pid.load(Relaxed),
            slot,
            status: status.to_string(),
            accepted: self.accepted.load(Relaxed),
            requests: self.requests.load(Relaxed),
            wasted: self.wasted.load(Relaxed),
            accept_wakeups: self.accept_wakeups.load(Relaxed),
            acquisitions: self.acquisitions.load(Relaxed),
            owner_died: self.owner_died.load(Relaxed),
            live: self.live.load(Relaxed),
            spread_skips: self.spread_skips.load(Relaxed),
            limit_passed: self.limit_passed.load(Relaxed),
            limit_rejected: self.limit_rejected.load(Relaxed),
        }
    }

    /// The master, right after `waitpid` reaped the slot's worker: it no longer counts as a
    /// live worker, nor do its connections (the kernel closed them).
    pub fn retire(&self) {
        self.live.store(0, Relaxed);
        self.recent.store(0, Relaxed);
        self.heartbeat_ms.store(0, Relaxed);
        self.pid.store(0, Relaxed);
    }
}

/// Where the stats are in the mapping ([`Region::place`]).
#[derive(Debug, Clone, Copy)]
pub struct Placed {
    header: usize,
    slots: usize,
    n: usize,
}

/// The stats in the mapping: the [`Header`] and `n` [`Slot`]s.
#[derive(Clone, Copy)]
pub struct Region<'m> {
    header: &'m Header,
    slots: &'m [Slot],
}

impl<'m> Region<'m> {
    /// Place the stats of `slots` workers after what `plan` holds already.
    pub fn place(plan: &mut MappingLayout, slots: usize) -> Placed {
        Placed {
            header: plan.shared::<Header>(),
            slots: plan.shared_slice::<Slot>(slots),
            n: slots,
        }
    }

    /// The stats `place` put in `map`. A fresh anonymous mapping holds zeroes there: no
    /// worker, no counts.
    pub fn new(map: &'m Mapping, at: Placed) -> Result<Self, ShmError> {
        Ok(Self {
            header: map.shared::<Header>(at.header)?,
            slots: map.shared_slice::<Slot>(at.slots, at.n)?,
        })
    }

    /// The header.
    pub fn header(&self) -> &'m Header {
        self.header
    }

    /// The load as worker `i` sees it, with `own` open connections: the sum of the other live
    /// workers' (pid set, heartbeat not older than [`STALE_AFTER_MS`]) counts, how many they
    /// are, the smallest of their counts, and the recent accepts (slot `i`'s own and the
    /// smallest of the others').
    pub fn load(&self, i: usize, own: usize) -> Load {
        let (mut others, mut n, mut least, mut least_recent) = (0u64, 0usize, u64::MAX, u64::MAX);
        let now = mono_ms();
        for (j, s) in self.slots.iter().enumerate() {
            if j == i {
                continue;
            }
            let beat = s.heartbeat_ms.load(Relaxed);
            let stale = beat != 0 && now.saturating_sub(beat) > STALE_AFTER_MS;
            if s.pid.load(Relaxed) != 0 && !stale {
                let live = s.live.load(Relaxed);
                others += live;
                least = least.min(live);
                least_recent = least_recent.min(s.recent.load(Relaxed));
                n += 1;
            }
        }
        let load = Load::new(own, others as usize, n);
        if n == 0 {
            load
        } else {
            let own_recent = self.slot(i).recent.load(Relaxed);
            load.with_least(least as usize)
                .with_recent(own_recent, least_recent)
        }
    }

    /// Every slot.
    pub fn slots(&self) -> &'m [Slot] {
        self.slots
    }

    /// The master, right after `waitpid` reaped slot `i`'s worker: [`Slot::retire`], with the
    /// worker's counts folded into the header's retired totals first (a `/status` read in
    /// between sees them twice for an instant: too high, never too low).
    pub fn retire(&self, i: usize) {
        let (h, s) = (self.header, self.slot(i));
        for (total, c) in [
            (&h.retired_accepted, &s.accepted),
            (&h.retired_requests, &s.requests),
            (&h.retired_limit_passed, &s.limit_passed),
            (&h.retired_limit_rejected, &s.limit_rejected),
        ] {
            total.fetch_add(c.load(Relaxed), Relaxed);
        }
        s.retire();
    }

    /// Slot `i`.
    pub fn slot(&self, i: usize) -> &'m Slot {
        let n = self.slots.len();
        self.slots
            .get(i)
            .unwrap_or_else(|| panic!("slot {i} out of {n}"))
    }
}
