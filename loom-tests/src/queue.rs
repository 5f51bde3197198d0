//! Queues: the logging wrapper, the lossy queue and the timed queue.

use crate::ghost::{lock_ghost, SharedGhost};
use crate::run::me;
use gomutex::sema::{ParkSema, WaitQueue};
use loom::sync::atomic::AtomicBool;
use std::time::Instant;

/// What a model asks a queue at the end: nothing may be left in it.
pub trait Introspect {
    /// Tokens kept for future sleepers.
    fn stored(&self) -> u32;
    /// Threads asleep in the queue.
    fn sleeping(&self) -> usize;
}

impl Introspect for ParkSema {
    fn stored(&self) -> u32 {
        self.stored_tokens()
    }
    fn sleeping(&self) -> usize {
        self.parked()
    }
}

/// A [`WaitQueue`] wrapper that reports every sleep, wake-up and token to the ghost.
pub struct Logged<Q> {
    pub inner: Q,
    pub(crate) ghost: SharedGhost,
}

impl<Q: WaitQueue + Introspect> WaitQueue for Logged<Q> {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        let t = me();
        lock_ghost(&self.ghost).before_acquire(t, lifo);
        let got = self.inner.acquire(lifo, deadline);
        lock_ghost(&self.ghost).after_acquire(t, got);
        got
    }
    fn release(&self, handoff: bool) {
        lock_ghost(&self.ghost).before_release(me(), handoff);
        self.inner.release(handoff);
        // Was the token kept because nobody was asleep (unlock ran ahead of the waiter's
        // sleep; its consumer will find it when it reaches the queue)? Nothing can consume it
        // between this load and the ghost update: no loom operation separates them.
        if self.inner.stored() > 0 {
            lock_ghost(&self.ghost).token_kept = true;
        }
    }
}

impl<Q: Introspect> Introspect for Logged<Q> {
    fn stored(&self) -> u32 {
        self.inner.stored()
    }
    fn sleeping(&self) -> usize {
        self.inner.sleeping()
    }
}

/// Negative control: a queue that drops a wake-up when nobody is parked (no persistent
/// tokens), i.e. the lost wake-up Go's semaphore exists to prevent.
pub struct LossyQueue(pub ParkSema);

impl WaitQueue for LossyQueue {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        self.0.acquire(lifo, deadline)
    }
    fn release(&self, handoff: bool) {
        if self.0.parked() > 0 {
            self.0.release(handoff);
        }
    }
}

impl Introspect for LossyQueue {
    fn stored(&self) -> u32 {
        self.0.stored()
    }
    fn sleeping(&self) -> usize {
        self.0.sleeping()
    }
}

struct Slot {
    /// Set (under the queue lock) by the `release` that picked this sleeper.
    woken: AtomicBool,
    notify: loom::sync::Notify,
}

struct TqSleeper {
    lifo: bool,
    timed: bool,
    slot: loom::sync::Arc<Slot>,
}

#[derive(Default)]
struct TqInner {
    tokens: u32,
    /// Arrival order.
    sleepers: Vec<TqSleeper>,
}

/// The inner state of a test queue ([`TimedQueue`], [`TimedSema`]): its sleepers, in arrival
/// order.
trait Sleepers {
    fn sleepers(&mut self) -> &mut Vec<TqSleeper>;
}

impl Sleepers for TqInner {
    fn sleepers(&mut self) -> &mut Vec<TqSleeper> {
        &mut self.sleepers
    }
}

/// How a sleep on a test queue ended.
enum Woke {
    /// A `release` picked the sleeper while it slept.
    Picked,
    /// Its deadline passed, but a `release` picked it before it could leave: the token is
    /// its.
    PickedAtDeadline,
    /// Its deadline passed: it left the queue (and `on_timeout` ran, under the lock).
    TimedOut,
}

