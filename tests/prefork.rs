//! The prefork example (`examples/prefork/`) as a black box: started as a child process on a
//! free loopback port, driven by a small HTTP client, stopped with SIGINT, and checked through
//! its `--stats-json` output.
//!
//! The example binary is the one `cargo test` builds next to the test binaries
//! (`target/<profile>/examples/prefork`); run `cargo test` (not only `--test prefork`) after
//! changing the example, or `cargo build --example prefork [--release]` first.
// The example it drives is Linux only, and needs `derive` (its `required-features`).
#![cfg(all(target_os = "linux", feature = "derive"))]

/// The example's HTTP parser, compiled here too so its unit tests run with `cargo test`
/// (examples' own tests do not run by default).
#[allow(dead_code)]
#[path = "../examples/prefork/http.rs"]
mod http;

/// The example's shared stats region, compiled here to test the live counts the spread rule
/// reads (and the master's retiring of a dead worker's slot) directly.
#[allow(dead_code)]
#[path = "../examples/prefork/shared.rs"]
mod shared;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Longest any single network operation of the client may take.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/prefork-<hash> -> target/<profile>/examples/prefork
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = profile_dir.join("examples").join("prefork");
    assert!(
        bin.exists(),
        "{} not found: build it with `cargo test` (which builds the examples) or \
         `cargo build --example prefork` in the same profile",
        bin.display()
    );
    bin
}

/// A running prefork server.
struct Server {
    child: Option<Child>,
    addr: SocketAddr,
    stats: PathBuf,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    stderr_lines: mpsc::Receiver<String>,
}

/// What a stopped server left.
struct Stopped {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    json: String,
}

fn collect<R: Read + Send + 'static>(
    r: R,
    into: Arc<Mutex<String>>,
    lines: Option<mpsc::Sender<String>>,
) {
    thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            into.lock().unwrap().push_str(&line);
            into.lock().unwrap().push('\n');
            if let Some(tx) = &lines {
                let _ = tx.send(line);
            }
        }
    });
}

impl Server {
    fn start(mode: &str, env: &[(&str, &str)]) -> Server {
        Self::start_with(mode, &[], env)
    }

    /// `start` with extra command-line arguments.
    fn start_with(mode: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let stats = std::env::temp_dir().join(format!(
            "prefork-test-{}-{mode}-{}.json",
            std::process::id(),
            rand_suffix()
        ));
        let _ = std::fs::remove_file(&stats);
        let mut cmd = Command::new(example_binary());
        cmd.args(["--addr", "127.0.0.1:0", "--workers", "2", "--accept", mode])
            .arg("--stats-json")
            .arg(&stats)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn prefork");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (out_tx, out_rx) = mpsc::channel();
        let (err_tx, err_rx) = mpsc::channel();
        collect(child.stdout.take().unwrap(), stdout.clone(), Some(out_tx));
        collect(child.stderr.take().unwrap(), stderr.clone(), Some(err_tx));
        let line = out_rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!("no 'listening' line; stderr: {}", stderr.lock().unwrap())
            });
        // "prefork: listening on http://127.0.0.1:PORT (2 workers, accept MODE)"
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        Server {
            child: Some(child),
            addr,
            stats,
            stdout,
            stderr,
            stderr_lines: err_rx,
        }
    }

    /// Wait (bounded) for a stderr line containing `needle`.
    fn wait_stderr(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => {}
                Err(_) => panic!(
                    "no stderr line with {needle:?} within {timeout:?}; stderr: {}",
                    self.stderr.lock().unwrap()
                ),
            }
        }
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// SIGINT, then wait (bounded) for the master to exit.
    fn stop(mut self) -> Stopped {
        let mut child = self.child.take().unwrap();
        // SAFETY: plain syscall on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("prefork did not stop within 10 s of SIGINT");
            }
            thread::sleep(Duration::from_millis(10));
        };
        // Let the reader threads drain the pipes.
        thread::sleep(Duration::from_millis(50));
        let json = std::fs::read_to_string(&self.stats).unwrap_or_default();
        let _ = std::fs::remove_file(&self.stats);
        Stopped {
            status,
            stdout: self.stdout.lock().unwrap().clone(),
            stderr: self.stderr.lock().unwrap().clone(),
            json,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // A failed test: take the workers down too (they also exit when the master's pipe
            // closes).
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
        ^ Instant::now().elapsed().as_nanos() as u64
        ^ (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64)
}

/// Read one HTTP response (status line, headers, `Content-Length` body) from `r`.
fn read_response(r: &mut BufReader<TcpStream>) -> std::io::Result<(u16, String, bool)> {
    read_response_with_headers(r).map(|(status, _, body, close)| (status, body, close))
}

