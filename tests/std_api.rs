//! `gomutex::Mutex`/`Condvar` as a drop-in for `std::sync`: the same scenario is run on std's
//! types and on ours wherever std defines the outcome, and the transcripts must be equal.
//! Condvar timeouts are checked against their contract with generous bounds only. Timed
//! locking (`try_lock_for`, not in std) and Go's invariants under timeouts: `tests/timed.rs`.

#[macro_use]
mod common;
use common::join_within;

use gomutex::{Condvar, Mutex, MutexGuard};
use std::cell::{Cell, RefCell};
use std::marker::PhantomPinned;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, TryLockError};
use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Poisoning, compared with std

/// One poisoning story, told by `$M` (a mutex of i32) and `$C` (its condvar); returns the
/// transcript.
macro_rules! poison_story {
    ($M:ty, $C:ty) => {{
        let mut out: Vec<String> = Vec::new();
        let m = Arc::new(<$M>::new(5));

        // A panic while NOT holding the lock does not poison it.
        let m2 = Arc::clone(&m);
        let r = thread::spawn(move || {
            drop(m2.lock().unwrap());
            panic!("not holding");
        })
        .join();
        out.push(format!(
            "panicked {} poisoned {}",
            r.is_err(),
            m.is_poisoned()
        ));

        // A guard taken while the thread is already unwinding does not poison either.
        struct LockOnDrop(Arc<$M>);
        impl Drop for LockOnDrop {
            fn drop(&mut self) {
                let mut g = self.0.lock().unwrap();
                *g += 100;
            }
        }
        let m2 = Arc::clone(&m);
        let _ = thread::spawn(move || {
            let _d = LockOnDrop(m2);
            panic!("unwinding");
        })
        .join();
        out.push(format!(
            "lock in drop while unwinding: poisoned {}",
            m.is_poisoned()
        ));
        *m.lock().unwrap() -= 100;

        // A panic while holding poisons.
        let m2 = Arc::clone(&m);
        let _ = thread::spawn(move || {
            let mut g = m2.lock().unwrap();
            *g = 6;
            panic!("holding");
        })
        .join();
        out.push(format!("poisoned {}", m.is_poisoned()));

        // lock: Err carrying a working guard.
        match m.lock() {
            Ok(_) => out.push("lock Ok".into()),
            Err(e) => {
                out.push(format!("lock Err display {e} debug {e:?}"));
                let mut g = e.into_inner();
                out.push(format!("guard data {}", *g));
                *g = 7;
                // try_lock on a poisoned lock that is held: WouldBlock, not Poisoned.
                out.push(match m.try_lock() {
                    Ok(_) => "try_lock (held) Ok".into(),
                    Err(TryLockError::WouldBlock) => "try_lock (held) WouldBlock".into(),
                    Err(TryLockError::Poisoned(_)) => "try_lock (held) Poisoned".into(),
                });
            }
        }
        // try_lock: Poisoned carrying the guard.
        match m.try_lock() {
            Ok(_) => out.push("try_lock Ok".into()),
            Err(TryLockError::WouldBlock) => out.push("try_lock WouldBlock".into()),
            Err(TryLockError::Poisoned(e)) => {
                out.push(format!("try_lock Poisoned data {}", **e.get_ref()));
                let err: TryLockError<_> = e.into();
                out.push(format!("TryLockError display {err} debug {err:?}"));
            }
        }
        // Condvar waits report poisoning too, still handing back the guard.
        let cv = <$C>::new();
        let g = m.lock().unwrap_or_else(|e| e.into_inner());
        match cv.wait_timeout(g, Duration::from_millis(1)) {
            Ok(_) => out.push("wait_timeout Ok".into()),
            Err(e) => {
                let (g, r) = e.into_inner();
                out.push(format!(
                    "wait_timeout Err data {} timed_out {}",
                    *g,
                    r.timed_out()
                ));
            }
        }
        let g = m.lock().unwrap_or_else(|e| e.into_inner());
        let r = cv.wait_while(g, |v| *v == 0);
        out.push(format!("wait_while is_err {}", r.is_err()));
        drop(r);

        // clear_poison heals it.
        m.clear_poison();
        out.push(format!("after clear: poisoned {}", m.is_poisoned()));
        out.push(format!("lock after clear: {:?}", m.lock().map(|g| *g)));

        // Poison again, then the by-value accessors.
        let m2 = Arc::clone(&m);
        let _ = thread::spawn(move || {
            let _g = m2.lock();
            panic!("again");
        })
        .join();
        let mut m = Arc::try_unwrap(m).unwrap_or_else(|_| panic!("still shared"));
        match m.get_mut() {
            Ok(v) => out.push(format!("get_mut Ok {v}")),
            Err(e) => {
                let v = e.into_inner();
                *v += 1;
                out.push(format!("get_mut Err {v}"));
            }
        }
        out.push(format!(
            "into_inner {:?}",
            m.into_inner().map_err(|e| e.into_inner())
        ));
        out
    }};
}

