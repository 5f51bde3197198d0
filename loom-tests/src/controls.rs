//! Negative controls: a deliberately broken variant of a model runs as an `#[ignore]`d test
//! body in a child process (a loom deadlock aborts the process it runs in), and must fail
//! there, for the expected reason.

use std::process::Command;

/// Set in the child process that runs a negative-control body.
const BODY_ENV: &str = "GOMUTEX_LOOM_NEGATIVE_BODY";

/// Run the `#[ignore]`d test `body` of the current test binary in a child process; it must
/// fail, with one of `expect` in its output.
pub fn expect_rejected(body: &str, expect: &[&str]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            body,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(BODY_ENV, "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("could not re-run the test binary");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the broken variant `{body}` passed: the model cannot detect this bug\n{text}"
    );
    let hit = expect.iter().find(|e| text.contains(*e));
    assert!(
        hit.is_some(),
        "`{body}` failed for another reason than expected ({expect:?}):\n{text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains(hit.unwrap()))
        .unwrap_or("");
    eprintln!("[loom] {body}: rejected as expected: {line}");
}

/// Whether this process runs a negative-control body ([`expect_rejected`]'s child): a body
/// run directly (`--ignored` by hand) returns at once instead.
pub fn body_enabled() -> bool {
    std::env::var_os(BODY_ENV).is_some()
}