/// [`read_response`], with the header lines as `(name, value)`, trimmed.
#[allow(clippy::type_complexity)]
fn read_response_with_headers(
    r: &mut BufReader<TcpStream>,
) -> std::io::Result<(u16, Vec<(String, String)>, String, bool)> {
    let mut headers = Vec::new();
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut len = 0usize;
    let mut close = false;
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        if h == "\r\n" || h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':').unwrap_or((&h, ""));
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
        if name.eq_ignore_ascii_case("content-length") {
            len = value.trim().parse().unwrap_or(0);
        }
        if name.eq_ignore_ascii_case("connection") && value.trim().eq_ignore_ascii_case("close") {
            close = true;
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok((
        status,
        headers,
        String::from_utf8_lossy(&body).into_owned(),
        close,
    ))
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// One request on a new connection with `Connection: close`; the request is sent in two
/// pieces to exercise partial reads.
fn get_close(addr: SocketAddr) {
    let mut s = connect(addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n").unwrap();
    s.write_all(b"Connection: close\r\n\r\n").unwrap();
    let mut r = BufReader::new(s);
    let (status, body, close) = read_response(&mut r).expect("response");
    assert_eq!((status, body.as_str(), close), (200, "ok", true));
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).expect("server closes");
    assert!(rest.is_empty());
}

/// `n` requests on one keep-alive connection.
fn get_keep_alive(addr: SocketAddr, n: usize) {
    let s = connect(addr);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..n {
        w.write_all(b"GET /k HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let (status, body, close) = read_response(&mut r).expect("response");
        assert_eq!((status, body.as_str(), close), (200, "ok", false));
    }
}

/// `GET /status` on a new connection with `Connection: close`: the page.
fn get_status(addr: SocketAddr) -> String {
    let mut s = connect(addr);
    s.write_all(b"GET /status HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (status, body, close) = read_response(&mut BufReader::new(s)).expect("response");
    assert_eq!((status, close), (200, true), "{body}");
    body
}

/// The status page, parsed: nginx's three stub_status figures, the worker lines' `name value`
/// pairs, and the `name value` pairs of the line that starts with `line` (if there is one).
struct Status {
    text: String,
    active: u64,
    accepts: u64,
    handled: u64,
    requests: u64,
    workers: Vec<std::collections::HashMap<String, u64>>,
}

/// `name value name value ...` after the first word.
fn pairs(line: &str) -> std::collections::HashMap<String, u64> {
    let words: Vec<&str> = line.split_whitespace().skip(1).collect();
    assert!(words.len().is_multiple_of(2), "odd pairs in {line:?}");
    words
        .chunks(2)
        .map(|p| {
            let v = p[1]
                .parse()
                .unwrap_or_else(|_| panic!("{:?} in {line:?}", p[1]));
            (p[0].to_string(), v)
        })
        .collect()
}

impl Status {
    fn parse(text: String) -> Self {
        let lines: Vec<&str> = text.lines().collect();
        let active = lines[0]
            .strip_prefix("Active connections: ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no active connections in {text}"));
        assert_eq!(lines[1], "server accepts handled requests", "{text}");
        let n: Vec<u64> = lines[2]
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(n.len(), 3, "{text}");
        let workers = lines
            .iter()
            .filter(|l| l.starts_with("worker "))
            .map(|l| {
                let mut p = pairs(&l["worker".len()..]);
                p.insert(
                    "index".into(),
                    l.split_whitespace().nth(1).unwrap().parse().unwrap(),
                );
                p
            })
            .collect();
        Status {
            active,
            accepts: n[0],
            handled: n[1],
            requests: n[2],
            workers,
            text,
        }
    }

    /// The pairs of the line that starts with `name`.
    fn line(&self, name: &str) -> std::collections::HashMap<String, u64> {
        let l = self
            .text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in {}", self.text));
        pairs(l)
    }
}

/// `close` requests with `Connection: close` from `threads` client threads, plus `ka_conns`
/// keep-alive connections with `ka_reqs` requests each. Returns the requests sent.
fn load(addr: SocketAddr, threads: usize, close: usize, ka_conns: usize, ka_reqs: usize) -> u64 {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let per = close / threads + usize::from(t < close % threads);
            thread::spawn(move || (0..per).for_each(|_| get_close(addr)))
        })
        .chain((0..ka_conns).map(|_| thread::spawn(move || get_keep_alive(addr, ka_reqs))))
        .collect();
    for h in handles {
        h.join().expect("client thread");
    }
    (close + ka_conns * ka_reqs) as u64
}

/// `"key": N` inside the object that starts at `"section"`.
fn json_num(json: &str, section: &str, key: &str) -> u64 {
    let s = &json[json
        .find(&format!("\"{section}\""))
        .unwrap_or_else(|| panic!("no {section} in {json}"))..];
    let s = &s[s
        .find(&format!("\"{key}\": "))
        .unwrap_or_else(|| panic!("no {key} in {json}"))
        + key.len()
        + 4..];
    s.split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{key} not a number in {json}"))
}

