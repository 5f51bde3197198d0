//! Loom harness for `gomutex`: checked wrappers around the real algorithm.
//!
//! The models in `tests/` run the code that ships (`gomutex::algo`, `gomutex::sema::ParkSema`,
//! `gomutex::RawMutex`, `gomutex::Mutex`, `gomutex::Condvar`), built with `--cfg gomutex_loom`
//! (set by `.cargo/config.toml`), so its atomics are loom's, parking is loom's mock and the clock
//! is virtual. This crate adds what the models check with:
//!
//! * [`CheckedWord`] — a [`StateWord`] that forwards every operation to gomutex's own
//!   `impl StateWord for AtomicU32` (same orderings) and feeds every transition to a [`Ghost`]
//!   that checks the invariants of `docs/algorithm.md` on each one;
//! * [`Logged`] — a [`WaitQueue`] wrapper that tells the ghost about every sleep, wake-up and
//!   token, so the ghost knows who owns `WOKEN`, who receives a hand-off, and who is asleep;
//! * [`TimedQueue`] — a test-only queue with the [`WaitQueue`] contract whose timed
//!   `acquire` may time out (loom's spurious wake-up of its `Notify` is the deadline passing),
//!   to model the deadline path that the parking mock cannot;
//! * clocks that force the starvation decision ([`AlwaysStarving`], [`NeverStarving`]);
//! * [`model`], which runs a model with a preemption bound and reports how many executions it
//!   explored and how long it took, and [`Stats`], counters kept *across* executions so a model
//!   can assert that an interesting path (hand-off, token kept before sleep, …) was really taken.
//!
//! Ghost state lives in a `std::sync::Mutex`, outside loom's view on purpose: loom threads are
//! coroutines on one OS thread and only switch at loom operations, so updating the ghost right
//! after a loom atomic operation is atomic with it, and the ghost adds no happens-before edge
//! that could hide a missing one in the code under test.
//!
//! [`StateWord`]: gomutex::algo::StateWord
//! [`WaitQueue`]: gomutex::sema::WaitQueue

#[cfg(not(gomutex_loom))]
compile_error!(
    "loom-tests must be built with `--cfg gomutex_loom`: run `cargo test --release` inside \
     loom-tests/ (its .cargo/config.toml sets it); a RUSTFLAGS environment variable overrides \
     that file, so add `--cfg gomutex_loom` to it if you set one"
);

mod controls;
mod ghost;
mod harness;
mod queue;
mod run;
mod rw;

pub use controls::{body_enabled, expect_rejected};
pub use ghost::Ghost;
pub use harness::{far_deadline, AlwaysStarving, CheckedWord, Harness, NeverStarving};
pub use queue::{Introspect, Logged, LossyQueue, TimedQueue};
pub use run::{get, join_all, model, model_with_stats, Stats};
pub use rw::{bias_fault, ModelWord, RwFault, RwHarness, RwHarnessOf};
