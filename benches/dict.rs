//! `ShmDict` against Redis, the store a user would otherwise pick for state shared between
//! worker processes: operations per second of P processes (1, 2, 8), each with its own
//! connection to `redis-server` over a unix socket (no pipelining), or its own handle on the
//! dictionary; and memory per entry.
//!
//! First the latency rows: one process, one operation at a time (`get`, `get_with`, `incr`, a
//! `set` of the size stored, `RateLimiter::check`), 10 000 keys of 10 bytes, 32-byte values,
//! random hits, the median of 5 slices with the rows alternated; and two floors of `check`:
//! the clock read it makes (`clock`) and an uncontended write lock of a `ShmRwLock`
//! (`write_lock`).
//!
//! Workloads: `get` (only `get`s of random keys among 10 000, 32-byte values), `get90` (90 %
//! `get`, 10 % `set` of those keys)
//! `incr` (`incr` of random counters among 1 000) and `list` (`rpush` then `lpop` of random
//! lists among 1 000, each a few items long; both count). Contenders: Redis, `ShmDict` with one
//! lock (nginx's and lua_shared_dict's layout), `ShmDict` with 16 shards. Each round runs
//! every contender once, in turn; ratios are taken per round, then their median.
//!
//! `cargo bench --bench dict` (inside benches/). Environment: `DICT_ROUNDS` (default 5),
//! `DICT_MS` (each run's length, default 300), `DICT_REDIS` (the server binary, default
//! `redis-server`; skipped if it does not start), `DICT_LATENCY_ONLY` (set: the one-process
//! latency rows alone), `DICT_ITER_ONLY` (set: the passes' row alone, `dict_iter.rs`), `DICT_LAT=ROW` with `DICT_LAT_N` (one latency row alone, for
//! `valgrind --tool=callgrind --toggle-collect='*lat_loop*'`). Without `--bench` (`cargo test --benches`)
//! every case runs once, briefly, and the counts are checked.
//!
//! The Redis client is the few lines of RESP this needs (`GET`, `SET`, `INCR`, `INFO`), not the
//! `redis` crate: nothing to add to the bench's dependencies for three commands.

mod common;
mod dict_iter;

use gomutex::dict::{DictConfig, RateLimiter, ShmDict, Value};
use gomutex::shm::ShmRwLock;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

const KEYS: u64 = 10_000;
const COUNTERS: u64 = 1_000;
const VALUE: [u8; 32] = [b'v'; 32];

// ------------------------------------------------------------------ a minimal RESP client

struct Redis {
    w: UnixStream,
    r: BufReader<UnixStream>,
    line: Vec<u8>,
}

impl Redis {
    fn connect(path: &str) -> std::io::Result<Self> {
        let w = UnixStream::connect(path)?;
        let r = BufReader::new(w.try_clone()?);
        Ok(Self {
            w,
            r,
            line: Vec::new(),
        })
    }

    fn send(&mut self, args: &[&[u8]]) {
        let mut b = Vec::with_capacity(64);
        write!(b, "*{}\r\n", args.len()).unwrap();
        for a in args {
            write!(b, "${}\r\n", a.len()).unwrap();
            b.extend_from_slice(a);
            b.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&b).unwrap();
    }

    /// One reply; bulk strings' bytes (discarded except their length), integers' value.
    fn reply(&mut self) -> i64 {
        self.line.clear();
        self.r.read_until(b'\n', &mut self.line).unwrap();
        let body = std::str::from_utf8(&self.line[1..self.line.len() - 2]).unwrap();
        match self.line[0] {
            b'+' => 0,
            b':' => body.parse().unwrap(),
            b'$' => {
                let n: i64 = body.parse().unwrap();
                if n >= 0 {
                    let mut skip = vec![0u8; n as usize + 2];
                    std::io::Read::read_exact(&mut self.r, &mut skip).unwrap();
                }
                n
            }
            _ => panic!("redis: {}", String::from_utf8_lossy(&self.line)),
        }
    }

    fn cmd(&mut self, args: &[&[u8]]) -> i64 {
        self.send(args);
        self.reply()
    }