#[test]
fn poisoning_matches_std() {
    let ours = poison_story!(gomutex::Mutex<i32>, gomutex::Condvar);
    let std = poison_story!(std::sync::Mutex<i32>, std::sync::Condvar);
    assert_eq!(ours, std);
    // And the story is the one std documents (guards against both being wrong the same way).
    assert_eq!(std[0], "panicked true poisoned false");
    assert_eq!(std[2], "poisoned true");
    assert_eq!(ours.last().unwrap(), "into_inner Err(8)");
}

#[test]
fn try_lock_would_block_like_std() {
    let ours = Arc::new(Mutex::new(1));
    let std = Arc::new(std::sync::Mutex::new(1));
    let (g1, g2) = (ours.lock().unwrap(), std.lock().unwrap());
    // Same thread.
    assert!(matches!(ours.try_lock(), Err(TryLockError::WouldBlock)));
    assert!(matches!(std.try_lock(), Err(TryLockError::WouldBlock)));
    // Another thread.
    let (o, s) = (Arc::clone(&ours), Arc::clone(&std));
    thread::spawn(move || {
        assert!(matches!(o.try_lock(), Err(TryLockError::WouldBlock)));
        assert!(matches!(s.try_lock(), Err(TryLockError::WouldBlock)));
    })
    .join()
    .unwrap();
    let e = ours.try_lock().err().unwrap();
    let f = std.try_lock().err().unwrap();
    assert_eq!(format!("{e} / {e:?}"), format!("{f} / {f:?}"));
    drop((g1, g2));
    assert_eq!(*ours.try_lock().unwrap(), 1);
}

// ---------------------------------------------------------------------------------------------
// Construction, conversion, formatting

#[test]
fn into_inner_get_mut_default_from() {
    let m = Mutex::new(vec![1, 2]);
    m.lock().unwrap().push(3);
    assert_eq!(m.into_inner().unwrap(), [1, 2, 3]);

    let mut m = Mutex::new(String::from("a"));
    m.get_mut().unwrap().push('b');
    assert_eq!(*m.lock().unwrap(), "ab");

    let d: Mutex<Vec<u8>> = Mutex::default();
    assert!(d.lock().unwrap().is_empty());
    let f = Mutex::from(42u8);
    assert_eq!(f.into_inner().unwrap(), 42);
    let f: Mutex<&str> = "x".into();
    assert_eq!(*f.lock().unwrap(), "x");
    // Droping a mutex drops its data exactly once.
    let rc = Rc::new(());
    drop(Mutex::new(Rc::clone(&rc)));
    assert_eq!(Rc::strong_count(&rc), 1);
}

