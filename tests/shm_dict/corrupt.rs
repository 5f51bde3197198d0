//! Corruption fuzz: a peer that writes a dictionary's zone may make operations fail with
//! `DictError::Corrupt`, but never panic, fault or hang (`ShmDict`'s docs, "Limits").
//!
//! A dictionary of 4 shards is filled (entries of every slab class and large ones, lists,
//! integers, TTLs expired and not, holes); each round writes a copy of its zones damaged in 1
//! to 3 places (random bits anywhere or in the structures, chosen words of the header, the
//! free-list and slab-list heads, page descriptors and slab bitmaps, buckets and chains, LRU
//! links, entry fields, a committed redo record that a dead holder leaves to be replayed), and
//! runs every operation on it in a child process, which must exit 0. Each round starts from
//! the undamaged copy, so rounds are independent. The seed (from the clock unless given) also
//! makes the dictionary's hash seeds, so the same seed fills the same zones:
//! `GOMUTEX_DICT_FUZZ_SEED=<seed> GOMUTEX_DICT_FUZZ_ROUND=<round>` repeats one round
//! (describing its damage), and `GOMUTEX_DICT_FUZZ_ROUNDS` sets how many run (default 4000).

use crate::linux::common::anon::AnonShared;
use crate::linux::common::procs::{self, fork, reap};
use crate::linux::common::torture::{env_u64, Rng};
use gomutex::{
    dict::{DictConfig, ShmDict},
    shm::Mapping,
};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

// The zone's layout (src/dict/layout.rs, version 1; `Fill::new` checks the header
// against it).
const H_VERSION: usize = 8;
const H_LEN: usize = 16;
const H_NPAGES: usize = 24;
const H_NBUCKETS: usize = 28;
const H_BUCKETS: usize = 32;
const H_PAGES: usize = 40;
const H_SEED: usize = 48;
const H_SHARD: usize = 56;
const H_COUNT: usize = 80;
const H_BUDDY: usize = 128;
const ORDERS: usize = 24;
const H_PARTIAL: usize = H_BUDDY + 4 * ORDERS;
const CLASSES: usize = 21;
const LOG: usize = 1024;
const LOG_ENTRIES: usize = LOG + 64;
const LOG_CAP: usize = 512;
const META: usize = 12288;
const DESC: usize = 32;
const D_KIND: usize = 0;
const D_BITMAP: usize = 16;
const KIND_SLAB: u32 = 2;
/// `(offset, bytes)` of the header's fields, after the magic.
const HEADER: [(usize, usize); 20] = [
    (H_VERSION, 4),
    (12, 4),
    (H_LEN, 8),
    (H_NPAGES, 4),
    (H_NBUCKETS, 4),
    (H_BUCKETS, 8),
    (H_PAGES, 8),
    (H_SEED, 8),
    (H_SHARD, 4),
    (60, 4),
    (64, 8),
    (72, 8),
    (H_COUNT, 8),
    (88, 4),
    (92, 4),
    (96, 8),
    (104, 8),
    (112, 8),
    (120, 8),
    (LOG, 8),
];
/// `(offset, bytes)` of an entry's fields.
const ENTRY: [(usize, usize); 11] = [
    (0, 4),
    (4, 4),
    (8, 4),
    (12, 4),
    (16, 4),
    (20, 4),
    (24, 4),
    (28, 4),
    (32, 8),
    (40, 8),
    (48, 8),
];
/// An entry's LRU links (`E_PREV`, `E_NEXT`).
const LRU_LINKS: [usize; 2] = [4, 8];
/// Offsets of the LRU ends in the header.
const LRU_ENDS: [usize; 2] = [88, 92];

const CAP: usize = 1 << 20;
const SHARDS: u32 = 4;
/// Rounds per child (each from the undamaged copy): forking for every round would cost more
/// than the round.
const BATCH: u64 = 50;