    /// `used_memory` from `INFO memory`.
    fn used_memory(&mut self) -> u64 {
        self.send(&[b"INFO", b"memory"]);
        self.line.clear();
        self.r.read_until(b'\n', &mut self.line).unwrap();
        let n: usize = std::str::from_utf8(&self.line[1..self.line.len() - 2])
            .unwrap()
            .parse()
            .unwrap();
        let mut body = vec![0u8; n + 2];
        std::io::Read::read_exact(&mut self.r, &mut body).unwrap();
        let text = String::from_utf8_lossy(&body);
        text.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

struct Server {
    child: Child,
    sock: String,
}

impl Server {
    fn start() -> Option<Self> {
        let bin = std::env::var("DICT_REDIS").unwrap_or_else(|_| "redis-server".into());
        let sock = format!("/tmp/gomutex-bench-redis-{}.sock", std::process::id());
        let child = Command::new(bin)
            .args(["--port", "0", "--unixsocket", &sock, "--save", ""])
            .args(["--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut s = Self { child, sock };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if Redis::connect(&s.sock).is_ok() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = s.child.kill();
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.sock);
    }
}

// ------------------------------------------------------------------ the contenders

#[derive(Clone, Copy, PartialEq)]
enum Work {
    /// `get` of random preloaded keys only.
    Get,
    Get90,
    Incr,
    /// `rpush` then `lpop` of one list among `COUNTERS` (two operations).
    List,
}

/// One process's handle on a store.
trait Store {
    fn get(&mut self, k: &[u8]) -> bool;
    fn set(&mut self, k: &[u8], v: &[u8]);
    fn incr(&mut self, k: &[u8]) -> i64;
    /// Push `v` at the tail of list `k`, then pop its head: whether it had one.
    fn push_pop(&mut self, k: &[u8], v: &[u8]) -> bool;
}

impl Store for &ShmDict {
    fn get(&mut self, k: &[u8]) -> bool {
        // The value is read in place (as a server would copy it out to a client).
        self.get_with(k, |_, flags| flags).unwrap().is_some()
    }
    fn set(&mut self, k: &[u8], v: &[u8]) {
        assert_eq!(ShmDict::set(self, k, v, None, 0), Ok(0));
    }
    fn incr(&mut self, k: &[u8]) -> i64 {
        ShmDict::incr(self, k, 1, Some(0), None).unwrap().value
    }
    fn push_pop(&mut self, k: &[u8], v: &[u8]) -> bool {
        ShmDict::rpush(self, k, v).unwrap();
        ShmDict::lpop(self, k).unwrap().is_some()
    }
}

impl Store for Redis {
    fn get(&mut self, k: &[u8]) -> bool {
        self.cmd(&[b"GET", k]) >= 0
    }
    fn set(&mut self, k: &[u8], v: &[u8]) {
        self.cmd(&[b"SET", k, v]);
    }
    fn incr(&mut self, k: &[u8]) -> i64 {
        self.cmd(&[b"INCR", k])
    }
    fn push_pop(&mut self, k: &[u8], v: &[u8]) -> bool {
        self.cmd(&[b"RPUSH", k, v]);
        self.cmd(&[b"LPOP", k]) >= 0
    }
}

fn key(buf: &mut Vec<u8>, prefix: &str, i: u64) {
    buf.clear();
    write!(buf, "{prefix}:{i}").unwrap();
}

/// Run `work` on `store` until `stop` is set; operations done (incr: their sum, to check).
fn run(store: &mut impl Store, work: Work, seed: u64, stop: &AtomicU64) -> (u64, u64) {
    let mut x = seed | 1;
    let (mut ops, mut incrs) = (0u64, 0u64);
    let mut k = Vec::with_capacity(32);
    while stop.load(SeqCst) == 0 {
        for _ in 0..64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match work {
                Work::Get => {
                    key(&mut k, "key", x % KEYS);
                    assert!(store.get(&k), "preloaded key missing");
                }
                Work::Get90 => {
                    key(&mut k, "key", x % KEYS);
                    if (x >> 32).is_multiple_of(10) {
                        store.set(&k, &VALUE);
                    } else {
                        assert!(store.get(&k), "preloaded key missing");
                    }
                }
                Work::Incr => {
                    key(&mut k, "ctr", x % COUNTERS);
                    store.incr(&k);
                    incrs += 1;
                }
                Work::List => {
                    key(&mut k, "list", x % COUNTERS);
                    assert!(
                        store.push_pop(&k, &VALUE),
                        "a list emptied under its pusher"
                    );
                    ops += 1;
                }
            }
            ops += 1;
        }
    }
    (ops, incrs)
}

/// Shared between the parent and its forked workers: start and stop flags, per-worker counts.
struct Board {
    map: gomutex::shm::Mapping,
}

impl Board {
    fn new() -> Self {
        Self {
            map: gomutex::shm::Mapping::anonymous(4096).unwrap(),
        }
    }
    fn at(&self, i: usize) -> &AtomicU64 {
        &self.map.shared_slice::<AtomicU64>(0, 512).unwrap()[i]
    }
}

/// Operations per second of `procs` forked processes running `work` on the store `open`
/// gives each for `ms`.
fn measure<S: Store>(procs: usize, ms: u64, work: Work, open: impl Fn() -> S) -> (f64, u64) {
    let board = Board::new();
    let mut pids = Vec::new();
    for p in 0..procs {
        // SAFETY: the bench is single-threaded when it forks; the child leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let mut s = open();
            board.at(2).fetch_add(1, SeqCst);
            while board.at(0).load(SeqCst) == 0 {
                std::hint::spin_loop();
            }
            let (ops, incrs) = run(&mut s, work, 0x9e37_79b9 * (p as u64 + 1), board.at(1));
            board.at(8 + 2 * p).store(ops, SeqCst);
            board.at(9 + 2 * p).store(incrs, SeqCst);
            // SAFETY: leaving the child.
            unsafe { libc::_exit(0) };
        }
        pids.push(pid);
    }
    while board.at(2).load(SeqCst) < procs as u64 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Instant::now();
    board.at(0).store(1, SeqCst);
    std::thread::sleep(Duration::from_millis(ms));
    board.at(1).store(1, SeqCst);
    for pid in pids {
        let mut st = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "worker failed"
        );
    }
    let wall = t.elapsed().as_secs_f64();
    let ops: u64 = (0..procs).map(|p| board.at(8 + 2 * p).load(SeqCst)).sum();
    let incrs: u64 = (0..procs).map(|p| board.at(9 + 2 * p).load(SeqCst)).sum();
    (ops as f64 / wall, incrs)
}

