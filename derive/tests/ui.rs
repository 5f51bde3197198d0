//! What the derives refuse, with the messages users see (tests/ui/*.stderr, made with the
//! toolchain CI uses: `TRYBUILD=overwrite cargo test --test ui` after a deliberate change).
#![cfg(target_os = "linux")]

#[test]
fn refused() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
