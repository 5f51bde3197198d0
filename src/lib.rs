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
//! lock is one atomic add, or, once readers overlap, a store to the thread's own slot of a
//! global table (folly's `SharedMutex`, BRAVO); a waiting writer keeps new readers out, and the
//! readers that queued behind a writer go before the next writer ([`RawRwLock`] without data).
//!
//! ```
//! use gomutex::RwLock; // instead of std::sync::RwLock
//!
//! let config = RwLock::new(String::from("v1"));
//! *config.write().unwrap() = String::from("v2");
//! assert_eq!(*config.read().unwrap(), "v2");
//! ```
//!
//! # Which piece for which job
//!
//! | you need | use | feature | platforms |
//! |---|---|---|---|
//! | a `std::sync::Mutex` with Go's throughput and 1 ms fairness bound | [`Mutex`] | — | all |
//! | a condition variable for it | [`Condvar`] | — | all |
//! | a `std::sync::RwLock` with Go's `RWMutex` (writer preference; overlapping readers write no shared line) | [`RwLock`] ([`RawRwLock`] for `lock_api`) | — (`lock_api` for the traits) | all |
//! | a lock without data, or `lock_api::Mutex<gomutex::RawMutex, T>` (parking_lot's API) | [`RawMutex`] | `lock_api` (0.5) or `lock_api_04` (0.4) for the traits | all |
//! | parking_lot's `Mutex` + `Condvar` + `RwLock`, switched by the `use` line | `gomutex::lock_api::{Mutex, Condvar, RwLock}` | `lock_api` (`lock_api_04`: `Condvar` for 0.4's guards) | all |
//! | a mutex over a value shared by processes (`fork`, or unrelated processes by name), robust to owner death | [`shm::ShmMutex`][ShmMutex] | — (`derive` for `#[derive(ShmSafe)]`) | Linux |
//! | a readers-writer lock shared by processes, robust to a reader's or a writer's death | [`shm::ShmRwLock`][ShmRwLock] | — | Linux |
//! | a condition variable across processes (several per lock: `condvar_in`) | [`ShmCondvar`] (`m.condvar()`) | — | Linux |
//! | several locks and lock-free shared data in one mapping (forked, or by name) | [`shm::Mapping`][Mapping] + [`MappingLayout`] | — (`derive` for `#[derive(ShmShared)]`) | Linux |
//! | an update of shared data that a kill cannot tear | build it aside, publish with [`shm::commit_store`][commit_store] | — | Linux |
//! | keyed state shared by worker processes (`lua_shared_dict`'s API, TTLs, LRU, lists), every key old or new after any kill | [`dict::ShmDict`][ShmDict] | — | Linux |
//! | nginx's `limit_req` across worker processes (a leaky bucket per key in a `ShmDict`) | [`dict::RateLimiter`][RateLimiter] | — | Linux |
//! | nginx's upstream `zone` across worker processes: weighted round-robin, `max_fails`/`fail_timeout`, `max_conns`, backups, robust to any kill | [`upstream::UpstreamZone`][UpstreamZone] | — | Linux |
//! | a value one process publishes (a configuration reload) and every process reads whole, never blocking the publisher | [`shm::ShmSnapshot`][ShmSnapshot] | — | Linux |
//! | nginx's `accept_mutex` for prefork workers (+ a blocking mode, a spread rule) | [`accept::AcceptLock`] | — | all ([`ShmAcceptMutex`]: Linux) |
//! | where a program waits for its locks (Go's mutex profile, read with `go tool pprof`) | [`profile`][profile-mod] | `profile` | all |
//! | a shared lock seen from outside: contention, waits, starvation entries, owner deaths | [`ShmMutex::stats()`][stats] (prefork: `GET /status`) | — | Linux |
//!
//! # The guide
//!
//! The manuals are part of this documentation, in [`guide`]: [shared memory][guide-shm]
//! (`ShmMutex`, its condvar, mappings, robustness), [the readers-writer lock](guide::rwlock),
//! [the accept lock][guide-accept], [the mutex profile][guide-profile], and
//! [the algorithm's invariants](guide::algorithm). Their examples run as doc tests.
//!
//! # Features
//!
//! None is on by default: a default build depends on `parking_lot_core` and, on Linux, `libc`.
//!
#![cfg_attr(feature = "document-features", doc = document_features::document_features!())]
#![cfg_attr(
    not(feature = "document-features"),
    doc = "`lock_api`, `lock_api_04`, `derive`, `profile`: described in `Cargo.toml` \
           (this list shows their descriptions when built with the `document-features` \
           feature, as on docs.rs)."
)]
//!
//! # Platforms
//!
//! [`Mutex`], [`MutexGuard`], [`Condvar`], [`RawMutex`], [`RwLock`] and [`RawRwLock`] need only
//! `std` and `parking_lot_core`: they work wherever both do (Linux, macOS, Windows, the BSDs,
//! …). The shared-memory lock ([`shm`][shm-mod]) and the shared-memory parts of [`accept`] use
//! futexes, `mmap` and `/proc`, and are compiled on Linux only.
//!
// The links to what exists only on Linux or with a feature: to the item where it is compiled,
// else to docs.rs (built for Linux with every public feature).
#![cfg_attr(
    target_os = "linux",
    doc = "[ShmMutex]: shm::ShmMutex\n\
           [ShmRwLock]: shm::ShmRwLock\n\
           [`ShmCondvar`]: shm::ShmCondvar\n\
           [Mapping]: shm::Mapping\n\
           [`MappingLayout`]: shm::MappingLayout\n\
           [commit_store]: shm::commit_store\n\
           [ShmDict]: dict::ShmDict\n\
           [RateLimiter]: dict::RateLimiter\n\
           [UpstreamZone]: upstream::UpstreamZone\n\
           [ShmSnapshot]: shm::ShmSnapshot\n\
           [`ShmAcceptMutex`]: accept::ShmAcceptMutex\n\
           [stats]: shm::ShmMutex::stats\n\
           [shm-mod]: shm\n\
           [guide-shm]: guide::shm\n\
           [guide-accept]: guide::accept"
)]
#![cfg_attr(
    not(target_os = "linux"),
    doc = "[ShmMutex]: https://docs.rs/gomutex/latest/gomutex/shm/struct.ShmMutex.html\n\
           [ShmRwLock]: https://docs.rs/gomutex/latest/gomutex/shm/struct.ShmRwLock.html\n\
           [`ShmCondvar`]: https://docs.rs/gomutex/latest/gomutex/shm/struct.ShmCondvar.html\n\
           [Mapping]: https://docs.rs/gomutex/latest/gomutex/shm/struct.Mapping.html\n\
           [`MappingLayout`]: https://docs.rs/gomutex/latest/gomutex/shm/struct.MappingLayout.html\n\
           [commit_store]: https://docs.rs/gomutex/latest/gomutex/shm/fn.commit_store.html\n\
           [ShmDict]: https://docs.rs/gomutex/latest/gomutex/dict/struct.ShmDict.html\n\
           [RateLimiter]: https://docs.rs/gomutex/latest/gomutex/dict/struct.RateLimiter.html\n\
           [UpstreamZone]: https://docs.rs/gomutex/latest/gomutex/upstream/struct.UpstreamZone.html\n\
           [ShmSnapshot]: https://docs.rs/gomutex/latest/gomutex/shm/struct.ShmSnapshot.html\n\
           [`ShmAcceptMutex`]: https://docs.rs/gomutex/latest/gomutex/accept/struct.ShmAcceptMutex.html\n\
           [stats]: https://docs.rs/gomutex/latest/gomutex/shm/struct.ShmMutex.html#method.stats\n\
           [shm-mod]: https://docs.rs/gomutex/latest/gomutex/shm/index.html\n\
           [guide-shm]: https://docs.rs/gomutex/latest/gomutex/guide/shm/index.html\n\
           [guide-accept]: https://docs.rs/gomutex/latest/gomutex/guide/accept/index.html"
)]
#![cfg_attr(
    feature = "profile",
    doc = "[profile-mod]: profile\n[guide-profile]: guide::profile"
)]
#![cfg_attr(
    not(feature = "profile"),
    doc = "[profile-mod]: https://docs.rs/gomutex/latest/gomutex/profile/index.html\n\
           [guide-profile]: https://docs.rs/gomutex/latest/gomutex/guide/profile/index.html"
)]
#![deny(
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::undocumented_unsafe_blocks
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(all(gomutex_loom, gomutex_coherence))]
compile_error!("`--cfg gomutex_loom` and `--cfg gomutex_coherence` are two different models");
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
mod cpus;
#[cfg(target_os = "linux")]
mod crash;
#[cfg(target_os = "linux")]
#[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
pub mod dict;
pub mod guide;
#[cfg(any(feature = "lock_api", feature = "lock_api_04"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "lock_api", feature = "lock_api_04"))))]
pub mod lock_api;
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
pub mod rwtable;
#[doc(hidden)]
pub mod rwword;
#[doc(hidden)]
pub mod sema;
#[cfg(target_os = "linux")]
#[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
pub mod shm;
mod spin;
mod sync;
#[cfg(target_os = "linux")]
#[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
pub mod upstream;
/// The coherence model's run and counters, for `tests/coherence.rs` (`scripts/coherence.sh`).
#[cfg(gomutex_coherence)]
#[doc(hidden)]
pub use sync::coherence as __coherence;

/// For tests, examples and benchmarks, not part of the API: pin a thread to a CPU, name the
/// CPUs this thread may run on.
#[doc(hidden)]
pub mod __cpus {
    pub use crate::cpus::*;
}

/// Testing only, not part of the API: the crash points of the shared-memory lock, the
/// dictionary, the upstream zone and `ShmSnapshot` (one list), and `crash_at` / `stop_at` to arm one in this process. Exists only
/// with the test-only `__crash-points` feature (this crate's tests enable it).
#[cfg(all(target_os = "linux", feature = "__crash-points"))]
#[doc(hidden)]
pub mod __crash {
    pub use crate::crash::*;
}

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
