//! The dictionary's kill torture: writers and readers killed at random (and at crash points),
//! every key's value checked against a reference model after each death.
#![cfg_attr(
    not(feature = "__crash-points"),
    allow(dead_code, unused_imports, unused_variables, unused_mut)
)]
use crate::linux::common::anon::AnonShared;
use crate::linux::common::procs::fork;
use crate::linux::common::torture::{self, Kills, Rng};
use gomutex::__crash as crash;
use gomutex::dict::{DictConfig, DictError, OwnedValue, ShmDict, Value};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

const WORKERS: usize = 4;
/// Processes that only look keys up (slots after the workers'), checking every value whole.
const READERS: usize = 2;
const KEYS: usize = 64;
/// Keys from this one on are counters (`incr`); the others hold byte strings.
const COUNTERS: usize = 48;
/// Keys from this one to `LISTS` hold values of one size: their updates are written in place.
const IN_PLACE_KEYS: usize = 32;
/// Keys from this one to `COUNTERS` are lists (`rpush`, `rpop`): the model is the length,
/// item `i` is `item(slot, k, i)`.
const LISTS: usize = 40;

/// Item `i` of list `k` of worker `slot` (its length and bytes depend on all three).
fn item(slot: usize, k: usize, i: u64) -> Vec<u8> {
    let len = 8 + (i as usize * 13 + k) % 40;
    let mut b = i.to_le_bytes().to_vec();
    b.resize(len, (slot * 31 + k) as u8 ^ i as u8);
    b
}
/// Per worker slot in the bookkeeping mapping: the model (one u64 per key: a version, 0 =
/// absent, or a counter's value + 1), the in-flight record (key + 1, old, new), progress.
const SLOT: usize = KEYS + 4;

fn key(slot: usize, k: usize) -> String {
    format!("w{slot}:k{k}")
}

/// The bytes of version `v` of key `k` of worker `slot`: length and content depend on all
/// three, so a torn or misplaced value cannot pass for another.
fn value(slot: usize, k: usize, v: u64) -> Vec<u8> {
    let len = if (IN_PLACE_KEYS..LISTS).contains(&k) {
        40
    } else {
        8 + ((v as usize * 7919 + k * 131) % 6000)
    };
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&v.to_le_bytes());
    let mut x = Rng::new((slot as u64) << 40 ^ (k as u64) << 20 ^ v);
    while b.len() < len {
        b.push((x.next() >> 56) as u8);
    }
    b
}

/// What the dictionary holds for key `k` of `slot`, in the model's terms (a version, or a
/// counter + 1; 0 = absent); `Err` for a value that is no version of this key (torn).
fn observe(d: &ShmDict, slot: usize, k: usize) -> Result<u64, String> {
    if (LISTS..COUNTERS).contains(&k) {
        return d
            .llen(key(slot, k))
            .map(|n| n as u64)
            .map_err(|e| format!("{}: {e}", key(slot, k)));
    }
    match d.get(key(slot, k)).unwrap() {
        None => Ok(0),
        Some(item) => match (k >= COUNTERS, item.value) {
            (true, OwnedValue::Int(n)) if n >= 0 => Ok(n as u64 + 1),
            (false, OwnedValue::Bytes(b)) if b.len() >= 8 => {
                let v = u64::from_le_bytes(b[..8].try_into().unwrap());
                if b == value(slot, k, v) {
                    Ok(v)
                } else {
                    Err(format!("{}: torn value of {} bytes", key(slot, k), b.len()))
                }
            }
            (_, v) => Err(format!("{}: unexpected {v:?}", key(slot, k))),
        },
    }
}

