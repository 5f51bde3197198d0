//! nginx's upstream zone across forked workers: `cargo run --release --example upstream`.
//!
//! Four workers share one `UpstreamZone` of three peers at weights 5:3:1, `b` limited to 3
//! connections at once over all workers. Three workers pick and report; the fourth takes two
//! connections and is SIGKILLed holding them: they are given back (by a picker that finds `b`
//! full, or by the parent's `force_release` after `waitpid`). At the end the shares follow
//! the weights over all workers together (`b`'s picks go to the others while it is full), no
//! connection is left counted, and a peer that fails `max_fails` times is skipped.

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use gomutex::shm::Mapping;
    use gomutex::upstream::{Peer, UpstreamZone};
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::time::{Duration, Instant};

    const WORKERS: usize = 4;
    const PICKS: u64 = 90_000;
    let zone = UpstreamZone::anonymous(&[
        Peer::new("a").weight(5),
        Peer::new("b").weight(3).max_conns(3),
        Peer::new("c")
            .max_fails(3)
            .fail_timeout(Duration::from_secs(10)),
    ])?;
    // Counters the workers share with the parent: picks per peer, and "holding" flags.
    let side = Mapping::anonymous(4096)?;
    let counts = side.shared_slice::<AtomicU64>(0, 8)?;

    let started = Instant::now();
    let mut pids = Vec::new();
    for w in 0..WORKERS {
        // SAFETY: the example is single-threaded here; the child uses the zone and the
        // counters only, and leaves with `_exit`.
        match unsafe { libc::fork() } {
            0 => {
                if w == 0 {
                    // The victim: holds two connections and waits to be killed.
                    let held = [zone.pick().unwrap(), zone.pick().unwrap()];
                    counts[7].store(1, Relaxed);
                    loop {
                        std::thread::sleep(Duration::from_secs(1));
                        let _ = &held;
                    }
                }
                for i in 0..PICKS / (WORKERS as u64 - 1) {
                    let slot = zone.pick().expect("a live peer");
                    counts[slot.peer()].fetch_add(1, Relaxed);
                    std::hint::black_box(i); // the request
                    slot.success();
                }
                // SAFETY: leave without the parent's atexit work.
                unsafe { libc::_exit(0) };
            }
            pid => pids.push(pid),
        }
    }
    while counts[7].load(Relaxed) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let victim = pids.remove(0);
    // SAFETY: our child.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    // SAFETY: our child; reaping it makes its pid free for `force_release`'s check.
    unsafe { libc::waitpid(victim, std::ptr::null_mut(), 0) };
    let returned = zone.force_release(victim);
    for pid in pids {
        let mut status = 0;
        // SAFETY: our children.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
    let elapsed = started.elapsed();
    zone.recover(); // the workers left with `_exit`, keeping their rows: give them back
    let d = zone.diagnostics();
    println!(
        "worker {victim} killed holding 2 connections: {} given back ({returned} by force_release)",
        d.conns_given_back
    );
    let total: u64 = (0..3).map(|i| counts[i].load(Relaxed)).sum();
    for (i, p) in d.peers.iter().enumerate() {
        let n = counts[i].load(Relaxed);
        println!(
            "{}: weight {} picks {n} ({:.1} %, weights say {:.1} %), connections {}",
            p.name,
            p.weight,
            100.0 * n as f64 / total as f64,
            100.0 * f64::from(p.weight) / 9.0,
            p.conns
        );
        assert_eq!(p.conns, 0);
    }
    println!(
        "{total} picks by {} workers in {elapsed:.2?} ({:.0} picks/s)",
        WORKERS - 1,
        total as f64 / elapsed.as_secs_f64()
    );
    // Passive health: c refuses three times (max_fails=3) and is skipped for fail_timeout.
    let mut refused = 0;
    while refused < 3 {
        let slot = zone.pick()?;
        if slot.peer() == 2 {
            slot.failure();
            refused += 1;
        }
    }
    assert!(zone.diagnostics().peers[2].unavailable);
    assert!((0..90).all(|_| zone.pick().unwrap().peer() != 2));
    println!("c failed 3 times: skipped for its fail_timeout");
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("the upstream zone is Linux only");
}