/// The sleep of both test queues: queue a sleeper in `q` (the locked inner state of `lock`),
/// then wait until a `release` picks it, or, for a timed sleep, until loom's spurious wake-up
/// (the deadline passing), after which the sleeper decides under the lock: picked meanwhile,
/// or removed from the queue and `on_timeout` run.
fn sleep<I: Sleepers>(
    lock: &loom::sync::Mutex<I>,
    mut q: loom::sync::MutexGuard<'_, I>,
    lifo: bool,
    timed: bool,
    on_timeout: impl FnOnce(&mut I),
) -> Woke {
    let slot = loom::sync::Arc::new(Slot {
        woken: AtomicBool::new(false),
        notify: loom::sync::Notify::new(),
    });
    q.sleepers().push(TqSleeper {
        lifo,
        timed,
        slot: slot.clone(),
    });
    drop(q);
    loop {
        slot.notify.wait();
        if slot.woken.load(loom::sync::atomic::Ordering::SeqCst) {
            return Woke::Picked;
        }
        if timed {
            let mut q = lock.lock().unwrap();
            if slot.woken.load(loom::sync::atomic::Ordering::SeqCst) {
                return Woke::PickedAtDeadline;
            }
            let i = q
                .sleepers()
                .iter()
                .position(|s| loom::sync::Arc::ptr_eq(&s.slot, &slot))
                .expect("timed-out sleeper not queued");
            q.sleepers().remove(i);
            on_timeout(&mut q);
            return Woke::TimedOut;
        }
    }
}

/// Wake the sleeper at `i`, picked by a `release` holding `q`: its token is marked under the
/// lock, the notification goes out after it.
fn wake<I: Sleepers>(mut q: loom::sync::MutexGuard<'_, I>, i: usize) {
    let s = q.sleepers().remove(i);
    s.slot
        .woken
        .store(true, loom::sync::atomic::Ordering::SeqCst);
    drop(q);
    s.slot.notify.notify();
}

/// A test-only [`WaitQueue`] implementing the documented contract (persistent tokens; the
/// oldest `lifo` sleeper first, else the oldest; a timed-out `acquire` consumed nothing and is
/// no longer queued) whose *timed* `acquire` may time out.
///
/// Loom has no time. A loom `Notify` may wake up spuriously once; here that spurious wake-up of
/// a sleeper with a deadline *is* its deadline passing. After it the sleeper yields, so any
/// number of other steps can happen before it takes the queue lock to leave, exactly like a
/// deadline that passes at an arbitrary later moment; under that lock it either finds that a
/// `release` picked it first (it got the token) or removes itself (timed out). Untimed sleepers
/// ignore spurious wake-ups. [`TimedQueue::fire_timeouts`] makes the deadlines of all current
/// timed sleepers pass at a chosen point.
pub struct TimedQueue {
    inner: loom::sync::Mutex<TqInner>,
    /// Negative control: a sleeper that was picked but then sees its deadline still reports a
    /// time-out, dropping the token.
    lose_token_on_timeout: bool,
}

impl TimedQueue {
    pub fn new() -> Self {
        Self::with(false)
    }

    /// The deadline of every timed sleeper asleep right now passes: each wakes and times out,
    /// unless a `release` picks it first. (Sleeps may also time out on their own: see above.)
    pub fn fire_timeouts(&self) {
        let q = self.inner.lock().unwrap();
        let timed: Vec<_> = q
            .sleepers
            .iter()
            .filter(|s| s.timed)
            .map(|s| s.slot.clone())
            .collect();
        drop(q);
        for s in timed {
            s.notify.notify();
        }
    }
    pub fn with(lose_token_on_timeout: bool) -> Self {
        Self {
            inner: loom::sync::Mutex::new(TqInner::default()),
            lose_token_on_timeout,
        }
    }
}

impl Default for TimedQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl WaitQueue for TimedQueue {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        let mut q = self.inner.lock().unwrap();
        if q.tokens > 0 {
            q.tokens -= 1;
            return true;
        }
        match sleep(&self.inner, q, lifo, deadline.is_some(), |_| {}) {
            Woke::Picked => true,
            Woke::PickedAtDeadline => !self.lose_token_on_timeout,
            Woke::TimedOut => false,
        }
    }

    fn release(&self, _handoff: bool) {
        let mut q = self.inner.lock().unwrap();
        let pick = q
            .sleepers
            .iter()
            .position(|s| s.lifo)
            .or(if q.sleepers.is_empty() { None } else { Some(0) });
        match pick {
            Some(i) => wake(q, i),
            None => q.tokens += 1,
        }
    }
}

impl Introspect for TimedQueue {
    fn stored(&self) -> u32 {
        self.inner.lock().unwrap().tokens
    }
    fn sleeping(&self) -> usize {
        self.inner.lock().unwrap().sleepers.len()
    }
}
