//! nginx's `accept_mutex` protocol for prefork servers, independent of any event loop.
//!
//! Several worker processes (or threads) share one listening socket. If all of them watch it,
//! every new connection wakes all of them and all but one find nothing to accept: the
//! *thundering herd*. nginx's answer (its `accept_mutex`, the default until 1.11.3) is a
//! cross-process lock taken with `try_lock` once per event-loop iteration: only the worker
//! holding it has the listening socket(s) in its epoll set. [`AcceptLock`] is that protocol as
//! a small state machine; the caller owns the sockets and the event loop and only follows the
//! [`IterationPlan`] it is given.
//!
//! Per event-loop iteration a worker:
//!
//! 1. calls [`AcceptLock::begin_iteration`]. While the load-balancing back-off
//!    `accept_disabled` is positive it is decremented and the lock is not even tried; otherwise
//!    the lock is tried (or, in [`LockMode::Blocking`] for an idle worker, waited for). The
//!    [`IterationPlan`] says whether the listening sockets must be armed, whether that changed
//!    since the last iteration (so `epoll_ctl` is needed), and the cap on the poll timeout for
//!    a worker that lost (`accept_mutex_delay`, 500 ms by default);
//! 2. polls, and accepts what is pending on the listening sockets, reporting each accepted
//!    connection with [`AcceptLock::accepted`]`(free, total)`, which recomputes nginx's
//!    back-off `accept_disabled = total / 8 - free` (positive only when fewer than 1/8 of the
//!    worker's connection slots are free);
//! 3. calls [`AcceptLock::end_accept_phase`], which releases the lock, **before** processing
//!    requests: the lock covers the poll and the accepts, never request handling.
//!
//! ```
//! use gomutex::accept::{AcceptLock, Config};
//! use gomutex::RawMutex;
//!
//! // Two workers (threads here; processes with `gomutex::shm`) sharing one accept lock.
//! let mutex = RawMutex::new();
//! let mut a = AcceptLock::new(&mutex, Config::default());
//! let mut b = AcceptLock::new(&mutex, Config::default());
//!
//! let d = a.begin_iteration(false);
//! assert!(d.armed && d.changed); // a: epoll_ctl(ADD, listen_fd); poll without a cap
//! let d = b.begin_iteration(false);
//! assert!(!d.armed); // b: do not watch the listening socket, poll at most 500 ms
//! assert_eq!(d.poll_timeout, Some(std::time::Duration::from_millis(500)));
//!
//! a.accepted(1000, 1024); // a accepted a connection; 1000 of its 1024 slots are free
//! a.end_accept_phase(); // release before handling requests
//! b.end_accept_phase(); // (b holds nothing: no-op)
//!
//! let d = b.begin_iteration(false);
//! assert!(d.armed && d.changed); // b's turn: epoll_ctl(ADD, listen_fd)
//! let d = a.begin_iteration(false);
//! assert!(!d.armed && d.changed); // a lost: epoll_ctl(DEL, listen_fd)
//! ```
//!
//! A complete prefork TCP echo server on it (a master that binds and forks, workers that
//! follow the three steps above with `poll(2)`) is `examples/accept_echo.rs` (~100 lines;
//! `cargo run --example accept_echo`); `examples/prefork` is a full HTTP server with every
//! alternative nginx has used.
//!
//! # Beyond nginx: a blocking mode
//!
//! nginx only ever try-locks its accept mutex; a worker that lost retries when some other event
//! wakes it or after `accept_mutex_delay`, so a busy holder that keeps winning the next
//! `try_lock` ends up taking nearly all connections (why nginx turned the mutex off by default).
//! In [`LockMode::Blocking`] a worker that has nothing else to wait for (the caller passes
//! `idle = true`: no open connections) sleeps *on the lock* instead of polling: the lock is
//! taken at once when the holder releases it, and Go's starvation mode (a waiter that waited
//! more than 1 ms gets the lock handed over in FIFO order) keeps any worker from being shut
//! out. Busy workers still only try-lock, so their connections are never stalled behind the
//! lock. A waiting worker gives up after `delay` so it can notice shutdown requests.
//!
//! This spreads a steady stream of short connections evenly. Between *busy* workers it is
//! still nginx's race (the holder keeps the lock across its poll), so a burst of connections
//! that arrives while every worker is busy mostly goes to the holder.
//!
//! # Beyond nginx: spreading long-lived connections
//!
//! A burst of keep-alive connections (a client opening its pool) is taken by whichever worker
//! holds the lock, and each connection stays where it was accepted for its lifetime. nginx's
//! back-off only starts when a worker is 7/8 full, far too late. With a [`Spread`] in the
//! [`Config`] and the workers' live connection counts passed to
//! [`AcceptLock::begin_iteration_loaded`] (a [`Load`], read from memory the workers share),
//! the rule [`Spread::decide`] generalises the back-off to "more loaded than the others":
//!
//! * a worker holding more than `margin` connections above the mean of the live workers, or
//!   (with [`Load::with_least`]) above the least loaded one, does not try the lock this
//!   iteration (and disarms, as inside the back-off); with recent accept counts
//!   ([`Load::with_recent`]) the same goes for a worker accepting more than
//!   [`Spread::rate_slack`] percent above the least (short connections leave no open count);
//! * a holder accepts at most [`IterationPlan::batch`] connections (no more than keep it within the
//!   margin, at most `batch`), then releases the lock as usual, so a less loaded worker takes
//!   the next batch;
//! * a worker that skipped or lost the lock caps its poll at `retry` (2 ms) rather than
//!   `delay`, because the counts move while it polls: the holder may be about to skip.
//!
//! The least loaded worker never skips, so some worker always accepts — provided dead workers
//! drop out of the counts (the supervisor resets a reaped worker's count, as it
//! force-unlocks). An idle worker (count 0) never skips, so in [`LockMode::Blocking`] idle
//! workers still sleep on the lock.
//!
//! # What does not belong here
//!
//! The lock itself is any [`AcceptMutex`]: [`crate::RawMutex`] for workers that are threads of
//! one process, or [`ShmAcceptMutex`] over a [`crate::shm::ShmMutex`] for forked workers.
//! Recovering a lock whose holder died is the supervisor's job ([`ForceUnlock`], after
//! `waitpid`), or the lock's (owner-death detection); the next holder is told through
//! [`Acquired::OwnerDied`] and [`AcceptStats::owner_died`]. The accept lock protects no data,
//! so nothing needs repair.
//!
//! # nginx differences
//!
//! A worker inside its back-off (`accept_disabled > 0`) also disarms its listening sockets
//! (nginx leaves them armed, so two workers may accept at once: trac #612). The blocking mode
//! and the spread rule are not in nginx (both are off in [`Config::nginx`]).
//!
#![cfg_attr(
    target_os = "linux",
    doc = "The manual, [`crate::guide::accept`], has the protocol step by step, the prefork \
           example and the measurements against nginx."
)]
#![cfg_attr(
    not(target_os = "linux"),
    doc = "The manual, `gomutex::guide::accept` (in the Linux documentation, where its \
           shared-memory examples run), has the protocol step by step, the prefork example \
           and the measurements against nginx."
)]

