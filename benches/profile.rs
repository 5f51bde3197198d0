//! What the mutex profile costs: `gomutex::Mutex` with the `profile` feature at rate 0 (off)
//! against rate 100 (Go's usual setting) and rate 1 (every contended release sampled), in
//! the steady-contention loop of `steady.rs`: T threads loop `{lock; count += 1; unlock}` on
//! one shared lock until a stop flag; ns/op = wall time / all ops; the count must equal the
//! ops. Workloads: `Mutex` (T = P) and `MutexSlack` (T = 10 × P), P = CPUs.
//!
//! The rates alternate within a round (the first rotates from round to round) and the
//! round trip between two CPUs is probed before each round (`common::line_round_trip_ns`);
//! ratios are taken round by round (`common::paired_ratio`).
//!
//! `cargo bench --features profile --bench profile`. Environment: `PROFILE_DURATION_MS`
//! (default 500), `PROFILE_ROUNDS` (default 7). Without `--bench` (`cargo test --benches
//! --features profile`): each case once, 10 ms, every thread at least 200 ops.

mod common;

use common::{alternate, env_or, fmt_round_trips, median, paired_ratio, procs, Args, Padded};
use gomutex::{profile, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

/// The rates compared, the baseline first.
const RATES: [u32; 3] = [0, 100, 1];

/// ns/op of `threads` threads looping on one shared `gomutex::Mutex` for `duration` (and at
/// least `min_ops` each), wall time from the first thread's first op to the last one's last.
fn run(threads: usize, duration: Duration, min_ops: u64) -> f64 {
    let mu = Padded(Mutex::new(0u64));
    let stop = Padded(AtomicBool::new(false));
    let barrier = Barrier::new(threads + 1);
    let (mu, stop, barrier) = (&mu.0, &stop.0, &barrier);
    let (first, last, ops) = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let mut ops = 0u64;
                    while ops < min_ops || !stop.load(Ordering::Relaxed) {
                        *mu.lock().unwrap() += 1;
                        ops += 1;
                    }
                    (start, Instant::now(), ops)
                })
            })
            .collect();
        barrier.wait();
        thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .fold(None, |acc: Option<(Instant, Instant, u64)>, (a, b, n)| {
                Some(acc.map_or((a, b, n), |(x, y, m)| (x.min(a), y.max(b), m + n)))
            })
            .expect("at least one thread")
    });
    assert_eq!(*mu.lock().unwrap(), ops, "lost updates");
    (last - first).as_nanos() as f64 / ops as f64
}

fn main() {
    let test = !Args::get().bench;
    let (duration, rounds, min_ops) = if test {
        (Duration::from_millis(10), 1, 200)
    } else {
        (
            Duration::from_millis(env_or("PROFILE_DURATION_MS", 500)),
            env_or("PROFILE_ROUNDS", 7usize).max(1),
            0,
        )
    };
    let p = procs();
    println!(
        "mutex profile cost, steady loop: {rounds} rounds of {} ms per rate, rates {RATES:?} \
         alternated",
        duration.as_millis()
    );
    println!(
        "{:<11} {:>4} {:>10} {:>10} {:>10} {:>9} {:>9}  round trip ns",
        "workload", "T", "rate 0", "rate 100", "rate 1", "100 / 0", "1 / 0"
    );
    for (name, threads) in [("Mutex", p), ("MutexSlack", 10 * p)] {
        let mut ns: Vec<Vec<f64>> = vec![Vec::new(); RATES.len()];
        let trips = alternate(rounds, RATES.len(), !test, (0, false), |_, i| {
            profile::set_mutex_profile_fraction(RATES[i]);
            ns[i].push(run(threads, duration, min_ops));
        })
        .into_iter()
        .flatten()
        .collect::<Vec<f64>>();
        profile::set_mutex_profile_fraction(0);
        println!(
            "{name:<11} {threads:>4} {:>10.1} {:>10.1} {:>10.1} {:>9.3} {:>9.3}  {}",
            median(&ns[0]),
            median(&ns[1]),
            median(&ns[2]),
            paired_ratio(&ns[1], &ns[0]),
            paired_ratio(&ns[2], &ns[0]),
            fmt_round_trips(&trips)
        );
        if !test {
            let per_round: Vec<String> = ns[1]
                .iter()
                .zip(&ns[0])
                .map(|(a, b)| format!("{:.3}", a / b))
                .collect();
            println!(
                "{:<16} rate 100 / rate 0 by round: {}",
                "",
                per_round.join(" ")
            );
        }
    }
    // What the sampled runs recorded (the call site is the bench loop).
    let mut text = Vec::new();
    profile::write_text(&mut text).expect("text summary");
    print!("{}", String::from_utf8_lossy(&text));
}
