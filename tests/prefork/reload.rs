//! `--config FILE` and `SIGHUP`: the upstreams reloaded through shared memory.

use super::upstream::{backend, held_backend};
use super::*;
use gomutex::upstream::{UpstreamConfig, UpstreamZone};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;

/// A configuration file with `text`, removed when dropped.
struct ConfFile(PathBuf);

impl ConfFile {
    fn new(text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{}.conf", common::uniq("prefork-conf")));
        let f = ConfFile(path);
        f.write(text);
        f
    }

    /// Replace the contents whole (a new file renamed over the old: a reader never sees half).
    fn write(&self, text: &str) {
        let tmp = self.0.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.0).unwrap();
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ConfFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn sighup(pid: i32) {
    // SAFETY: plain syscall on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
}

/// A server started with `--config` holding `text`, once every worker serves generation 1
/// (its page then).
fn start_with_config(text: &str) -> (ConfFile, Server, Status) {
    let conf = ConfFile::new(text);
    let path = conf.path().to_str().unwrap();
    let srv = Server::start_with("mutex", &["--config", path], &[]);
    let st = wait_generation(srv.addr, 1);
    (conf, srv, st)
}

/// Poll `/status` (generous deadline, no fixed sleep) until the master published generation
/// `g` and every worker runs (no slot being started) on it; the page.
fn wait_generation(addr: SocketAddr, g: u64) -> Status {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = Status::parse(get_status(addr));
        let on_it = st.workers.len() == 2
            && st
                .workers
                .iter()
                .all(|w| w["pid"] != 0 && w["generation"] == g);
        if st.line("config")["generation"] == g && on_it {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "generation {g} not in effect within 20 s:\n{}",
            st.text
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// One request with `Connection: close` on a new connection: the body (the backend's name).
fn fetch(addr: SocketAddr) -> String {
    let mut s = connect(addr);
    s.write_all(b"GET /n HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (status, body, _) = read_response(&mut BufReader::new(s)).expect("response");
    assert_eq!(status, 200, "{body}");
    body
}

/// Keep-alive clients sending requests back to back across a reload: per client the bodies
/// seen, in order, and the errors (anything but a `200`).
struct Clients {
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicU64>,
    seen: Vec<Arc<Mutex<String>>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Clients {
    fn start(addr: SocketAddr, n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let errors = Arc::new(AtomicU64::new(0));
        let mut seen: Vec<Arc<Mutex<String>>> = Vec::new();
        let mut threads = Vec::new();
        for _ in 0..n {
            let (stop, errors, bodies) = (stop.clone(), errors.clone(), Arc::default());
            seen.push(Arc::clone(&bodies));
            let s = connect(addr);
            threads.push(thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                while !stop.load(SeqCst) {
                    let ok = w
                        .write_all(b"GET /k HTTP/1.1\r\nHost: test\r\n\r\n")
                        .is_ok();
                    match read_response(&mut r) {
                        Ok((200, body, false)) if ok => bodies.lock().unwrap().push_str(&body),
                        other => {
                            eprintln!("keep-alive client: {other:?}");
                            errors.fetch_add(1, SeqCst);
                            return;
                        }
                    }
                }
            }));
        }
        Clients {
            stop,
            errors,
            seen,
            threads,
        }
    }

    /// Wait (bounded) until every client's last answer is `body`.
    fn wait_last(&self, body: char) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.seen.iter().all(|s| s.lock().unwrap().ends_with(body)) {
            assert_eq!(self.errors.load(SeqCst), 0);
            assert!(Instant::now() < deadline, "clients never saw {body}");
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Stop them: the errors, and each client's bodies.
    fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, SeqCst);
        for t in self.threads {
            t.join().unwrap();
        }
        let seen = self
            .seen
            .iter()
            .map(|s| s.lock().unwrap().clone())
            .collect();
        (self.errors.load(SeqCst), seen)
    }
}

/// Issue 37, item 3: `--config` with backend A, rewritten to backend B, `SIGHUP`: every
/// worker switches to generation 2 (`/status`), requests go to B from then on, keep-alive
/// clients sending across the reload see no error and A then B (never A again), the old
/// peer is gone from `/status`, and a worker respawned after the reload serves generation 2.
#[test]
fn sighup_reloads_the_upstreams_without_errors() {
    let (a, na) = backend("A");
    let (b, nb) = backend("B");
    let (conf, srv, st) = start_with_config(&format!("# first\nupstream {a},max_fails=3\n"));
    assert_eq!(st.line("config")["failed_reloads"], 0, "{}", st.text);
    for _ in 0..6 {
        assert_eq!(fetch(srv.addr), "A");
    }
    let clients = Clients::start(srv.addr, 4);
    clients.wait_last('A');

    conf.write(&format!("upstream {b}   # second\n\n"));
    let t = Instant::now();
    sighup(srv.pid());
    let st = wait_generation(srv.addr, 2);
    eprintln!("generation 2 in effect {:?} after SIGHUP", t.elapsed());
    for _ in 0..6 {
        assert_eq!(fetch(srv.addr), "B");
    }
    clients.wait_last('B');
    let (errors, seen) = clients.stop();
    assert_eq!(errors, 0, "{seen:?}");
    for s in &seen {
        // A worker switches once: a connection's answers are A… then B….
        let flips = s.as_bytes().windows(2).filter(|w| w[0] != w[1]).count();
        assert!(s.starts_with('A') && s.ends_with('B') && flips == 1, "{s}");
    }
    assert!(st.text.contains(&format!("upstream {b} ")), "{}", st.text);
    assert!(!st.text.contains(&format!("upstream {a} ")), "{}", st.text);
    assert!(na.load(SeqCst) >= 6 && nb.load(SeqCst) >= 6);

    // A worker killed now is respawned on generation 2.
    let victim = st.workers[0]["pid"] as i32;
    // SAFETY: plain syscall on a worker of our child.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = wait_generation(srv.addr, 2);
        if st.workers.iter().all(|w| w["pid"] as i32 != victim) {
            break;
        }
        assert!(Instant::now() < deadline, "{victim} not respawned");
        thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..6 {
        assert_eq!(fetch(srv.addr), "B");
    }
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(
        out.stderr
            .contains("reloaded the configuration: generation 2"),
        "{}",
        out.stderr
    );
}

/// A request in flight across a reload finishes on the generation it started on: held by
/// backend H (generation 1's only peer) while every worker switches to generation 2 (B), it is
/// answered by H once released, while new requests already go to B.
#[test]
fn request_in_flight_finishes_on_its_generation() {
    let (h, got, release, _closed) = held_backend("H");
    let (b, _) = backend("B");
    let (conf, srv, _) = start_with_config(&format!("upstream {h}\n"));
    let mut held = connect(srv.addr);
    held.write_all(b"GET /h HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    got.recv_timeout(IO_TIMEOUT).expect("H got the request");
    conf.write(&format!("upstream {b}\n"));
    sighup(srv.pid());
    wait_generation(srv.addr, 2);
    for _ in 0..4 {
        assert_eq!(fetch(srv.addr), "B");
    }
    release.send(()).unwrap();
    let (status, body, close) = read_response(&mut BufReader::new(held)).expect("H's answer");
    assert_eq!((status, body.as_str(), close), (200, "H", false));
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
}

/// A file that does not parse on `SIGHUP`: the master names the line, counts the failure and
/// keeps generation 1 serving; the next good file is generation 2.
#[test]
fn bad_config_on_sighup_keeps_the_old_one() {
    let (a, _) = backend("A");
    let (b, _) = backend("B");
    let (conf, srv, _) = start_with_config(&format!("upstream {a}\n"));
    let path = conf.path().to_str().unwrap();
    assert_eq!(fetch(srv.addr), "A");

    conf.write(&format!("upstream {b}\nupstream {b},weight=0\n"));
    sighup(srv.pid());
    let line = srv.wait_stderr("reload failed", Duration::from_secs(20));
    assert!(
        line.contains(&format!("{path}:2: --upstream")) && line.contains("keeping generation 1"),
        "{line}"
    );
    let st = Status::parse(get_status(srv.addr));
    assert_eq!(st.line("config")["failed_reloads"], 1, "{}", st.text);
    let st = wait_generation(srv.addr, 1);
    for _ in 0..6 {
        assert_eq!(fetch(srv.addr), "A");
    }

    conf.write(&format!("upstream {b}\n"));
    sighup(srv.pid());
    wait_generation(srv.addr, 2);
    assert_eq!(fetch(srv.addr), "B");
    assert!(st.text.contains(&format!("upstream {a} ")));
    assert!(srv.stop().status.success());
}

/// At start a bad file is an error naming the line (the server does not start); `--config`
/// with `--upstream` or a limit flag is a usage error.
#[test]
fn config_errors_at_start() {
    let conf = ConfFile::new("# backends\nupstream 127.0.0.1:1\nserver 127.0.0.1:2\n");
    let path = conf.path().to_str().unwrap();
    let out = run_example(&["--addr", "127.0.0.1:0", "--config", path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{path}:3: unknown directive \"server\"")),
        "{err}"
    );
    conf.write("# nothing\n");
    let out = run_example(&["--addr", "127.0.0.1:0", "--config", path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no upstream directive"), "{err}");

    for flags in [["--upstream", "127.0.0.1:1"], ["--limit-req", "10"]] {
        let out = run_example(&["--config", path, flags[0], flags[1]]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("cannot be combined"), "{err}");
    }
    conf.write("upstream 127.0.0.1:1\nlimit_key uri\n");
    let out = run_example(&["--addr", "127.0.0.1:0", "--config", path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("need --limit-req"), "{err}");
}

/// `n` requests for `/lim` back to back on one keep-alive connection: (passed, answered 503,
/// how long they took).
fn burst(addr: SocketAddr, n: usize) -> (u64, u64, Duration) {
    let t = Instant::now();
    let s = connect(addr);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let (mut ok, mut limited) = (0, 0);
    for _ in 0..n {
        w.write_all(b"GET /lim HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        match read_response(&mut r).expect("response") {
            (200, body, false) if body == "A" => ok += 1,
            (503, body, false) if body.is_empty() => limited += 1,
            other => panic!("unexpected response {other:?}"),
        }
    }
    (ok, limited, t.elapsed())
}

/// The file's `limit_req`, `limit_key`, `limit_headers` lines (the flags' parser) are
/// reloaded too: none, then 1 request per second per URI (the rest of a burst answered 503,
/// counted on `/status`), then none again.
#[test]
fn sighup_changes_the_limits() {
    let (a, _) = backend("A");
    let (conf, srv, st) = start_with_config(&format!("upstream {a}\n"));
    assert!(!st.text.contains("limit_req"), "{}", st.text);
    let (ok, limited, _) = burst(srv.addr, 5);
    assert_eq!((ok, limited), (5, 0));

    conf.write(&format!(
        "upstream {a}\nlimit_req 1\nlimit_key uri  # per path\nlimit_headers\n"
    ));
    sighup(srv.pid());
    wait_generation(srv.addr, 2);
    let (ok, limited, took) = burst(srv.addr, 6);
    // The first passes, then one more per whole second the burst took.
    assert!(
        ok >= 1 && ok <= 1 + took.as_secs(),
        "{ok} passed in {took:?}"
    );
    assert_eq!(ok + limited, 6);
    let st = Status::parse(get_status(srv.addr));
    assert_eq!(st.line("limit_req")["rejected"], limited, "{}", st.text);

    conf.write(&format!("upstream {a}\n"));
    sighup(srv.pid());
    let st = wait_generation(srv.addr, 3);
    assert!(!st.text.contains("limit_req"), "{}", st.text);
    let (ok, limited, _) = burst(srv.addr, 5);
    assert_eq!((ok, limited), (5, 0));
    assert!(srv.stop().status.success());
}

/// Ten reloads in a row, the list swapped between A and B each time, under keep-alive clients:
/// no client error, each new list in effect for every client, and only the current
/// generation's zone left named in `/dev/shm` (the master unlinks each previous one).
#[test]
fn ten_reloads_under_load() {
    let (a, _) = backend("A");
    let (b, _) = backend("B");
    let (conf, srv, _) = start_with_config(&format!("upstream {a}\n"));
    let clients = Clients::start(srv.addr, 4);
    clients.wait_last('A');
    let names = |pid: i32| {
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&format!("gomutex-prefork-{pid}-")))
            .collect::<Vec<_>>()
    };
    for g in 2..=11 {
        let (addr, body) = if g % 2 == 0 { (b, 'B') } else { (a, 'A') };
        conf.write(&format!("upstream {addr}\n"));
        sighup(srv.pid());
        wait_generation(srv.addr, g);
        clients.wait_last(body);
        assert_eq!(
            names(srv.pid()),
            [format!("gomutex-prefork-{}-{g}", srv.pid())]
        );
    }
    let (errors, seen) = clients.stop();
    assert_eq!(errors, 0, "{seen:?}");
    let pid = srv.pid();
    assert!(srv.stop().status.success());
    assert!(names(pid).is_empty(), "{:?}", names(pid));
}

/// Set in the environment of [`zone_child`] run as a child process: the zone it opens.
const CHILD_ZONE: &str = "PREFORK_TEST_CHILD_ZONE";

/// Not a test of its own (a no-op without [`CHILD_ZONE`]): the child process of
/// [`force_release_covers_every_generation_kept`], which opens the zone, picks a peer and
/// exits holding the connection.
#[test]
fn zone_child() {
    let Ok(name) = std::env::var(CHILD_ZONE) else {
        return;
    };
    let zone = UpstreamZone::open(&name).expect("open the zone");
    std::mem::forget(zone.pick().expect("a pick"));
    // SAFETY: leave at once, the connection counted and not given back.
    unsafe { libc::_exit(0) };
}

/// The master's side: a process that died holding a connection of generation 1, reaped after
/// generation 2 was published, has it given back by `force_release` over every generation
/// kept; a generation no worker uses any more is dropped (its name was unlinked at the
/// publish after it), never the current one.
#[test]
fn force_release_covers_every_generation_kept() {
    let conf = ConfFile::new("upstream 127.0.0.1:1\n");
    let mut r = reload::Reloader::from_file(conf.path().into(), UpstreamConfig::new().processes(8))
        .unwrap();
    let first = r.current();
    assert_eq!(first.generation, 1);
    let name = format!("/gomutex-prefork-{}-1", std::process::id());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "config_reload::zone_child",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ZONE, &name)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    assert!(child.wait().unwrap().success());
    assert_eq!(first.zone.diagnostics().peers[0].conns, 1);

    conf.write("upstream 127.0.0.1:2\n");
    assert_eq!(r.reload(), Ok(2));
    assert!(
        UpstreamZone::open(&name).is_err(),
        "generation 1's name unlinked"
    );
    assert_eq!(r.force_release(pid), 1);
    assert_eq!(first.zone.diagnostics().peers[0].conns, 0);

    // Every worker on generation 2: generation 1 is dropped, 2 never.
    r.retire_below(2);
    r.retire_below(3);
    assert_eq!(r.current().generation, 2);
    assert_eq!(r.force_release(pid), 0);
    drop(r);
    let current = format!("/gomutex-prefork-{}-2", std::process::id());
    assert!(
        UpstreamZone::open(&current).is_err(),
        "unlinked when dropped"
    );
}
