//! `--upstream`: the example as a reverse proxy in front of test backends.

use super::*;
use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
/// A backend for `--upstream`: answers every request on its keep-alive connections with
/// `body` (HTTP/1.1, `Content-Length`; no body to a `HEAD`), counting them.
pub(crate) fn backend(body: &'static str) -> (SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
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
                    let mut head = false;
                    loop {
                        line.clear();
                        match r.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => head |= line.starts_with("HEAD "),
                        }
                    }
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Backend: {body}\r\n\r\n{}",
                        body.len(),
                        if head { "" } else { body }
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

/// A backend under the test's control: it reports each request it reads (`got`), holds its
/// answer (`body`) until released (one `release` per answer), and reports a connection the
/// proxy closes while it holds an answer (`closed`). One connection at a time.
pub(crate) fn held_backend(
    body: &'static str,
) -> (SocketAddr, Receiver<()>, Sender<()>, Receiver<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (got_tx, got) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let (closed_tx, closed) = mpsc::channel();
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            // Short reads, to look at `release` between them.
            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
            let mut chunk = [0u8; 4096];
            'conn: loop {
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk) {
                        Ok(0) => break 'conn,
                        Ok(n) => head.extend_from_slice(&chunk[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                        Err(_) => break 'conn,
                    }
                }
                let _ = got_tx.send(());
                loop {
                    if release_rx.try_recv().is_ok() {
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(answer.as_bytes()).is_err() {
                            break 'conn;
                        }
                        continue 'conn;
                    }
                    match s.read(&mut chunk) {
                        Ok(0) => {
                            let _ = closed_tx.send(());
                            break 'conn;
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                        Err(_) => {
                            let _ = closed_tx.send(());
                            break 'conn;
                        }
                    }
                }
            }
        }
    });
    (addr, got, release, closed)
}

/// `/status`'s figures of peer `addr`.
fn peer_line(srv: &Server, addr: SocketAddr) -> std::collections::HashMap<String, u64> {
    let text = get_status(srv.addr);
    let l = text
        .lines()
        .find(|l| l.starts_with(&format!("upstream {addr} ")))
        .unwrap_or_else(|| panic!("no line for {addr}: {text}"));
    pairs(&l.replacen(&addr.to_string(), "", 1))
}

/// One worker, a slow backend and a fast one: a request held by the slow backend does not
/// hold up another client's request to the fast one (the fast answer comes while the slow
/// one is still held), and the slow one is answered by its own backend once released (not
/// failed over on a timeout).
#[test]
fn upstream_slow_backend_does_not_stall_the_worker() {
    let (slow, got, release, _closed) = held_backend("slow");
    let (fast, _) = backend("fast");
    let (us, uf) = (slow.to_string(), fast.to_string());
    let srv = Server::start_with(
        "mutex",
        &["--workers", "1", "--upstream", &us, "--upstream", &uf],
        &[],
    );
    // Equal weights: the first pick is the first peer, the slow one.
    let mut c1 = connect(srv.addr);
    c1.write_all(b"GET /1 HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    got.recv_timeout(IO_TIMEOUT)
        .expect("the slow backend got the first request");
    let mut c2 = connect(srv.addr);
    c2.write_all(b"GET /2 HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let (status, body, _) = read_response(&mut BufReader::new(c2)).expect("fast response");
    assert_eq!((status, body.as_str()), (200, "fast"));
    // Only now may the slow backend answer.
    release.send(()).unwrap();
    let (status, body, _) = read_response(&mut BufReader::new(c1)).expect("slow response");
    assert_eq!((status, body.as_str()), (200, "slow"));
    assert_eq!(peer_line(&srv, slow)["fails"], 0);
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
}

/// A backend that never answers: the exchange's deadline (2 s without progress) fails the
/// attempt on the worker's timer, the failure is counted, and the request goes to the next
/// peer.
#[test]
fn upstream_backend_timeout_fails_over_to_the_next_peer() {
    let (silent, got, _release, _closed) = held_backend("silent");
    let (fast, _) = backend("fast");
    let (us, uf) = (format!("{silent},max_fails=5"), fast.to_string());
    let srv = Server::start_with(
        "mutex",
        &["--workers", "1", "--upstream", &us, "--upstream", &uf],
        &[],
    );
    let mut c = connect(srv.addr);
    c.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    got.recv_timeout(IO_TIMEOUT)
        .expect("the silent backend got the request");
    let (status, body, _) = read_response(&mut BufReader::new(c)).expect("response");
    assert_eq!((status, body.as_str()), (200, "fast"));
    let p = peer_line(&srv, silent);
    assert_eq!((p["fails"], p["conns"]), (1, 0));
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
}

/// A client that leaves while its request is held by a backend ends the exchange at once:
/// the backend connection is closed, the peer's `max_conns` slot given back, and no failure
/// counted (nginx's client abort). Meanwhile the worker answers `/status`.
#[test]
fn upstream_client_gone_mid_exchange_gives_back_the_slot() {
    let (slow, got, _release, closed) = held_backend("slow");
    let spec = format!("{slow},max_conns=1");
    let srv = Server::start_with("mutex", &["--workers", "1", "--upstream", &spec], &[]);
    let mut c1 = connect(srv.addr);
    c1.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    got.recv_timeout(IO_TIMEOUT)
        .expect("the backend got the request");
    assert_eq!(peer_line(&srv, slow)["conns"], 1);
    drop(c1);
    closed
        .recv_timeout(IO_TIMEOUT)
        .expect("the proxy closed its backend connection");
    let p = peer_line(&srv, slow);
    assert_eq!((p["conns"], p["fails"]), (0, 0));
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
}

/// Read one request head from `s`, byte by byte.
fn read_head(s: &mut TcpStream) {
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).expect("a request head"), 1, "{head:?}");
        head.push(b[0]);
    }
}

