//! The dictionary's unit tests, by topic; the helpers they share.

mod failures;
mod lists;
mod memory;
mod passes;
mod places;
mod values;

use self::layout::{Mem, PAGE};
use super::*;
use crate::shm::{Config, Mapping, MappingLayout, ShmMutex};
use std::collections::HashMap;

fn dict(cap: usize) -> ShmDict {
    ShmDict::anonymous(cap).unwrap()
}

/// The offset of `key`'s entry in shard 0.
fn entry_of(d: &ShmDict, key: &[u8]) -> usize {
    let s = &d.shards[0];
    let tx = redo::ZoneTx::new(&s.mem);
    let h = index::hash(s.seed, key) as u32;
    index::find(&tx, &s.g, key, h).unwrap().0
}

/// A mapping for a dictionary of `cap` bytes in 4 shards: the configuration, the bytes it
/// needs, the mapping.
fn four_shards(cap: usize) -> (DictConfig, usize, Mapping) {
    let cfg = DictConfig::new().shards(4);
    let need = ShmDict::required_size(cap, cfg).unwrap();
    (cfg, need, Mapping::anonymous(need).unwrap())
}

fn ok(d: &ShmDict) -> CheckReport {
    d.check().unwrap_or_else(|e| panic!("{e}"))
}

fn bytes(d: &ShmDict, k: &str) -> Option<Vec<u8>> {
    d.get(k)
        .unwrap()
        .map(|i| i.value.as_bytes().unwrap().to_vec())
}

/// Fill `d` with live entries of the 64-byte class (64 to a page, pages filled one after
/// another, so entries `64 j .. 64 j + 64` share a page): their count.
fn fill_small(d: &ShmDict) -> usize {
    let mut n = 0;
    while d.safe_add(format!("k{n:05}"), 7i64, None, 0).is_ok() {
        n += 1;
    }
    assert_eq!(d.free_space(), 0);
    n
}

/// Fill `d` with 100-byte values under keys `k0`, `k1`, … (oldest first); how many fit.
fn fill_100(d: &ShmDict) -> usize {
    let mut n = 0;
    while d
        .safe_add(format!("k{n}"), &[0u8; 100][..], None, 0)
        .is_ok()
    {
        n += 1;
    }
    n
}