#[test]
fn debug_output_matches_std_unlocked_locked_poisoned() {
    fn both<T: std::fmt::Debug + Clone + Send + 'static>(v: T) {
        let ours = Arc::new(Mutex::new(v.clone()));
        let std = Arc::new(std::sync::Mutex::new(v));
        let same = |what: &str| {
            for (a, b) in [
                (format!("{ours:?}"), format!("{std:?}")),
                (format!("{ours:#?}"), format!("{std:#?}")),
            ] {
                assert_eq!(a, b, "{what}");
            }
        };
        same("unlocked");
        {
            let _g = (ours.lock().unwrap(), std.lock().unwrap());
            same("locked");
            assert!(format!("{ours:?}").contains("<locked>"));
        }
        let o = Arc::clone(&ours);
        let _ = thread::spawn(move || {
            let _g = o.lock();
            panic!("poison");
        })
        .join();
        let s = Arc::clone(&std);
        let _ = thread::spawn(move || {
            let _g = s.lock();
            panic!("poison");
        })
        .join();
        same("poisoned");
        assert!(format!("{ours:?}").contains("poisoned: true"));
    }
    both(5);
    both(String::from("five"));
    both(vec![(1, 'a')]);
    assert_eq!(
        format!("{:?}", Mutex::new(5)),
        "Mutex { data: 5, poisoned: false, .. }"
    );
}

#[test]
fn guard_display_and_debug_match_std() {
    let ours = Mutex::new(3.5f64);
    let std = std::sync::Mutex::new(3.5f64);
    let (g, h) = (ours.lock().unwrap(), std.lock().unwrap());
    for (a, b) in [
        (format!("{g}"), format!("{h}")),
        (format!("{g:?}"), format!("{h:?}")),
        (
            format!("{g:>8.2}|{g:<6}|{g:+}"),
            format!("{h:>8.2}|{h:<6}|{h:+}"),
        ),
        (format!("{g:#?}"), format!("{h:#?}")),
    ] {
        assert_eq!(a, b);
    }
    let ours = Mutex::new(String::from("hi"));
    let std = std::sync::Mutex::new(String::from("hi"));
    let (g, h) = (ours.lock().unwrap(), std.lock().unwrap());
    assert_eq!(format!("[{g:^6}] {g:?}"), format!("[{h:^6}] {h:?}"));
}

#[test]
fn condvar_debug_matches_std() {
    assert_eq!(
        format!("{:?}", Condvar::new()),
        format!("{:?}", std::sync::Condvar::new())
    );
}

static COUNTER: Mutex<u64> = Mutex::new(0);
static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
const fn make() -> Mutex<i32> {
    Mutex::new(-1)
}
static FROM_CONST_FN: Mutex<i32> = make();

#[test]
fn const_construction_in_statics() {
    // Fewer under Miri (scripts/miri.sh), whose slowness would otherwise trip the 30 s guard.
    const ITERS: u64 = if cfg!(miri) { 100 } else { 1000 };
    let handles: Vec<_> = (0..4)
        .map(|_| {
            thread::spawn(|| {
                for _ in 0..ITERS {
                    *COUNTER.lock().unwrap() += 1;
                }
                NAMES.lock().unwrap().push("t");
            })
        })
        .collect();
    join_within(Duration::from_secs(30), handles);
    assert_eq!(*COUNTER.lock().unwrap(), 4 * ITERS);
    assert_eq!(NAMES.lock().unwrap().len(), 4);
    assert_eq!(*FROM_CONST_FN.lock().unwrap(), -1);
}

#[test]
fn unsized_data_through_box_and_arc() {
    let b: Box<Mutex<[u8]>> = Box::new(Mutex::new([1, 2, 3]));
    b.lock().unwrap()[1] = 9;
    assert_eq!(&*b.lock().unwrap(), &[1, 9, 3]);
    assert_eq!(
        format!("{b:?}"),
        "Mutex { data: [1, 9, 3], poisoned: false, .. }"
    );

    // Fewer under Miri (scripts/miri.sh), whose slowness would otherwise trip the 30 s guard.
    const ITERS: u64 = if cfg!(miri) { 50 } else { 500 };
    let a: Arc<Mutex<[u64]>> = Arc::new(Mutex::new([0; 4]));
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let a = Arc::clone(&a);
            thread::spawn(move || {
                for _ in 0..ITERS {
                    let mut g = a.lock().unwrap();
                    g[i] += 1;
                    g[(i + 1) % 4] += 1;
                }
            })
        })
        .collect();
    join_within(Duration::from_secs(30), handles);
    assert_eq!(&*a.lock().unwrap(), &[2 * ITERS; 4]);

    let d: Box<Mutex<dyn std::fmt::Display + Send>> = Box::new(Mutex::new(7));
    assert_eq!(d.lock().unwrap().to_string(), "7");
    let g: MutexGuard<'_, dyn std::fmt::Display + Send> = d.lock().unwrap();
    assert_eq!(format!("{g}"), "7");
}

