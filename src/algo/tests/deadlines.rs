//! Deadlines: when a timed-out waiter may leave the waiter count, and what it takes instead.
use super::*;

#[test]
fn timed_out_waiter_leaves_the_count() {
    let w = Word::new(LOCKED | W);
    let q = Script::new(&w).then(|w, _| {
        assert_eq!(w.get(), LOCKED | W2);
        false
    });
    assert!(!do_lock_until(&w, &q, far_deadline()));
    q.assert_done();
    assert_eq!(w.get(), LOCKED | W);
    assert_eq!(q.calls(), [acq_timed(false)]);
}

#[test]
fn timed_out_last_waiter_ends_starvation_mode() {
    let w = Word::new(LOCKED | STARVING | W);
    let q = Script::new(&w).then(|w, _| {
        w.set(w.get() - W); // the older waiter timed out and left
        assert_eq!(w.get(), LOCKED | STARVING | W);
        false
    });
    assert!(!do_lock_until(&w, &q, far_deadline()));
    // STARVING with no waiter would make the next unlock hand off to nobody.
    assert_eq!(w.get(), LOCKED);
}

#[test]
fn timed_out_waiter_leaves_while_a_handoff_goes_to_another() {
    let w = Word::new(LOCKED | STARVING | W2);
    let q = Script::new(&w).then(|w, log| {
        other_unlocks(w, log); // hand-off in flight to the oldest of two older waiters
        false
    });
    assert!(!do_lock_until(&w, &q, far_deadline()));
    assert_eq!(
        w.get(),
        STARVING | W2,
        "the receiver of the hand-off and one more waiter must stay counted"
    );
    assert_eq!(q.calls(), [acq_timed(false), rel(true)]);
}

/// Found by loom (loom-tests/tests/timed.rs): the receiver reads "2 waiters, not the last",
/// then this waiter times out; had it left, the receiver's blind fix-up add would keep
/// STARVING with no waiter, and its unlock would hand off to nobody. It must wait for the
/// fix-up instead, then leave (ending starvation mode as the last waiter).
#[test]
fn timed_out_waiter_does_not_leave_the_receiver_alone_during_a_handoff() {
    let w = Word::new(LOCKED | STARVING | W);
    let q = Script::new(&w)
        .then(|w, log| {
            other_unlocks(w, log); // hand-off in flight to the older waiter
            assert_eq!(w.get(), STARVING | W2);
            false
        })
        .then(|w, _| {
            assert_eq!(w.get(), STARVING | W2, "left during the hand-off");
            // The receiver read N = 2 and stays starving: −7.
            w.fetch_add(LOCKED.wrapping_sub(W));
            false
        });
    assert!(!do_lock_until(&w, &q, far_deadline()));
    q.assert_done();
    assert_eq!(w.get(), LOCKED, "the last waiter left: normal mode");
    assert_eq!(q.calls(), [acq_timed(false), rel(true), acq_timed(true)]);
}

#[test]
fn timed_out_waiter_takes_a_handoff_that_is_its_own() {
    let w = Word::new(LOCKED);
    let q = Script::new(&w)
        .then(|w, log| {
            advance(2 * MS);
            other_unlocks(w, log);
            barger_locks(w);
            true
        })
        .then(|w, log| {
            assert_eq!(w.get(), LOCKED | STARVING | W);
            other_unlocks(w, log); // hand-off to us, the only waiter ...
            false // ... as our sleep times out
        })
        .then(|w, _| {
            assert_eq!(
                w.get(),
                STARVING | W,
                "left the count with its hand-off in flight"
            );
            false // the token is still on its way
        })
        .then(|w, _| {
            assert_eq!(w.get(), STARVING | W);
            true
        });
    assert!(do_lock_until(&w, &q, far_deadline()));
    q.assert_done();
    assert_eq!(w.get(), LOCKED);
    assert_eq!(
        q.calls(),
        [
            acq_timed(false),
            rel(false),
            acq_timed(true),
            rel(true),
            acq_timed(true),
            acq_timed(true)
        ]
    );
}

