//! `--upstream`: the workers proxy each request to a peer of an upstream zone
//! ([`gomutex::upstream::UpstreamZone`], made by the master before forking, so the weights,
//! failures and `max_conns` hold across the workers), over keep-alive connections to the
//! backends kept per worker.
//!
//! The exchanges are event-driven (`exchange.rs`): the backends' sockets are nonblocking and
//! in the worker's epoll set, so a worker has any number of requests in flight and a slow
//! backend holds up only the requests it answers (as nginx's). A connection refused, a
//! timeout (2 s without progress connecting, writing or reading) or a broken answer is a
//! failure reported to the zone (nginx's `proxy_next_upstream error timeout`), and the
//! request is tried on the next untried peer; with none left the answer is `502`. A kept
//! connection that fails before any byte of its answer is retried once on a fresh one (it may
//! have been closed by the backend while idle), not counted, unless the zone skips the peer
//! by then (the other requests in flight on kept connections to a peer that just died): then
//! it is a failure like any other. Answers with `Content-Length` or ended by the close are
//! forwarded (`backend.rs`); chunked ones are a failure (`502`).

use crate::http::{respond, Admit, Request};
use crate::limit::Limit;
use crate::reload::Generation;
use crate::sys::{self, Epoll};
use gomutex::upstream::Peer;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Parse `host:port[,weight=N][,max_fails=N][,fail_timeout=MS][,max_conns=N][,backup][,down]`.
pub fn parse_upstream(spec: &str) -> Result<(SocketAddr, Peer), String> {
    let mut parts = spec.split(',');
    let addr_s = parts.next().unwrap_or_default();
    let addr = addr_s
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("--upstream: not a HOST:PORT address: {addr_s:?}"))?;
    let mut peer = Peer::new(addr_s);
    for p in parts {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        let num = || {
            v.parse::<u32>()
                .map_err(|_| format!("--upstream: {k}= expects a number, got {v:?}"))
        };
        peer = match k {
            "weight" if num()? >= 1 => peer.weight(num()?),
            "max_fails" => peer.max_fails(num()?),
            "fail_timeout" => peer.fail_timeout(Duration::from_millis(u64::from(num()?))),
            "max_conns" => peer.max_conns(num()?),
            "backup" if v.is_empty() => peer.backup(true),
            "down" if v.is_empty() => peer.down(true),
            _ => return Err(format!("--upstream: unknown or bad parameter {p:?}")),
        };
    }
    Ok((addr, peer))
}

/// Time without progress after which an attempt on a backend fails.
const TIMEOUT: Duration = Duration::from_secs(2);

/// One worker's side of the zone: its current generation of the configuration (the zone and
/// the backends' addresses), its connections to the backends and the exchanges' deadlines.
pub struct Proxy {
    /// The generation new requests go to (an exchange keeps the one it started on).
    pub up: Rc<Generation>,
    /// Idle keep-alive connections, per backend address (in the epoll set, owned by none).
    idle: HashMap<SocketAddr, Vec<TcpStream>>,
    /// Per backend descriptor, the epoll token of the client connection whose exchange uses
    /// it (0: none). A stale entry is harmless: the token's generation tells.
    owners: Vec<u64>,
    /// Deadlines with the client connection's token, in the order set, which is the order of
    /// time (every deadline is `TIMEOUT` after it was set). One no longer current is skipped
    /// when it comes up.
    timers: VecDeque<(Instant, u64)>,
}

impl Proxy {
    pub fn new(up: Rc<Generation>) -> Self {
        Self {
            up,
            idle: HashMap::new(),
            owners: Vec::new(),
            timers: VecDeque::new(),
        }
    }

    /// Switch to generation `up` for the requests from now on; exchanges under way finish on
    /// theirs (each holds an `Rc` of it: the old zone's handle goes with the last). The idle
    /// connections to backends `up` still lists are kept.
    pub fn switch(&mut self, up: Rc<Generation>) {
        self.idle.retain(|addr, _| up.addrs.contains(addr));
        self.up = up;
    }