fn worker(d: &ShmDict, book: &AnonShared, slot: usize, seed: u64, crash: u32) -> i32 {
    #[cfg(feature = "__crash-points")]
    if crash != 0 {
        gomutex::__crash::crash_at(crash);
    }
    let base = slot * SLOT;
    let model = |k: usize| book.at(base + k);
    let (inflight_key, inflight_old, inflight_new, progress) = (
        book.at(base + KEYS),
        book.at(base + KEYS + 1),
        book.at(base + KEYS + 2),
        book.at(base + KEYS + 3),
    );
    let mut rng = Rng::new(seed);
    let mut rnd = move || rng.next();
    let stop = book.at(WORKERS * SLOT);
    while stop.load(SeqCst) == 0 {
        let k = (rnd() % KEYS as u64) as usize;
        let name = key(slot, k);
        let old = model(k).load(SeqCst);
        let choice = rnd() % 10;
        let list = (LISTS..COUNTERS).contains(&k);
        let new = if list {
            match choice {
                0 => 0,
                _ if old > 0 && (old >= 20 || choice < 5) => old - 1,
                _ => old + 1,
            }
        } else if k >= COUNTERS {
            match choice {
                0 => 0,
                _ => old.max(1) + 1,
            }
        } else {
            match choice {
                0..=1 => 0,
                _ => old.max(book.at(base + KEYS + 3).load(SeqCst)) + 1,
            }
        };
        inflight_old.store(old, SeqCst);
        inflight_new.store(new, SeqCst);
        inflight_key.store(k as u64 + 1, SeqCst);
        let r = if new == 0 {
            d.delete(&name).unwrap();
            Ok(0)
        } else if list && new > old {
            d.rpush(&name, item(slot, k, old)).map(|n| {
                assert_eq!(n as u64, new);
                0
            })
        } else if list {
            // The item popped is the one the model says is last: never torn, never another.
            d.rpop(&name).map(|i| {
                assert_eq!(i, Some(item(slot, k, new)), "{name}: popped");
                0
            })
        } else if k >= COUNTERS {
            d.incr(&name, 1, Some(0), None).map(|i| {
                assert_eq!(i.value as u64 + 1, new);
                i.evicted
            })
        } else if old == 0 && choice < 5 {
            d.add(&name, &value(slot, k, new), None, k as u32)
        } else if old != 0 && choice < 5 {
            d.replace(&name, &value(slot, k, new), None, k as u32)
        } else {
            d.set(&name, &value(slot, k, new), None, k as u32)
        };
        match r {
            Ok(0) => {}
            Ok(n) => return 20 + n.min(9) as i32, // evictions would break the model
            Err(e) => {
                eprintln!("worker {slot}: {name}: {e}");
                return 10;
            }
        }
        model(k).store(new, SeqCst);
        inflight_key.store(0, SeqCst);
        progress.fetch_add(1, SeqCst);
    }
    0
}

/// A reader: looks up random keys of every worker (`get`, `get_with`, `ttl`, `llen`) while
/// they update them, each value a whole version of its key, never torn; counts its lookups
/// in the book after the stop word. Armed (`crash`) to die inside a lookup, holding the
/// shard's read side, after `after` lookups.
fn reader(d: &ShmDict, book: &AnonShared, r: usize, seed: u64, crash: bool, after: u64) -> i32 {
    let stop = book.at(WORKERS * SLOT);
    let done = book.at(WORKERS * SLOT + 1 + r);
    let mut rng = Rng::new(seed);
    let mut n = 0u64;
    while stop.load(SeqCst) == 0 {
        #[cfg(feature = "__crash-points")]
        if crash && n == after {
            gomutex::__crash::crash_at(crash::DICT_READING);
        }
        let slot = rng.below(WORKERS as u64) as usize;
        let k = rng.below(KEYS as u64) as usize;
        if let Err(e) = observe(d, slot, k) {
            eprintln!("reader {r}: {e}");
            return 11;
        }
        let name = key(slot, k);
        if k < LISTS {
            // Borrowed in place: the bytes of one version, whole.
            let whole = d.get_with(&name, |v, _| match v {
                Value::Bytes(b) if b.len() >= 8 => {
                    b == value(slot, k, u64::from_le_bytes(b[..8].try_into().unwrap()))
                }
                _ => false,
            });
            if !matches!(whole, Ok(None | Some(true))) {
                eprintln!("reader {r}: {name}: borrowed {whole:?}");
                return 12;
            }
        }
        if let Err(e) = d.ttl(&name) {
            if e != DictError::NotFound {
                eprintln!("reader {r}: {name}: ttl: {e}");
                return 13;
            }
        }
        n += 1;
        done.fetch_add(1, SeqCst);
    }
    0
}

/// Check the keys of a dead (or stopped) worker's slot against its model: exact, except the
/// key of the operation it was in, which holds the old or the new value. Then settle the
/// model to what is stored. Returns how many keys were checked exactly.
fn verify_slot(d: &ShmDict, book: &AnonShared, slot: usize) -> Result<usize, String> {
    let base = slot * SLOT;
    let inflight = book.at(base + KEYS).load(SeqCst);
    let mut exact = 0;
    for k in 0..KEYS {
        let seen = observe(d, slot, k)?;
        let model = book.at(base + k).load(SeqCst);
        if inflight == k as u64 + 1 {
            let (old, new) = (
                book.at(base + KEYS + 1).load(SeqCst),
                book.at(base + KEYS + 2).load(SeqCst),
            );
            if seen != old && seen != new {
                return Err(format!(
                    "{}: {seen}, neither old {old} nor new {new}",
                    key(slot, k)
                ));
            }
            book.at(base + k).store(seen, SeqCst);
        } else if seen != model {
            return Err(format!("{}: {seen}, model {model}", key(slot, k)));
        } else {
            exact += 1;
        }
        // Versions only grow: the next one starts past every one seen.
        book.at(base + KEYS + 3).fetch_max(seen, SeqCst);
    }
    book.at(base + KEYS).store(0, SeqCst);
    Ok(exact)
}