#[test]
fn timed_out_waiter_takes_a_normal_wakeup_that_is_its_own() {
    let w = Word::new(LOCKED);
    let q = Script::new(&w)
        .then(|w, log| {
            other_unlocks(w, log); // removes us from the count, token in flight
            false
        })
        .then(|w, _| {
            assert_eq!(w.get(), WOKEN);
            true
        });
    assert!(do_lock_until(&w, &q, far_deadline()));
    q.assert_done();
    assert_eq!(w.get(), LOCKED, "a woken contender must clear WOKEN");
    assert_eq!(q.calls(), [acq_timed(false), rel(false), acq_timed(true)]);
}

#[test]
fn timed_out_waiter_leaves_once_a_newcomer_took_its_wakeup() {
    let w = Word::new(LOCKED);
    let q = Script::new(&w)
        .then(|w, log| {
            other_unlocks(w, log);
            false
        })
        .then(|w, _| {
            // A barger locked, a newcomer registered and consumed the stored token: it is
            // the awake contender now, and we are counted in its place.
            barger_locks(w);
            w.set(w.get() + W);
            false
        });
    assert!(!do_lock_until(&w, &q, far_deadline()));
    q.assert_done();
    assert_eq!(
        w.get(),
        LOCKED | WOKEN,
        "the newcomer keeps WOKEN, we leave the count"
    );
}

#[test]
fn woken_waiter_past_its_deadline_gives_up_woken() {
    let w = Word::new(LOCKED);
    let deadline = Instant::now() + Duration::from_millis(30);
    let q = Script::new(&w).then(|w, log| {
        other_unlocks(w, log);
        barger_locks(w);
        std::thread::sleep(Duration::from_millis(40));
        true
    });
    assert!(!do_lock_until(&w, &q, deadline));
    q.assert_done();
    assert_eq!(
        w.get(),
        LOCKED,
        "WOKEN left set: the holder's unlock would wake nobody"
    );
    assert_eq!(q.calls(), [acq_timed(false), rel(false)]);
}

#[test]
fn expired_deadline_never_queues_but_still_takes_a_free_lock() {
    let w = Word::new(LOCKED | W);
    let q = Script::new(&w);
    assert!(!do_lock_until(&w, &q, Instant::now()));
    assert_eq!(w.get(), LOCKED | W);
    assert_eq!(q.calls(), []);

    let w = Word::new(WOKEN | W);
    let q = Script::new(&w);
    assert!(do_lock_until(&w, &q, Instant::now()));
    assert_eq!(w.get(), LOCKED | WOKEN | W);
}

#[test]
fn deregister_keeps_enough_waiters_for_tokens_in_flight() {
    let cases = [
        // (state, left?, state after)
        (LOCKED, false, LOCKED),
        (LOCKED | W, true, LOCKED),
        (WOKEN, false, WOKEN),
        (WOKEN | W, true, WOKEN),
        (LOCKED | STARVING | W, true, LOCKED),
        (LOCKED | STARVING | W2, true, LOCKED | STARVING | W),
        (STARVING | W, false, STARVING | W),
        // A hand-off in flight keeps its receiver and one more waiter counted (the receiver
        // may already have decided to stay starving).
        (STARVING | W2, false, STARVING | W2),
        (STARVING | W3, true, STARVING | W2),
    ];
    for (s, left, after) in cases {
        let w = Word::new(s);
        assert_eq!(deregister(&w), left, "deregister in state {s:#x}");
        assert_eq!(w.get(), after, "deregister in state {s:#x}");
    }
}

#[test]
fn bulk_deregistration_is_repeated_single_ones() {
    for flags in 0..8u32 {
        for waiters in 0..6u32 {
            let state = flags | (waiters * WAITER);
            for n in 0..8u32 {
                let (mut s, mut k) = (state, 0);
                while k < n {
                    match deregistered(s) {
                        Some(next) => (s, k) = (next, k + 1),
                        None => break,
                    }
                }
                let want = (k > 0).then_some((s, k));
                assert_eq!(deregistered_up_to(state, n), want, "{state:#x} {n}");
            }
        }
    }
}
