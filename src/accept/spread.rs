//! Spreading long-lived connections: the workers' [`Load`], the rule [`Spread`] and what it
//! decides for one iteration ([`Share`]).

#[cfg(doc)]
use super::{AcceptLock, Config, ForceUnlock, LockMode};
use std::time::Duration;

/// The live connection counts of the workers, as one worker sees them at the start of an
/// iteration (read from memory the workers share, e.g. one relaxed atomic per worker next to
/// the lock; a slightly stale view only delays the balancing by an iteration). Made with
/// [`Load::new`] and [`Load::with_least`] (fields may be added, e.g. a request rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Load {
    /// This worker's open connections.
    pub own: usize,
    /// The sum of the other live workers' open connections.
    pub others: usize,
    /// How many other workers are alive (a dead worker's count must be dropped: its slot
    /// reset by the supervisor after `waitpid`, as with [`ForceUnlock`]).
    pub other_workers: usize,
    /// The smallest count among the other live workers, if known: the rule then also keeps
    /// this worker within the margin of the least loaded one, not only of the mean (with more
    /// than two workers the mean lets several workers sit at mean + margin while one stays
    /// far below). `None` (the default of [`Load::new`]): the mean alone.
    pub least: Option<usize>,
    /// This worker's recent accepts (e.g. an exponentially decayed count), for
    /// [`Spread::rate_slack`]; meaningful with [`Load::least_recent`].
    pub own_recent: u64,
    /// The smallest recent-accept count among the other live workers, in the same unit as
    /// `own_recent`; `None` (the default): the rule looks at open connections only. Short
    /// connections (one request each) are closed before the next iteration, so their open
    /// counts stay near 0 in every worker and only the accept rate tells the workers apart.
    pub least_recent: Option<u64>,
}

impl Load {
    /// `own` connections here, `others` in all of the `other_workers` other live workers.
    ///
    /// ```
    /// use gomutex::accept::{Load, Share, Spread};
    /// // 10 connections here, 2 in the one other worker: more than the mean, skip the lock.
    /// assert_eq!(Spread::new(0, 4).decide(Load::new(10, 2, 1)), Share::Skip);
    /// ```
    pub const fn new(own: usize, others: usize, other_workers: usize) -> Self {
        Self {
            own,
            others,
            other_workers,
            least: None,
            own_recent: 0,
            least_recent: None,
        }
    }

    /// This load with recent accept counts: `own` here, `least` the smallest among the other
    /// live workers ([`Load::least_recent`]; ignored when there are no other workers).
    #[must_use]
    pub const fn with_recent(self, own: u64, least: u64) -> Self {
        Self {
            own_recent: own,
            least_recent: Some(least),
            ..self
        }
    }

    /// This load with `least`, the smallest count among the other live workers ([`Load::least`];
    /// ignored when there are no other workers).
    #[must_use]
    pub const fn with_least(self, least: usize) -> Self {
        Self {
            least: Some(least),
            ..self
        }
    }
}

/// What the spread rule allows this worker this iteration ([`Spread::decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// More loaded than the mean by more than the margin: do not even try the lock, disarm.
    Skip,
    /// Try (or, idle in blocking mode, wait for) the lock and accept at most this many
    /// connections (at least 1) before releasing it.
    Accept(usize),
}

/// nginx's `accept_disabled` back-off generalised: instead of backing off only when 7/8 of its
/// connection slots are used, a worker backs off as soon as it holds more than
/// `margin` connections above the mean of the live workers, and a holder accepts only as many
/// as keep it within that bound, at most `batch`, before releasing the lock so that a less
/// loaded worker can take the next batch.
///
/// ```
/// use gomutex::accept::{Load, Share, Spread};
///
/// let s = Spread::new(1, 4); // margin 1, batches of at most 4
/// // Two workers, none loaded: accept up to 2 (then 2 vs 0: mean 1, 1 above it).
/// assert_eq!(s.decide(Load::new(0, 0, 1)), Share::Accept(2));
/// // 30 here, 20 in the other: mean 25, 5 above it: skip the lock.
/// assert_eq!(s.decide(Load::new(30, 20, 1)), Share::Skip);
/// // The other one, 10 below the mean: a full batch.
/// assert_eq!(s.decide(Load::new(20, 30, 1)), Share::Accept(4));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Spread {
    /// How many connections above the mean of the live workers' counts a worker may hold and
    /// still accept (it then takes at least one, so two workers end at most `2·margin + 1`
    /// apart). 0 is the tightest spread (and the most lock hand-overs in a burst).
    pub margin: usize,
    /// The most connections a holder accepts per accept phase (values below 1 count as 1).
    pub batch: usize,
    /// Cap on the poll timeout of a worker that skipped or lost the lock (instead of
    /// [`Config::delay`]): the counts move while it polls (the holder may go above the mean and
    /// skip, and then nobody watches the listening sockets until someone tries again). The
    /// price: a worker that is not the holder wakes every `retry` (an idle holder keeps the
    /// lock across its poll; in [`LockMode::Blocking`] idle workers wait on the lock instead).
    pub retry: Duration,
    /// With recent accept counts in the [`Load`] ([`Load::with_recent`]): a worker whose count
    /// exceeds the least recently-accepting worker's by more than this many percent (plus
    /// `margin + batch`, so that small counts, e.g. a keep-alive burst, are left to the
    /// open-connection rule) skips the lock. `None`: recent counts are ignored.
    pub rate_slack: Option<u32>,
}