/// The per-worker rows.
fn workers(json: &str) -> Vec<&str> {
    json.lines().filter(|l| l.contains("\"pid\":")).collect()
}

fn row_num(row: &str, key: &str) -> u64 {
    json_num(row, "pid", key)
}

/// Checks every mode needs: clean exit, totals equal to what was sent and to the sum of the
/// rows, and the table printed.
fn check_totals(out: &Stopped, sent: u64, connections: u64) {
    assert!(
        out.status.success(),
        "exit {:?}; stderr: {}",
        out.status,
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "stderr: {}", out.stderr);
    assert_eq!(
        json_num(&out.json, "totals", "requests"),
        sent,
        "{}",
        out.json
    );
    assert_eq!(
        json_num(&out.json, "totals", "accepted"),
        connections,
        "{}",
        out.json
    );
    let rows = workers(&out.json);
    assert!(rows.len() >= 2, "{}", out.json);
    let sum: u64 = rows.iter().map(|r| row_num(r, "requests")).sum();
    assert_eq!(sum, sent);
    assert!(
        out.stdout.contains("accepted") && out.stdout.contains("total"),
        "{}",
        out.stdout
    );
}

#[test]
fn mutex_mode_answers_every_request_and_stats_add_up() {
    let t = Instant::now();
    let srv = Server::start("mutex", &[]);
    let sent = load(srv.addr, 4, 2000, 4, 100);
    let out = srv.stop();
    check_totals(&out, sent, 2000 + 4);
    let acquisitions = json_num(&out.json, "totals", "lock_acquisitions");
    assert!(acquisitions > 0, "{}", out.json);
    assert_eq!(json_num(&out.json, "totals", "owner_died"), 0);
    // One lock holder at a time: a connection never wakes a worker for nothing.
    assert_eq!(
        json_num(&out.json, "totals", "wasted_wakeups"),
        0,
        "{}",
        out.json
    );
    eprintln!("mutex: {sent} requests in {:?}", t.elapsed());
}

/// Issue 26, item 3: `GET /status` answers nginx's stub_status figures, per-worker lines and
/// the accept lock's statistics, and they move as the traffic says: `n` more connections and
/// requests (plus the first status request), and more lock acquisitions.
#[test]
fn status_page_counts_connections_requests_and_the_lock() {
    let srv = Server::start("mutex", &[]);
    let first = Status::parse(get_status(srv.addr));
    // Its own connection is accepted and open; no request was answered before it.
    assert_eq!(first.requests, 0, "{}", first.text);
    assert!(first.accepts >= 1 && first.active >= 1, "{}", first.text);
    assert_eq!(first.handled, first.accepts);
    assert_eq!(first.workers.len(), 2, "{}", first.text);
    let lock1 = first.line("accept_lock");
    assert!(lock1["acquisitions"] >= 1, "{}", first.text);
    let n = 50;
    load(srv.addr, 2, n, 0, 0);
    let second = Status::parse(get_status(srv.addr));
    let n = n as u64;
    // The first status request, the `n` others; this one is counted once answered.
    assert_eq!(second.requests, first.requests + 1 + n, "{}", second.text);
    // The `n` connections and this one.
    assert_eq!(second.accepts, first.accepts + n + 1, "{}", second.text);
    assert_eq!(second.handled, second.accepts);
    let per_worker: u64 = second.workers.iter().map(|w| w["accepted"]).sum();
    assert_eq!(per_worker, second.accepts, "{}", second.text);
    let lock2 = second.line("accept_lock");
    assert!(
        lock2["acquisitions"] > lock1["acquisitions"],
        "{}",
        second.text
    );
    assert!(lock2["contended"] <= lock2["acquisitions"]);
    assert!(lock2["slept"] <= lock2["contended"]);
    assert!(lock2["worst_wait_ns"] <= lock2["total_wait_ns"]);
    assert_eq!(lock2["owner_deaths"], 0, "{}", second.text);
    assert!(
        !second.text.contains("limit_req"),
        "no --limit-req: {}",
        second.text
    );
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert_eq!(json_num(&out.json, "totals", "requests"), n + 2);
}

#[test]
fn every_other_accept_mode_serves() {
    for mode in ["blocking", "none", "exclusive", "reuseport"] {
        let t = Instant::now();
        let srv = Server::start(mode, &[]);
        let sent = load(srv.addr, 2, 300, 2, 50);
        let out = srv.stop();
        check_totals(&out, sent, 300 + 2);
        let acq = json_num(&out.json, "totals", "lock_acquisitions");
        if mode == "blocking" {
            assert!(acq > 0);
        } else {
            assert_eq!(acq, 0, "{mode}: no lock in this mode");
        }
        if mode == "reuseport" || mode == "blocking" {
            assert_eq!(
                json_num(&out.json, "totals", "wasted_wakeups"),
                0,
                "{mode}: {}",
                out.json
            );
        }
        eprintln!("{mode}: {sent} requests in {:?}", t.elapsed());
    }
}

