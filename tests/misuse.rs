//! Port of Go's `TestMutexMisuse`: unlocking an unlocked mutex is a fatal error, not a panic.
//!
//! Each case runs in a child process: this test binary re-executes itself with
//! `GOMUTEX_MISUSE=<case>`, running only [`misuse_child`], which runs the case inside
//! `catch_unwind` (like Go's `recover()` wrapper) and prints "test completed" if it returns. The
//! parent requires the misuse cases to die by `SIGABRT` with "unlocked" on stderr and without
//! reaching "test completed", and the control case to exit 0.
#![cfg(unix)] // child processes killed by `SIGABRT`

use gomutex::{RawMutex, RawRwLock};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

const CASE_ENV: &str = "GOMUTEX_MISUSE";

fn run_case(name: &str) {
    let m = RawMutex::new();
    match name {
        // Go's "Mutex.Unlock": unlock a zero mutex.
        // SAFETY: deliberately not held: this is the misuse under test.
        "unlock" => unsafe { m.unlock() },
        // Go's "Mutex.Unlock2": lock, unlock, unlock.
        "unlock2" => {
            m.lock();
            // SAFETY: locked just above.
            unsafe { m.unlock() };
            eprintln!("first unlock done");
            // SAFETY: deliberately not held: this is the misuse under test.
            unsafe { m.unlock() };
        }
        // Not in Go: a fair unlock of an unlocked lock.
        "unlock_fair" => {
            m.lock();
            // SAFETY: locked just above.
            unsafe { m.unlock() };
            // SAFETY: deliberately not held: this is the misuse under test.
            unsafe { m.unlock_fair() };
        }
        // Go's "RWMutex.RUnlock": a read unlock of an unlocked lock, here biased (its readers
        // use the slot table), which must abort as the unbiased lock does.
        "runlock_biased" => {
            let l = RawRwLock::new();
            assert!(l.bias());
            // SAFETY: deliberately not held: this is the misuse under test.
            unsafe { l.unlock_read() };
        }
        // The same with a reader in the table: the misuse finds no read lock in the word.
        "runlock_biased_table_reader" => {
            let l = RawRwLock::new();
            assert!(l.bias());
            let t = l.read_token();
            assert!(t.in_table());
            eprintln!("a reader in the table");
            // SAFETY: deliberately not held through the word: this is the misuse under test.
            unsafe { l.unlock_read() };
            // SAFETY: read-locked above.
            unsafe { l.unlock_read_token(t) };
        }
        // No misuse: the harness itself must let a well-behaved child exit 0.
        "control" => {
            m.lock();
            assert!(!m.try_lock());
            // SAFETY: locked just above.
            unsafe { m.unlock() };
            assert!(m.try_lock());
            // SAFETY: try_lock succeeded.
            unsafe { m.unlock() };
        }
        other => panic!("unknown misuse case {other:?}"),
    }
}

/// The child's entry point; a no-op unless started by [`child`].
#[test]
fn misuse_child() {
    let Ok(name) = std::env::var(CASE_ENV) else {
        return;
    };
    eprintln!("running case {name}");
    let r = std::panic::catch_unwind(|| run_case(&name));
    // Reached only if the case returned or panicked: both are failures for a misuse case.
    eprintln!("test completed (panicked: {})", r.is_err());
}

fn child(name: &str) -> Output {
    let exe = std::env::current_exe().expect("current_exe");
    Command::new(exe)
        .args(["--exact", "misuse_child", "--nocapture", "--test-threads=1"])
        .env(CASE_ENV, name)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("spawn the test binary")
}

/// Run a misuse case; it must abort. Returns its stderr.
fn assert_fatal(name: &str) -> String {
    let out = child(name);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ctx = format!("case {name}: {:?}\nstderr:\n{stderr}", out.status);
    assert!(
        stderr.contains(&format!("running case {name}")),
        "the child never ran the case: {ctx}"
    );
    assert!(!out.status.success(), "misuse did not fail: {ctx}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "misuse must abort: {ctx}"
    );
    assert!(
        stderr.contains("unlocked"),
        "no 'unlocked' in the message: {ctx}"
    );
    assert!(
        !stderr.contains("test completed"),
        "misuse was recoverable: {ctx}"
    );
    assert!(
        !stderr.contains("panicked"),
        "misuse panicked instead of aborting: {ctx}"
    );
    stderr.into_owned()
}

#[test]
fn unlock_of_unlocked_mutex_is_fatal() {
    assert_fatal("unlock");
}

#[test]
fn lock_unlock_unlock_is_fatal() {
    let stderr = assert_fatal("unlock2");
    assert!(stderr.contains("first unlock done"), "{stderr}");
}

#[test]
fn unlock_fair_of_unlocked_mutex_is_fatal() {
    assert_fatal("unlock_fair");
}

#[test]
fn read_unlock_of_unlocked_biased_rwlock_is_fatal() {
    assert_fatal("runlock_biased");
}

#[test]
fn read_unlock_of_a_biased_rwlock_read_only_in_the_table_is_fatal() {
    let stderr = assert_fatal("runlock_biased_table_reader");
    assert!(stderr.contains("a reader in the table"), "{stderr}");
}

#[test]
fn control_child_exits_cleanly() {
    let out = child("control");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert!(
        stderr.contains("test completed (panicked: false)"),
        "{stderr}"
    );
}