    /// A connection to `addr` for the exchange of client connection `owner`: a kept one if
    /// `reuse` and there is one (`true`), or a new one under way (`false`), in the epoll set
    /// edge-triggered with the backend token of its descriptor.
    pub fn connection(
        &mut self,
        addr: SocketAddr,
        reuse: bool,
        ep: &Epoll,
        owner: u64,
    ) -> io::Result<(TcpStream, bool)> {
        let kept = reuse
            .then(|| self.idle.get_mut(&addr).and_then(Vec::pop))
            .flatten();
        let (s, reused) = match kept {
            Some(s) => (s, true),
            None => {
                let s = sys::connect(addr)?;
                let _ = s.set_nodelay(true);
                let ev = libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET;
                ep.add(s.as_raw_fd(), ev as u32, backend_token(s.as_raw_fd()))?;
                (s, false)
            }
        };
        let fd = s.as_raw_fd() as usize;
        if self.owners.len() <= fd {
            self.owners.resize(fd + 1, 0);
        }
        self.owners[fd] = owner;
        Ok((s, reused))
    }

    /// Keep connection `s` to `addr` for a later request (if the current generation still
    /// lists `addr`).
    pub fn keep(&mut self, addr: SocketAddr, s: TcpStream) {
        if self.up.addrs.contains(&addr) {
            self.owners[s.as_raw_fd() as usize] = 0;
            self.idle.entry(addr).or_default().push(s);
        }
    }

    /// The client connection whose exchange uses backend descriptor `fd`.
    pub fn owner(&self, fd: RawFd) -> Option<u64> {
        self.owners.get(fd as usize).copied().filter(|&t| t != 0)
    }

    /// A deadline `TIMEOUT` from now for the exchange of `owner`.
    pub fn deadline(&mut self, owner: u64) -> Instant {
        let at = Instant::now() + TIMEOUT;
        self.timers.push_back((at, owner));
        at
    }

    /// Move `deadline` to `TIMEOUT` from now after progress (only once half of it is gone:
    /// one timer per exchange, mostly).
    pub fn extend(&mut self, deadline: &mut Instant, owner: u64) {
        if deadline.saturating_duration_since(Instant::now()) < TIMEOUT / 2 {
            *deadline = self.deadline(owner);
        }
    }

    /// The earliest deadline set (perhaps no longer current).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.front().map(|&(at, _)| at)
    }

    /// The token of a client connection whose deadline (perhaps no longer current) passed.
    pub fn expired(&mut self, now: Instant) -> Option<u64> {
        match self.timers.front() {
            Some(&(at, owner)) if at <= now => {
                self.timers.pop_front();
                Some(owner)
            }
            _ => None,
        }
    }
}

/// Backend descriptor `fd`'s epoll token (above every client token, below the master's).
pub fn backend_token(fd: RawFd) -> u64 {
    BACKEND_TOKENS | fd as u32 as u64
}

/// The backend tokens: this bit, and the descriptor.
pub const BACKEND_TOKENS: u64 = 1 << 62;

/// What a worker does with a request: `--limit-req`'s check, then the answer (`--upstream`'s
/// peer, or `200 ok`).
pub struct Handler<'a> {
    pub limit: Option<Limit<'a>>,
    pub proxy: Option<Proxy>,
}

impl Admit for Handler<'_> {
    fn admit(&mut self, stream: &TcpStream, target: &[u8], headers: &mut String) -> bool {
        self.limit.admit(stream, target, headers)
    }

    /// A proxied answer is the backend's own (`--limit-headers` are not added to it): it is
    /// not ready here, the worker starts the exchange.
    fn answer(&mut self, out: &mut Vec<u8>, req: &Request, headers: &str) -> bool {
        if self.proxy.is_some() {
            return false;
        }
        respond(out, req, headers);
        true
    }
}
