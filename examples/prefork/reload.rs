//! `--config FILE` and `SIGHUP`: nginx's configuration reload through shared memory.
//!
//! The file holds one directive per line; `#` starts a comment, blank lines are ignored:
//!
//! ```text
//! # the backends, nginx's `server` parameters (the syntax of --upstream)
//! upstream 127.0.0.1:9001,weight=5,max_fails=3,fail_timeout=10000
//! upstream 127.0.0.1:9002,max_conns=100
//! upstream 127.0.0.1:9003,backup
//! # nginx's limit_req nodelay: 100 requests per second per client address
//! limit_req 100
//! limit_burst 20
//! ```
//!
//! | directive | as the flag |
//! |---|---|
//! | `upstream HOST:PORT[,weight=N][,max_fails=N][,fail_timeout=MS][,max_conns=N][,backup][,down]` (at least one) | `--upstream` |
//! | `limit_req RATE` | `--limit-req` |
//! | `limit_burst N` | `--limit-burst` |
//! | `limit_key addr\|uri` | `--limit-key` |
//! | `limit_headers` | `--limit-headers` |
//!
//! Each is parsed by its flag's own parser. `--limit-zone` (the dictionary's size) stays a
//! flag: the master makes the dictionary once, before forking; a reload changes the rate, the
//! burst, the key and the headers, and the buckets stay.
//!
//! Each configuration is a *generation* (1, 2, …) with its own [`UpstreamZone`] (a zone's
//! peers are fixed): a named one, `/gomutex-prefork-<master pid>-<generation>`, so that
//! workers forked before it can open it. On `SIGHUP` the master reads the file, makes the
//! zone, publishes `{generation, zone name, the peers' addresses, the limits}` in a
//! [`ShmSnapshot`] it made before forking, unlinks the previous generation's name (mappings
//! outlive their name) and wakes every worker (an `eventfd` per worker in its epoll set).
//!
//! A worker checks [`ShmSnapshot::version`] (one load) after each `epoll_wait`, before it
//! accepts or reads: its idle point. On a new version it opens the new zone, makes its
//! limiter, and serves every request from then on with them. Requests in flight finish on the
//! old zone: each exchange (`exchange.rs`) holds an `Rc` of the generation it started on, so
//! its slot is given back and its retries picked there; the worker's handle of the old zone
//! (and its row of connection counts) goes with the last of them. The idle keep-alive
//! connections to the backends the new list still has are kept. (In `blocking`
//! mode a worker asleep on the accept lock has no connection: it switches when it wakes,
//! before it accepts; until then `/status` shows it on the old generation.) A worker forked
//! (or respawned) later starts on the current generation, inherited from the master. The
//! master keeps every generation's zone a running worker may still be on (each worker's
//! `generation` is in the stats region), so its `force_release(pid)` of a reaped worker covers
//! them all, and unlinks the current name when it stops.
//!
//! A file that does not parse (or a zone that cannot be made) keeps the old configuration:
//! the master logs `prefork: reload failed: FILE:LINE: …; keeping generation N`, counts it
//! (`failed_reloads` on `/status`) and publishes nothing.
//!
//! What a death at each point of a reload leaves (the snapshot's own guarantee: a reader gets
//! one published version whole, whoever dies where):
//!
//! | a death … | leaves | repaired by |
//! |---|---|---|
//! | the master, before the new zone is published | the old generation everywhere; the new zone's name in `/dev/shm` | nobody: `rm /dev/shm/gomutex-prefork-<pid>-*` |
//! | the master, inside the publish | the old generation or the new one, whole | — |
//! | the master, after the publish | the new generation for the workers that read it before their pipe closes; a name or two in `/dev/shm` | the workers stop (as on any master death) |
//! | a worker, mid-read of the snapshot | nothing (readers write nothing) | — |
//! | a worker, on either generation | its connection counts in the zones it used | the master's `force_release(pid)` over every generation it keeps |
//!
//! A worker's `generation` in the stats region is its current one: the master may retire an
//! older zone while one of the worker's exchanges still holds a slot there (for at most the
//! exchange's timeouts); a death then leaves that count in a zone no new request picks from.

use crate::limit::Limits;
use crate::proxy::parse_upstream;
use gomutex::shm::{self, ShmSnapshot};
use gomutex::upstream::{Peer, UpstreamConfig, UpstreamZone};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The snapshot's capacity: the published form of up to 64 peers fits many times over.
const SNAPSHOT_BYTES: usize = 16 << 10;

