//! Helpers shared by the in-process integration tests.
//!
//! Several tests need a woken waiter to *lose* its race against the thread that woke it. Sharing
//! a CPU, the scheduler often lets the woken thread preempt its waker and win; on separate CPUs
//! the waker relocks long before the woken thread runs. These pin threads apart.

#![allow(dead_code)]

/// Does `$t` implement `$tr`? (autoref specialisation: only for concrete types.)
#[allow(unused_macros)] // like the rest of this module: each test binary uses a part
macro_rules! implements {
    ($t:ty : $tr:path) => {{
        struct Probe<T: ?Sized>(std::marker::PhantomData<T>);
        #[allow(dead_code)] // one of the two traits is picked per use
        trait Yes {
            fn check(&self) -> bool {
                true
            }
        }
        impl<T: ?Sized + $tr> Yes for Probe<T> {}
        #[allow(dead_code)]
        trait No {
            fn check(&self) -> bool {
                false
            }
        }
        impl<T: ?Sized> No for &Probe<T> {}
        (&Probe::<$t>(std::marker::PhantomData)).check()
    }};
}

#[cfg(target_os = "linux")]
pub mod anon;
#[cfg(target_os = "linux")]
pub mod procs;
#[cfg(target_os = "linux")]
pub mod shmtest;
#[cfg(target_os = "linux")]
pub mod torture;

#[allow(unused_imports)] // like the rest of this module: each test binary uses a part
pub use gomutex::__cpus::{pin_to, two_cpus};

/// A time limit: when it passes, and how long is left until then.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: std::time::Instant,
    limit: std::time::Duration,
}

impl Deadline {
    /// `limit` from now.
    pub fn after(limit: std::time::Duration) -> Self {
        Self {
            at: std::time::Instant::now() + limit,
            limit,
        }
    }

    /// Whether it has passed.
    pub fn passed(&self) -> bool {
        std::time::Instant::now() >= self.at
    }

    /// The time left (zero once it has passed).
    pub fn left(&self) -> std::time::Duration {
        self.at.saturating_duration_since(std::time::Instant::now())
    }

    /// The limit it was made with (for messages).
    pub fn limit(&self) -> std::time::Duration {
        self.limit
    }
}

/// A name no other test uses at the same time: `gomutex-test-{tag}-{pid}-{n}`, where `n` counts
/// this process's calls.
pub fn uniq(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("gomutex-test-{tag}-{}-{n}", std::process::id())
}

/// [`uniq`] as the name of a POSIX shared-memory object (`shm_open(3)`: one leading slash).
pub fn shm_name(tag: &str) -> String {
    format!("/{}", uniq(tag))
}

/// Join `handles`, failing (instead of hanging) if they are not all done within `limit`.
pub fn join_within<T: Send + 'static>(
    limit: std::time::Duration,
    handles: Vec<std::thread::JoinHandle<T>>,
) -> Vec<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    let n = handles.len();
    for (i, h) in handles.into_iter().enumerate() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send((i, h.join()));
        });
    }
    let deadline = Deadline::after(limit);
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let (i, r) = rx
            .recv_timeout(deadline.left())
            .unwrap_or_else(|_| panic!("threads still running after {limit:?}: lost wake-up?"));
        out[i] = Some(r.unwrap_or_else(|e| std::panic::resume_unwind(e)));
    }
    out.into_iter().map(Option::unwrap).collect()
}

/// Poll `cond` until it holds, panicking with `what()` after `limit`. Between looks it sleeps
/// `pause`, or only yields if `pause` is zero: for phases that must be seen within
/// milliseconds even on a loaded machine, where a sleeping poller may look too late.
pub fn poll_until(
    limit: std::time::Duration,
    pause: std::time::Duration,
    what: impl Fn() -> String,
    mut cond: impl FnMut() -> bool,
) {
    let deadline = Deadline::after(limit);
    while !cond() {
        assert!(
            !deadline.passed(),
            "timed out after {limit:?} waiting until {}",
            what()
        );
        if pause.is_zero() {
            std::thread::yield_now();
        } else {
            std::thread::sleep(pause);
        }
    }
}
