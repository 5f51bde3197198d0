//! A prefork HTTP server in the style of nginx, to see the accept lock work.
//!
//! ```text
//! cargo run --release --example prefork -- [--addr 127.0.0.1:8080] [--workers N]
//!     [--accept mutex|blocking|none|exclusive|reuseport] [--stats-json PATH]
//!     [--upstream SPEC]... [--limit-req RATE ...] [--config FILE]   (all: --help)
//! ```
//!
//! The master binds the listening socket (nonblocking, `SO_REUSEADDR`), creates the shared
//! region (one [`gomutex::shm::Mapping`] laid out by a `MappingLayout`: the accept lock and one
//! stats slot per worker), forks the workers, and then only
//! supervises: it reaps dead workers with `waitpid`, releases the accept lock a dead worker held
//! (`force_unlock(pid)`, as nginx does), respawns them, and on SIGINT/SIGTERM stops them all and
//! prints a table of what each did. Each worker runs an epoll loop answering every HTTP/1.1
//! request with `200 OK` and the body `ok`, except `GET /status`: nginx `stub_status`-like
//! text with the connection and request totals, one line per worker and the accept lock's
//! statistics (`status.rs`).
//!
//! Accept modes (who watches the listening socket):
//!
//! * `mutex` — nginx's `accept_mutex`: the worker holding the lock (taken with `try_lock` once
//!   per loop iteration) is the only one with the socket in its epoll set; the others poll at
//!   most `--accept-delay` (500 ms) before trying again;
//! * `blocking` — the same, but a worker with no open connection sleeps on the lock (Go's
//!   starvation mode hands it over in FIFO order) instead of polling;
//! * `none` — every worker watches the shared socket: every connection wakes them all (the
//!   thundering herd);
//! * `exclusive` — every worker watches it with `EPOLLEXCLUSIVE` (Linux 4.5; nginx's default
//!   since 1.11.3);
//! * `reuseport` — one `SO_REUSEPORT` socket per worker; the kernel spreads connections by hash.
//!
//! In both lock modes the spread rule ([`gomutex::accept::Spread`]; `--no-spread` turns it off)
//! keeps connections even: each worker publishes its open-connection count and a decayed count
//! of its recent accepts in the shared region, a worker more than `--spread-margin` above the
//! mean or the least loaded worker (or more than `--spread-rate-slack` percent above the least
//! recent accepts) skips the lock, and a holder accepts at most `--spread-batch` per turn; a
//! worker without the lock polls at most `--spread-retry` (2 ms) instead of `--accept-delay`.
//!
//! `--limit-req RATE` is nginx's `limit_req ... nodelay` on a [`gomutex::dict::RateLimiter`]:
//! per key (`--limit-key addr|uri`) RATE requests per second and a burst of `--limit-burst`
//! (0), the buckets in a [`gomutex::dict::ShmDict`] of `--limit-zone` bytes that the master
//! creates before forking, so the rate holds across the workers; a request over it gets `503`.
//! (Within the burst requests are served at once: the example has no timers to delay them.)
//!
//! `--upstream HOST:PORT[,weight=N][,max_fails=N][,fail_timeout=MS][,max_conns=N][,backup]
//! [,down]` (repeatable) makes the workers a reverse proxy: each request goes to the next peer
//! of an [`gomutex::upstream::UpstreamZone`] the master creates before forking (nginx's
//! `upstream` with `zone`: the smooth weighted round-robin, failures and `max_conns` shared by
//! all workers), over keep-alive connections to the backends; a failure is reported to the
//! zone and the request tried on the next peer, `502` when none is left (`proxy.rs`). The
//! exchanges are event-driven, in the worker's epoll loop (`exchange.rs`): a worker has any
//! number of requests in flight, and a slow backend holds up only its own. The
//! master gives back the connections of a worker it reaps (`force_release(pid)`). `/status`
//! shows every peer's state. Without `--upstream` every request is answered `200 ok`.
//!
//! `--config FILE` takes the settings of `--upstream` and `--limit-req`, `--limit-burst`,
//! `--limit-key`, `--limit-headers` from FILE instead (not with those flags): one directive
//! a line, `upstream HOST:PORT[,…]`, `limit_req RATE`, `limit_burst N`, `limit_key
//! addr|uri`, `limit_headers`, each parsed by its flag's parser; `#` starts a comment, blank
//! lines are ignored; at least one `upstream`. On `SIGHUP` the master reads it again and
//! publishes it as the next generation (a new upstream zone, the new limits over the same
//! dictionary) in a [`gomutex::shm::ShmSnapshot`]; the workers switch at an idle point of
//! their loop without dropping a connection, and `/status` shows each one's `generation`. A
//! file that does not parse is an error naming its line: at start the server does not start,
//! on a reload the old generation keeps serving. The mechanism, and what a death at each
//! point of a reload leaves: `reload.rs`.
//!
//! With `--limit-headers` every answer the worker makes to a limited request (not a proxied
//! one, which is the backend's) says where its key stands
//! (`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` in seconds, and on a 503
//! `Retry-After`), from [`gomutex::dict::RateLimiter::throttle`].

