//! `gomutex::RwLock` as a drop-in for `std::sync::RwLock`: the same scenario is run on std's
//! type and on ours wherever std defines the outcome, and the transcripts must be equal.
//! Go's own tests, the policy and the deadlines: `tests/rwlock.rs`.

#[macro_use]
mod common;
use common::join_within;

use gomutex::{
    MappedRwLockReadGuard, MappedRwLockWriteGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::cell::{Cell, RefCell};
use std::marker::PhantomPinned;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::rc::Rc;
use std::sync::RwLockWriteGuard as StdWriteGuard;
use std::sync::{Arc, TryLockError};
use std::thread;
use std::time::Duration;

/// What a `TryLockResult` was, as text.
macro_rules! outcome {
    ($r:expr) => {
        match $r {
            Ok(_) => "ok",
            Err(TryLockError::WouldBlock) => "would block",
            Err(TryLockError::Poisoned(_)) => "poisoned",
        }
    };
}

/// One poisoning story told by `$L` (a lock of i32); returns the transcript.
macro_rules! poison_story {
    ($L:ty) => {{
        let mut out: Vec<String> = Vec::new();
        let l = Arc::new(<$L>::new(5));

        // A panicking reader does not poison.
        let l2 = Arc::clone(&l);
        let r = thread::spawn(move || {
            let _r = l2.read().unwrap();
            panic!("reading");
        })
        .join();
        out.push(format!(
            "reader panicked {} poisoned {}",
            r.is_err(),
            l.is_poisoned()
        ));

        // A panic after releasing the write lock does not poison.
        let l2 = Arc::clone(&l);
        let _ = thread::spawn(move || {
            drop(l2.write().unwrap());
            panic!("not holding");
        })
        .join();
        out.push(format!("after release poisoned {}", l.is_poisoned()));

        // A panicking writer does.
        let l2 = Arc::clone(&l);
        let _ = thread::spawn(move || {
            let mut w = l2.write().unwrap();
            *w = 6;
            panic!("writing");
        })
        .join();
        out.push(format!("writer poisoned {}", l.is_poisoned()));
        match l.read() {
            Ok(_) => out.push("read ok".into()),
            Err(e) => out.push(format!("read err, data {}", *e.into_inner())),
        }
        match l.write() {
            Ok(_) => out.push("write ok".into()),
            Err(e) => out.push(format!("write err, data {}", *e.into_inner())),
        }
        out.push(format!("try_read {}", outcome!(l.try_read())));
        out.push(format!("try_write {}", outcome!(l.try_write())));
        // A write guard dropped by unwinding (caught) poisons.
        l.clear_poison();
        let l2 = Arc::clone(&l);
        let _ = thread::spawn(move || {
            let w = l2.write().unwrap();
            let guard_in_unwind = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _w = w;
                panic!("unwinding with the write guard alive");
            }));
            assert!(guard_in_unwind.is_err());
        })
        .join();
        out.push(format!(
            "panic with a write guard, poisoned {}",
            l.is_poisoned()
        ));
        l.clear_poison();
        out.push(format!("cleared {}", l.is_poisoned()));
        let l = Arc::try_unwrap(l).unwrap_or_else(|_| panic!("still shared"));
        out.push(format!(
            "into_inner {:?}",
            l.into_inner().map_err(|e| e.into_inner())
        ));
        out
    }};
}

#[test]
fn poisoning_matches_std() {
    let ours = poison_story!(RwLock<i32>);
    let std = poison_story!(std::sync::RwLock<i32>);
    assert_eq!(ours, std);
    assert!(
        ours.contains(&"writer poisoned true".to_string()),
        "{ours:?}"
    );
}

/// `downgrade` during a panic: std does not poison; neither may we.
macro_rules! downgrade_while_panicking {
    ($L:ty, $G:ident) => {{
        let l = Arc::new(<$L>::new(1));
        let l2 = Arc::clone(&l);
        struct OnDrop(Option<$G<'static, i32>>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                let w = self.0.take().unwrap();
                drop($G::downgrade(w));
            }
        }
        let leaked: &'static $L = Box::leak(Box::new(<$L>::new(1)));
        let _ = thread::spawn(move || {
            let _g = OnDrop(Some(leaked.write().unwrap()));
            drop(l2);
            panic!("downgrading while panicking");
        })
        .join();
        (leaked.is_poisoned(), l.is_poisoned())
    }};
}

