//! The table and the JSON.

use crate::common::{fmt_busy, fmt_opt, fmt_round_trips, paired_ratio};
use crate::death::Death;
use crate::run::{mutex_work, Row, Run};
use crate::Config;
use std::io;
use std::path::Path;

pub fn print_table(cfg: &Config, rows: &[Row]) {
    println!();
    println!(
        "shm_locks: {} ms per run, {} round(s) with the locks alternating, {} CPUs; work = 100 × \
         (foo *= 2; foo /= 2) outside the lock; ns/op: median of the untimed runs, shares from \
         that run; vs pthread: median of the per-round ratios to pthread's ns/op (runs of one round \
         are seconds apart, so they share the vCPU placement)",
        cfg.duration.as_millis(),
        cfg.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    if cfg.timing {
        println!(
            "worst wait: from a second, timed run: longest lock() + critical section + unlock() \
             of any process, one Instant::now() per op outside the lock (≈ {} ns, subtracted)",
            cfg.clock_overhead.as_nanos()
        );
    } else {
        println!("--no-timing: no timed runs, so no worst wait");
    }
    println!("load: {}", fmt_busy(cfg.busy.0, cfg.busy.1));
    if !cfg.pin.is_empty() {
        println!(
            "--pin: child i pinned to CPU {:?}[i % {}]",
            cfg.pin,
            cfg.pin.len()
        );
    }
    println!(
        "line RT: cache-line round trip between the first two CPUs, probed before each round \
         (it moves on a VM, and contended figures move with it)"
    );
    let ns = |row: &Row| row.plain.iter().map(Run::ns_per_op).collect::<Vec<_>>();
    // The median per-round ratio of `r` to the lock `base` in the same configuration.
    let vs = |r: &Row, base: &str| {
        rows.iter()
            .find(|p| p.lock == base && p.procs == r.procs && p.work == r.work)
            .map_or_else(
                || "–".to_owned(),
                |p| format!("{:.2}", paired_ratio(&ns(r), &ns(p))),
            )
    };
    let share = |r: &Row| {
        let (min, max) = r.median().share();
        format!("{:.1}% / {:.1}%", min * 100.0, max * 100.0)
    };
    let (mutex_rows, rw_rows): (Vec<&Row>, Vec<&Row>) =
        rows.iter().partition(|r| mutex_work(r.work));
    if !mutex_rows.is_empty() {
        println!();
        println!(
            "| lock | procs | work | ns/op | vs pthread | min/max share | worst wait µs | line RT ns |"
        );
        println!("|---|---:|---|---:|---:|---:|---:|---:|");
        for r in mutex_rows {
            println!(
                "| {} | {} | {} | {:.1} | {} | {} | {} | {} |",
                r.lock,
                r.procs,
                r.work.name(),
                r.median().ns_per_op(),
                vs(r, "pthread"),
                share(r),
                fmt_opt(r.worst_wait_us(), "–"),
                fmt_round_trips(&r.round_trip_ns)
            );
        }
    }
    if !rw_rows.is_empty() {
        println!();
        println!(
            "rw: pthread-rw = glibc's default kind (prefers readers), pthread-rw-wp = \
             PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP; worst wait: any op / a write op"
        );
        println!();
        println!(
            "| lock | procs | work | ns/op | vs pthread-rw | vs pthread-rw-wp | min/max share | \
             worst wait µs (any / write) | line RT ns |"
        );
        println!("|---|---:|---|---:|---:|---:|---:|---:|---:|");
        for r in rw_rows {
            println!(
                "| {} | {} | {} | {:.1} | {} | {} | {} | {} / {} | {} |",
                r.lock,
                r.procs,
                r.work.name(),
                r.median().ns_per_op(),
                vs(r, "pthread-rw"),
                vs(r, "pthread-rw-wp"),
                share(r),
                fmt_opt(r.worst_wait_us(), "–"),
                fmt_opt(r.worst_write_us(), "–"),
                fmt_round_trips(&r.round_trip_ns)
            );
        }
    }
}

pub fn run_json(r: &Run) -> String {
    let (min, max) = r.share();
    let per: Vec<String> = r.per_proc.iter().map(u64::to_string).collect();
    format!(
        "{{\"wall_ns\": {}, \"total_ops\": {}, \"ns_per_op\": {:.2}, \"per_process_ops\": [{}], \
         \"min_share\": {:.4}, \"max_share\": {:.4}, \"worst_wait_us\": {}, \
         \"waits_over_1ms\": {}, \"writes\": {}, \"worst_write_us\": {}}}",
        r.wall_ns,
        r.total_ops,
        r.ns_per_op(),
        per.join(", "),
        min,
        max,
        fmt_opt(r.worst_wait_ns.map(|ns| ns as f64 / 1e3), "null"),
        r.waits_over_1ms
            .map_or_else(|| "null".to_owned(), |n| n.to_string()),
        r.writes,
        fmt_opt(r.worst_write_ns.map(|ns| ns as f64 / 1e3), "null"),
    )
}

pub fn write_json(cfg: &Config, rows: &[Row], deaths: &[Death], path: &Path) -> io::Result<()> {
    let mut out = String::from("{\n");
    out += &format!(
        "  \"duration_ms\": {},\n  \"rounds\": {},\n  \"cpus\": {},\n  \"timing\": {},\n  \"clock_overhead_ns\": {},\n  \"busy\": {},\n  \"busy_session\": \"{}\",\n  \"runs\": [\n",
        cfg.duration.as_millis(),
        cfg.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cfg.timing,
        cfg.clock_overhead.as_nanos(),
        cfg.busy.0,
        if cfg.busy.1 { "own" } else { "bench" }
    );
    for (i, r) in rows.iter().enumerate() {
        out += &format!(
            "    {{\"lock\": \"{}\", \"procs\": {}, \"work\": \"{}\", \"untimed_ns_per_op\": [{}], \
             \"line_round_trip_ns\": [{}], \"untimed\": {}, \"timed\": {}}}{}\n",
            r.lock,
            r.procs,
            r.work.name(),
            r.plain
                .iter()
                .map(|r| format!("{:.2}", r.ns_per_op()))
                .collect::<Vec<_>>()
                .join(", "),
            r.round_trip_ns
                .iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            run_json(r.median()),
            r.timed.as_ref().map_or_else(|| "null".to_owned(), run_json),
            if i + 1 < rows.len() { "," } else { "" }
        );
    }
    out += "  ],\n  \"reader_death\": [\n";
    for (i, d) in deaths.iter().enumerate() {
        out += &format!(
            "    {{\"lock\": \"{}\", \"cap_ms\": {}, \"writer_delay_ms\": [{}]}}{}\n",
            d.lock,
            d.cap.as_millis(),
            d.delays
                .iter()
                .map(|x| fmt_opt(x.map(|x| x.as_secs_f64() * 1e3), "null"))
                .collect::<Vec<_>>()
                .join(", "),
            if i + 1 < deaths.len() { "," } else { "" }
        );
    }
    out += "  ]\n}\n";
    std::fs::write(path, out)
}
