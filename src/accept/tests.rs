//! Unit tests of the accept lock: the decision logic on a scripted `AcceptMutex`, the
//! listener arming, and the protocol on a real `RawMutex` and on a shared-memory lock.

use super::*;
use std::cell::RefCell;
use std::collections::VecDeque;

/// A scripted lock: `try_lock`/`lock_for` answer from queues (default: free), every call is
/// recorded.
#[derive(Default)]
struct Script {
    tries: RefCell<VecDeque<Option<Acquired>>>,
    waits: RefCell<VecDeque<Option<Acquired>>>,
    log: RefCell<Vec<String>>,
    locked: RefCell<bool>,
}

impl Script {
    fn busy_tries(n: usize) -> Self {
        let s = Script::default();
        s.tries.borrow_mut().extend(std::iter::repeat_n(None, n));
        s
    }
    fn log(&self) -> Vec<String> {
        self.log.borrow().clone()
    }
}

impl AcceptMutex for Script {
    fn try_lock(&self) -> Option<Acquired> {
        self.log.borrow_mut().push("try".into());
        let r = self
            .tries
            .borrow_mut()
            .pop_front()
            .unwrap_or(Some(Acquired::Clean));
        if r.is_some() {
            assert!(!*self.locked.borrow(), "acquired twice");
            *self.locked.borrow_mut() = true;
        }
        r
    }
    fn lock_for(&self, t: Duration) -> Option<Acquired> {
        self.log
            .borrow_mut()
            .push(format!("wait {}ms", t.as_millis()));
        let r = self
            .waits
            .borrow_mut()
            .pop_front()
            .unwrap_or(Some(Acquired::Clean));
        if r.is_some() {
            *self.locked.borrow_mut() = true;
        }
        r
    }
    unsafe fn unlock(&self) {
        assert!(*self.locked.borrow(), "unlock of unlocked");
        *self.locked.borrow_mut() = false;
        self.log.borrow_mut().push("unlock".into());
    }
}

const DELAY: Option<Duration> = Some(DEFAULT_DELAY);

#[test]
fn uncontended_arms_once_and_releases_every_iteration() {
    let m = Script::default();
    let mut a = AcceptLock::new(&m, Config::default());
    let d = a.begin_iteration(false);
    assert_eq!(
        d,
        IterationPlan {
            armed: true,
            changed: true,
            poll_timeout: None,
            batch: None
        }
    );
    assert!(a.holds_lock());
    a.end_accept_phase();
    assert!(!a.holds_lock() && a.is_armed());
    let d = a.begin_iteration(false);
    assert!(d.armed && !d.changed);
    a.end_accept_phase();
    assert_eq!(m.log(), ["try", "unlock", "try", "unlock"]);
    let s = a.stats();
    assert_eq!(
        (s.acquisitions, s.arms, s.disarms, s.contended),
        (2, 1, 0, 0)
    );
}

#[test]
fn loser_disarms_once_and_caps_its_poll() {
    let m = Script::default();
    m.tries
        .borrow_mut()
        .extend([Some(Acquired::Clean), None, None]);
    let mut a = AcceptLock::new(&m, Config::default());
    assert!(a.begin_iteration(false).armed);
    a.end_accept_phase();
    let d = a.begin_iteration(false);
    assert_eq!(
        d,
        IterationPlan {
            armed: false,
            changed: true,
            poll_timeout: DELAY,
            batch: None
        }
    );
    a.end_accept_phase(); // nothing to release
    let d = a.begin_iteration(false);
    assert!(!d.armed && !d.changed && d.poll_timeout == DELAY);
    assert_eq!(m.log(), ["try", "unlock", "try", "try"]);
    assert_eq!(a.stats().contended, 2);
    assert_eq!(a.stats().disarms, 1);
}

#[test]
fn decision_timeout_is_the_minimum() {
    let d = IterationPlan {
        armed: false,
        changed: false,
        poll_timeout: Some(Duration::from_millis(500)),
        batch: None,
    };
    assert_eq!(d.timeout(None), Some(Duration::from_millis(500)));
    assert_eq!(
        d.timeout(Some(Duration::from_millis(20))),
        Some(Duration::from_millis(20))
    );
    assert_eq!(
        d.timeout(Some(Duration::from_secs(3))),
        Some(Duration::from_millis(500))
    );
    let free = IterationPlan {
        poll_timeout: None,
        ..d
    };
    assert_eq!(free.timeout(None), None);
    assert_eq!(
        free.timeout(Some(Duration::from_secs(3))),
        Some(Duration::from_secs(3))
    );
}

