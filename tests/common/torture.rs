//! The kit of the kill tortures (`shm_torture`, `shm_rwlock_torture`, `shm_chaos`, `shm_dict`'s
//! `kill_torture`, `shm_condvar`'s `kills_under_load`) and of the other randomised tests: their
//! random numbers, their settings from the environment, the kill loop with its stall watchdog,
//! and the wait for the workers at the end. What a worker does, what a death is checked
//! against and the final verdict are each torture's own.

use super::procs::{reap, try_reap};
use super::Deadline;
use std::time::{Duration, Instant};

/// The workers must leave within this of being told to stop.
pub const STOP_LIMIT: Duration = Duration::from_secs(10);

/// xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift generators,
/// scrambled", 2016), seeded through splitmix64 so that any seed, 0 included, is fine: cheap
/// randomness for a process or a thread, the same sequence for the same seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The number in the environment variable `name` (decimal, or hexadecimal after `0x`), or
/// `None` if it is unset. Anything else panics: a mistyped setting is not a silent default.
pub fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let t = v.trim();
    let n = match t.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    Some(n.unwrap_or_else(|_| panic!("{name}={v}: not a number")))
}

/// `name`'s number of seconds (see [`env_u64`]), or `default`.
pub fn secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(env_u64(name).unwrap_or(default))
}

/// The duration of `shm_torture` and `shm_rwlock_torture`: `GOMUTEX_TORTURE_SECS`, default
/// 20 s.
pub fn duration() -> Duration {
    secs("GOMUTEX_TORTURE_SECS", 20)
}

/// Whether a raw `waitpid` status is a clean exit (status 0).
pub fn exited_0(st: i32) -> bool {
    libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0
}

/// Whether a raw `waitpid` status is a death by SIGKILL (the loop's, or a crash point's).
pub fn killed(st: i32) -> bool {
    libc::WIFSIGNALED(st) && libc::WTERMSIG(st) == libc::SIGKILL
}

/// SIGKILL every worker and reap it (they must all still be running, unreaped).
pub fn kill_all(pids: &[libc::pid_t]) {
    for &p in pids {
        // SAFETY: our children, not reaped yet.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    for &p in pids {
        reap(p);
    }
}

/// How a [`kill_loop`] kills.
#[derive(Clone, Copy, Debug)]
pub struct Kills {
    /// Before each look at a worker, a pause of `pause_us.0` plus up to `pause_us.1` µs.
    pub pause_us: (u64, u64),
    /// The worker looked at is killed one time in `one_in`.
    pub one_in: u64,
    /// Whether workers may die on their own (of SIGKILL, at an armed crash point): such a
    /// death is then checked and respawned like a kill; otherwise it fails the torture.
    pub own_deaths: bool,
    /// No progress for this long while killing is a stall.
    pub stall: Duration,
}

impl Kills {
    /// Every 0.5–10.5 ms a random worker killed, no deaths of their own, a stall after 5 s.
    pub const EVERY_FEW_MS: Kills = Kills {
        pause_us: (500, 10_000),
        one_in: 1,
        own_deaths: false,
        stall: Duration::from_secs(5),
    };
}

/// How a worker died: killed by the loop (with what `before_kill` returned just before the
/// signal), or on its own.
#[derive(Debug)]
pub enum Death<K> {
    /// SIGKILLed by the loop.
    Killed(K),
    /// Dead of SIGKILL before the loop killed it (an armed crash point).
    Own,
}

/// What a [`kill_loop`] did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Deaths {
    /// Workers the loop killed.
    pub kills: u64,
    /// Workers that died on their own.
    pub own: u64,
}