use core::fmt;
use std::time::Duration;

#[cfg(target_os = "linux")]
mod shm;
mod spread;
#[cfg(target_os = "linux")]
#[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
pub use shm::ShmAcceptMutex;
pub use spread::{Load, Share, Spread};

/// nginx's default `accept_mutex_delay`.
pub const DEFAULT_DELAY: Duration = Duration::from_millis(500);

/// How a lock acquisition went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// The lock was free or released normally.
    Clean,
    /// The previous holder died holding the lock (it was recovered by a supervisor's force
    /// unlock or by owner-death detection). The accept lock protects no data, so the new holder
    /// just goes on; [`AcceptLock`] counts it in [`AcceptStats::owner_died`].
    OwnerDied,
}

/// A lock shared by the workers: what [`AcceptLock`] needs from it.
///
/// Implemented for [`crate::RawMutex`] (workers that are threads of one process), for
/// [`ShmAcceptMutex`] (worker processes), and for references and smart pointers to
/// implementors. A cross-process implementation must report a
/// dead previous owner as [`Acquired::OwnerDied`] and leave the lock usable (consistent) again.
pub trait AcceptMutex {
    /// Take the lock if it is free now (never blocks). `None` if it is held by someone else.
    fn try_lock(&self) -> Option<Acquired>;

    /// Take the lock, waiting at most `timeout`. `None` if it was not acquired in time.
    fn lock_for(&self, timeout: Duration) -> Option<Acquired>;

