//! A worker: one epoll loop serving HTTP on the listening socket(s) it was given, following
//! the accept mode, and (`--upstream`) driving the exchanges with the backends, whose sockets
//! are in the same epoll set.

use crate::exchange::{Exchange, Step};
use crate::http::{Conn, Next};
use crate::limit::Limit;
use crate::lock::SharedLock;
use crate::proxy::{Handler, Proxy, BACKEND_TOKENS};
use crate::reload::Generation;
use crate::shared::{mono_ms, Header, Region, Slot, RATE_HALF_LIFE};
use crate::sys::{self, Epoll};
use crate::Mode;
use gomutex::accept::{AcceptLock, AcceptMutex};
use gomutex::shm::{Mapping, ShmSnapshot};
use std::cell::RefCell;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

const TOKEN_SHUTDOWN: u64 = u64::MAX;
/// The master's wake-up after a reload (above every connection and backend token, below the
/// listen ones).
const TOKEN_RELOAD: u64 = 1 << 63;
/// Listening socket `i` has token `TOKEN_LISTEN - i`.
const TOKEN_LISTEN: u64 = u64::MAX - 1;
const MAX_LISTENERS: u64 = 1 << 16;

/// Connections idle this long are closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often idle connections are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Everything a worker needs.
pub struct Worker<'a, L: AcceptMutex> {
    pub mode: Mode,
    /// This worker's listening sockets (the shared one, or its own `SO_REUSEPORT` one).
    pub listeners: Vec<RawFd>,
    /// The accept lock (`mutex` and `blocking` modes).
    pub lock: Option<AcceptLock<L>>,
    pub slot: &'a Slot,
    /// All the slots (the other workers' live counts, for the spread rule) and our index.
    pub region: &'a Region<'a>,
    pub index: usize,
    pub header: &'a Header,
    /// Read end of the master's pipe: readable (EOF) when the master wants us to stop.
    pub shutdown: RawFd,
    /// nginx's `worker_connections`.
    pub connections: usize,
    /// Accept every pending connection per wake-up (nginx's `multi_accept on`), else one.
    pub multi_accept: bool,
    /// Test hook: hold the accept lock this long, once per server.
    pub hold_ms: Option<u64>,
    /// The accept lock itself (lock modes), for the `/status` page's lock figures.
    pub shared_lock: Option<&'a SharedLock>,
    /// `--limit-req` (or `--config`'s `limit_req`): the generation the worker starts with.
    pub limit: Option<Limit<'a>>,
    /// `--upstream` or `--config`: the generation the worker starts with.
    pub proxy: Option<Proxy>,
    /// `--config`: the published configuration, the snapshot version `proxy` is, and the
    /// eventfd the master makes readable after each publish.
    pub config: Option<(ShmSnapshot, u64, RawFd)>,
    /// The limiter's dictionary, for the limiter of each new generation.
    pub dict: Option<&'a Mapping>,
}

struct Entry {
    conn: Conn,
    /// The events the connection is in the epoll set for.
    interest: u32,
    /// The exchange of its waiting request with the backends (`--upstream`).
    exchange: Option<Exchange>,
}

/// What the request processing of one loop iteration needs besides the connections.
struct Serving<'a, 'h> {
    ep: &'a Epoll,
    handler: &'a mut Handler<'h>,
    served: &'a AtomicU64,
    status: &'a dyn Fn() -> String,
}

fn token(fd: RawFd, gen: u32) -> u64 {
    ((gen as u64) << 32) | fd as u32 as u64
}

