//! Writing the profile: the sampled stacks symbolised (function, file, line, inlined frames),
//! the lock's own frames cut from the top, then as pprof's `profile.proto` or as text.

use super::event::{Counts, TABLE};
use super::proto;
use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::PoisonError;

/// One source-level frame: a function, maybe inlined into the next one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Frame {
    /// Demangled name without the hash, or the address when unknown.
    pub(crate) name: String,
    /// The symbol as linked (mangled).
    pub(crate) system_name: String,
    /// Source file ("" when the binary has no line tables).
    pub(crate) file: String,
    /// Line (0 when unknown).
    pub(crate) line: u32,
}

/// A return address and its frames, innermost first.
#[derive(Debug, Clone)]
pub(crate) struct Loc {
    pub(crate) address: usize,
    pub(crate) frames: Vec<Frame>,
}

/// This crate's source directory as DWARF line tables name it.
const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");

/// Whether `f` is in this crate's source file `rel` (a path under `src/`, or a directory
/// ending in `/`).
fn in_our(f: &Frame, rel: &str) -> bool {
    f.file.strip_prefix(SRC).is_some_and(|r| {
        if rel.ends_with('/') {
            r.starts_with(rel)
        } else {
            r == rel
        }
    })
}

/// Frames of the machinery that takes the sample, cut from the top of every stack so that the
/// leaf is the lock's public unlock (as Go's profile ends in `sync.(*Mutex).Unlock`): the
/// unwinder, this module, the wait queue and the algorithm. By name (symbol table names have
/// paths, also as `<T as Trait>::f`) or, for line tables' bare names, by file.
fn is_internal(f: &Frame) -> bool {
    let name = f.name.as_str();
    name.starts_with("backtrace::")
        || name.starts_with("_Unwind_")
        || ["gomutex::profile::", "gomutex::sema::", "gomutex::algo::"]
            .iter()
            .any(|m| name.contains(m))
        || ["profile/", "sema.rs", "algo.rs"]
            .iter()
            .any(|r| in_our(f, r))
        || f.file.contains("/backtrace-0.")
}

/// Frames at `ip`, innermost first (one frame naming the address if nothing is known).
fn resolve(ip: usize) -> Vec<Frame> {
    let mut frames = Vec::new();
    backtrace::resolve(ip as *mut core::ffi::c_void, |s| {
        let (name, system_name) = match s.name() {
            Some(n) => (
                format!("{n:#}"),
                String::from_utf8_lossy(n.as_bytes()).into_owned(),
            ),
            None => (format!("{ip:#x}"), String::new()),
        };
        frames.push(Frame {
            name,
            system_name,
            file: s
                .filename()
                .map(|f| f.display().to_string())
                .unwrap_or_default(),
            line: s.lineno().unwrap_or(0),
        });
    });
    if frames.is_empty() {
        frames.push(Frame {
            name: format!("{ip:#x}"),
            system_name: String::new(),
            file: String::new(),
            line: 0,
        });
    }
    frames
}

/// The profile so far: each sampled stack symbolised and cut (leaf first), with its counts.
/// Stacks that are the same once cut are merged.
pub(crate) fn stacks() -> Vec<(Vec<Loc>, Counts)> {
    // Copy the table out: symbolising is slow and must not block the locks that record.
    let raw: Vec<(Box<[usize]>, Counts)> = TABLE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let mut cache: HashMap<usize, Vec<Frame>> = HashMap::new();
    let mut merged: Vec<(Vec<Loc>, Counts)> = Vec::new();
    let mut index: HashMap<Vec<(usize, usize)>, usize> = HashMap::new();
    for (ips, counts) in raw {
        let mut locs = Vec::with_capacity(ips.len());
        let mut cutting = true;
        for &ip in ips.iter() {
            let mut frames = cache.entry(ip).or_insert_with(|| resolve(ip)).clone();
            if cutting {
                let keep = frames.iter().position(|f| !is_internal(f));
                match keep {
                    Some(i) => {
                        frames.drain(..i);
                        cutting = false;
                    }
                    None => continue,
                }
            }
            locs.push(Loc {
                address: ip,
                frames,
            });
        }
        let key: Vec<(usize, usize)> = locs.iter().map(|l| (l.address, l.frames.len())).collect();
        match index.get(&key) {
            Some(&i) => {
                let c = &mut merged[i].1;
                c.events += counts.events;
                c.delay = c.delay.saturating_add(counts.delay);
                c.contentions = c.contentions.saturating_add(counts.contentions);
                c.scaled_delay = c.scaled_delay.saturating_add(counts.scaled_delay);
            }
            None => {
                index.insert(key, merged.len());
                merged.push((locs, counts));
            }
        }
    }
    merged.sort_by_key(|s| std::cmp::Reverse(s.1.scaled_delay));
    merged
}

/// Strings of a profile, deduplicated; index 0 is `""`.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }
    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// The profile as pprof's message, values scaled to estimates of all events (Go's