    /// Release the lock.
    ///
    /// # Safety
    ///
    /// The caller holds the lock (it acquired it with `try_lock` or `lock_for` and has not
    /// released it since).
    unsafe fn unlock(&self);
}

/// A cross-process lock a supervisor can release on behalf of a dead process (nginx's
/// `ngx_shmtx_force_unlock`), called right after `waitpid` reaped `pid`, so the pid cannot
/// have been reused yet.
pub trait ForceUnlock {
    /// Release the lock if `pid` holds it. Returns whether it did.
    fn force_unlock(&self, pid: i32) -> bool;
}

impl AcceptMutex for crate::RawMutex {
    fn try_lock(&self) -> Option<Acquired> {
        crate::RawMutex::try_lock(self).then_some(Acquired::Clean)
    }
    fn lock_for(&self, timeout: Duration) -> Option<Acquired> {
        crate::RawMutex::try_lock_for(self, timeout).then_some(Acquired::Clean)
    }
    unsafe fn unlock(&self) {
        // SAFETY: forwarded contract: the caller holds the lock.
        unsafe { crate::RawMutex::unlock(self) }
    }
}

/// `AcceptMutex` for references and owning pointers to one, so a worker can hold the lock by
/// `&`, `Box` or `Arc`.
macro_rules! forward_accept_mutex {
    ($($ptr:ty),*) => {$(
        impl<M: AcceptMutex + ?Sized> AcceptMutex for $ptr {
            fn try_lock(&self) -> Option<Acquired> {
                (**self).try_lock()
            }
            fn lock_for(&self, timeout: Duration) -> Option<Acquired> {
                (**self).lock_for(timeout)
            }
            unsafe fn unlock(&self) {
                // SAFETY: forwarded contract.
                unsafe { (**self).unlock() }
            }
        }
    )*};
}

forward_accept_mutex!(&M, Box<M>, std::sync::Arc<M>);

impl<M: ForceUnlock + ?Sized> ForceUnlock for &M {
    fn force_unlock(&self, pid: i32) -> bool {
        (**self).force_unlock(pid)
    }
}

/// How a worker that finds the lock taken behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockMode {
    /// nginx: `try_lock` only; a loser polls with its timeout capped at `delay`.
    #[default]
    TryLock,
    /// A loser that is idle waits on the lock (at most `delay` per iteration); a busy loser
    /// behaves as in `TryLock`.
    Blocking,
}

/// Settings of an [`AcceptLock`]: start from [`Config::nginx`] (the default) or
/// [`Config::blocking`] and adjust with [`with_mode`](Config::with_mode) and
/// [`with_delay`](Config::with_delay) (fields may be added, so there is no struct literal).
///
/// ```
/// use gomutex::accept::{Config, LockMode};
/// use std::time::Duration;
///
/// let cfg = Config::nginx().with_delay(Duration::from_millis(100));
/// assert_eq!(cfg.mode, LockMode::TryLock);
/// assert_eq!(cfg.with_mode(LockMode::Blocking), Config::blocking().with_delay(cfg.delay));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Try-lock only (nginx) or wait on the lock when idle.
    pub mode: LockMode,
    /// nginx's `accept_mutex_delay`: the longest a loser polls before trying again, and in
    /// blocking mode the longest one wait on the lock lasts. Default 500 ms.
    pub delay: Duration,
    /// The load-aware spread rule ([`Spread`]), used by
    /// [`AcceptLock::begin_iteration_loaded`]; `None` (the default of both constructors):
    /// nginx's behaviour, no cap on a holder's accepts.
    pub spread: Option<Spread>,
}

impl Default for Config {
    fn default() -> Self {
        Self::nginx()
    }
}

impl Config {
    /// nginx's settings ([`LockMode::TryLock`], 500 ms).
    ///
    /// ```
    /// use gomutex::accept::{Config, LockMode};
    /// let c = Config::nginx();
    /// assert_eq!((c.mode, c.delay.as_millis(), c.spread), (LockMode::TryLock, 500, None));
    /// ```
    pub const fn nginx() -> Self {
        Self {
            mode: LockMode::TryLock,
            delay: DEFAULT_DELAY,
            spread: None,
        }
    }

