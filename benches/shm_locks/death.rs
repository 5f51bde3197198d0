//! Reader death (`rwkill`): a reader killed holding the read lock, a writer waiting.

use crate::common::{median, ShmBox};
use crate::locks::{GoShmRw, ProcLock, PthreadRw};
use crate::run::{mono_ns, Children, Region};
use crate::Config;
use std::ffi::c_int;
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A readers-writer lock for the reader-death case: the write lock, given up after `cap`.
pub trait DeathLock: ProcLock {
    /// Take the write lock, waiting at most `cap`; whether it was taken (and released again).
    fn write_within(&self, cap: Duration) -> bool;
}

impl DeathLock for GoShmRw {
    fn write_within(&self, cap: Duration) -> bool {
        // A reader's death tells nobody anything (only a writer's does): any guard is a win.
        !matches!(
            self.0.try_write_for(cap),
            Err(gomutex::shm::TryLockError::WouldBlock)
        )
    }
}

extern "C" {
    /// glibc's (POSIX's) timed write lock; the `libc` crate does not declare it for Linux.
    fn pthread_rwlock_timedwrlock(
        lock: *mut libc::pthread_rwlock_t,
        abstime: *const libc::timespec,
    ) -> c_int;
}

impl DeathLock for PthreadRw {
    fn write_within(&self, cap: Duration) -> bool {
        let mut now = MaybeUninit::<libc::timespec>::uninit();
        // SAFETY: valid out-pointer; CLOCK_REALTIME (the clock of `abstime`) always exists.
        let r = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, now.as_mut_ptr()) };
        assert_eq!(r, 0, "clock_gettime");
        // SAFETY: clock_gettime succeeded and filled `now`.
        let now = unsafe { now.assume_init() };
        let ns = now.tv_nsec as u64 + cap.subsec_nanos() as u64;
        let at = libc::timespec {
            tv_sec: now.tv_sec
                + cap.as_secs() as libc::time_t
                + (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as _,
        };
        // SAFETY: initialised lock, mapped while `self` lives; `at` is a valid timespec.
        match unsafe { pthread_rwlock_timedwrlock(self.l.as_ptr(), &at) } {
            0 => {
                self.unlock();
                true
            }
            libc::ETIMEDOUT => false,
            r => panic!(
                "pthread_rwlock_timedwrlock: {}",
                io::Error::from_raw_os_error(r)
            ),
        }
    }
}

/// One lock's reader-death trials: the writer's delay after the kill, per trial (`None`: it had
/// not got the lock when the cap ran out).
pub struct Death {
    pub lock: &'static str,
    pub cap: Duration,
    pub delays: Vec<Option<Duration>>,
}

