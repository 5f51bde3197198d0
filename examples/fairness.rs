//! Go's `TestMutexFairness`, side by side: a greedy thread that holds the lock while it sleeps
//! 100 µs and relocks at once, and a victim that wants the lock 10 times.
//!
//! With a barging lock (std) the victim can wait tens of milliseconds; with gomutex, after
//! 1 ms of waiting the lock switches to starvation mode and hands itself to the victim.
//!
//! ```text
//! cargo run --release --example fairness
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// The two operations the scenario needs, so it is written once for both locks.
trait Lock: Send + Sync + 'static {
    /// Run `f` while holding the lock.
    fn with(&self, f: impl FnOnce());
}

impl Lock for gomutex::Mutex<()> {
    fn with(&self, f: impl FnOnce()) {
        let _g = self.lock().unwrap();
        f();
    }
}

impl Lock for std::sync::Mutex<()> {
    fn with(&self, f: impl FnOnce()) {
        let _g = self.lock().unwrap();
        f();
    }
}

/// Returns (worst single wait, total time) of the victim.
fn scenario<L: Lock>(lock: L) -> (Duration, Duration) {
    let lock = Arc::new(lock);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let greedy = {
        let (lock, stop, started) = (Arc::clone(&lock), Arc::clone(&stop), Arc::clone(&started));
        thread::spawn(move || {
            // Bounded, so a lock that starves the victim cannot hang the demo.
            let give_up = Instant::now() + Duration::from_secs(10);
            while !stop.load(Ordering::Relaxed) && Instant::now() < give_up {
                lock.with(|| {
                    started.store(true, Ordering::Relaxed);
                    thread::sleep(Duration::from_micros(100));
                });
            }
        })
    };
    // Unlike Go's test, start the victim only once the greedy thread holds the lock: otherwise
    // a slow thread spawn lets the victim finish before there is any contention, and the demo
    // shows a barging lock as fair.
    while !started.load(Ordering::Relaxed) {
        thread::yield_now();
    }
    let start = Instant::now();
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        thread::sleep(Duration::from_micros(100));
        let t = Instant::now();
        lock.with(|| ());
        worst = worst.max(t.elapsed());
    }
    let total = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    greedy.join().unwrap();
    (worst, total)
}

fn main() {
    println!("Go's TestMutexFairness: greedy holder sleeps 100 µs inside the lock, victim locks 10 times\n");
    println!("{:<20} {:>16} {:>14}", "lock", "worst wait", "total");
    let (w, t) = scenario(gomutex::Mutex::new(()));
    println!("{:<20} {:>16.3?} {:>14.3?}", "gomutex::Mutex", w, t);
    let (w, t) = scenario(std::sync::Mutex::new(()));
    println!("{:<20} {:>16.3?} {:>14.3?}", "std::sync::Mutex", w, t);
}