#[test]
fn accept_disabled_is_nginx_formula() {
    let m = Script::default();
    let mut a = AcceptLock::new(&m, Config::default());
    a.accepted(1000, 1024);
    assert_eq!(a.accept_disabled(), 128 - 1000);
    a.accepted(128, 1024);
    assert_eq!(a.accept_disabled(), 0);
    a.accepted(125, 1024);
    assert_eq!(a.accept_disabled(), 3);
    assert_eq!(a.stats().accepted, 3);
}

#[test]
fn back_off_skips_the_lock_and_disarms() {
    let m = Script::default();
    let mut a = AcceptLock::new(&m, Config::default());
    assert!(a.begin_iteration(false).armed);
    a.accepted(125, 1024); // fewer than 1/8 free: sit out 3 iterations
    a.end_accept_phase();
    let d = a.begin_iteration(false);
    assert_eq!(
        d,
        IterationPlan {
            armed: false,
            changed: true,
            poll_timeout: DELAY,
            batch: None
        }
    );
    a.end_accept_phase();
    for left in [1, 0] {
        let d = a.begin_iteration(true);
        assert!(!d.armed && !d.changed);
        assert_eq!(a.accept_disabled(), left);
        a.end_accept_phase();
    }
    // Back in the game.
    let d = a.begin_iteration(false);
    assert!(d.armed && d.changed);
    assert_eq!(m.log(), ["try", "unlock", "try"]);
    assert_eq!(a.stats().disabled_skips, 3);
}

#[test]
fn blocking_mode_waits_only_when_idle() {
    let m = Script::busy_tries(2);
    let mut a = AcceptLock::new(&m, Config::blocking());
    // Busy: a try only, poll capped.
    let d = a.begin_iteration(false);
    assert!(!d.armed && d.poll_timeout == DELAY);
    a.end_accept_phase();
    // Idle: wait on the lock, get it.
    let d = a.begin_iteration(true);
    assert!(d.armed && d.changed && d.poll_timeout.is_none());
    a.end_accept_phase();
    assert_eq!(m.log(), ["try", "try", "wait 500ms", "unlock"]);
    let s = a.stats();
    assert_eq!(
        (s.blocking_waits, s.blocking_timeouts, s.acquisitions),
        (1, 0, 1)
    );
}

#[test]
fn blocking_timeout_polls_without_sleeping() {
    let m = Script::busy_tries(1);
    m.waits.borrow_mut().push_back(None);
    let mut a = AcceptLock::new(&m, Config::blocking());
    let d = a.begin_iteration(true);
    assert_eq!(
        d,
        IterationPlan {
            armed: false,
            changed: false,
            poll_timeout: Some(Duration::ZERO),
            batch: None
        }
    );
    a.end_accept_phase();
    assert_eq!(m.log(), ["try", "wait 500ms"]);
    assert_eq!(a.stats().blocking_timeouts, 1);
}

#[test]
fn trylock_mode_never_waits() {
    let m = Script::busy_tries(3);
    let mut a = AcceptLock::new(&m, Config::nginx());
    for _ in 0..3 {
        assert!(!a.begin_iteration(true).armed);
        a.end_accept_phase();
    }
    assert_eq!(m.log(), ["try", "try", "try"]);
}

#[test]
fn owner_died_is_counted_and_the_lock_is_used() {
    let m = Script::default();
    m.tries.borrow_mut().push_back(Some(Acquired::OwnerDied));
    let mut a = AcceptLock::new(&m, Config::default());
    assert!(a.begin_iteration(false).armed);
    a.end_accept_phase();
    assert!(a.begin_iteration(false).armed);
    a.end_accept_phase();
    assert_eq!(a.stats().owner_died, 1);
    assert_eq!(a.stats().acquisitions, 2);
}

#[test]
fn owner_died_after_a_blocking_wait_is_counted() {
    let m = Script::busy_tries(1);
    m.waits.borrow_mut().push_back(Some(Acquired::OwnerDied));
    let mut a = AcceptLock::new(&m, Config::blocking());
    assert!(a.begin_iteration(true).armed);
    assert_eq!(a.stats().owner_died, 1);
}