/// The filled dictionary and what the damage aims at.
struct Fill {
    map: Mapping,
    d: ShmDict,
    /// Offset of each shard's zone in the mapping, and its length.
    zones: Vec<usize>,
    zone_len: usize,
    /// The undamaged zones.
    pristine: Vec<Vec<u8>>,
    /// Per shard: entry offsets (from the index), slab pages, and the pages' offset.
    entries: Vec<Vec<usize>>,
    slabs: Vec<Vec<usize>>,
    pages_off: Vec<usize>,
    /// Keys stored (live scalars first, `scalars` of them), and the lists' keys.
    keys: Vec<String>,
    scalars: usize,
    lists: Vec<String>,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

fn put(b: &mut [u8], off: usize, width: usize, v: u64) {
    b[off..off + width].copy_from_slice(&v.to_le_bytes()[..width]);
}

impl Fill {
    /// The dictionary, filled, its hash seeds made from `seed` (so that a round repeats).
    fn new(seed: u64) -> Self {
        let cfg = DictConfig::new().shards(SHARDS);
        let need = ShmDict::required_size(CAP, cfg).unwrap();
        let map = Mapping::anonymous(need).unwrap();
        let made = ShmDict::init_in(&map, 0, CAP, cfg).unwrap();
        let stride = need / SHARDS as usize;
        let zone_len = made.capacity() / SHARDS as usize;
        let zones: Vec<usize> = (0..SHARDS as usize)
            .map(|i| i * stride + stride - zone_len)
            .collect();
        drop(made);
        // The kernel's random seeds replaced while the zones are empty, then attached: the
        // same shards, chains and zones for the same `seed`.
        for (i, z) in zones.iter().enumerate() {
            // SAFETY: the header's seed word of a shard's zone (8-aligned, in the mapping);
            // no handle is attached, so nothing reads or writes it meanwhile.
            unsafe {
                map.as_ptr().add(z + H_SEED).cast::<u64>().write(
                    (seed ^ i as u64)
                        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        .to_le(),
                )
            };
        }
        let d = ShmDict::attach_in(&map, 0).unwrap();
        let mut keys = Vec::new();
        // Every slab class and large blocks of 1 to 4 pages.
        let sizes = [
            0, 8, 20, 40, 60, 90, 120, 150, 180, 250, 300, 350, 420, 500, 600, 700, 850, 1000,
            1200, 1450, 1700, 1950, 2500, 3500, 6000, 9000, 15000,
        ];
        for round in 0..3 {
            for (i, &n) in sizes.iter().enumerate() {
                let k = format!("s{round}-{i}");
                d.set(&k, &vec![i as u8; n], None, i as u32).unwrap();
                keys.push(k);
            }
        }
        for i in 0..30 {
            let k = format!("n{i}");
            d.incr(&k, i, Some(1000), None).unwrap();
            keys.push(k);
        }
        for i in 0..10 {
            let k = format!("t{i}");
            d.set(&k, &vec![7u8; 30 * i], Some(Duration::from_secs(3600)), 0)
                .unwrap();
            keys.push(k);
        }
        // Holes in slab pages, and hits (used words set).
        for k in keys.iter().step_by(5) {
            d.delete(k).unwrap();
        }
        keys.retain(|k| d.get(k).unwrap().is_some());
        for k in keys.iter().step_by(3) {
            d.get(k).unwrap();
        }
        let scalars = keys.len();
        let mut lists = Vec::new();
        for i in 0..12 {
            let k = format!("l{i}");
            for j in 0..=i % 5 {
                d.rpush(&k, vec![j as u8; 10 * j + i]).unwrap();
            }
            lists.push(k);
        }
        // Expired, not yet freed.
        for i in 0..12 {
            let k = format!("x{i}");
            d.set(&k, &vec![1u8; 50 * i], Some(Duration::from_millis(1)), 0)
                .unwrap();
            keys.push(k);
        }
        std::thread::sleep(Duration::from_millis(5));
        let report = d.check().unwrap();
        assert!(
            report.slab_pages > 10 && report.large_blocks > 3,
            "{report:?}"
        );
        assert!(d.free_space() > 0);

        let pristine: Vec<Vec<u8>> = zones
            .iter()
            .map(|&z| {
                let mut b = vec![0u8; zone_len];
                // SAFETY: `z..z + zone_len` is in the mapping (a shard's zone); nobody writes it
                // meanwhile (this process is single-threaded and holds no lock).
                unsafe {
                    std::ptr::copy_nonoverlapping(map.as_ptr().add(z), b.as_mut_ptr(), zone_len)
                };
                b
            })
            .collect();
        let (mut entries, mut slabs, mut pages_off) = (Vec::new(), Vec::new(), Vec::new());
        let mut count = 0;
        for (i, z) in pristine.iter().enumerate() {
            assert_eq!(&z[..8], b"GoMuDict", "shard {i}: the layout moved");
            assert_eq!(u32_at(z, H_VERSION), 2, "shard {i}: the layout changed");
            assert_eq!(u64_at(z, H_LEN), zone_len as u64);
            assert_eq!(u32_at(z, H_SHARD), i as u32);
            let npages = u32_at(z, H_NPAGES) as usize;
            let po = u64_at(z, H_PAGES) as usize;
            assert!(po + 4096 * npages <= zone_len);
            let (bo, nb) = (
                u64_at(z, H_BUCKETS) as usize,
                u32_at(z, H_NBUCKETS) as usize,
            );
            let mut es = Vec::new();
            for b in 0..nb {
                let mut r = u32_at(z, bo + 4 * b);
                while r != 0 {
                    es.push(r as usize * 16);
                    r = u32_at(z, r as usize * 16);
                }
            }
            assert_eq!(es.len() as u64, u64_at(z, H_COUNT), "shard {i}");
            count += es.len();
            entries.push(es);
            slabs.push(
                (0..npages)
                    .filter(|p| u32_at(z, META + DESC * p + D_KIND) == KIND_SLAB)
                    .collect(),
            );
            pages_off.push(po);
        }
        assert_eq!(count as u64, report.entries);
        Self {
            map,
            d,
            zones,
            zone_len,
            pristine,
            entries,
            slabs,
            pages_off,
            keys,
            scalars,
            lists,
        }
    }

