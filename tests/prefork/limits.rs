//! `--limit-req` and `--limit-headers`: the example's rate limiting, seen by a client.

use super::*;
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
