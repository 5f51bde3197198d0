//! How often the shared-memory lock looks for trouble, and how long it waits for it: the
//! intervals every layer shares.

use std::time::Duration;

/// A sleeping waiter (of the lock, of the journal lock, of a condition variable) wakes at least
/// this often to look for dead participants.
pub(crate) const TICK: Duration = Duration::from_millis(10);
/// A token not picked up this long after its delivery is passed on if its process is stopped
/// (`T`/`t` in `/proc/<pid>/stat`).
pub(crate) const PASS_STOPPED: Duration = Duration::from_millis(20);
/// A token not picked up this long after its delivery is passed on whatever the reason (a
/// process that exec'd, a thread that does not run): a sleeper is woken at once and picks its
/// token up in microseconds.
pub(crate) const PASS_ANY: Duration = Duration::from_millis(100);
/// How long past the caller's deadline a timed call may wait for the journal lock to hand back
/// what it holds (its queue slot, its registration, `WOKEN`) before it gives them up for the
/// next journal-lock holder to settle (normally microseconds: the lock is held for a few
/// stores).
pub(crate) const JLOCK_GRACE: Duration = Duration::from_millis(2);
