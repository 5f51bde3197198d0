//! A minimal HTTP/1.1 server side: parse a request head (and skip a `Content-Length` body),
//! answer `200 OK` with the body `ok` (or, for `/status`, the status page), honour keep-alive
//! and `Connection: close`.
//! Requests may arrive in pieces; pipelined requests are answered in order. A request whose
//! answer is not ready at once (a proxied one) waits on its connection: the ones behind it wait
//! in the buffer until [`Conn::complete`] gives its answer.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// Longest request head accepted.
pub const MAX_HEAD: usize = 8192;

/// The response body (nginx's `return 200 "ok"` in the comparison sends the same).
const BODY: &str = "ok";

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Bytes of the buffer the request used (head and body).
    pub len: usize,
    /// Keep the connection open after answering.
    pub keep_alive: bool,
    /// `HEAD`: answer without a body.
    pub head: bool,
    /// The request target's bytes in the buffer (`start..end`, the path and query).
    pub target: (usize, usize),
}

/// Why a request could not be parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum Bad {
    /// Malformed: 400.
    Request,
    /// Head longer than [`MAX_HEAD`]: 431.
    TooLarge,
    /// Not HTTP/1.x: 505.
    Version,
    /// `Transfer-Encoding` bodies are not supported: 501.
    Chunked,
}

/// Parse the request at the start of `buf`: `Ok(None)` if it is not complete yet.
pub fn parse(buf: &[u8]) -> Result<Option<Request>, Bad> {
    let Some(end) = find_head_end(buf) else {
        return if buf.len() > MAX_HEAD {
            Err(Bad::TooLarge)
        } else {
            Ok(None)
        };
    };
    if end > MAX_HEAD {
        return Err(Bad::TooLarge);
    }
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| Bad::Request)?;
    let mut lines = head.split("\r\n").filter(|l| !l.is_empty());
    let line = lines.next().ok_or(Bad::Request)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Bad::Request);
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) || target.is_empty() {
        return Err(Bad::Request);
    }
    let default_keep_alive = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        v if v.starts_with("HTTP/") => return Err(Bad::Version),
        _ => return Err(Bad::Request),
    };
    let (mut close, mut keep) = (false, false);
    let mut body = 0usize;
    for l in lines {
        let (name, value) = l.split_once(':').ok_or(Bad::Request)?;
        if name.is_empty() || name.ends_with(' ') || name.ends_with('\t') {
            return Err(Bad::Request);
        }
        let value = value.trim();
        if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                close |= token.eq_ignore_ascii_case("close");
                keep |= token.eq_ignore_ascii_case("keep-alive");
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            body = value.parse().map_err(|_| Bad::Request)?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Bad::Chunked);
        }
    }
    // `close` wins; `keep-alive` matters for HTTP/1.0.
    let keep_alive = !close && (keep || default_keep_alive);
    let len = end + 4 + body;
    if buf.len() < len {
        return Ok(None);
    }
    let start = method.len() + 1;
    Ok(Some(Request {
        len,
        keep_alive,
        head: method == "HEAD",
        target: (start, start + target.len()),
    }))
}

/// Index of the `\r\n\r\n` that ends the head.
fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// Append a `503 Service Temporarily Unavailable` (nginx's `limit_req_status` default, with
/// its reason phrase) with the header lines `extra` (each ending in CRLF), keeping the
/// connection as the request asked.
pub fn respond_limited(out: &mut Vec<u8>, req: &Request, extra: &str) {
    let _ = write!(
        out,
        "HTTP/1.1 503 Service Temporarily Unavailable\r\nServer: gomutex-prefork\r\n{extra}Content-Length: 0\r\nConnection: {}\r\n\r\n",
        connection(req)
    );
}

/// The `Connection` header's value for the answer to `req`.
/// The `Connection` header's value for the answer to `req`.
pub fn connection(req: &Request) -> &'static str {
    if req.keep_alive {
        "keep-alive"
    } else {
        "close"
    }
}

/// Whether to serve a request: given the connection's stream and the request's target,
/// `true` to answer 200, `false` for 503; header lines for the answer (each ending in CRLF)
/// may be appended to `headers`.
pub trait Admit {
    fn admit(&mut self, stream: &TcpStream, target: &[u8], headers: &mut String) -> bool;