/// One trial: a reader takes the read lock and stops; a writer asks for the write lock and
/// sleeps in it; the parent kills the reader (SIGKILL) and reaps it, as a supervisor would, but
/// repairs nothing (no `force_unlock`): the lock's own recovery must let the writer in. The
/// writer's delay runs from just before `kill` to just after its write lock returned.
///
/// The kill comes `settle` after the writer asked: gomutex's writer looks for dead readers every
/// 10 ms of its wait, so trials spread `settle` over a tick (a fixed one would measure one phase
/// of the writer's ticks, every time).
pub fn death_trial<L: DeathLock>(
    lock: &mut L,
    cap: Duration,
    settle: Duration,
) -> Option<Duration> {
    // SAFETY: Region is atomics, an UnsafeCell and padding: all-zero is valid.
    let region = unsafe { ShmBox::<Region>::zeroed() }.expect("mmap");
    let stage = &region.ready.0;
    let wait_stage = |n: u32, kids: &mut Children| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while stage.load(Ordering::SeqCst) < n {
            kids.reap("reader death");
            assert!(
                Instant::now() < deadline,
                "reader death: child never got ready"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    io::stdout().flush().ok();
    io::stderr().flush().ok();
    let mut kids = Children { pids: Vec::new() };
    // SAFETY: single-threaded process (checked in main); the child leaves only by `_exit` or
    // by being killed.
    let reader = match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", io::Error::last_os_error()),
        0 => {
            _ = lock.attach();
            lock.with_read(|| {
                stage.store(1, Ordering::SeqCst);
                loop {
                    // SAFETY: plain syscall; waits for the SIGKILL.
                    unsafe { libc::pause() };
                }
            });
            // SAFETY: _exit is always safe to call.
            unsafe { libc::_exit(1) }
        }
        pid => pid,
    };
    kids.pids.push(reader);
    wait_stage(1, &mut kids);
    // SAFETY: as above.
    match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", io::Error::last_os_error()),
        0 => {
            let ok = lock.attach().is_ok() && {
                stage.store(2, Ordering::SeqCst);
                lock.write_within(cap)
            };
            if ok {
                region.slots[0].0.end_ns.store(mono_ns(), Ordering::SeqCst);
            }
            // SAFETY: _exit is always safe to call.
            unsafe { libc::_exit(0) }
        }
        pid => kids.pids.push(pid),
    }
    wait_stage(2, &mut kids);
    // Let the writer get to sleep in its write lock.
    std::thread::sleep(settle);
    let killed_ns = mono_ns();
    // SAFETY: our own un-reaped child.
    unsafe { libc::kill(reader, libc::SIGKILL) };
    let mut status = 0;
    // SAFETY: our own child, valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(reader, &mut status, 0) }, reader);
    kids.pids.retain(|&p| p != reader);
    let deadline = Instant::now() + cap + Duration::from_secs(30);
    while !kids.pids.is_empty() {
        kids.reap("reader death");
        assert!(
            Instant::now() < deadline,
            "reader death: the writer hung past its cap"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let got = region.slots[0].0.end_ns.load(Ordering::SeqCst);
    (got != 0).then(|| Duration::from_nanos(got.saturating_sub(killed_ns)))
}

/// A reader-death contender: name, cap, and a function making a fresh lock and running a trial.
pub struct DeathCase {
    pub name: &'static str,
    pub cap: Duration,
    /// `(cap, settle)` → the writer's delay (see [`death_trial`]).
    pub trial: Box<dyn Fn(Duration, Duration) -> Option<Duration>>,
}

pub fn death_case<L: DeathLock>(
    name: &'static str,
    cap: Duration,
    make: impl Fn() -> io::Result<L> + 'static,
) -> DeathCase {
    DeathCase {
        name,
        cap,
        trial: Box::new(move |cap, settle| death_trial(&mut make().expect(name), cap, settle)),
    }
}

/// The reader-death case, `cfg.rounds` trials per lock, the locks alternating. gomutex's writer
/// waits up to 10 s (it must get in: a miss fails the run), pthread's (which no one can recover:
/// POSIX has no robust rwlock) up to 1 s (smoke: 20 ms).
pub fn bench_reader_death(cfg: &Config) -> Vec<Death> {
    let pcap = Duration::from_millis(if cfg.smoke { 20 } else { 1000 });
    let cases = [
        death_case("gomutex-shm-rw", Duration::from_secs(10), GoShmRw::new),
        death_case("pthread-rw", pcap, || PthreadRw::new(false)),
        death_case("pthread-rw-wp", pcap, || PthreadRw::new(true)),
    ];
    let cases: Vec<&DeathCase> = cases
        .iter()
        .filter(|c| cfg.selected(&format!("{}/rwkill", c.name)))
        .collect();
    let mut out: Vec<Death> = cases
        .iter()
        .map(|c| Death {
            lock: c.name,
            cap: c.cap,
            delays: Vec::new(),
        })
        .collect();
    for r in 0..cfg.rounds {
        for k in 0..cases.len() {
            let i = (r + k) % cases.len();
            // 20 ms and a fraction of 10 ms that spreads the rounds evenly over a tick.
            let settle = Duration::from_millis(20)
                + Duration::from_millis(10) * r as u32 / cfg.rounds as u32;
            let d = (cases[i].trial)(cases[i].cap, settle);
            out[i].delays.push(d);
        }
    }
    for d in &out {
        eprintln!(
            "{}/rwkill: writer delays after the reader's death: {} ms",
            d.lock,
            d.delays
                .iter()
                .map(|x| x.map_or_else(
                    || format!(">{}", d.cap.as_millis()),
                    |x| format!("{:.2}", x.as_secs_f64() * 1e3)
                ))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    if let Some(g) = out.iter().find(|d| d.lock == "gomutex-shm-rw") {
        assert!(
            g.delays.iter().all(Option::is_some),
            "gomutex-shm-rw: a writer never got the lock after a reader died"
        );
    }
    out
}

pub fn print_deaths(deaths: &[Death]) {
    if deaths.is_empty() {
        return;
    }
    println!();
    println!(
        "reader death: a reader holds the read lock, a writer waits for the write lock, the \
         reader is killed (SIGKILL, reaped, nothing repaired): the writer's delay from the kill"
    );
    println!();
    println!("| lock | trials | writer delay median ms | max ms |");
    println!("|---|---:|---:|---:|");
    for d in deaths {
        let got: Vec<f64> = d
            .delays
            .iter()
            .flatten()
            .map(|x| x.as_secs_f64() * 1e3)
            .collect();
        let (med, max) = if got.len() == d.delays.len() {
            (
                format!("{:.2}", median(&got)),
                format!("{:.2}", got.iter().copied().fold(0.0, f64::max)),
            )
        } else {
            let never = format!(
                "never within {} ms ({} of {})",
                d.cap.as_millis(),
                d.delays.len() - got.len(),
                d.delays.len()
            );
            (never, "–".to_owned())
        };
        println!("| {} | {} | {med} | {max} |", d.lock, d.delays.len());
    }
}
