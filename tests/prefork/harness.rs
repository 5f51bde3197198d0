//! The harness of the prefork tests: the example server as a child process, a small HTTP
//! client, and readers of its status page and `--stats-json` output.

use crate::common::uniq;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Longest any single network operation of the client may take.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn example_binary() -> PathBuf {
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
pub(crate) struct Server {
    pub(crate) child: Option<Child>,
    pub(crate) addr: SocketAddr,
    pub(crate) stats: PathBuf,
    pub(crate) stdout: Arc<Mutex<String>>,
    pub(crate) stderr: Arc<Mutex<String>>,
    pub(crate) stderr_lines: mpsc::Receiver<String>,
    /// The threads reading stdout and stderr (done at EOF: every process of the server gone).
    pub(crate) readers: Vec<thread::JoinHandle<()>>,
}

/// What a stopped server left.
pub(crate) struct Stopped {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) json: String,
}

/// Read `r` line by line into `into` (and `lines`) until EOF, on a thread of its own.
pub(crate) fn collect<R: Read + Send + 'static>(
    r: R,
    into: Arc<Mutex<String>>,
    lines: Option<mpsc::Sender<String>>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            into.lock().unwrap().push_str(&line);
            into.lock().unwrap().push('\n');
            if let Some(tx) = &lines {
                let _ = tx.send(line);
            }
        }
    })
}

impl Server {
    pub(crate) fn start(mode: &str, env: &[(&str, &str)]) -> Server {
        Self::start_with(mode, &[], env)
    }

    /// `start` with extra command-line arguments.
    pub(crate) fn start_with(mode: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let stats = std::env::temp_dir().join(format!("{}.json", uniq(&format!("prefork-{mode}"))));
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
        let readers = vec![
            collect(child.stdout.take().unwrap(), stdout.clone(), Some(out_tx)),
            collect(child.stderr.take().unwrap(), stderr.clone(), Some(err_tx)),
        ];
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
            readers,
        }
    }

    /// Wait (bounded) for a stderr line containing `needle`.
    pub(crate) fn wait_stderr(&self, needle: &str, timeout: Duration) -> String {
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

    pub(crate) fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// SIGINT, then wait (bounded) for the master to exit.
    pub(crate) fn stop(mut self) -> Stopped {
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
        // Let the reader threads drain the pipes: EOF once the workers are gone too (bounded:
        // a worker the master could not stop would hold them open).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.readers.iter().all(|r| r.is_finished()) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
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

/// Read one HTTP response (status line, headers, `Content-Length` body) from `r`.
pub(crate) fn read_response(r: &mut BufReader<TcpStream>) -> std::io::Result<(u16, String, bool)> {
    read_response_with_headers(r).map(|(status, _, body, close)| (status, body, close))
}

/// [`read_response`], with the header lines as `(name, value)`, trimmed.
#[allow(clippy::type_complexity)]
pub(crate) fn read_response_with_headers(
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

pub(crate) fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// One request on a new connection with `Connection: close`; the request is sent in two
/// pieces to exercise partial reads.
pub(crate) fn get_close(addr: SocketAddr) {
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
pub(crate) fn get_keep_alive(addr: SocketAddr, n: usize) {
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
pub(crate) fn get_status(addr: SocketAddr) -> String {
    let mut s = connect(addr);
    s.write_all(b"GET /status HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (status, body, close) = read_response(&mut BufReader::new(s)).expect("response");
    assert_eq!((status, close), (200, true), "{body}");
    body
}

/// The status page, parsed: nginx's three stub_status figures, the worker lines' `name value`
/// pairs, and the `name value` pairs of the line that starts with `line` (if there is one).
pub(crate) struct Status {
    pub(crate) text: String,
    pub(crate) active: u64,
    pub(crate) accepts: u64,
    pub(crate) handled: u64,
    pub(crate) requests: u64,
    pub(crate) workers: Vec<std::collections::HashMap<String, u64>>,
}

/// `name value name value ...` after the first word.
pub(crate) fn pairs(line: &str) -> std::collections::HashMap<String, u64> {
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
    pub(crate) fn parse(text: String) -> Self {
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
    pub(crate) fn line(&self, name: &str) -> std::collections::HashMap<String, u64> {
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
pub(crate) fn load(
    addr: SocketAddr,
    threads: usize,
    close: usize,
    ka_conns: usize,
    ka_reqs: usize,
) -> u64 {
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
pub(crate) fn json_num(json: &str, section: &str, key: &str) -> u64 {
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
pub(crate) fn workers(json: &str) -> Vec<&str> {
    json.lines().filter(|l| l.contains("\"pid\":")).collect()
}

pub(crate) fn row_num(row: &str, key: &str) -> u64 {
    json_num(row, "pid", key)
}

/// Checks every mode needs: clean exit, totals equal to what was sent and to the sum of the
/// rows, and the table printed.
pub(crate) fn check_totals(out: &Stopped, sent: u64, connections: u64) {
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
