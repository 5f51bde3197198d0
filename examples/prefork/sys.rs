//! Thin safe wrappers over the Linux calls the prefork server needs (libc, no other crate).

use std::io;
use std::mem;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `-1` → the current `errno` as an error.
pub fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A nonblocking, close-on-exec TCP listening socket with `SO_REUSEADDR` (and `SO_REUSEPORT`
/// if asked), bound to `addr`, listening with nginx's default backlog (511).
pub fn listen(addr: SocketAddr, reuseport: bool) -> io::Result<TcpListener> {
    let fd = tcp_socket(addr)?;
    set_int_opt(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if reuseport {
        set_int_opt(&fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a valid sockaddr of `len` bytes for `domain`.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&storage as *const libc::sockaddr_storage).cast(),
            len,
        )
    })?;
    // SAFETY: plain syscall on a socket we own.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 511) })?;
    Ok(TcpListener::from(fd))
}

/// A nonblocking, close-on-exec TCP socket for `addr`'s family.
fn tcp_socket(addr: SocketAddr) -> io::Result<OwnedFd> {
    let domain = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain syscall; the result is checked.
    let fd = cvt(unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A nonblocking TCP connection to `addr`, under way: `connect(2)`'s `EINPROGRESS` is not an
/// error; the socket becomes writable once connected, and a write or read reports a refusal.
pub fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let fd = tcp_socket(addr)?;
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a valid sockaddr of `len` bytes for the socket's family.
    let r = cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&storage as *const libc::sockaddr_storage).cast(),
            len,
        )
    });
    match r {
        Err(e) if e.raw_os_error() != Some(libc::EINPROGRESS) => Err(e),
        _ => Ok(TcpStream::from(fd)),
    }
}

fn set_int_opt(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `v` is a live c_int and the length says so.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// `accept4(fd, NONBLOCK | CLOEXEC)`: a connected socket, or the error (`WouldBlock` when
/// nothing is pending).
pub fn accept(listener: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: null address pointers are allowed (we do not want the peer address).
    let fd = cvt(unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: a fresh descriptor from accept4, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An epoll instance.
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    /// `epoll_create1(EPOLL_CLOEXEC)`.
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }

    /// `EPOLL_CTL_ADD`.
    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// `EPOLL_CTL_MOD`.
    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// `EPOLL_CTL_DEL`.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// `epoll_wait` with a timeout (`None` = forever). An interruption by a signal is 0 events.
    pub fn wait(
        &self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let ms = match timeout {
            None => -1,
            // Round up so a 0.4 ms cap does not become a busy loop of 0 ms polls.
            Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
        };
        // SAFETY: `events` is a valid writable buffer of the given length.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len().min(i32::MAX as usize) as libc::c_int,
                ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(n as usize)
    }
}

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: two fresh descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)`: a wake-up a worker watches in its epoll set.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a fresh descriptor or -1.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Make the eventfd `fd` readable (add 1 to its counter).
pub fn notify(fd: RawFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: `one` is 8 readable bytes, what an eventfd write takes.
    let _ = unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) };
}

/// Read (and so reset) the eventfd `fd`'s counter.
pub fn drain(fd: RawFd) {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is 8 writable bytes, what an eventfd read takes.
    let _ = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
}

/// The signals the master handles synchronously (blocked, then taken with `sigtimedwait`).
pub fn master_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
    }
    set
}

/// Block (`true`) or unblock the master's signals in this (single-threaded) process.
pub fn block_signals(set: &libc::sigset_t, block: bool) -> io::Result<()> {
    let how = if block {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: `set` is a valid sigset_t; the old mask is not wanted.
    let r = unsafe { libc::sigprocmask(how, set, std::ptr::null_mut()) };
    cvt(r).map(drop)
}

/// Wait up to `timeout` for one of the blocked signals in `set`; `None` on timeout.
pub fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<libc::c_int> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` and `ts` are valid; no siginfo is wanted.
    let r = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (r > 0).then_some(r)
}

/// Set the disposition of `sig` to ignore (`true`) or default.
pub fn ignore_signal(sig: libc::c_int, ignore: bool) {
    let h = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
    // SAFETY: SIG_IGN/SIG_DFL are valid dispositions; no handler code runs.
    unsafe { libc::signal(sig, h) };
}

/// How a child ended, from a `waitpid` status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// `exit(code)`.
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit {c}"),
            Exit::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// `waitpid(-1, WNOHANG)`: a reaped child, if any.
pub fn reap_any() -> Option<(i32, Exit)> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    if pid <= 0 {
        return None;
    }
    let exit = if libc::WIFEXITED(status) {
        Exit::Code(libc::WEXITSTATUS(status))
    } else {
        Exit::Signal(libc::WTERMSIG(status))
    };
    Some((pid, exit))
}

/// `kill(pid, sig)`, errors ignored (the child may be gone already).
pub fn kill(pid: i32, sig: libc::c_int) {
    // SAFETY: plain syscall.
    unsafe { libc::kill(pid, sig) };
}

/// This process's pid.
pub fn getpid() -> i32 {
    // SAFETY: always succeeds.
    unsafe { libc::getpid() }
}

/// What `fork` returned in this process.
pub enum Forked {
    /// In the parent: the child's pid.
    Parent(i32),
    /// In the child.
    Child,
}

/// `fork()`.
///
/// # Safety
///
/// The calling process must be single-threaded (the child gets one thread; any lock another
/// thread held stays held forever in it).
pub unsafe fn fork() -> io::Result<Forked> {
    // SAFETY: the caller guarantees the process is single-threaded.
    let pid = cvt(unsafe { libc::fork() })?;
    Ok(if pid == 0 {
        Forked::Child
    } else {
        Forked::Parent(pid)
    })
}

/// Leave the process now with `code`, without running Rust or C exit handlers (a forked
/// child must not flush buffers it inherited from the master).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no process state we rely on.
    unsafe { libc::_exit(code) }
}