#[test]
fn unended_iteration_keeps_the_lock() {
    let m = Script::default();
    let mut a = AcceptLock::new(&m, Config::default());
    assert!(a.begin_iteration(false).armed);
    let d = a.begin_iteration(false);
    assert!(d.armed && !d.changed);
    a.end_accept_phase();
    assert_eq!(m.log(), ["try", "unlock"]);
}

#[test]
fn drop_and_disarm_release() {
    let m = Script::default();
    {
        let mut a = AcceptLock::new(&m, Config::default());
        a.begin_iteration(false);
    }
    assert_eq!(m.log(), ["try", "unlock"]);
    let mut a = AcceptLock::new(&m, Config::default());
    a.begin_iteration(false);
    assert!(a.disarm());
    assert!(!a.is_armed() && !a.holds_lock());
    assert!(!a.disarm());
    // Next iteration re-arms.
    assert!(a.begin_iteration(false).changed);
}

struct Fake {
    armed: bool,
    fail_arm: bool,
    fail_disarm: bool,
}

impl Listeners for Fake {
    type Error = &'static str;
    fn arm(&mut self) -> Result<(), &'static str> {
        if self.fail_arm {
            return Err("arm");
        }
        self.armed = true;
        Ok(())
    }
    fn disarm(&mut self) -> Result<(), &'static str> {
        if self.fail_disarm {
            return Err("disarm");
        }
        self.armed = false;
        Ok(())
    }
}

#[test]
fn listeners_follow_decisions_and_arm_failure_releases() {
    let m = Script::default();
    m.tries.borrow_mut().extend([Some(Acquired::Clean), None]);
    let mut l = Fake {
        armed: false,
        fail_arm: false,
        fail_disarm: false,
    };
    let mut a = AcceptLock::new(&m, Config::default());
    a.begin_iteration_with(false, &mut l).unwrap();
    assert!(l.armed);
    a.end_accept_phase();
    l.fail_disarm = true;
    assert_eq!(a.begin_iteration_with(false, &mut l), Err("disarm"));
    assert!(a.is_armed(), "a failed disarm is retried");
    l.fail_disarm = false;
    // The sockets are still armed: winning again needs no epoll change.
    assert!(!a.begin_iteration_with(false, &mut l).unwrap().changed);
    a.end_accept_phase();

    let mut b = AcceptLock::new(&m, Config::default());
    l.fail_arm = true;
    // Arming fails, so the lock is released for another worker.
    assert_eq!(b.begin_iteration_with(false, &mut l), Err("arm"));
    assert!(!b.holds_lock() && !b.is_armed());
    assert!(!*m.locked.borrow());
}

/// With a real lock shared by threads, at most one worker holds it at a time, and in
/// blocking mode an idle worker gets it as soon as the holder lets go.
#[test]
fn real_lock_excludes_and_blocking_hands_over() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let m = crate::RawMutex::new();
    let inside = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let got = [AtomicUsize::new(0), AtomicUsize::new(0)];
    std::thread::scope(|s| {
        for (i, got) in got.iter().enumerate() {
            let (m, inside, stop) = (&m, &inside, &stop);
            s.spawn(move || {
                let cfg = Config {
                    mode: if i == 0 {
                        LockMode::TryLock
                    } else {
                        LockMode::Blocking
                    },
                    delay: Duration::from_millis(5),
                    spread: None,
                };
                let mut a = AcceptLock::new(m, cfg);
                let mut n = 0;
                while n < 2000 && !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let d = a.begin_iteration(i == 1);
                    if a.holds_lock() {
                        assert!(d.armed);
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        got.fetch_add(1, Ordering::Relaxed);
                        std::hint::spin_loop();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                    a.end_accept_phase();
                }
                stop.store(true, Ordering::Relaxed);
            });
        }
    });
    assert!(!m.is_locked());
    assert!(got[0].load(Ordering::Relaxed) + got[1].load(Ordering::Relaxed) > 0);
}

/// The spread rule with `n` workers where this one has `own` and the others `rest` (each).
fn rule(margin: usize, batch: usize, own: usize, rest: &[usize]) -> Share {
    Spread::new(margin, batch).decide(Load::new(own, rest.iter().sum(), rest.len()))
}

