//! The passes over a whole dictionary (`keys`, `flush_expired`, `flush_all`) on 100 000 keys
//! of 10 bytes with 32-byte values, one shard: how long each call takes (alone, then probed), and the longest a
//! `get` of another thread waited while it ran (the longest hold of the shard's lock a
//! reader meets, plus the lock's hand-over), beside the same thread's longest `get` with no
//! pass running (the machine's own noise: preemption on a loaded machine shows there too).
//!
//! Run by `benches/dict.rs` (`DICT_ITER_ONLY=1` for this row alone); `DICT_ITER_ROUNDS`
//! (default 5) rounds, the medians printed; `DICT_ITER_FIFO=1` (as root) runs the two threads
//! under `SCHED_FIFO` while they are measured, so that a loaded machine's preemptions do not
//! pass for waits.

use super::common;
use gomutex::dict::ShmDict;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
enum Pass {
    Keys,
    FlushExpired,
    FlushAll,
    /// No pass: the prober alone, as long as the last pass took.
    Idle,
}

impl Pass {
    fn name(self) -> &'static str {
        match self {
            Pass::Keys => "keys(0)",
            Pass::FlushExpired => "flush_expired(0)",
            Pass::FlushAll => "flush_all()",
            Pass::Idle => "(no pass)",
        }
    }
}

fn key(i: usize) -> [u8; 10] {
    let mut k = [0u8; 10];
    k.copy_from_slice(format!("it:{i:07}").as_bytes());
    k
}

/// Store the `n` keys, live, or the odd ones expiring in 1 ms (then waited for).
fn fill(d: &ShmDict, n: usize, half_expired: bool) {
    for i in 0..n {
        let ttl = (half_expired && i % 2 == 1).then_some(Duration::from_millis(1));
        d.set(key(i), &[b'v'; 32][..], ttl, 0).unwrap();
    }
    if half_expired {
        std::thread::sleep(Duration::from_millis(3));
    }
}

/// Run `pass` on `d` (or wait `idle`).
fn run(d: &ShmDict, pass: Pass, idle: Duration) {
    match pass {
        Pass::Keys => assert!(d.keys(0).unwrap().len() > 1),
        Pass::FlushExpired => assert!(d.flush_expired(0).unwrap() > 1),
        Pass::FlushAll => d.flush_all().unwrap(),
        Pass::Idle => std::thread::sleep(idle),
    }
}

/// With `DICT_ITER_FIFO` set (and the right to): this thread under `SCHED_FIFO` (`on`) or back
/// to `SCHED_OTHER`, so that other load on the machine does not preempt the threads measured.
/// Only around a pass (tens of ms): the kernel throttles real-time threads that run for most of
/// a second, which would show as a stall of its own.
fn fifo(on: bool) {
    if std::env::var_os("DICT_ITER_FIFO").is_none() {
        return;
    }
    let (policy, prio) = if on {
        (libc::SCHED_FIFO, 10)
    } else {
        (libc::SCHED_OTHER, 0)
    };
    let p = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: this thread's own scheduling, with a valid parameter block.
    unsafe { libc::pthread_setschedparam(libc::pthread_self(), policy, &p) };
}

/// Run `pass` (or wait `idle`) while another thread `get`s one key in a loop: (the pass's
/// wall time, the prober's longest `get`, its `get`s done meanwhile, how many took > 100 µs).
fn probed(d: &ShmDict, pass: Pass, idle: Duration) -> (Duration, Duration, u64, u64) {
    let stop = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    std::thread::scope(|s| {
        let prober = s.spawn(|| {
            fifo(true);
            let (mut longest, mut n, mut slow) = (Duration::ZERO, 0u64, 0u64);
            while !stop.load(SeqCst) {
                let t = Instant::now();
                std::hint::black_box(d.get(b"probe").unwrap());
                let w = t.elapsed();
                longest = longest.max(w);
                slow += u64::from(w > Duration::from_micros(100));
                n += 1;
                started.store(true, SeqCst);
            }
            (longest, n, slow)
        });
        while !started.load(SeqCst) {
            std::hint::spin_loop();
        }
        fifo(true);
        std::thread::sleep(Duration::from_millis(2));
        let t = Instant::now();
        run(d, pass, idle);
        let took = t.elapsed();
        stop.store(true, SeqCst);
        fifo(false);
        let (longest, n, slow) = prober.join().unwrap();
        (took, longest, n, slow)
    })
}

/// The row: `n` keys (100 000 in a bench run), `rounds` rounds of every pass.
pub fn row(n: usize, rounds: usize) {
    let d = ShmDict::anonymous(64 << 20).unwrap();
    d.set(b"probe", &[b'p'; 32][..], None, 0).unwrap();
    let passes = [Pass::Keys, Pass::FlushExpired, Pass::FlushAll, Pass::Idle];
    // Per pass and round: (call, longest get, gets, gets > 100 µs, the call with no prober).
    type Round = (Duration, Duration, u64, u64, Duration);
    let mut res: Vec<Vec<Round>> = vec![Vec::new(); passes.len()];
    for _ in 0..rounds {
        let mut idle = Duration::ZERO;
        for (p, &pass) in passes.iter().enumerate() {
            // The pass alone first, then with the prober.
            let mut alone = Duration::ZERO;
            for probe in [false, true] {
                match pass {
                    Pass::Keys => fill(&d, n, false),
                    Pass::FlushExpired => fill(&d, n, true),
                    Pass::FlushAll => fill(&d, n, false),
                    Pass::Idle => {}
                }
                if !probe {
                    let t = Instant::now();
                    run(&d, pass, idle);
                    alone = t.elapsed();
                    continue;
                }
                let r = probed(&d, pass, idle);
                idle = idle.max(r.0);
                res[p].push((r.0, r.1, r.2, r.3, alone));
            }
        }
        d.set(b"probe", &[b'p'; 32][..], None, 0).unwrap();
    }
    d.check().unwrap();
    let med = |v: Vec<f64>| common::median(&v);
    println!(
        "passes over {n} keys (10-byte keys, 32-byte values, 1 shard), a get of another thread \
         probing; medians of {rounds} rounds (max over rounds in brackets):"
    );
    println!(
        "  {:<17} {:>10} {:>10} {:>22} {:>10} {:>12}",
        "pass", "alone ms", "call ms", "longest get µs", "gets", "gets >100µs"
    );
    for (pass, r) in passes.iter().zip(res) {
        let max_wait = r.iter().map(|x| x.1).max().unwrap_or_default();
        println!(
            "  {:<17} {:>10.2} {:>10.2} {:>10.1} [{:>9.1}] {:>10.0} {:>12.0}",
            pass.name(),
            med(r.iter().map(|x| x.4.as_secs_f64() * 1e3).collect()),
            med(r.iter().map(|x| x.0.as_secs_f64() * 1e3).collect()),
            med(r.iter().map(|x| x.1.as_secs_f64() * 1e6).collect()),
            max_wait.as_secs_f64() * 1e6,
            med(r.iter().map(|x| x.2 as f64).collect()),
            med(r.iter().map(|x| x.3 as f64).collect()),
        );
    }
}
