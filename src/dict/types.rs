//! The values, results and errors of the dictionary's operations.

use core::fmt;

/// The longest key, in bytes.
pub const MAX_KEY: usize = 0xffff;

/// A value to store, or one borrowed from the zone: bytes, or an integer (what
/// [`ShmDict::incr`](crate::dict::ShmDict::incr) counts with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// A byte string.
    Bytes(&'a [u8]),
    /// A 64-bit signed integer.
    Int(i64),
}

impl<'a> Value<'a> {
    /// This value, owned.
    pub fn to_owned(&self) -> OwnedValue {
        match *self {
            Value::Bytes(b) => OwnedValue::Bytes(b.to_vec()),
            Value::Int(i) => OwnedValue::Int(i),
        }
    }
}

impl<'a> From<&'a [u8]> for Value<'a> {
    fn from(b: &'a [u8]) -> Self {
        Value::Bytes(b)
    }
}
impl<'a, const N: usize> From<&'a [u8; N]> for Value<'a> {
    fn from(b: &'a [u8; N]) -> Self {
        Value::Bytes(b)
    }
}
impl<'a> From<&'a Vec<u8>> for Value<'a> {
    fn from(b: &'a Vec<u8>) -> Self {
        Value::Bytes(b)
    }
}
impl<'a> From<&'a str> for Value<'a> {
    fn from(s: &'a str) -> Self {
        Value::Bytes(s.as_bytes())
    }
}
impl From<i64> for Value<'_> {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

/// A value copied out of the zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedValue {
    /// A byte string.
    Bytes(Vec<u8>),
    /// A 64-bit signed integer.
    Int(i64),
}

impl OwnedValue {
    /// The bytes, if it is a byte string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            OwnedValue::Bytes(b) => Some(b),
            OwnedValue::Int(_) => None,
        }
    }
    /// The integer, if it is one.
    pub fn as_int(&self) -> Option<i64> {
        match *self {
            OwnedValue::Int(i) => Some(i),
            OwnedValue::Bytes(_) => None,
        }
    }
}

/// What [`ShmDict::get`](crate::dict::ShmDict::get) and [`ShmDict::get_stale`](crate::dict::ShmDict::get_stale) return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The value.
    pub value: OwnedValue,
    /// The flags stored with it (0 if none were given).
    pub flags: u32,
    /// Whether it is expired (only [`get_stale`](crate::dict::ShmDict::get_stale) returns those).
    pub stale: bool,
}

/// What [`ShmDict::incr`](crate::dict::ShmDict::incr) returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incr {
    /// The new value.
    pub value: i64,
    /// Live entries evicted to make room (only when the key was created).
    pub evicted: u32,
}

/// Why a dictionary operation did nothing. Every failing operation leaves the dictionary as
/// it was.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DictError {
    /// No room for the entry, even after freeing what the operation may free.
    NoMemory,
    /// `add`: the key has a live entry.
    Exists,
    /// `replace`, `incr` without an initial value, `ttl`, `expire`: the key has no live
    /// entry.
    NotFound,
    /// `incr`: the value is not an integer.
    NotANumber,
    /// A list operation on a key holding a scalar, or `get`, `get_with` or `update` on a key
    /// holding a list.
    WrongType,
    /// `incr`: the sum does not fit an `i64`.
    Overflow,
    /// The key is longer than [`MAX_KEY`] (every operation on a key checks it, reads too).
    KeyTooLong {
        /// Its length.
        len: usize,
    },
    /// The entry is larger than the largest block of this zone.
    ValueTooLarge {
        /// The value's length.
        len: usize,
        /// The largest value this key may have here (what the largest block holds beside
        /// the entry's header and the key, the value padded to 8).
        max: usize,
    },
    /// The zone was written by something other than this dictionary: the operation met an
    /// impossible reference, count or record and committed nothing from there on, or
    /// [`ShmDict::check`](crate::dict::ShmDict::check) found a broken structure (described).
    Corrupt(String),
}

impl fmt::Display for DictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DictError::NoMemory => f.write_str("no memory"),
            DictError::Exists => f.write_str("exists"),
            DictError::NotFound => f.write_str("not found"),
            DictError::NotANumber => f.write_str("not a number"),
            DictError::WrongType => {
                f.write_str("wrong type: a list where a scalar was expected, or the reverse")
            }
            DictError::Overflow => f.write_str("integer overflow"),
            DictError::KeyTooLong { len } => {
                write!(f, "key of {len} bytes, at most {MAX_KEY} allowed")
            }
            DictError::ValueTooLarge { len, max } => {
                write!(f, "value of {len} bytes, at most {max} fit")
            }
            DictError::Corrupt(what) => write!(f, "dictionary corrupt: {what}"),
        }
    }
}

impl std::error::Error for DictError {}

/// Counters of a dictionary (taken under each shard's lock in turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DictStats {
    /// Entries stored, live or expired (until freed by a write, `flush_expired` or eviction).
    pub entries: u64,
    /// Bytes of the chunks they occupy.
    pub used_bytes: u64,
    /// Live entries evicted to make room, since the zone was made.
    pub evicted: u64,
    /// Committed updates of dead processes completed by others, since the zone was made.
    pub replayed: u64,
}
