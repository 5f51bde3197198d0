//! The mutex profile (`--features profile`): a program with one contended call site and one
//! uncontended one; the written profile, read back (parsed here, and by `go tool pprof` where
//! Go is installed), charges the delay to the contended site.
#![cfg(feature = "profile")]

use flate2::read::GzDecoder;
use gomutex::{profile, Condvar, Mutex, MutexGuard, RawMutex};
use prost::Message;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// pprof's messages, decoded independently of the crate's own (only the fields read here;
/// field numbers from `profile.proto`).
mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// The tests share the process-wide rate and profile: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long the contended site keeps its waiter asleep, per round.
const HOLD: Duration = Duration::from_micros(300);

/// Busy-wait (a sleep could oversleep by milliseconds on a loaded machine; this holds exactly).
fn hold(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Wait until `n` threads sleep on `raw`.
fn until_parked(raw: &RawMutex, n: usize) {
    while raw.parked() < n {
        std::thread::yield_now();
    }
}

/// The lines of [`contended_site`] (for the file:line check).
const CONTENDED_SITE_FIRST: u32 = line!();
/// Every round: take the lock, wait until the other thread sleeps on it, hold it `HOLD` longer,
/// release it: each release wakes a sleeper that the lock kept waiting at least `HOLD`.
///
/// The release is the function's last statement: in a release build it would end in a jump
/// (a tail call) into the unlock's slow path, which would take this frame off the stack the
/// profile captures and charge the caller.
#[inline(never)]
fn contended_site(m: &Mutex<u64>) {
    let mut g = m.lock().unwrap();
    until_parked(m.raw(), 1);
    hold(HOLD);
    *g += 1;
    release_site(g)
}
const CONTENDED_SITE_LAST: u32 = line!();

/// A function that only releases: the unlock is all it does, so in a release build its whole
/// body is the unlock's fast path and a jump into the slow path.
#[inline(never)]
fn release_site(g: MutexGuard<'_, u64>) {
    drop(g)
}

/// The same lock, taken by the other thread: it waits, and releases with nobody waiting.
#[inline(never)]
fn waiting_site(m: &Mutex<u64>, done: &AtomicUsize) {
    *m.lock().unwrap() += 1;
    done.fetch_add(1, SeqCst);
}

/// A lock only this thread takes: never contended.
#[inline(never)]
fn uncontended_site(m: &Mutex<u64>) {
    for _ in 0..10_000 {
        *m.lock().unwrap() += 1;
    }
}

/// `rounds` contended releases at [`contended_site`], and [`uncontended_site`] beside them.
fn scenario(rounds: usize) {
    let m = Mutex::new(0u64);
    let alone = Mutex::new(0u64);
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for r in 0..rounds {
                while done.load(SeqCst) < r {
                    std::thread::yield_now();
                }
                // Come only once the holder has the lock, so that we sleep on it.
                while !m.raw().is_locked() {
                    std::thread::yield_now();
                }
                waiting_site(&m, &done);
            }
        });
        for r in 0..rounds {
            contended_site(&m);
            // The waiter's own release is uncontended: we do not come back until it is done.
            while done.load(SeqCst) <= r {
                std::thread::yield_now();
            }
            uncontended_site(&alone);
        }
    });
    assert_eq!(*m.lock().unwrap(), 2 * rounds as u64);
}

/// The profile as written, decoded.
fn written() -> pb::Profile {
    let mut gz = Vec::new();
    profile::write_pprof(&mut gz).unwrap();
    let mut raw = Vec::new();
    GzDecoder::new(&gz[..]).read_to_end(&mut raw).unwrap();
    pb::Profile::decode(&raw[..]).unwrap()
}

/// A frame as read back: function name, file, line.
type Frame = (String, String, i64);

/// Per sample: (contentions, delay ns, the frames of its stack, leaf first).
fn samples(p: &pb::Profile) -> Vec<(i64, i64, Vec<Frame>)> {
    let s = |i: i64| p.string_table[i as usize].clone();
    p.sample
        .iter()
        .map(|smp| {
            let frames = smp
                .location_id
                .iter()
                .flat_map(|id| {
                    let loc = p.location.iter().find(|l| l.id == *id).expect("location");
                    loc.line.iter().map(|ln| {
                        let f = p
                            .function
                            .iter()
                            .find(|f| f.id == ln.function_id)
                            .expect("function");
                        (s(f.name), s(f.filename), ln.line)
                    })
                })
                .collect();
            (smp.value[0], smp.value[1], frames)
        })
        .collect()
}