impl Default for Spread {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Spread {
    /// Margin 0, batches of 4, retry 2 ms, rate slack 20 % (see docs/accept.md for why).
    pub const DEFAULT: Spread = Spread::new(0, 4);

    /// The rule with these knobs (and a 2 ms `retry`, a 20 % `rate_slack`).
    ///
    /// ```
    /// use gomutex::accept::{Load, Share, Spread};
    /// let s = Spread::new(1, 8); // 1 connection of slack over the mean, batches of 8
    /// // None here, 30 in the 3 other workers: far below the mean, a full batch.
    /// assert_eq!(s.decide(Load::new(0, 30, 3)), Share::Accept(8));
    /// ```
    pub const fn new(margin: usize, batch: usize) -> Self {
        Self {
            margin,
            batch,
            retry: Duration::from_millis(2),
            rate_slack: Some(20),
        }
    }

    /// This rule with `rate_slack` (`None`: recent accept counts ignored).
    #[must_use]
    pub const fn with_rate_slack(self, rate_slack: Option<u32>) -> Self {
        Self { rate_slack, ..self }
    }

    /// This rule with `retry`.
    #[must_use]
    pub const fn with_retry(self, retry: Duration) -> Self {
        Self { retry, ..self }
    }

    /// The rule itself, a pure function of the counts. With `n = other_workers + 1` workers
    /// and `total = own + others` connections:
    ///
    /// * [`Share::Skip`] if `own > total / n + margin` (above the mean by more than the
    ///   margin), or, when [`Load::least`] is known, if `own > least + margin` (above the
    ///   least loaded other worker by more than the margin). The least loaded worker never
    ///   skips, so some worker always accepts;
    /// * else [`Share::Accept`]`(k)` with `k` the most connections this worker can take and
    ///   stay within `margin` of the new mean, `(total + n·margin − n·own) / (n − 1)` (any
    ///   number when it is alone), and, with `least`, end at most `least + margin + 1`,
    ///   clamped to `1..=batch`. With `least` the workers' counts end at most `margin + 1`
    ///   apart, whatever their number (with the mean alone, 4 workers can end at 14/14/14/8).
    ///
    /// With recent accept counts ([`Load::with_recent`]) and a [`rate_slack`](Self::rate_slack)
    /// it also skips if `own_recent > least_recent · (100 + rate_slack) / 100 + margin +
    /// batch`: the same rule for the accept rate, which is what tells workers apart when every
    /// connection is short.
    ///
    /// An idle worker (`own == 0`) never skips, so in [`LockMode::Blocking`] it still sleeps
    /// on the lock.
    pub fn decide(&self, load: Load) -> Share {
        let batch = self.batch.max(1);
        let n = load.other_workers as u128 + 1;
        let own = load.own as u128;
        let total = own + load.others as u128;
        let allowed = total + n * self.margin as u128;
        if n * own > allowed {
            return Share::Skip;
        }
        if let (Some(slack), Some(least), true) = (self.rate_slack, load.least_recent, n > 1) {
            let floor = self.margin as u128 + batch as u128;
            let bound = least as u128 * (100 + slack as u128) + 100 * floor;
            if 100 * load.own_recent as u128 > bound {
                return Share::Skip;
            }
        }
        if n == 1 {
            return Share::Accept(batch);
        }
        let mut headroom = (allowed - n * own) / (n - 1);
        if let Some(least) = load.least {
            // Within `margin` of the least loaded worker, and a batch ends at most one past.
            let ceiling = least as u128 + self.margin as u128;
            if own > ceiling {
                return Share::Skip;
            }
            headroom = headroom.min(ceiling + 1 - own);
        }
        Share::Accept(headroom.clamp(1, batch as u128) as usize)
    }
}
