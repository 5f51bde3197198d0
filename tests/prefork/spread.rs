//! The spread rule: long-lived connections spread over the workers, and the live counts it
//! reads (a retired, stale or killed worker drops out of them).

use super::*;
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
