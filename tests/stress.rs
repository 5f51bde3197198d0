//! Many-thread stress tests with exact counters, and Go's TestMutex hammer.

use gomutex::{Mutex, RawMutex};
use std::sync::Arc;
use std::thread;

/// Go's `HammerMutex`: for each i in 0..loops, one in three uses try_lock (unlocking only on
/// success), the others lock and unlock.
fn hammer(m: &RawMutex, loops: usize) {
    for i in 0..loops {
        if i % 3 == 0 {
            if m.try_lock() {
                // SAFETY: try_lock succeeded.
                unsafe { m.unlock() };
            }
            continue;
        }
        m.lock();
        // SAFETY: locked above.
        unsafe { m.unlock() };
    }
}

/// Port of Go's `TestMutex`.
#[test]
fn go_test_mutex() {
    let m = Arc::new(RawMutex::new());
    m.lock();
    assert!(!m.try_lock(), "try_lock succeeded with mutex locked");
    // SAFETY: locked above.
    unsafe { m.unlock() };
    assert!(m.try_lock(), "try_lock failed with mutex unlocked");
    // SAFETY: try_lock succeeded.
    unsafe { m.unlock() };

    // Go's sizes; under Miri (scripts/miri.sh) fewer, still contended, so it finishes in
    // seconds: Miri checks every access of every interleaving it runs, not the volume.
    let (threads, loops) = if cfg!(miri) { (6, 150) } else { (10, 1000) };
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let m = Arc::clone(&m);
            thread::spawn(move || hammer(&m, loops))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(m.state(), 0, "lock not quiescent after the hammer");
    assert_eq!(m.stored_tokens(), 0, "leftover wake-up tokens");
}

/// Many threads, exact counter, a non-atomic read-modify-write inside the lock.
#[test]
fn exact_counter_many_threads() {
    // Under Miri (scripts/miri.sh) fewer threads and iterations, still contended.
    const THREADS: usize = if cfg!(miri) { 6 } else { 16 };
    const ITERS: usize = if cfg!(miri) { 200 } else { 20_000 };
    let m = Arc::new(Mutex::new(0u64));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                for _ in 0..ITERS {
                    let mut g = m.lock().unwrap();
                    let v = *g;
                    std::hint::black_box(&v);
                    *g = v + 1;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*m.lock().unwrap(), (THREADS * ITERS) as u64);
    assert_eq!(m.raw().state(), 0);
    assert_eq!(m.raw().stored_tokens(), 0);
}