#[cfg(target_os = "linux")]
mod args;
#[cfg(target_os = "linux")]
mod backend;
#[cfg(target_os = "linux")]
mod exchange;
#[cfg(target_os = "linux")]
mod http;
#[cfg(target_os = "linux")]
mod limit;
#[cfg(target_os = "linux")]
mod lock;
#[cfg(target_os = "linux")]
mod proxy;
#[cfg(target_os = "linux")]
mod reload;
#[cfg(target_os = "linux")]
mod shared;
#[cfg(target_os = "linux")]
mod status;
#[cfg(target_os = "linux")]
mod sys;
#[cfg(target_os = "linux")]
mod worker;

#[cfg(target_os = "linux")]
use args::{parse_args, Args, Mode, USAGE};
#[cfg(target_os = "linux")]
use gomutex::accept::{AcceptLock, Config, ForceUnlock, LockMode};
#[cfg(target_os = "linux")]
use gomutex::{
    dict::{DictConfig, ShmDict},
    shm::{Mapping, MappingLayout},
};
#[cfg(target_os = "linux")]
use lock::SharedLock;
#[cfg(target_os = "linux")]
use shared::{Region, WorkerStats};
#[cfg(target_os = "linux")]
use std::fmt::Write as _;
#[cfg(target_os = "linux")]
use std::io::Write as _;
#[cfg(target_os = "linux")]
use std::net::{SocketAddr, TcpListener};
#[cfg(target_os = "linux")]
use std::os::fd::{AsRawFd, OwnedFd};
#[cfg(target_os = "linux")]
use std::sync::atomic::Ordering::Relaxed;
#[cfg(target_os = "linux")]
use std::time::{Duration, Instant};
#[cfg(target_os = "linux")]
use sys::{Exit, Forked};

/// The example needs Linux (fork, epoll, `SO_REUSEPORT`, `gomutex::shm`); elsewhere it only
/// says so, so that `cargo test` and `cargo check --all-targets` work on every platform.
#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("prefork: this example runs on Linux only");
    std::process::exit(1);
}

#[cfg(target_os = "linux")]
fn main() {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return;
        }
        Err(msg) => {
            eprintln!("prefork: {msg}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(msg) = run(args) {
        eprintln!("prefork: {msg}");
        std::process::exit(1);
    }
}

#[cfg(target_os = "linux")]
/// The master's bookkeeping.
struct Master<'a> {
    args: &'a Args,
    listeners: &'a [TcpListener],
    lock: Option<&'a SharedLock>,
    /// The limiter's dictionary (at offset 0), with `--limit-req` or `--config`.
    dict: Option<&'a Mapping>,
    /// `--upstream`'s zone, or `--config`'s generations.
    upstreams: Option<reload::Reloader>,
    /// `--config`: one eventfd per worker slot, made readable after each reload.
    wakes: Vec<OwnedFd>,
    region: &'a Region<'a>,
    /// Read end of the shutdown pipe (workers watch it).
    pipe_rd: &'a OwnedFd,
    /// Write end (the master closes it to stop the workers; each worker closes its copy).
    pipe_wr: Option<OwnedFd>,
    hold_ms: Option<u64>,
    /// Running worker per slot: (pid, started).
    running: Vec<Option<(i32, Instant)>>,
    /// Workers that ended, with their final counters.
    finished: Vec<WorkerStats>,
    forced_unlocks: u64,
}

