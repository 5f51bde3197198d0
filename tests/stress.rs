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

    let handles: Vec<_> = (0..10)
        .map(|_| {
            let m = Arc::clone(&m);
            thread::spawn(move || hammer(&m, 1000))
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
    const THREADS: usize = 16;
    const ITERS: usize = 20_000;
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
