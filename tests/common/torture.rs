//! The supervisor of the kill tortures (`shm_torture`, `shm_rwlock_torture`): how long they
//! run, the kill loop with its stall watchdog, and the wait for the workers at the end. What a
//! worker does, what a kill is checked against and the final verdict are each torture's own.

use super::procs::{reap, Rng};
use std::time::{Duration, Instant};

/// No progress for this long while killing is a stall.
const STALL: Duration = Duration::from_secs(5);
/// The workers must leave within this of being told to stop.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// The torture's duration: `GOMUTEX_TORTURE_SECS`, default 20 s.
pub fn duration() -> Duration {
    let secs = std::env::var("GOMUTEX_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(secs)
}

/// SIGKILL every worker.
pub fn kill_all(pids: &[libc::pid_t]) {
    for &p in pids {
        // SAFETY: our children.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
}

/// Until `end`: every 0.5–10.5 ms SIGKILL a random worker, reap it (it must die of the
/// signal), let `after_kill(w, pid, before, rng)` look at what it left (`pid` is the dead
/// worker's, `before` what `before_kill(w, rng)` returned just before the signal), and respawn
/// it with `spawn(w)`.
/// After every kill `progress()` is read: if some of its counters have not moved for
/// [`STALL`], every worker is killed and `stall` is called. Returns the number of kills.
#[allow(clippy::too_many_arguments)]
pub fn kill_loop<K, const N: usize>(
    pids: &mut [libc::pid_t],
    rng: &mut Rng,
    end: Instant,
    mut spawn: impl FnMut(usize) -> libc::pid_t,
    mut before_kill: impl FnMut(usize, &mut Rng) -> K,
    mut after_kill: impl FnMut(usize, libc::pid_t, K, &mut Rng),
    mut progress: impl FnMut() -> [u64; N],
    stall: impl FnOnce(&str),
) -> u64 {
    let mut kills = 0;
    let mut last = (Instant::now(), progress());
    while Instant::now() < end {
        std::thread::sleep(Duration::from_micros(500 + rng.below(10_000)));
        let w = rng.below(pids.len() as u64) as usize;
        let before = before_kill(w, rng);
        // SAFETY: our child.
        unsafe { libc::kill(pids[w], libc::SIGKILL) };
        let st = reap(pids[w]);
        assert!(
            libc::WIFSIGNALED(st),
            "worker {w} exited on its own: status {st:#x}"
        );
        kills += 1;
        after_kill(w, pids[w], before, rng);
        pids[w] = spawn(w);
        let now = progress();
        if now.iter().zip(&last.1).all(|(a, b)| a != b) {
            last = (Instant::now(), now);
        } else if last.0.elapsed() > STALL {
            kill_all(pids);
            stall(&format!("no progress ({now:?}) for {STALL:?}: a stall"));
            break;
        }
    }
    kills
}

/// Wait for every worker to exit on its own with status 0 (they were told to stop); kill them
/// all and call `failed` with the reason if one exits otherwise or they take over
/// [`STOP_LIMIT`].
pub fn wait_for_exit(pids: &[libc::pid_t], failed: impl Fn(&str)) {
    let stop_at = Instant::now();
    for &p in pids {
        loop {
            let mut st = 0;
            // SAFETY: our child.
            let r = unsafe { libc::waitpid(p, &mut st, libc::WNOHANG) };
            if r == p {
                if !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0) {
                    kill_all(pids);
                    failed(&format!("worker exited with status {st:#x}"));
                }
                break;
            }
            if stop_at.elapsed() > STOP_LIMIT {
                kill_all(pids);
                failed(&format!(
                    "workers did not finish within {STOP_LIMIT:?}: a stall"
                ));
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