/// Several processes update their keys; the parent kills them at random moments (and a third
/// of them kill themselves at a random crash point). After every death: `check()` passes, the
/// dead worker's keys agree exactly with its model except the one it was updating, which is
/// old or new, never torn; the survivors keep progressing (no stall). At the end every key
/// agrees exactly.
pub(crate) fn kill_torture() {
    let secs = torture::secs("GOMUTEX_DICT_TORTURE_SECS", 12);
    // Sharded: a worker's keys spread over every shard's lock and zone.
    let d = ShmDict::anonymous_with(8 << 20, DictConfig::new().shards(4)).unwrap();
    let book = AnonShared::counters(WORKERS * SLOT + 1 + READERS);
    let mut rng = Rng::new(0x9e37_79b9u64 ^ u64::from(std::process::id()));
    // Slots past the workers' are readers: `crash` != 0 arms them to die inside a lookup.
    let spawn = |slot: usize, seed: u64, crash: u32| {
        if slot < WORKERS {
            fork(|| worker(&d, &book, slot, seed, crash))
        } else {
            let after = seed % 2000;
            fork(|| reader(&d, &book, slot - WORKERS, seed, crash != 0, after))
        }
    };
    let mut pids: Vec<i32> = (0..WORKERS + READERS)
        .map(|s| spawn(s, rng.next(), 0))
        .collect();
    let (mut deaths, mut reader_deaths, mut exact) = (0u64, 0u64, 0usize);
    // Every 0–30 ms a worker looked at: reaped if it died at its crash point, else killed one
    // time in three.
    let kills = Kills {
        pause_us: (0, 30_000),
        one_in: 3,
        own_deaths: true,
        stall: Duration::from_secs(2),
    };
    let died = torture::kill_loop(
        &mut pids,
        &mut rng,
        Instant::now() + secs,
        kills,
        |slot, rng| {
            let crash = if cfg!(feature = "__crash-points") && rng.below(3) == 0 {
                crash::DICT_ENTRY_WRITTEN + rng.below(7) as u32
            } else {
                0
            };
            spawn(slot, rng.next(), crash)
        },
        |_, _| (),
        |slot, pid, _, _| {
            deaths += 1;
            if slot >= WORKERS {
                // A dead reader: nobody releases its hold but the lock's own recovery (the
                // writers waiting for it, and `check`'s write side, find it dead).
                reader_deaths += 1;
                return d
                    .check()
                    .map(drop)
                    .map_err(|e| format!("after death {deaths} (reader {slot}): {e}"));
            }
            d.force_unlock(pid);
            if let Err(e) = d.check() {
                return Err(format!("after death {deaths} (worker {slot}): {e}"));
            }
            exact += verify_slot(&d, &book, slot).map_err(|e| format!("death {deaths}: {e}"))?;
            Ok(())
        },
        // Progress of everybody, writers and readers: no stall.
        || {
            [
                (0..WORKERS)
                    .map(|s| book.at(s * SLOT + KEYS + 3).load(SeqCst))
                    .sum::<u64>(),
                (0..READERS)
                    .map(|r| book.at(WORKERS * SLOT + 1 + r).load(SeqCst))
                    .sum::<u64>(),
            ]
        },
        |_, _| {},
    )
    .unwrap_or_else(|why| panic!("{why}"));
    book.at(WORKERS * SLOT).store(1, SeqCst);
    // A worker armed with a crash point may die at it while stopping.
    let statuses = torture::wait_for_exit(
        &pids,
        torture::STOP_LIMIT,
        |_, st| torture::exited_0(st) || torture::killed(st),
        |_, _| {},
    )
    .unwrap_or_else(|why| panic!("{why}"));
    for (slot, (&pid, st)) in pids.iter().zip(statuses).enumerate().take(WORKERS) {
        if torture::killed(st) {
            d.force_unlock(pid);
        }
        verify_slot(&d, &book, slot).unwrap();
    }
    let r = d.check().unwrap();
    let lookups: u64 = (0..READERS)
        .map(|r| book.at(WORKERS * SLOT + 1 + r).load(SeqCst))
        .sum();
    println!(
        "  {deaths} deaths ({} at crash points, {reader_deaths} readers), {exact} keys checked \
         exactly after deaths, {lookups} lookups by readers, {} entries, {} replays, 0 torn, \
         0 check failures",
        died.own,
        r.entries,
        d.stats().replayed
    );
    assert!(deaths >= 10, "only {deaths} deaths in {secs:?}");
    assert!(reader_deaths >= 1, "no reader died in {secs:?}");
}
