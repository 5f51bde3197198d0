//! The loom mock. One global queue (reset by loom for every execution), in arrival order.
//! Deadlines are ignored: loom has no time, a timed wait simply never times out.
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
}

/// Number of threads parked on `key` right now (for quiescence checks in models).
pub(crate) fn parked(key: usize) -> usize {
    QUEUE
        .lock()
        .unwrap()
        .iter()
        .filter(|w| w.key == key)
        .count()
}

pub(crate) unsafe fn park(
    key: usize,
    validate: impl FnOnce() -> bool,
    _timed_out: impl FnOnce(),
    park_token: usize,
    _deadline: Option<Instant>,
) -> ParkResult {
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
    drop(q);
    loop {
        slot.notify.wait();
        let w = slot.woken.load(Ordering::SeqCst);
        if w != 0 {
            return ParkResult::Unparked(w - 1);
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
            FilterOp::Unpark => woken.push(q.remove(i).slot),
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