    /// Write `zones` (one per shard) over the dictionary's.
    fn write(&self, zones: &[Vec<u8>]) {
        for (z, b) in self.zones.iter().zip(zones) {
            // SAFETY: `z..z + zone_len` is a shard's zone in the mapping, `b` is `zone_len`
            // bytes; no process holds a shard's lock (the only dead holder's lock is released
            // after this write), so nobody reads or writes the zone meanwhile.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), self.map.as_ptr().add(*z), self.zone_len)
            };
        }
    }

    /// A value worth writing into a u32 field of shard `s`.
    fn word32(&self, rng: &mut Rng, s: usize, old: u32) -> u32 {
        let z = &self.pristine[s];
        let npages = u32_at(z, H_NPAGES);
        match rng.below(10) {
            0 => 0,
            1 => u32::MAX,
            2 => u32::MAX - 1,
            3 => 0x8000_0000,
            4 => npages + rng.below(3) as u32,
            5 => old ^ 1 << rng.below(32),
            6 => rng.below(64) as u32,
            // Another entry's reference (a chain or list that loops or crosses).
            7 | 8 => match self.entries[s].len() {
                0 => 1,
                n => (self.entries[s][rng.below(n as u64) as usize] / 16) as u32,
            },
            _ => rng.next() as u32,
        }
    }

    fn word64(&self, rng: &mut Rng, old: u64) -> u64 {
        match rng.below(8) {
            0 => 0,
            1 => u64::MAX,
            2 => u64::MAX - rng.below(4),
            3 => 1 << 63,
            4 => old ^ 1 << rng.below(64),
            5 => rng.below(1 << 20),
            _ => rng.next(),
        }
    }