fn preload(store: &mut impl Store) {
    let mut k = Vec::new();
    for i in 0..KEYS {
        key(&mut k, "key", i);
        store.set(&k, &VALUE);
    }
}

/// Sum of every counter.
fn counters(store: &mut impl Store) -> i64 {
    let mut k = Vec::new();
    (0..COUNTERS)
        .map(|i| {
            key(&mut k, "ctr", i);
            store.incr(&k) - 1
        })
        .sum()
}

/// Bytes per entry of 10-byte keys and 32-byte values: the dictionary's zone over the entries
/// that fit it, and Redis's `used_memory` growth over the entries added.
fn memory(server: Option<&Server>) {
    let cap = 16 << 20;
    let d = ShmDict::anonymous(cap).unwrap();
    let mut n = 0u64;
    let mut k = Vec::new();
    loop {
        key(&mut k, "mem", 1_000_000 + n);
        if d.safe_add(&k, &VALUE, None, 0).is_err() {
            break;
        }
        n += 1;
    }
    let payload = k.len() + VALUE.len();
    println!(
        "memory: ShmDict {:.1} bytes/entry ({n} entries of {payload} bytes fill {} MiB; \
         chunks {:.1} bytes/entry)",
        cap as f64 / n as f64,
        cap >> 20,
        d.stats().used_bytes as f64 / n as f64
    );
    if let Some(s) = server {
        let mut r = Redis::connect(&s.sock).unwrap();
        r.cmd(&[b"FLUSHALL"]);
        let before = r.used_memory();
        for i in 0..n {
            key(&mut k, "mem", 1_000_000 + i);
            r.cmd(&[b"SET", &k, &VALUE]);
        }
        let after = r.used_memory();
        println!(
            "memory: Redis   {:.1} bytes/entry (used_memory growth over {n} entries)",
            (after - before) as f64 / n as f64
        );
        r.cmd(&[b"FLUSHALL"]);
    }
}

// ------------------------------------------------------------------ one process's latency

/// Latency rows: one operation in one process, on a dictionary of `KEYS` keys of 10 bytes
/// (`lat:000123`) holding 32-byte values, at random hits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lat {
    /// `get`: the value copied out (an owned `Item`).
    Get,
    /// `get_with`: the value borrowed in place (its length read).
    GetWith,
    /// `incr` of an existing integer.
    Incr,
    /// `set` of a value of the size already stored (written in place).
    Set,
    /// `RateLimiter::check` of a known key (allowed: a rate and a burst no key reaches).
    Check,
    /// Floors of `check`: the clock read it makes (`CLOCK_MONOTONIC`, as `Instant::now`)...
    Clock,
    /// ...and the uncontended write side of a `ShmRwLock` (a shard's lock), taken and released.
    WriteLock,
}

