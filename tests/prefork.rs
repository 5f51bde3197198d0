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

/// The example's parser of a backend's answers, compiled here so its unit tests run.
#[allow(dead_code)]
#[path = "../examples/prefork/backend.rs"]
mod backend;
/// The example's `--config` and `--limit-req` pieces and the proxy they use, compiled here to
/// test the master's side of a reload (`reload::Reloader`) directly.
#[allow(dead_code)]
#[path = "../examples/prefork/limit.rs"]
mod limit;
#[allow(dead_code)]
#[path = "../examples/prefork/proxy.rs"]
mod proxy;
#[allow(dead_code)]
#[path = "../examples/prefork/reload.rs"]
mod reload;
#[allow(dead_code)]
#[path = "../examples/prefork/sys.rs"]
mod sys;

#[path = "prefork/chaos.rs"]
mod chaos;
mod common;
#[path = "prefork/reload.rs"]
mod config_reload;
#[path = "prefork/harness.rs"]
mod harness;
#[path = "prefork/limits.rs"]
mod limits;
#[path = "prefork/spread.rs"]
mod spread;
#[path = "prefork/upstream.rs"]
mod upstream;
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