/// Whether `name` names the function `site` of this file: `profile::site` from the symbol
/// table, or `site` alone from DWARF line tables (`debug = "line-tables-only"` keeps no paths).
fn names(name: &str, site: &str) -> bool {
    name.strip_suffix(site)
        .is_some_and(|pre| pre.is_empty() || pre.ends_with("::"))
}

/// Total (contentions, delay) of the samples whose stack has the function `site`.
fn charged(p: &pb::Profile, site: &str) -> (i64, i64) {
    samples(p)
        .iter()
        .filter(|(_, _, fr)| fr.iter().any(|(n, _, _)| names(n, site)))
        .fold((0, 0), |(c, d), (c1, d1, _)| (c + c1, d + d1))
}

#[test]
fn the_contended_site_is_charged_the_delay() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Other tests of this binary add to the same profile: compare with what was there.
    let p0 = written();
    profile::set_mutex_profile_fraction(1);
    let rounds = 100;
    scenario(rounds);
    profile::set_mutex_profile_fraction(0);

    let p = written();
    let st = |v: &pb::ValueType| {
        (
            p.string_table[v.r#type as usize].as_str(),
            p.string_table[v.unit as usize].as_str(),
        )
    };
    let types: Vec<_> = p.sample_type.iter().map(st).collect();
    assert_eq!(types, [("contentions", "count"), ("delay", "nanoseconds")]);
    assert_eq!(
        p.period_type.as_ref().map(st),
        Some(("contentions", "count"))
    );
    assert_eq!(p.period, 0, "period = the rate when written");

    let since = |site| {
        let ((c0, d0), (c, d)) = (charged(&p0, site), charged(&p, site));
        (c - c0, d - d0)
    };
    let (count, delay) = since("contended_site");
    let (rcount, rdelay) = since("release_site");
    let (ucount, udelay) = since("uncontended_site");
    let (wcount, wdelay) = since("waiting_site");
    eprintln!(
        "contended_site: {count} events, {delay} ns; waiting_site: {wcount}, {wdelay} ns; \
         uncontended_site: {ucount}, {udelay} ns"
    );
    // Every round's release woke the sleeper once, and was charged at least the hold.
    assert_eq!(
        count, rounds as i64,
        "one event per contended release at rate 1"
    );
    // The function that released is on every charged stack, in every build.
    assert_eq!(
        (rcount, rdelay),
        (count, delay),
        "the releasing function's frame is missing from the charged stacks"
    );
    assert!(
        delay >= rounds as i64 * HOLD.as_nanos() as i64,
        "{delay} ns charged, less than {rounds} holds of {HOLD:?}"
    );
    assert_eq!((ucount, udelay), (0, 0), "the uncontended site was charged");
    assert_eq!(
        (wcount, wdelay),
        (0, 0),
        "the waiter's uncontended release was charged"
    );
    let (_, all) = since("scenario");
    assert!(
        delay as f64 >= 0.95 * all as f64,
        "{delay} of the scenario's {all} ns"
    );
    // The leaf of the stack is the lock's own unlock, not the profiler's machinery.
    for (_, _, frames) in samples(&p) {
        if let Some((leaf, _, _)) = frames.first() {
            assert!(
                !leaf.starts_with("gomutex::profile") && !leaf.starts_with("backtrace::"),
                "the sampling machinery is on top of a stack: {frames:?}"
            );
        }
    }
    check_lines(&p);
    check_with_go_pprof();
}

/// Where the binary has line tables, the contended site's frame names this file and a line
/// inside [`contended_site`].
fn check_lines(p: &pb::Profile) {
    let frames: Vec<_> = samples(p)
        .into_iter()
        .flat_map(|s| s.2)
        .filter(|(n, _, _)| names(n, "contended_site"))
        .collect();
    assert!(!frames.is_empty());
    if frames.iter().all(|(_, file, _)| file.is_empty()) {
        eprintln!("no line tables in this build (debug = false): file:line not checked");
        return;
    }
    let lines = CONTENDED_SITE_FIRST.into()..=CONTENDED_SITE_LAST.into();
    for (_, file, line) in frames {
        assert!(
            file.ends_with("tests/profile.rs"),
            "contended_site in {file}"
        );
        assert!(
            lines.contains(&line),
            "contended_site at line {line}, not in {lines:?}"
        );
    }
}