const LAT_ROWS: [Lat; 7] = [
    Lat::Get,
    Lat::GetWith,
    Lat::Incr,
    Lat::Set,
    Lat::Check,
    Lat::Clock,
    Lat::WriteLock,
];

impl Lat {
    fn name(self) -> &'static str {
        match self {
            Lat::Get => "get",
            Lat::GetWith => "get_with",
            Lat::Incr => "incr",
            Lat::Set => "set",
            Lat::Check => "check",
            Lat::Clock => "clock",
            Lat::WriteLock => "write_lock",
        }
    }
}

/// The keys of the latency rows, and a random order of hits (`KEYS` × 4 of them).
fn lat_keys() -> (Vec<[u8; 10]>, Vec<u32>) {
    let keys = (0..KEYS)
        .map(|i| {
            let mut k = [0u8; 10];
            k.copy_from_slice(format!("lat:{i:06}").as_bytes());
            k
        })
        .collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let order = (0..4 * KEYS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % KEYS) as u32
        })
        .collect();
    (keys, order)
}

/// The stores of the latency rows, filled.
struct LatStores {
    dict: ShmDict,
    limiter: RateLimiter,
    lock: ShmRwLock<u64>,
    keys: Vec<[u8; 10]>,
    order: Vec<u32>,
}

impl LatStores {
    fn new() -> Self {
        let (keys, order) = lat_keys();
        let dict = ShmDict::anonymous(64 << 20).unwrap();
        let limiter = RateLimiter::new(ShmDict::anonymous(64 << 20).unwrap(), u32::MAX, u32::MAX)
            .unwrap()
            .nodelay();
        for (i, k) in keys.iter().enumerate() {
            dict.set(k, &VALUE, None, 0).unwrap();
            let mut c = *k;
            c[..4].copy_from_slice(b"ctr:");
            dict.set(c, i as i64, None, 0).unwrap();
            limiter.check(k);
        }
        Self {
            dict,
            limiter,
            lock: ShmRwLock::anonymous(0).unwrap(),
            keys,
            order,
        }
    }
}

/// `n` operations of `row` at the hits' order from `start`: the loop a latency row times, and
/// the one `callgrind --toggle-collect='*lat_loop*'` counts.
#[inline(never)]
fn lat_loop(s: &LatStores, row: Lat, start: usize, n: usize) -> u64 {
    let mut acc = 0u64;
    let order = &s.order;
    for i in 0..n {
        let k = &s.keys[order[(start + i) % order.len()] as usize];
        acc = acc.wrapping_add(match row {
            Lat::Get => s.dict.get(k).unwrap().unwrap().flags as u64,
            Lat::GetWith => s
                .dict
                .get_with(k, |v, _| match v {
                    Value::Bytes(b) => b.len() as u64,
                    Value::Int(_) => 0,
                })
                .unwrap()
                .unwrap(),
            Lat::Incr => {
                let mut c = *k;
                c[..4].copy_from_slice(b"ctr:");
                s.dict.incr(c, 1, None, None).unwrap().value as u64
            }
            Lat::Set => s.dict.set(k, &VALUE, None, 0).unwrap() as u64,
            Lat::Check => {
                assert_eq!(s.limiter.check(k), gomutex::dict::Decision::Allowed);
                1
            }
            Lat::Clock => {
                black_box(Instant::now());
                0
            }
            Lat::WriteLock => *s.lock.write().unwrap(),
        });
    }
    black_box(acc)
}

/// ns per operation of each row: the median of `slices` slices of `n` operations, the rows
/// alternated slice by slice (so a change of load reaches every row alike).
fn latency(s: &LatStores, rows: &[Lat], slices: usize, n: usize) -> Vec<f64> {
    let mut t: Vec<Vec<f64>> = vec![Vec::new(); rows.len()];
    let mut at = 0;
    for _ in 0..slices {
        for (r, &row) in rows.iter().enumerate() {
            let start = Instant::now();
            lat_loop(s, row, at, n);
            t[r].push(start.elapsed().as_nanos() as f64 / n as f64);
            at += n;
        }
    }
    t.iter().map(|v| common::median(v)).collect()
}