/// What a configuration file says.
pub struct Settings {
    /// The peers, in order.
    pub peers: Vec<(SocketAddr, Peer)>,
    pub limits: Limits,
}

/// Parse a configuration file's text. `Err` names the line (`what:LINE: …`).
pub fn parse(what: &str, text: &str) -> Result<Settings, String> {
    let mut peers = Vec::new();
    let mut limits = Limits::NONE;
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (directive, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let at = |e: String| format!("{what}:{}: {e}", i + 1);
        match directive {
            "upstream" => peers.push(parse_upstream(rest.trim()).map_err(at)?),
            "limit_req" | "limit_burst" | "limit_key" | "limit_headers" => {
                // The flag's own parser: `limit_req 10` is `--limit-req 10`.
                let flag = format!("--{}", directive.replace('_', "-"));
                let set = limits.set(&flag, rest.trim()).expect("a limit flag");
                set.map_err(at)?
            }
            _ => return Err(at(format!("unknown directive {directive:?}"))),
        }
    }
    if peers.is_empty() {
        return Err(format!("{what}: no upstream directive"));
    }
    limits.check().map_err(|e| format!("{what}: {e}"))?;
    Ok(Settings { peers, limits })
}

/// Read and [`parse`] the file at `path`.
pub fn read(path: &Path) -> Result<Settings, String> {
    let what = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {what}: {e}"))?;
    parse(&what, &text)
}

/// One generation of the configuration: its zone, the peers' addresses (index = peer), and
/// its limits.
pub struct Generation {
    pub generation: u64,
    pub zone: UpstreamZone,
    pub addrs: Vec<SocketAddr>,
    pub limits: Limits,
}

/// The published form: `generation N`, `zone NAME`, a `peer ADDR` line per peer, then the
/// limits as the file's directives.
fn encode(generation: u64, name: &str, addrs: &[SocketAddr], limits: &Limits) -> String {
    let mut s = format!("generation {generation}\nzone {name}\n");
    for a in addrs {
        s.push_str(&format!("peer {a}\n"));
    }
    s + &limits.directives()
}

/// [`encode`]'s text read back: (generation, zone name, addresses, limits).
type Published = (u64, String, Vec<SocketAddr>, Limits);

fn decode(bytes: &[u8]) -> Option<Published> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    let generation = lines.next()?.strip_prefix("generation ")?.parse().ok()?;
    let name = lines.next()?.strip_prefix("zone ")?.to_string();
    let (mut addrs, mut limits) = (Vec::new(), Limits::NONE);
    for l in lines {
        let (directive, rest) = l.split_once(' ').unwrap_or((l, ""));
        if directive == "peer" {
            addrs.push(rest.parse().ok()?);
        } else {
            let flag = format!("--{}", directive.replace('_', "-"));
            limits.set(&flag, rest)?.ok()?;
        }
    }
    Some((generation, name, addrs, limits))
}

/// The master's side: the file, the snapshot, and every generation a worker may still use
/// (the newest last).
pub struct Reloader {
    /// `--config`'s file; `None`: the peers came from `--upstream` (nothing to reload).
    path: Option<PathBuf>,
    snapshot: Option<ShmSnapshot>,
    /// Every generation kept, oldest first, with its zone's name (`None`: anonymous).
    live: Vec<(Rc<Generation>, Option<String>)>,
    cfg: UpstreamConfig,
    /// The master's pid: only it unlinks names.
    master: u32,
}

impl Reloader {
    /// `--upstream`'s peers: one anonymous zone, generation 1, no snapshot.
    pub fn fixed(
        peers: &[(SocketAddr, Peer)],
        limits: Limits,
        cfg: UpstreamConfig,
    ) -> Result<Self, String> {
        let list: Vec<_> = peers.iter().map(|u| u.1.clone()).collect();
        let zone = UpstreamZone::anonymous_with(&list, cfg)
            .map_err(|e| format!("cannot create the upstream zone: {e}"))?;
        let up = Generation {
            generation: 1,
            zone,
            addrs: peers.iter().map(|u| u.0).collect(),
            limits,
        };
        Ok(Self {
            path: None,
            snapshot: None,
            live: vec![(Rc::new(up), None)],
            cfg,
            master: std::process::id(),
        })
    }