    /// [`LockMode::Blocking`] with a 500 ms wait slice.
    ///
    /// ```
    /// use gomutex::accept::{Config, LockMode, Spread};
    /// let c = Config::blocking().with_spread(Some(Spread::DEFAULT));
    /// assert_eq!(c.mode, LockMode::Blocking);
    /// ```
    pub const fn blocking() -> Self {
        Self::nginx().with_mode(LockMode::Blocking)
    }

    /// These settings with `mode`.
    #[must_use]
    pub const fn with_mode(self, mode: LockMode) -> Self {
        Self { mode, ..self }
    }

    /// These settings with `delay` (nginx's `accept_mutex_delay`).
    #[must_use]
    pub const fn with_delay(self, delay: Duration) -> Self {
        Self { delay, ..self }
    }

    /// These settings with the load-aware spread rule (`None`: off).
    #[must_use]
    pub const fn with_spread(self, spread: Option<Spread>) -> Self {
        Self { spread, ..self }
    }
}

/// What the worker does in this iteration (made by [`AcceptLock::begin_iteration`]; fields may
/// be added).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct IterationPlan {
    /// The listening socket(s) must be in this worker's poll set during this iteration.
    pub armed: bool,
    /// `armed` differs from the previous iteration: add (`armed`) or remove (`!armed`) the
    /// listening sockets now.
    pub changed: bool,
    /// Cap on this iteration's poll timeout (`min(own_timeout, cap)`); `None`: no cap.
    pub poll_timeout: Option<Duration>,
    /// When armed: the most connections to accept in this accept phase (from the spread rule,
    /// [`AcceptLock::begin_iteration_loaded`]); `None`: no cap (nginx).
    pub batch: Option<usize>,
}