// ---------------------------------------------------------------------------------------------
// Auto traits: identical to std's, plus compile-time checks of the key facts

/// For data type `$t`: every auto trait of our `Mutex<$t>`/`MutexGuard<$t>` as std's.
macro_rules! compare_auto_traits {
    (@one $diffs:ident, $t:ty, $tr:path) => {
        let (o, s) = (
            implements!(gomutex::Mutex<$t>: $tr),
            implements!(std::sync::Mutex<$t>: $tr),
        );
        if o != s {
            $diffs.push(format!("Mutex<{}>: {}: ours {o}, std {s}", stringify!($t), stringify!($tr)));
        }
        let (o, s) = (
            implements!(gomutex::MutexGuard<'static, $t>: $tr),
            implements!(std::sync::MutexGuard<'static, $t>: $tr),
        );
        if o != s {
            $diffs.push(format!(
                "MutexGuard<{}>: {}: ours {o}, std {s}",
                stringify!($t),
                stringify!($tr)
            ));
        }
    };
    ($diffs:ident, $t:ty) => {
        compare_auto_traits!(@one $diffs, $t, Send);
        compare_auto_traits!(@one $diffs, $t, Sync);
        compare_auto_traits!(@one $diffs, $t, UnwindSafe);
        compare_auto_traits!(@one $diffs, $t, RefUnwindSafe);
        compare_auto_traits!(@one $diffs, $t, Unpin);
    };
}

#[test]
fn auto_traits_identical_to_std() {
    // The probe itself must be able to say no.
    assert!(implements!(i32: Send) && !implements!(Rc<i32>: Send));
    assert!(!implements!(RefCell<i32>: Sync) && !implements!(PhantomPinned: Unpin));
    assert!(!implements!(&'static mut i32: UnwindSafe));

    let mut diffs: Vec<String> = Vec::new();
    compare_auto_traits!(diffs, i32);
    compare_auto_traits!(diffs, Cell<i32>);
    compare_auto_traits!(diffs, RefCell<i32>);
    compare_auto_traits!(diffs, Rc<i32>);
    compare_auto_traits!(diffs, std::sync::MutexGuard<'static, i32>);
    compare_auto_traits!(diffs, &'static mut i32);
    compare_auto_traits!(diffs, *const u8);
    compare_auto_traits!(diffs, PhantomPinned);
    compare_auto_traits!(diffs, [u8]);
    compare_auto_traits!(diffs, dyn Send);
    compare_auto_traits!(diffs, dyn Sync);
    compare_auto_traits!(diffs, dyn std::any::Any);
    assert!(
        diffs.is_empty(),
        "auto traits differ from std:\n{}",
        diffs.join("\n")
    );

    let mut diffs = Vec::<String>::new();
    macro_rules! plain {
        ($a:ty, $b:ty, $($tr:path),+) => {$(
            if implements!($a: $tr) != implements!($b: $tr) {
                diffs.push(format!("{}: {}", stringify!($a), stringify!($tr)));
            }
        )+};
    }
    plain!(
        Condvar,
        std::sync::Condvar,
        Send,
        Sync,
        UnwindSafe,
        RefUnwindSafe,
        Unpin
    );
    plain!(
        gomutex::WaitTimeoutResult,
        std::sync::WaitTimeoutResult,
        Send,
        Sync,
        UnwindSafe,
        RefUnwindSafe,
        Unpin,
        Copy,
        Clone,
        PartialEq,
        Eq,
        std::fmt::Debug
    );
    assert!(diffs.is_empty(), "differ from std: {diffs:?}");
}

/// Compile-time facts: this file does not build if one of them breaks.
#[allow(dead_code)]
mod static_assertions {
    use super::*;

    fn send<T: ?Sized + Send>() {}
    fn sync<T: ?Sized + Sync>() {}
    fn unwind_safe<T: ?Sized + UnwindSafe>() {}
    fn ref_unwind_safe<T: ?Sized + RefUnwindSafe>() {}

    fn positive() {
        send::<Mutex<i32>>();
        sync::<Mutex<i32>>();
        send::<Mutex<Cell<i32>>>(); // Send data is enough for both
        sync::<Mutex<Cell<i32>>>();
        sync::<MutexGuard<'static, i32>>();
        unwind_safe::<Mutex<RefCell<i32>>>();
        ref_unwind_safe::<Mutex<RefCell<i32>>>();
        send::<Condvar>();
        sync::<Condvar>();
    }

    /// `<T as AmbiguousIf<_>>::item` resolves only if exactly one impl applies, i.e. only if
    /// `T` does NOT implement the trait the second impl is bounded on.
    trait AmbiguousIfSend<A> {
        fn item() {}
    }
    impl<T: ?Sized> AmbiguousIfSend<()> for T {}
    impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}

    trait AmbiguousIfSync<A> {
        fn item() {}
    }
    impl<T: ?Sized> AmbiguousIfSync<()> for T {}
    impl<T: ?Sized + Sync> AmbiguousIfSync<u8> for T {}

    fn negative() {
        // The guard must be unlocked by the thread that locked it.
        let _ = <MutexGuard<'static, i32> as AmbiguousIfSend<_>>::item;
        let _ = <MutexGuard<'static, [u8]> as AmbiguousIfSend<_>>::item;
        // Sharing a guard shares `&T`.
        let _ = <MutexGuard<'static, Cell<i32>> as AmbiguousIfSync<_>>::item;
        // Non-Send data makes the mutex neither Send nor Sync.
        let _ = <Mutex<Rc<i32>> as AmbiguousIfSend<_>>::item;
        let _ = <Mutex<Rc<i32>> as AmbiguousIfSync<_>>::item;
    }
}

#[test]
fn size_is_small() {
    let ours = std::mem::size_of::<Mutex<()>>();
    eprintln!(
        "size_of: gomutex::Mutex<()> = {ours}, RawMutex = {}, Condvar = {}; std::sync::Mutex<()> = {}",
        std::mem::size_of::<gomutex::RawMutex>(),
        std::mem::size_of::<Condvar>(),
        std::mem::size_of::<std::sync::Mutex<()>>()
    );
    // Issue 35: std's and Go's size (a 32-bit state word and a 32-bit semaphore; it was 16
    // with a poison flag and the queue's two counters beside the state word).
    assert!(ours <= 8, "Mutex<()> grew to {ours} bytes");
    assert!(std::mem::size_of::<gomutex::RawMutex>() <= 8);
    assert!(std::mem::size_of::<Mutex<u64>>() <= 16);
    assert!(std::mem::size_of::<Condvar>() <= 4, "Condvar grew");
}

// ---------------------------------------------------------------------------------------------
// Condvar

#[test]
fn condvar_notify_one_feeds_several_consumers() {
    const ITEMS: u64 = 2000;
    const CONSUMERS: usize = 4;
    let st = Arc::new((Mutex::new((Vec::<u64>::new(), false)), Condvar::new()));
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let st = Arc::clone(&st);
            thread::spawn(move || {
                let (m, cv) = &*st;
                let mut sum = 0u64;
                let mut n = 0u64;
                loop {
                    let mut g = cv
                        .wait_while(m.lock().unwrap(), |(q, done)| q.is_empty() && !*done)
                        .unwrap();
                    match g.0.pop() {
                        Some(v) => {
                            sum += v;
                            n += 1;
                        }
                        None => return (sum, n), // done and drained
                    }
                }
            })
        })
        .collect();
    let (m, cv) = &*st;
    for i in 1..=ITEMS {
        m.lock().unwrap().0.push(i);
        cv.notify_one();
    }
    m.lock().unwrap().1 = true;
    cv.notify_all();
    let res = join_within(Duration::from_secs(30), consumers);
    let (sum, n) = res.iter().fold((0, 0), |a, r| (a.0 + r.0, a.1 + r.1));
    assert_eq!((sum, n), (ITEMS * (ITEMS + 1) / 2, ITEMS));
}

#[test]
fn condvar_notify_all_wakes_every_waiter() {
    const WAITERS: usize = 6;
    let st = Arc::new((Mutex::new((0usize, false)), Condvar::new(), Condvar::new()));
    let handles: Vec<_> = (0..WAITERS)
        .map(|_| {
            let st = Arc::clone(&st);
            thread::spawn(move || {
                let (m, ready, go) = &*st;
                let mut g = m.lock().unwrap();
                g.0 += 1;
                ready.notify_one();
                // A notify_all that missed a waiter would leave it asleep here for good.
                while !g.1 {
                    g = go.wait(g).unwrap();
                }
            })
        })
        .collect();
    let (m, ready, go) = &*st;
    // Every waiter has incremented under the lock and then released it inside `wait`.
    drop(
        ready
            .wait_while(m.lock().unwrap(), |s| s.0 < WAITERS)
            .unwrap(),
    );
    m.lock().unwrap().1 = true;
    go.notify_all();
    join_within(Duration::from_secs(30), handles);
}

#[test]
fn condvar_wait_timeout_times_out_and_honours_the_duration() {
    let m = Mutex::new(0);
    let cv = Condvar::new();
    for ms in [1u64, 20, 50] {
        let dur = Duration::from_millis(ms);
        let t0 = Instant::now();
        let (g, r) = cv.wait_timeout(m.lock().unwrap(), dur).unwrap();
        let took = t0.elapsed();
        assert!(r.timed_out(), "no notify, yet not timed out");
        assert!(took >= dur, "returned after {took:?} < {dur:?}");
        assert!(took < dur + Duration::from_secs(5), "took {took:?}");
        assert_eq!(*g, 0);
    }
}

#[test]
fn condvar_wait_timeout_reports_a_notify_in_time() {
    let st = Arc::new((Mutex::new(false), Condvar::new()));
    let st2 = Arc::clone(&st);
    let (m, cv) = &*st;
    let mut g = m.lock().unwrap();
    let h = thread::spawn(move || {
        let (m, cv) = &*st2;
        *m.lock().unwrap() = true;
        cv.notify_one();
    });
    // The notifier needs the lock, so it runs while we wait: the flag can only be set then.
    let mut timed_out = false;
    while !*g {
        let (g2, r) = cv.wait_timeout(g, Duration::from_secs(20)).unwrap();
        g = g2;
        timed_out |= r.timed_out();
    }
    assert!(!timed_out);
    drop(g);
    h.join().unwrap();
}

#[test]
fn condvar_wait_timeout_while_times_out_with_the_condition_still_true() {
    let st = Arc::new((Mutex::new(1u32), Condvar::new()));
    let stop = Arc::new(AtomicBool::new(false));
    // Keep notifying without ever making the condition false: the timeout is for the total
    // wait, not per wake-up.
    let (st2, stop2) = (Arc::clone(&st), Arc::clone(&stop));
    let nagger = thread::spawn(move || {
        while !stop2.load(Relaxed) {
            st2.1.notify_all();
            thread::sleep(Duration::from_millis(2));
        }
    });
    let (m, cv) = &*st;
    let dur = Duration::from_millis(60);
    let t0 = Instant::now();
    let (mut g, r) = cv
        .wait_timeout_while(m.lock().unwrap(), dur, |v| *v != 0)
        .unwrap();
    let took = t0.elapsed();
    stop.store(true, Relaxed);
    assert!(r.timed_out());
    assert_ne!(*g, 0, "the condition must still be true on timeout");
    assert!(took >= dur, "returned after {took:?} < {dur:?}");
    *g = 0;
    drop(g);
    nagger.join().unwrap();

    // And it returns as soon as the condition turns false, without timing out.
    let st2 = Arc::clone(&st);
    *m.lock().unwrap() = 1;
    let setter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        *st2.0.lock().unwrap() = 0;
        st2.1.notify_one();
    });
    let (g, r) = cv
        .wait_timeout_while(m.lock().unwrap(), Duration::from_secs(20), |v| *v != 0)
        .unwrap();
    assert!(!r.timed_out());
    assert_eq!(*g, 0);
    drop(g);
    setter.join().unwrap();
}

#[test]
fn condvar_notify_before_wait_is_not_remembered() {
    let m = Mutex::new(());
    let cv = Condvar::new();
    cv.notify_one();
    cv.notify_all();
    let (_g, r) = cv
        .wait_timeout(m.lock().unwrap(), Duration::from_millis(30))
        .unwrap();
    assert!(r.timed_out(), "a notify with no waiter woke a later wait");
    // std agrees.
    let sm = std::sync::Mutex::new(());
    let scv = std::sync::Condvar::new();
    scv.notify_one();
    let (_g, r) = scv
        .wait_timeout(sm.lock().unwrap(), Duration::from_millis(30))
        .unwrap();
    assert!(r.timed_out());
}

/// The notifier grabs the mutex the instant the waiter's `wait` releases it and notifies at
/// once, racing the waiter on its way to sleep: the notify must still reach it. A lost notify
/// shows as a wait that times out although its condition was already met.
#[test]
fn condvar_notify_right_after_the_waiter_unlocks_is_not_lost() {
    const ROUNDS: usize = 2000;
    let st = Arc::new((Mutex::new(0usize), Condvar::new(), AtomicUsize::new(0)));
    let st2 = Arc::clone(&st);
    let waiter = thread::spawn(move || {
        let (m, cv, waiting) = &*st2;
        let mut lost = 0;
        for round in 1..=ROUNDS {
            let mut g = m.lock().unwrap();
            waiting.store(round, Relaxed);
            while *g < round {
                let (g2, r) = cv.wait_timeout(g, Duration::from_secs(2)).unwrap();
                g = g2;
                lost += usize::from(r.timed_out() && *g >= round);
            }
        }
        lost
    });
    let (m, cv, waiting) = &*st;
    for round in 1..=ROUNDS {
        // The waiter holds the lock from publishing `round` until its wait releases it.
        while waiting.load(Relaxed) < round {
            thread::yield_now();
        }
        let mut g = loop {
            if let Ok(g) = m.try_lock() {
                break g;
            }
            std::hint::spin_loop();
        };
        *g = round;
        cv.notify_one();
    }
    let lost = join_within(Duration::from_secs(60), vec![waiter]);
    assert_eq!(lost, [0], "notifies lost");
}

/// Two threads take turns: each waits (lock released) for its turn, then passes it on. A notify
/// lost between a waiter's release of the lock and its sleep would stop the game.
#[test]
fn condvar_ping_pong_loses_no_notify() {
    const ROUNDS: u64 = 5_000;
    let st = Arc::new((Mutex::new(0u64), Condvar::new()));
    let handles: Vec<_> = (0..2u64)
        .map(|me| {
            let st = Arc::clone(&st);
            thread::spawn(move || {
                let (m, cv) = &*st;
                for round in 0..ROUNDS {
                    let mut g = m.lock().unwrap();
                    while *g % 2 != me {
                        g = cv.wait(g).unwrap();
                    }
                    assert_eq!(*g, 2 * round + me);
                    *g += 1;
                    // One side notifies while holding the lock, the other after releasing it.
                    if me == 0 {
                        cv.notify_one();
                        drop(g);
                    } else {
                        drop(g);
                        cv.notify_one();
                    }
                }
            })
        })
        .collect();
    join_within(Duration::from_secs(60), handles);
    assert_eq!(*st.0.lock().unwrap(), 2 * ROUNDS);
    assert_eq!(st.0.raw().state(), 0);
}

// ------------------------------------------------------------------ beyond std's stable API

/// std's deprecated `wait_timeout_ms` compiles and keeps std's sense of the flag (`false` = timed
/// out), checked against std's own on the same scenarios.
#[test]
#[allow(deprecated)]
fn condvar_wait_timeout_ms_matches_std() {
    let (m, cv) = (Mutex::new(0), Condvar::new());
    let (sm, scv) = (std::sync::Mutex::new(0), std::sync::Condvar::new());
    let t0 = Instant::now();
    let (g, in_time) = cv.wait_timeout_ms(m.lock().unwrap(), 5).unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(5));
    let (sg, s_in_time) = scv.wait_timeout_ms(sm.lock().unwrap(), 5).unwrap();
    assert_eq!((in_time, *g), (s_in_time, *sg));
    assert!(!in_time);
    drop((g, sg));

    // A notify in time: the notifier needs the lock, so it can only run while we wait.
    let st = Arc::new((Mutex::new(false), Condvar::new()));
    let st2 = Arc::clone(&st);
    let (m, cv) = &*st;
    let mut g = m.lock().unwrap();
    let h = thread::spawn(move || {
        let (m, cv) = &*st2;
        *m.lock().unwrap() = true;
        cv.notify_one();
    });
    let mut always_in_time = true;
    while !*g {
        let (g2, in_time) = cv.wait_timeout_ms(g, 20_000).unwrap();
        g = g2;
        always_in_time &= in_time;
    }
    assert!(always_in_time);
    drop(g);
    h.join().unwrap();
}