/// Until `end`: after each pause (see [`Kills`]) reap the workers that died on their own,
/// then pick a random worker and, one time in `kills.one_in`, SIGKILL and reap it. Every
/// death must be of SIGKILL; `after_death(w, pid, how, rng)` looks at what the dead worker
/// `pid` left, and `spawn(w, rng)` replaces it. After every look `progress()` is read: if some
/// of its counters have not moved for `kills.stall`, that is a stall.
///
/// On a failure (a stall, a death of anything but SIGKILL, an `Err` from `after_death`),
/// `failed(why, pids)` is called while every worker is still running, to say what they are
/// doing; then they are all killed and reaped, and `Err(why)` is returned.
#[allow(clippy::too_many_arguments)]
pub fn kill_loop<K, const N: usize>(
    pids: &mut [libc::pid_t],
    rng: &mut Rng,
    end: Instant,
    kills: Kills,
    mut spawn: impl FnMut(usize, &mut Rng) -> libc::pid_t,
    mut before_kill: impl FnMut(usize, &mut Rng) -> K,
    mut after_death: impl FnMut(usize, libc::pid_t, Death<K>, &mut Rng) -> Result<(), String>,
    mut progress: impl FnMut() -> [u64; N],
    failed: impl FnOnce(&str, &[libc::pid_t]),
) -> Result<Deaths, String> {
    let mut deaths = Deaths::default();
    let mut last = (Instant::now(), progress());
    let r = (|| {
        while Instant::now() < end {
            let (min, spread) = kills.pause_us;
            std::thread::sleep(Duration::from_micros(min + rng.below(spread)));
            for (w, p) in pids.iter_mut().enumerate() {
                let Some(st) = try_reap(*p) else {
                    continue;
                };
                // A dead worker is replaced before any failure returns: then every one runs.
                let pid = *p;
                if !(kills.own_deaths && killed(st)) {
                    *p = spawn(w, rng);
                    return Err(format!("worker {w} died on its own: status {st:#x}"));
                }
                deaths.own += 1;
                let looked = after_death(w, pid, Death::Own, rng);
                *p = spawn(w, rng);
                looked?;
            }
            let w = rng.below(pids.len() as u64) as usize;
            if rng.below(kills.one_in) == 0 {
                let before = before_kill(w, rng);
                let pid = pids[w];
                // SAFETY: our child, not reaped yet.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                let st = reap(pid);
                if !killed(st) {
                    pids[w] = spawn(w, rng);
                    return Err(format!(
                        "worker {w} did not die of the SIGKILL: status {st:#x}"
                    ));
                }
                deaths.kills += 1;
                let looked = after_death(w, pid, Death::Killed(before), rng);
                pids[w] = spawn(w, rng);
                looked?;
            }
            let now = progress();
            if now.iter().zip(&last.1).all(|(a, b)| a != b) {
                last = (Instant::now(), now);
            } else if last.0.elapsed() > kills.stall {
                return Err(format!(
                    "no progress ({now:?}) for {:?}: a stall",
                    kills.stall
                ));
            }
        }
        Ok(deaths)
    })();
    if let Err(why) = &r {
        failed(why, pids);
        kill_all(pids);
    }
    r
}

/// Wait at most `limit` for every worker to exit on its own (they were told to stop); each
/// status must pass `ok(w, status)`. Their raw `waitpid` statuses; on a failure (a status
/// `ok` refuses, or the limit) `failed(why, running)` is called with the workers still
/// running, which are then killed and reaped, and `Err(why)` is returned.
pub fn wait_for_exit(
    pids: &[libc::pid_t],
    limit: Duration,
    ok: impl Fn(usize, i32) -> bool,
    failed: impl FnOnce(&str, &[libc::pid_t]),
) -> Result<Vec<i32>, String> {
    let deadline = Deadline::after(limit);
    let mut statuses = Vec::with_capacity(pids.len());
    for (w, &p) in pids.iter().enumerate() {
        let why = loop {
            if let Some(st) = try_reap(p) {
                if ok(w, st) {
                    statuses.push(st);
                    break None;
                }
                break Some((format!("worker exited with status {st:#x}"), w + 1));
            }
            if deadline.passed() {
                break Some((
                    format!(
                        "workers did not finish within {:?}: a stall",
                        deadline.limit()
                    ),
                    w,
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        if let Some((why, running)) = why {
            failed(&why, &pids[running..]);
            kill_all(&pids[running..]);
            return Err(why);
        }
    }
    Ok(statuses)
}
