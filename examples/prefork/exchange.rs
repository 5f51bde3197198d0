//! One proxied request's exchange with the backends, event-driven: a peer picked from the zone
//! → a connection to it (a kept one, or a nonblocking connect) → the request written → the
//! answer read → the answer for the client. Each step goes as far as the sockets allow and
//! waits for the worker's epoll (or the exchange's deadline) to go on.
//!
//! The zone's rules: a failure (refused, reset, timed out, a broken answer) is reported and
//! the request tried on the next untried peer, `502` when none is left; a whole answer is a
//! success. The peer's `max_conns` slot is taken at the pick and given back when the attempt
//! ends, or when the exchange is dropped (the client gone, the worker stopping).

use crate::backend::{self, Answer};
use crate::http::Request;
use crate::proxy::Proxy;
use crate::reload::Generation;
use crate::sys::Epoll;
use gomutex::upstream::{PeerSlot, Tried};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::rc::Rc;
use std::time::Instant;

/// A picked peer's `max_conns` slot, with the generation whose zone it was picked from.
struct Lease {
    // Declared before `up`: dropped (given back to the zone) while the zone is alive.
    slot: PeerSlot<'static>,
    up: Rc<Generation>,
}

impl Lease {
    /// Pick the next untried peer of `up`'s zone.
    fn pick(up: &Rc<Generation>, tried: &mut Tried) -> Option<Self> {
        let slot = up.zone.pick_untried(tried).ok()?;
        // SAFETY: the slot borrows the zone inside the `Rc`'s allocation, which does not move
        // and lives as long as an `Rc` to it does; the lease holds one, and its fields drop in
        // declaration order, so the slot is always given back before that `Rc` goes. The slot
        // never leaves the lease with the longer lifetime.
        let slot = unsafe { std::mem::transmute::<PeerSlot<'_>, PeerSlot<'static>>(slot) };
        Some(Self {
            slot,
            up: up.clone(),
        })
    }

    fn peer(&self) -> usize {
        self.slot.peer()
    }

    fn addr(&self) -> SocketAddr {
        self.up.addrs[self.slot.peer()]
    }

    /// Report a failure (a drop is a success).
    fn failure(self) {
        let Self { slot, up } = self;
        slot.failure();
        drop(up);
    }
}

/// The attempt on one peer.
struct Attempt {
    lease: Lease,
    stream: TcpStream,
    /// A kept connection: failing before any byte of the answer, it may have been closed by
    /// the backend while idle, and the request is tried once more on a fresh one, uncounted.
    reused: bool,
    /// Bytes of the request written.
    written: usize,
    /// The answer so far.
    buf: Vec<u8>,
}

impl Attempt {
    /// Write the rest of `raw`, then read: the answer once whole, `Ok(None)` until then.
    fn advance(&mut self, raw: &[u8], head_only: bool) -> io::Result<Option<Answer>> {
        while self.written < raw.len() {
            match self.stream.write(&raw[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let mut chunk = [0u8; 8192];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return backend::parse(&self.buf, head_only, true),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if let Some(a) = backend::parse(&self.buf, head_only, false)? {
                        return Ok(Some(a));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Where an exchange is after a step.
pub enum Step {
    /// Waiting for a backend's socket or the deadline.
    Wait,
    /// Over: the answer for the client.
    Done(Vec<u8>),
}

/// One request's exchange: the generation it started on (its retries pick from the same
/// zone, a reload notwithstanding), the peers tried, the attempt under way.
pub struct Exchange {
    up: Rc<Generation>,
    req: Request,
    raw: Vec<u8>,
    tried: Tried,
    attempt: Option<Attempt>,
    /// When the attempt under way fails for want of progress.
    pub deadline: Instant,
}

impl Exchange {
    /// Start forwarding `req` (`raw`: its bytes) for the client connection `owner` (its
    /// epoll token), on `proxy`'s current generation.
    pub fn start(
        proxy: &mut Proxy,
        ep: &Epoll,
        owner: u64,
        req: &Request,
        raw: &[u8],
    ) -> (Self, Step) {
        let mut ex = Self {
            up: proxy.up.clone(),
            req: req.clone(),
            raw: raw.to_vec(),
            tried: Tried::new(),
            attempt: None,
            deadline: Instant::now(),
        };
        let step = ex.on_ready(proxy, ep, owner);
        (ex, step)
    }

    /// Go on after an event on the backend's socket (or, to start, none).
    pub fn on_ready(&mut self, proxy: &mut Proxy, ep: &Epoll, owner: u64) -> Step {
        loop {
            let Some(at) = &mut self.attempt else {
                if !self.try_next(proxy, ep, owner) {
                    let mut out = Vec::new();
                    backend::bad_gateway(&mut out, &self.req);
                    return Step::Done(out);
                }
                continue;
            };
            let before = at.written + at.buf.len();
            match at.advance(&self.raw, self.req.head) {
                Ok(None) => {
                    if at.written + at.buf.len() > before {
                        proxy.extend(&mut self.deadline, owner);
                    }
                    return Step::Wait;
                }
                Ok(Some(a)) => {
                    let at = self.attempt.take().expect("an attempt under way");
                    let mut out = Vec::new();
                    let body = &at.buf[a.head..a.head + a.body];
                    backend::rewrite(&mut out, &at.buf[..a.head], body, &self.req);
                    if a.keep {
                        proxy.keep(at.lease.addr(), at.stream);
                    }
                    drop(at.lease); // a success
                    return Step::Done(out);
                }
                Err(_) => {
                    let at = self.attempt.take().expect("an attempt under way");
                    if at.reused && at.buf.is_empty() && !self.unavailable(at.lease.peer()) {
                        drop(at.stream);
                        self.connect(proxy, ep, owner, at.lease, false);
                    } else {
                        at.lease.failure();
                    }
                }
            }
        }
    }

    /// Whether the zone skips `peer` for its failures now: a kept connection to it that
    /// failed is then a failure like any other, not retried on a fresh one (the other
    /// exchanges in flight on kept connections to a peer that just died would each connect to
    /// it again after it is marked down).
    fn unavailable(&self, peer: usize) -> bool {
        self.up.zone.diagnostics().peers[peer].unavailable
    }

    /// The deadline passed: the attempt under way is a failure; go on with the next peer.
    pub fn on_timeout(&mut self, proxy: &mut Proxy, ep: &Epoll, owner: u64) -> Step {
        if let Some(at) = self.attempt.take() {
            at.lease.failure();
        }
        self.on_ready(proxy, ep, owner)
    }

    /// Pick the next untried peer and connect to it: `false` when none is left.
    fn try_next(&mut self, proxy: &mut Proxy, ep: &Epoll, owner: u64) -> bool {
        while let Some(lease) = Lease::pick(&self.up, &mut self.tried) {
            if self.connect(proxy, ep, owner, lease, true) {
                return true;
            }
        }
        false
    }

    /// Start an attempt on `lease`'s peer, on a kept connection if `reuse` and there is one:
    /// `false` (the failure reported) if no connection can be made.
    fn connect(
        &mut self,
        proxy: &mut Proxy,
        ep: &Epoll,
        owner: u64,
        lease: Lease,
        reuse: bool,
    ) -> bool {
        match proxy.connection(lease.addr(), reuse, ep, owner) {
            Ok((stream, reused)) => {
                self.deadline = proxy.deadline(owner);
                self.attempt = Some(Attempt {
                    lease,
                    stream,
                    reused,
                    written: 0,
                    buf: Vec::new(),
                });
                true
            }
            Err(_) => {
                lease.failure();
                false
            }
        }
    }
}