    /// Append the answer to an admitted request (`headers`: what `admit` appended), `200 ok`
    /// unless the handler has another: `false` if that one is not ready yet (`--upstream`'s
    /// proxy), and the request waits on its connection.
    fn answer(&mut self, out: &mut Vec<u8>, req: &Request, headers: &str) -> bool {
        respond(out, req, headers);
        true
    }
}

/// Append the response to `out`, with the header lines `extra`.
pub fn respond(out: &mut Vec<u8>, req: &Request, extra: &str) {
    respond_text(out, req, extra, BODY);
}

/// Append a `200 OK` answer to `req` with the text `body` and the header lines `extra`
/// (each ending in CRLF).
fn respond_text(out: &mut Vec<u8>, req: &Request, extra: &str, body: &str) {
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\nServer: gomutex-prefork\r\nContent-Type: text/plain\r\n{extra}Content-Length: {}\r\nConnection: {}\r\n\r\n",
        body.len(),
        connection(req)
    );
    if !req.head {
        out.extend_from_slice(body.as_bytes());
    }
}

/// The path of the status page (nginx's `stub_status` location).
pub const STATUS_PATH: &[u8] = b"/status";

/// Whether the request target (path and query) asks for the status page.
pub fn is_status(target: &[u8]) -> bool {
    target.split(|&b| b == b'?').next() == Some(STATUS_PATH)
}

/// Append the status page `body` as the response to `req` (never cached: it changes).
pub fn respond_status(out: &mut Vec<u8>, req: &Request, body: &str) {
    respond_text(out, req, "Cache-Control: no-cache\r\n", body);
}

/// Append an error response (the connection closes after it).
pub fn respond_error(out: &mut Vec<u8>, bad: &Bad) {
    let status = match bad {
        Bad::Request => "400 Bad Request",
        Bad::TooLarge => "431 Request Header Fields Too Large",
        Bad::Version => "505 HTTP Version Not Supported",
        Bad::Chunked => "501 Not Implemented",
    };
    let _ = write!(
        out,
        "HTTP/1.1 {status}\r\nServer: gomutex-prefork\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
}

/// What the event loop does with a connection after an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Wait until readable.
    Read,
    /// Wait until writable (a response is partly written).
    Write,
    /// A request waits for its answer ([`Conn::waiting`]): read only to buffer what follows
    /// and to see the client leave.
    Wait,
    /// A request waits for its answer and the buffer is full: do not read.
    Hold,
    /// Close it.
    Close,
}

/// One client connection.
pub struct Conn {
    pub stream: TcpStream,
    /// Bytes read and not yet consumed by a request.
    rbuf: Vec<u8>,
    /// Response bytes not yet written, from `wpos`.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Close once `wbuf` is written.
    closing: bool,
    /// Last activity, for the idle timeout.
    pub last: Instant,
    /// Generation: tells this connection apart from an earlier one on the same fd.
    pub gen: u32,
    /// The request whose answer is awaited (its bytes at the start of the buffer).
    waiting: Option<Request>,
}

impl Conn {
    pub fn new(stream: TcpStream, gen: u32) -> Self {
        Self {
            stream,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            wpos: 0,
            closing: false,
            last: Instant::now(),
            gen,
            waiting: None,
        }
    }

    /// The request whose answer is awaited, and its bytes (head and body).
    pub fn waiting(&self) -> Option<(&Request, &[u8])> {
        let req = self.waiting.as_ref()?;
        Some((req, &self.rbuf[..req.len]))
    }

    /// The answer `out` to the waiting request is ready: send it (counted in `served` first)
    /// and go on with the requests behind it, as [`on_ready`](Self::on_ready).
    pub fn complete(
        &mut self,
        out: &[u8],
        served: &AtomicU64,
        admit: &mut impl Admit,
        status: &dyn Fn() -> String,
    ) -> Next {
        let req = self.waiting.take().expect("a waiting request");
        self.rbuf.drain(..req.len);
        self.wbuf.extend_from_slice(out);
        self.closing |= !req.keep_alive;
        served.fetch_add(1, Relaxed);
        self.on_ready(served, admit, status)
    }