impl<L: AcceptMutex> Worker<'_, L> {
    fn listen_events(&self) -> u32 {
        let mut ev = libc::EPOLLIN as u32;
        if self.mode == Mode::Exclusive {
            ev |= libc::EPOLLEXCLUSIVE as u32;
        }
        ev
    }

    fn set_armed(&self, ep: &Epoll, arm: bool) -> io::Result<()> {
        for (i, &l) in self.listeners.iter().enumerate() {
            if arm {
                ep.add(l, self.listen_events(), TOKEN_LISTEN - i as u64)?;
            } else {
                ep.delete(l)?;
            }
        }
        Ok(())
    }

    /// Run until the master closes the pipe. An error while setting up is fatal (`Err(e,
    /// true)`: the master does not respawn the worker); a later one is not.
    pub fn run(self) -> Result<(), (io::Error, bool)> {
        assert!((self.listeners.len() as u64) < MAX_LISTENERS);
        let ep = Epoll::new().map_err(|e| (e, true))?;
        ep.add(self.shutdown, libc::EPOLLIN as u32, TOKEN_SHUTDOWN)
            .map_err(|e| (e, true))?;
        if let Some((_, _, wake)) = &self.config {
            ep.add(*wake, libc::EPOLLIN as u32, TOKEN_RELOAD)
                .map_err(|e| (e, true))?;
        }
        self.serve(ep).map_err(|e| (e, false))
    }

    fn serve(mut self, ep: Epoll) -> io::Result<()> {
        let pid = sys::getpid();
        let mut conns: Vec<Option<Entry>> = Vec::new();
        let mut live = 0usize;
        let mut gen = 0u32;
        let mut armed = false;
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut ready = Vec::with_capacity(256);
        let mut fresh: Vec<OwnedFd> = Vec::new();
        let mut next_sweep = Instant::now() + SWEEP_EVERY;
        let mut stop = false;
        let mut limit = Handler {
            limit: self.limit.take(),
            proxy: self.proxy.take(),
        };
        // The generation `/status` shows: the one requests go to.
        let shown: RefCell<Option<Rc<Generation>>> =
            RefCell::new(limit.proxy.as_ref().map(|p| p.up.clone()));
        let shown = &shown;
        let first = limit.proxy.as_ref().map_or(0, |p| p.up.generation);
        self.slot.generation.store(first, Relaxed);
        let (snapshot, mut seen, wake) = match self.config.take() {
            Some((s, seen, wake)) => (Some(s), seen, Some(wake)),
            None => (None, 0, None),
        };
        let snapshot = snapshot.as_ref();
        let total = self.connections;
        // Recent accepts (exponentially decayed), published in `slot.recent`.
        let mut recent = 0f64;
        let mut decayed_at = Instant::now();
        let (region, shared_lock, limited) = (self.region, self.shared_lock, limit.limit.is_some());
        let status = move || {
            crate::status::render(
                region,
                shared_lock.map(|l| l.stats()),
                shown
                    .borrow()
                    .as_ref()
                    .map_or(limited, |g| g.limits.rate.is_some()),
                shown.borrow().as_deref(),
                snapshot.map(ShmSnapshot::version),
            )
        };

        while !stop {
            self.slot.iterations.fetch_add(1, Relaxed);
            self.slot.heartbeat_ms.store(mono_ms(), Relaxed);
            let now = Instant::now();
            let halves =
                now.duration_since(decayed_at).as_secs_f64() / RATE_HALF_LIFE.as_secs_f64();
            recent *= (-halves).exp2();
            decayed_at = now;
            self.slot.recent.store(recent.round() as u64, Relaxed);
            let (want, cap, batch) = match &mut self.lock {
                Some(al) => {
                    let load = self.region.load(self.index, live);
                    let d = al.begin_iteration_loaded(live == 0, load);
                    let s = al.stats();
                    self.slot.acquisitions.store(s.acquisitions, Relaxed);
                    self.slot.owner_died.store(s.owner_died, Relaxed);
                    self.slot.spread_skips.store(s.spread_skips, Relaxed);
                    (d.armed, d.poll_timeout, d.batch)
                }
                None => (live < total, None, None),
            };
            // The spread rule's batch caps the accept phase; without it, one connection per
            // wake-up or (multi_accept) all that are pending.
            let batch = batch.unwrap_or(if self.multi_accept { usize::MAX } else { 1 });
            if let (Some(ms), Some(al)) = (self.hold_ms, &self.lock) {
                if al.holds_lock()
                    && self
                        .header
                        .hook_taken
                        .compare_exchange(0, 1, Relaxed, Relaxed)
                        .is_ok()
                {
                    self.header.hook_pid.store(pid, Relaxed);
                    eprintln!("prefork: test hook: worker {pid} holds the accept lock for {ms} ms");
                    std::thread::sleep(Duration::from_millis(ms));
                }
            }
            if want != armed {
                self.set_armed(&ep, want)?;
                armed = want;
            }
            let now = Instant::now();
            let mut own = next_sweep.saturating_duration_since(now);
            if let Some(at) = limit.proxy.as_ref().and_then(Proxy::next_deadline) {
                own = own.min(at.saturating_duration_since(now));
            }
            let timeout = cap.map_or(own, |c| c.min(own));
            let n = ep.wait(&mut events, Some(timeout))?;

            let mut listen_ready = false;
            ready.clear();
            for ev in &events[..n] {
                let t = ev.u64; // a copy: epoll_event is packed
                match t {
                    TOKEN_SHUTDOWN => stop = true,
                    TOKEN_RELOAD => wake.into_iter().for_each(sys::drain),
                    t if t & BACKEND_TOKENS != 0 && t < TOKEN_RELOAD => ready.push(t),
                    t if t > TOKEN_LISTEN - MAX_LISTENERS && t <= TOKEN_LISTEN => {
                        listen_ready = true
                    }
                    t => ready.push(t),
                }
            }

            // An idle point: no request is being read or answered. A new configuration takes
            // effect here, for the connections accepted below and every request read below;
            // the exchanges under way finish on the generation they started on.
            if let Some(snap) = snapshot {
                if let Some((version, next)) = crate::reload::take(snap, seen) {
                    seen = version;
                    let next = next.and_then(|up| {
                        let l = crate::limit::Limit::new(
                            self.dict.expect("--config makes the dictionary"),
                            &up.limits,
                            self.slot,
                        )?;
                        Ok((up, l))
                    });
                    match next {
                        Ok((up, l)) => {
                            limit.limit = l;
                            let up = Rc::new(up);
                            self.slot.generation.store(up.generation, Relaxed);
                            *shown.borrow_mut() = Some(up.clone());
                            match &mut limit.proxy {
                                Some(p) => p.switch(up),
                                None => limit.proxy = Some(Proxy::new(up)),
                            }
                        }
                        Err(e) => eprintln!("prefork: worker {pid}: reload: {e}"),
                    }
                }
            }

            // Accept phase (under the lock in the lock modes).
            if listen_ready && armed && !stop {
                self.slot.accept_wakeups.fetch_add(1, Relaxed);
                let mut got = 0u64;
                'all: for &l in &self.listeners {
                    loop {
                        if live + fresh.len() >= total {
                            break 'all;
                        }
                        match sys::accept(l) {
                            Ok(fd) => {
                                got += 1;
                                fresh.push(fd);
                                if let Some(al) = &mut self.lock {
                                    al.accepted(total - live - fresh.len(), total);
                                }
                                if fresh.len() >= batch {
                                    break 'all;
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e)
                                if e.kind() == io::ErrorKind::Interrupted
                                    || e.raw_os_error() == Some(libc::ECONNABORTED) =>
                            {
                                continue
                            }
                            Err(e) => {
                                // EMFILE/ENFILE and friends: give the others a chance.
                                eprintln!("prefork: worker {pid}: accept: {e}");
                                break 'all;
                            }
                        }
                    }
                }
                if got == 0 {
                    self.slot.wasted.fetch_add(1, Relaxed);
                }
                self.slot.accepted.fetch_add(got, Relaxed);
                // Published before the lock is released, so the next holder counts them.
                self.slot.live.store((live + fresh.len()) as u64, Relaxed);
                recent += got as f64;
                self.slot.recent.store(recent.round() as u64, Relaxed);
            }
            if let Some(al) = &mut self.lock {
                al.end_accept_phase();
            }
            if stop {
                break;
            }

            // Request processing, with the lock released.
            let mut sv = Serving {
                ep: &ep,
                handler: &mut limit,
                served: &self.slot.requests,
                status: &status,
            };
            for &t in &ready {
                if t & BACKEND_TOKENS != 0 {
                    let owner = sv.handler.proxy.as_ref().and_then(|p| p.owner(t as RawFd));
                    if let Some(owner) = owner {
                        sv.on_exchange(&mut conns, &mut live, owner, false)?;
                    }
                    continue;
                }
                let fd = t as u32 as RawFd;
                let g = (t >> 32) as u32;
                let next = match conns.get_mut(fd as usize) {
                    Some(Some(e)) if e.conn.gen == g => {
                        e.conn.on_ready(sv.served, sv.handler, sv.status)
                    }
                    _ => continue,
                };
                sv.settle(&mut conns, &mut live, fd, next)?;
            }
            for fd in fresh.drain(..) {
                gen = (gen + 1) & 0x3fff_ffff; // keeps conn tokens below the backend tokens
                let raw = fd.as_raw_fd();
                let mut conn = Conn::new(TcpStream::from(fd), gen);
                ep.add(raw, libc::EPOLLIN as u32, token(raw, gen))?;
                // Optimistic read: the request has often arrived with the connection.
                let next = conn.on_ready(sv.served, sv.handler, sv.status);
                if conns.len() <= raw as usize {
                    conns.resize_with(raw as usize + 1, || None);
                }
                conns[raw as usize] = Some(Entry {
                    conn,
                    interest: libc::EPOLLIN as u32,
                    exchange: None,
                });
                live += 1;
                sv.settle(&mut conns, &mut live, raw, next)?;
            }
            // The exchanges whose deadline passed.
            let now = Instant::now();
            while let Some(owner) = sv.handler.proxy.as_mut().and_then(|p| p.expired(now)) {
                sv.on_exchange(&mut conns, &mut live, owner, true)?;
            }

            let now = Instant::now();
            if now >= next_sweep {
                next_sweep = now + SWEEP_EVERY;
                for fd in 0..conns.len() {
                    if matches!(&conns[fd], Some(e) if now.duration_since(e.conn.last) > IDLE_TIMEOUT)
                    {
                        apply(&ep, &mut conns, &mut live, fd as RawFd, Next::Close)?;
                    }
                }
            }
            self.slot.live.store(live as u64, Relaxed);
        }
        if let Some(al) = &mut self.lock {
            al.disarm();
        }
        Ok(())
    }
}

