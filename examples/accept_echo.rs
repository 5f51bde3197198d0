//! A prefork TCP echo server on the accept lock (nginx's `accept_mutex`), in one file.
//!
//! The master binds one listening socket, puts the lock in shared memory and forks the
//! workers. Each event-loop iteration a worker asks its `AcceptLock` whether to watch the
//! listening socket (only the holder does: no thundering herd), polls, accepts what is
//! pending, releases the lock, and only then echoes what its connections sent.
//!
//! ```text
//! cargo run --example accept_echo -- [ADDR] [WORKERS]    # default 127.0.0.1:8007, 2 workers
//! nc 127.0.0.1 8007                                      # in another terminal
//! ```
//!
//! It prints `listening on ADDR`, serves until its standard input closes (Ctrl-D), then stops
//! the workers. `tests/accept_echo.rs` runs it.

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

    pub fn main() -> Result<(), Box<dyn std::error::Error>> {
        let mut args = std::env::args().skip(1);
        let addr = args.next().unwrap_or_else(|| "127.0.0.1:8007".into());
        let workers: usize = args.next().map_or(Ok(2), |w| w.parse())?;
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
        let _ = io::stdin().read_to_end(&mut Vec::new()); // serve until stdin closes
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
