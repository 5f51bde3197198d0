//! A backend's answer: parsed as its bytes arrive (whole or not yet), and rewritten for the
//! client.

use crate::http::{connection, Request};
use std::io::{self, Write};

/// Longest answer head read from a backend.
const MAX_HEAD: usize = 16 * 1024;

/// A whole answer in the bytes read from a backend.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    /// Bytes of its head (status line and headers, with the blank line).
    pub head: usize,
    /// Bytes of its body, after the head.
    pub body: usize,
    /// The backend keeps the connection open after it.
    pub keep: bool,
}

/// The answer at the start of `buf` (to a `HEAD` request if `head_only`), `eof` if the backend
/// closed the connection after those bytes: `Ok(None)` if more is to come. Answers with
/// `Content-Length`, without a body, or ended by the close are understood; a chunked one is
/// `Unsupported`, a broken or cut one an error.
pub fn parse(buf: &[u8], head_only: bool, eof: bool) -> io::Result<Option<Answer>> {
    let more = || {
        if eof {
            Err(io::ErrorKind::UnexpectedEof.into())
        } else {
            Ok(None)
        }
    };
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4) else {
        if buf.len() > MAX_HEAD {
            return Err(io::ErrorKind::InvalidData.into());
        }
        return more();
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
    let no_body = head_only || status == 204 || status == 304 || (100..200).contains(&status);
    let got = buf.len() - end;
    let (body, keep) = match len {
        _ if no_body => (0, !close),
        Some(len) if got >= len => (len, !close),
        Some(_) => return more(),
        // Ended by the close.
        None if eof => (got, false),
        None => return Ok(None),
    };
    Ok(Some(Answer {
        head: end,
        body,
        keep,
    }))
}

/// Append the backend's answer (`head`, `body`) for the client: its status line and headers
/// but its own `Connection`, `Keep-Alive` and `Content-Length`, which are the client
/// connection's.
pub fn rewrite(out: &mut Vec<u8>, head: &[u8], body: &[u8], req: &Request) {
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

/// Append a `502 Bad Gateway` (no peer left to try).
pub fn bad_gateway(out: &mut Vec<u8>, req: &Request) {
    let conn = connection(req);
    let _ = write!(
        out,
        "HTTP/1.1 502 Bad Gateway\r\nServer: gomutex-prefork\r\nContent-Length: 0\r\nConnection: {conn}\r\n\r\n"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_whole_or_not() {
        let a = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        for cut in 0..a.len() {
            assert!(parse(&a[..cut], false, false).unwrap().is_none(), "{cut}");
            assert!(parse(&a[..cut], false, true).is_err(), "{cut}");
        }
        let whole = Answer {
            head: a.len() - 2,
            body: 2,
            keep: true,
        };
        assert_eq!(parse(a, false, false).unwrap(), Some(whole));
        let by_close = b"HTTP/1.0 200 OK\r\n\r\nabc";
        assert!(parse(by_close, false, false).unwrap().is_none());
        let got = parse(by_close, false, true).unwrap().unwrap();
        assert_eq!((got.body, got.keep), (3, false));
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(parse(head, true, false).unwrap().unwrap().body, 0);
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(parse(chunked, false, false).is_err());
    }
}
