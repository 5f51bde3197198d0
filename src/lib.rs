//! # gomutex
//!
//! Go's hybrid `sync.Mutex` for Rust: a drop-in replacement for [`std::sync::Mutex`] (same
//! API, std's own result types, poisoning, a [`Condvar`]), built on Go's algorithm:
//!
//! * **normal mode** — a thread that finds the lock free takes it (barging), and a contender
//!   spins up to 4 short rounds before it sleeps (Go's are 30 `PAUSE`s; a newcomer here first
//!   offers its CPU to another thread with `sched_yield`, then pauses 10 times: the thread
//!   analogue of Go spinning only while no other goroutine wants the CPU); a woken waiter that
//!   loses the race goes back to the *front* of the queue;
//! * **starvation mode** — once a waiter has waited more than 1 ms, unlock hands the lock
//!   straight to the oldest waiter and newcomers queue behind it, until a waiter that did not
//!   wait long (or the last one) switches back.
//!
//! Throughput of a barging lock, bounded unfairness (no thread waits much beyond 1 ms for a
//! lock that others keep taking).
//!
//! ```
//! use gomutex::Mutex; // instead of std::sync::Mutex
//!
//! let m = Mutex::new(vec![1, 2]);
//! m.lock().unwrap().push(3);
//! assert_eq!(*m.lock().unwrap(), [1, 2, 3]);
//! ```
//!
//! The algorithm is written once, generic over its state word, waiter queue and clock;
//! [`RawMutex`] instantiates it for threads of one process.
//!
//! [`RwLock`] is Go's `sync.RWMutex` on that mutex, a drop-in for [`std::sync::RwLock`]: a read
//! lock is one atomic add, a waiting writer keeps new readers out, and the readers that queued
//! behind a writer go before the next writer ([`RawRwLock`] without data).
//!
//! ```
//! use gomutex::RwLock; // instead of std::sync::RwLock
//!
//! let config = RwLock::new(String::from("v1"));
//! *config.write().unwrap() = String::from("v2");
//! assert_eq!(*config.read().unwrap(), "v2");
//! ```
//!
//! # Platforms
//!
//! [`Mutex`], [`MutexGuard`], [`Condvar`], [`RawMutex`], [`RwLock`] and [`RawRwLock`] need only
//! `std` and `parking_lot_core`: they work wherever both do (Linux, macOS, Windows, the BSDs,
//! …). The shared-memory lock (`shm`) and the shared-memory parts of [`accept`] use futexes,
//! `mmap` and `/proc`, and are compiled on Linux only.
#![deny(
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::undocumented_unsafe_blocks
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(all(gomutex_loom, not(feature = "__loom")))]
compile_error!("`--cfg gomutex_loom` needs gomutex's `__loom` feature (loom-tests/ enables both)");

/// Defines a type's `new` once: a `const fn` in normal builds (so locks can live in `static`s)
/// and a plain `fn` under `--cfg gomutex_loom`, whose loom atomics have no `const`
/// constructor. Attributes and doc comments apply to whichever of the two is compiled.
macro_rules! const_new {
    ($(#[$attr:meta])* $vis:vis fn new($($arg:ident: $ty:ty),* $(,)?) -> Self $body:block) => {
        $(#[$attr])*
        #[cfg(not(gomutex_loom))]
        $vis const fn new($($arg: $ty),*) -> Self $body

        $(#[$attr])*
        #[cfg(gomutex_loom)]
        $vis fn new($($arg: $ty),*) -> Self $body
    };
}

pub mod accept;
// Internals, public only so that tests/ and loom-tests/ can reach them: hidden from the docs
// and outside semver (they change whenever the algorithm does).
#[doc(hidden)]
pub mod algo;
#[doc(hidden)]
pub mod clock;
mod condvar;
mod mutex;
mod park;
mod poison;
#[cfg(all(feature = "profile", not(gomutex_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "profile")))]
pub mod profile;
mod raw;
mod raw_rwlock;
#[doc(hidden)]
pub mod rwalgo;
mod rwlock;
#[doc(hidden)]
pub mod rwword;
#[doc(hidden)]
pub mod sema;
#[cfg(target_os = "linux")]
#[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
pub mod shm;
mod spin;
mod sync;

/// Under loom only: let sleepers with a deadline time out at arbitrary points of this
/// execution (loom has no time; a model opts in).
#[cfg(gomutex_loom)]
#[doc(hidden)]
pub use park::let_deadlines_pass;

pub use condvar::{Condvar, WaitTimeoutResult};
pub use mutex::{MappedMutexGuard, Mutex, MutexGuard};
pub use raw::RawMutex;
pub use raw_rwlock::RawRwLock;
pub use rwlock::{
    MappedRwLockReadGuard, MappedRwLockWriteGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