impl Serving<'_, '_> {
    /// Act on what connection `fd` wants next: start the exchange of a request that waits
    /// for its answer (which may be ready at once), then set the connection's events.
    fn settle(
        &mut self,
        conns: &mut [Option<Entry>],
        live: &mut usize,
        fd: RawFd,
        mut next: Next,
    ) -> io::Result<()> {
        while let Some(Some(e)) = conns.get_mut(fd as usize) {
            if next != Next::Wait || e.exchange.is_some() {
                break;
            }
            let proxy = self
                .handler
                .proxy
                .as_mut()
                .expect("only proxied requests wait");
            let owner = token(fd, e.conn.gen);
            let (req, raw) = e.conn.waiting().expect("a waiting request");
            match Exchange::start(proxy, self.ep, owner, req, raw) {
                (ex, Step::Wait) => e.exchange = Some(ex),
                (_, Step::Done(out)) => {
                    next = e
                        .conn
                        .complete(&out, self.served, self.handler, self.status);
                }
            }
        }
        apply(self.ep, conns, live, fd, next)
    }

    /// Go on with the exchange of client connection `owner` (its epoll token) after an event
    /// on its backend's socket, or (`timeout`) once its deadline may have passed.
    fn on_exchange(
        &mut self,
        conns: &mut [Option<Entry>],
        live: &mut usize,
        owner: u64,
        timeout: bool,
    ) -> io::Result<()> {
        let fd = owner as u32 as RawFd;
        let e = match conns.get_mut(fd as usize) {
            Some(Some(e)) if e.conn.gen == (owner >> 32) as u32 => e,
            _ => return Ok(()),
        };
        let (Some(ex), Some(proxy)) = (&mut e.exchange, &mut self.handler.proxy) else {
            return Ok(());
        };
        let step = if !timeout {
            ex.on_ready(proxy, self.ep, owner)
        } else if ex.deadline <= Instant::now() {
            ex.on_timeout(proxy, self.ep, owner)
        } else {
            return Ok(()); // a deadline since moved
        };
        let Step::Done(out) = step else {
            return Ok(());
        };
        e.exchange = None;
        let next = e
            .conn
            .complete(&out, self.served, self.handler, self.status);
        self.settle(conns, live, fd, next)
    }
}

/// Act on what a connection wants next: the events it waits for, or its end (which ends an
/// exchange under way: the backend connection closed, the peer's slot given back).
fn apply(
    ep: &Epoll,
    conns: &mut [Option<Entry>],
    live: &mut usize,
    fd: RawFd,
    next: Next,
) -> io::Result<()> {
    let slot = &mut conns[fd as usize];
    let Some(e) = slot else { return Ok(()) };
    let interest = match next {
        Next::Read | Next::Wait => libc::EPOLLIN as u32,
        Next::Write => libc::EPOLLOUT as u32,
        Next::Hold => 0,
        Next::Close => {
            // Closing the last descriptor of the socket removes it from the epoll set.
            *slot = None;
            *live -= 1;
            return Ok(());
        }
    };
    if interest != e.interest {
        ep.modify(fd, interest, token(fd, e.conn.gen))?;
        e.interest = interest;
    }
    Ok(())
}
