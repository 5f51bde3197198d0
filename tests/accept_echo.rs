//! The accept-lock echo example (`examples/accept_echo.rs`) as a black box, so it cannot rot:
//! started on an ephemeral port with 3 workers, 24 clients at once (more than one worker's
//! accept phase) each get their lines back exactly, then closing its stdin stops it. Headless
//! (standard input from `/dev/null`, as a background job or CI has it), it serves until
//! `SIGTERM` or `--seconds N`.
//!
//! Needs the example built in the same profile (`cargo test` builds examples).

#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/accept_echo-<hash> -> target/<profile>/examples/accept_echo
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = profile_dir.join("examples").join(name);
    assert!(
        bin.exists(),
        "{} not found: build it with `cargo test` (which builds the examples) or \
         `cargo build --example {name}` in the same profile",
        bin.display()
    );
    bin
}

#[test]
fn echo_server_on_the_accept_lock_serves_every_client() {
    let (mut child, mut out, addr) = start(&["3"], Stdio::piped());
    let clients: Vec<_> = (0..24)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut c = TcpStream::connect(&addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                for round in 0..3 {
                    let msg = format!("client {i} line {round}\n");
                    c.write_all(msg.as_bytes()).unwrap();
                    let mut back = vec![0u8; msg.len()];
                    c.read_exact(&mut back).unwrap();
                    assert_eq!(back, msg.as_bytes());
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("a client got a wrong or no echo");
    }
    drop(child.stdin.take()); // the example's signal to stop
    let (status, last) = wait_exit(&mut child, &mut out);
    assert!(status.success(), "{status}");
    assert_eq!(last.trim(), "stopping: StdinClosed");
}

/// Start the example on an ephemeral port with `args` after the address, and `stdin`;
/// returns the child, its output, and the address it listens on.
fn start(
    args: &[&str],
    stdin: Stdio,
) -> (
    std::process::Child,
    BufReader<std::process::ChildStdout>,
    String,
) {
    let mut child = Command::new(example_binary("accept_echo"))
        .arg("127.0.0.1:0")
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the example");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (child, out, addr)
}

/// One client's line comes back.
fn echo_once(addr: &str) {
    let mut c = TcpStream::connect(addr).expect("the server is gone");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"headless\n").unwrap();
    let mut back = [0u8; 9];
    c.read_exact(&mut back).expect("no echo");
    assert_eq!(&back, b"headless\n");
}

/// Wait (bounded) for the child to exit; its status and the line it printed on the way out.
fn wait_exit(
    child: &mut std::process::Child,
    out: &mut BufReader<std::process::ChildStdout>,
) -> (std::process::ExitStatus, String) {
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("the example did not stop");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut last = String::new();
    out.read_to_string(&mut last).unwrap();
    (status, last)
}

/// Standard input from `/dev/null` (which reads as closed at once) does not stop it: it
/// serves, still runs after a second, and stops on `SIGTERM`.
#[test]
fn headless_serves_until_sigterm() {
    let (mut child, mut out, addr) = start(&["2"], Stdio::null());
    echo_once(&addr);
    std::thread::sleep(Duration::from_secs(1));
    assert!(child.try_wait().unwrap().is_none(), "it stopped by itself");
    echo_once(&addr);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let (status, last) = wait_exit(&mut child, &mut out);
    assert!(status.success(), "{status}");
    assert_eq!(last.trim(), "stopping: Signal");
}

/// `--seconds N`: serves, then stops by itself after N seconds.
#[test]
fn headless_stops_after_its_seconds() {
    let t = Instant::now();
    let (mut child, mut out, addr) = start(&["2", "--seconds", "1"], Stdio::null());
    echo_once(&addr);
    let (status, last) = wait_exit(&mut child, &mut out);
    assert!(status.success(), "{status}");
    assert_eq!(last.trim(), "stopping: TimeUp");
    assert!(t.elapsed() >= Duration::from_secs(1), "{:?}", t.elapsed());
}