    /// Handle readiness: read what is there, answer every complete request, write. Adds the
    /// number of requests answered to `served` before their answers are sent, so that a client
    /// that has its answers sees them counted on the status page. `/status` is answered with
    /// `status()`, not subject to `admit` (as nginx's `stub_status` location is usually left
    /// unlimited).
    pub fn on_ready(
        &mut self,
        served: &AtomicU64,
        admit: &mut impl Admit,
        status: &dyn Fn() -> String,
    ) -> Next {
        self.last = Instant::now();
        if self.waiting.is_some() {
            return self.buffer();
        }
        if self.wpos < self.wbuf.len() {
            match self.flush() {
                Ok(true) => {}
                Ok(false) => return Next::Write,
                Err(_) => return Next::Close,
            }
            if self.closing {
                return Next::Close;
            }
        }
        let mut chunk = [0u8; 4096];
        let mut eof = false;
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    self.rbuf.extend_from_slice(&chunk[..n]);
                    if n < chunk.len() || self.rbuf.len() > MAX_HEAD * 2 {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        // Answer every complete request in the buffer.
        let (mut used, mut answered) = (0, 0);
        while !self.closing {
            match parse(&self.rbuf[used..]) {
                Ok(Some(req)) => {
                    let (a, b) = req.target;
                    let target = &self.rbuf[used + a..used + b];
                    let mut headers = String::new();
                    if is_status(target) {
                        respond_status(&mut self.wbuf, &req, &status());
                    } else if admit.admit(&self.stream, target, &mut headers) {
                        if !admit.answer(&mut self.wbuf, &req, &headers) {
                            self.waiting = Some(req);
                            break;
                        }
                    } else {
                        respond_limited(&mut self.wbuf, &req, &headers);
                    }
                    answered += 1;
                    used += req.len;
                    if !req.keep_alive {
                        self.closing = true;
                    }
                }
                Ok(None) => break,
                Err(bad) => {
                    respond_error(&mut self.wbuf, &bad);
                    self.closing = true;
                }
            }
        }
        self.rbuf.drain(..used);
        if answered > 0 {
            served.fetch_add(answered, Relaxed);
        }
        if self.waiting.is_some() {
            // The answers before it go with its own.
            return if eof { Next::Close } else { Next::Wait };
        }
        if self.wpos < self.wbuf.len() {
            match self.flush() {
                Ok(true) => {}
                Ok(false) => return Next::Write,
                Err(_) => return Next::Close,
            }
        }
        if self.closing || eof {
            return Next::Close;
        }
        Next::Read
    }

    /// While a request waits: buffer what the client sends (up to a limit), see it leave.
    fn buffer(&mut self) -> Next {
        let mut chunk = [0u8; 4096];
        while self.rbuf.len() <= MAX_HEAD * 2 {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Next::Close,
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Next::Wait,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        Next::Hold
    }

    /// Write pending response bytes: `Ok(true)` when all are written.
    fn flush(&mut self) -> io::Result<bool> {
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_wrk_request() {
        let r = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";
        assert_eq!(
            parse(r),
            Ok(Some(Request {
                len: r.len(),
                keep_alive: true,
                head: false,
                target: (4, 5),
            }))
        );
        let r = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        assert!(!parse(r).unwrap().unwrap().keep_alive);
        let r = b"GET / HTTP/1.0\r\n\r\n";
        assert!(!parse(r).unwrap().unwrap().keep_alive);
        let r = b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
        assert!(parse(r).unwrap().unwrap().keep_alive);
    }

    #[test]
    fn partial_and_body() {
        let full = b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
        for cut in 0..full.len() {
            assert_eq!(parse(&full[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse(full).unwrap().unwrap().len, full.len());
    }

    #[test]
    fn errors() {
        assert_eq!(parse(b"GARBAGE\r\n\r\n"), Err(Bad::Request));
        assert_eq!(parse(b"GET / HTTP/2.0\r\n\r\n"), Err(Bad::Version));
        assert_eq!(
            parse(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(Bad::Chunked)
        );
        assert_eq!(parse(&vec![b'a'; MAX_HEAD + 1]), Err(Bad::TooLarge));
    }

    #[test]
    fn status_path() {
        assert!(is_status(b"/status"));
        assert!(is_status(b"/status?x=1"));
        assert!(!is_status(b"/status/x"));
        assert!(!is_status(b"/"));
    }
}
