//! A prefork TCP echo server on the accept lock (nginx's `accept_mutex`), in one file.
//!
//! The master binds one listening socket, puts the lock in shared memory and forks the
//! workers. Each event-loop iteration a worker asks its `AcceptLock` whether to watch the
//! listening socket (only the holder does: no thundering herd), polls, accepts what is
//! pending, releases the lock, and only then echoes what its connections sent.
//!
//! ```text
//! cargo run --example accept_echo -- [ADDR] [WORKERS] [--seconds N]
//!                                     # default 127.0.0.1:8007, 2 workers, no time limit
//! nc 127.0.0.1 8007                   # in another terminal
//! ```
//!
//! It prints `listening on ADDR` and serves until one of these, then stops the workers:
//!
//! * `SIGINT` (Ctrl-C) or `SIGTERM` (`kill PID`);
//! * `--seconds N` have passed (headless runs: CI, scripts);
//! * its standard input closes (Ctrl-D in a terminal, or the writer of a pipe closing it, as
//!   `tests/accept_echo.rs` does). Only a terminal or a pipe is watched: with standard input
//!   redirected from a file or `/dev/null` (a background job, `nohup`, CI), which would read
//!   as closed at once, it serves until a signal or `--seconds`.
//!
//! ```text
//! cargo run --example accept_echo -- 127.0.0.1:8007 2 --seconds 30 < /dev/null &
//! ```

#[cfg(target_os = "linux")]
mod server {
    use gomutex::accept::{AcceptLock, Config, ShmAcceptMutex};
    use gomutex::shm::ShmMutex;
    use std::io::{self, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    /// Connection slots per worker (nginx's `worker_connections`), for the back-off.
    const MAX_CONNS: usize = 64;

    fn pollfd(fd: i32) -> libc::pollfd {
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }
    }

    fn worker(listener: &TcpListener, lock: &ShmMutex<()>) -> ! {
        // Blocking mode: a worker without connections sleeps on the lock rather than polling.
        let mut accept = AcceptLock::new(ShmAcceptMutex::new(lock), Config::blocking());
        let mut conns: Vec<TcpStream> = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            // 1. Watch the listening socket in this iteration only if we got the lock.
            let d = accept.begin_iteration(conns.is_empty());
            let mut fds: Vec<_> = conns.iter().map(|c| pollfd(c.as_raw_fd())).collect();
            if d.armed {
                fds.push(pollfd(listener.as_raw_fd()));
            }
            let ms = d
                .timeout(None)
                .map_or(-1, |t| t.as_millis().min(60_000) as i32);
            // SAFETY: `fds` is an array of `fds.len()` initialised pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            let readable: Vec<bool> = fds[..conns.len()].iter().map(|p| p.revents != 0).collect();
            // 2. Accept what is pending (the listener is non-blocking: until WouldBlock).
            if d.armed && n > 0 && fds[conns.len()].revents != 0 {
                while conns.len() < MAX_CONNS {
                    let Ok((c, _)) = listener.accept() else { break };
                    conns.push(c);
                    accept.accepted(MAX_CONNS - conns.len(), MAX_CONNS);
                }
            }
            // 3. Release the lock before serving: it covers the poll and the accepts only.
            accept.end_accept_phase();
            // Echo; close a connection at EOF or on an error.
            let mut i = 0;
            conns.retain_mut(|c| {
                let keep = !readable.get(i).copied().unwrap_or(false)
                    || matches!(c.read(&mut buf), Ok(k) if k > 0 && c.write_all(&buf[..k]).is_ok());
                i += 1;
                keep
            });
        }
    }

    /// Why the server stops.
    #[derive(Debug)]
    enum Stop {
        Signal,
        TimeUp,
        StdinClosed,
    }

    /// Whether standard input is a terminal or a pipe: the inputs whose end means "stop". A
    /// file or `/dev/null` reads as ended at once.
    fn stdin_is_watched() -> bool {
        // SAFETY: `fstat` fills the zeroed struct we pass; `isatty` only queries fd 0.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::isatty(0) == 1
                || (libc::fstat(0, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO)
        }
    }

    /// Serve (the workers do) until `SIGINT`/`SIGTERM`, `seconds`, or the end of a watched
    /// standard input. The signals are blocked in this process (the master, after the forks)
    /// and read from a `signalfd`, polled with standard input.
    fn wait_for_stop(seconds: Option<u64>) -> io::Result<Stop> {
        // SAFETY: a zeroed sigset_t is filled by sigemptyset; the calls only read and write
        // the set we pass and this thread's signal mask.
        let sfd = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            libc::signalfd(-1, &set, libc::SFD_CLOEXEC)
        };
        if sfd < 0 {
            return Err(io::Error::last_os_error());
        }
        let watch_stdin = stdin_is_watched();
        let deadline =
            seconds.map(|s| std::time::Instant::now() + std::time::Duration::from_secs(s));
        let mut buf = [0u8; 512];
        loop {
            let mut fds = vec![pollfd(sfd)];
            if watch_stdin {
                fds.push(pollfd(0));
            }
            let ms = deadline.map_or(-1, |d| {
                let left = d.saturating_duration_since(std::time::Instant::now());
                left.as_millis().min(60_000) as i32
            });
            // SAFETY: `fds` is an array of `fds.len()` initialised pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return Err(io::Error::last_os_error());
            }
            if fds[0].revents != 0 {
                return Ok(Stop::Signal);
            }
            if watch_stdin && fds[1].revents != 0 {
                // SAFETY: reading into our own buffer of its length.
                let k = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
                if k <= 0 {
                    return Ok(Stop::StdinClosed);
                }
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Ok(Stop::TimeUp);
            }
        }
    }

    pub fn main() -> Result<(), Box<dyn std::error::Error>> {
        let (mut positional, mut seconds) = (Vec::new(), None);
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            if a == "--seconds" {
                let n = args.next().ok_or("--seconds needs a number")?;
                seconds = Some(n.parse::<u64>()?);
            } else {
                positional.push(a);
            }
        }
        let mut positional = positional.into_iter();
        let addr = positional.next().unwrap_or_else(|| "127.0.0.1:8007".into());
        let workers: usize = positional.next().map_or(Ok(2), |w| w.parse())?;
        let listener = TcpListener::bind(&addr)?;
        listener.set_nonblocking(true)?; // a worker accepts until there is nothing left
        let lock = ShmMutex::anonymous(())?; // before fork(): every worker inherits it
        println!("listening on {}", listener.local_addr()?);
        io::stdout().flush()?;
        let mut pids = Vec::new();
        for _ in 0..workers {
            // SAFETY: the master is single-threaded here; the child runs `worker` for good.
            match unsafe { libc::fork() } {
                -1 => return Err(io::Error::last_os_error().into()),
                0 => worker(&listener, &lock),
                pid => pids.push(pid),
            }
        }
        let why = wait_for_stop(seconds)?;
        println!("stopping: {why:?}");
        for &pid in &pids {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: reaping our own child (a null status pointer is allowed).
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            // Reaped, so the pid cannot be reused yet: free the lock if it died holding it
            // (what a master restarting workers does before forking a replacement).
            lock.force_unlock(pid as u32);
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    server::main()
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("accept_echo: the shared-memory accept lock is Linux only");
}
