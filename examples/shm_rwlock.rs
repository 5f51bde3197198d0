//! Forked workers reading a configuration that a supervisor updates, through
//! `gomutex::shm::ShmRwLock`; one worker is killed while it holds a read lock, and the
//! supervisor's next update still goes through (the dead reader's read is taken back).
//!
//! ```text
//! cargo run --example shm_rwlock
//! ```

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use gomutex::shm::ShmRwLock;
    use std::time::{Duration, Instant};

    /// The configuration: a version and a checksum that a reader checks (written in two
    /// steps by the supervisor, so a reader that came in between would see them differ).
    #[derive(Clone, Copy)]
    #[repr(C)]
    struct Settings {
        version: u64,
        limit: u64,
        check: u64,
    }
    // SAFETY: repr(C), fixed-width integers only: every bit pattern is a valid value.
    unsafe impl gomutex::shm::ShmSafe for Settings {}

    let cfg = ShmRwLock::anonymous(Settings {
        version: 1,
        limit: 100,
        check: 101,
    })?;
    let worker = |stuck: bool| {
        // SAFETY: this process is single-threaded here; the child only uses the lock and exits.
        let pid = unsafe { libc::fork() };
        if pid != 0 {
            return pid;
        }
        let mut reads = 0u64;
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            let s = cfg.read().unwrap_or_else(|e| e.into_inner());
            assert_eq!(s.version + s.limit, s.check, "a half-done update");
            reads += 1;
            if stuck {
                std::thread::sleep(Duration::from_secs(3600)); // killed holding the read lock
            }
        }
        println!("worker {}: {reads} reads", std::process::id());
        // SAFETY: leave the child without running the parent's exit work.
        unsafe { libc::_exit(0) }
    };
    let stuck = worker(true);
    while cfg.diagnostics().readers == 0 {
        std::thread::yield_now(); // until it holds its read lock
    }
    let workers: Vec<_> = (0..3).map(|_| worker(false)).collect();
    // SAFETY: our own child.
    unsafe { libc::kill(stuck, libc::SIGKILL) };
    println!("killed worker {stuck}, which holds a read lock");
    for v in 2..=5 {
        let t = Instant::now();
        let mut s = cfg.write().unwrap_or_else(|e| e.into_inner());
        s.version = v;
        s.limit += 10;
        s.check = s.version + s.limit;
        drop(s);
        println!("version {v} written after waiting {:.1?}", t.elapsed());
        std::thread::sleep(Duration::from_millis(40));
    }
    for pid in workers.into_iter().chain([stuck]) {
        // SAFETY: our own children.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }
    println!("readers inside now: {}", cfg.diagnostics().readers);
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("shm_rwlock: Linux only");
}
