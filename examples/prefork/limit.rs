//! `--limit-req`: nginx's `limit_req` in the workers, on a [`RateLimiter`] whose dictionary
//! the master created before forking, so the rate per key holds across all the workers.

use crate::http::Admit;
use crate::shared::Slot;
use gomutex::dict::{Decision, RateLimiter};
use std::fmt::Write as _;
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::Ordering::Relaxed;

/// What a request is limited by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyBy {
    /// The client address, as bytes (nginx's `$binary_remote_addr`).
    Addr,
    /// The request's path, without the query (nginx's `$uri`, not normalized).
    Uri,
}

impl KeyBy {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "addr" => Some(KeyBy::Addr),
            "uri" => Some(KeyBy::Uri),
            _ => None,
        }
    }
}

/// One worker's limiter: checks each request and counts the decisions in its stats slot.
pub struct Limit<'a> {
    pub limiter: &'a RateLimiter,
    pub key: KeyBy,
    /// `--limit-headers`: tell the client where its key stands.
    pub headers: bool,
    pub slot: &'a Slot,
}

impl Admit for Option<Limit<'_>> {
    fn admit(&mut self, stream: &TcpStream, target: &[u8], headers: &mut String) -> bool {
        let Some(l) = self else { return true };
        let mut addr = [0u8; 16];
        let key: &[u8] = match l.key {
            KeyBy::Addr => match stream.peer_addr().map(|a| a.ip()) {
                Ok(IpAddr::V4(ip)) => {
                    addr[..4].copy_from_slice(&ip.octets());
                    &addr[..4]
                }
                Ok(IpAddr::V6(ip)) => {
                    addr.copy_from_slice(&ip.octets());
                    &addr
                }
                // nginx skips a limit whose key is empty.
                Err(_) => return true,
            },
            KeyBy::Uri => target.split(|&b| b == b'?').next().unwrap_or(target),
        };
        // The limiter is `nodelay`: within the burst it never answers `Delay`.
        let decision = if l.headers {
            let t = l.limiter.throttle(key);
            // Whole seconds, rounded up: a client that waits that long is not refused for
            // being early.
            let secs = |d: std::time::Duration| d.as_millis().div_ceil(1000);
            let _ = write!(
                headers,
                "RateLimit-Limit: {}\r\nRateLimit-Remaining: {}\r\nRateLimit-Reset: {}\r\n",
                t.limit,
                t.remaining,
                secs(t.reset_after)
            );
            if t.decision == Decision::Rejected {
                let _ = write!(headers, "Retry-After: {}\r\n", secs(t.retry_after));
            }
            t.decision
        } else {
            l.limiter.check(key)
        };
        let pass = !matches!(decision, Decision::Rejected);
        let c = if pass {
            &l.slot.limit_passed
        } else {
            &l.slot.limit_rejected
        };
        c.fetch_add(1, Relaxed);
        pass
    }
}
