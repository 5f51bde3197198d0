//! The loom mock. One global queue (reset by loom for every execution), in arrival order.
//!
//! Loom has no time. By default a timed wait never times out. A model that calls
//! [`let_deadlines_pass`] turns a loom `Notify`'s spurious wake-up of a sleeper with a deadline
//! into that deadline passing: the sleeper then takes the queue lock and either finds it was
//! unparked first, or leaves the queue and runs `timed_out` (as `parking_lot_core` does), at an
//! arbitrary point of the execution.
use super::{FilterOp, ParkResult, UnparkResult};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex, Notify};
use std::time::Instant;

struct Slot {
    /// 0 while parked, `token + 1` once unparked.
    woken: AtomicUsize,
    notify: Notify,
}

struct Waiter {
    key: usize,
    token: usize,
    slot: Arc<Slot>,
}

loom::lazy_static! {
    static ref QUEUE: Mutex<Vec<Waiter>> = Mutex::new(Vec::new());
    static ref DEADLINES_PASS: loom::sync::atomic::AtomicBool =
        loom::sync::atomic::AtomicBool::new(false);
}

/// From now on (in this execution) a sleeper with a deadline may time out at any point.
pub fn let_deadlines_pass() {
    DEADLINES_PASS.store(true, Ordering::SeqCst);
}

std::thread_local! {
    /// The keys of the threads in `QUEUE`, kept beside it outside loom's view, so that a model
    /// that polls [`parked`] adds no loom operation (each would multiply the executions). Loom
    /// runs an execution's threads as coroutines on one OS thread and switches only at loom
    /// operations, so updating this right after changing `QUEUE` (under its lock) is atomic
    /// with the change. Empty again at the end of every execution that passes (nobody is left
    /// parked in one).
    static SHADOW: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn shadow_remove(key: usize) {
    SHADOW.with(|s| {
        let mut s = s.borrow_mut();
        let i = s
            .iter()
            .position(|k| *k == key)
            .expect("shadow out of step");
        s.swap_remove(i);
    });
}

/// Number of threads parked on `key` right now (for quiescence checks in models).
pub(crate) fn parked(key: usize) -> usize {
    SHADOW.with(|s| s.borrow().iter().filter(|k| **k == key).count())
}

pub(crate) unsafe fn park(
    key: usize,
    validate: impl FnOnce() -> bool,
    timed_out: impl FnOnce(),
    park_token: usize,
    deadline: Option<Instant>,
) -> ParkResult {
    let timed = deadline.is_some() && DEADLINES_PASS.load(Ordering::SeqCst);
    let mut q = QUEUE.lock().unwrap();
    if !validate() {
        return ParkResult::Invalid;
    }
    let slot = Arc::new(Slot {
        woken: AtomicUsize::new(0),
        notify: Notify::new(),
    });
    q.push(Waiter {
        key,
        token: park_token,
        slot: slot.clone(),
    });
    SHADOW.with(|s| s.borrow_mut().push(key));
    drop(q);
    loop {
        slot.notify.wait();
        let w = slot.woken.load(Ordering::SeqCst);
        if w != 0 {
            return ParkResult::Unparked(w - 1);
        }
        if timed {
            // The deadline passed: leave, unless an unpark picked us first.
            let mut q = QUEUE.lock().unwrap();
            let w = slot.woken.load(Ordering::SeqCst);
            if w != 0 {
                return ParkResult::Unparked(w - 1);
            }
            let i = q
                .iter()
                .position(|w| Arc::ptr_eq(&w.slot, &slot))
                .expect("timed-out sleeper not queued");
            q.remove(i);
            shadow_remove(key);
            timed_out();
            return ParkResult::TimedOut;
        }
    }
}

pub(crate) unsafe fn unpark_filter(
    key: usize,
    mut filter: impl FnMut(usize) -> FilterOp,
    callback: impl FnOnce(UnparkResult) -> usize,
) -> UnparkResult {
    let mut q = QUEUE.lock().unwrap();
    let mut woken = Vec::new();
    let mut i = 0;
    while i < q.len() {
        if q[i].key != key {
            i += 1;
            continue;
        }
        match filter(q[i].token) {
            FilterOp::Unpark => {
                woken.push(q.remove(i).slot);
                shadow_remove(key);
            }
            FilterOp::Skip => i += 1,
            FilterOp::Stop => break,
        }
    }
    let r = UnparkResult {
        unparked_threads: woken.len(),
    };
    let token = callback(r);
    for s in &woken {
        s.woken.store(token + 1, Ordering::SeqCst);
    }
    drop(q);
    for s in woken {
        s.notify.notify();
    }
    r
}

pub(crate) unsafe fn unpark_all(key: usize) -> usize {
    // SAFETY: forwarded contract.
    unsafe { unpark_filter(key, |_| FilterOp::Unpark, |_| 0) }.unparked_threads
}