/// `go tool pprof -top` reads the profile with nothing else and finds in it what we parsed.
fn check_with_go_pprof() {
    let path = std::env::temp_dir().join(format!("gomutex-profile-{}.pb.gz", std::process::id()));
    profile::write_pprof(std::fs::File::create(&path).unwrap()).unwrap();
    let p = written();
    let out = std::process::Command::new("go")
        .args(["tool", "pprof", "-top", "-cum", "-nodecount=100"])
        .arg(&path)
        .env("PPROF_TMPDIR", std::env::temp_dir())
        .output();
    let _ = std::fs::remove_file(&path);
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "`go` not runnable ({e}): go tool pprof check skipped; profile checked by parsing"
            );
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("go tool pprof -top -cum:\n{text}{err}");
    assert!(out.status.success(), "go tool pprof failed: {err}");
    assert!(!err.contains("ailed to"), "pprof complained: {err}");
    assert!(text.contains("Type: delay"), "{text}");
    let line = text
        .lines()
        .find(|l| {
            l.split_whitespace()
                .last()
                .is_some_and(|n| names(n, "contended_site"))
        })
        .unwrap_or_else(|| panic!("contended_site missing from pprof's top: {text}"));
    // `flat flat% sum% cum cum%`: pprof's share of the contended site is ours (this binary's
    // other tests charge their own sites).
    let cum_pct: f64 = line
        .split_whitespace()
        .nth(4)
        .unwrap()
        .trim_end_matches('%')
        .parse()
        .unwrap();
    let all: i64 = samples(&p).iter().map(|s| s.1).sum();
    let ours = 100.0 * charged(&p, "contended_site").1 as f64 / all as f64;
    assert!(
        (cum_pct - ours).abs() < 0.1,
        "pprof: {cum_pct}%, parsed: {ours}%: {line}"
    );
    assert!(!text.contains("uncontended_site"), "{text}");
}

#[test]
fn rate_n_samples_about_one_in_n() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (c0, d0) = charged(&written(), "contended_site");
    assert_eq!(profile::set_mutex_profile_fraction(4), 0);
    let rounds = 400;
    scenario(rounds);
    assert_eq!(profile::set_mutex_profile_fraction(0), 4);
    let (c, d) = charged(&written(), "contended_site");
    let (c, d) = (c - c0, d - d0);
    // Each sample counts 4: about 100 samples (sd ~ 9), scaled back to about 400.
    assert_eq!(c % 4, 0, "samples are scaled by the rate");
    let sampled = c / 4;
    assert!(
        (40..=200).contains(&sampled),
        "{sampled} of {rounds} sampled at rate 4"
    );
    assert!(
        d >= c * HOLD.as_nanos() as i64,
        "{d} ns for {c} contentions"
    );
}

#[test]
fn rate_zero_records_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(profile::set_mutex_profile_fraction(0), 0);
    let before = charged(&written(), "contended_site");
    scenario(20);
    assert_eq!(charged(&written(), "contended_site"), before);
}

/// A condition variable's waiter re-acquires the mutex while the notifier holds it: the
/// notifier's release is charged.
#[inline(never)]
fn notify_while_holding(m: &Mutex<bool>, cv: &Condvar) {
    let mut g = m.lock().unwrap();
    *g = true;
    cv.notify_one();
    until_parked(m.raw(), 1); // the waiter, woken, now sleeps on the mutex
    hold(HOLD);
    drop(g);
}