#[cfg(target_os = "linux")]
impl Master<'_> {
    fn spawn(&mut self, i: usize) -> Result<(), String> {
        self.region.slot(i).reset(shared::STARTING);
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: the master never starts a thread, so it is single-threaded here.
        match unsafe { sys::fork() }.map_err(|e| format!("fork: {e}"))? {
            Forked::Child => {
                // A panic must not unwind into the master's code in the child: leave with a
                // non-fatal code (the master respawns the worker).
                let code =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.worker_main(i)));
                sys::exit_now(code.unwrap_or(3))
            }
            Forked::Parent(pid) => {
                self.region.slot(i).pid.store(pid, Relaxed);
                self.running[i] = Some((pid, Instant::now()));
                Ok(())
            }
        }
    }

    /// In the forked child: become worker `i`. Returns the exit code (0 = stopped, 1 = failed
    /// while serving, 2 = could not start: fatal, not respawned).
    fn worker_main(&mut self, i: usize) -> i32 {
        let pid = sys::getpid();
        self.region.slot(i).pid.store(pid, Relaxed);
        // Only the master handles SIGINT (a terminal's ^C reaches the whole process group):
        // ignore it before unblocking what the master blocked.
        sys::ignore_signal(libc::SIGINT, true);
        sys::ignore_signal(libc::SIGPIPE, true);
        // A hang-up of the terminal, or a SIGHUP meant for the master: not a worker's to act on.
        sys::ignore_signal(libc::SIGHUP, true);
        let _ = sys::block_signals(&sys::master_signals(), false);
        // Our copy of the write end must go, or closing the master's would not reach us.
        drop(self.pipe_wr.take());
        let listeners = if self.args.mode == Mode::Reuseport {
            vec![self.listeners[i].as_raw_fd()]
        } else {
            vec![self.listeners[0].as_raw_fd()]
        };
        let (current, snapshot) = match self.upstreams.take() {
            Some(u) => {
                let (current, snapshot) = u.into_worker();
                (Some(current), snapshot)
            }
            None => (None, None),
        };
        let generation = current.as_ref().map_or(0, |c| c.generation);
        let limits = current.as_ref().map_or(self.args.limits, |c| c.limits);
        let limit = match self.dict {
            Some(dict) => match limit::Limit::new(dict, &limits, self.region.slot(i)) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("prefork: worker {pid}: {e}");
                    return 2;
                }
            },
            None => None,
        };
        let config = Config::nginx()
            .with_delay(self.args.delay)
            .with_spread(self.args.spread)
            .with_mode(if self.args.mode == Mode::Blocking {
                LockMode::Blocking
            } else {
                LockMode::TryLock
            });
        let w = worker::Worker {
            mode: self.args.mode,
            listeners,
            lock: self.lock.map(|l| AcceptLock::new(l.handle(), config)),
            slot: self.region.slot(i),
            region: self.region,
            index: i,
            header: self.region.header(),
            shutdown: self.pipe_rd.as_raw_fd(),
            connections: self.args.connections,
            multi_accept: self.args.multi_accept,
            hold_ms: self.hold_ms,
            shared_lock: self.lock,
            limit,
            // The current generation, inherited from the master.
            proxy: current.map(proxy::Proxy::new),
            config: snapshot.map(|s| (s, generation, self.wakes[i].as_raw_fd())),
            dict: self.dict,
        };
        match w.run() {
            Ok(()) => 0,
            Err((e, fatal)) => {
                eprintln!("prefork: worker {pid}: {e}");
                if fatal {
                    2
                } else {
                    1
                }
            }
        }
    }

    /// Reap every dead child: release the accept lock it may hold, record its counters, and
    /// respawn it unless `respawn` is false or it exited with the fatal code 2.
    fn reap(&mut self, respawn: bool) -> Result<(), String> {
        while let Some((pid, exit)) = sys::reap_any() {
            let Some(i) = self
                .running
                .iter()
                .position(|r| matches!(r, Some((p, _)) if *p == pid))
            else {
                continue;
            };
            let (_, started) = self.running[i].take().expect("running");
            if self.lock.is_some_and(|l| l.force_unlock(pid)) {
                self.forced_unlocks += 1;
                eprintln!(
                    "prefork: worker {pid} died holding the accept lock ({exit}); released it"
                );
            }
            // The connections it had open to the backends: given back at once, in every
            // generation it may have used.
            if let Some(u) = &self.upstreams {
                let _ = u.force_release(pid);
            }
            let abnormal = exit != Exit::Code(0) || respawn;
            self.finished
                .push(self.region.slot(i).snapshot(i, &exit.to_string()));
            // Its connections died with it: out of the other workers' spread rule (its counts
            // go on in the `/status` totals).
            self.region.retire(i);
            if !respawn {
                continue;
            }
            if exit == Exit::Code(2) {
                eprintln!("prefork: worker {pid} failed ({exit}); not respawning it");
                continue;
            }
            if abnormal {
                eprintln!("prefork: worker {pid} ended ({exit}); respawning");
            }
            if started.elapsed() < Duration::from_secs(1) {
                // Crash loop guard.
                std::thread::sleep(Duration::from_millis(100));
            }
            self.spawn(i)?;
        }
        Ok(())
    }

    /// `SIGHUP`: read `--config`'s file again; publish it and wake the workers, or keep the
    /// old configuration and say why.
    fn reload(&mut self) {
        let Some(u) = &mut self.upstreams else {
            eprintln!("prefork: SIGHUP: no --config file to reload");
            return;
        };
        match u.reload() {
            Ok(g) => {
                eprintln!("prefork: reloaded the configuration: generation {g}");
                for w in &self.wakes {
                    sys::notify(w.as_raw_fd());
                }
            }
            Err(e) => {
                self.region.header().failed_reloads.fetch_add(1, Relaxed);
                let g = u.current().generation;
                eprintln!("prefork: reload failed: {e}; keeping generation {g}");
            }
        }
    }

    /// Drop the generations no running worker uses any more (a worker being started, at
    /// generation 0 until it runs, keeps them all).
    fn retire_generations(&mut self) {
        let Some(u) = &mut self.upstreams else { return };
        let oldest = self
            .region
            .slots()
            .iter()
            .filter(|s| s.pid.load(Relaxed) != 0)
            .map(|s| s.generation.load(Relaxed))
            .min()
            .unwrap_or(0);
        u.retire_below(oldest);
    }

    /// Close the pipe, give the workers 3 s to stop, then SIGKILL what is left.
    fn shutdown(&mut self) {
        drop(self.pipe_wr.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let _ = self.reap(false);
            if self.running.iter().all(Option::is_none) {
                return;
            }
            if Instant::now() > deadline {
                for &(pid, _) in self.running.iter().flatten() {
                    eprintln!("prefork: worker {pid} did not stop in time; killing it");
                    sys::kill(pid, libc::SIGKILL);
                }
                std::thread::sleep(Duration::from_millis(50));
                let _ = self.reap(false);
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[cfg(target_os = "linux")]
fn bind_all(args: &Args) -> Result<Vec<TcpListener>, String> {
    let fail = |addr: SocketAddr, e: std::io::Error| format!("cannot listen on {addr}: {e}");
    let reuseport = args.mode == Mode::Reuseport;
    let first = sys::listen(args.addr, reuseport).map_err(|e| fail(args.addr, e))?;
    let mut all = vec![first];
    if reuseport {
        // The first bind resolved port 0; the others join its SO_REUSEPORT group.
        let addr = all[0].local_addr().map_err(|e| fail(args.addr, e))?;
        for _ in 1..args.workers {
            all.push(sys::listen(addr, true).map_err(|e| fail(addr, e))?);
        }
    }
    Ok(all)
}

#[cfg(target_os = "linux")]
fn run(args: Args) -> Result<(), String> {
    let listeners = bind_all(&args)?;
    let local = listeners[0]
        .local_addr()
        .map_err(|e| format!("getsockname: {e}"))?;
    let hold_ms = match std::env::var("PREFORK_TEST_HOLD_MS") {
        Ok(v) => Some(
            v.parse::<u64>()
                .map_err(|_| format!("PREFORK_TEST_HOLD_MS: not a number: {v:?}"))?,
        ),
        Err(_) => None,
    };
    // One shared mapping: the accept lock (lock modes), then the stats.
    let lock_error = |e| format!("cannot create the accept lock: {e}");
    let mut plan = MappingLayout::new();
    let lock_at = if args.mode.uses_lock() {
        Some(SharedLock::place(&mut plan, args.workers).map_err(lock_error)?)
    } else {
        None
    };
    let stats_at = Region::place(&mut plan, args.workers);
    let map = Mapping::anonymous(plan.len()).map_err(|e| format!("mmap: {e}"))?;
    let lock = match lock_at {
        Some(at) => Some(SharedLock::new(&map, at, args.workers).map_err(lock_error)?),
        None => None,
    };
    let region = Region::new(&map, stats_at).map_err(|e| format!("cannot place the stats: {e}"))?;
    // The limiter's dictionary: each worker makes its limiter over it, with the rate of its
    // generation.
    let dict = if args.limits.rate.is_some() || args.config.is_some() {
        let limit_error = |e| format!("cannot create the --limit-req zone: {e}");
        // Every worker a participant of the zone's lock, respawned ones too.
        let lock = gomutex::shm::Config::new().participants((args.workers as u32 * 2).max(64));
        let cfg = DictConfig::new().lock(lock);
        let size = ShmDict::required_size(args.limit_zone, cfg).map_err(limit_error)?;
        let map = Mapping::anonymous(size).map_err(limit_error)?;
        let made = ShmDict::init_in(&map, 0, args.limit_zone, cfg).map_err(limit_error)?;
        Some((map, made))
    } else {
        None
    };
    // A row per worker in each zone, respawned ones too.
    let zone_cfg =
        gomutex::upstream::UpstreamConfig::new().processes((args.workers as u32 * 2).max(64));
    let upstreams = match &args.config {
        Some(path) => Some(reload::Reloader::from_file(path.clone(), zone_cfg)?),
        None if args.upstreams.is_empty() => None,
        None => Some(reload::Reloader::fixed(
            &args.upstreams,
            args.limits,
            zone_cfg,
        )?),
    };
    let wakes = if args.config.is_some() {
        (0..args.workers)
            .map(|_| sys::eventfd())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("eventfd: {e}"))?
    } else {
        Vec::new()
    };
    let signals = sys::master_signals();
    sys::block_signals(&signals, true).map_err(|e| format!("sigprocmask: {e}"))?;
    let (rd, wr) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;

    println!(
        "prefork: listening on http://{local} ({} workers, accept {})",
        args.workers,
        args.mode.name()
    );
    let started = Instant::now();
    let mut m = Master {
        args: &args,
        listeners: &listeners,
        lock: lock.as_ref(),
        dict: dict.as_ref().map(|d| &d.0),
        upstreams,
        wakes,
        region: &region,
        pipe_rd: &rd,
        pipe_wr: Some(wr),
        hold_ms,
        running: vec![None; args.workers],
        finished: Vec::new(),
        forced_unlocks: 0,
    };
    let mut result = Ok(());
    // Every worker counts for the spread rule from the start, not only once it is forked.
    for i in 0..args.workers {
        region.slot(i).reset(shared::STARTING);
    }
    for i in 0..args.workers {
        if let Err(e) = m.spawn(i) {
            result = Err(e);
            break;
        }
    }
    while result.is_ok() {
        match sys::wait_signal(&signals, Duration::from_secs(1)) {
            Some(libc::SIGINT) | Some(libc::SIGTERM) => break,
            Some(libc::SIGHUP) => m.reload(),
            _ => result = m.reap(true),
        }
        m.retire_generations();
        if m.running.iter().all(Option::is_none) {
            result = Err("every worker failed; giving up".into());
        }
    }
    m.shutdown();
    let report = Report::new(&args, &m.finished, m.forced_unlocks, started.elapsed());
    print!("{}", report.table());
    let _ = std::io::stdout().flush();
    if let Some(path) = &args.stats_json {
        std::fs::write(path, report.json())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    result
}

#[cfg(target_os = "linux")]
/// The final stats.
struct Report<'a> {
    args: &'a Args,
    workers: Vec<WorkerStats>,
    total: WorkerStats,
    forced_unlocks: u64,
    elapsed: Duration,
    /// min/max of connections accepted per slot (a respawned worker continues its slot).
    share: f64,
}

#[cfg(target_os = "linux")]
impl<'a> Report<'a> {
    fn new(
        args: &'a Args,
        finished: &[WorkerStats],
        forced_unlocks: u64,
        elapsed: Duration,
    ) -> Self {
        let mut workers = finished.to_vec();
        workers.sort_by_key(|w| w.slot);
        let mut total = WorkerStats::default();
        let mut per_slot = vec![0u64; args.workers];
        for w in &workers {
            total.accepted += w.accepted;
            total.requests += w.requests;
            total.wasted += w.wasted;
            total.accept_wakeups += w.accept_wakeups;
            total.acquisitions += w.acquisitions;
            total.owner_died += w.owner_died;
            total.live += w.live;
            total.spread_skips += w.spread_skips;
            total.limit_passed += w.limit_passed;
            total.limit_rejected += w.limit_rejected;
            per_slot[w.slot] += w.accepted;
        }
        let (min, max) = (
            per_slot.iter().min().copied().unwrap_or(0),
            per_slot.iter().max().copied().unwrap_or(0),
        );
        let share = if max == 0 {
            1.0
        } else {
            min as f64 / max as f64
        };
        Self {
            args,
            workers,
            total,
            forced_unlocks,
            elapsed,
            share,
        }
    }

    fn wasted_per_1000(&self) -> f64 {
        if self.total.accepted == 0 {
            0.0
        } else {
            self.total.wasted as f64 * 1000.0 / self.total.accepted as f64
        }
    }

    fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "prefork: accept {}, {} workers, ran {:.1} s",
            self.args.mode.name(),
            self.args.workers,
            self.elapsed.as_secs_f64()
        );
        let _ = writeln!(
            s,
            "{:>8} {:>4} {:>10} {:>10} {:>10} {:>8} {:>12} {:>10} {:>10} {:>10}",
            "pid",
            "slot",
            "status",
            "accepted",
            "requests",
            "wasted",
            "acquisitions",
            "owner_died",
            "limit_ok",
            "limit_503"
        );
        for w in self.workers.iter().chain(std::iter::once(&self.total)) {
            let (pid, slot) = if std::ptr::eq(w, &self.total) {
                ("total".to_string(), String::new())
            } else {
                (w.pid.to_string(), w.slot.to_string())
            };
            let _ = writeln!(
                s,
                "{:>8} {:>4} {:>10} {:>10} {:>10} {:>8} {:>12} {:>10} {:>10} {:>10}",
                pid,
                slot,
                w.status,
                w.accepted,
                w.requests,
                w.wasted,
                w.acquisitions,
                w.owner_died,
                w.limit_passed,
                w.limit_rejected
            );
        }
        let _ = writeln!(
            s,
            "connection share (min/max per slot): {:.2}; wasted wake-ups per 1000 connections: {:.1}; \
             accept locks force-unlocked by the master: {}",
            self.share,
            self.wasted_per_1000(),
            self.forced_unlocks
        );
        s
    }

    fn json(&self) -> String {
        let counters = |w: &WorkerStats| {
            format!(
                "\"accepted\": {}, \"requests\": {}, \"wasted_wakeups\": {}, \"accept_wakeups\": {}, \
                 \"lock_acquisitions\": {}, \"owner_died\": {}, \"live\": {}, \"spread_skips\": {}, \
                 \"limit_passed\": {}, \"limit_rejected\": {}",
                w.accepted,
                w.requests,
                w.wasted,
                w.accept_wakeups,
                w.acquisitions,
                w.owner_died,
                w.live,
                w.spread_skips,
                w.limit_passed,
                w.limit_rejected
            )
        };
        let mut s = String::new();
        let _ = writeln!(s, "{{");
        let _ = writeln!(s, "  \"mode\": \"{}\",", self.args.mode.name());
        let _ = writeln!(s, "  \"workers\": {},", self.args.workers);
        let _ = writeln!(s, "  \"elapsed_s\": {:.3},", self.elapsed.as_secs_f64());
        let _ = writeln!(s, "  \"per_worker\": [");
        for (k, w) in self.workers.iter().enumerate() {
            let comma = if k + 1 < self.workers.len() { "," } else { "" };
            let _ = writeln!(
                s,
                "    {{\"pid\": {}, \"slot\": {}, \"status\": \"{}\", {}}}{comma}",
                w.pid,
                w.slot,
                w.status,
                counters(w)
            );
        }
        let _ = writeln!(s, "  ],");
        let _ = writeln!(
            s,
            "  \"totals\": {{{}, \"forced_unlocks\": {}, \"share_min_max\": {:.3}, \"wasted_per_1000\": {:.2}}}",
            counters(&self.total),
            self.forced_unlocks,
            self.share,
            self.wasted_per_1000()
        );
        let _ = writeln!(s, "}}");
        s
    }
}
