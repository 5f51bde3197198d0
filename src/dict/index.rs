//! The index: open hashing over a fixed array of buckets. A bucket holds the reference of the
//! first entry of its chain, each entry the reference of the next (`E_HNEXT`); references are
//! offsets / 16, never pointers, so every process may map the region anywhere. The hash is
//! seeded per region (a random seed in the header, the same for every process), so keys
//! chosen by clients cannot be aimed at one chain.

use super::layout::*;
use super::redo::ZoneTx;

/// The offset an entry reference names (at most [`FAR`], where a reference from a damaged
/// zone that a 32-bit process cannot address is clamped; never in a 64-bit one).
#[inline]
pub(crate) fn off(r: u32) -> usize {
    usize::try_from(u64::from(r) * 16).map_or(FAR, |o| o.min(FAR))
}

/// The reference of the entry at `off`.
#[inline]
pub(crate) fn reference(off: usize) -> u32 {
    (off / 16) as u32
}

/// A 64-bit hash of `key` (multiply–xorshift over 8-byte words, murmur3's finaliser).
pub(crate) fn hash(seed: u64, key: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(K);
    let mut words = key.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().unwrap());
        h = (h ^ w).wrapping_mul(K).rotate_left(31);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        h = (h ^ tail(rest)).wrapping_mul(K).rotate_left(31);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The last 1 to 7 bytes of a key as the little-endian u64 they and zeros make (what a copy
/// into a zeroed `[u8; 8]` gives), with at most two overlapping loads of 4 bytes or of 1 to 3:
/// no call to `memcpy` for a key's tail.
#[inline]
pub(crate) fn tail(b: &[u8]) -> u64 {
    let n = b.len();
    let lo4 = |i: usize| u64::from(u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]));
    if n >= 4 {
        // The first 4 bytes and the last 4 (overlapping when n < 8), the last shifted to
        // where they belong; the overlap holds the same bytes in both.
        lo4(0) | lo4(n - 4) << (8 * (n - 4))
    } else {
        // 1 to 3 bytes: the first, the middle and the last (some the same byte).
        u64::from(b[0])
            | u64::from(b[n / 2]) << (8 * (n / 2))
            | u64::from(b[n - 1]) << (8 * (n - 1))
    }
}

/// Offset of the bucket word for `hash`.
#[inline]
pub(crate) fn bucket(g: &Geometry, hash: u32) -> usize {
    g.buckets_off + 4 * (hash & (g.nbuckets - 1)) as usize
}

/// Key length and value kind of entry `e`.
#[inline]
pub(crate) fn klen_kind(tx: &impl Words, e: usize) -> (usize, u32) {
    let w = tx.r32(e + E_KEYLEN_KIND);
    ((w & 0xffff) as usize, w >> 16)
}

/// The key of entry `e`.
pub(crate) fn key_of(tx: &impl Words, e: usize) -> &[u8] {
    let (klen, _) = klen_kind(tx, e);
    let vlen = tx.r32(e + E_VLEN) as usize;
    tx.mem().bytes(key_off(e, vlen), klen)
}

/// Where `key` is: `(entry offset, offset of the word that links to it)`.
#[inline]
pub(crate) fn find(tx: &impl Words, g: &Geometry, key: &[u8], hash: u32) -> Option<(usize, usize)> {
    let mut link = bucket(g, hash);
    let mut r = tx.r32(link);
    // A chain is never longer than the number of entries: bound the walk (a corrupt cycle
    // would otherwise spin for ever under the lock).
    let mut left = tx.r64(H_COUNT).min(g.max_entries()) + 1;
    while r != 0 && left > 0 {
        let e = off(r);
        if tx.r32(e + E_HASH) == hash && key_of(tx, e) == key {
            return Some((e, link));
        }
        link = e + E_HNEXT;
        r = tx.r32(link);
        left -= 1;
    }
    None
}

/// Link the new entry `e` at the head of its bucket's chain.
pub(crate) fn link(tx: &mut ZoneTx<'_>, g: &Geometry, e: usize, hash: u32) {
    let b = bucket(g, hash);
    let head = tx.r32(b);
    tx.w32(e + E_HNEXT, head);
    tx.w32(b, reference(e));
}

/// Put the new entry `new` where `old` is in its chain (same key, so same bucket).
pub(crate) fn swap(tx: &mut ZoneTx<'_>, link: usize, old: usize, new: usize) {
    let next = tx.r32(old + E_HNEXT);
    tx.w32(new + E_HNEXT, next);
    tx.w32(link, reference(new));
}

/// Remove `e` (linked from `link`) from its chain.
pub(crate) fn unlink(tx: &mut ZoneTx<'_>, link: usize, e: usize) {
    let next = tx.r32(e + E_HNEXT);
    tx.w32(link, next);
}

/// The word that links to entry `e` (for an entry found by another route, e.g. the LRU list).
pub(crate) fn link_of(tx: &impl Words, g: &Geometry, e: usize) -> Option<usize> {
    let mut link = bucket(g, tx.r32(e + E_HASH));
    let mut left = tx.r64(H_COUNT).min(g.max_entries()) + 1;
    loop {
        let r = tx.r32(link);
        if r == 0 || left == 0 {
            return None;
        }
        if off(r) == e {
            return Some(link);
        }
        link = off(r) + E_HNEXT;
        left -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_depends_on_seed_and_every_byte() {
        let a = hash(1, b"client:10.0.0.1");
        assert_eq!(a, hash(1, b"client:10.0.0.1"));
        assert_ne!(a, hash(2, b"client:10.0.0.1"));
        assert_ne!(a, hash(1, b"client:10.0.0.2"));
        assert_ne!(hash(1, b""), hash(1, b"\0"));
        assert_ne!(hash(1, b"12345678"), hash(1, b"123456789"));
    }

    #[test]
    fn a_tail_is_its_bytes_and_zeros() {
        for n in 1..8 {
            let b: Vec<u8> = (1..=n as u8).map(|i| i * 37).collect();
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(&b);
            assert_eq!(tail(&b), u64::from_le_bytes(w), "{n} bytes");
        }
    }
}