#[test]
fn downgrade_while_panicking_does_not_poison_like_std() {
    let ours = downgrade_while_panicking!(RwLock<i32>, RwLockWriteGuard);
    let std = downgrade_while_panicking!(std::sync::RwLock<i32>, StdWriteGuard);
    assert_eq!(ours, std);
    assert_eq!(ours, (false, false));
}

#[test]
fn try_lock_outcomes_match_std() {
    // The try-lock truth table (Go's TestRWMutex preamble), plus downgrade.
    macro_rules! story {
        ($L:ty, $W:ident) => {{
            let mut out = Vec::new();
            let l = <$L>::new(());
            out.push(format!(
                "free: r {} w {}",
                outcome!(l.try_read()),
                outcome!(l.try_write())
            ));
            let r = l.read().unwrap();
            out.push(format!(
                "read-held: r {} w {}",
                outcome!(l.try_read()),
                outcome!(l.try_write())
            ));
            drop(r);
            let w = l.write().unwrap();
            out.push(format!(
                "write-held: r {} w {}",
                outcome!(l.try_read()),
                outcome!(l.try_write())
            ));
            let r = $W::downgrade(w);
            out.push(format!(
                "downgraded: r {} w {}",
                outcome!(l.try_read()),
                outcome!(l.try_write())
            ));
            drop(r);
            out.push(format!(
                "free again: r {} w {}",
                outcome!(l.try_read()),
                outcome!(l.try_write())
            ));
            out
        }};
    }
    let ours = story!(RwLock<()>, RwLockWriteGuard);
    let std = story!(std::sync::RwLock<()>, StdWriteGuard);
    assert_eq!(ours, std);
    assert_eq!(ours[1], "read-held: r ok w would block");
}

#[test]
fn into_inner_get_mut_default_from() {
    macro_rules! story {
        ($L:ty) => {{
            let mut l = <$L>::from(vec![1]);
            l.get_mut().unwrap().push(2);
            let d = <$L>::default();
            (l.into_inner().unwrap(), d.into_inner().unwrap())
        }};
    }
    assert_eq!(
        story!(RwLock<Vec<i32>>),
        story!(std::sync::RwLock<Vec<i32>>)
    );
}

#[test]
fn debug_output_matches_std_unlocked_read_write_locked_poisoned() {
    macro_rules! story {
        ($L:ty) => {{
            let mut out = Vec::new();
            let l = Arc::new(<$L>::new(vec![1, 2]));
            out.push(format!("{l:?}"));
            out.push(format!("{l:#?}"));
            {
                let _r = l.read().unwrap();
                out.push(format!("{l:?}"));
            }
            {
                let _w = l.write().unwrap();
                out.push(format!("{l:?}"));
            }
            let l2 = Arc::clone(&l);
            let _ = thread::spawn(move || {
                let _w = l2.write().unwrap();
                panic!("poison");
            })
            .join();
            out.push(format!("{l:?}"));
            out
        }};
    }
    let ours = story!(RwLock<Vec<i32>>);
    let std = story!(std::sync::RwLock<Vec<i32>>);
    assert_eq!(ours, std);
    assert_eq!(ours[3], "RwLock { data: <locked>, poisoned: false, .. }");
}

#[test]
fn guard_display_and_debug_match_std() {
    macro_rules! story {
        ($L:ty) => {{
            let l = <$L>::new(String::from("x\"y"));
            let r = l.read().unwrap();
            let a = (format!("{r}"), format!("{r:?}"));
            drop(r);
            let w = l.write().unwrap();
            (a, format!("{w}"), format!("{w:?}"))
        }};
    }
    assert_eq!(story!(RwLock<String>), story!(std::sync::RwLock<String>));
}

#[test]
fn const_construction_in_statics() {
    static S: RwLock<Vec<u32>> = RwLock::new(Vec::new());
    static STD: std::sync::RwLock<Vec<u32>> = std::sync::RwLock::new(Vec::new());
    let handles: Vec<_> = (0..4)
        .map(|i| {
            thread::spawn(move || {
                S.write().unwrap().push(i);
                STD.write().unwrap().push(i);
                S.read().unwrap().len() + STD.read().unwrap().len()
            })
        })
        .collect();
    join_within(Duration::from_secs(30), handles);
    assert_eq!(S.read().unwrap().len(), STD.read().unwrap().len());
}

