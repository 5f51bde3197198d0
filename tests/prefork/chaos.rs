//! Workers killed repeatedly while clients keep connecting.

use super::*;
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