/// `scaleMutexProfile`), period = the current rate.
pub(crate) fn build(rate: u32) -> proto::Profile {
    let mut s = Strings::new();
    let vt = |s: &mut Strings, t: &str, u: &str| proto::ValueType {
        r#type: s.id(t),
        unit: s.id(u),
    };
    let sample_type = vec![
        vt(&mut s, "contentions", "count"),
        vt(&mut s, "delay", "nanoseconds"),
    ];
    let period_type = Some(vt(&mut s, "contentions", "count"));
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mapping = vec![proto::Mapping {
        id: 1,
        memory_start: 0,
        memory_limit: u64::MAX,
        file_offset: 0,
        filename: s.id(&exe),
        build_id: 0,
        has_functions: true,
        has_filenames: true,
        has_line_numbers: true,
        has_inline_frames: true,
    }];
    let mut functions: Vec<proto::Function> = Vec::new();
    let mut function_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut locations: Vec<proto::Location> = Vec::new();
    let mut location_ids: HashMap<(usize, usize), u64> = HashMap::new();
    let mut samples = Vec::new();
    for (locs, counts) in stacks() {
        let mut ids = Vec::with_capacity(locs.len());
        for loc in &locs {
            let key = (loc.address, loc.frames.len());
            let id = match location_ids.get(&key) {
                Some(&id) => id,
                None => {
                    let line = loc
                        .frames
                        .iter()
                        .map(|f| {
                            let fkey = (f.name.clone(), f.file.clone());
                            let function_id = match function_ids.get(&fkey) {
                                Some(&id) => id,
                                None => {
                                    let id = functions.len() as u64 + 1;
                                    functions.push(proto::Function {
                                        id,
                                        name: s.id(&f.name),
                                        system_name: s.id(&f.system_name),
                                        filename: s.id(&f.file),
                                        start_line: 0,
                                    });
                                    function_ids.insert(fkey, id);
                                    id
                                }
                            };
                            proto::Line {
                                function_id,
                                line: f.line.into(),
                            }
                        })
                        .collect();
                    let id = locations.len() as u64 + 1;
                    locations.push(proto::Location {
                        id,
                        mapping_id: 1,
                        address: loc.address as u64,
                        line,
                    });
                    location_ids.insert(key, id);
                    id
                }
            };
            ids.push(id);
        }
        samples.push(proto::Sample {
            location_id: ids,
            value: vec![
                i64::try_from(counts.contentions).unwrap_or(i64::MAX),
                i64::try_from(counts.scaled_delay).unwrap_or(i64::MAX),
            ],
        });
    }
    let time_nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    proto::Profile {
        sample_type,
        sample: samples,
        mapping,
        location: locations,
        function: functions,
        string_table: s.table,
        time_nanos,
        period_type,
        period: rate.into(),
        ..Default::default()
    }
}

/// Whether a frame is the lock's own (its public API, or the guard's drop glue): the call site
/// is the first frame below them.
fn is_lock_api(f: &Frame) -> bool {
    let name = f.name.as_str();
    name.starts_with("gomutex::")
        || name.starts_with("<gomutex::")
        || name.starts_with("core::ptr::drop_in_place<")
        || name.starts_with("drop_in_place<")
        || name.starts_with("core::mem::drop<")
        || name.starts_with("lock_api::")
        || name.starts_with("<lock_api::")
        || f.file.starts_with(SRC)
        || f.file.contains("/lock_api-0.")
        || f.file.ends_with("/core/src/ptr/mod.rs")
        || f.file.ends_with("/core/src/mem/mod.rs")
}

/// The call site of a stack: the first frame outside the lock, as `name (file:line)`.
fn call_site(locs: &[Loc]) -> String {
    let frame = locs
        .iter()
        .flat_map(|l| &l.frames)
        .find(|f| !is_lock_api(f))
        .or_else(|| locs.first().and_then(|l| l.frames.first()));
    match frame {
        None => "(no stack)".to_owned(),
        Some(f) if f.file.is_empty() => f.name.clone(),
        Some(f) => format!("{} ({}:{})", f.name, f.file, f.line),
    }
}

/// Nanoseconds in a readable unit.
fn fmt_ns(ns: u64) -> String {
    let x = ns as f64;
    if x >= 1e9 {
        format!("{:.2} s", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2} ms", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.2} µs", x / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// The text summary: call sites by estimated delay, most first.
pub(crate) fn text(w: &mut dyn Write, rate: u32, top: usize) -> io::Result<()> {
    let mut sites: Vec<(String, Counts)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (locs, c) in stacks() {
        let site = call_site(&locs);
        let i = *index.entry(site.clone()).or_insert_with(|| {
            sites.push((site, Counts::default()));
            sites.len() - 1
        });
        let t = &mut sites[i].1;
        t.events += c.events;
        t.contentions = t.contentions.saturating_add(c.contentions);
        t.scaled_delay = t.scaled_delay.saturating_add(c.scaled_delay);
    }
    sites.sort_by_key(|s| std::cmp::Reverse(s.1.scaled_delay));
    let total: u64 = sites.iter().map(|s| s.1.scaled_delay).sum();
    let events: u64 = sites.iter().map(|s| s.1.events).sum();
    let rate_text = match rate {
        0 => "off".to_owned(),
        1 => "every contended release".to_owned(),
        n => format!("1 in {n} contended releases"),
    };
    writeln!(
        w,
        "mutex profile: sampling {rate_text}; {events} sampled, {} estimated delay",
        fmt_ns(total)
    )?;
    writeln!(
        w,
        "{:>12} {:>6} {:>12}  call site (the releaser)",
        "delay", "%", "contentions"
    )?;
    for (site, c) in sites.iter().take(top) {
        let pct = if total == 0 {
            0.0
        } else {
            100.0 * c.scaled_delay as f64 / total as f64
        };
        writeln!(
            w,
            "{:>12} {:>5.1}% {:>12}  {site}",
            fmt_ns(c.scaled_delay),
            pct,
            c.contentions
        )?;
    }
    if sites.len() > top {
        writeln!(w, "({} more call sites)", sites.len() - top)?;
    }
    Ok(())
}
