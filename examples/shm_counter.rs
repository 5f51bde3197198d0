//! Two processes sharing a counter through `gomutex::shm::ShmMutex`.
//!
//! The parent creates the shared mapping, forks a child, and both add 1 to the counter
//! `ROUNDS` times under the lock; the parent waits for the child and prints the total.
//!
//! ```text
//! cargo run --example shm_counter
//! ```

#[cfg(target_os = "linux")]
use gomutex::shm::{LockError, ShmMutex};

#[cfg(target_os = "linux")]
const ROUNDS: u64 = 100_000;

#[cfg(target_os = "linux")]
fn add(m: &ShmMutex<u64>, who: &str) {
    for _ in 0..ROUNDS {
        let mut g = match m.lock() {
            Ok(g) => g,
            // A previous holder died mid-update: the counter is still a valid u64 here, so
            // just declare it consistent and go on.
            Err(LockError::OwnerDied(g)) | Err(LockError::Poisoned(g)) => {
                g.mark_consistent();
                g
            }
        };
        *g += 1;
    }
    println!("{who} ({}) done", std::process::id());
}

/// `gomutex::shm` is Linux only; elsewhere the example only says so.
#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("shm_counter: this example runs on Linux only");
    std::process::exit(1);
}

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // MAP_SHARED | MAP_ANONYMOUS: the child created by fork() shares it.
    let counter = ShmMutex::anonymous(0u64)?;

    // SAFETY: this program is single-threaded here, so the child may run normal Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    if pid == 0 {
        add(&counter, "child");
        // SAFETY: leave the child without running the parent's exit handlers twice.
        unsafe { libc::_exit(0) };
    }
    add(&counter, "parent");

    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    // If the child had crashed while holding the lock, this makes the lock free at once
    // (waiters would otherwise notice within ~10-20 ms); here it returns false.
    let child_held_it = counter.force_unlock(pid as u32);

    let total = match counter.lock() {
        Ok(g) => *g,
        Err(e) => *e.into_inner(),
    };
    println!(
        "total = {total} (expected {}), child held the lock at exit: {child_held_it}",
        2 * ROUNDS
    );
    assert_eq!(total, 2 * ROUNDS);
    Ok(())
}