impl IterationPlan {
    /// The timeout to poll with, given the caller's own (`None` = infinite).
    pub fn timeout(&self, own: Option<Duration>) -> Option<Duration> {
        match (own, self.poll_timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Counters of one [`AcceptLock`] (one worker), from [`AcceptLock::stats`]; counters may be
/// added. `Default` is all zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct AcceptStats {
    /// Calls of [`AcceptLock::begin_iteration`].
    pub iterations: u64,
    /// Iterations skipped because of the `accept_disabled` back-off.
    pub disabled_skips: u64,
    /// Times the lock was acquired (by `try_lock` or a blocking wait).
    pub acquisitions: u64,
    /// `try_lock` calls that found the lock held.
    pub contended: u64,
    /// Blocking waits started (blocking mode, idle worker, lock held).
    pub blocking_waits: u64,
    /// Blocking waits that timed out.
    pub blocking_timeouts: u64,
    /// Acquisitions that reported a dead previous owner ([`Acquired::OwnerDied`]).
    pub owner_died: u64,
    /// Times the listening sockets were armed.
    pub arms: u64,
    /// Times they were disarmed.
    pub disarms: u64,
    /// Connections reported through [`AcceptLock::accepted`].
    pub accepted: u64,
    /// Iterations that skipped the lock because the spread rule said so ([`Share::Skip`]).
    pub spread_skips: u64,
}

/// The caller's listening sockets, for [`AcceptLock::begin_iteration_with`]: arm (add to the
/// poll set) and disarm (remove).
pub trait Listeners {
    /// Error of arming or disarming.
    type Error;
    /// Start watching the listening sockets.
    fn arm(&mut self) -> Result<(), Self::Error>;
    /// Stop watching them.
    fn disarm(&mut self) -> Result<(), Self::Error>;
}

/// One worker's side of the accept lock: nginx's per-iteration protocol over an
/// [`AcceptMutex`]. See the [module docs](self).
///
/// The lock is held by the process that took it: a copy made by `fork()` inside an accept
/// phase holds nothing in the child ([`holds_lock`](Self::holds_lock) is `false`, its next
/// iteration tries the lock like any worker, and ending its phase or dropping it releases
/// nothing), so two workers never accept at once.
pub struct AcceptLock<M: AcceptMutex> {
    mutex: M,
    config: Config,
    /// The process ([`this_process`]) holding the lock word through this value right now
    /// (between `begin_iteration` and `end_accept_phase`); 0: none. A copy inherited across
    /// `fork()` holds nothing in the child.
    held: u32,
    /// The listening sockets are armed (nginx's `ngx_accept_mutex_held`, which persists
    /// between iterations).
    armed: bool,
    accept_disabled: i64,
    /// This iteration's cap from the spread rule.
    batch: Option<usize>,
    /// This iteration's poll cap if it skips or loses the lock (from the spread rule).
    retry: Option<Duration>,
    stats: AcceptStats,
}

impl<M: AcceptMutex> fmt::Debug for AcceptLock<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcceptLock")
            .field("config", &self.config)
            .field("held", &self.holds_lock())
            .field("armed", &self.armed)
            .field("accept_disabled", &self.accept_disabled)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<M: AcceptMutex> AcceptLock<M> {
    /// A worker's accept lock over `mutex` (shared with the other workers), not armed.
    ///
    /// ```
    /// use gomutex::accept::{AcceptLock, Config};
    /// use gomutex::RawMutex;
    /// // Two workers that are threads of one process share a `RawMutex` (`&RawMutex` is an
    /// // `AcceptMutex` too); forked workers use a `ShmAcceptMutex`.
    /// let lock = RawMutex::new();
    /// let mut a = AcceptLock::new(&lock, Config::nginx());
    /// let mut b = AcceptLock::new(&lock, Config::nginx());
    /// assert!(a.begin_iteration(false).armed);  // a holds the lock: it arms its listeners
    /// assert!(!b.begin_iteration(false).armed); // b lost the race
    /// a.end_accept_phase();
    /// ```
    pub fn new(mutex: M, config: Config) -> Self {
        Self {
            mutex,
            config,
            held: 0,
            armed: false,
            accept_disabled: 0,
            batch: None,
            retry: None,
            stats: AcceptStats::default(),
        }
    }

    /// Start an event-loop iteration: back off, or try (or wait for) the lock. `idle` is
    /// whether this worker has nothing else to wait for (no open connections); it only matters
    /// in [`LockMode::Blocking`].
    ///
    /// Act on the result: if `changed`, add (`armed`) or remove (`!armed`) the listening
    /// sockets; cap the poll timeout with [`IterationPlan::timeout`]. Then poll, accept, and call
    /// [`end_accept_phase`](Self::end_accept_phase).
    ///
    /// If the lock is still held from an iteration that was not ended, it is kept.
    pub fn begin_iteration(&mut self, idle: bool) -> IterationPlan {
        self.iterate(idle, None)
    }

    /// Like [`begin_iteration`](Self::begin_iteration), with the workers' live connection
    /// counts for the spread rule ([`Config::spread`]; without one this is
    /// `begin_iteration`). A worker the rule tells to skip does not try the lock and disarms,
    /// as inside nginx's back-off; otherwise [`IterationPlan::batch`] caps this accept phase.
    pub fn begin_iteration_loaded(&mut self, idle: bool, load: Load) -> IterationPlan {
        self.iterate(idle, Some(load))
    }

    fn iterate(&mut self, idle: bool, load: Option<Load>) -> IterationPlan {
        self.stats.iterations += 1;
        if self.holds_lock() {
            return self.plan(true, false, None);
        }
        // A copy forked from a holder holds nothing here: the lock is the parent's.
        self.held = 0;
        self.batch = None;
        self.retry = None;
        if self.accept_disabled > 0 {
            self.accept_disabled -= 1;
            self.stats.disabled_skips += 1;
            return self.lost();
        }
        if let (Some(spread), Some(load)) = (self.config.spread, load) {
            // Whoever does not get to accept retries soon: the counts move under it.
            self.retry = Some(spread.retry);
            match spread.decide(load) {
                Share::Skip => {
                    self.stats.spread_skips += 1;
                    return self.lost();
                }
                Share::Accept(k) => self.batch = Some(k),
            }
        }
        let got = match self.mutex.try_lock() {
            Some(a) => Some(a),
            None => {
                self.stats.contended += 1;
                if self.config.mode == LockMode::Blocking && idle {
                    self.stats.blocking_waits += 1;
                    let got = self.mutex.lock_for(self.config.delay);
                    if got.is_none() {
                        self.stats.blocking_timeouts += 1;
                        // We already waited a whole `delay`: poll without sleeping, then come
                        // back to wait again.
                        let mut d = self.lost();
                        d.poll_timeout = Some(Duration::ZERO);
                        return d;
                    }
                    got
                } else {
                    None
                }
            }
        };
        match got {
            Some(how) => {
                self.held = this_process();
                self.stats.acquisitions += 1;
                if how == Acquired::OwnerDied {
                    self.stats.owner_died += 1;
                }
                let changed = !self.armed;
                if changed {
                    self.armed = true;
                    self.stats.arms += 1;
                }
                self.plan(true, changed, None)
            }
            None => self.lost(),
        }
    }

    /// Like [`begin_iteration`](Self::begin_iteration), and also arm or disarm `listeners`
    /// when that changes. If arming fails the lock is released (another worker can take over)
    /// and the error returned; if disarming fails the sockets count as still armed, so the
    /// next iteration tries again.
    pub fn begin_iteration_with<L: Listeners>(
        &mut self,
        idle: bool,
        listeners: &mut L,
    ) -> Result<IterationPlan, L::Error> {
        let d = self.begin_iteration(idle);
        if d.changed {
            let r = if d.armed {
                listeners.arm()
            } else {
                listeners.disarm()
            };
            if let Err(e) = r {
                if d.armed {
                    self.armed = false;
                    self.end_accept_phase();
                } else {
                    self.armed = true;
                }
                return Err(e);
            }
        }
        Ok(d)
    }

    fn lost(&mut self) -> IterationPlan {
        let changed = self.armed;
        if changed {
            self.armed = false;
            self.stats.disarms += 1;
        }
        let cap = self
            .retry
            .map_or(self.config.delay, |r| r.min(self.config.delay));
        self.plan(false, changed, Some(cap))
    }

    fn plan(&self, armed: bool, changed: bool, poll_timeout: Option<Duration>) -> IterationPlan {
        IterationPlan {
            armed,
            changed,
            poll_timeout,
            batch: if armed { self.batch } else { None },
        }
    }

    /// Report one accepted connection; `free` of the worker's `total` connection slots are
    /// free after it. Recomputes nginx's back-off: `accept_disabled = total / 8 - free`.
    pub fn accepted(&mut self, free: usize, total: usize) {
        self.stats.accepted += 1;
        self.accept_disabled = (total / 8) as i64 - free as i64;
    }

    /// End the accept phase of this iteration: release the lock if held (the listening sockets
    /// stay armed until an iteration that does not get the lock). Call it before processing
    /// requests.
    pub fn end_accept_phase(&mut self) {
        let mine = self.holds_lock();
        self.held = 0;
        if mine {
            // SAFETY: `held` names this process only after its successful acquisition (not a
            // parent's, copied by `fork()`), and is cleared here, the only place that releases.
            unsafe { self.mutex.unlock() };
        }
    }

    /// Release the lock if held and forget the armed state (e.g. before shutting down or after
    /// closing the listening sockets). Returns whether the sockets were armed.
    pub fn disarm(&mut self) -> bool {
        self.end_accept_phase();
        let was = self.armed;
        if was {
            self.armed = false;
            self.stats.disarms += 1;
        }
        was
    }

    /// The lock is held right now (inside an accept phase), by this process: `false` in a
    /// copy forked from a holder.
    pub fn holds_lock(&self) -> bool {
        self.held != 0 && self.held == this_process()
    }

    /// The listening sockets are armed.
    pub fn is_armed(&self) -> bool {
        self.armed
    }

    /// nginx's `ngx_accept_disabled`: iterations left to sit out (when positive).
    pub fn accept_disabled(&self) -> i64 {
        self.accept_disabled
    }

    /// The counters.
    pub fn stats(&self) -> AcceptStats {
        self.stats
    }

    /// The settings.
    pub fn config(&self) -> Config {
        self.config
    }

    /// The underlying lock.
    pub fn mutex(&self) -> &M {
        &self.mutex
    }
}

/// Which process this is, for [`AcceptLock`]'s `held`: the shared-memory lock's fork
/// generation (a cached value, no system call), which a forked child does not share with its
/// parent. Without `gomutex::shm` (not Linux) every process is 1: the locks there
/// ([`crate::RawMutex`]) are per process anyway.
#[inline]
fn this_process() -> u32 {
    #[cfg(target_os = "linux")]
    {
        crate::shm::seam::fork_generation()
    }
    #[cfg(not(target_os = "linux"))]
    {
        1
    }
}

impl<M: AcceptMutex> Drop for AcceptLock<M> {
    fn drop(&mut self) {
        self.end_accept_phase();
    }
}

#[cfg(test)]
mod tests;
