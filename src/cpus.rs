//! Pinning threads to CPUs (Linux; elsewhere pinning is a no-op and there are no two CPUs to
//! name), for tests, examples and benchmarks (`gomutex::__cpus`, hidden: not part of the API).
//! The locks never pin anything.

/// Pin the calling thread to `cpu` (if given). Linux only; elsewhere a no-op (and
/// [`two_cpus`] says `None`, so tests that need two pinned CPUs skip that part).
pub fn pin_to(cpu: Option<usize>) {
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
    #[cfg(target_os = "linux")]
    let Some(cpu) = cpu
    else {
        return;
    };
    #[cfg(target_os = "linux")]
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET and sched_setaffinity only read and
    // write the set we pass.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let r = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(
            r,
            0,
            "sched_setaffinity({cpu}): {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Two CPUs this process may run on, if it has two (Linux only: `None` elsewhere).
pub fn two_cpus() -> Option<(usize, usize)> {
    let cpus = allowed_cpus();
    Some((*cpus.first()?, *cpus.get(1)?))
}

/// The CPUs the calling thread may run on (Linux only: empty elsewhere).
#[cfg(not(target_os = "linux"))]
pub fn allowed_cpus() -> Vec<usize> {
    Vec::new()
}

/// The CPUs the calling thread may run on.
#[cfg(target_os = "linux")]
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: as in `pin_to`; sched_getaffinity fills the set we pass.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}
