//! The command line: its options, their defaults and checks (usage errors exit with code 2).

use crate::limit::Limits;
use crate::proxy;
use gomutex::accept::{Spread, DEFAULT_DELAY};
use gomutex::dict::ShmDict;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) const USAGE: &str = "\
usage: prefork [--addr HOST:PORT] [--workers N] [--accept MODE] [--stats-json PATH]
               [--accept-delay MS] [--worker-connections N] [--multi-accept]
               [--no-spread] [--spread-margin N] [--spread-batch N] [--spread-retry MS]
               [--spread-rate-slack PCT|off]
               [--limit-req RATE] [--limit-burst N] [--limit-key addr|uri] [--limit-zone BYTES]
               [--upstream HOST:PORT[,weight=N,max_fails=N,fail_timeout=MS,max_conns=N,backup,down]]...
               [--config FILE]

  --addr HOST:PORT          address to listen on (default 127.0.0.1:8080; port 0 = any free port)
  --workers N               worker processes (default: number of CPUs)
  --accept MODE             who accepts connections (default mutex):
                              mutex      nginx's accept_mutex (try-lock per loop iteration)
                              blocking   accept mutex; idle workers sleep on the lock (FIFO hand-off)
                              none       every worker watches the shared socket (thundering herd)
                              exclusive  every worker watches it with EPOLLEXCLUSIVE
                              reuseport  one SO_REUSEPORT socket per worker
  --stats-json PATH         write per-worker and total stats as JSON at shutdown
  --accept-delay MS         nginx's accept_mutex_delay (default 500)
  --worker-connections N    connection slots per worker (default 1024)
  --multi-accept            accept all pending connections per wake-up (default: one;
                            with the spread rule, up to its batch)
  --no-spread               lock modes: no load-aware spread rule (nginx's behaviour)
  --spread-margin N         spread rule: connections above the workers' mean and above the
                            least loaded worker a worker may hold and still accept (default 0)
  --spread-batch N          spread rule: most connections accepted per turn of the lock
                            (default 4)
  --spread-retry MS         spread rule: poll cap of a worker without the lock (default 2)
  --spread-rate-slack PCT   spread rule: percent by which a worker's recent accepts may exceed
                            the least's before it skips the lock (default 20; off: ignore them)
  --limit-req RATE          nginx's limit_req nodelay: RATE requests per second per key, across
                            all workers; over it the answer is 503
  --limit-burst N           requests a key may send above the rate at once (default 0)
  --limit-key addr|uri      what a request is limited by: the client address (default) or
                            the request's path
  --limit-zone BYTES        the limiter's shared dictionary (default 1048576; a full one
                            evicts the least recently used keys)
  --upstream SPEC           proxy requests to this backend (repeatable): nginx's `server`
                            parameters (weight=1 max_fails=1 fail_timeout=10000 by default),
                            balanced over all workers by a shared upstream zone
  --config FILE             read the upstreams and limits from FILE, again on SIGHUP: one
                            directive a line (`upstream SPEC`, `limit_req RATE`, `limit_burst
                            N`, `limit_key addr|uri`, `limit_headers`), `#` comments; not with
                            --upstream or the --limit-* flags but --limit-zone
  --limit-headers           tell the client where its key stands: RateLimit-Limit,
                            RateLimit-Remaining, RateLimit-Reset (seconds), and Retry-After
                            (seconds) on a 503

Reloads --config's file on SIGHUP. Stops on SIGINT/SIGTERM and prints per-worker stats.
Test hook: PREFORK_TEST_HOLD_MS=N makes the first worker to take the accept lock hold it N ms
(once).";

/// Who watches the listening socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Mutex,
    Blocking,
    None,
    Exclusive,
    Reuseport,
}

impl Mode {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "mutex" => Mode::Mutex,
            "blocking" => Mode::Blocking,
            "none" => Mode::None,
            "exclusive" => Mode::Exclusive,
            "reuseport" => Mode::Reuseport,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Mutex => "mutex",
            Mode::Blocking => "blocking",
            Mode::None => "none",
            Mode::Exclusive => "exclusive",
            Mode::Reuseport => "reuseport",
        }
    }

    pub(crate) fn uses_lock(self) -> bool {
        matches!(self, Mode::Mutex | Mode::Blocking)
    }
}

#[derive(Debug)]
pub(crate) struct Args {
    pub(crate) addr: SocketAddr,
    pub(crate) workers: usize,
    pub(crate) mode: Mode,
    pub(crate) stats_json: Option<PathBuf>,
    pub(crate) delay: Duration,
    pub(crate) connections: usize,
    pub(crate) multi_accept: bool,
    /// The load-aware spread rule (lock modes); `None`: `--no-spread`.
    pub(crate) spread: Option<Spread>,
    /// `--limit-req`, `--limit-burst`, `--limit-key`, `--limit-headers`.
    pub(crate) limits: Limits,
    pub(crate) limit_zone: usize,
    /// `--upstream`: the backends, in order.
    pub(crate) upstreams: Vec<(SocketAddr, gomutex::upstream::Peer)>,
    /// `--config`: the file the upstreams are read from, at start and on `SIGHUP`.
    pub(crate) config: Option<PathBuf>,
}