    /// Overwrite the field of `width` bytes at `off` of shard `s`'s copy.
    fn field(&self, rng: &mut Rng, z: &mut [u8], s: usize, off: usize, width: usize) -> String {
        let v = if width == 4 {
            u64::from(self.word32(rng, s, u32_at(z, off)))
        } else {
            self.word64(rng, u64_at(z, off))
        };
        put(z, off, width, v);
        format!("shard {s}: {width} bytes at {off:#x} := {v:#x}")
    }

    /// Damage `zones` in 1 to 3 places; what was done, and whether a dead holder should leave
    /// a redo record to replay.
    fn damage(&self, rng: &mut Rng, zones: &mut [Vec<u8>]) -> (Vec<String>, bool) {
        let mut what = Vec::new();
        let mut redo = false;
        for _ in 0..1 + rng.below(3) {
            let s = rng.below(SHARDS as u64) as usize;
            let z = &mut zones[s];
            let (po, np) = (
                self.pages_off[s],
                u32_at(&self.pristine[s], H_NPAGES) as usize,
            );
            let pick = |rng: &mut Rng, v: &[usize]| v[rng.below(v.len() as u64) as usize];
            let w = match rng.below(12) {
                0 => {
                    let bit = rng.below(8 * self.zone_len as u64) as usize;
                    z[bit / 8] ^= 1 << (bit % 8);
                    format!("shard {s}: bit {bit} of the zone flipped")
                }
                1 => {
                    let bit = rng.below(8 * po as u64) as usize;
                    z[bit / 8] ^= 1 << (bit % 8);
                    format!("shard {s}: bit {bit} of the structures flipped")
                }
                2 => {
                    let off = 4 * rng.below(po as u64 / 4) as usize;
                    self.field(rng, z, s, off, 4)
                }
                3 => {
                    let (off, width) = HEADER[rng.below(HEADER.len() as u64) as usize];
                    self.field(rng, z, s, off, width)
                }
                4 => {
                    let off = if rng.below(2) == 0 {
                        H_BUDDY + 4 * rng.below(ORDERS as u64) as usize
                    } else {
                        H_PARTIAL + 4 * rng.below(CLASSES as u64) as usize
                    };
                    self.field(rng, z, s, off, 4)
                }
                5 => {
                    // A descriptor: kind, order or class, list links, bitmap.
                    let d = META + DESC * rng.below(np as u64) as usize;
                    let (off, width) =
                        [(0, 4), (4, 4), (8, 4), (12, 4), (16, 8)][rng.below(5) as usize];
                    self.field(rng, z, s, d + off, width)
                }
                6 if !self.slabs[s].is_empty() => {
                    // A slab page's bitmap: full, empty, or a bit flipped.
                    let off = META + DESC * pick(rng, &self.slabs[s]) + D_BITMAP;
                    let v = match rng.below(3) {
                        0 => u64::MAX,
                        1 => 0,
                        _ => u64_at(z, off) ^ 1 << rng.below(64),
                    };
                    put(z, off, 8, v);
                    format!("shard {s}: slab bitmap at {off:#x} := {v:#x}")
                }
                7 => {
                    let b = u64_at(&self.pristine[s], H_BUCKETS) as usize;
                    let nb = u32_at(&self.pristine[s], H_NBUCKETS) as u64;
                    let off = b + 4 * rng.below(nb) as usize;
                    self.field(rng, z, s, off, 4)
                }
                8 | 9 if !self.entries[s].is_empty() => {
                    let e = pick(rng, &self.entries[s]);
                    let (off, width) = ENTRY[rng.below(ENTRY.len() as u64) as usize];
                    self.field(rng, z, s, e + off, width)
                }
                10 if !self.entries[s].is_empty() => {
                    let off = if rng.below(4) == 0 {
                        LRU_ENDS[rng.below(2) as usize]
                    } else {
                        pick(rng, &self.entries[s]) + LRU_LINKS[rng.below(2) as usize]
                    };
                    self.field(rng, z, s, off, 4)
                }
                11 => {
                    redo = true;
                    self.redo_record(rng, z, s)
                }
                _ => continue,
            };
            what.push(w);
        }
        (what, redo)
    }