/// A worker is killed with SIGKILL while it holds the accept lock (the test hook makes it hold
/// the lock for a long time once): service must go on, the lock must be recovered (by the
/// master's force_unlock after waitpid, or by owner-death detection), and the stats must show
/// it.
fn killed_holder_recovers(mode: &str) {
    let t = Instant::now();
    let srv = Server::start(mode, &[("PREFORK_TEST_HOLD_MS", "20000")]);
    let line = srv.wait_stderr("test hook: worker", Duration::from_secs(10));
    let victim: i32 = line
        .split("worker ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"));
    assert_ne!(victim, srv.pid());
    // A request made while the lock is held and its holder asleep: it waits in the backlog.
    let addr = srv.addr;
    let stalled = thread::spawn(move || get_close(addr));
    thread::sleep(Duration::from_millis(200));
    // SAFETY: plain syscall; `victim` is a worker of our own child.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let killed_at = Instant::now();
    stalled
        .join()
        .expect("the stalled request is answered after the kill");
    let recovery = killed_at.elapsed();
    assert!(
        recovery < Duration::from_secs(5),
        "recovery took {recovery:?}"
    );
    srv.wait_stderr("respawning", Duration::from_secs(5));
    let sent = 1 + load(srv.addr, 2, 200, 1, 20);
    // The status page keeps the killed worker's counts and shows the lock's owner death.
    let status = Status::parse(get_status(srv.addr));
    assert_eq!(status.requests, sent, "{}", status.text);
    assert_eq!(status.accepts, 1 + 200 + 1 + 1, "{}", status.text);
    let lock = status.line("accept_lock");
    assert!(lock["owner_deaths"] >= 1, "{}", status.text);
    assert!(lock["owner_died_reported"] >= 1, "{}", status.text);
    let sent = sent + 1;
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert_eq!(
        json_num(&out.json, "totals", "requests"),
        sent,
        "{}",
        out.json
    );
    // The next owner was told the previous one died.
    assert!(
        json_num(&out.json, "totals", "owner_died") >= 1,
        "{}",
        out.json
    );
    let rows = workers(&out.json);
    assert!(
        rows.iter()
            .any(|r| r.contains(&format!("\"pid\": {victim},")) && r.contains("signal 9")),
        "{}",
        out.json
    );
    assert_eq!(
        rows.len(),
        3,
        "two workers and the respawned one: {}",
        out.json
    );
    eprintln!(
        "{mode}: recovered {recovery:?} after the kill, forced unlocks {}, test took {:?}",
        json_num(&out.json, "totals", "forced_unlocks"),
        t.elapsed()
    );
}

#[test]
fn killed_lock_holder_is_recovered_mutex() {
    killed_holder_recovers("mutex");
}

#[test]
fn killed_lock_holder_is_recovered_blocking() {
    killed_holder_recovers("blocking");
}

