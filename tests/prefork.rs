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

mod common;
#[path = "prefork/harness.rs"]
mod harness;
use harness::{
    check_totals, connect, example_binary, get_close, get_status, json_num, load, pairs,
    read_response, read_response_with_headers, row_num, workers, Server, Status, IO_TIMEOUT,
};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

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

/// A backend for `--upstream`: answers every request on its keep-alive connections with
/// `body` (HTTP/1.1, `Content-Length`), counting them.
fn backend(body: &'static str) -> (SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = served.clone();
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let count = count.clone();
            thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                loop {
                    let mut line = String::new();
                    loop {
                        line.clear();
                        match r.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Backend: {body}\r\n\r\n{body}",
                        body.len()
                    );
                    if w.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, served)
}

/// An address nothing listens on (connections are refused).
fn refused() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `--upstream`: requests go to the backends by weight over both workers (one zone), a peer
/// that refuses is tried once, reported, retried on the next and then skipped (the client
/// sees no error), `/status` shows every peer, and with no live peer the answer is `502`.
#[test]
fn upstream_proxies_by_weight_and_skips_a_dead_peer() {
    let (a, na) = backend("A");
    let (b, nb) = backend("B");
    let dead = refused();
    let (ua, ub, ud) = (
        format!("{a},weight=2"),
        b.to_string(),
        format!("{dead},max_fails=1,fail_timeout=60000"),
    );
    let srv = Server::start_with(
        "mutex",
        &["--upstream", &ua, "--upstream", &ub, "--upstream", &ud],
        &[],
    );
    // Half on one keep-alive connection, half on new ones (so both workers may serve).
    let mut bodies = String::new();
    let s = connect(srv.addr);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..9 {
        w.write_all(b"GET /x HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let (status, body, close) = read_response(&mut r).expect("response");
        assert_eq!((status, close), (200, false), "{body}");
        bodies.push_str(&body);
    }
    for _ in 0..9 {
        let mut s = connect(srv.addr);
        s.write_all(b"GET /y HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            .unwrap();
        let (status, body, close) = read_response(&mut BufReader::new(s)).expect("response");
        assert_eq!((status, close), (200, true), "{body}");
        bodies.push_str(&body);
    }
    let (ca, cb) = (bodies.matches('A').count(), bodies.matches('B').count());
    assert_eq!(ca + cb, 18, "{bodies}");
    // 2:1 once the dead peer is skipped; its one failed pick went to the next peer.
    assert!((11..=13).contains(&ca), "{bodies}");
    use std::sync::atomic::Ordering::SeqCst;
    assert_eq!(na.load(SeqCst) + nb.load(SeqCst), 18);
    let text = get_status(srv.addr);
    let line = |addr: SocketAddr| {
        let l = text
            .lines()
            .find(|l| l.starts_with(&format!("upstream {addr} ")))
            .unwrap_or_else(|| panic!("no line for {addr}: {text}"));
        pairs(&l.replacen(&addr.to_string(), "", 1))
    };
    let d = line(dead);
    assert_eq!((d["fails"], d["unavailable"]), (1, 1), "{text}");
    assert_eq!(
        (line(a)["weight"], line(a)["conns"], line(b)["fails"]),
        (2, 0, 0)
    );
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);

    // Only a dead peer: 502, on a connection that stays open.
    let dead_only = format!("{},max_fails=1", refused());
    let srv = Server::start_with("mutex", &["--upstream", &dead_only], &[]);
    let s = connect(srv.addr);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..2 {
        w.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let (status, _, close) = read_response(&mut r).expect("response");
        assert_eq!((status, close), (502, false));
    }
    assert!(srv.stop().status.success());
}

#[test]
fn upstream_flag_errors() {
    for bad in [
        "nohost",
        "127.0.0.1:1,weight=0",
        "127.0.0.1:1,weight=x",
        "127.0.0.1:1,spare",
    ] {
        let out = Command::new(example_binary())
            .args(["--upstream", bad])
            .output()
            .expect("run prefork");
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--upstream"), "{bad}: {err}");
    }
}