    /// A committed redo record: its length (plausible or not) and pairs that write words
    /// anywhere in the zone, or garbage.
    fn redo_record(&self, rng: &mut Rng, z: &mut [u8], s: usize) -> String {
        let n = match rng.below(4) {
            0 => 1 + rng.below(8),
            1 => 1 + rng.below(LOG_CAP as u64),
            2 => LOG_CAP as u64 + 1 + rng.below(4),
            _ => rng.next() | 1,
        };
        for i in 0..(n as usize).min(LOG_CAP) {
            let wide = rng.below(2);
            let key = match rng.below(4) {
                0 => rng.next(),
                _ => {
                    let off = rng.below(self.zone_len as u64) & !7;
                    off << 1 | wide
                }
            };
            let v = self.word64(rng, 0);
            put(z, LOG_ENTRIES + 16 * i, 8, key);
            put(z, LOG_ENTRIES + 16 * i + 8, 8, v);
        }
        put(z, LOG, 8, n);
        format!("shard {s}: redo record of {n} pairs")
    }

    /// Every operation, on `d`, with keys of the fill and new ones; the results do not
    /// matter (the zone is damaged), only that each returns. Whether `check` found damage.
    fn every_operation(&self, d: &ShmDict, rng: &mut Rng) -> bool {
        let damaged = d.check().is_err();
        let _ = (d.stats(), d.free_space());
        let pick = |rng: &mut Rng, v: &[String]| v[rng.below(v.len() as u64) as usize].clone();
        let new = format!("new{}", rng.below(1000));
        let mut ks: Vec<String> = (0..6).map(|_| pick(rng, &self.keys)).collect();
        ks.extend([new.clone(), pick(rng, &self.lists)]);
        for k in ks {
            let _ = d.get(&k);
            let _ = d.get_stale(&k);
            let _ = d.get_with(&k, |v, f| (format!("{v:?}").len(), f));
            let _ = d.ttl(&k);
            let _ = d.llen(&k);
        }
        for n in [0, 10, 100, 700, 2000, 5000] {
            let _ = d.set(pick(rng, &self.keys), &vec![3u8; n], None, 1);
            let _ = d.set(&new, &vec![4u8; n], Some(Duration::from_secs(60)), 2);
        }
        let _ = d.safe_set(pick(rng, &self.keys), &vec![5u8; 300], None, 0);
        let _ = d.add(format!("new{}", rng.below(1000)), "a", None, 0);
        let _ = d.safe_add(pick(rng, &self.keys), "a", None, 0);
        let _ = d.replace(pick(rng, &self.keys), &vec![6u8; 64], None, 0);
        let _ = d.incr(pick(rng, &self.keys), 3, None, None);
        let _ = d.incr(pick(rng, &self.keys), -1, Some(5), None);
        let _ = d.incr(format!("nn{}", rng.below(1000)), 1, Some(0), None);
        let _ = d.update(pick(rng, &self.keys), None, |v| {
            (v.is_some(), Some([9u8; 24]))
        });
        let _ = d.expire(pick(rng, &self.keys), Some(Duration::from_secs(10)));
        let _ = d.expire(pick(rng, &self.keys), None);
        let _ = d.delete(pick(rng, &self.keys));
        let _ = d.delete(&new);
        for l in [pick(rng, &self.lists), pick(rng, &self.lists), new] {
            let _ = d.lpush(&l, b"left");
            let _ = d.rpush(&l, vec![1u8; 200]);
            let _ = d.lpop(&l);
            let _ = d.rpop(&l);
            let _ = d.llen(&l);
        }
        let _ = (d.keys(0), d.keys(3), d.flush_expired(2), d.flush_expired(0));
        let _ = (d.check(), d.stats(), d.free_space());
        let _ = d.flush_all();
        let _ = (d.keys(0), d.set("after-flush", "v", None, 0), d.check());
        damaged
    }