/// Parse the command line; `Err` is the message for a usage error (exit code 2).
pub(crate) fn parse_args(argv: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args {
        addr: "127.0.0.1:8080".parse().unwrap(),
        workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
        mode: Mode::Mutex,
        stats_json: None,
        delay: DEFAULT_DELAY,
        connections: 1024,
        multi_accept: false,
        spread: Some(Spread::DEFAULT),
        limits: Limits::NONE,
        limit_zone: 1 << 20,
        upstreams: Vec::new(),
        config: None,
    };
    let (mut margin, mut batch, mut retry, mut slack) = (
        Spread::DEFAULT.margin,
        Spread::DEFAULT.batch,
        Spread::DEFAULT.retry,
        Spread::DEFAULT.rate_slack,
    );
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let has_value = matches!(
            flag.as_str(),
            "--addr"
                | "--workers"
                | "--accept"
                | "--stats-json"
                | "--accept-delay"
                | "--worker-connections"
                | "--spread-margin"
                | "--spread-batch"
                | "--spread-retry"
                | "--spread-rate-slack"
                | "--limit-req"
                | "--limit-burst"
                | "--limit-key"
                | "--limit-zone"
                | "--upstream"
                | "--config"
        );
        let value = if has_value {
            match inline.or_else(|| it.next()) {
                Some(v) => v,
                None => return Err(format!("{flag} needs a value")),
            }
        } else if inline.is_some() {
            return Err(format!("{flag} takes no value"));
        } else {
            String::new()
        };
        if let Some(set) = a.limits.set(&flag, &value) {
            set?;
            continue;
        }
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--addr" => {
                a.addr = value
                    .parse()
                    .map_err(|_| format!("--addr: not an IP:PORT address: {value:?}"))?
            }
            "--workers" => {
                a.workers = match value.parse() {
                    Ok(n) if (1..=512).contains(&n) => n,
                    _ => return Err(format!("--workers: expected 1..=512, got {value:?}")),
                }
            }
            "--accept" => {
                a.mode = Mode::parse(&value).ok_or_else(|| {
                    format!(
                        "--accept: expected mutex|blocking|none|exclusive|reuseport, got {value:?}"
                    )
                })?
            }
            "--stats-json" => a.stats_json = Some(PathBuf::from(value)),
            "--accept-delay" => {
                a.delay = match value.parse() {
                    Ok(ms) if ms >= 1 => Duration::from_millis(ms),
                    _ => {
                        return Err(format!(
                            "--accept-delay: expected milliseconds >= 1, got {value:?}"
                        ))
                    }
                }
            }
            "--worker-connections" => {
                a.connections = match value.parse() {
                    Ok(n) if n >= 8 => n,
                    _ => {
                        return Err(format!(
                            "--worker-connections: expected a number >= 8, got {value:?}"
                        ))
                    }
                }
            }
            "--multi-accept" => a.multi_accept = true,
            "--no-spread" => a.spread = None,
            "--spread-margin" => {
                margin = value
                    .parse()
                    .map_err(|_| format!("--spread-margin: expected a number, got {value:?}"))?
            }
            "--spread-batch" => {
                batch = match value.parse() {
                    Ok(n) if n >= 1 => n,
                    _ => {
                        return Err(format!(
                            "--spread-batch: expected a number >= 1, got {value:?}"
                        ))
                    }
                }
            }
            "--spread-retry" => {
                retry = match value.parse() {
                    Ok(ms) if ms >= 1 => Duration::from_millis(ms),
                    _ => {
                        return Err(format!(
                            "--spread-retry: expected milliseconds >= 1, got {value:?}"
                        ))
                    }
                }
            }
            "--spread-rate-slack" => {
                slack = match value.as_str() {
                    "off" => None,
                    v => Some(v.parse().map_err(|_| {
                        format!("--spread-rate-slack: expected a percentage or off, got {value:?}")
                    })?),
                }
            }
            "--limit-zone" => {
                a.limit_zone = match value.parse() {
                    Ok(n) if n >= ShmDict::MIN_CAPACITY => n,
                    _ => {
                        return Err(format!(
                            "--limit-zone: expected bytes >= {}, got {value:?}",
                            ShmDict::MIN_CAPACITY
                        ))
                    }
                }
            }
            "--upstream" => a.upstreams.push(proxy::parse_upstream(&value)?),
            "--config" => a.config = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    a.limits.check()?;
    if a.limits.rate.is_none() && a.config.is_none() && a.limit_zone != 1 << 20 {
        return Err("--limit-zone needs --limit-req or --config".into());
    }
    if a.config.is_some() && (!a.upstreams.is_empty() || a.limits != Limits::NONE) {
        // One source of the settings: a reload must not silently drop the flags' ones.
        return Err(
            "--config cannot be combined with --upstream or --limit-req/-burst/-key/\
                    -headers: put them in the file"
                .into(),
        );
    }
    if a.spread.is_some() {
        a.spread = Some(
            Spread::new(margin, batch)
                .with_retry(retry)
                .with_rate_slack(slack),
        );
    }
    Ok(Some(a))
}