/// `MutexGuard::map`/`filter_map` and `MappedMutexGuard` (std's unstable `mapped_lock_guards`):
/// the lock is held until the mapped guard drops, and a panic under it poisons the mutex.
#[test]
fn mapped_guards_hold_the_lock_and_poison() {
    use gomutex::MappedMutexGuard;

    let m = Mutex::new((1, vec![10, 20]));
    let mut v = MutexGuard::map(m.lock().unwrap(), |d| &mut d.1);
    assert!(m.try_lock().is_err(), "unlocked while mapped");
    v.push(30);
    let g = MappedMutexGuard::filter_map(v, |v| v.get_mut(7)).unwrap_err();
    let mut last = MappedMutexGuard::map(g, |v| v.last_mut().unwrap());
    *last += 1;
    assert_eq!(format!("{last:?} {last}"), "31 31");
    drop(last);
    assert_eq!(*m.lock().unwrap(), (1, vec![10, 20, 31]));

    let g = MutexGuard::filter_map(m.lock().unwrap(), |d| d.1.get_mut(9)).unwrap_err();
    assert_eq!(g.0, 1, "declined: the original guard comes back");
    drop(g);

    let m = Arc::new(m);
    let m2 = Arc::clone(&m);
    let r = thread::spawn(move || {
        let mut first = MutexGuard::map(m2.lock().unwrap(), |d| &mut d.0);
        *first = 2;
        panic!("poison it through the mapped guard");
    })
    .join();
    assert!(r.is_err());
    assert!(m.is_poisoned());
    assert!(m
        .try_lock()
        .is_err_and(|e| matches!(e, TryLockError::Poisoned(_))));

    // A panic inside the mapping closure unlocks and poisons, as std documents.
    let m3 = Arc::clone(&m);
    m.clear_poison();
    let r = thread::spawn(move || {
        let _ = MutexGuard::map(m3.lock().unwrap(), |_| -> &mut i32 { panic!("in map") });
    })
    .join();
    assert!(r.is_err());
    assert!(m.is_poisoned());
    assert_eq!(m.lock().unwrap_err().into_inner().0, 2);

    // Auto traits as std's MappedMutexGuard: never Send, Sync when the data is.
    assert!(!implements!(MappedMutexGuard<'static, i32>: Send));
    assert!(implements!(MappedMutexGuard<'static, i32>: Sync));
    assert!(!implements!(MappedMutexGuard<'static, Cell<i32>>: Sync));
}