    /// `--config FILE`: the snapshot, and generation 1 from the file (published).
    pub fn from_file(path: PathBuf, cfg: UpstreamConfig) -> Result<Self, String> {
        let snapshot = ShmSnapshot::anonymous(SNAPSHOT_BYTES)
            .map_err(|e| format!("cannot create the configuration snapshot: {e}"))?;
        let mut r = Self {
            path: Some(path),
            snapshot: Some(snapshot),
            live: Vec::new(),
            cfg,
            master: std::process::id(),
        };
        r.reload()?;
        Ok(r)
    }

    /// The current generation.
    pub fn current(&self) -> Rc<Generation> {
        self.live.last().expect("a generation").0.clone()
    }

    /// Read the file again and publish it as the next generation: its number. On `Err`
    /// nothing was published (the old generation stays).
    pub fn reload(&mut self) -> Result<u64, String> {
        let (Some(path), Some(snapshot)) = (&self.path, &self.snapshot) else {
            return Err("no --config file to reload".into());
        };
        let Settings { peers, limits } = read(path)?;
        let generation = snapshot.version() + 1;
        let name = format!("/gomutex-prefork-{}-{generation}", self.master);
        let list: Vec<_> = peers.iter().map(|u| u.1.clone()).collect();
        // A name left by a master of the same pid that was killed: ours now.
        let _ = shm::unlink(&name);
        let zone = UpstreamZone::create(&name, &list, self.cfg)
            .map_err(|e| format!("cannot create the upstream zone {name}: {e}"))?;
        let addrs: Vec<_> = peers.iter().map(|u| u.0).collect();
        let published = snapshot
            .publish(encode(generation, &name, &addrs, &limits).as_bytes())
            .map_err(|e| {
                let _ = shm::unlink(&name);
                format!("cannot publish generation {generation}: {e}")
            })?;
        debug_assert_eq!(published, generation);
        // Published: the old name goes (its mapping stays valid for those who hold it).
        if let Some((_, Some(old))) = self.live.last() {
            let _ = shm::unlink(old);
        }
        let up = Generation {
            generation,
            zone,
            addrs,
            limits,
        };
        self.live.push((Rc::new(up), Some(name)));
        Ok(generation)
    }

    /// In a forked worker: the current generation and the snapshot, the other generations
    /// (the master's) dropped here, so the worker's handle of a zone goes with the last `Rc`
    /// it holds.
    pub fn into_worker(mut self) -> (Rc<Generation>, Option<ShmSnapshot>) {
        let current = self.current();
        self.live.clear();
        (current, self.snapshot.take())
    }

    /// Give back the connection counts of reaped process `pid` in every generation kept: how
    /// many.
    pub fn force_release(&self, pid: i32) -> u64 {
        self.live
            .iter()
            .map(|(g, _)| g.zone.force_release(pid))
            .sum()
    }

    /// Drop the generations older than `oldest`, the oldest one a running worker uses (never
    /// the current one).
    pub fn retire_below(&mut self, oldest: u64) {
        let keep = self.live.len() - 1;
        let old = self.live[..keep]
            .iter()
            .take_while(|(up, _)| up.generation < oldest)
            .count();
        self.live.drain(..old);
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        if std::process::id() != self.master {
            return;
        }
        if let Some((_, Some(name))) = self.live.last() {
            let _ = shm::unlink(name);
        }
    }
}

/// A worker's side: the generation published after snapshot version `seen`, if any: the
/// version read, and the generation with its zone opened, or why it cannot be (the worker
/// keeps its old one).
pub fn take(snapshot: &ShmSnapshot, seen: u64) -> Option<(u64, Result<Generation, String>)> {
    if snapshot.version() == seen {
        return None;
    }
    let mut buf = Vec::new();
    loop {
        let version = snapshot.read_into(&mut buf);
        let Some((generation, name, addrs, limits)) = decode(&buf) else {
            return Some((version, Err(format!("generation {version}: unreadable"))));
        };
        let e = match UpstreamZone::open(&name) {
            Ok(zone) if zone.peers() == addrs.len() => {
                let up = Generation {
                    generation,
                    zone,
                    addrs,
                    limits,
                };
                return Some((version, Ok(up)));
            }
            Ok(_) => format!("{name}: not the peers published"),
            Err(e) => format!("cannot open {name}: {e}"),
        };
        // Superseded while we read (its name is gone): take the newer one.
        if snapshot.version() == version {
            return Some((version, Err(e)));
        }
    }
}
