//! Running models: [`model`], and [`Stats`] kept across executions.

use loom::thread::ThreadId;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// Run `f` under loom with `preemption_bound` (unless `LOOM_MAX_PREEMPTIONS` overrides it), and
/// print the number of executions and the time taken (visible with `--nocapture`).
pub fn model<F>(name: &str, preemption_bound: usize, f: F) -> usize
where
    F: Fn() + Sync + Send + 'static,
{
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(preemption_bound);
    }
    let execs = Arc::new(AtomicUsize::new(0));
    let e = execs.clone();
    let start = Instant::now();
    b.check(move || {
        e.fetch_add(1, Relaxed);
        f()
    });
    let n = execs.load(Relaxed);
    eprintln!(
        "[loom] {name}: {n} executions, preemption bound {:?}, {:.2} s",
        b.preemption_bound,
        start.elapsed().as_secs_f64()
    );
    n
}

/// [`model`] with a fresh [`Stats`] shared by every execution: `f` gets the counters (to build
/// its [`Harness`]), and they are printed after the model and returned for its assertions.
///
/// [`Harness`]: crate::Harness
pub fn model_with_stats<F>(name: &str, preemption_bound: usize, f: F) -> Arc<Stats>
where
    F: Fn(&Arc<Stats>) + Sync + Send + 'static,
{
    let stats = Stats::new();
    let s = stats.clone();
    model(name, preemption_bound, move || f(&s));
    eprintln!("{stats:?}");
    stats
}

/// Join every thread of a model, propagating a panic.
pub fn join_all<T>(threads: impl IntoIterator<Item = loom::thread::JoinHandle<T>>) {
    for t in threads {
        t.join().unwrap();
    }
}

/// The value of one counter (of [`Stats`], or any other kept across executions).
pub fn get(c: &AtomicUsize) -> usize {
    c.load(Relaxed)
}

/// Counters kept across all executions of one model.
#[derive(Default)]
pub struct Stats {
    /// Starvation hand-offs completed (receiver fix-ups).
    pub handoffs: AtomicUsize,
    /// Fix-ups that left starvation mode because the receiver was the last waiter.
    pub leave_last: AtomicUsize,
    /// Fix-ups that left starvation mode because the receiver had not waited long.
    pub leave_short: AtomicUsize,
    /// Fix-ups that stayed in starvation mode.
    pub stay_starving: AtomicUsize,
    /// CASes that switched the lock to starvation mode.
    pub starving_set: AtomicUsize,
    /// Normal-mode wake-ups (unlock's `-WAITER | WOKEN` CAS).
    pub normal_wakeups: AtomicUsize,
    /// Spinners that announced themselves with WOKEN.
    pub announces: AtomicUsize,
    /// Tokens released before their consumer had reached the queue (normal / hand-off).
    pub early_normal: AtomicUsize,
    pub early_handoff: AtomicUsize,
    /// Re-queued sleeps (`lifo == true`).
    pub requeues: AtomicUsize,
    /// `try_lock` calls that failed / failed while STARVING was set / succeeded.
    pub try_fail: AtomicUsize,
    pub try_fail_starving: AtomicUsize,
    pub try_ok: AtomicUsize,
    /// Acquisitions by the lock fast path / the slow-path CAS.
    pub fast: AtomicUsize,
    pub slow_cas: AtomicUsize,
    /// Timed sleeps that timed out, and of those, while a hand-off was in flight.
    pub timeouts: AtomicUsize,
    pub timeouts_during_handoff: AtomicUsize,
    /// Waiters that removed themselves from the count (`deregister`), and of those, while
    /// starvation mode / a hand-off was in flight.
    pub deregisters: AtomicUsize,
    pub deregisters_starving: AtomicUsize,
    pub deregisters_handoff_in_flight: AtomicUsize,
    /// Waiters whose sleep timed out but then received a token (deregistering was unsafe).
    pub token_after_timeout: AtomicUsize,
    /// Timed lock calls that failed / succeeded.
    pub timed_fail: AtomicUsize,
    pub timed_ok: AtomicUsize,
    /// Contenders that gave up at their deadline while owning WOKEN (cleared it).
    pub gave_up_clearing_woken: AtomicUsize,
}

impl Stats {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}

impl fmt::Debug for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = |c: &AtomicUsize| c.load(Relaxed);
        f.debug_struct("Stats")
            .field("handoffs", &g(&self.handoffs))
            .field("leave_last", &g(&self.leave_last))
            .field("leave_short", &g(&self.leave_short))
            .field("stay_starving", &g(&self.stay_starving))
            .field("starving_set", &g(&self.starving_set))
            .field("normal_wakeups", &g(&self.normal_wakeups))
            .field("announces", &g(&self.announces))
            .field("early_normal", &g(&self.early_normal))
            .field("early_handoff", &g(&self.early_handoff))
            .field("requeues", &g(&self.requeues))
            .field("try_fail", &g(&self.try_fail))
            .field("try_fail_starving", &g(&self.try_fail_starving))
            .field("try_ok", &g(&self.try_ok))
            .field("fast", &g(&self.fast))
            .field("slow_cas", &g(&self.slow_cas))
            .field("timeouts", &g(&self.timeouts))
            .field("timeouts_during_handoff", &g(&self.timeouts_during_handoff))
            .field("deregisters", &g(&self.deregisters))
            .field("deregisters_starving", &g(&self.deregisters_starving))
            .field(
                "deregisters_handoff_in_flight",
                &g(&self.deregisters_handoff_in_flight),
            )
            .field("token_after_timeout", &g(&self.token_after_timeout))
            .field("timed_fail", &g(&self.timed_fail))
            .field("timed_ok", &g(&self.timed_ok))
            .field("gave_up_clearing_woken", &g(&self.gave_up_clearing_woken))
            .finish()
    }
}

pub(crate) fn bump(c: &AtomicUsize) {
    c.fetch_add(1, Relaxed);
}

pub(crate) fn me() -> ThreadId {
    loom::thread::current().id()
}