/// Two exchanges in flight on kept connections to peer A (`max_fails=1`) when A's
/// connections die: the first failure, before any byte of an answer, is retried on a fresh
/// connection (A may have closed an idle one), which fails too and marks A down; the second
/// is then a failure like any other, not one more connection to A. Both clients get the
/// backup's answer. The test plays backend A itself, one step at a time.
#[test]
fn upstream_no_new_connection_to_a_peer_marked_down() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    let (b, _) = backend("B");
    let (ua, ub) = (
        format!("{a},max_fails=1,fail_timeout=60000"),
        format!("{b},backup"),
    );
    let srv = Server::start_with(
        "mutex",
        &["--workers", "1", "--upstream", &ua, "--upstream", &ub],
        &[],
    );
    let get = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n";
    let (mut c1, mut c2) = (connect(srv.addr), connect(srv.addr));
    // Two requests in flight at A at once: two connections, kept afterwards.
    c1.write_all(get).unwrap();
    let (mut s1, _) = l.accept().unwrap();
    read_head(&mut s1);
    c2.write_all(get).unwrap();
    let (mut s2, _) = l.accept().unwrap();
    read_head(&mut s2);
    for s in [&mut s1, &mut s2] {
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nA")
            .unwrap();
    }
    let mut r1 = BufReader::new(c1.try_clone().unwrap());
    let mut r2 = BufReader::new(c2.try_clone().unwrap());
    assert_eq!(read_response(&mut r1).unwrap().1, "A");
    assert_eq!(read_response(&mut r2).unwrap().1, "A");
    // Again: each request on one of the kept connections.
    c1.write_all(get).unwrap();
    c2.write_all(get).unwrap();
    read_head(&mut s1);
    read_head(&mut s2);
    // The first dies: retried once on a fresh connection, which A closes too.
    drop(s1);
    let (s3, _) = l.accept().unwrap();
    drop(s3);
    let deadline = Instant::now() + IO_TIMEOUT;
    while peer_line(&srv, a)["unavailable"] == 0 {
        assert!(Instant::now() < deadline, "A not marked down");
        thread::sleep(Duration::from_millis(5));
    }
    // The second dies with A down: no new connection to A.
    drop(s2);
    assert_eq!(read_response(&mut r1).unwrap().1, "B");
    assert_eq!(read_response(&mut r2).unwrap().1, "B");
    l.set_nonblocking(true).unwrap();
    assert_eq!(
        l.accept().map(|_| ()).unwrap_err().kind(),
        io::ErrorKind::WouldBlock,
        "a connection to A after it was marked down"
    );
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
}

/// Pipelined requests to the proxy: those behind a proxied one wait in the buffer (a
/// `/status` too, which the worker answers itself), and the answers come in order; the last
/// one's `Connection: close` closes after its answer.
#[test]
fn upstream_pipelined_requests_are_answered_in_order() {
    let (a, na) = backend("A");
    let srv = Server::start_with("mutex", &["--upstream", &a.to_string()], &[]);
    let s = connect(srv.addr);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    w.write_all(
        b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /status HTTP/1.1\r\nHost: t\r\n\r\n\
          HEAD /3 HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /4 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let (status, body, close) = read_response(&mut r).expect("first");
    assert_eq!((status, body.as_str(), close), (200, "A", false));
    let (status, body, close) = read_response(&mut r).expect("status");
    assert!(
        status == 200 && !close && body.contains(&format!("upstream {a} ")),
        "{body}"
    );
    let (status, body, close) = read_response(&mut r).expect("head");
    assert_eq!((status, body.as_str(), close), (200, "", false));
    let (status, body, close) = read_response(&mut r).expect("last");
    assert_eq!((status, body.as_str(), close), (200, "A", true));
    assert_eq!(na.load(std::sync::atomic::Ordering::SeqCst), 3);
    let out = srv.stop();
    assert!(out.status.success(), "stderr: {}", out.stderr);
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