    /// Round `round` of `seed`, in this (child) process: damage, then every operation, on the
    /// inherited handle and on a fresh attach. Whether `check` found damage, and whether a
    /// dead holder left its shard to replay the redo record.
    fn round(&self, seed: u64, round: u64, verbose: bool) -> (bool, bool) {
        let mut rng = Rng::new(seed ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut zones = self.pristine.clone();
        let (what, redo) = self.damage(&mut rng, &mut zones);
        if verbose {
            println!("round {round}: {what:?}");
        }
        self.write(&self.pristine);
        let dead = redo.then(|| self.die_holding_a_lock(&mut rng));
        self.write(&zones);
        // The next operation on its shard replays the (damaged) record.
        let replay = dead.is_some_and(|pid| self.d.force_unlock(pid));
        let damaged = self.every_operation(&self.d, &mut rng);
        if let Ok(d) = ShmDict::attach_in(&self.map, 0) {
            self.every_operation(&d, &mut rng);
        }
        (damaged, replay)
    }

    /// A process that dies inside `get_with` (holding a shard's lock), reaped; its pid.
    fn die_holding_a_lock(&self, rng: &mut Rng) -> u32 {
        let k = &self.keys[rng.below(self.scalars as u64) as usize];
        let pid = fork(|| {
            let _ = self.d.get_with(k, |_, _| {
                // SAFETY: leave at once, holding the lock, as a killed worker would.
                unsafe { libc::_exit(0) }
            });
            1
        });
        reap(pid);
        pid as u32
    }
}

/// Thousands of rounds of damage, each run in a child that must exit 0 within the time
/// limit (else the seed and round to repeat it are printed).
pub fn corruption_fuzz() {
    let seed = env_u64("GOMUTEX_DICT_FUZZ_SEED").unwrap_or_else(|| procs::mono_ns() | 1);
    let rounds = env_u64("GOMUTEX_DICT_FUZZ_ROUNDS").unwrap_or(4000);
    let only = env_u64("GOMUTEX_DICT_FUZZ_ROUND");
    println!("corruption fuzz: seed {seed}, {rounds} rounds");
    let fill = Fill::new(seed);
    // [round in progress, rounds done, rounds whose damage check() found, rounds that replayed]
    let book = AnonShared::counters(4);
    let (first, last) = match only {
        Some(r) => (r, r + 1),
        None => (0, rounds),
    };
    let mut start = first;
    while start < last {
        let end = (start + BATCH).min(last);
        let (fill, book) = (&fill, &book);
        let pid = fork(move || {
            for r in start..end {
                book.at(0).store(r, SeqCst);
                let (damaged, replay) = fill.round(seed, r, only.is_some());
                book.at(2).fetch_add(u64::from(damaged), SeqCst);
                book.at(3).fetch_add(u64::from(replay), SeqCst);
                book.at(1).fetch_add(1, SeqCst);
            }
            0
        });
        let code = std::panic::catch_unwind(|| {
            procs::wait_limit(pid, Duration::from_secs(60), "corruption fuzz")
        });
        if !matches!(code, Ok(0)) {
            let r = book.at(0).load(SeqCst);
            panic!(
                "round {r} failed ({}): repeat it with GOMUTEX_DICT_FUZZ_SEED={seed} \
                 GOMUTEX_DICT_FUZZ_ROUND={r}",
                match code {
                    Ok(c) => format!("exit code {c}: 101 is a panic, 128 + n signal n"),
                    Err(_) => "hung, killed".to_string(),
                }
            );
        }
        start = end;
    }
    let [done, found, replays] = [1, 2, 3].map(|i| book.at(i).load(SeqCst));
    println!(
        "corruption fuzz: {done} rounds, check() found the damage in {found}, {replays} \
         replayed a damaged redo record after a death"
    );
    assert_eq!(done, last - first);
    // The damage is real: check() sees most of it (a flipped bit of a value is not damage
    // it can see), and the redo records were replayed.
    assert!(only.is_some() || found * 4 >= done, "{found} of {done}");
    assert!(
        only.is_some() || replays * 40 >= done,
        "{replays} of {done}"
    );
}
