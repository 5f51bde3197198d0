//! `--upstream`: the workers proxy each request to a peer of an upstream zone
//! ([`gomutex::upstream::UpstreamZone`], made by the master before forking, so the weights,
//! failures and `max_conns` hold across the workers), over keep-alive connections to the
//! backends kept per worker.
//!
//! The exchange with a backend is blocking (with timeouts), inside the worker's event loop:
//! simple, and enough to put the example in front of real backends, but a slow backend holds
//! up the worker's other connections (nginx's is event-driven). A connection refused, a
//! timeout or a broken answer is a failure reported to the zone (nginx's `proxy_next_upstream
//! error timeout`), and the request is tried on the next untried peer; with none left the
//! answer is `502`. A kept connection that fails before any byte of its answer is retried
//! once on a fresh one (it may have been closed by the backend while idle), not counted.
//! Answers with `Content-Length` or ended by the close are forwarded; chunked ones are a
//! failure (`502`).

use crate::http::{connection, respond, Admit, Request};
use crate::limit::Limit;
use crate::reload::Generation;
use gomutex::upstream::{Peer, PickError, Tried};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::rc::Rc;
use std::time::Duration;

/// Connect, read and write timeout of a backend exchange.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Longest answer head read from a backend.
const MAX_HEAD: usize = 16 * 1024;

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

/// One worker's side of the zone: its generation of the configuration (the zone and the
/// backends' addresses) and its idle connections to the backends.
pub struct Proxy {
    pub up: Rc<Generation>,
    /// Idle keep-alive connections, per peer.
    pub idle: Vec<Vec<TcpStream>>,
}

impl Proxy {
    pub fn new(up: Rc<Generation>) -> Self {
        let idle = up.addrs.iter().map(|_| Vec::new()).collect();
        Self { up, idle }
    }

    /// Switch to generation `up` (no request is in flight: each is proxied whole within one
    /// call of [`forward`](Self::forward)); the old zone's handle is dropped with the last
    /// `Rc`, and the idle connections to backends `up` still lists are kept.
    pub fn switch(&mut self, up: Rc<Generation>) {
        let mut idle: Vec<Vec<TcpStream>> = up.addrs.iter().map(|_| Vec::new()).collect();
        for (old, conns) in self.up.addrs.iter().zip(self.idle.drain(..)) {
            if let Some(p) = up.addrs.iter().position(|a| a == old) {
                idle[p].extend(conns);
            }
        }
        *self = Self { up, idle };
    }

    /// Append the answer to `req` (`raw`: its bytes) from a peer of the zone, or a `502`.
    fn forward(&mut self, out: &mut Vec<u8>, req: &Request, raw: &[u8]) {
        let mut tried = Tried::new();
        loop {
            let zone = &self.up.zone;
            let slot = match zone.pick_untried(&mut tried) {
                Ok(s) => s,
                Err(PickError::NoLivePeer) | Err(_) => return bad_gateway(out, req),
            };
            let p = slot.peer();
            let addr = self.up.addrs[p];
            match exchange(&mut self.idle[p], addr, raw, req.head) {
                Ok((head, body)) => {
                    slot.success();
                    return rewrite(out, &head, &body, req);
                }
                Err(_) => slot.failure(),
            }
        }
    }
}

/// Send `raw` to the peer at `addr` and read its answer (head, body), on one of its `idle`
/// connections if there is one (kept again once its answer was read whole, unless the
/// backend closes it).
fn exchange(
    idle: &mut Vec<TcpStream>,
    addr: SocketAddr,
    raw: &[u8],
    head_only: bool,
) -> io::Result<(Vec<u8>, Vec<u8>)> {
    if let Some(mut s) = idle.pop() {
        if let Ok((head, body, keep)) = round_trip(&mut s, raw, head_only) {
            if keep {
                idle.push(s);
            }
            return Ok((head, body));
        }
    }
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    s.set_read_timeout(Some(TIMEOUT))?;
    s.set_write_timeout(Some(TIMEOUT))?;
    let _ = s.set_nodelay(true);
    let (head, body, keep) = round_trip(&mut s, raw, head_only)?;
    if keep {
        idle.push(s);
    }
    Ok((head, body))
}

/// Write the request, read the answer: (head, body, keep the connection).
fn round_trip(
    s: &mut TcpStream,
    raw: &[u8],
    head_only: bool,
) -> io::Result<(Vec<u8>, Vec<u8>, bool)> {
    s.write_all(raw)?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(io::ErrorKind::InvalidData.into());
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| io::ErrorKind::InvalidData)?;
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or(io::ErrorKind::InvalidData)?;
    let (mut len, mut close, mut chunked) = (None, head.starts_with("HTTP/1.0"), false);
    for line in head.split("\r\n").skip(1) {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        if k.eq_ignore_ascii_case("content-length") {
            len = Some(v.parse::<usize>().map_err(|_| io::ErrorKind::InvalidData)?);
        } else if k.eq_ignore_ascii_case("connection") {
            close = v.eq_ignore_ascii_case("close");
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        }
    }
    if chunked {
        return Err(io::ErrorKind::Unsupported.into());
    }
    let mut body = buf[end..].to_vec();
    let no_body = head_only || status == 204 || status == 304 || (100..200).contains(&status);
    if no_body {
        body.clear();
    } else if let Some(len) = len {
        while body.len() < len {
            let n = s.read(&mut chunk)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(len);
    } else {
        // Ended by the close.
        close = true;
        loop {
            let n = s.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    Ok((buf[..end].to_vec(), body, !close))
}

/// The backend's answer for the client: its status line and headers but its own
/// `Connection`, `Keep-Alive` and `Content-Length`, which are the client connection's.
fn rewrite(out: &mut Vec<u8>, head: &[u8], body: &[u8], req: &Request) {
    let head = String::from_utf8_lossy(head);
    for (i, line) in head.split("\r\n").filter(|l| !l.is_empty()).enumerate() {
        let name = line.split(':').next().unwrap_or("");
        let hop = ["connection", "keep-alive", "content-length"]
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h));
        if i == 0 || !hop {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    let conn = connection(req);
    let _ = write!(
        out,
        "Content-Length: {}\r\nConnection: {conn}\r\n\r\n",
        body.len()
    );
    if !req.head {
        out.extend_from_slice(body);
    }
}

fn bad_gateway(out: &mut Vec<u8>, req: &Request) {
    let conn = connection(req);
    let _ = write!(
        out,
        "HTTP/1.1 502 Bad Gateway\r\nServer: gomutex-prefork\r\nContent-Length: 0\r\nConnection: {conn}\r\n\r\n"
    );
}

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

    /// A proxied answer is the backend's own: `--limit-headers` are not added to it.
    fn answer(&mut self, out: &mut Vec<u8>, req: &Request, raw: &[u8], headers: &str) {
        match &mut self.proxy {
            Some(p) => p.forward(out, req, raw),
            None => respond(out, req, headers),
        }
    }
}
