//! Instructions per uncontended read lock + unlock and write lock + unlock of
//! `gomutex::RwLock`, `parking_lot::RwLock` and `std::sync::RwLock`, for callgrind (an
//! instruction count does not depend on the machine's load, unlike the steady harness's
//! nanoseconds). One thread, one lock, `N` iterations of each body in a function of its own
//! (`loop_<lock>_<body>`, never inlined), so callgrind's inclusive count of that function
//! over `N` is the body's cost, the loop's few instructions included:
//!
//! ```text
//! cargo bench --bench rwlock_instructions --no-run
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/deps/rwlock_instructions-* --bench
//! callgrind_annotate --inclusive=yes cg.out | grep 'loop_'
//! ```
//!
//! Bodies: `read` (lock, unlock), `read2` (Go's nested pair: lock, lock, unlock, unlock),
//! `write` (lock, unlock), `go` (Go's `Uncontended` body: `read2` then `write`). Without
//! `--bench` (`cargo test --benches`) every loop runs a few iterations.

use std::hint::black_box;

/// Iterations of each loop under `--bench`.
const N: u64 = 1_000_000;

macro_rules! loops {
    ($lock:ty, [$($read:tt)*], [$($write:tt)*], [$r:ident, $r2:ident, $w:ident, $go:ident]) => {
        #[inline(never)]
        fn $r(l: &$lock, n: u64) {
            for _ in 0..n {
                let g = l.$($read)*;
                black_box(&*g);
            }
        }
        #[inline(never)]
        fn $r2(l: &$lock, n: u64) {
            for _ in 0..n {
                let a = l.$($read)*;
                let b = l.$($read)*;
                black_box((&*a, &*b));
            }
        }
        #[inline(never)]
        fn $w(l: &$lock, n: u64) {
            for _ in 0..n {
                let mut g = l.$($write)*;
                *g += 1;
            }
        }
        #[inline(never)]
        fn $go(l: &$lock, n: u64) {
            for _ in 0..n {
                {
                    let a = l.$($read)*;
                    let b = l.$($read)*;
                    black_box((&*a, &*b));
                }
                let mut g = l.$($write)*;
                *g += 1;
            }
        }
    };
}

loops!(
    gomutex::RwLock<u64>,
    [read().unwrap()],
    [write().unwrap()],
    [
        loop_gomutex_read,
        loop_gomutex_read2,
        loop_gomutex_write,
        loop_gomutex_go
    ]
);
loops!(
    parking_lot::RwLock<u64>,
    [read()],
    [write()],
    [
        loop_parking_lot_read,
        loop_parking_lot_read2,
        loop_parking_lot_write,
        loop_parking_lot_go
    ]
);
loops!(
    std::sync::RwLock<u64>,
    [read().unwrap()],
    [write().unwrap()],
    [loop_std_read, loop_std_read2, loop_std_write, loop_std_go]
);

fn main() {
    let n = if std::env::args().any(|a| a == "--bench") {
        N
    } else {
        100
    };
    let g = gomutex::RwLock::new(0u64);
    let p = parking_lot::RwLock::new(0u64);
    let s = std::sync::RwLock::new(0u64);
    loop_gomutex_read(&g, n);
    loop_gomutex_read2(&g, n);
    loop_gomutex_write(&g, n);
    loop_gomutex_go(&g, n);
    loop_parking_lot_read(&p, n);
    loop_parking_lot_read2(&p, n);
    loop_parking_lot_write(&p, n);
    loop_parking_lot_go(&p, n);
    loop_std_read(&s, n);
    loop_std_read2(&s, n);
    loop_std_write(&s, n);
    loop_std_go(&s, n);
    assert_eq!(*g.read().unwrap(), 2 * n);
    assert_eq!(*p.read(), 2 * n);
    assert_eq!(*s.read().unwrap(), 2 * n);
    assert!(
        !g.raw().is_biased(),
        "a lock one thread reads is never biased"
    );
}