#[test]
fn spread_rule_skips_above_the_mean_plus_margin() {
    // Two workers, margin 1: the mean of 30 and 20 is 25.
    assert_eq!(rule(1, 4, 30, &[20]), Share::Skip);
    assert_eq!(rule(1, 4, 26, &[24]), Share::Accept(1)); // exactly mean + margin
    assert_eq!(rule(1, 4, 27, &[23]), Share::Skip);
    // Margin 0: anything above the mean skips, the mean itself accepts one.
    assert_eq!(rule(0, 4, 1, &[0]), Share::Skip);
    assert_eq!(rule(0, 4, 5, &[5]), Share::Accept(1));
    // Four workers: mean of 10, 2, 2, 2 is 4.
    assert_eq!(rule(5, 8, 10, &[2, 2, 2]), Share::Skip);
    assert_eq!(rule(6, 8, 10, &[2, 2, 2]), Share::Accept(1));
    // A large margin is nginx without the back-off: full batches.
    assert_eq!(rule(usize::MAX, 16, 1000, &[0]), Share::Accept(16));
}

#[test]
fn spread_rule_batch_keeps_the_holder_within_the_margin() {
    // Idle pair: 2·margin before the holder would be margin above the new mean.
    assert_eq!(rule(1, 4, 0, &[0]), Share::Accept(2));
    assert_eq!(rule(2, 8, 0, &[0]), Share::Accept(4));
    // Far below the mean: capped by the batch.
    assert_eq!(rule(1, 4, 0, &[40]), Share::Accept(4));
    assert_eq!(rule(1, 100, 0, &[40]), Share::Accept(42));
    // Alone: always a full batch, whatever the count.
    assert_eq!(rule(0, 4, 1000, &[]), Share::Accept(4));
    // A batch of 0 counts as 1.
    assert_eq!(rule(1, 0, 0, &[9]), Share::Accept(1));
    // Exhaustively for small cases: taking the batch never puts the holder above the new
    // mean + margin, unless the batch is the minimum of 1.
    for n in 1..=4usize {
        for margin in 0..=3 {
            for own in 0..=12 {
                for others in 0..=12 * (n - 1) {
                    let load = Load::new(own, others, n - 1);
                    let total = own + others;
                    match Spread::new(margin, 8).decide(load) {
                        Share::Skip => assert!(n * own > total + n * margin, "{load:?}"),
                        Share::Accept(k) => {
                            assert!(n * own <= total + n * margin, "{load:?}");
                            assert!((1..=8).contains(&k));
                            if k > 1 {
                                assert!(n * (own + k) <= total + k + n * margin, "{load:?} {k}");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn spread_rule_never_skips_the_least_loaded_worker() {
    for margin in 0..=2 {
        for counts in [[0, 0, 0], [5, 1, 9], [3, 3, 4], [100, 0, 50], [7, 7, 7]] {
            let min = (0..3).min_by_key(|&i| counts[i]).unwrap();
            let others: Vec<usize> = (0..3).filter(|&i| i != min).map(|i| counts[i]).collect();
            assert_ne!(rule(margin, 4, counts[min], &others), Share::Skip);
        }
        // An idle worker never skips (so blocking mode still sleeps on the lock).
        assert_ne!(rule(margin, 4, 0, &[0, 1000]), Share::Skip);
    }
    assert_eq!(rule(0, 4, usize::MAX, &[usize::MAX]), Share::Accept(1));
}

#[test]
fn loaded_iteration_skips_or_caps_the_batch() {
    let m = Script::default();
    let cfg = Config::nginx().with_spread(Some(Spread::new(1, 4)));
    let mut a = AcceptLock::new(&m, cfg);
    // Below the mean: lock, armed, batch capped.
    let d = a.begin_iteration_loaded(false, Load::new(0, 40, 1));
    assert!(d.armed && d.changed);
    assert_eq!(d.batch, Some(4));
    a.end_accept_phase();
    // Above the mean: the lock is not tried, the sockets are disarmed, and it looks again
    // after `retry`, not `delay`.
    let d = a.begin_iteration_loaded(false, Load::new(30, 10, 1));
    assert!(!d.armed && d.changed && d.batch.is_none());
    assert_eq!(d.poll_timeout, Some(Spread::DEFAULT.retry));
    assert_eq!(a.stats().spread_skips, 1);
    assert_eq!(m.log(), ["try", "unlock"]);
    // Without loads (begin_iteration) or without a rule, no cap.
    let d = a.begin_iteration(false);
    assert!(d.armed && d.batch.is_none());
    a.end_accept_phase();
    let mut b = AcceptLock::new(&m, Config::nginx());
    let d = b.begin_iteration_loaded(false, Load::new(30, 0, 1));
    assert!(d.armed && d.batch.is_none());
    b.end_accept_phase();
    assert_eq!(b.stats().spread_skips, 0);
}

#[test]
fn loaded_loser_retries_after_retry_capped_by_delay() {
    let m = Script::busy_tries(2);
    let spread = Spread::new(1, 4).with_retry(Duration::from_millis(3));
    let mut a = AcceptLock::new(&m, Config::nginx().with_spread(Some(spread)));
    let d = a.begin_iteration_loaded(false, Load::new(5, 5, 1));
    assert!(!d.armed);
    assert_eq!(d.poll_timeout, Some(Duration::from_millis(3)));
    // Unloaded iterations keep nginx's delay; a retry above delay is capped by it.
    let d = a.begin_iteration(false);
    assert_eq!(d.poll_timeout, DELAY);
    let slow = spread.with_retry(Duration::from_secs(9));
    let mut b = AcceptLock::new(&m, Config::nginx().with_spread(Some(slow)));
    let d = b.begin_iteration_loaded(false, Load::new(9, 0, 1));
    assert_eq!(d.poll_timeout, DELAY);
}

#[test]
fn loaded_blocking_idle_worker_still_waits() {
    let m = Script::busy_tries(1);
    let cfg = Config::blocking().with_spread(Some(Spread::DEFAULT));
    let mut a = AcceptLock::new(&m, cfg);
    let d = a.begin_iteration_loaded(true, Load::new(0, 50, 1));
    assert!(d.armed);
    assert_eq!(d.batch, Some(4));
    assert_eq!(m.log(), ["try", "wait 500ms"]);
    a.end_accept_phase();
    // A busy worker above the mean neither tries nor waits.
    let d = a.begin_iteration_loaded(false, Load::new(50, 0, 1));
    assert!(!d.armed);
    assert_eq!(m.log(), ["try", "wait 500ms", "unlock"]);
}

/// The spread rule given the others' counts one by one (so it also knows the least).
fn rule_least(margin: usize, batch: usize, own: usize, rest: &[usize]) -> Share {
    let load = Load::new(own, rest.iter().sum(), rest.len());
    let load = rest.iter().min().map_or(load, |&m| load.with_least(m));
    Spread::new(margin, batch).decide(load)
}

#[test]
fn spread_rule_with_least_skips_above_the_least_plus_margin() {
    // The mean of 14, 14, 14, 8 is 12.5: 14 is within mean + 2 but 6 above the least.
    assert_eq!(rule(2, 4, 14, &[14, 14, 8]), Share::Accept(1));
    assert_eq!(rule_least(2, 4, 14, &[14, 14, 8]), Share::Skip);
    assert_eq!(rule_least(1, 4, 9, &[14, 14, 8]), Share::Accept(1)); // 8 + 1: one more
    assert_eq!(rule_least(1, 4, 10, &[14, 14, 8]), Share::Skip);
    // The batch ends at most one past least + margin (and within the mean's bound).
    assert_eq!(rule_least(1, 4, 8, &[9, 20, 20]), Share::Accept(3));
    assert_eq!(rule_least(1, 8, 0, &[2, 40, 40]), Share::Accept(4));
    assert_eq!(rule_least(2, 8, 0, &[0, 0, 0]), Share::Accept(2)); // the mean's bound
                                                                   // The least is only tighter: whatever the mean rule skips, it skips too.
    assert_eq!(rule_least(1, 4, 30, &[20]), Share::Skip);
    // Alone, `least` is ignored.
    let alone = Load::new(1000, 0, 0).with_least(0);
    assert_eq!(Spread::new(0, 4).decide(alone), Share::Accept(4));
}

#[test]
fn spread_rule_with_least_bounds_the_gap_by_margin_plus_one() {
    // Exhaustively for small cases: never more restrictive for the least loaded worker (it
    // never skips), never looser than the mean rule, and a batch never takes the holder past
    // least + margin + 1.
    for n in 2..=4usize {
        for margin in 0..=2 {
            for own in 0..=9 {
                for least in 0..=9 {
                    for rest in 0..=9 * (n - 2) {
                        if rest < least * (n - 2) {
                            continue; // the others but the least each hold at least `least`
                        }
                        let others = least + rest;
                        let base = Load::new(own, others, n - 1);
                        let load = base.with_least(least);
                        let s = Spread::new(margin, 8);
                        match s.decide(load) {
                            Share::Skip => assert!(own > least, "{load:?}"),
                            Share::Accept(k) => {
                                assert!(own <= least + margin, "{load:?}");
                                assert!(k == 1 || own + k <= least + margin + 1, "{load:?} {k}");
                                match s.decide(base) {
                                    Share::Accept(j) => assert!(k <= j, "{load:?} {k} {j}"),
                                    Share::Skip => panic!("looser than the mean: {load:?}"),
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Simulated bursts: the lock goes to the first worker (in a fixed order: the busy holder wins
/// the next `try_lock`) whose rule says accept, until `total` connections are placed: with
/// `least` the counts end at most `margin + 1` apart for any number of workers.
#[test]
fn spread_rule_with_least_keeps_a_burst_within_margin_plus_one() {
    fn burst(n: usize, total: usize, margin: usize) -> Vec<usize> {
        let mut c = vec![0usize; n];
        let mut placed = 0;
        while placed < total {
            let i = (0..n)
                .find(|&i| {
                    let rest: Vec<usize> = (0..n).filter(|&j| j != i).map(|j| c[j]).collect();
                    rule_least(margin, 4, c[i], &rest) != Share::Skip
                })
                .expect("the least loaded worker never skips");
            let rest: Vec<usize> = (0..n).filter(|&j| j != i).map(|j| c[j]).collect();
            if let Share::Accept(k) = rule_least(margin, 4, c[i], &rest) {
                let k = k.min(total - placed);
                c[i] += k;
                placed += k;
            }
        }
        c
    }
    // Smaller under Miri, which runs these tests too (scripts/miri.sh).
    let (most, totals): (usize, &[usize]) = if cfg!(miri) {
        (4, &[10, 51])
    } else {
        (6, &[10, 50, 51, 52, 100])
    };
    for n in 2..=most {
        for &total in totals {
            for margin in 0..=2 {
                let c = burst(n, total, margin);
                let (lo, hi) = (c.iter().min().unwrap(), c.iter().max().unwrap());
                assert!(
                    hi - lo <= margin + 1,
                    "{n} workers, {total}, margin {margin}: {c:?}"
                );
            }
        }
    }
}

#[test]
fn spread_rule_skips_above_the_least_recent_rate_plus_slack() {
    let s = Spread::new(1, 4).with_rate_slack(Some(20));
    let load = |own, least| Load::new(0, 0, 1).with_least(0).with_recent(own, least);
    // 1000 recent accepts vs the least's 1000: accept; the bound is 1000 · 1.2 + margin + batch.
    assert_eq!(s.decide(load(1000, 1000)), Share::Accept(2));
    assert_eq!(s.decide(load(1205, 1000)), Share::Accept(2));
    assert_eq!(s.decide(load(1206, 1000)), Share::Skip);
    // Small counts (a keep-alive burst) are left to the open-connection rule.
    assert_eq!(s.decide(load(5, 0)), Share::Accept(2));
    assert_eq!(s.decide(load(6, 0)), Share::Skip);
    // The least recently-accepting worker never skips for its rate.
    assert_ne!(s.decide(load(0, 0)), Share::Skip);
    assert_ne!(s.decide(load(700, 700)), Share::Skip);
    // Off, or without recent counts, or alone: the rate does not matter.
    assert_eq!(
        s.with_rate_slack(None).decide(load(1_000_000, 0)),
        Share::Accept(2)
    );
    assert_eq!(s.decide(Load::new(0, 0, 1)), Share::Accept(2));
    let alone = Load::new(0, 0, 0).with_recent(1_000_000, 0);
    assert_eq!(s.decide(alone), Share::Accept(4));
    // No overflow at the extremes.
    assert_eq!(s.decide(load(u64::MAX, u64::MAX)), Share::Accept(2));
    assert_eq!(s.decide(load(u64::MAX, 0)), Share::Skip);
    assert_eq!(Spread::DEFAULT.rate_slack, Some(20));
}
