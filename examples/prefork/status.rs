//! The `GET /status` page: nginx's `stub_status` text (active connections; accepts, handled,
//! requests), then one line per worker and the accept lock's statistics
//! ([`gomutex::shm::ShmMutex::stats`]), each a `name value` list that a script splits on
//! spaces:
//!
//! ```text
//! Active connections: 2
//! server accepts handled requests
//!  14 14 37
//! worker 0 pid 4242 accepted 8 requests 20 active 1 generation 2
//! worker 1 pid 4243 accepted 6 requests 17 active 1 generation 2
//! accept_lock acquisitions 120 contended 3 slept 2 total_wait_ns 51200 worst_wait_ns 20480 starvation_entries 0 owner_deaths 0 owner_died_reported 0 recoveries 0
//! limit_req passed 30 rejected 7
//! config generation 2 failed_reloads 0
//! upstream 127.0.0.1:9001 weight 5 conns 1 fails 0 unavailable 0 down 0 backup 0 effective_weight 5
//! ```
//!
//! A worker being started shows `pid 0`. The totals include reaped workers (the master folds their counts into the header before it
//! respawns the slot); the worker lines are the running workers. Every accepted connection is
//! served, so `handled` equals `accepts` (nginx's differ when it runs out of connections).
//! The `accept_lock` line is there in the lock modes, the `limit_req` line with `--limit-req`,
//! an `upstream` line per peer with `--upstream` or `--config` (the state of the zone of the
//! answering worker's generation, read under its lock), the `config` line with `--config`
//! (the generation the master published last, and the reloads it refused). A worker's
//! `generation` is the configuration it serves (0: none, without `--upstream`/`--config`).

use crate::reload::Generation;
use crate::shared::{Region, STARTING};
use gomutex::shm::LockStats;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

/// The page, read from the shared region (no lock taken: each count is a relaxed load).
pub fn render(
    region: &Region,
    lock: Option<LockStats>,
    limited: bool,
    upstream: Option<&Generation>,
    published: Option<u64>,
) -> String {
    let h = region.header();
    let mut active = 0;
    let mut accepted = h.retired_accepted.load(Relaxed);
    let mut requests = h.retired_requests.load(Relaxed);
    let mut passed = h.retired_limit_passed.load(Relaxed);
    let mut rejected = h.retired_limit_rejected.load(Relaxed);
    let mut rows = String::new();
    for (i, s) in region.slots().iter().enumerate() {
        let pid = match s.pid.load(Relaxed) {
            0 => continue, // never started, or reaped (its counts are in the header's)
            STARTING => 0, // being forked: `pid 0`, no counts yet
            pid => pid,
        };
        let (a, r, live, g) = (
            s.accepted.load(Relaxed),
            s.requests.load(Relaxed),
            s.live.load(Relaxed),
            s.generation.load(Relaxed),
        );
        active += live;
        accepted += a;
        requests += r;
        passed += s.limit_passed.load(Relaxed);
        rejected += s.limit_rejected.load(Relaxed);
        let _ = writeln!(
            rows,
            "worker {i} pid {pid} accepted {a} requests {r} active {live} generation {g}"
        );
    }
    let mut out = format!(
        "Active connections: {active}\nserver accepts handled requests\n {accepted} {accepted} {requests}\n{rows}"
    );
    if let Some(s) = lock {
        let _ = writeln!(
            out,
            "accept_lock acquisitions {} contended {} slept {} total_wait_ns {} worst_wait_ns {} \
             starvation_entries {} owner_deaths {} owner_died_reported {} recoveries {}",
            s.acquisitions,
            s.contended,
            s.slept,
            s.total_wait_ns,
            s.worst_wait_ns,
            s.starvation_entries,
            s.owner_deaths,
            s.owner_died_reported,
            s.recoveries
        );
    }
    if limited {
        let _ = writeln!(out, "limit_req passed {passed} rejected {rejected}");
    }
    if let Some(g) = published {
        let failed = h.failed_reloads.load(Relaxed);
        let _ = writeln!(out, "config generation {g} failed_reloads {failed}");
    }
    if let Some(up) = upstream {
        for p in up.zone.diagnostics().peers {
            let _ = writeln!(
                out,
                "upstream {} weight {} conns {} fails {} unavailable {} down {} backup {} \
                 effective_weight {}",
                p.name,
                p.weight,
                p.conns,
                p.fails,
                u8::from(p.unavailable),
                u8::from(p.down),
                u8::from(p.backup),
                p.effective_weight
            );
        }
    }
    out
}
