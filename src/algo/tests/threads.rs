//! The algorithm on many threads over an independent queue.
use super::*;

/// An independent [`WaitQueue`] on std's `Mutex` + `Condvar`, following the trait contract:
/// front-class (lifo) sleepers first, FIFO within a class, persistent tokens.
#[derive(Default)]
struct StdQueue {
    inner: std::sync::Mutex<StdQueueInner>,
    cv: std::sync::Condvar,
}

#[derive(Default)]
struct StdQueueInner {
    tokens: u32,
    next: u64,
    sleepers: Vec<(u64, bool)>,
    granted: Vec<u64>,
    lifo_sleeps: u64,
}

impl WaitQueue for StdQueue {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        let mut g = self.inner.lock().unwrap();
        if g.tokens > 0 {
            g.tokens -= 1;
            return true;
        }
        let me = g.next;
        g.next += 1;
        g.lifo_sleeps += u64::from(lifo);
        g.sleepers.push((me, lifo));
        loop {
            if let Some(i) = g.granted.iter().position(|&t| t == me) {
                g.granted.swap_remove(i);
                return true;
            }
            match deadline {
                None => g = self.cv.wait(g).unwrap(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        g.sleepers.retain(|&(t, _)| t != me);
                        return false;
                    }
                    g = self.cv.wait_timeout(g, d - now).unwrap().0;
                }
            }
        }
    }

    fn release(&self, _handoff: bool) {
        let mut g = self.inner.lock().unwrap();
        let pick = g
            .sleepers
            .iter()
            .position(|&(_, lifo)| lifo)
            .or((!g.sleepers.is_empty()).then_some(0));
        match pick {
            Some(i) => {
                let (t, _) = g.sleepers.remove(i);
                g.granted.push(t);
                self.cv.notify_all();
            }
            None => g.tokens += 1,
        }
    }
}

#[test]
fn many_threads_with_deadlines_over_an_independent_queue_stay_exact_and_quiescent() {
    use crate::clock::Monotonic;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Arc;

    struct Lock {
        state: AtomicU32,
        q: StdQueue,
        inside: AtomicBool,
        counter: AtomicU64,
        starving_seen: AtomicBool,
    }
    const THREADS: usize = 4;
    const ITERS: u64 = 1500;
    let l = Arc::new(Lock {
        state: AtomicU32::new(0),
        q: StdQueue::default(),
        inside: AtomicBool::new(false),
        counter: AtomicU64::new(0),
        starving_seen: AtomicBool::new(false),
    });
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let l = Arc::clone(&l);
            std::thread::spawn(move || {
                let mut got = 0u64;
                for i in 0..ITERS {
                    let ok = if (i + t as u64).is_multiple_of(3) {
                        let d = Instant::now() + Duration::from_micros(20 * (i % 7));
                        lock_until::<_, _, Monotonic>(&l.state, &l.q, Some(d))
                    } else {
                        lock::<_, _, Monotonic>(&l.state, &l.q);
                        true
                    };
                    if !ok {
                        continue;
                    }
                    got += 1;
                    assert!(!l.inside.swap(true, Ordering::Relaxed), "two owners");
                    if StateWord::load(&l.state) & STARVING != 0 {
                        l.starving_seen.store(true, Ordering::Relaxed);
                    }
                    // A non-atomic read-modify-write: lost updates show broken exclusion.
                    let v = l.counter.load(Ordering::Relaxed);
                    if i % 64 == 0 {
                        std::thread::sleep(Duration::from_micros(300));
                    }
                    l.counter.store(v + 1, Ordering::Relaxed);
                    l.inside.store(false, Ordering::Relaxed);
                    unlock(&l.state, &l.q);
                }
                got
            })
        })
        .collect();
    let got: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(l.counter.load(Ordering::Relaxed), got);
    assert_eq!(StateWord::load(&l.state), 0, "not quiescent");
    let g = l.q.inner.lock().unwrap();
    assert_eq!(g.tokens, 0, "leftover tokens");
    assert!(g.sleepers.is_empty() && g.granted.is_empty());
    eprintln!(
        "acquired {got}, re-queued sleeps {}, starvation seen {}",
        g.lifo_sleeps,
        l.starving_seen.load(Ordering::Relaxed)
    );
}