#[test]
fn a_condvar_waits_reacquisition_is_charged_to_the_releaser() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (c0, _) = charged(&written(), "notify_while_holding");
    profile::set_mutex_profile_fraction(1);
    let rounds = 20;
    for _ in 0..rounds {
        let m = Mutex::new(false);
        let cv = Condvar::new();
        let waiting = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let g = m.lock().unwrap();
                waiting.store(true, SeqCst);
                let g = cv.wait_while(g, |ready| !*ready).unwrap();
                assert!(*g);
            });
            while !waiting.load(SeqCst) {
                std::thread::yield_now();
            }
            // Our lock succeeds once the waiter has released the mutex inside `wait`; whether
            // it is asleep on the condition variable or not yet, the notification leaves it
            // to re-acquire the mutex we hold.
            notify_while_holding(&m, &cv);
        });
    }
    profile::set_mutex_profile_fraction(0);
    let (c, d) = charged(&written(), "notify_while_holding");
    assert_eq!(c - c0, rounds, "one contended release per round");
    assert!(d >= rounds * HOLD.as_nanos() as i64);
}

/// `lock_api::Mutex<gomutex::RawMutex, _>`'s releases are profiled like ours.
#[cfg(feature = "lock_api")]
#[inline(never)]
fn lock_api_site(m: &lock_api::Mutex<RawMutex, u64>) {
    let mut g = m.lock();
    // SAFETY: only reads the lock's state.
    until_parked(unsafe { m.raw() }, 1);
    hold(HOLD);
    *g += 1;
}

#[cfg(feature = "lock_api")]
#[test]
fn lock_api_releases_are_charged() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (c0, _) = charged(&written(), "lock_api_site");
    profile::set_mutex_profile_fraction(1);
    let m = lock_api::Mutex::<RawMutex, u64>::new(0);
    let rounds = 20;
    for _ in 0..rounds {
        std::thread::scope(|s| {
            s.spawn(|| {
                // Come once the site holds the lock, so that we sleep on it.
                while !m.is_locked() {
                    std::thread::yield_now();
                }
                *m.lock() += 1;
            });
            lock_api_site(&m);
        });
    }
    profile::set_mutex_profile_fraction(0);
    let (c, d) = charged(&written(), "lock_api_site");
    assert_eq!(c - c0, rounds, "one contended release per round");
    assert!(d >= rounds * HOLD.as_nanos() as i64);
}

/// A writer that keeps a reader waiting: its release is charged, as Go charges
/// `RWMutex.Unlock` (the reader's wait on `readerSem`).
#[inline(never)]
fn rwlock_writer_site(l: &gomutex::RwLock<u64>) {
    let mut g = l.write().unwrap();
    while l.raw().parked() < 1 {
        std::thread::yield_now();
    }
    hold(HOLD);
    *g += 1;
    rwlock_release_site(g)
}

/// Only the write unlock (see [`release_site`]).
#[inline(never)]
fn rwlock_release_site(g: gomutex::RwLockWriteGuard<'_, u64>) {
    drop(g)
}

#[test]
fn rwlock_writer_releases_are_charged() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let p0 = written();
    let ((c0, _), (r0, _)) = (
        charged(&p0, "rwlock_writer_site"),
        charged(&p0, "rwlock_release_site"),
    );
    profile::set_mutex_profile_fraction(1);
    let l = gomutex::RwLock::new(0u64);
    let rounds = 20;
    for _ in 0..rounds {
        std::thread::scope(|s| {
            s.spawn(|| {
                // Come once the site holds the write lock, so that we sleep on it.
                while !l.raw().is_locked_exclusive() {
                    std::thread::yield_now();
                }
                let _ = *l.read().unwrap();
            });
            rwlock_writer_site(&l);
        });
    }
    profile::set_mutex_profile_fraction(0);
    let p = written();
    let (c, d) = charged(&p, "rwlock_writer_site");
    assert_eq!(c - c0, rounds, "one contended release per round");
    assert!(d >= rounds * HOLD.as_nanos() as i64);
    let (rc, _) = charged(&p, "rwlock_release_site");
    assert_eq!(
        rc - r0,
        rounds,
        "the releasing function is on every charged stack"
    );
}

#[test]
fn the_text_summary_puts_the_releasing_site_first() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    profile::set_mutex_profile_fraction(1);
    scenario(50);
    profile::set_mutex_profile_fraction(0);
    let mut out = Vec::new();
    profile::write_text(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    eprintln!("{text}");
    // The releaser: the function whose unlock woke the sleeper.
    let first = text.lines().nth(2).expect("a call site");
    assert!(first.contains("release_site"), "{text}");
    assert!(!text.contains("uncontended_site"), "{text}");
}
