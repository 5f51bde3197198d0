//! Unrelated processes sharing a counter through a *named* `gomutex::shm::ShmMutex`, with no
//! `unsafe` and no `fork`: the parent creates the object, starts copies of this program with
//! `std::process::Command`, and each child opens the object by name.
//!
//! ```text
//! cargo run --example shm_unrelated
//! ```

#[cfg(target_os = "linux")]
use gomutex::shm::{self, Config, ShmMutex};

#[cfg(target_os = "linux")]
const CHILDREN: u64 = 4;
#[cfg(target_os = "linux")]
const ROUNDS: u64 = 50_000;

/// Removes the name when the parent is done, also on an early return.
#[cfg(target_os = "linux")]
struct Unlink<'a>(&'a str);

#[cfg(target_os = "linux")]
impl Drop for Unlink<'_> {
    fn drop(&mut self) {
        let _ = shm::unlink(self.0);
    }
}

/// `gomutex::shm` is Linux only; elsewhere the example only says so.
#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("shm_unrelated: this example runs on Linux only");
    std::process::exit(1);
}

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(name) = std::env::args().nth(1) {
        // A child: open the region the parent created (errors name the object).
        let counter = ShmMutex::<u64>::open(&name)?;
        for _ in 0..ROUNDS {
            // A counter needs no repair if a previous holder died: just carry on.
            *counter.lock_or_repair(|_| {}) += 1;
        }
        return Ok(());
    }

    let name = format!("/gomutex-example-{}", std::process::id());
    let counter = ShmMutex::create(&name, 0u64, Config::default())?;
    let _unlink = Unlink(&name);

    let exe = std::env::current_exe()?;
    let children = (0..CHILDREN)
        .map(|_| std::process::Command::new(&exe).arg(&name).spawn())
        .collect::<Result<Vec<_>, _>>()?;
    for mut child in children {
        let pid = child.id(); // u32, as `force_unlock` takes it
        let status = child.wait()?;
        // A supervisor's habit: free at once what a crashed child held (false here).
        let held = counter.force_unlock(pid);
        assert!(status.success() && !held, "child {pid}: {status}");
    }

    let total = *counter.lock_or_repair(|_| {});
    println!("total = {total} (expected {})", CHILDREN * ROUNDS);
    assert_eq!(total, CHILDREN * ROUNDS);
    Ok(())
}
