//! `--limit-req`: nginx's `limit_req` in the workers, on a [`RateLimiter`] whose dictionary
//! the master created before forking, so the rate per key holds across all the workers. Each
//! worker makes its limiter over that dictionary from its generation's [`Limits`] (the flags,
//! or `--config`'s file): a reload changes the rate, the burst, the key or the headers, and
//! the buckets stay.

use crate::http::Admit;
use crate::shared::Slot;
use gomutex::dict::{Decision, RateLimiter, ShmDict};
use gomutex::shm::Mapping;
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

    pub fn name(self) -> &'static str {
        match self {
            KeyBy::Addr => "addr",
            KeyBy::Uri => "uri",
        }
    }
}

/// The limit settings: `--limit-req RATE`, `--limit-burst N`, `--limit-key addr|uri`,
/// `--limit-headers` (the flags, or a `--config` file's `limit_req`, … lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Requests per second per key; `None`: no limit.
    pub rate: Option<u32>,
    pub burst: u32,
    pub key: KeyBy,
    /// `RateLimit-*` and `Retry-After` headers.
    pub headers: bool,
}

impl Limits {
    /// No limit: the defaults.
    pub const NONE: Self = Self {
        rate: None,
        burst: 0,
        key: KeyBy::Addr,
        headers: false,
    };

    /// Apply limit flag `flag` with `value` (`""` for `--limit-headers`); `None` if `flag`
    /// is not one of them.
    pub fn set(&mut self, flag: &str, value: &str) -> Option<Result<(), String>> {
        let r = match flag {
            "--limit-req" => match value.parse() {
                Ok(n) if n >= 1 => {
                    self.rate = Some(n);
                    Ok(())
                }
                _ => Err(format!(
                    "--limit-req: expected requests per second >= 1, got {value:?}"
                )),
            },
            "--limit-burst" => value
                .parse()
                .map(|n| self.burst = n)
                .map_err(|_| format!("--limit-burst: expected a number, got {value:?}")),
            "--limit-key" => KeyBy::parse(value)
                .map(|k| self.key = k)
                .ok_or_else(|| format!("--limit-key: expected addr|uri, got {value:?}")),
            "--limit-headers" if value.is_empty() => {
                self.headers = true;
                Ok(())
            }
            "--limit-headers" => Err("--limit-headers takes no value".into()),
            _ => return None,
        };
        Some(r)
    }

    /// Settings other than the defaults need a rate.
    pub fn check(&self) -> Result<(), String> {
        if self.rate.is_none() && *self != Self::NONE {
            return Err("--limit-burst, --limit-key and --limit-headers need --limit-req".into());
        }
        Ok(())
    }

    /// As `--config` directives (`limit_req 10`, …), one a line; none without a rate.
    pub fn directives(&self) -> String {
        let Some(rate) = self.rate else {
            return String::new();
        };
        let mut s = format!(
            "limit_req {rate}\nlimit_burst {}\nlimit_key {}\n",
            self.burst,
            self.key.name()
        );
        if self.headers {
            s.push_str("limit_headers\n");
        }
        s
    }
}

/// One worker's limiter: checks each request and counts the decisions in its stats slot.
pub struct Limit<'a> {
    /// This worker's, over the master's dictionary.
    pub limiter: RateLimiter,
    pub key: KeyBy,
    /// `--limit-headers`: tell the client where its key stands.
    pub headers: bool,
    pub slot: &'a Slot,
}

impl<'a> Limit<'a> {
    /// The limiter `limits` say, over the dictionary the master made at the start of `dict`
    /// (`None` without a rate).
    pub fn new(dict: &Mapping, limits: &Limits, slot: &'a Slot) -> Result<Option<Self>, String> {
        let Some(rate) = limits.rate else {
            return Ok(None);
        };
        let error = |e| format!("cannot make the limiter: {e}");
        let dict = ShmDict::attach_in(dict, 0).map_err(error)?;
        let limiter = RateLimiter::new(dict, rate, limits.burst)
            .map_err(error)?
            .nodelay();
        Ok(Some(Self {
            limiter,
            key: limits.key,
            headers: limits.headers,
            slot,
        }))
    }
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