fn main() {
    let bench = common::Args::get().bench;
    let rounds = if bench {
        common::env_or("DICT_ROUNDS", 5)
    } else {
        1
    };
    let ms = if bench {
        common::env_or("DICT_MS", 300)
    } else {
        20
    };
    // One row alone, for callgrind: `DICT_LAT=get_with DICT_LAT_N=100000`.
    if let Ok(name) = std::env::var("DICT_LAT") {
        let row = *LAT_ROWS
            .iter()
            .find(|r| r.name() == name)
            .expect("DICT_LAT: a row");
        let s = LatStores::new();
        lat_loop(&s, row, 0, 1000);
        lat_loop(&s, row, 1000, common::env_or("DICT_LAT_N", 100_000));
        return;
    }
    if std::env::var_os("DICT_ITER_ONLY").is_some() {
        dict_iter::row(100_000, common::env_or("DICT_ITER_ROUNDS", 5));
        return;
    }
    let s = LatStores::new();
    let ns = latency(
        &s,
        &LAT_ROWS,
        if bench { 5 } else { 1 },
        if bench { 200_000 } else { 1000 },
    );
    println!("one process, {KEYS} keys of 10 bytes, 32-byte values, random hits (ns/op, median of slices):");
    for (row, ns) in LAT_ROWS.iter().zip(&ns) {
        println!("  {:<10} {ns:>7.1}", row.name());
    }
    s.dict.check().unwrap();
    drop(s);
    if std::env::var_os("DICT_LATENCY_ONLY").is_some() {
        return;
    }
    let server = Server::start();
    if server.is_none() {
        println!("dict: redis-server did not start: Redis rows skipped");
    }
    let single = ShmDict::anonymous(64 << 20).unwrap();
    let sharded = ShmDict::anonymous_with(64 << 20, DictConfig::new().shards(16)).unwrap();
    preload(&mut &single);
    preload(&mut &sharded);
    if let Some(s) = &server {
        preload(&mut Redis::connect(&s.sock).unwrap());
    }
    // incr operations done per contender, to check against the counters at the end.
    let mut incr_done = [0u64; 3];
    println!(
        "{:<6} {:>5} {:>14} {:>14} {:>14} {:>10} {:>10}",
        "work", "procs", "redis op/s", "1 lock op/s", "16 shards op/s", "1lock/redis", "16sh/1lock"
    );
    for work in [Work::Get, Work::Get90, Work::Incr, Work::List] {
        // Medians of each contender at 1 process, for the scaling line.
        let mut one = [f64::NAN; 3];
        for procs in [1usize, 2, 8] {
            let mut res: [Vec<f64>; 3] = Default::default();
            for _ in 0..rounds {
                for (c, r) in res.iter_mut().enumerate() {
                    let (ops, incrs) = match c {
                        0 => match &server {
                            Some(s) => {
                                measure(procs, ms, work, || Redis::connect(&s.sock).unwrap())
                            }
                            None => continue,
                        },
                        1 => measure(procs, ms, work, || &single),
                        _ => measure(procs, ms, work, || &sharded),
                    };
                    incr_done[c] += incrs;
                    r.push(ops);
                }
            }
            let med: Vec<f64> = res.iter().map(|r| common::median(r)).collect();
            let vs_redis = if res[0].is_empty() {
                f64::NAN
            } else {
                common::paired_ratio(&res[1], &res[0])
            };
            println!(
                "{:<6} {:>5} {:>14.0} {:>14.0} {:>14.0} {:>10.1} {:>10.2}",
                match work {
                    Work::Get => "get",
                    Work::Get90 => "get90",
                    Work::Incr => "incr",
                    Work::List => "list",
                },
                procs,
                med[0],
                med[1],
                med[2],
                vs_redis,
                common::paired_ratio(&res[2], &res[1])
            );
            if procs == 1 {
                one.copy_from_slice(&med);
            } else {
                println!(
                    "{:<6} {:>5} {:>14} {:>13.2}x {:>13.2}x   ({procs} processes / 1 process, 1 lock)",
                    "",
                    "",
                    "",
                    med[1] / one[1],
                    med[2] / one[1]
                );
            }
        }
    }
    // Every incr counted, none lost: the counters against the workers' counts.
    assert_eq!(counters(&mut &single) as u64, incr_done[1]);
    assert_eq!(counters(&mut &sharded) as u64, incr_done[2]);
    if let Some(s) = &server {
        assert_eq!(
            counters(&mut Redis::connect(&s.sock).unwrap()) as u64,
            incr_done[0]
        );
    }
    single.check().unwrap();
    sharded.check().unwrap();
    memory(server.as_ref());
    if bench {
        dict_iter::row(100_000, common::env_or("DICT_ITER_ROUNDS", 5));
    } else {
        dict_iter::row(10_000, 1);
    }
}
