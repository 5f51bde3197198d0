//! Go's mutex profile for the in-process locks: where a program waits for its locks.
//!
//! As Go's `runtime.SetMutexProfileFraction` and `/debug/pprof/mutex`: set a rate, and 1 in
//! `rate` contended releases (a release that wakes or hands the lock to a sleeping waiter) is
//! sampled; the time the lock kept its waiters asleep is charged to the call stack of the
//! thread that released it, which is where the lock was held too long. [`write_pprof`] writes
//! what was sampled as a gzipped pprof `profile.proto`, symbolised, so `go tool pprof` (or any
//! pprof reader) needs nothing else; [`write_text`] prints the top call sites.
//!
//! ```
//! use gomutex::{profile, Mutex};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! profile::set_mutex_profile_fraction(1); // sample every contended release
//!
//! let m = Arc::new(Mutex::new(0));
//! let g = m.lock().unwrap();
//! let m2 = Arc::clone(&m);
//! let waiter = std::thread::spawn(move || *m2.lock().unwrap() += 1);
//! std::thread::sleep(Duration::from_millis(5)); // the waiter sleeps on the lock meanwhile
//! drop(g); // a contended release: the waiter's sleep is charged to this line
//! waiter.join().unwrap();
//!
//! let path = std::env::temp_dir().join(format!("mutex-{}.pb.gz", std::process::id()));
//! profile::write_pprof(std::fs::File::create(&path)?)?;
//! // Read it with pprof, as Go's own (`go tool pprof -top mutex.pb.gz` in a shell):
//! if let Ok(out) = std::process::Command::new("go")
//!     .args(["tool", "pprof", "-top"])
//!     .arg(&path)
//!     .output()
//! {
//!     println!("{}", String::from_utf8_lossy(&out.stdout)); // Type: delay ... main
//! }
//! // Or without pprof: the call sites by delay.
//! profile::write_text(std::io::stdout())?;
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # What is charged (Go 1.8's rule)
//!
//! Go 1.19's rule, the one Go kept from 1.8 to 1.21 (`src/runtime/sema.go`): a sleeper is
//! stamped when it goes to sleep, and a release that wakes one charges the time since the
//! oldest sleeper's stamp, then re-stamps the sleeper that is now first in the queue, so each
//! release answers for the time the lock had a sleeper since the release before it; one event
//! per release however many sleep. Go 1.22 also multiplies by the sleepers still queued (it
//! keeps the tail's stamp to do so); the in-process queue is `parking_lot_core`'s, which
//! shows a release only the sleepers up to the one it wakes, so the tail's stamp would cost a
//! walk of the whole queue under its lock on every sampled release. Time spent spinning is
//! not charged (Go's neither), nor the [`Condvar`](crate::Condvar) wait itself (Go's block
//! profile); a condition variable waiter's re-acquisition of the mutex is.
//!
//! Covered: [`Mutex`](crate::Mutex), [`RawMutex`](crate::RawMutex) (so `lock_api`'s mutex
//! on it), and the mutex re-acquisition of [`Condvar`](crate::Condvar) waits: everything
//! that sleeps on the in-process wait queue. The shared-memory locks are not profiled.
//!
//! Unlike Go, each event is scaled by the rate it was sampled at when it is recorded, not by
//! the rate when the profile is written: changing the rate (even to 0) keeps what was
//! recorded. The profile accumulates from the start of the process, as Go's does.
//!
//! # Cost
//!
//! Without the `profile` feature the locks' code is unchanged. With it, the fast paths are
//! unchanged and at rate 0 a sleeper's slow path does one relaxed load more (the rate).
//! While profiling, each sleep reads the clock once and each release that wakes a sleeper once,
//! and a sampled release captures its stack (a few microseconds).
//!
//! # Reading the profile
//!
//! `go tool pprof -top mutex.pb.gz` lists functions by delay; `-traces` prints every stack;
//! `-http=:8080` the usual views. Function names come from the symbol table; file:line and
//! inlined frames need line tables (`debug = "line-tables-only"` or more in the Cargo profile
//! of the build being profiled). The leaf of every stack is the lock's unlock, as Go's
//! `sync.(*Mutex).Unlock`.
//!
//! The manual, [`crate::guide::profile`], shows the `go tool pprof` commands, what a sample
//! means, the symbols a build needs and the measured cost.

mod event;
#[doc(hidden)] // the messages, for readers of the profile in this crate's tests; not API
pub mod proto;
mod report;

pub(crate) use event::{Charge, Waiter};

use prost::Message;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// The mutex profile fraction (Go's `mutexprofilerate`): 0 off, else 1 in `RATE` sampled.
static RATE: AtomicU32 = AtomicU32::new(0);

/// Sample 1 in `rate` contended releases from now on (Go's `runtime.SetMutexProfileFraction`):
/// 0 turns profiling off (the default), 1 records every one. Returns the previous rate.
///
/// ```
/// use gomutex::profile;
/// let before = profile::set_mutex_profile_fraction(5);
/// assert_eq!(profile::mutex_profile_fraction(), 5);
/// assert_eq!(profile::set_mutex_profile_fraction(before), 5);
/// ```
pub fn set_mutex_profile_fraction(rate: u32) -> u32 {
    event::now_ns(); // start the profile's clock before the first stamp
    RATE.swap(rate, Relaxed)
}

/// The current rate (Go reads it with `SetMutexProfileFraction(-1)`).
///
/// ```
/// assert_eq!(gomutex::profile::mutex_profile_fraction(), 0); // off by default
/// ```
pub fn mutex_profile_fraction() -> u32 {
    RATE.load(Relaxed)
}

/// Write the profile so far as a gzipped pprof `profile.proto`, Go's format for
/// `/debug/pprof/mutex`: sample types `contentions/count` and `delay/nanoseconds` (estimates
/// of all events: each sample scaled by its rate), period = the current rate, every location
/// symbolised (function, file, line, inlined frames where the binary has line tables).
///
/// ```
/// let mut gz = Vec::new();
/// gomutex::profile::write_pprof(&mut gz).unwrap();
/// assert_eq!(gz[..2], [0x1f, 0x8b]); // gzip
/// ```
pub fn write_pprof(w: impl Write) -> io::Result<()> {
    let profile = report::build(RATE.load(Relaxed));
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()?.flush()
}

/// Write the profile so far as text for people without pprof: the call sites (the first frame
/// outside the lock on the releasing stack) by estimated delay, most first, at most 20.
///
/// ```
/// let mut text = Vec::new();
/// gomutex::profile::write_text(&mut text).unwrap();
/// assert!(String::from_utf8(text).unwrap().starts_with("mutex profile:"));
/// ```
pub fn write_text(mut w: impl Write) -> io::Result<()> {
    report::text(&mut w, RATE.load(Relaxed), 20)
}