fn run_example(args: &[&str]) -> std::process::Output {
    Command::new(example_binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run prefork")
}

#[test]
fn bad_flags_are_usage_errors() {
    for args in [
        &["--accept", "sometimes"][..],
        &["--workers", "0"],
        &["--workers", "many"],
        &["--addr", "localhost"],
        &["--addr"],
        &["--frobnicate"],
        &["--multi-accept=yes"],
        &["--spread-batch", "0"],
        &["--spread-margin", "-1"],
        &["--spread-retry", "soon"],
        &["--no-spread=1"],
        &["--limit-req", "0"],
        &["--limit-req", "fast"],
        &["--limit-req", "10", "--limit-key", "host"],
        &["--limit-req", "10", "--limit-zone", "100"],
        &["--limit-burst", "5"],
        &["--limit-headers"],
        &["--limit-req", "10", "--limit-headers=yes"],
    ] {
        let out = run_example(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("usage:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let out = run_example(&["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--accept MODE"));
}

/// `--limit-req` on one key at a high request rate: the first request and the burst pass,
/// then at most the rate does (counted on the clock around the whole run), over both workers
/// (two connections, so both may serve); the rest are 503s, and the stats count both.
#[test]
fn limit_req_answers_503_over_the_rate_on_one_key() {
    const RATE: u64 = 20;
    const BURST: u64 = 2;
    const PER_CONN: usize = 150;
    let srv = Server::start_with(
        "mutex",
        &[
            "--limit-req",
            "20",
            "--limit-burst",
            "2",
            "--limit-key",
            "uri",
        ],
        &[],
    );
    let addr = srv.addr;
    let t = Instant::now();
    let clients: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(move || {
                let s = connect(addr);
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                let (mut ok, mut limited) = (0u64, 0u64);
                for _ in 0..PER_CONN {
                    // The query is not part of the key.
                    w.write_all(b"GET /k?n=1 HTTP/1.1\r\nHost: test\r\n\r\n")
                        .unwrap();
                    match read_response(&mut r).expect("response") {
                        (200, body, false) if body == "ok" => ok += 1,
                        (503, body, false) if body.is_empty() => limited += 1,
                        other => panic!("unexpected response {other:?}"),
                    }
                }
                (ok, limited)
            })
        })
        .collect();
    let (mut ok, mut limited) = (0, 0);
    for c in clients {
        let (o, l) = c.join().expect("client");
        ok += o;
        limited += l;
    }
    let elapsed_ms = t.elapsed().as_millis() as u64;
    // The status page (not itself limited) has the limiter's decisions.
    let status = Status::parse(get_status(addr));
    let lim = status.line("limit_req");
    assert_eq!(
        (lim["passed"], lim["rejected"]),
        (ok, limited),
        "{}",
        status.text
    );
    assert_eq!(status.requests, ok + limited, "{}", status.text);
    // Another key has its own bucket.
    let s = connect(addr);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    w.write_all(b"GET /other HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut r).expect("response").0, 200);
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let sent = 2 * PER_CONN as u64;
    assert_eq!(ok + limited, sent);
    let most = 1 + BURST + RATE * elapsed_ms / 1000;
    assert!(
        (1 + BURST..=most).contains(&ok),
        "{ok} passed in {elapsed_ms} ms (at most {most})"
    );
    // (Implied by the bound unless the run was slower than the rate itself.)
    if elapsed_ms < (sent - 1 - BURST) * 1000 / RATE {
        assert!(limited > 0, "no 503 in {elapsed_ms} ms");
    }
    assert_eq!(json_num(&out.json, "totals", "limit_passed"), ok + 1);
    assert_eq!(json_num(&out.json, "totals", "limit_rejected"), limited);
    // With the other key's request and the status request.
    assert_eq!(json_num(&out.json, "totals", "requests"), sent + 2);
    let rows: u64 = workers(&out.json)
        .iter()
        .map(|r| row_num(r, "limit_rejected"))
        .sum();
    assert_eq!(rows, limited);
    assert!(out.stdout.contains("limit_503"), "{}", out.stdout);
}

/// `--limit-headers`: every answer to a limited request says where its key stands, from
/// `RateLimiter::throttle` (1 r/s, a burst of 2: 3 requests at once, then a 503 that says to
/// retry in a second, which then succeeds); the status page and a server without the flag send
/// none of these headers.
#[test]
fn limit_headers_tell_the_client_where_its_key_stands() {
    let srv = Server::start_with(
        "mutex",
        &[
            "--limit-req",
            "1",
            "--limit-burst",
            "2",
            "--limit-key",
            "uri",
            "--limit-headers",
        ],
        &[],
    );
    let s = connect(srv.addr);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut get = |path: &str| {
        w.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .unwrap();
        let (status, headers, _, _) = read_response_with_headers(&mut r).expect("response");
        let h = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.parse::<u64>().expect("a number"))
        };
        let limit = ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"].map(h);
        (status, limit, h("Retry-After"))
    };
    let t = Instant::now();
    let answers: Vec<_> = (0..4).map(|_| get("/h")).collect();
    let quick = t.elapsed() < Duration::from_millis(900);
    for (i, (status, [limit, remaining, reset], retry)) in answers.iter().enumerate() {
        let ctx = format!("request {i}: {:?}", answers[i]);
        assert_eq!(*limit, Some(3), "{ctx}");
        if i < 3 {
            assert_eq!((*status, *retry), (200, None), "{ctx}");
            assert_eq!(*remaining, Some(2 - i as u64), "{ctx}");
        } else {
            assert_eq!((*status, *remaining), (503, Some(0)), "{ctx}");
            // One request drained (a second at 1 r/s) lets the next one in.
            assert_eq!(*retry, Some(1), "{ctx}");
        }
        // The requests in excess and one more drained, whole seconds rounded up (exact
        // unless the four requests took most of a second).
        let excess = i.min(2) as u64;
        if quick {
            assert_eq!(*reset, Some(excess + 1), "{ctx}");
        } else {
            assert!((1..=excess + 1).contains(&reset.unwrap()), "{ctx}");
        }
    }
    // After `Retry-After`, the key is served again.
    thread::sleep(Duration::from_secs(1));
    let (status, [_, remaining, _], retry) = get("/h");
    assert_eq!((status, retry), (200, None));
    assert!(remaining.is_some());
    // The status page is not limited and says nothing of a key.
    let (status, limit, retry) = get("/status");
    assert_eq!((status, limit, retry), (200, [None; 3], None));
    assert!(srv.stop().status.success());
    // Without the flag, no such headers.
    let srv = Server::start_with("mutex", &["--limit-req", "1", "--limit-key", "uri"], &[]);
    let s = connect(srv.addr);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for expect in [200, 503] {
        w.write_all(b"GET /h HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let (status, headers, _, _) = read_response_with_headers(&mut r).expect("response");
        assert_eq!(status, expect);
        assert!(
            !headers
                .iter()
                .any(|(n, _)| n.starts_with("RateLimit") || n == "Retry-After"),
            "{headers:?}"
        );
    }
    assert!(srv.stop().status.success());
}

#[test]
fn busy_port_is_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for mode in ["mutex", "reuseport"] {
        let out = run_example(&["--addr", &addr, "--accept", mode, "--workers", "2"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{mode}: {err}");
        assert!(
            err.contains(&format!("cannot listen on {addr}")),
            "{mode}: {err}"
        );
        assert!(err.contains("in use"), "{mode}: {err}");
        assert!(!err.contains("panicked"), "{mode}: {err}");
    }
}

#[test]
fn pipelined_head_and_malformed_requests() {
    let srv = Server::start("reuseport", &[]);
    // Two pipelined requests in one write, the second closing.
    let s = connect(srv.addr);
    let mut w = s.try_clone().unwrap();
    w.write_all(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\nHEAD /b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(s);
    let (status, body, close) = read_response(&mut r).unwrap();
    assert_eq!((status, body.as_str(), close), (200, "ok", false));
    // HEAD: headers only (Content-Length 2 but no body), then the server closes.
    let mut head = String::new();
    r.read_to_string(&mut head).unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head:?}");
    assert!(
        head.contains("Connection: close\r\n") && head.ends_with("\r\n\r\n"),
        "{head:?}"
    );
    // Garbage: 400 and close.
    let mut s = connect(srv.addr);
    s.write_all(b"NOT HTTP AT ALL\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 400 "), "{resp:?}");
    // HTTP/1.0 without keep-alive closes after one response.
    let mut s = connect(srv.addr);
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(
        resp.starts_with("HTTP/1.1 200 OK\r\n") && resp.ends_with("\r\n\r\nok"),
        "{resp:?}"
    );
    let out = srv.stop();
    assert!(out.status.success());
    assert_eq!(json_num(&out.json, "totals", "requests"), 3, "{}", out.json);
    assert_eq!(json_num(&out.json, "totals", "accepted"), 3, "{}", out.json);
}

/// One `Connection: close` request; `false` on any failure (for chaos tests, where a
/// connection owned by a killed worker is reset).
fn try_get_close(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, IO_TIMEOUT) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    if s.write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut r = BufReader::new(s);
    matches!(read_response(&mut r), Ok((200, body, true)) if body == "ok")
}

/// Workers SIGKILLed every 150 ms while clients keep connecting: the server keeps serving
/// (only connections a dying worker owned may fail), every death is reaped and respawned, and
/// every forced unlock is reported to a later owner.
fn chaos(mode: &str) {
    let t = Instant::now();
    let srv = Server::start(mode, &[]);
    let addr = srv.addr;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let (mut ok, mut failed) = (0u64, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if try_get_close(addr) {
                        ok += 1;
                    } else {
                        failed += 1;
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    // Distinct pids: a killed worker may stay a zombie (and listed) until the master reaps it.
    let mut killed = std::collections::HashSet::new();
    for _ in 0..10 {
        thread::sleep(Duration::from_millis(150));
        // A worker of ours: a child of the master (from /proc).
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", srv.pid()))
            .unwrap_or_default();
        let victim = children
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .find(|p| !killed.contains(p));
        if let Some(victim) = victim {
            // SAFETY: plain syscall on a child of our child.
            if unsafe { libc::kill(victim, libc::SIGKILL) } == 0 {
                killed.insert(victim);
            }
        }
    }
    let killed = killed.len();
    thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for c in clients {
        let (o, f) = c.join().unwrap();
        ok += o;
        failed += f;
    }
    // After the storm every request succeeds.
    for _ in 0..50 {
        get_close(addr);
    }
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(killed >= 5, "killed only {killed}");
    assert!(ok > 10 * failed, "{ok} ok, {failed} failed");
    let rows = workers(&out.json);
    assert_eq!(
        rows.iter().filter(|r| r.contains("signal 9")).count(),
        killed,
        "{}",
        out.json
    );
    let forced = json_num(&out.json, "totals", "forced_unlocks");
    assert!(
        json_num(&out.json, "totals", "owner_died") >= forced,
        "{}",
        out.json
    );
    eprintln!(
        "{mode}: {killed} workers killed, {ok} requests ok, {failed} failed, {forced} forced unlocks, {:?}",
        t.elapsed()
    );
}

#[test]
fn workers_killed_repeatedly_under_load_mutex() {
    chaos("mutex");
}

#[test]
fn workers_killed_repeatedly_under_load_blocking() {
    chaos("blocking");
}

/// Open `n` connections at once (all connected before the first request is sent), then one
/// keep-alive request on each; the connections stay open as long as the result lives.
fn keep_alive_burst(addr: SocketAddr, n: usize) -> Vec<(TcpStream, BufReader<TcpStream>)> {
    let streams: Vec<TcpStream> = (0..n).map(|_| connect(addr)).collect();
    let mut conns: Vec<_> = streams
        .into_iter()
        .map(|s| {
            let r = BufReader::new(s.try_clone().unwrap());
            (s, r)
        })
        .collect();
    for (w, _) in &mut conns {
        w.write_all(b"GET /burst HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
    }
    for (_, r) in &mut conns {
        let (status, body, close) = read_response(r).expect("response");
        assert_eq!((status, body.as_str(), close), (200, "ok", false));
    }
    conns
}

/// 50 long-lived connections arriving in one burst end up spread over the 2 workers: each
/// holds at least 0.8 × the mean (20). Without the spread rule (`--no-spread`, nginx's
/// behaviour) one worker takes nearly all of them.
fn keep_alive_burst_is_spread(mode: &str) {
    keep_alive_burst_is_spread_over(mode, 2, 50, 20);
}

/// A burst of `n` long-lived connections over `nworkers` workers: each holds at least `min`.
fn keep_alive_burst_is_spread_over(mode: &str, nworkers: usize, n: usize, min: u64) {
    let w = nworkers.to_string();
    let srv = Server::start_with(mode, &["--workers", &w], &[]);
    let t = Instant::now();
    let conns = keep_alive_burst(srv.addr, n);
    let burst = t.elapsed();
    let out = srv.stop();
    drop(conns);
    check_totals(&out, n as u64, n as u64);
    let rows = workers(&out.json);
    let per: Vec<u64> = rows.iter().map(|r| row_num(r, "accepted")).collect();
    assert_eq!(per.len(), nworkers, "{}", out.json);
    assert!(
        per.iter().all(|&c| c >= min),
        "{mode}: split {per:?}: {}",
        out.json
    );
    // Still open when the workers stopped: the live counts are the same split.
    let live: Vec<u64> = rows.iter().map(|r| row_num(r, "live")).collect();
    assert_eq!(live, per, "{}", out.json);
    eprintln!("{mode}: burst of {n} split {per:?}, answered in {burst:?}");
}

#[test]
fn keep_alive_burst_is_spread_mutex() {
    keep_alive_burst_is_spread("mutex");
}

#[test]
fn keep_alive_burst_is_spread_blocking() {
    keep_alive_burst_is_spread("blocking");
}

/// With 4 workers the rule compares each worker with the least loaded one, not only with the
/// mean (which let three workers sit at mean + margin while the fourth stayed far below): a
/// burst of 52 ends with every worker holding at least 0.8 × the mean (13).
#[test]
fn keep_alive_burst_is_spread_over_4_workers() {
    for mode in ["mutex", "blocking"] {
        keep_alive_burst_is_spread_over(mode, 4, 52, 10);
    }
}

/// A fresh mapping holding only the stats of `workers` workers, as the example lays them out
/// after its accept lock.
fn stats_mapping(workers: usize) -> (gomutex::shm::Mapping, shared::Placed) {
    let mut plan = gomutex::shm::MappingLayout::new();
    let at = shared::Region::place(&mut plan, workers);
    (gomutex::shm::Mapping::anonymous(plan.len()).unwrap(), at)
}

/// The region's live counts: a worker sees the others' sum and number, and a slot the master
/// retired (after `waitpid`) no longer counts, neither its connections nor as a worker.
#[test]
fn retired_slot_drops_out_of_the_load() {
    use std::sync::atomic::Ordering::Relaxed;
    let (map, at) = stats_mapping(3);
    let region = shared::Region::new(&map, at).unwrap();
    for (i, (pid, live)) in [(100, 7u64), (101, 30), (102, 5)].into_iter().enumerate() {
        region.slot(i).reset(pid);
        region.slot(i).live.store(live, Relaxed);
    }
    let load = |own, others, n, least| {
        gomutex::accept::Load::new(own, others, n)
            .with_least(least)
            .with_recent(0, 0)
    };
    assert_eq!(region.load(0, 7), load(7, 35, 2, 5));
    assert_eq!(region.load(2, 5), load(5, 37, 2, 7));
    region.slot(1).retire();
    assert_eq!(region.load(0, 7), load(7, 5, 1, 5));
    assert_eq!(region.load(2, 5), load(5, 7, 1, 7));
    // A respawned worker in the slot starts from zero.
    region.slot(1).reset(103);
    assert_eq!(region.load(0, 7), load(7, 5, 2, 0));
    // Recent accepts: the slot's own and the least of the other live workers'.
    region.slot(0).recent.store(900, Relaxed);
    region.slot(1).recent.store(40, Relaxed);
    region.slot(2).recent.store(700, Relaxed);
    let got = region.load(0, 7);
    assert_eq!((got.own_recent, got.least_recent), (900, Some(40)));
    assert_eq!(region.load(1, 0).least_recent, Some(700));
    region.slot(1).retire(); // drops out of the rate too
    assert_eq!(region.load(0, 7).least_recent, Some(700));
    assert_eq!(region.slot(1).recent.load(Relaxed), 0);
    // Alone: no least.
    region.slot(2).retire();
    assert_eq!(region.load(0, 7), gomutex::accept::Load::new(7, 0, 0));
}

/// A worker that stopped starting event-loop iterations (SIGSTOP, a hung handler) drops out of
/// the others' load once its heartbeat is older than `STALE_AFTER_MS`, so its low count cannot
/// hold them back for good; a fresh heartbeat (or none yet: a worker still starting) counts.
#[test]
fn stale_worker_drops_out_of_the_load() {
    use std::sync::atomic::Ordering::Relaxed;
    let (map, at) = stats_mapping(2);
    let region = shared::Region::new(&map, at).unwrap();
    region.slot(0).reset(100);
    region.slot(1).reset(101);
    region.slot(0).live.store(9, Relaxed);
    let with_other = gomutex::accept::Load::new(9, 0, 1)
        .with_least(0)
        .with_recent(0, 0);
    // No iteration yet: counts (the "starting" rule).
    assert_eq!(region.load(0, 9), with_other);
    region
        .slot(1)
        .heartbeat_ms
        .store(shared::mono_ms(), Relaxed);
    assert_eq!(region.load(0, 9), with_other);
    let old = shared::mono_ms() - 2 * shared::STALE_AFTER_MS;
    region.slot(1).heartbeat_ms.store(old, Relaxed);
    assert_eq!(region.load(0, 9), gomutex::accept::Load::new(9, 0, 0));
    // It iterates again: counts again.
    region
        .slot(1)
        .heartbeat_ms
        .store(shared::mono_ms(), Relaxed);
    assert_eq!(region.load(0, 9), with_other);
}

/// A worker SIGKILLed with keep-alive connections open: its row shows them, its slot is
/// retired, and the next burst goes mostly to its (empty) replacement, filling it up to the
/// survivor instead of splitting evenly as if the dead connections were still counted.
#[test]
fn killed_worker_drops_out_of_the_shared_counts() {
    let srv = Server::start("blocking", &[]);
    let first = keep_alive_burst(srv.addr, 20);
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", srv.pid()))
        .unwrap_or_default();
    let victim: i32 = children
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .next()
        .expect("a worker");
    // SAFETY: plain syscall; `victim` is a worker of our own child.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    srv.wait_stderr("respawning", Duration::from_secs(5));
    // Let the replacement start.
    thread::sleep(Duration::from_millis(200));
    let second = keep_alive_burst(srv.addr, 20);
    // `/status` still counts the victim's accepts (the master folded them into the totals
    // when it reaped it): both bursts and the status connection.
    let status = Status::parse(get_status(srv.addr));
    assert_eq!(status.accepts, 41, "{}", status.text);
    assert_eq!(
        status.workers.len(),
        2,
        "the survivor and the replacement: {}",
        status.text
    );
    let out = srv.stop();
    drop((first, second));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let rows = workers(&out.json);
    assert_eq!(rows.len(), 3, "{}", out.json);
    let dead = rows
        .iter()
        .find(|r| r.contains(&format!("\"pid\": {victim},")))
        .unwrap_or_else(|| panic!("no row for {victim}: {}", out.json));
    assert!(dead.contains("signal 9"), "{}", out.json);
    let dead_live = row_num(dead, "live");
    assert!(
        (5..=15).contains(&dead_live),
        "the victim had its share of the first burst open: {}",
        out.json
    );
    // The survivor kept its first-burst connections; the replacement took the rest of the
    // second burst, so both end near 40 - dead_live halves.
    let survivors: Vec<u64> = rows
        .iter()
        .filter(|r| !r.contains("signal 9"))
        .map(|r| row_num(r, "live"))
        .collect();
    let open = 40 - dead_live;
    assert_eq!(survivors.iter().sum::<u64>(), open, "{}", out.json);
    let min = *survivors.iter().min().unwrap();
    assert!(
        min as f64 >= 0.8 * open as f64 / 2.0,
        "split {survivors:?} of {open} open: {}",
        out.json
    );
}