#[test]
fn unsized_data_through_box_and_arc() {
    let b: Box<RwLock<[u8]>> = Box::new(RwLock::new([1, 2, 3]));
    b.write().unwrap()[1] = 9;
    assert_eq!(&*b.read().unwrap(), &[1, 9, 3]);
    let s: Box<std::sync::RwLock<[u8]>> = Box::new(std::sync::RwLock::new([1, 9, 3]));
    assert_eq!(format!("{b:?}"), format!("{s:?}"));

    let d: Arc<RwLock<dyn std::fmt::Display + Send + Sync>> = Arc::new(RwLock::new(7));
    assert_eq!(d.read().unwrap().to_string(), "7");
    let g: RwLockReadGuard<'_, dyn std::fmt::Display + Send + Sync> = d.read().unwrap();
    assert_eq!(format!("{g}"), "7");
}

#[test]
fn mapped_guards_hold_the_lock_and_poison() {
    let l = Arc::new(RwLock::new((1, String::from("a"))));
    let r = RwLockReadGuard::map(l.read().unwrap(), |d| &d.1);
    let r: MappedRwLockReadGuard<'_, str> = MappedRwLockReadGuard::map(r, |s| s.as_str());
    assert!(matches!(l.try_write(), Err(TryLockError::WouldBlock)));
    assert!(l.try_read().is_ok(), "a mapped read guard is a read lock");
    assert_eq!(
        (format!("{r}"), format!("{r:?}")),
        ("a".into(), "\"a\"".into())
    );
    drop(r);

    let w = RwLockWriteGuard::map(l.write().unwrap(), |d| &mut d.1);
    let mut w: MappedRwLockWriteGuard<'_, String> =
        MappedRwLockWriteGuard::filter_map(w, |s| Some(s)).unwrap_or_else(|_| panic!("declined"));
    w.push('b');
    assert!(matches!(l.try_read(), Err(TryLockError::WouldBlock)));
    drop(w);
    assert_eq!(l.read().unwrap().1, "ab");

    // A panic while a mapped write guard lives poisons; one while a mapped read guard lives
    // does not.
    let l2 = Arc::clone(&l);
    let _ = thread::spawn(move || {
        let _r = RwLockReadGuard::map(l2.read().unwrap(), |d| &d.0);
        panic!("reader");
    })
    .join();
    assert!(!l.is_poisoned());
    let l2 = Arc::clone(&l);
    let _ = thread::spawn(move || {
        let _w = RwLockWriteGuard::map(l2.write().unwrap(), |d| &mut d.0);
        panic!("writer");
    })
    .join();
    assert!(l.is_poisoned());
    assert!(l.try_write().is_err() && l.read().is_err());
}

// ---------------------------------------------------------------------------------------------
// Auto traits: identical to std's

macro_rules! compare_auto_traits {
    (@pair $diffs:ident, $ours:ty, $std:ty, $tr:path) => {
        let (o, s) = (implements!($ours: $tr), implements!($std: $tr));
        if o != s {
            $diffs.push(format!("{}: {}: ours {o}, std {s}", stringify!($ours), stringify!($tr)));
        }
    };
    (@one $diffs:ident, $t:ty, $tr:path) => {
        compare_auto_traits!(@pair $diffs, RwLock<$t>, std::sync::RwLock<$t>, $tr);
        compare_auto_traits!(@pair $diffs, RwLockReadGuard<'static, $t>,
            std::sync::RwLockReadGuard<'static, $t>, $tr);
        compare_auto_traits!(@pair $diffs, RwLockWriteGuard<'static, $t>,
            std::sync::RwLockWriteGuard<'static, $t>, $tr);
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
}

#[test]
fn size_is_small() {
    let ours = std::mem::size_of::<RwLock<()>>();
    eprintln!(
        "size_of: gomutex::RwLock<()> = {ours}, RawRwLock = {}; std::sync::RwLock<()> = {}",
        std::mem::size_of::<gomutex::RawRwLock>(),
        std::mem::size_of::<std::sync::RwLock<()>>()
    );
    // Issue 35: std's size class (std 12, parking_lot 8; it was 32 on Go's mechanics).
    assert!(ours <= 16, "RwLock<()> grew to {ours} bytes");
    assert!(std::mem::size_of::<gomutex::RawRwLock>() <= 16);
    assert!(std::mem::size_of::<RwLock<u64>>() <= 24);
}
